"""The index of bench/results/: one row per study folder, read from the study's README.

    python -m bench.results_index            # writes bench/results/README.md
    python -m bench.results_index --check    # exits 1 if that file is not what the READMEs give

A study's README opens with `# Title` and a line `Date: YYYY-MM-DD`, and has the sections
`## Question`, `## Command`, `## Result` and `## Conclusion` (others may follow). The index takes
the date, the Question's first paragraph and the Result's first paragraph, which is therefore a
sentence, not a table or a code block. The index is generated so that it cannot drift from the
studies; CI runs the check (tests/unit/bench/test_results_index.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

RESULTS_DIR = Path("bench/results")
INDEX_NAME = "README.md"
REQUIRED_SECTIONS = ("Question", "Command", "Result", "Conclusion")
_DATE = re.compile(r"^Date: (\d{4}-\d{2}-\d{2})\b")
# A relative link in a study's README is relative to its folder; in the index it is not.
_RELATIVE_LINK = re.compile(r"\]\((?![a-z]+:|#|/)([^)\s]+)\)")


class ResultsIndexError(ValueError):
    """A study folder the index cannot be made from; the message names the file and what is missing."""


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    date: str
    question: str
    result: str


def _sections(lines: list[str]) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    fenced = False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def _first_paragraph(lines: list[str]) -> str:
    paragraph: list[str] = []
    for line in lines:
        if line.strip():
            paragraph.append(line.strip())
        elif paragraph:
            break
    return " ".join(paragraph)


def read_study(readme: Path) -> Study:
    lines = readme.read_text().splitlines()
    titles = [line[2:].strip() for line in lines if line.startswith("# ")]
    if not titles:
        raise ResultsIndexError(f"{readme}: no '# Title' line")
    dates = [m.group(1) for m in map(_DATE.match, lines) if m]
    if not dates:
        raise ResultsIndexError(f"{readme}: no 'Date: YYYY-MM-DD' line")
    sections = _sections(lines)
    for name in REQUIRED_SECTIONS:
        if name not in sections:
            raise ResultsIndexError(f"{readme}: no '## {name}' heading")
    question = _first_paragraph(sections["Question"])
    result = _first_paragraph(sections["Result"])
    for name, text in (("Question", question), ("Result", result)):
        if not text:
            raise ResultsIndexError(f"{readme}: '## {name}' is empty")
        if text.startswith(("|", "```", "<")):
            raise ResultsIndexError(f"{readme}: '## {name}' must open with a sentence, not a table or a block")
    return Study(readme.parent.name, titles[0], dates[0], question, result)


def read_studies(root: Path) -> list[Study]:
    """Every folder under root is a study and needs its README; newest first, then by name."""
    studies = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        readme = folder / "README.md"
        if not readme.is_file():
            raise ResultsIndexError(f"{folder}: a study folder without README.md")
        studies.append(read_study(readme))
    return sorted(studies, key=lambda s: (-int(s.date.replace("-", "")), s.name))


def _cell(text: str, folder: str) -> str:
    text = _RELATIVE_LINK.sub(lambda m: f"]({folder}/{m.group(1)})", text)
    return text.replace("|", "\\|")


def render_index(studies: list[Study]) -> str:
    rows = [f"| [{s.name}]({s.name}/README.md) | {s.date} | {_cell(s.question, s.name)} | "
            f"{_cell(s.result, s.name)} |" for s in studies]
    return "\n".join([
        "# Benchmark results",
        "",
        "One folder per study, each with a README: the question, the command, the result and the",
        "conclusion, and the result files the command wrote (each holds the command that made it).",
        "How to run and read each command: [docs/benchmarks.md](../../docs/benchmarks.md); the current",
        "figures: [docs/results.md](../../docs/results.md).",
        "",
        "This index is generated from the studies' READMEs (`python -m bench.results_index`, or",
        "`make results-index`); edit those, not this file.",
        "",
        "| study | date | question | result |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.results_index", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=RESULTS_DIR, help="the results folder")
    parser.add_argument("--check", action="store_true", help="exit 1 if the index is not up to date")
    args = parser.parse_args(argv)
    try:
        text = render_index(read_studies(args.root))
    except ResultsIndexError as exc:
        print(exc, file=sys.stderr)
        return 2
    index = args.root / INDEX_NAME
    if args.check:
        if not index.is_file() or index.read_text() != text:
            print(f"{index} is stale: run `python -m bench.results_index`", file=sys.stderr)
            return 1
        return 0
    index.write_text(text)
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
