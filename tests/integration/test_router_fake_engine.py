"""The router on a real Ray Serve app whose pools run the fake engine: every route and error."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from core.prometheus_text import samples as metric_samples
from tests.fake_engine import FAIL_MARKER, FAIL_MIDSTREAM_MARKER
from tests.support import METRICS_TEST_PORT

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"


def chat(client, content="hi", headers=None, path="/v1/chat/completions", **fields):
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}
    return client.post(path, json=body, headers=headers or {})


def served_by(response) -> str:
    """The pool whose replica answered: the fake engine stamps `served-by=pool-<name>/<replica>`."""
    content = response.json()["choices"][0]["message"]["content"]
    return content.split()[0].removeprefix("served-by=pool-").split("/")[0]


def assert_healthy(client):
    response = chat(client, max_tokens=3)
    assert response.status_code == 200, response.text


def test_models_lists_the_public_name_once(client):
    models = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in models] == [MODEL]


def test_short_request_goes_to_short_pool(client):
    response = chat(client, max_tokens=5)
    assert response.status_code == 200
    assert response.headers["x-trilemma-pool"] == "short" == served_by(response)
    assert response.headers["x-trilemma-scenario"] == "chat"
    assert "<= threshold 1024: short pool" in response.headers["x-trilemma-route-reason"]


def test_long_request_goes_to_long_pool(client):
    response = chat(client, content="word " * 1100, max_tokens=5, headers={"X-Scenario": "batch"})
    assert response.status_code == 200
    assert response.headers["x-trilemma-pool"] == "long" == served_by(response)
    assert "> threshold 1024: long pool" in response.headers["x-trilemma-route-reason"]


def teach_the_estimate(client, content: str) -> None:
    """Requests the router counts, so that its estimate's tokens per byte become this text's."""
    for _ in range(15):
        assert chat(client, content=content, max_tokens=1).status_code == 200


def route_moves(from_pool: str, to_pool: str) -> float:
    """The moves Ray's metrics exporter has seen so far (`trilemma_route_moves_total`)."""
    text = httpx.get(f"http://127.0.0.1:{METRICS_TEST_PORT}/metrics", timeout=10).text
    return sum(value for labels, value in metric_samples(text, "ray_trilemma_route_moves_total").items()
               if dict(labels).get("from_pool") == from_pool and dict(labels).get("to_pool") == to_pool)


def test_a_request_its_estimate_misplaces_is_moved_by_the_exact_count(client):
    moved_before = route_moves("short", "long")
    teach_the_estimate(client, "hi")  # about 0.2 tokens per byte, with the chat template
    # A digit is a token: about 330 tokens by the estimate, 1530 by the count.
    response = chat(client, content="1234567890" * 150, max_tokens=5)
    assert response.status_code == 200, response.text
    assert response.headers["x-trilemma-pool"] == "long" == served_by(response)
    reason = response.headers["x-trilemma-route-reason"]
    assert "prompt 1530 + max_tokens 5 = 1535 > threshold 1024: long pool" in reason
    assert "moved from pool 'short' (max_tokens 5), where an estimate of" in reason
    assert response.headers["x-trilemma-prompt-tokens"] == "1530"
    deadline = time.monotonic() + 60  # Ray exports application metrics every few seconds
    while route_moves("short", "long") < moved_before + 1 and time.monotonic() < deadline:
        time.sleep(1)
    assert route_moves("short", "long") >= moved_before + 1  # moves of earlier tests may still be on their way


def test_a_request_sent_on_its_estimate_is_withdrawn_when_the_count_refuses_it(client):
    teach_the_estimate(client, "hi")
    # About 1,800 tokens by the estimate, which the long pool takes; 9,030 by the count.
    response = chat(client, content="1234567890" * 900, max_tokens=5)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "prompt 9030 + max_tokens 5" in error["message"] and "8192" in error["message"]
    assert "x-trilemma-pool" not in response.headers  # it was not served anywhere
    assert_healthy(client)


def test_a_request_its_estimate_would_refuse_is_served_on_the_exact_count(client):
    teach_the_estimate(client, "1234567890" * 20)  # about 0.9 tokens per byte
    # About 8,300 tokens by the estimate, over the largest pool's 8192; 1,830 by the count.
    response = chat(client, content="word " * 1800, max_tokens=5)
    assert response.status_code == 200, response.text
    assert response.headers["x-trilemma-pool"] == "long" == served_by(response)
    assert "moved" not in response.headers["x-trilemma-route-reason"]


def test_scenario_path_and_header_agree(client):
    by_path = chat(client, path="/api/cost", max_tokens=500)
    by_header = chat(client, headers={"X-Scenario": "cost"}, max_tokens=500)
    for response in (by_path, by_header):
        assert response.status_code == 200
        assert response.headers["x-trilemma-scenario"] == "cost"
        assert "capped to 64" in response.headers["x-trilemma-adjustments"]
        assert response.json()["usage"]["completion_tokens"] == 64


def test_plain_api_path_takes_completion_and_chat_bodies(client):
    completion = client.post("/api/batch", json={"prompt": "hello", "max_tokens": 4})
    assert completion.status_code == 200 and completion.json()["object"] == "text_completion"
    assert completion.headers["x-trilemma-scenario"] == "batch"
    chat_reply = client.post("/api/chat", json={"messages": [{"role": "user", "content": "hi"}]})
    assert chat_reply.status_code == 200 and chat_reply.json()["object"] == "chat.completion"
    assert chat_reply.json()["usage"]["completion_tokens"] == 128  # real-time cap as default


def test_streaming_through_the_router(client):
    with client.stream(
        "POST", "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True}
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-trilemma-pool"] == "short"
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) == 4


def test_pool_header_pins_a_pool(client):
    response = chat(client, headers={"X-Trilemma-Pool": "long"}, max_tokens=3)
    assert response.headers["x-trilemma-pool"] == "long" == served_by(response)
    assert "pinned" in response.headers["x-trilemma-route-reason"]


@pytest.mark.parametrize(
    "send, status, message",
    [
        (lambda c: c.post("/v1/chat/completions", content=b"{not json"), 400, "malformed JSON body"),
        (lambda c: c.post("/api/chat", content=b"[1, 2"), 400, "malformed JSON body"),
        (lambda c: c.post("/v1/chat/completions", json={"messages": "x"}), 400, "messages"),
        (lambda c: chat(c, content="word " * 9000, max_tokens=5), 400, "over the largest pool's max_model_len of 8192"),
        (lambda c: chat(c, path="/api/closed"), 503, "no inference provider configured for scenario closed"),
        (lambda c: chat(c, path="/api/nope"), 404, "unknown scenario 'nope'"),
        (lambda c: chat(c, headers={"X-Scenario": "nope"}), 400, "unknown scenario 'nope'"),
        (lambda c: c.post("/v1/chat/completions", json={"model": "gpt-4", "messages": []}), 404, "model 'gpt-4' does not exist"),
        (lambda c: chat(c, headers={"X-Trilemma-Pool": "huge"}), 400, "unknown pool 'huge'"),
        (lambda c: chat(c, content=FAIL_MARKER, max_tokens=3), 502, "llm request failed: fake engine crashed"),
    ],
    ids=[
        "bad-json-v1", "bad-json-api", "schema", "oversize", "closed-scenario",
        "unknown-scenario-path", "unknown-scenario-header", "unknown-model", "unknown-pool",
        "engine-failure",
    ],
)
def test_errors_are_openai_json_and_the_server_keeps_serving(client, send, status, message):
    response = send(client)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert_healthy(client)


def test_errors_after_routing_say_the_route(client):
    failed = chat(client, content=FAIL_MARKER, max_tokens=3)
    assert failed.status_code == 502
    assert failed.headers["x-trilemma-pool"] == "short" and failed.headers["x-trilemma-scenario"] == "chat"
    closed = chat(client, path="/api/closed")
    assert closed.status_code == 503 and closed.headers["x-trilemma-scenario"] == "closed"
    assert "x-trilemma-pool" not in closed.headers


def test_oversize_error_says_both_numbers(client):
    response = chat(client, content="word " * 9000, max_tokens=5, headers={"X-Scenario": "batch"})
    message = response.json()["error"]["message"]
    assert "prompt 90" in message and "max_tokens 5" in message and "8192" in message


def stream_chat(client, content):
    with client.stream(
        "POST", "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": True},
    ) as response:
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    return response, events


def test_engine_failure_before_the_first_chunk_is_a_502(client):
    response, _ = stream_chat(client, FAIL_MARKER)
    assert response.status_code == 502
    assert_healthy(client)


def test_engine_failure_mid_stream_ends_with_an_error_event(client):
    response, events = stream_chat(client, FAIL_MIDSTREAM_MARKER)
    # The status went out with the first chunk; the failure arrives as the last events.
    assert response.status_code == 200
    assert "served-by=pool-short" in events[0]
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["message"] == "llm request failed: fake engine crashed mid-stream"
    assert events[-1] == "data: [DONE]"
    assert_healthy(client)


def test_the_routers_pool_watch_reads_the_replicas_serve_reports(client):
    from ray import serve

    from core.upstream import serve_replica_states
    from router.pool_watch import count_replicas
    from tests.support import config_for_tests

    app_name = config_for_tests().app_name
    states = serve_replica_states(app_name)
    deployments = serve.status().applications[app_name].deployments
    assert set(states) == set(deployments) >= {"pool-short", "pool-long", "router"}
    for name, status in deployments.items():
        by_state = {str(getattr(state, "value", state)): n for state, n in status.replica_states.items()}
        assert sorted(states[name]) == sorted(state for state, n in by_state.items() for _ in range(n))
    assert count_replicas(states["pool-short"]) == (1, 0)
    assert serve_replica_states("no-such-app") == {}

