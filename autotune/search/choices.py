"""Intra-operator choices of one stage, and which of them a model and cluster allow.

Training stages choose TP (CP follows from the stage size), recomputation, ZeRO stage, mesh
order and, when nothing fits in HBM, an offload; inference stages choose TP, mesh order, where
the KV cache lives and a cache-aware layer grouping (autotune/cost/cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from itertools import product

from autotune.cost.mesh import group_spans
from autotune.plan.plan import StagePlan
from autotune.search.space import OFFLOADS, SHARDINGS, SearchSpace
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.workload import is_training

__all__ = ["StageChoice", "valid_stage_sizes", "choice_values", "enumerate_choices", "make_choice",
           "choice_params", "OFFLOADS", "SHARDINGS"]

TRAINING_PARAMS = ("tp", "recompute", "zero", "mesh_order", "offload", "sharding", "fp8", "recompute_layers", "cp_comm")
INFERENCE_PARAMS = ("tp", "mesh_order", "kv_cache", "grouping")


@dataclass(frozen=True, kw_only=True)
class StageChoice:
    """What Optuna picks for a stage of ``tp * cp`` model-parallel GPUs per replica;
    ``placements`` are further StagePlan fields (offload, KV cache, cache grouping)."""

    tp: int
    cp: int
    sequence_parallel: bool
    recompute: str
    zero: int
    mesh_order: str
    placements: tuple[tuple[str, object], ...] = ()
    ep: int = 1
    etp: int = 1
    recompute_layers: int = 0  # with recompute "full": the first N layers of the stage only (0: all)
    fp8: bool = False
    cp_comm: str = "ring"  # the context-parallel exchange (StagePlan.cp_comm)

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields in order), kept: a search looks its classes up by
        choice about 180,000 times (DeepSeek-V3 on 2048 GPUs). Not pickled (a process's own); in
        the instance's ``vars`` once made (dataclasses.replace and asdict read the fields only)."""
        try:
            return self._hash
        except AttributeError:
            found = hash(tuple(getattr(self, name) for name in _FIELD_NAMES))
            object.__setattr__(self, "_hash", found)
            return found

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    def stage_plan(self, *, dp: int, layers: tuple[int, int] | None = None, has_embedding: bool = False,
                   has_head: bool = False) -> StagePlan:
        """The stage on ``layers``; without them a one-layer stage that the cost tables price for
        every layer count, keeping ``recompute_layers`` as it is (N >= a stage's layers is all)."""
        count = self.recompute_layers
        if layers is not None and count >= layers[1] - layers[0]:
            count = 0  # every layer of this stage: plain full recomputation
        return StagePlan(layers=layers or (0, 1), has_embedding=has_embedding, has_head=has_head,
                         num_gpus=self.tp * self.cp * dp, tp=self.tp, cp=self.cp, dp=dp,
                         sequence_parallel=self.sequence_parallel, recompute=self.recompute, zero=self.zero,
                         mesh_order=self.mesh_order, ep=self.ep, etp=self.etp, recompute_layers=count,
                         fp8=self.fp8, cp_comm=self.cp_comm, **dict(self.placements))


_FIELD_NAMES = tuple(f.name for f in fields(StageChoice))


def choice_params(workload: object) -> tuple[str, ...]:
    return TRAINING_PARAMS if is_training(workload) else INFERENCE_PARAMS


def valid_stage_sizes(gpus: int, gpus_per_node: int) -> list[int]:
    """Submesh sizes a stage may take (Alpa's shapes): a slice of a node that tiles it, or whole
    nodes. Fewer GPUs than a node that do not tile it (3, 5, 6, 7 of 8) are one submesh too, and
    stages may then take unequal slices (2 + 1 of 3 GPUs): the pipeline DP makes the sizes add up."""
    return list(_stage_sizes(gpus, gpus_per_node))


@lru_cache(maxsize=64)
def _stage_sizes(gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    if gpus < gpus_per_node and gpus_per_node % gpus:
        return tuple(sorted({s for s in range(1, gpus + 1) if gpus_per_node % s == 0} | {gpus}))
    sizes = [s for s in range(1, min(gpus, gpus_per_node) + 1) if gpus_per_node % s == 0 and gpus % s == 0]
    nodes = gpus // gpus_per_node  # whole nodes: k nodes for each divisor k >= 2 of the node count
    small = [k for k in range(1, int(nodes**0.5) + 1) if nodes % k == 0 and gpus % gpus_per_node == 0]
    sizes += [k * gpus_per_node for k in sorted({*small, *(nodes // k for k in small)}) if k >= 2]
    return tuple(sizes)


def _tp_values(space: SearchSpace, model: ModelSpec, seq_len: int, model_parallel: int, allow_cp: bool) -> list[int]:
    """TP degrees whose CP partner (model_parallel / tp) is in the space and divides the sequence."""
    out = []
    for tp in space.tp:
        if model_parallel % tp:
            continue
        cp = model_parallel // tp
        heads_ok = not model.has_attention or (model.num_heads % tp == 0 and model.num_kv_heads % tp == 0)
        cp_ok = cp in space.cp and seq_len % cp == 0 and (cp == 1 or (model.has_attention and allow_cp))
        if heads_ok and cp_ok and model.ffn_hidden_size % tp == 0:
            out.append(tp)
    return out


def _distinct_orders(space: SearchSpace, tps: list[int], model_parallel: int, dp: int, gpus_per_node: int) -> list[str]:
    """Mesh orders that place the groups differently for some TP degree (the others cost the same)."""
    orders = []
    for tp in tps:
        seen = set()
        for order in space.mesh_order:
            key = tuple(sorted(group_spans(order, tp, model_parallel // tp, dp, gpus_per_node).items()))
            if key not in seen:
                seen.add(key)
                if order not in orders:
                    orders.append(order)
    return orders


def choice_values(space: SearchSpace, model: ModelSpec, workload: object, cluster: ClusterSpec,
                  model_parallel: int, dp: int, extra: dict[str, list] | None = None) -> dict[str, list]:
    """Optuna's distributions for a stage with ``model_parallel = tp * cp`` GPUs per replica;
    ``extra`` supplies workload-specific lists (the inference KV and grouping options)."""
    training = is_training(workload)
    tps = _tp_values(space, model, workload.seq_len, model_parallel, allow_cp=training or workload.kind == "prefill")
    if not tps:
        return {}
    orders = _distinct_orders(space, tps, model_parallel, dp, cluster.gpus_per_node)
    experts = _expert_values(space, model, model_parallel * dp)
    if not training:
        return {"tp": tps, "mesh_order": orders, **(extra or {"kv_cache": ["hbm"], "grouping": ["off"]}), **experts}
    zeros = [z for z in space.zero if dp * (model_parallel // min(tps)) > 1 or z == 0] or [0]
    offload = list(space.offload) if not model.is_moe else ["none"]  # not modelled for MoE stages
    values = {"tp": tps, "recompute": list(space.recompute), "zero": zeros, "mesh_order": orders,
              "offload": offload, **experts}
    if len(space.cp_comm) > 1 and any(model_parallel // t > 1 for t in tps):
        values["cp_comm"] = list(space.cp_comm)
    node = _node_shard(model_parallel, dp, cluster.gpus_per_node)
    shardings = [s if s != "node" else f"hsdp:{node}" for s in space.sharding if s != "node" or node]
    if len(shardings) > 1:
        values["sharding"] = shardings
    return {**values, **_variant_values(space, model, workload, cluster)}


def _variant_values(space: SearchSpace, model: ModelSpec, workload: object, cluster: ClusterSpec) -> dict[str, list]:
    """FP8 on or off (a BF16 workload on a device with an FP8 GEMM rate), and partial full
    recomputation: 0 (every layer) or the first N of a stage's layers, 1 <= N < the model's."""
    out: dict[str, list] = {}
    if True in space.fp8 and workload.dtype == "bf16" and "fp8" in cluster.device.peak_flops:
        out["fp8"] = sorted(set(space.fp8))
    if space.recompute_layers and "full" in space.recompute:
        top = model.num_layers
        counts = range(1, top) if space.recompute_layers == ("all",) else space.recompute_layers
        out["recompute_layers"] = [0] + sorted({int(k) for k in counts if 0 < int(k) < top})
    return out


def _node_shard(model_parallel: int, dp: int, gpus_per_node: int) -> int:
    """The HSDP shard degree that keeps a shard group inside a node (0 when that is all of dp)."""
    per_node = max(1, gpus_per_node // model_parallel)
    return per_node if per_node < dp and dp % per_node == 0 else 0


def _sharding(params: dict) -> dict[str, object]:
    """StagePlan fields of a sharding value ("full", "keep", or "hsdp:N" from choice_values);
    they only mean something with ZeRO 3 (keep) or ZeRO >= 1 (hsdp)."""
    name = str(params.get("sharding", "full"))
    zero = int(params.get("zero", 0))
    if name == "keep" and zero >= 3:
        return {"reshard_after_forward": False}
    if name.startswith("hsdp:") and zero >= 1:
        return {"dp_shard": int(name.split(":")[1])}
    return {}


def _expert_values(space: SearchSpace, model: ModelSpec, stage_gpus: int) -> dict[str, list]:
    """Expert-parallel choices of an MoE model (none for a dense one): ep dividing the experts
    and, with etp, the stage's GPUs; the largest ep first (the expert starting points use it)."""
    if not model.is_moe:
        return {}
    etps = [t for t in space.etp if model.expert_ffn_hidden_size % t == 0 and stage_gpus % t == 0] or [1]
    eps = sorted((e for e in space.ep if model.num_experts % e == 0 and stage_gpus % e == 0), reverse=True) or [1]
    return {"ep": eps, "etp": etps}


def _placements(params: dict) -> dict[str, object]:
    out = dict(OFFLOADS[params.get("offload", "none")])
    out.update(_sharding(params))
    kv = str(params.get("kv_cache", "hbm"))
    if kv != "hbm":
        tier, share = kv.split(":")
        out.update(kv_cache_in=tier, kv_cache_in_share=float(share))
    grouping = str(params.get("grouping", "off"))
    if grouping != "off":
        layers, tokens = grouping.split("x")
        out.update(cache_group_layers=int(layers), cache_tile_tokens=int(tokens))
    return out


def make_choice(space: SearchSpace, model_parallel: int, params: dict, training: bool = True) -> StageChoice:
    tp = int(params["tp"])
    sp = training and tp > 1 and space.sequence_parallel[0] != "off"
    # etp above tp folds to tp; an ep x etp that does not divide the stage is refused by StagePlan
    # and scored as not fitting (search/tables.py)
    ep, etp = int(params.get("ep", 1)), min(int(params.get("etp", 1)), tp)
    recompute = str(params.get("recompute", "none"))
    count = int(params.get("recompute_layers", 0)) if recompute == "full" else 0
    exchange = str(params.get("cp_comm", space.cp_comm[0] if space.cp_comm else "ring"))
    return StageChoice(tp=tp, cp=model_parallel // tp, sequence_parallel=sp, recompute=recompute,
                       zero=int(params.get("zero", 0)), mesh_order=str(params["mesh_order"]),
                       placements=tuple(sorted(_placements(params).items())), ep=ep, etp=etp,
                       recompute_layers=count, fp8=bool(params.get("fp8", False)), cp_comm=exchange)


def enumerate_choices(space: SearchSpace, model_parallel: int, values: dict[str, list], training: bool = True) -> list[StageChoice]:
    """Every distinct choice of ``values`` (the exhaustive reference enumerates exactly these)."""
    if not values:
        return []
    names = list(values)
    out, seen = [], set()
    for combo in product(*(values[k] for k in names)):
        choice = make_choice(space, model_parallel, dict(zip(names, combo)), training)
        if choice not in seen:
            seen.add(choice)
            out.append(choice)
    return out
