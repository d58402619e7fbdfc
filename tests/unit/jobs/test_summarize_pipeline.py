"""Serve mode's pipeline settings across the Ray versions the project runs on."""

from __future__ import annotations

import ray

from core.upstream import one_actor_running_batches_at_once


def test_the_summarize_actor_runs_several_batches_at_once_on_this_ray():
    kwargs = one_actor_running_batches_at_once(3)
    strategy = kwargs["compute"]
    assert strategy.min_size == strategy.max_size == 1
    assert strategy.max_tasks_in_flight_per_actor == 3
    # Either the strategy says it (Ray 2.60) or the actor's own max_concurrency does (Ray 2.58).
    assert getattr(strategy, "max_concurrent_calls_per_actor", None) == 3 or kwargs.get("max_concurrency") == 3


def test_a_ray_without_max_concurrent_calls_gets_the_actor_option(monkeypatch):
    class OlderActorPoolStrategy:  # Ray 2.58's signature
        def __init__(self, *, size=None, max_tasks_in_flight_per_actor=None):
            self.size, self.max_tasks_in_flight_per_actor = size, max_tasks_in_flight_per_actor

    monkeypatch.setattr(ray.data, "ActorPoolStrategy", OlderActorPoolStrategy)
    kwargs = one_actor_running_batches_at_once(4)
    assert kwargs["max_concurrency"] == 4
    assert kwargs["compute"].size == 1 and kwargs["compute"].max_tasks_in_flight_per_actor == 4
