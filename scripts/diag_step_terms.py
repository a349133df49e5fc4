"""A check row's priced step split into its terms, at a decode batch (and optional prompt tokens) you name: the
non-expert operators with the collectives, the routed experts (all layers and one layer's), a DP rank's own
operators, decode attention, prompt attention and the head with the sampler. For setting each term beside a
measured table (aiconfigurator's moe_perf / generation_attention_perf / gemm_perf parquet files).

usage: python scripts/diag_step_terms.py CSV ROW_ID DECODES [PROMPT_TOKENS [MEAN_CONTEXT]]
e.g.   python scripts/diag_step_terms.py tests/data/trtllm_pytorch_versions_check.csv trt1x-007 1869 0 814"""

from __future__ import annotations

import csv
import sys

import autotune.cost.serving_step as ss
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import replica_step_model


def _steps(dep, tokens: int):
    """The replica's step model, and the same without its routed experts."""
    ss._step_model.cache_clear()
    with_experts = replica_step_model(dep, max_tokens=tokens, max_sampled=tokens)
    original, table = ss.experts_s, ss.measured_moe_s  # the fitted experts, and the engine's measured MoE layer
    try:
        ss.experts_s = lambda *a, **k: 0 * a[7]
        ss.measured_moe_s = lambda key, counts: 0 * counts
        ss._step_model.cache_clear()
        without = replica_step_model(dep, max_tokens=tokens, max_sampled=tokens)
    finally:
        ss.experts_s, ss.measured_moe_s = original, table
        ss._step_model.cache_clear()
    return with_experts, without


def main(argv: list[str]) -> None:
    path, row_id, decodes = argv[0], argv[1], int(argv[2])
    prompt = int(argv[3]) if len(argv) > 3 else 0
    context = float(argv[4]) if len(argv) > 4 else 1000.0  # mean cached positions a decode reads, layers averaged
    dep = case_from_row({r["id"]: r for r in csv.DictReader(open(path, encoding="utf-8"))}[row_id]).deployment
    n = decodes + prompt
    step, bare = _steps(dep, n)
    experts = step.linear_s[n] - bare.linear_s[n]
    own = step.rank_linear_s[-(-n // step.dp_ranks)] if step.rank_linear_s is not None else 0.0
    pairs = prompt * (prompt + 1) / 2.0  # one prompt's causal pairs (a diagnosis: every layer full)
    attention = step.num_layers * step.decode_attention_s(decodes, decodes * context) if decodes else 0.0
    prefill = step.num_layers * step.prefill_attention_s(prompt, pairs) if prompt else 0.0
    total = step.gpu_s(decodes=decodes, context=decodes * context, prefill_tokens=prompt, pairs=pairs, sampled=decodes + (prompt > 0))
    print(f"{row_id} {dep.model.name} tp {dep.tp} ep {dep.ep} attention DP {dep.attention_dp} {dep.dtype} {dep.runtime.name}: "
          f"{decodes} decodes at {context:.0f} positions, {prompt} prompt tokens")
    print(f"  GPU step {total * 1e3:.2f} ms: non-expert operators and collectives {bare.linear_s[n] * 1e3:.2f} | routed experts "
          f"{experts * 1e3:.2f} ({experts / step.num_layers * 1e6:.0f} us a layer) | a DP rank's own operators {own * 1e3:.2f} | "
          f"decode attention {attention * 1e3:.2f} | prompt attention {prefill * 1e3:.2f} | head {step.head_s[min(decodes + 1, len(step.head_s) - 1)] * 1e3:.2f}")
    print(f"  decode attention a layer: {step.decode_lat_s * 1e6:.1f} us + {step.decode_s_per_position * 1e9:.3f} ns a position "
          f"+ {step.decode_s_per_request * 1e9:.1f} ns a request past {step.decode_knee_requests:.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
