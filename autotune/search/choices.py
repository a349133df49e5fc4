"""Intra-operator choices of one stage, and which of them a model and cluster allow."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from autotune.cost.mesh import group_spans
from autotune.plan.plan import StagePlan
from autotune.search.space import SearchSpace
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

__all__ = ["StageChoice", "valid_stage_sizes", "choice_values", "enumerate_choices", "make_choice", "CHOICE_PARAMS"]

CHOICE_PARAMS = ("tp", "recompute", "zero", "mesh_order")


@dataclass(frozen=True, kw_only=True)
class StageChoice:
    """What Optuna picks for a stage of ``tp * cp`` model-parallel GPUs per replica."""

    tp: int
    cp: int
    sequence_parallel: bool
    recompute: str
    zero: int
    mesh_order: str

    def stage_plan(self, *, dp: int, layers: tuple[int, int] = (0, 1), has_embedding: bool = False,
                   has_head: bool = False) -> StagePlan:
        return StagePlan(layers=layers, has_embedding=has_embedding, has_head=has_head,
                         num_gpus=self.tp * self.cp * dp, tp=self.tp, cp=self.cp, dp=dp,
                         sequence_parallel=self.sequence_parallel, recompute=self.recompute, zero=self.zero,
                         mesh_order=self.mesh_order)

    def params(self) -> dict[str, object]:
        return {"tp": self.tp, "recompute": self.recompute, "zero": self.zero, "mesh_order": self.mesh_order}


def valid_stage_sizes(gpus: int, gpus_per_node: int) -> list[int]:
    """Submesh sizes a stage may take (Alpa's shapes): a power-of-two slice of a node that tiles
    it, or whole nodes."""
    sizes = [s for s in range(1, min(gpus, gpus_per_node) + 1) if gpus_per_node % s == 0 and gpus % s == 0]
    sizes += [k * gpus_per_node for k in range(2, gpus // gpus_per_node + 1) if gpus % (k * gpus_per_node) == 0]
    return sizes


def _tp_values(space: SearchSpace, model: ModelSpec, seq_len: int, model_parallel: int) -> list[int]:
    """TP degrees whose CP partner (model_parallel / tp) is in the space and divides the sequence."""
    out = []
    for tp in space.tp:
        if model_parallel % tp:
            continue
        cp = model_parallel // tp
        heads_ok = not model.has_attention or (model.num_heads % tp == 0 and model.num_kv_heads % tp == 0)
        cp_ok = cp in space.cp and seq_len % cp == 0 and (cp == 1 or model.has_attention)
        if heads_ok and cp_ok and model.ffn_hidden_size % tp == 0:
            out.append(tp)
    return out


def _distinct_orders(space: SearchSpace, tp: int, cp: int, dp: int, gpus_per_node: int) -> list[str]:
    """Mesh orders that place the groups differently (the others cost the same)."""
    seen, orders = set(), []
    for order in space.mesh_order:
        key = tuple(sorted(group_spans(order, tp, cp, dp, gpus_per_node).items()))
        if key not in seen:
            seen.add(key)
            orders.append(order)
    return orders


def choice_values(space: SearchSpace, model: ModelSpec, seq_len: int, cluster: ClusterSpec,
                  model_parallel: int, dp: int) -> dict[str, list]:
    """Optuna's distributions for a stage with ``model_parallel = tp * cp`` GPUs per replica."""
    tps = _tp_values(space, model, seq_len, model_parallel)
    if not tps:
        return {}
    orders = _distinct_orders(space, tps[0], model_parallel // tps[0], dp, cluster.gpus_per_node)
    for tp in tps[1:]:
        orders += [o for o in _distinct_orders(space, tp, model_parallel // tp, dp, cluster.gpus_per_node) if o not in orders]
    zeros = [z for z in space.zero if dp * (model_parallel // min(tps)) > 1 or z == 0] or [0]
    return {"tp": tps, "recompute": list(space.recompute), "zero": zeros, "mesh_order": orders}


def make_choice(space: SearchSpace, model_parallel: int, params: dict) -> StageChoice:
    tp = int(params["tp"])
    sp_mode = space.sequence_parallel[0]
    sp = tp > 1 and sp_mode != "off"
    return StageChoice(tp=tp, cp=model_parallel // tp, sequence_parallel=sp, recompute=str(params["recompute"]),
                       zero=int(params["zero"]), mesh_order=str(params["mesh_order"]))


def enumerate_choices(space: SearchSpace, model: ModelSpec, seq_len: int, cluster: ClusterSpec,
                      model_parallel: int, dp: int) -> list[StageChoice]:
    """Every distinct choice (the exhaustive reference enumerates exactly these)."""
    values = choice_values(space, model, seq_len, cluster, model_parallel, dp)
    if not values:
        return []
    out, seen = [], set()
    for combo in product(*(values[k] for k in CHOICE_PARAMS)):
        choice = make_choice(space, model_parallel, dict(zip(CHOICE_PARAMS, combo)))
        if choice not in seen:
            seen.add(choice)
            out.append(choice)
    return out
