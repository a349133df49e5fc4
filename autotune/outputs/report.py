"""Readable plans: the terminal summary and the run's report.md, with why the winner wins."""

from __future__ import annotations

from autotune.cost.estimate import Estimate
from autotune.cost.memory import TENSOR_BYTES_UNCERTAINTY
from autotune.outputs.serving_report import inference_baseline_lines, inference_baseline_table, inference_summary
from autotune.plan.plan import Plan

__all__ = ["plan_table", "summary_text", "report_markdown", "why_it_wins", "stage_breakdown_text", "memory_line", "LAYERS_KEY"]


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def _s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def _recompute(stage) -> str:
    """full:N when only the first N layers of the stage are recomputed; +modules for named modules."""
    if stage.recompute_modules:
        return f"{stage.recompute}+{','.join(stage.recompute_modules)}"
    return f"{stage.recompute}:{stage.recompute_layers}" if stage.recompute_layers else stage.recompute


def _kv_place(stage) -> str:
    return stage.kv_cache_in if stage.kv_cache_in_share >= 1.0 else f"{stage.kv_cache_in}:{stage.kv_cache_in_share:.0%}"


def plan_table(plan: Plan, estimate: Estimate | None = None) -> list[str]:
    """One line per stage: its layers (E: with the embedding, H: with the output head), GPUs and
    intra-op choices (and memory if known). An inference plan has no recomputation or ZeRO
    columns; it shows where the KV cache lives when that is not HBM."""
    inference = estimate is not None and estimate.inference is not None
    experts = any(s.ep > 1 or s.etp > 1 for s in plan.stages)  # MoE columns only where used
    fp8 = any(s.fp8 for s in plan.stages)
    kv = inference and any(s.kv_cache_in != "hbm" for s in plan.stages)
    training = (lambda s: f" {_recompute(s):>9} {s.zero:>4}") if not inference else (lambda s: "")
    optional = [(name, cell) for name, cell in _OPTIONAL_COLUMNS if any(cell(s) != "-" for s in plan.stages)]
    lines = [f"{'stage':>5} {'layers':>9} {'gpus':>5} {'tp':>3} {'cp':>3} {'dp':>4} "
             + (f"{'ep':>3} {'etp':>3} " if experts else "") + f"{'sp':>3}"
             + ("" if inference else f" {'recompute':>9} {'zero':>4}") + f" {'mesh order':>10}"
             + (" fp8" if fp8 else "") + (f" {'kv cache':>9}" if kv else "")
             + "".join(f" {name:>9}" for name, _ in optional) + ("  memory/GPU" if estimate else "")]
    for i, s in enumerate(plan.stages):
        extra = f"  {_gib(estimate.stages[i].peak_memory_bytes)}" if estimate and estimate.stages else ""
        tags = ("E" if s.has_embedding else "") + ("H" if s.has_head else "")
        lines.append(f"{i:>5} {f'{s.layers[0]}-{s.layers[1] - 1}':>9}{tags:2s}{s.num_gpus:>4} {s.tp:>3} {s.cp:>3} "
                     f"{s.dp:>4} " + (f"{s.ep:>3} {s.etp:>3} " if experts else "")
                     + f"{'on' if s.sequence_parallel else '-':>3}" + training(s) + f" {s.mesh_order:>10}"
                     + (f" {'on' if s.fp8 else '-':>3}" if fp8 else "") + (f" {_kv_place(s):>9}" if kv else "")
                     + "".join(f" {cell(s):>9}" for _, cell in optional) + extra)
    return lines


def _fsdp(s) -> str:
    """The ZeRO-3/FSDP variant an export depends on: kept gathered for the step, or HSDP's shard group."""
    if s.zero != 3 or (s.reshard_after_forward and s.dp_shard in (0, s.dp)):
        return "-"
    return ("keep" if not s.reshard_after_forward else "") + (f"hsdp{s.dp_shard}" if s.dp_shard not in (0, s.dp) else "")


def _offloaded(s) -> str:
    names = {"weights_in": "w", "optimizer_in": "opt", "gradients_in": "grad", "activations_in": "act"}
    return ",".join(short for name, short in names.items() if getattr(s, name) != "hbm") or "-"


# Columns shown only where a stage differs from the default, each a setting an export depends on.
_OPTIONAL_COLUMNS = (("fsdp", _fsdp), ("cp comm", lambda s: s.cp_comm if s.cp > 1 and s.cp_comm != "ring" else "-"),
                     ("offload", _offloaded),
                     ("act.off", lambda s: str(s.activation_offload_layers) if s.activation_offload_layers else "-"))


LAYERS_KEY = "layers: the stage's transformer layers, first-last; E: it also holds the embedding, H: the output head"


def summary_text(plan: Plan, estimate: Estimate, capacity_bytes: float, workload=None) -> list[str]:
    """The plan's schedule, time, throughput and memory; an inference plan's in serving terms
    (``workload`` gives its targets)."""
    if estimate.inference is not None:
        return inference_summary(plan, estimate, capacity_bytes, workload)
    sched = f"{plan.schedule}" + (f", {plan.vpp} virtual stages" if plan.vpp > 1 else "")
    return [
        f"pipeline: {plan.pp} stage(s), {sched}; micro-batch {plan.micro_batch} x {plan.num_microbatches} "
        f"micro-batches x dp {plan.dp} = global batch {plan.global_batch}",
        f"step time {_s(estimate.step_time_s)} (+-{estimate.uncertainty_pct:.0f}%), "
        f"{estimate.tokens_per_s:,.0f} tokens/s, {estimate.tflops_per_gpu:.1f} TFLOP/s per GPU, MFU {100 * estimate.mfu:.1f}%",
        memory_line(estimate, capacity_bytes),
    ]


def memory_line(estimate: Estimate, capacity_bytes: float) -> str:
    """The peak stage's memory against the capacity: its tensors, the allocator's reserve beyond
    them and the device's reserved bytes (CUDA context, libraries), and whether it is within
    the uncertainty of its tensors' bytes of the limit."""
    parts = memory_parts(estimate)
    line = (f"memory {_gib(estimate.peak_memory_bytes_per_gpu)} of {_gib(capacity_bytes)} per GPU (peak stage: "
            + ", ".join(f"{_gib(v)} {k}" for k, v in parts.items() if v > 0) + ")")
    if estimate.memory_at_risk:
        line += (f"; within the +-{100 * TENSOR_BYTES_UNCERTAINTY:.0f}% uncertainty of its tensors' bytes "
                 "of the limit: it may not fit")
    return line


def memory_parts(estimate: Estimate) -> dict[str, float]:
    """{"tensors", "allocator reserve", "reserved"} bytes of the peak stage."""
    mem = estimate.memory_breakdown
    held = mem.get("allocator_bytes", 0.0) + mem.get("reserved_bytes", 0.0)
    return {"tensors": estimate.peak_memory_bytes_per_gpu - held, "allocator reserve": mem.get("allocator_bytes", 0.0),
            "reserved": mem.get("reserved_bytes", 0.0)}


def _dominant_differences(best: Estimate, other: Estimate) -> list[str]:
    parts = []
    for key, label in (("pipeline_bubble_s", "pipeline bubble"), ("tp_cp_comm_s", "exposed TP/CP communication"),
                       ("dp_comm_s", "exposed data-parallel/ZeRO communication"), ("compute_s", "compute (incl. recomputation)"),
                       ("pp_comm_s", "pipeline sends"), ("optimizer_s", "optimizer step"), ("offload_s", "offload transfers"),
                       ("ep_comm_s", "exposed expert-parallel all-to-all"),
                       ("host_s", "GPU waiting for the host's kernel issue")):
        delta = other.breakdown.get(key, 0.0) - best.breakdown.get(key, 0.0)
        if abs(delta) > 0.02 * best.step_time_s:
            parts.append((delta, f"{label} {_s(best.breakdown.get(key, 0.0))} vs {_s(other.breakdown.get(key, 0.0))}"))
    parts.sort(reverse=True)
    return [p[1] for p in parts[:3]]


def why_it_wins(best: Estimate, baselines, workload=None) -> list[str]:
    """For each baseline, what the winning plan saves (the largest breakdown differences); for
    inference, each baseline's TPS, TPOT and TTFT beside the plan's."""
    if best.inference is not None:
        return inference_baseline_lines(best, baselines, workload)
    lines = []
    for b in baselines:
        if b.estimate is None:
            lines.append(f"- {b.name}: no plan of this shape could be built ({b.note or 'invalid degrees'})")
            continue
        if not b.estimate.fits:
            lines.append(f"- {b.name}: does not fit ({b.estimate.reason})")
            continue
        lines.append(f"- {b.name} ({b.description}): {_s(b.estimate.step_time_s)}, {_versus(best, b.estimate)}")
    return lines


def _versus(best: Estimate, other: Estimate) -> str:
    """How the plan compares with a baseline's plan, and on what."""
    diffs = _dominant_differences(best, other)
    detail = "; ".join(diffs) if diffs else "the same time breakdown within 2%"
    ratio = other.step_time_s / best.step_time_s
    if ratio < 0.995:  # a plan outside the searched space (the runtime's) can be faster
        return f"{1 / ratio:.2f}x faster than the plan: {detail}"
    if ratio < 1.005:
        return "as fast as the plan (the search chose this baseline's plan or one as fast)" + (f": {detail}" if diffs else "")
    return f"the plan is {ratio:.2f}x faster: {detail}"


def stage_breakdown_text(estimate: Estimate) -> list[str]:
    """Per stage: per-micro-batch time parts, step tail, and memory by class. An inference stage
    shows its memory (the KV cache in activations); its time is the workload's phases above."""
    if estimate.inference is not None:
        return [f"stage {st.index} layers {st.layers[0]}-{st.layers[1] - 1} on {st.num_gpus} GPUs: peak "
                f"{_gib(st.peak_memory_bytes)}{'' if st.fits else ' (DOES NOT FIT)'}; memory: "
                + ", ".join(f"{'KV cache + activations' if k == 'activations_bytes' else k[:-6]} {_gib(v)}"
                            for k, v in st.memory_bytes.items() if v > 0) for st in estimate.stages]
    lines = []
    for st in estimate.stages:
        t = {k: v for k, v in st.time_s.items() if v > 0}
        mem = {k: v for k, v in st.memory_bytes.items() if v > 0}
        lines.append(f"stage {st.index} layers {st.layers[0]}-{st.layers[1] - 1} on {st.num_gpus} GPUs: "
                     f"{_s(st.microbatch_time_s)} per micro-batch, {st.inflight_microbatches:g} in flight, "
                     f"peak {_gib(st.peak_memory_bytes)}{'' if st.fits else ' (DOES NOT FIT)'}")
        lines.append("   time: " + ", ".join(f"{k[:-2]} {_s(v)}" for k, v in t.items()))
        lines.append("   memory: " + ", ".join(f"{k[:-6]} {_gib(v)}" for k, v in mem.items()))
    return lines


def _baseline_table(baselines) -> list[str]:
    lines = ["| baseline | step time | tokens/s | MFU | memory/GPU | fits |", "|---|---|---|---|---|---|"]
    for b in baselines:
        e = b.estimate
        if e is not None:
            lines.append(f"| {b.name} | {_s(e.step_time_s)} | {e.tokens_per_s:,.0f} | {100 * e.mfu:.1f}% | "
                         f"{_gib(e.peak_memory_bytes_per_gpu)} | {'yes' if e.fits else 'no'} |")
    return lines


def report_markdown(*, title: str, plan: Plan, estimate: Estimate, capacity_bytes: float, baselines,
                    context: list[str], stats: dict | None = None, workload=None) -> str:
    inference = estimate.inference is not None
    per = "seconds for the whole batch: prefill and decode steps" if inference else "seconds per step"
    lines = [f"# {title}", "", *[f"- {c}" for c in context], "", "## Plan", "", "```", *plan_table(plan, estimate), "```",
             "", f"({LAYERS_KEY})", "", *summary_text(plan, estimate, capacity_bytes, workload), "",
             f"## Time breakdown ({per})", ""]
    lines += [f"| {k[:-2]} | {v:.4f} | {100 * v / estimate.step_time_s:.1f}% |" for k, v in estimate.breakdown.items() if v > 0]
    lines += ["", "## Per stage", "", "```", *stage_breakdown_text(estimate), "```", "", "## Baselines", "",
              *(inference_baseline_table(baselines, workload) if inference else _baseline_table(baselines))]
    lines += ["", "## Why this plan wins", "", *why_it_wins(estimate, baselines, workload)]
    if stats:
        lines += ["", "## Search", "", *[f"- {k}: {v}" for k, v in stats.items()]]
    return "\n".join(lines) + "\n"
