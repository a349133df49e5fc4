"""Shrink a plan, its model and its batch to fit this machine while keeping the plan's shape.

A plan made for 16 GPUs keeps its kinds of parallelism: every degree above 1 stays above 1
while the world fits (degrees over 2 are halved first, data parallel before tensor before
pipeline parallel; only then are degrees dropped to 1, in the same order). Its schedule, vpp,
recomputation, ZeRO stage, sequence parallelism and mesh order are kept. The model keeps its
architecture (FFN kind, norm, positions, GQA ratio, tying, dropout) at a smaller width and
depth; stages keep their share of the layers. Context parallelism and offloading are not in
the reference runner and are dropped, with a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from autotune.errors import AutotuneError, require
from autotune.plan.plan import Plan
from autotune.spec.model import ModelSpec
from autotune.spec.workload import TrainingWorkload

__all__ = ["ScaleTarget", "ScaledCase", "parse_scale", "scale_case", "scaled_degrees"]


@dataclass(frozen=True, kw_only=True)
class ScaleTarget:
    """Sizes the scaled case aims at (each a ceiling: a smaller original is kept)."""

    world: int = 4
    hidden: int = 256
    head_dim: int = 64
    layers: int = 4
    seq: int = 128
    vocab: int = 2048
    micro_batch: int = 2
    microbatches: int = 8

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            require(isinstance(value, int) and value > 0, f"scale.{f.name}", f"must be a positive integer, got {value!r}")


def parse_scale(text: str, *, world: int) -> ScaleTarget:
    """``--scale auto`` or ``--scale hidden=256,layers=4,seq=128,...`` (keys of ScaleTarget)."""
    values: dict[str, int] = {"world": world}
    names = [f.name for f in fields(ScaleTarget)]
    for item in (x.strip() for x in text.split(",")):
        if item in ("", "auto"):
            continue
        key, sep, value = item.partition("=")
        require(bool(sep) and key in names, "scale",
                f"{item!r} is not KEY=VALUE with KEY one of {', '.join(names)} (or 'auto')")
        try:
            values[key] = int(value)
        except ValueError:
            raise AutotuneError(f"scale.{key}", f"must be a positive integer, got {value!r}") from None
    return ScaleTarget(**values)


@dataclass(frozen=True, kw_only=True)
class ScaledCase:
    model: ModelSpec
    workload: TrainingWorkload
    plan: Plan
    notes: tuple[str, ...]


def scaled_degrees(degrees: dict[str, int], world: int) -> dict[str, int]:
    """Degrees whose product fits ``world``: halve those above 2, then drop to 1 (dp, tp, pp)."""
    out = dict(degrees)
    for floor in (2, 1):
        for key in ("dp", "tp", "pp"):
            while math.prod(out.values()) > world and out[key] > floor:
                out[key] = max(floor, out[key] // 2)
    return out


def _round_to(value: float, multiple: int) -> int:
    return max(multiple, int(round(value / multiple)) * multiple)


def _scaled_model(model: ModelSpec, target: ScaleTarget, tp: int, seq: int) -> ModelSpec:
    """Narrower model: head_dim and hidden capped, GQA kept (a divisor of the group ratio that
    fits), head and FFN counts divisible by ``tp``."""
    if not model.has_attention:
        hidden = _round_to(min(model.hidden_size, target.hidden), 8 * tp)
        ffn = _round_to(hidden * model.ffn_hidden_size / model.hidden_size, 8 * tp)
        return model.with_changes(hidden_size=hidden, ffn_hidden_size=ffn, max_seq_len=seq)
    head_dim = min(model.head_dim, target.head_dim)
    ratio = model.num_heads // model.num_kv_heads
    group = max(g for g in range(1, ratio + 1) if ratio % g == 0 and (g == 1 or g * tp * head_dim <= target.hidden))
    kv_heads = _round_to(min(model.num_kv_heads, max(1, target.hidden // (group * head_dim))), tp)
    hidden = kv_heads * group * head_dim
    ffn = _round_to(hidden * model.ffn_hidden_size / model.hidden_size, 8 * tp)
    vocab = _round_to(min(model.vocab_size, target.vocab), 8 * tp)
    return model.with_changes(hidden_size=hidden, num_heads=kv_heads * group, num_kv_heads=kv_heads,
                              ffn_hidden_size=ffn, vocab_size=vocab, max_seq_len=seq)


# Routed experts kept when scaling an MoE model down (its top-k is kept, up to this many).
MAX_SCALED_EXPERTS = 8


def _scaled_experts(model: ModelSpec, scaled: ModelSpec) -> ModelSpec:
    """Expert widths scaled with the hidden size, at most MAX_SCALED_EXPERTS experts, and one
    leading dense layer if the model has any (so the scaled model still mixes both kinds)."""
    if not model.is_moe:
        return scaled
    ratio = scaled.hidden_size / model.hidden_size
    experts = min(model.num_experts, MAX_SCALED_EXPERTS)
    shared = _round_to(ratio * model.shared_expert_ffn_hidden_size, 8) if model.num_shared_experts else 0
    return scaled.with_changes(num_experts=experts, num_experts_per_token=min(model.num_experts_per_token, experts),
                               expert_ffn_hidden_size=_round_to(ratio * model.expert_ffn_hidden_size, 8),
                               shared_expert_ffn_hidden_size=shared,
                               first_k_dense_layers=min(model.first_k_dense_layers, 1),
                               moe_layer_frequency=min(model.moe_layer_frequency, max(1, scaled.num_layers - 1)))


def _expert_degrees(model: ModelSpec, stage, stage_gpus: int, notes: list[str]) -> dict:
    """ep shrunk to divide the scaled experts and stage, etp 1, and the reference runner's DDP
    (zero 0, tp 1 beside expert parallelism)."""
    if not model.is_moe:
        return {}
    ep = max(e for e in range(1, stage_gpus + 1) if stage_gpus % e == 0 and model.num_experts % e == 0
             and e <= stage.ep)
    out = {"ep": ep, "etp": 1}
    changed = [f"{name} {old} -> {value}" for name, old, value in (("ep", stage.ep, ep), ("etp", stage.etp, 1))
               if old != value]
    if changed:
        notes.append("expert degrees " + ", ".join(changed))
    if ep > 1 and stage.zero:
        out["zero"] = 0
        notes.append(f"zero {stage.zero} -> 0: the reference runner runs expert parallelism beside DDP")
    return out


def _stage_layers(plan: Plan, total: int) -> list[int]:
    """Each stage's share of ``total`` layers, a positive multiple of vpp."""
    vpp = plan.vpp
    return [vpp * max(1, round(s.num_layers / plan.num_layers * total / vpp)) for s in plan.stages]


def _notes_for(plan: Plan, degrees: dict[str, int], new: dict[str, int]) -> list[str]:
    notes = []
    if degrees != new:
        notes.append("degrees " + ", ".join(f"{k} {degrees[k]} -> {new[k]}" for k in degrees if degrees[k] != new[k]))
    if any(s.cp > 1 for s in plan.stages):
        notes.append("context parallelism dropped (cp -> 1): not in the reference runner")
    if any((s.weights_in, s.optimizer_in, s.activations_in) != ("hbm",) * 3 for s in plan.stages):
        notes.append("offloading dropped (all tensors in device memory): not in the reference runner")
    return notes


def scale_case(model: ModelSpec, workload: TrainingWorkload, plan: Plan, target: ScaleTarget,
               dtypes: tuple[str, ...] = ("fp32",)) -> ScaledCase:
    """The plan's shape on a small model and batch that ``target.world`` processes can run.

    ``dtypes`` are those the local profile can score; another workload dtype becomes fp32.
    """
    stage0 = plan.stages[0]
    degrees = {"dp": plan.dp, "tp": stage0.tp, "pp": plan.pp}
    new = scaled_degrees(degrees, target.world)
    if model.is_moe and new["tp"] > 1:  # the reference runner's MoE layers have no TP plan
        new = {**new, "dp": new["dp"] * new["tp"], "tp": 1}
    notes = _notes_for(plan, degrees, new)
    if new["pp"] < plan.pp:
        plan = _merge_stages(plan, new["pp"])
    seq = min(workload.seq_len, target.seq)
    scaled_model = _scaled_model(model, target, new["tp"], seq)
    layers = _stage_layers(plan, max(target.layers, plan.pp * plan.vpp))
    scaled_model = _scaled_experts(model, scaled_model.with_changes(num_layers=sum(layers)))
    micro = min(plan.micro_batch, target.micro_batch)
    count = min(plan.num_microbatches, target.microbatches)
    if plan.pp > 1 and plan.num_microbatches >= plan.pp:
        count = max(plan.pp, count // plan.pp * plan.pp)  # whole rounds of the pipeline
    dtype = workload.dtype if workload.dtype in dtypes else "fp32"
    if dtype != workload.dtype:
        notes.append(f"dtype {workload.dtype} -> fp32: the local profile has no {workload.dtype} fits")
    scaled_workload = replace(workload, global_batch=micro * count * new["dp"], seq_len=seq, dtype=dtype)
    stages, first = [], 0
    experts = _expert_degrees(scaled_model, plan.stages[0], new["tp"] * new["dp"], notes)
    for stage, count_layers in zip(plan.stages, layers):
        stages.append(replace(stage, layers=(first, first + count_layers), tp=new["tp"], dp=new["dp"], cp=1,
                              num_gpus=new["tp"] * new["dp"], sequence_parallel=stage.sequence_parallel and new["tp"] > 1,
                              weights_in="hbm", optimizer_in="hbm", activations_in="hbm", **experts))
        first += count_layers
    scaled_plan = replace(plan, gpus=new["tp"] * new["dp"] * new["pp"], micro_batch=micro, num_microbatches=count,
                          stages=tuple(stages), grad_bucket_bytes=0.0)
    notes.append(f"model {scaled_model.num_layers} layers x hidden {scaled_model.hidden_size}, "
                 f"batch {scaled_workload.global_batch} x {seq} tokens")
    return ScaledCase(model=scaled_model, workload=scaled_workload, plan=scaled_plan, notes=tuple(notes))


def _merge_stages(plan: Plan, pp: int) -> Plan:
    """Fewer pipeline stages: consecutive stages merged, layers and options of the first kept."""
    groups = [plan.stages[i * plan.pp // pp:(i + 1) * plan.pp // pp] for i in range(pp)]
    stages = tuple(replace(g[0], layers=(g[0].layers[0], g[-1].layers[1]), has_head=g[-1].has_head)
                   for g in groups)
    vpp = plan.vpp if pp > 1 else 1
    schedule = plan.schedule if pp > 1 or plan.schedule != "interleaved" else "1f1b"
    return replace(plan, stages=stages, gpus=sum(s.num_gpus for s in stages), vpp=vpp, schedule=schedule)
