"""The messages the job sends: a document or chunk to summarize, or summaries to combine."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.summarize.config import TEXT_PLACEHOLDER, PromptConfig

Messages = list[dict[str, str]]
SUMMARY_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Prompts:
    system: str | None
    template: str
    combine_template: str

    @classmethod
    def from_config(cls, config: PromptConfig) -> Prompts:
        return cls(config.system, config.template, config.combine_template)

    def summarize(self, text: str) -> Messages:
        return self._messages(self.template, text)

    def combine(self, summaries: list[str]) -> Messages:
        return self._messages(self.combine_template, SUMMARY_SEPARATOR.join(s.strip() for s in summaries))

    def _messages(self, template: str, text: str) -> Messages:
        # replace, not format: documents and templates may hold braces of their own.
        messages = [{"role": "user", "content": template.replace(TEXT_PLACEHOLDER, text)}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        return messages
