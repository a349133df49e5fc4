"""Where a stage's TP, CP and DP groups fall on the node hierarchy, from its mesh order."""

from __future__ import annotations

from functools import lru_cache

from autotune.cost.comm import GroupSpan

__all__ = ["group_spans"]


@lru_cache(maxsize=4096)
def group_spans(order: str, tp: int, cp: int, dp: int, gpus_per_node: int,
                first_gpu: int = 0) -> dict[str, GroupSpan]:
    """Spans of the ``tp``, ``cp``, ``dp`` and combined ``dp_cp`` groups of a stage.

    ``order`` lists the groups innermost first (``"tp-cp-dp"``: TP ranks adjacent). Ranks are
    numbered node-major from ``first_gpu``; the group holding the stage's first rank is
    enumerated and its nodes counted, which is exact for any order and node size.
    """
    dims = order.split("-")
    sizes = {"tp": tp, "cp": cp, "dp": dp}
    strides: dict[str, int] = {}
    stride = 1
    for dim in dims:
        strides[dim] = stride
        stride *= sizes[dim]

    def span(members: tuple[str, ...]) -> GroupSpan:
        ranks = [first_gpu]
        for dim in members:
            ranks = [r + i * strides[dim] for r in ranks for i in range(sizes[dim])]
        nodes = {r // gpus_per_node for r in ranks}
        return GroupSpan(len(ranks) // len(nodes), len(nodes))

    return {"tp": span(("tp",)), "cp": span(("cp",)), "dp": span(("dp",)), "dp_cp": span(("dp", "cp"))}
