"""vLLM's benchmark client kept running: one process runs benchmark after benchmark against a
real HTTP server, each with the API key it is given, answers a bad command with vLLM's reason
and goes on."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.vllm_bench_client import VllmBenchClient
from bench.vs_vllm import bench_serve

TOKENS_OUT = 4


class ChatStream(BaseHTTPRequestHandler):
    """An OpenAI chat endpoint that streams one token per chunk, then the usage."""

    keys: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ChatStream.keys.append(self.headers.get("Authorization"))
        tokens = body.get("max_completion_tokens") or body.get("max_tokens") or TOKENS_OUT
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _ in range(tokens):
            self._event({"choices": [{"index": 0, "delta": {"content": "a"}}]})
        self._event({"choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": tokens}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, data: dict) -> None:
        self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def chat_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ChatStream.keys = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_one_client_runs_one_benchmark_after_another(chat_url, embedded_model_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def run(client: VllmBenchClient, seed: int, api_key: str | None = None) -> dict:
        return bench_serve(client, chat_url, "smol", str(embedded_model_dir), concurrency=2, num_prompts=4,
                           input_len=16, output_len=TOKENS_OUT, seed=seed, workdir=tmp_path, api_key=api_key)

    with VllmBenchClient(tmp_path / "client.log") as client:
        keyed = run(client, seed=1, api_key="sk-run-one")
        sent_with_key = len(ChatStream.keys)
        plain = run(client, seed=2)
        # vLLM's own parser answers a bad command; the process stays for the next one.
        with pytest.raises(RuntimeError, match="vllm bench serve failed: SystemExit"):
            client.run(["--max-concurrency", "many"])
        again = run(client, seed=3)
    for result in (keyed, plain, again):
        assert result["completed"] == 4 and all(len(gaps) == TOKENS_OUT - 1 for gaps in result["itls"])
    # The key went with its own run's requests only. vLLM's first request of a run, its check that
    # the server answers, never carries one (the `vllm bench serve` command's too).
    assert ChatStream.keys[1:sent_with_key] == ["Bearer sk-run-one"] * 4
    assert set(ChatStream.keys[sent_with_key:]) == {None}


def test_a_client_that_died_says_so_with_its_log(tmp_path):
    with VllmBenchClient(tmp_path / "client.log") as client:
        client._process.kill()
        client._process.wait()
        with pytest.raises(RuntimeError, match="client exited"):
            client.run(["--help"])
