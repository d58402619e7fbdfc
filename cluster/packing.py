"""How many nodes of one type hold a set of replicas, placed the way Ray places their bundles:
a replica of whole GPUs on free GPUs of one node, a replica on a share of a GPU within one GPU."""

from __future__ import annotations

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
