"""The cluster plan: for each GPU pool the node type that serves its replicas for the least
money, and per chosen type the fewest and most nodes; every choice carries its reason. How
many nodes of a type hold a set of replicas is counted as Ray places their bundles."""

from __future__ import annotations

from collections import defaultdict

from pydantic import Field, NonNegativeInt, PositiveInt

from cluster.node_types import NodeType
from cluster.pool_needs import PoolNeed
from core.config_base import StrictModel

# Shares such as 0.45 + 0.45 + 0.1 must add up to a whole GPU despite float rounding.
_EPSILON = 1e-9


def nodes_needed(gpus_per_node: int, replicas: list[float]) -> int:
    """First-fit decreasing: the largest replicas first, each on the first node with room, a
    new node when none has. Exact for replicas of one size, which is what one pool brings.
    Pools of different sizes on one type are counted as if placed largest first; Ray places
    replicas as they arrive, so a cluster that scaled up and down in another order may want a
    node more than this."""
    nodes: list[list[float]] = []  # per node, the free share of each GPU
    for size in sorted(replicas, reverse=True):
        if size > gpus_per_node + _EPSILON:
            raise ValueError(f"a replica of {size:g} GPUs cannot fit on a node of {gpus_per_node}")
        if not any(_place(free, size) for free in nodes):
            free = [1.0] * gpus_per_node
            _place(free, size)
            nodes.append(free)
    return len(nodes)


def _place(free: list[float], size: float) -> bool:
    """Take `size` GPUs from a node with `free` shares, if it has room; True when placed."""
    if size >= 1 - _EPSILON:
        whole = [index for index, share in enumerate(free) if share >= 1 - _EPSILON]
        needed = round(size)
        if len(whole) < needed:
            return False
        for index in whole[:needed]:
            free[index] = 0.0
        return True
    # A share goes to the fullest GPU it fits on, which keeps whole GPUs free for whole replicas.
    fitting = [index for index, share in enumerate(free) if share >= size - _EPSILON]
    if not fitting:
        return False
    best = min(fitting, key=lambda index: free[index])
    free[best] -= size
    return True


class PlanError(ValueError):
    """A pool whose need no node type meets; the message names the limit it passes."""


class HeadNode(StrictModel):
    instance_type: str
    vcpus: PositiveInt
    usd_per_hour: float = Field(ge=0)


class PoolChoice(StrictModel):
    need: PoolNeed
    node_type: NodeType
    reason: str


class NodeTypePlan(StrictModel):
    node_type: NodeType
    pools: list[str]
    min_workers: NonNegativeInt = Field(description="Nodes the pools' minimum replicas need: kept up.")
    max_workers: NonNegativeInt = Field(description="Nodes the pools' peak needs: the autoscaler's cap.")
    reason: str

    @property
    def usd_per_hour_at_min(self) -> float:
        return self.min_workers * self.node_type.usd_per_hour

    @property
    def usd_per_hour_at_peak(self) -> float:
        return self.max_workers * self.node_type.usd_per_hour


class ClusterPlan(StrictModel):
    choices: list[PoolChoice]
    node_types: list[NodeTypePlan]
    head: HeadNode
    config_edits: list[str] = Field(
        default_factory=list,
        description="Changes the Trilemma config needs so its replicas ask Ray for the planned nodes.",
    )
    cpu_pools: list[str] = Field(default_factory=list, description="Pools on CPUs: not planned here.")

    @property
    def usd_per_hour_at_min(self) -> float:
        return self.head.usd_per_hour + sum(plan.usd_per_hour_at_min for plan in self.node_types)

    @property
    def usd_per_hour_at_peak(self) -> float:
        return self.head.usd_per_hour + sum(plan.usd_per_hour_at_peak for plan in self.node_types)

    def max_workers(self) -> dict[str, int]:
        return {plan.node_type.name: plan.max_workers for plan in self.node_types}

    def report(self) -> list[str]:
        """The plan for people: each pool's choice with its reason, the node types, the bill."""
        lines = [f"pool {choice.need.pool}: {choice.reason}" for choice in self.choices]
        lines += [f"pool {name}: runs on CPUs (the head's, or CPU workers you add): not planned" for name in self.cpu_pools]
        lines.append("node types:")
        lines += [f"  {plan.node_type.name}: {plan.reason}" for plan in self.node_types]
        lines.append(f"  head {self.head.instance_type}: {self.head.vcpus} vCPUs, ${self.head.usd_per_hour:.2f}/h")
        lines.append(f"$/hour: ${self.usd_per_hour_at_min:.2f} at minimum ({_bill(self, 'min')}), "
                     f"${self.usd_per_hour_at_peak:.2f} at peak ({_bill(self, 'peak')})")
        if self.config_edits:
            lines.append("the Trilemma config must change for its replicas to ask for these nodes:")
            lines += [f"  {edit}" for edit in self.config_edits]
        return lines


def _bill(plan: ClusterPlan, at: str) -> str:
    parts = [f"head {plan.head.instance_type} ${plan.head.usd_per_hour:.2f}/h"]
    for node_plan in plan.node_types:
        count = node_plan.min_workers if at == "min" else node_plan.max_workers
        if count:
            parts.append(f"{count} x {node_plan.node_type.label} ${node_plan.node_type.usd_per_hour:.2f}/h")
    return " + ".join(parts)


def _pool_cost(need: PoolNeed, node_type: NodeType) -> tuple[float, float]:
    """$/h of the nodes this pool alone needs at peak and at minimum."""
    peak = nodes_needed(node_type.gpus, [need.gpus_per_replica] * need.max_replicas)
    low = nodes_needed(node_type.gpus, [need.gpus_per_replica] * need.min_replicas)
    return peak * node_type.usd_per_hour, low * node_type.usd_per_hour


def _candidates(need: PoolNeed, node_types: list[NodeType]) -> tuple[list[NodeType], str]:
    """The node types that meet the need, and the need in words; PlanError when none does."""
    # Spot allowed means either purchase may serve; an on-demand pool never lands on spot.
    purchases = {"on_demand", "spot"} if need.purchase == "spot" else {"on_demand"}
    bought = [t for t in node_types if t.purchase in purchases]
    if need.memory_per_gpu_gib is None:
        fitting = [t for t in bought if t.accelerator.lower() == need.accelerator.lower()]
        if not fitting:
            known = sorted({t.accelerator for t in node_types})
            raise PlanError(f"pool {need.pool} names accelerator {need.accelerator!r} and sets no "
                            f"gpu_memory_gib, but no node type has it; GPU node types: {known}")
        meets = f"of {need.accelerator}, which the pool names (it sets no gpu_memory_gib)"
    else:
        memory = need.memory_per_gpu_gib
        fitting = [t for t in bought if t.gpu_memory_gib >= memory]
        if not fitting:
            largest = max(bought, key=lambda t: t.gpu_memory_gib)
            raise PlanError(f"pool {need.pool} needs {need.describe()} ({memory:g} GiB per GPU), more "
                            f"than any GPU of the catalog has: the largest is {largest.accelerator} with "
                            f"{largest.gpu_memory_gib:g} GiB")
        meets = f"with >= {memory:g} GiB per GPU"
    fitting, meets = _holding_the_weights(need, fitting, meets)
    holding = [t for t in fitting if t.gpus >= need.whole_gpus]
    if not holding:
        most = max(fitting, key=lambda t: t.gpus)
        raise PlanError(f"pool {need.pool} needs {need.whole_gpus} GPUs per replica on one node, more "
                        f"than any fitting node type has: the most is {most.gpus} ({most.label})")
    return holding, meets


def _holding_the_weights(need: PoolNeed, fitting: list[NodeType], meets: str) -> tuple[list[NodeType], str]:
    """Only GPUs whose memory (the pool's share of it) holds the pool's own model's weights and
    its fixed KV cache: a pool's memory need is the operator's estimate, its weights are not."""
    held = need.held_per_gpu_gib
    if held is None:
        return fitting, meets
    if need.memory_per_gpu_gib is not None and held > need.gpu_memory_gib:
        raise PlanError(f"pool {need.pool} sets gpu_memory_gib {need.gpu_memory_gib:g}, less than "
                        f"{need.held_described()} take ({held:.1f} GiB per GPU)")
    share = need.gpus_per_replica if need.shares_a_gpu else 1.0
    holding = [t for t in fitting if t.gpu_memory_gib * share >= held]
    if not holding:
        largest = max(fitting, key=lambda t: t.gpu_memory_gib)
        raise PlanError(f"pool {need.pool}: {need.held_described()} take {held:.1f} GiB per GPU, more than "
                        f"its share of the largest fitting GPU holds ({largest.accelerator}: "
                        f"{largest.gpu_memory_gib * share:.1f} GiB)")
    return holding, f"{meets}, holding {need.held_described()}"


def choose_node_type(need: PoolNeed, node_types: list[NodeType]) -> PoolChoice:
    """The type whose nodes serve the pool's peak for the least money (then its minimum, then
    the lowest $/GPU-hour): a small node can beat a cheaper GPU sold eight at a time."""
    candidates, meets = _candidates(need, node_types)
    ranked = sorted(candidates, key=lambda t: (*_pool_cost(need, t), t.usd_per_gpu_hour, t.name))
    best = ranked[0]
    peak_usd, _ = _pool_cost(need, best)
    peak_nodes = nodes_needed(best.gpus, [need.gpus_per_replica] * need.max_replicas)
    spot = "spot allowed" if need.purchase == "spot" else "on-demand only"
    reason = (
        f"needs {need.describe()}, {_span(need)}, {spot}; "
        f"{best.label}: ${best.usd_per_gpu_hour:.2f}/h per GPU; {_count(need.max_replicas, 'replica')} at peak -> "
        f"{_nodes(peak_nodes, best)}, ${peak_usd:.2f}/h, the least of the types {meets}"
    )
    if len(ranked) > 1:
        reason += f" (next: {ranked[1].label}, ${_pool_cost(need, ranked[1])[0]:.2f}/h)"
    return PoolChoice(need=need, node_type=best, reason=reason)


def _span(need: PoolNeed) -> str:
    if need.min_replicas == need.max_replicas:
        return _count(need.max_replicas, "replica")
    return f"{need.min_replicas}-{need.max_replicas} replicas"


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _nodes(count: int, node_type: NodeType) -> str:
    return f"{_count(count, 'node')} of {_count(node_type.gpus, 'GPU')}"


def plan_cluster(needs: list[PoolNeed], node_types: list[NodeType], head: HeadNode,
                 cpu_pools: list[str] | None = None) -> ClusterPlan:
    """Each pool on its cheapest type; pools that chose one type share its nodes, so the type's
    node counts come from all their replicas together."""
    choices = [choose_node_type(need, node_types) for need in needs]
    by_type: dict[str, list[PoolChoice]] = defaultdict(list)
    for choice in choices:
        by_type[choice.node_type.name].append(choice)
    plans = []
    for name in sorted(by_type):
        sharing = by_type[name]
        node_type = sharing[0].node_type
        low = nodes_needed(node_type.gpus, [c.need.gpus_per_replica for c in sharing for _ in range(c.need.min_replicas)])
        peak = nodes_needed(node_type.gpus, [c.need.gpus_per_replica for c in sharing for _ in range(c.need.max_replicas)])
        pools = ", ".join(f"{c.need.pool} {_span(c.need)} x {c.need.gpus_per_replica:g} GPU" for c in sharing)
        plans.append(NodeTypePlan(
            node_type=node_type, pools=[c.need.pool for c in sharing], min_workers=low, max_workers=peak,
            reason=f"{node_type.label}, {node_type.gpus} x {node_type.accelerator} per node, "
                   f"${node_type.usd_per_hour:.2f}/h; {pools} -> min_workers {low}, max_workers {peak}",
        ))
    return ClusterPlan(choices=choices, node_types=plans, head=head, config_edits=_config_edits(choices),
                       cpu_pools=list(cpu_pools or []))


def _config_edits(choices: list[PoolChoice]) -> list[str]:
    """A pool's replicas ask Ray for the accelerator the pool names; nodes of another type would
    never take them, so a choice that differs from the config must be written back to it."""
    edits = []
    for choice in choices:
        need, chosen = choice.need, choice.node_type
        if chosen.accelerator.lower() != need.accelerator.lower():
            edits.append(f"pools.{need.pool}.accelerator: {need.accelerator} -> {chosen.accelerator}")
        if chosen.purchase != need.purchase:
            edits.append(f"pools.{need.pool}.purchase: {need.purchase} -> {chosen.purchase} "
                         f"(on-demand {chosen.instance_type} costs less than spot in the catalog)")
    return edits
