"""Inference answers in their own terms: requests and tokens, TPS, TPOT, TTFT, the KV cache and
whether each serving target holds and by how much. No training words: no global batch, step,
recomputation, ZeRO or MFU (a decode step reads every weight for a few tokens, so MFU says
little about a serving plan)."""

from __future__ import annotations

from autotune.cost.estimate import Estimate, InferenceMetrics
from autotune.plan.plan import Plan
from autotune.spec.workload import InferenceWorkload

__all__ = ["workload_line", "target_lines", "inference_summary", "inference_baseline_lines",
           "inference_baseline_table", "targets_verdict", "inference_head_lines", "targets_dict"]

_TARGETS = (("tpot_s", "target_tpot_s", "TPOT", "per output token"),
            ("ttft_s", "target_ttft_s", "TTFT", "to the first token of the batch's last request"))


def _ms(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def _targets_text(workload: InferenceWorkload) -> str:
    given = [f"{label} <= {_ms(getattr(workload, target))}" for _, target, label, _ in _TARGETS if getattr(workload, target)]
    return "targets " + ", ".join(given) if given else "no latency targets"


def workload_line(workload: InferenceWorkload) -> str:
    """What is served, in the workload's own terms."""
    w = workload
    what = {"prefill": f"prefill of {w.batch} prompts x {w.prompt_len} tokens",
            "decode": f"decode of {w.batch} sequences, {w.decode_steps} tokens each after {w.prompt_len} cached",
            "serve": f"serve {w.batch} concurrent requests, {w.prompt_len} prompt + {w.output_len} output tokens each"}[w.kind]
    return f"{what}, {w.dtype}, attention {w.attention_impl}; {_targets_text(w)}"


def target_lines(metrics: InferenceMetrics, workload: InferenceWorkload | None, *, width: int = 5) -> list[str]:
    """TPOT and TTFT, each with its target: holds by how much, or missed by how much."""
    lines = []
    for key, target_name, label, meaning in _TARGETS:
        reached = getattr(metrics, key)
        if reached is None:
            continue
        target = getattr(workload, target_name) if workload is not None else 0.0
        text = f"{label:{width}s} {_ms(reached)} {meaning}"
        if not target:
            lines.append(f"{text} (no target)")
        elif reached <= target:
            lines.append(f"{text}: meets the {_ms(target)} target, {_ms(target - reached)} "
                         f"({100 * (target - reached) / target:.0f}%) to spare")
        else:
            lines.append(f"{text}: MISSES the {_ms(target)} target by {_ms(reached - target)} "
                         f"({100 * (reached - target) / target:.0f}% over)")
    return lines


def targets_verdict(metrics: InferenceMetrics, workload: InferenceWorkload | None) -> str:
    if workload is None or not (workload.target_tpot_s or workload.target_ttft_s):
        return "no latency targets were given"
    return "every target holds" if metrics.meets_targets else "a target is missed (above)"


def inference_summary(plan: Plan, estimate: Estimate, capacity_bytes: float,
                      workload: InferenceWorkload | None) -> list[str]:
    """The plan's replicas and what they serve: time for the batch, TPS, TPOT/TTFT against the
    targets, the KV cache and memory."""
    m = estimate.inference
    tokens = "prompt tokens" if m.tpot_s is None else "generated tokens"
    sequences = plan.micro_batch * plan.num_microbatches * plan.dp
    replica = f"{plan.gpus // plan.dp} GPU(s) in {plan.pp} pipeline stage(s)"
    lines = [f"replicas: {plan.dp} of {replica}; micro-batch {plan.micro_batch} x {plan.num_microbatches} "
             f"micro-batches x {plan.dp} replicas = {sequences} sequences at once",
             f"the batch takes {_ms(estimate.step_time_s)} (+-{estimate.uncertainty_pct:.0f}%): "
             f"TPS {m.tps:,.0f} {tokens}/s"
             + (f" (prefill {_ms(m.ttft_s)}, then {m.decode_steps} decode steps)" if m.tpot_s and m.ttft_s else ""),
             *target_lines(m, workload),
             f"KV cache {m.kv_cache_bytes_per_gpu / 2**30:.2f} GiB per GPU, {m.kv_cache_bytes / 2**30:.2f} GiB in all",
             f"memory {estimate.peak_memory_bytes_per_gpu / 2**30:.1f} GiB of {capacity_bytes / 2**30:.1f} GiB per GPU "
             "(peak stage)"]
    if workload is not None and (workload.target_tpot_s or workload.target_ttft_s):
        lines.append(f"targets: {targets_verdict(m, workload)}")
    return lines


def inference_head_lines(estimate: Estimate, workload: InferenceWorkload | None) -> list[str]:
    """The head of ``autotune evaluate``'s table for an inference plan (the training table's step
    time, throughput and MFU lines)."""
    m = estimate.inference
    phases = (f": prefill, then {m.decode_steps} decode steps" if m.tpot_s and m.ttft_s else
              f": {m.decode_steps} decode steps" if m.tpot_s else ": the prefill")
    tokens = "prompt tokens" if m.tpot_s is None else "generated tokens"
    return [f"the batch      {_ms(estimate.step_time_s)}  (+-{estimate.uncertainty_pct:.0f}%){phases}",
            f"TPS            {m.tps:,.0f} {tokens}/s   (1/TPS {_ms(m.time_per_token_s)})",
            *target_lines(m, workload, width=14),
            f"KV cache       {m.kv_cache_bytes_per_gpu / 2**30:.2f} GiB per GPU, {m.kv_cache_bytes / 2**30:.2f} GiB in all"]


def targets_dict(metrics: InferenceMetrics, workload: InferenceWorkload) -> dict[str, dict[str, float | bool]]:
    """Each given target: its value, what the plan reaches, whether it holds and the margin
    (target - reached, negative when missed), in seconds (the JSON of evaluate and search)."""
    out = {}
    for key, target_name, _, _ in _TARGETS:
        target, reached = getattr(workload, target_name), getattr(metrics, key)
        if target and reached is not None:
            out[key] = {"target_s": target, "reached_s": reached, "holds": reached <= target, "margin_s": target - reached}
    return out


def _baseline_metrics(estimate: Estimate) -> str:
    m = estimate.inference
    parts = [f"TPS {m.tps:,.0f}"]
    parts += [f"{label} {_ms(getattr(m, key))}" for key, _, label, _ in _TARGETS if getattr(m, key) is not None]
    return ", ".join(parts)


def inference_baseline_lines(best: Estimate, baselines, workload: InferenceWorkload | None) -> list[str]:
    """Each baseline's TPS, TPOT and TTFT beside the plan's, and whether it meets the targets."""
    targets = workload is not None and bool(workload.target_tpot_s or workload.target_ttft_s)
    lines = []
    for b in baselines:
        e = b.estimate
        if e is None:
            lines.append(f"- {b.name}: no plan of this shape could be built ({b.note or 'invalid degrees'})")
        elif not e.fits:
            lines.append(f"- {b.name}: does not fit ({e.reason})")
        else:
            verdict = ("; meets the targets" if e.inference.meets_targets else "; misses a target") if targets else ""
            lines.append(f"- {b.name} ({b.description}): {_baseline_metrics(e)}{verdict}; {_versus(best, e)}")
    return lines


def _versus(best: Estimate, other: Estimate) -> str:
    ratio = best.inference.tps / other.inference.tps
    if abs(ratio - 1.0) < 0.005:
        return "as many tokens/s as the plan (the search chose this baseline's plan or one as good)"
    if ratio < 1.0:  # a baseline can miss a target the plan meets, or lie outside the searched space
        return f"{1 / ratio:.2f}x the plan's tokens/s"
    return f"the plan serves {ratio:.2f}x its tokens/s"


def inference_baseline_table(baselines, workload: InferenceWorkload | None) -> list[str]:
    """report.md's baseline table for inference: TPS, TPOT, TTFT, KV cache, memory, targets."""
    rows = ["| baseline | TPS (tokens/s) | TPOT | TTFT | KV cache/GPU | memory/GPU | fits | meets targets |",
            "|---|---|---|---|---|---|---|---|"]
    for b in baselines:
        e = b.estimate
        if e is None:
            continue
        m = e.inference
        tpot, ttft = (_ms(v) if v is not None else "-" for v in (m.tpot_s, m.ttft_s))
        targets = "yes" if m.meets_targets else "no"
        if workload is None or not (workload.target_tpot_s or workload.target_ttft_s):
            targets = "(none given)"
        rows.append(f"| {b.name} | {m.tps:,.0f} | {tpot} | {ttft} | {m.kv_cache_bytes_per_gpu / 2**30:.2f} GiB | "
                    f"{e.peak_memory_bytes_per_gpu / 2**30:.1f} GiB | {'yes' if e.fits else 'no'} | {targets} |")
    return rows
