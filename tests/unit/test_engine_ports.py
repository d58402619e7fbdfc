"""Each replica's engine searches for its torch.distributed port from a free port of its own,
not from vLLM's fixed default, where two engines that start together collide."""

from __future__ import annotations

import os
import socket

from serving.engine_ports import DP_MASTER_PORT_ENV, TCPSTORE_PORT_OFFSET, give_engine_its_own_port


def test_the_search_starts_at_a_port_free_when_the_replica_started(monkeypatch):
    monkeypatch.delenv(DP_MASTER_PORT_ENV, raising=False)
    port = give_engine_its_own_port()
    assert int(os.environ[DP_MASTER_PORT_ENV]) + TCPSTORE_PORT_OFFSET == port
    assert port > 1024  # no privileged port, unlike vLLM's default search from port 100
    with socket.socket() as engine:
        engine.bind(("", port))  # still free for the engine that comes next


def test_replicas_started_together_search_from_different_ports(monkeypatch):
    starts = set()
    for _ in range(20):
        monkeypatch.delenv(DP_MASTER_PORT_ENV, raising=False)
        starts.add(give_engine_its_own_port())
    # The kernel hands out ports at random: two of 20 may meet by chance (under 1%), three
    # almost never; vLLM's own default gave all 20 the same start.
    assert len(starts) >= 18


def test_an_operators_own_port_is_kept(monkeypatch):
    monkeypatch.setenv(DP_MASTER_PORT_ENV, "29500")
    assert give_engine_its_own_port() is None
    assert os.environ[DP_MASTER_PORT_ENV] == "29500"
