"""The spend ledger on a real Ray cluster: one per cluster, shared by whoever asks for it, and
kept across a restart of the actor itself when it has a file."""

from __future__ import annotations

import pytest
import ray

from router.spend_ledger import SpendLedger, ledger_handle

pytestmark = pytest.mark.integration


def test_every_router_replica_reaches_the_same_ledger(ray_cluster, tmp_path):
    first = ledger_handle(str(tmp_path / "spend.json"))
    second = ledger_handle(None)          # another replica, another config: the same actor
    ray.get(first.add.remote("acme", 0.25))
    assert ray.get(second.spent_today.remote())["acme"] >= 0.25


def test_spend_survives_a_restart_through_its_file(ray_cluster, tmp_path):
    path = str(tmp_path / "spend.json")
    ledger = SpendLedger.remote(path)
    assert ray.get(ledger.add.remote("acme", 1.5)) == 1.5   # the first spend is written at once
    ray.kill(ledger, no_restart=True)
    restarted = SpendLedger.remote(path)
    assert ray.get(restarted.spent_today.remote()) == {"acme": 1.5}
    assert "has spent $1.500000" in ray.get(restarted.over_budget.remote("acme", 1.0))
    ray.kill(restarted, no_restart=True)
