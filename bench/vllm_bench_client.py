"""`vllm bench serve` kept running: vLLM's own benchmark client, imported once for a comparison.

Each `vllm bench serve` command imports vLLM before it sends a request (9.7 s on a 2-core CPU),
and `bench vs-vllm` runs ten of them or more: a CPU comparison took 338 s with them and 255 s
with this (bench/results/vs-vllm-cpu/spread-3-one-client-process.md). This process imports vLLM's benchmark
once and runs one benchmark per line of its input, with the command's own argument parser and
code.

Each input line is a JSON object: `argv` (the arguments after `vllm bench serve`) and `env`
(variables set for that run only, such as the API key vLLM's client sends). Each run answers one
line on the process's stdout, `{"ok": true}` or `{"error": "..."}`; whatever vLLM prints goes to
stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any, Callable


def serve_benchmarks(commands: IO[str], answers: IO[str]) -> None:
    """Runs one `vllm bench serve` per line of `commands` and answers each on `answers`."""
    bench_serve: Callable[[list[str]], Any] | None = None
    for line in commands:
        command = json.loads(line)
        before = {name: os.environ.get(name) for name in command.get("env", {})}
        os.environ.update(command.get("env", {}))
        try:
            # vLLM is imported with the first benchmark, as the command would: not while the
            # servers it is to load are still starting beside it.
            bench_serve = bench_serve or _vllm_bench_serve()
            bench_serve(command["argv"])
            answer = {"ok": True}
        except (Exception, SystemExit) as error:  # argparse exits on bad arguments: an answer too
            answer = {"error": f"{type(error).__name__}: {error}"[-2000:]}
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def _vllm_bench_serve() -> Callable[[list[str]], Any]:
    """`vllm bench serve ARGV...` as a function: vLLM's parser for the command, then its code."""
    from bench.vllm_cli import answer_vllm_version

    answer_vllm_version()
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def bench_serve(argv: list[str]) -> Any:
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        return main(parser.parse_args(argv))

    return bench_serve


class VllmBenchClient:
    """The process above, started on entry and ended on exit; `run` sends one benchmark and
    waits for it. Its stderr (vLLM's own output) goes to `log`."""

    def __init__(self, log: Path) -> None:
        self._log_path = log
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> "VllmBenchClient":
        self._log = self._log_path.open("w")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.vllm_bench_client"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True, bufsize=1)
        return self

    def run(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        """One `vllm bench serve` with these arguments; raises RuntimeError with vLLM's reason."""
        assert self._process is not None, "use it as a context manager"
        try:
            self._process.stdin.write(json.dumps({"argv": argv, "env": env or {}}) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            code = self._process.wait(timeout=30)
            raise RuntimeError(f"vLLM's benchmark client exited ({code}): {self._log_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"vllm bench serve failed: {answer['error']}; {self._log_tail()}")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            with contextlib.suppress(BrokenPipeError):  # a process that died has no input left
                self._process.stdin.close()  # the end of its input ends it
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()

    def _log_tail(self) -> str:
        self._log.flush()
        return self._log_path.read_text(errors="replace")[-2000:]


if __name__ == "__main__":
    # vLLM prints its progress and results to stdout: the answers keep stdout's pipe to themselves.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve_benchmarks(sys.stdin, answers)
