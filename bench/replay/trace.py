"""Request traces (Azure, Mooncake, our plain JSONL) read into requests, and windows of them scheduled.

One request a row, in one of three formats:

- ``azure``: the Azure LLM inference traces' CSV, header ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (any case, other columns ignored). TIMESTAMP is a date like ``2023-11-16 18:15:46.6805900``, read
  exactly (datetime would drop the 7th fractional digit), or a number of seconds.
- ``mooncake``: ``{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}``:
  milliseconds, and one hash id per 512-token block of the prompt, equal ids for equal blocks.
- ``jsonl``: ours, ``{"at_s": 0.5, "prompt_tokens": 100, "output_tokens": 20}`` with optional
  ``"scenario": "chat"`` and ``"prefix_blocks": [3, 7]`` (ids as Mooncake's); another key is an error.

Blank lines are skipped; times are rebased so the first request is at 0.0. An output of 0 tokens in
a public trace (azure, mooncake) reads as 1: an engine cannot be asked for none, and a real trace
should replay whole (none of the published files has one). Ours needs at least 1.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

FORMATS = ("azure", "mooncake", "jsonl")
MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's trace README: a hash id stands for 512 tokens
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PLAIN_KEYS = ("at_s", "prompt_tokens", "output_tokens", "scenario", "prefix_blocks")
LONG_PROMPT_TOKENS = 1000


@dataclass(frozen=True)
class TracedRequest:
    line: int  # 1-based line in the file, so errors and reports point at the row
    at_s: float  # seconds since the trace's first request
    prompt_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] = ()  # equal leading ids: a shared prompt prefix
    scenario: str | None = None  # only the plain JSONL format sets one


@dataclass(frozen=True)
class TraceSummary:
    requests: int
    span_s: float
    rate_rps: float | None  # requests over the span; None for a trace of one instant
    prompt_tokens: tuple[int, int, int]  # p50, p99, max
    output_tokens: tuple[int, int, int]  # p50, p99, max
    long_prompt_share: float  # prompts over LONG_PROMPT_TOKENS
    # None without prefix blocks. Hash ids chain (an id stands for its block and all before it),
    # so a first block is only ever shared as a first block; all blocks seen before bound what a
    # prefix cache could reuse.
    shared_first_block_share: float | None
    reused_block_share: float | None

    def text(self) -> str:
        rate = f"{self.rate_rps:.2f} req/s" if self.rate_rps is not None else "all at once"
        lines = [f"{self.requests} requests over {self.span_s:.1f} s ({rate})",
                 "prompt tokens p50 {}, p99 {}, max {}".format(*self.prompt_tokens)
                 + f"; {self.long_prompt_share:.0%} over {LONG_PROMPT_TOKENS:,}",
                 "output tokens p50 {}, p99 {}, max {}".format(*self.output_tokens)]
        if self.shared_first_block_share is not None:
            lines.append(f"{self.shared_first_block_share:.0%} share their first prefix block with an earlier "
                         f"request; {self.reused_block_share:.0%} of prefix blocks were seen before")
        return "\n".join(lines)


@dataclass(frozen=True)
class Trace:
    requests: list[TracedRequest]  # by at_s (stable), the first at 0.0
    format: str  # one of FORMATS
    source: str  # the path as given
    block_size: int  # tokens per prefix block: 512 for mooncake, 0 where the trace says none

    @property
    def span_s(self) -> float:
        return self.requests[-1].at_s

    def describe(self) -> TraceSummary:
        prompts = sorted(r.prompt_tokens for r in self.requests)
        outputs = sorted(r.output_tokens for r in self.requests)
        count, span = len(self.requests), self.span_s
        firsts, seen, shared, reused, blocks = set(), set(), 0, 0, 0
        for request in self.requests:
            if request.prefix_blocks:
                shared += request.prefix_blocks[0] in firsts
                firsts.add(request.prefix_blocks[0])
            reused += sum(block in seen for block in request.prefix_blocks)
            blocks += len(request.prefix_blocks)
            seen.update(request.prefix_blocks)
        return TraceSummary(
            count, span, count / span if span > 0 else None,
            (_percentile(prompts, 0.5), _percentile(prompts, 0.99), prompts[-1]),
            (_percentile(outputs, 0.5), _percentile(outputs, 0.99), outputs[-1]),
            sum(p > LONG_PROMPT_TOKENS for p in prompts) / count,
            shared / count if blocks else None, reused / blocks if blocks else None,
        )


class TraceFormatError(ValueError):
    """A trace that cannot be read: ``<path>:<line>: <reason>``, without the line for the whole file."""

    def __init__(self, source: str, reason: str, line: int | None = None) -> None:
        super().__init__(f"{source}:{line}: {reason}" if line is not None else f"{source}: {reason}")
        self.source, self.reason, self.line = source, reason, line


class _BadRow(Exception):
    """A row's fault; the reader adds the path and line."""


def read_trace(path: str | Path, fmt: str = "auto") -> Trace:
    """The requests of a trace file; ``fmt`` is one of FORMATS or "auto" (by extension and keys)."""
    source = str(path)
    if fmt != "auto" and fmt not in FORMATS:
        raise ValueError(f"trace format is {fmt!r}; use auto, {', '.join(FORMATS)}")
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: a CSV saved by Excel starts with a BOM
    except UnicodeDecodeError:
        raise TraceFormatError(source, "not UTF-8 text") from None
    except OSError as error:
        raise TraceFormatError(source, f"cannot read it: {error.strerror or error}") from None
    fmt = _detect(source, text) if fmt == "auto" else fmt
    azure = _AzureRow()  # learns from the first row whether the file has dates or seconds
    numbered = _csv_rows(source, text) if fmt == "azure" else _json_rows(source, text)
    parse = {"azure": azure, "mooncake": _mooncake_row, "jsonl": _plain_row}[fmt]
    rows = []
    for line, raw in numbered:
        try:
            rows.append((line, *parse(raw)))
        except _BadRow as bad:
            raise TraceFormatError(source, str(bad), line) from None
    if not rows:
        raise TraceFormatError(source, "holds no request")
    per_second = {"azure": azure.per_second, "mooncake": 1000.0, "jsonl": 1.0}[fmt]
    first = min(row[1] for row in rows)  # subtracted in the row's own unit: exact for integers
    requests = [TracedRequest(line, (at - first) / per_second, *rest) for line, at, *rest in rows]
    requests.sort(key=lambda request: request.at_s)
    return Trace(requests, fmt, source, MOONCAKE_BLOCK_TOKENS if fmt == "mooncake" else 0)


def _detect(source: str, text: str) -> str:
    suffix = Path(source).suffix.lower()
    if suffix == ".csv":
        return "azure"
    if suffix not in (".jsonl", ".json"):
        raise TraceFormatError(source, f"cannot tell the format from the name; give one of {', '.join(FORMATS)}")
    for line, row in _json_rows(source, text):
        if "input_length" in row or "prompt_tokens" in row:
            return "mooncake" if "input_length" in row else "jsonl"
        raise TraceFormatError(source, "has neither input_length (mooncake) nor prompt_tokens (jsonl); "
                                       "give the format", line)
    raise TraceFormatError(source, "holds no request")


def _json_rows(source: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    # split("\n"), not splitlines(): JSON strings may hold U+2028, which would shift line numbers.
    for line, raw in enumerate(text.split("\n"), 1):
        if raw.strip():
            try:
                row = json.loads(raw)
            except ValueError as error:
                raise TraceFormatError(source, f"not JSON: {error}", line) from None
            if not isinstance(row, dict):
                raise TraceFormatError(source, f"not a JSON object: {raw.strip()[:60]}", line)
            yield line, row


def _csv_rows(source: str, text: str) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    names = [name.strip().lower() for name in next(reader, [])]
    missing = [column for column in AZURE_COLUMNS if column.lower() not in names]
    if missing:
        raise TraceFormatError(source, f"the CSV header lacks {', '.join(missing)} (needs {','.join(AZURE_COLUMNS)})")
    at = [names.index(column.lower()) for column in AZURE_COLUMNS]
    for cells in reader:
        if any(cell.strip() for cell in cells):
            if len(cells) <= max(at):
                raise TraceFormatError(source, f"{len(cells)} columns, the header {len(names)}", reader.line_num)
            yield reader.line_num, [cells[i] for i in at]


class _AzureRow:
    """Rows of dates, or of seconds, as the first row has it; a date as integer nanoseconds."""

    def __init__(self) -> None:
        self.per_second: float | None = None

    def __call__(self, cells: list[str]) -> tuple[Any, ...]:
        stamp = cells[0].strip()
        if self.per_second is None:
            self.per_second = 1e9 if _number(stamp) is None else 1.0
        at = _seconds("TIMESTAMP", stamp) if self.per_second == 1.0 else _date_ns(stamp)
        return at, _whole("ContextTokens", cells[1], 1), max(1, _whole("GeneratedTokens", cells[2], 0)), (), None


def _mooncake_row(row: dict[str, Any]) -> tuple[Any, ...]:
    return (_seconds("timestamp", _get(row, "timestamp")), _whole("input_length", _get(row, "input_length"), 1),
            max(1, _whole("output_length", _get(row, "output_length"), 0)), _blocks("hash_ids", _get(row, "hash_ids")),
            None)


def _plain_row(row: dict[str, Any]) -> tuple[Any, ...]:
    unknown = sorted(set(row) - set(PLAIN_KEYS))
    if unknown:
        raise _BadRow(f"unknown key {unknown[0]!r}; the keys are {', '.join(PLAIN_KEYS)}")
    scenario = row.get("scenario")
    if scenario is not None and not isinstance(scenario, str):
        raise _BadRow(f"scenario is {scenario!r}, not a string")
    return (_seconds("at_s", _get(row, "at_s")), _whole("prompt_tokens", _get(row, "prompt_tokens"), 1),
            _whole("output_tokens", _get(row, "output_tokens"), 1),
            _blocks("prefix_blocks", row.get("prefix_blocks", [])), scenario)


def _get(row: dict[str, Any], key: str) -> Any:
    if key not in row:
        raise _BadRow(f"missing key {key!r}")
    return row[key]


def _blocks(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(item) is int for item in value):
        raise _BadRow(f"{name} is {str(value)[:60]}, not a list of whole numbers")
    return tuple(value)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _whole(name: str, value: Any, minimum: int) -> int:
    number = value
    if isinstance(value, str):
        number = _number(value)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if type(number) is not int:
        raise _BadRow(f"{name} is {value!r}, not a whole number")
    if number < minimum:
        raise _BadRow(f"{name} is {number}, {'negative' if number < 0 else f'less than {minimum}'}")
    return number


def _seconds(name: str, value: Any) -> float:
    number = _number(value) if isinstance(value, str) else value
    if type(number) not in (int, float) or not math.isfinite(number):
        raise _BadRow(f"{name} is {value!r}, not a number")
    if number < 0:
        raise _BadRow(f"{name} is {number}, negative")
    return number


def _date_ns(stamp: str) -> int:
    whole, _, fraction = stamp.partition(".")
    try:
        moment = datetime.fromisoformat(whole) if fraction.isdigit() or not fraction else None
    except ValueError:
        moment = None
    if moment is None:
        raise _BadRow(f"TIMESTAMP is {stamp!r}, not a date like 2023-11-16 18:15:46.6805900 nor seconds")
    seconds = int(moment.replace(tzinfo=moment.tzinfo or timezone.utc).timestamp())
    return seconds * 10**9 + int(fraction[:9].ljust(9, "0"))


def _percentile(ordered: list[int], q: float) -> int:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class ReplayWindow:
    start_s: float = 0.0  # where the window starts, in trace seconds
    duration_s: float | None = None  # the replay's length in replay seconds; None: to the end
    rate_scale: float = 1.0  # k: k times the trace's rate, duration_s * k trace seconds in duration_s
    speed: float = 1.0  # s: wall time = replay time / s, for a slower or faster machine
    max_requests: int | None = None
    token_scale: float = 1.0  # f: prompt, output and block sizes times f (>= 1 token), for a smaller machine

    def __post_init__(self) -> None:
        for name in ("rate_scale", "speed", "token_scale", "duration_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if not (isinstance(self.start_s, (int, float)) and 0 <= self.start_s < math.inf):
            raise ValueError(f"start_s must be a number >= 0, got {self.start_s!r}")
        if self.max_requests is not None and not (type(self.max_requests) is int and self.max_requests >= 1):
            raise ValueError(f"max_requests must be a whole number >= 1, got {self.max_requests!r}")

    def scaled(self, tokens: int) -> int:
        return max(1, round(tokens * self.token_scale))

    def block_size(self, trace: Trace) -> int:
        """The trace's prefix block size scaled like the prompts it cuts (0: the trace has none)."""
        return self.scaled(trace.block_size) if trace.block_size else 0


@dataclass(frozen=True)
class ScheduledRequest:
    send_at_s: float  # wall seconds from the replay's start
    request: TracedRequest  # token counts already scaled by the window's token_scale


def schedule(trace: Trace, window: ReplayWindow) -> list[ScheduledRequest]:
    """The window's requests with their send times; a window that holds none is a ValueError."""
    end = math.inf if window.duration_s is None else window.start_s + window.duration_s * window.rate_scale
    chosen = [r for r in trace.requests if window.start_s <= r.at_s < end][: window.max_requests]
    if not chosen:
        raise ValueError(f"trace seconds {window.start_s:g} to {end:g} of {trace.source} hold no request; "
                         f"its {len(trace.requests)} requests span 0 to {trace.span_s:.3f} s")
    return [
        ScheduledRequest(
            (r.at_s - window.start_s) / window.rate_scale / window.speed,
            replace(r, prompt_tokens=window.scaled(r.prompt_tokens), output_tokens=window.scaled(r.output_tokens)),
        )
        for r in chosen
    ]
