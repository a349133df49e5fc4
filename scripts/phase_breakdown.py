"""Where a one-phase (PD-disaggregated) row's step goes: one MoE layer's parts as cost/serving_phase.py splits
them (other operators, attention core, routed experts, DeepEP dispatch and combine), and the predicted rate.

    python scripts/phase_breakdown.py tests/data/sglang_newer_check.csv sglnew-038 sglnew-040

Diagnosis only: it reads the same step model check-published prices with (serving_phase._parts)."""

from __future__ import annotations

import csv
import sys

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost import serving_phase
from autotune.cost.serving_eval import replica_step_model


def _seconds(step, phase: str, context: int):
    if phase == "decode":
        return lambda n, attention=True: step.gpu_s(decodes=n, context=float(n * context) * attention, prefill_tokens=0,
                                                    pairs=0.0, sampled=n)
    return lambda n, attention=True: step.gpu_s(decodes=0, context=0.0, prefill_tokens=n,
                                                pairs=n * (context + 1) / 2.0 * attention, sampled=max(1, n // context))


def breakdown(row: dict) -> str:
    case = case_from_row(row)
    dep, p = case.deployment, case.phase
    if p is None:
        return f"{row['id']}: not a one-phase row"
    rate = serving_phase.phase_tokens_per_gpu_s(dep, phase=p.phase, per_rank=p.per_rank, context=p.context,
                                                exchange=p.exchange) * p.per_gpu_to_unit
    head = (f"{row['id']} {dep.cluster.name} {p.phase} tp {dep.tp} ep {dep.ep} {dep.dtype} eplb {dep.eplb} "
            f"{p.exchange}: {rate:,.0f} predicted, {float(row['value']):,.0f} measured ({row['unit']})")
    if p.exchange is None:
        return head
    ranks = dep.tp if dep.attention_dp else 1
    prompts = max(1, p.per_rank // p.context) * ranks
    tokens = p.per_rank * ranks if p.phase == "decode" else prompts * p.context
    step = replica_step_model(dep, max_tokens=tokens, max_sampled=tokens if p.phase == "decode" else prompts)
    parts = serving_phase._parts(dep, step, _seconds(step, p.phase, p.context), tokens, p.exchange, p.phase != "decode")
    us = ", ".join(f"{name} {getattr(parts, name) * 1e6:,.1f}" for name in ("other", "attention", "experts", "dispatch", "combine"))
    return f"{head}\n  one MoE layer (us): {us}; serial step {parts.serial_s * dep.model.num_moe_layers * 1e3:,.1f} ms"


def main(argv: list[str]) -> None:
    path, wanted = argv[0], set(argv[1:])
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if not wanted or row["id"] in wanted:
                print(breakdown(row))


if __name__ == "__main__":
    main(sys.argv[1:])
