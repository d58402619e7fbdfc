"""The cluster plan: the cheapest node type meeting each pool's need, spot against on-demand,
node counts and $/hour at minimum and peak, and errors that name the limit."""

from __future__ import annotations

import pytest

from cluster.node_types import gpu_node_types
from cluster.plan import HeadNode, PlanError, choose_node_type, nodes_needed, plan_cluster
from cluster.pool_needs import PoolNeed, pool_needs
from core.config import CONFIG_DIR, TrilemmaConfig
from core.price_catalog import PriceCatalog

HEAD = HeadNode(instance_type="c7i.4xlarge", vcpus=16, usd_per_hour=0.5)


def gpu(instance: str, units: int, memory: float, on_demand: float, spot: float, vcpus: int = 8) -> dict:
    return {"aws_instance_type": instance, "units_per_instance": units, "vcpus_per_instance": vcpus,
            "gpu_memory_gib": memory, "on_demand_usd_per_hour": on_demand, "spot_usd_per_hour": spot,
            "board_power_watts": 300}


# Per-GPU prices; a node costs units x price. Small: 1 x 24 GiB. Mid: 8 x 40 GiB. Big: 8 x 80 GiB.
CATALOG = PriceCatalog.model_validate({
    "as_of": "test", "energy_usd_per_kwh": 0.1, "cloud_premium_multiplier": 1.0,
    "accelerators": {
        "cpu": {"on_demand_usd_per_hour": 0.05, "spot_usd_per_hour": 0.02, "board_power_watts": 5},
        "L4": gpu("g6.xlarge", 1, 24, on_demand=1.0, spot=0.4),
        "A100-40G": gpu("p4d.24xlarge", 8, 40, on_demand=0.9, spot=0.5),
        "H100": gpu("p5.48xlarge", 8, 80, on_demand=4.0, spot=2.0),
    },
})
TYPES = gpu_node_types(CATALOG)


def need(pool="p", *, memory=None, accelerator="H100", gpus=1.0, low=1, high=1, purchase="on_demand") -> PoolNeed:
    return PoolNeed(pool=pool, accelerator=accelerator, gpus_per_replica=gpus, gpu_memory_gib=memory,
                    min_replicas=low, max_replicas=high, purchase=purchase)


@pytest.mark.parametrize(("memory", "high", "chosen"), [
    (20, 1, "ray.worker.l4.on-demand"),         # one small node ($1) beats a node of 8 ($7.20)
    (20, 8, "ray.worker.a100-40g.on-demand"),   # 8 x $1 = $8 against one node of 8 at $7.20
    (30, 1, "ray.worker.a100-40g.on-demand"),   # the L4's 24 GiB is too little
    (70, 4, "ray.worker.h100.on-demand"),       # only the 80 GiB GPU holds it
])
def test_the_cheapest_type_at_peak_among_those_with_enough_memory(memory, high, chosen):
    assert choose_node_type(need(memory=memory, high=high), TYPES).node_type.name == chosen


def test_the_reason_names_the_need_the_price_and_the_nodes_at_peak():
    choice = choose_node_type(need("long", memory=80, low=0, high=4), TYPES)
    assert choice.reason == (
        "needs 1 GPU x 80 GiB per replica, 0-4 replicas, on-demand only; H100 p5.48xlarge on-demand: "
        "$4.00/h per GPU; 4 replicas at peak -> 1 node of 8 GPUs, $32.00/h, the least of the types "
        "with >= 80 GiB per GPU")


def test_spot_when_allowed_and_never_for_an_on_demand_pool():
    allowed = choose_node_type(need(memory=80, high=2, purchase="spot"), TYPES)
    assert allowed.node_type.name == "ray.worker.h100.spot"
    assert "spot allowed" in allowed.reason and "next: H100 p5.48xlarge on-demand, $32.00/h" in allowed.reason
    on_demand = choose_node_type(need(memory=80, high=2), TYPES)
    assert on_demand.node_type.purchase == "on_demand" and "on-demand only" in on_demand.reason


def test_a_pool_without_a_memory_need_keeps_its_accelerator():
    choice = choose_node_type(need(accelerator="h100", high=1), TYPES)
    assert choice.node_type.accelerator == "H100"   # though an L4 node would cost less
    assert "which the pool names (it sets no gpu_memory_gib)" in choice.reason


def test_min_and_peak_dollars_and_pools_sharing_a_type():
    plan = plan_cluster([
        need("short", memory=60, low=1, high=4),
        need("long", memory=80, low=0, high=6),
        need("chat", memory=20, low=1, high=2, purchase="spot"),
    ], TYPES, HEAD)
    nodes = {p.node_type.name: (p.min_workers, p.max_workers, p.pools) for p in plan.node_types}
    # short and long share H100 nodes: 1 replica at minimum, 4 + 6 = 10 GPUs at peak -> 2 nodes.
    assert nodes == {"ray.worker.h100.on-demand": (1, 2, ["short", "long"]),
                     "ray.worker.l4.spot": (1, 2, ["chat"])}
    assert plan.usd_per_hour_at_min == pytest.approx(0.5 + 32.0 + 0.4)
    assert plan.usd_per_hour_at_peak == pytest.approx(0.5 + 2 * 32.0 + 2 * 0.4)
    assert plan.max_workers() == {"ray.worker.h100.on-demand": 2, "ray.worker.l4.spot": 2}
    report = "\n".join(plan.report())
    assert "$32.90 at minimum" in report and "$65.30 at peak" in report
    assert "short 1-4 replicas x 1 GPU, long 0-6 replicas x 1 GPU -> min_workers 1, max_workers 2" in report


def test_a_choice_other_than_the_named_accelerator_is_a_config_edit():
    plan = plan_cluster([need("long", memory=30, accelerator="H100", high=8)], TYPES, HEAD)
    assert plan.config_edits == ["pools.long.accelerator: H100 -> A100-40G"]
    assert "the Trilemma config must change" in "\n".join(plan.report())


@pytest.mark.parametrize(("pool_need", "message"), [
    (need("huge", memory=100), "pool huge needs 1 GPU x 100 GiB per replica (100 GiB per GPU), more than any "
                               "GPU of the catalog has: the largest is H100 with 80 GiB"),
    (need("wide", memory=70, gpus=16), "pool wide needs 16 GPUs per replica on one node, more than any fitting "
                                       "node type has: the most is 8 (H100 p5.48xlarge on-demand)"),
    (need("odd", accelerator="B200"), "pool odd names accelerator 'B200' and sets no gpu_memory_gib, but no node "
                                      "type has it; GPU node types: ['A100-40G', 'H100', 'L4']"),
])
def test_a_need_no_type_meets_is_an_error_naming_the_limit(pool_need, message):
    with pytest.raises(PlanError) as raised:
        choose_node_type(pool_need, TYPES)
    assert str(raised.value) == message


def test_a_share_of_a_gpu_needs_that_share_of_its_memory():
    half = need("half", memory=15, gpus=0.5, high=4)   # 15 GiB in half a GPU: a GPU of 30 GiB
    assert choose_node_type(half, TYPES).node_type.accelerator == "A100-40G"
    with pytest.raises(PlanError, match="needs 0.5 of a GPU with 45 GiB per replica \\(90 GiB per GPU\\)"):
        choose_node_type(half.model_copy(update={"gpu_memory_gib": 45}), TYPES)


@pytest.mark.parametrize(("gpus_per_node", "replicas", "nodes"), [
    (8, [1] * 8, 1), (8, [1] * 9, 2), (1, [1] * 3, 3), (8, [2] * 5, 2), (8, [3] * 4, 2),
    (8, [0.45] * 4, 1), (1, [0.45] * 3, 2), (8, [], 0), (8, [4, 0.5, 0.5, 3], 1),
])
def test_nodes_are_counted_as_ray_places_bundles(gpus_per_node, replicas, nodes):
    assert nodes_needed(gpus_per_node, replicas) == nodes


def test_a_replica_larger_than_a_node_cannot_be_counted():
    with pytest.raises(ValueError, match="a replica of 16 GPUs cannot fit on a node of 8"):
        nodes_needed(8, [16])


def test_needs_come_from_autoscaling_bounds_or_fixed_replicas():
    cluster = pool_needs(TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-cluster.yaml"))
    assert [(n.pool, n.accelerator, n.gpu_memory_gib, n.min_replicas, n.max_replicas, n.purchase) for n in cluster] == [
        ("short", "L4", 22, 1, 4, "spot"), ("long", "A100-80G", 80, 0, 4, "on_demand")]
    fixed = pool_needs(TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml"))
    assert [(n.pool, n.gpus_per_replica, n.min_replicas, n.max_replicas) for n in fixed] == [
        ("short", 0.45, 1, 1), ("long", 0.45, 1, 1)]
    assert fixed[0].describe() == "0.45 of one H200 per replica"
    assert pool_needs(TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")) == []


def test_the_shipped_gpu_cluster_config_plans_to_its_own_accelerators():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-cluster.yaml")
    plan = plan_cluster(pool_needs(config), gpu_node_types(PriceCatalog.from_yaml()), HEAD)
    assert plan.config_edits == []
    assert plan.max_workers() == {"ray.worker.a100-80g.on-demand": 1, "ray.worker.l4.spot": 4}


def test_a_gpu_memory_need_on_a_cpu_pool_is_refused():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump()
    raw["pools"]["short"]["gpu_memory_gib"] = 10
    with pytest.raises(ValueError, match="gpu_memory_gib is for GPU pools"):
        TrilemmaConfig.from_dict(raw)
