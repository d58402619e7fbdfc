"""Every way the app is stopped in the field, on the real app (the default config: vLLM CPU
engines, the embedded model), started as a user starts it: `trilemma serve`, or `make serve`
around it, in a terminal of its own (bench/stops). Each stop must end the command, answer or
cleanly close the streams in flight, leave no process of its session and the port free; the next
test's start is the previous stop's "next start works", and the last test is one more start.

`ray stop` ends every Ray of this user on the machine, so this tier runs alone, after the others
(`make test` runs it as a pytest run of its own; it is not in the default test paths).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.stops.cli import EXIT_MARGIN_S, launch_argv
from bench.stops.kinds import STOPS
from bench.stops.measure import Setup, StopResult, measure
from core.config import TrilemmaConfig
from serve_app.launcher import stop_bound_s

pytestmark = pytest.mark.stops

CONFIG = Path(__file__).resolve().parents[2] / "serve_app" / "configs" / "local-cpu.yaml"
STREAMS = 4
# Long enough that every stream is still decoding when the stop lands (about 60 tokens/s each
# on two cores), short enough that a drain answers them.
MAX_TOKENS = 256
READY_TIMEOUT_S = 900.0  # the first start may compile the engine's kernels (docs/quickstart.md)

# `trilemma serve` every way; `make serve` the ways a terminal or a supervisor stops its group
# (group SIGTERM under make, then more starts, is how leftovers were first found). Every pair of
# launcher and stop, a benchmark that starts the app too, is measured by `trilemma bench stops
# --launchers serve,make,bench` (bench/results/stops-cpu/stops-cpu.md): a minute and a half a start is
# more than this tier can spend on each.
CASES = [("serve", name) for name in STOPS] + [("make", "ctrl-c"), ("make", "sigterm-group")]


@pytest.fixture(scope="module")
def setup() -> Setup:
    config = TrilemmaConfig.from_yaml(CONFIG)
    return Setup(url=f"http://127.0.0.1:{config.http.port}", host="127.0.0.1", port=config.http.port,
                 model=config.model.name, ready_timeout_s=READY_TIMEOUT_S,
                 exit_bound_s=stop_bound_s(config) + EXIT_MARGIN_S, streams=STREAMS, max_tokens=MAX_TOKENS)


def assert_left_nothing(result: StopResult, log: Path) -> str:
    """Asserts the stop left nothing behind; the result and the command's output, for what else it asserts."""
    shown = f"{result}\n--- the command's output ({log}) ---\n{log.read_text(errors='replace')[-4000:]}"
    assert result.error is None, shown
    assert result.exit_s is not None, f"the command did not end: {shown}"
    assert result.left == [], f"processes left: {shown}"
    assert result.port_free, f"port still held: {shown}"
    flight = result.in_flight
    assert flight["hung"] == 0 and flight["answered"] + flight["refused"] + flight["closed"] == STREAMS, shown
    return shown


@pytest.mark.parametrize(("launcher", "stop"), CASES, ids=[f"{launcher}-{stop}" for launcher, stop in CASES])
def test_a_stop_leaves_nothing_and_the_port_free(launcher, stop, setup, tmp_path):
    log = tmp_path / "serve.log"
    result = measure(STOPS[stop], launcher, launch_argv(launcher, CONFIG, []), setup, log)
    shown = assert_left_nothing(result, log)
    if stop in ("sigterm-serve", "ctrl-c") and launcher == "serve":
        # Stops that let the app drain: the streams in flight are answered in full, and the
        # command reports a clean stop.
        assert result.in_flight["answered"] == STREAMS, shown
        assert result.exit_code == 0, shown
    if stop == "sigterm-group" and launcher == "serve":
        # The signal reaches Ray's daemons as it reaches the app: whether the replicas end before
        # their streams are done varies between starts (docs/faults.md, "Stops"), so a stream is
        # answered or closed cleanly (assert_left_nothing). The command drains and ends 0, or Ray's
        # core ends it with status 1 once its raylet is gone, after the streams were answered.
        assert result.exit_code in (0, 1), shown


def test_the_next_start_serves(setup, tmp_path):
    log = tmp_path / "serve.log"
    result = measure(STOPS["sigterm-serve"], "serve", launch_argv("serve", CONFIG, []), setup, log)
    assert_left_nothing(result, log)
    assert result.ready_s is not None
