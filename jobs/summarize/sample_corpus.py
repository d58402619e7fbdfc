"""A small, real corpus that ships with Python itself: the help topics of `pydoc_data.topics`.

They are the reference manual's own sections (human-written, under the PSF license, installed
with every Python), from a few hundred tokens to over ten thousand; the long ones exceed the
short pool's 2048-token context and go through chunking. Built, not copied: the same Python
gives the same corpus, in the same order.

    python -m jobs.summarize.sample_corpus --out build/sample/corpus.jsonl [--count 12]
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
    source = f"pydoc_data.topics (Python {platform.python_version()})"
    return [
        {"id": f"python-docs/{name}", "text": topics[name].strip(), "metadata": {"source": source, "topic": name}}
        for name in chosen
    ]


def write_sample(path: Path, count: int | None = None, long_count: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sample_documents(count, long_count)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the JSONL file to write")
    parser.add_argument("--count", type=int, help="documents in all (default: every topic listed)")
    parser.add_argument("--long", type=int, help="of which long ones (default: all three)")
    args = parser.parse_args(argv)
    path = write_sample(Path(args.out), args.count, args.long)
    print(f"{len(sample_documents(args.count, args.long))} documents written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
