"""A small, real corpus that ships with Python itself: the help topics of `pydoc_data.topics`.

They are the reference manual's own sections (human-written, under the PSF license, installed
with every Python), from a few hundred tokens to over ten thousand; the long ones exceed the
short pool's 2048-token context and go through chunking. Built, not copied: the same Python
gives the same corpus, in the same order.

    python -m jobs.summarize.sample_corpus --out build/sample/corpus.jsonl [--count 12 | --every-topic]

`--every-topic` writes all of them (79 on Python 3.11, about 113,000 tokens with SmolLM2's
tokenizer): enough work to keep a batch job busy for minutes, as the co-location benchmark needs.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

# Chosen by hand to span the lengths: most fit one request, the last few need chunking
# (tokens with SmolLM2's tokenizer on Python 3.11 in brackets).
SHORT_TOPICS = (
    "pass",            # [97]
    "lambda",          # [111]
    "assert",          # [259]
    "while",           # [169]
    "if",              # [140]
    "global",          # [351]
    "exceptions",      # [488]
    "with",            # [823]
    "truth",           # [247]
)
LONG_TOPICS = (
    "import",          # [2060]
    "assignment",      # [2571]
    "debugger",        # [5227]
)


def sample_documents(count: int | None = None, long_count: int | None = None) -> list[dict]:
    """`count` documents (default all), of which the last `long_count` are the long ones.
    Topics a Python lacks are left out rather than replaced, so the set stays predictable."""
    from pydoc_data.topics import topics

    long_topics = LONG_TOPICS[: len(LONG_TOPICS) if long_count is None else long_count]
    short_count = len(SHORT_TOPICS) if count is None else max(0, count - len(long_topics))
    chosen = [name for name in SHORT_TOPICS[:short_count] + long_topics if name in topics]
    return [_document(name, topics[name]) for name in chosen]


def every_topic_documents(copies: int = 1) -> list[dict]:
    """Every help topic this Python has, in name order; `copies` > 1 repeats them under ids of
    their own (`python-docs/<topic>#<k>`), for a load that keeps a GPU busy."""
    from pydoc_data.topics import topics

    if copies == 1:
        return [_document(name, topics[name]) for name in sorted(topics)]
    return [_document(name, topics[name], f"#{k}") for k in range(copies) for name in sorted(topics)]


def _document(name: str, text: str, suffix: str = "") -> dict:
    source = f"pydoc_data.topics (Python {platform.python_version()})"
    return {"id": f"python-docs/{name}{suffix}", "text": text.strip(), "metadata": {"source": source, "topic": name}}


def write_sample(path: Path, count: int | None = None, long_count: int | None = None, *,
                 every_topic: bool = False, copies: int = 1) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = every_topic_documents(copies) if every_topic else sample_documents(count, long_count)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--count", type=int, help="documents in all (default: every topic listed)")
    parser.add_argument("--long", type=int, help="of which long ones (default: all three)")
    parser.add_argument("--every-topic", action="store_true", help="every help topic instead of the chosen few")
    args = parser.parse_args(argv)
    if args.every_topic and (args.count is not None or args.long is not None):
        parser.error("--every-topic takes every topic; leave out --count and --long")
    path = write_sample(Path(args.out), args.count, args.long, every_topic=args.every_topic)
    print(f"{len(path.read_text(encoding='utf-8').splitlines())} documents written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
