"""Request traces: the three formats read, bad rows named by line, and replay windows scheduled."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.replay.trace import (
    ReplayWindow,
    Trace,
    TracedRequest,
    TraceFormatError,
    read_trace,
    schedule,
)

SAMPLES = Path(__file__).resolve().parents[3] / "bench" / "replay" / "samples"
AZURE = SAMPLES / "azure-conv-sample.csv"
MOONCAKE = SAMPLES / "mooncake-conversation-sample.jsonl"
PLAIN = SAMPLES / "plain-sample.jsonl"


@pytest.mark.parametrize("path, fmt, count, first, second, block_size", [
    # 2023-11-16 18:15:46.6805900 -> 18:15:50.9951690: all 7 fractional digits count.
    (AZURE, "azure", 200, TracedRequest(2, 0.0, 374, 44), TracedRequest(3, 4.314579, 396, 109), 0),
    (MOONCAKE, "mooncake", 200, TracedRequest(1, 0.0, 6758, 500, tuple(range(14))),
     TracedRequest(2, 0.0, 7322, 490, (0, *range(14, 28))), 512),
    # The first request is at 0.261 s in the file.
    (PLAIN, "jsonl", 40, TracedRequest(1, 0.0, 754, 121, (1, 1000), "chat"),
     TracedRequest(2, 0.963 - 0.261, 12, 101, (), "chat"), 0),
])
def test_each_sample_reads_by_its_format_and_by_auto(path, fmt, count, first, second, block_size):
    for trace in (read_trace(path, fmt), read_trace(path), read_trace(str(path))):
        assert (trace.format, len(trace.requests), trace.block_size) == (fmt, count, block_size)
        assert trace.requests[0] == first
        assert trace.requests[1] == replace(second, at_s=pytest.approx(second.at_s, abs=1e-9))
        times = [r.at_s for r in trace.requests]
        assert times == sorted(times)


def test_mooncake_milliseconds_become_seconds():
    trace = read_trace(MOONCAKE)
    last = trace.requests[-1]
    assert (last.line, last.at_s) == (200, 72.0)  # "timestamp": 72000
    assert trace.span_s == 72.0


def test_azure_dates_keep_the_seventh_digit_and_seconds_read_too(tmp_path):
    dates = tmp_path / "dates.csv"
    dates.write_text("timestamp,contexttokens,generatedtokens,Extra\n"
                     "2023-11-16 18:15:46.0000009,10,1,x\n"
                     "2023-11-16 18:15:45.9999999,20,2,y\n"
                     "2023-11-16 18:15:46,30,0,z\n")
    trace = read_trace(dates)
    # Sorted by time, rebased on the earliest (line 3), stable for equal times.
    assert [(r.line, r.prompt_tokens) for r in trace.requests] == [(3, 20), (4, 30), (2, 10)]
    assert [r.at_s for r in trace.requests] == [0.0, pytest.approx(1e-7, abs=1e-12), pytest.approx(1e-6, abs=1e-12)]
    assert trace.requests[1].output_tokens == 1  # a public trace's 0 reads as 1
    seconds = tmp_path / "seconds.csv"
    seconds.write_text("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n5.5,10,3\n\n7,20,4\n")  # with a BOM
    assert [(r.line, r.at_s) for r in read_trace(seconds).requests] == [(2, 0.0), (4, 1.5)]


@pytest.mark.parametrize("name, content, message", [
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10,2\n2,abc,3\n",
     "t.csv:3: ContextTokens is 'abc', not a whole number"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10,2\n\n2,10,-3\n", "t.csv:4: GeneratedTokens is -3, negative"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,0,2\n", "t.csv:2: ContextTokens is 0, less than 1"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n-1,5,2\n", "t.csv:2: TIMESTAMP is -1.0, negative"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,5,2\nyesterday,5,2\n",
     "t.csv:3: TIMESTAMP is 'yesterday', not a date"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,5\n", "t.csv:2: 2 columns, the header 3"),
    ("t.csv", "TIMESTAMP,ContextTokens\n1,5\n", "t.csv: the CSV header lacks GeneratedTokens"),
    ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv: holds no request"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n\nnot json\n',
     "m.jsonl:3: not JSON: "),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n[1, 2]\n',
     "m.jsonl:2: not a JSON object"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": []}\n'
                '{"timestamp": 0, "input_length": 5, "hash_ids": []}\n', "m.jsonl:2: missing key 'output_length'"),
    ("m.jsonl", '{"timestamp": -5, "input_length": 5, "output_length": 1, "hash_ids": []}\n',
     "m.jsonl:1: timestamp is -5, negative"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5.5, "output_length": 1, "hash_ids": []}\n',
     "m.jsonl:1: input_length is 5.5, not a whole number"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "a"]}\n',
     "m.jsonl:1: hash_ids is [1, 'a'], not a list of whole numbers"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 3}\n',
     "m.jsonl:1: hash_ids is 3, not a list"),
    ("p.jsonl", '{"at_s": 0, "prompt_tokens": 5, "output_tokens": 0}\n', "p.jsonl:1: output_tokens is 0, less than 1"),
    ("p.jsonl", '{"at_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n{"at_s": 1, "prompt_tokens": 5, "output": 1}\n',
     "p.jsonl:2: unknown key 'output'"),
    ("p.jsonl", '{"at_s": "soon", "prompt_tokens": 5, "output_tokens": 1}\n', "p.jsonl:1: at_s is 'soon', not a number"),
    ("p.jsonl", '{"at_s": 0, "prompt_tokens": true, "output_tokens": 1}\n', "p.jsonl:1: prompt_tokens is True"),
    ("p.jsonl", '{"at_s": 0, "prompt_tokens": 5, "output_tokens": 1, "scenario": 3}\n', "p.jsonl:1: scenario is 3"),
    ("p.jsonl", '{"at_s": 0, "prompt_tokens": 5, "output_tokens": 1, "prefix_blocks": [1.5]}\n',
     "p.jsonl:1: prefix_blocks is [1.5]"),
    ("p.jsonl", "\n\n", "p.jsonl: holds no request"),
    ("p.jsonl", '{"prompt": "hi"}\n', "p.jsonl:1: has neither input_length (mooncake) nor prompt_tokens"),
    ("trace.txt", "1,2,3\n", "trace.txt: cannot tell the format"),
])
def test_a_bad_trace_names_its_line_and_reason(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TraceFormatError) as caught:
        read_trace(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}"), str(caught.value)


def test_a_missing_file_and_an_unknown_format(tmp_path):
    with pytest.raises(TraceFormatError, match="nothere.csv: cannot read it"):
        read_trace(tmp_path / "nothere.csv")
    with pytest.raises(ValueError, match="trace format is 'csv'"):
        read_trace(AZURE, "csv")
    with pytest.raises(TraceFormatError, match="lacks TIMESTAMP"):
        read_trace(PLAIN, "azure")


def test_summary_of_a_trace():
    summary = read_trace(PLAIN).describe()
    assert (summary.requests, summary.prompt_tokens[2], summary.output_tokens[2]) == (40, 1960, 286)
    assert summary.rate_rps == pytest.approx(40 / summary.span_s)
    assert 0 < summary.long_prompt_share < 1 and 0 < summary.shared_first_block_share < 1
    assert "40 requests" in summary.text()
    assert read_trace(AZURE).describe().shared_first_block_share is None
    # Every Mooncake conversation starts with the same block: all but the first share it.
    assert read_trace(MOONCAKE).describe().shared_first_block_share == 199 / 200


def _trace(*times: float, block_size: int = 0) -> Trace:
    return Trace([TracedRequest(i + 1, t, 100 + i, 10, (7,)) for i, t in enumerate(times)], "jsonl", "t.jsonl",
                 block_size)


@pytest.mark.parametrize("window, lines, send_at", [
    (ReplayWindow(), [1, 2, 3, 4, 5, 6], [0, 1, 2, 4, 8, 10]),
    (ReplayWindow(start_s=2), [3, 4, 5, 6], [0, 2, 6, 8]),
    (ReplayWindow(start_s=1, duration_s=3), [2, 3], [0, 1]),  # [1, 4): 4 is out
    # Twice the rate: 2 s of replay take 4 s of the trace, sent twice as close.
    (ReplayWindow(duration_s=2, rate_scale=2), [1, 2, 3], [0, 0.5, 1]),
    (ReplayWindow(speed=4), [1, 2, 3, 4, 5, 6], [0, 0.25, 0.5, 1, 2, 2.5]),
    (ReplayWindow(start_s=1, rate_scale=2, speed=0.5), [2, 3, 4, 5, 6], [0, 1, 3, 7, 9]),
    (ReplayWindow(start_s=1.5, max_requests=2), [3, 4], [0.5, 2.5]),  # timed from the window's start
])
def test_a_window_picks_its_requests_and_times_them(window, lines, send_at):
    scheduled = schedule(_trace(0, 1, 2, 4, 8, 10), window)
    assert [s.request.line for s in scheduled] == lines
    assert [s.send_at_s for s in scheduled] == pytest.approx(send_at)


def test_token_scale_shrinks_every_size_to_at_least_one_token():
    trace = Trace([TracedRequest(1, 0.0, 1000, 3, (4, 5)), TracedRequest(2, 1.0, 2, 1)], "mooncake", "m", 512)
    window = ReplayWindow(token_scale=0.1)
    scheduled = schedule(trace, window)
    assert [(s.request.prompt_tokens, s.request.output_tokens) for s in scheduled] == [(100, 1), (1, 1)]
    assert scheduled[0].request.prefix_blocks == (4, 5) and scheduled[0].request.line == 1
    assert window.block_size(trace) == 51 and ReplayWindow(token_scale=0.1).block_size(_trace(0)) == 0
    assert schedule(trace, ReplayWindow())[0].request == trace.requests[0]


@pytest.mark.parametrize("fields, message", [
    ({"rate_scale": 0}, "rate_scale must be a positive number, got 0"),
    ({"speed": -1}, "speed must be a positive number, got -1"),
    ({"token_scale": float("inf")}, "token_scale must be a positive number, got inf"),
    ({"duration_s": 0}, "duration_s must be a positive number, got 0"),
    ({"start_s": -0.5}, "start_s must be a number >= 0, got -0.5"),
    ({"max_requests": 0}, "max_requests must be a whole number >= 1, got 0"),
    ({"max_requests": 2.5}, "max_requests must be a whole number >= 1, got 2.5"),
])
def test_an_invalid_window_names_the_field(fields, message):
    with pytest.raises(ValueError) as caught:
        ReplayWindow(**fields)
    assert str(caught.value) == message


def test_a_window_without_requests_says_the_span():
    with pytest.raises(ValueError, match="hold no request; its 6 requests span 0 to 10.000 s"):
        schedule(_trace(0, 1, 2, 4, 8, 10), ReplayWindow(start_s=10.5))
    with pytest.raises(ValueError, match="seconds 4.5 to 5.5"):
        schedule(_trace(0, 1, 2, 4, 8, 10), ReplayWindow(start_s=4.5, duration_s=1))
