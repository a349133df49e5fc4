"""An MLPerf Blackwell row's priced step beside the tensorrt-llm-1.0 preset's, component by component.

For each MLPerf row id given, prints the step the row's own preset prices (``mlperf-nvidia-5.x`` with its
system's settings) and the same deployment under the ``tensorrt-llm-1.0`` preset, at a few decode batches
with the prompt tokens the row's token budget leaves: the linear layers (GEMMs and the element-wise
operators around them), decode attention, prompt attention, the LM head, and the eager issue bound a
context step takes under the PyTorch backend. The two presets differ in the NVFP4 linear's fit (the square
cuBLASLt sweep for a TensorRT engine built without ``gemm_plugin``; TensorRT-LLM's measured Linear under
``nvfp4_gemm_fit = "linear"``), in whole prompts against chunked context, and in the host issue of eager
context steps; KV block size and memory share change capacity, not a step. A diagnostic, not a test.

    PYTHONPATH=. python scripts/mlperf_trtllm_step_compare.py tests/data/mlperf_v5_1_nvidia.csv mlp51-001 [id ...]
"""

from __future__ import annotations

import sys
from dataclasses import replace

from autotune.calibrate.serving_rows import case_from_row, engine_runtime
from autotune.cost import serving_eval
from autotune.spec.json_file import read_csv_file

_BATCHES = (1, 64, 512, 2048)  # decoding requests a step


def _parts(step, decodes: int, prompt: int, isl: float, context: float) -> dict[str, float]:
    """Milliseconds of each part of one step (``prompt`` tokens of prompts ``isl`` long, whole)."""
    pairs = prompt * (isl + 1) / 2.0
    decode_attn = step.decode_attention_s(decodes, context) if decodes else 0.0
    prompt_attn = step.prefill_attention_s(prompt, pairs) if prompt else 0.0
    sampled = decodes + (round(prompt / isl) if prompt else 0)
    total = step.gpu_s(decodes=decodes, context=context, prefill_tokens=prompt, pairs=pairs, sampled=sampled)
    return {"linear": 1e3 * float(step.linear_s[decodes + prompt]), "decode attn": 1e3 * step.num_layers * decode_attn,
            "prompt attn": 1e3 * step.num_layers * prompt_attn,
            "head": 1e3 * float(step.head_s[min(sampled, len(step.head_s) - 1)]), "step": 1e3 * total}


def report(row: dict) -> list[str]:
    case = case_from_row(row)
    dep, load = case.deployment, case.load
    trt = replace(dep, runtime=engine_runtime("tensorrt-llm", "1.0"))
    budget = dep.runtime.serving.max_num_batched_tokens or 8192
    isl, osl = float(load.input_len), float(load.output_len)
    lines = [f"{row['id']} {row['model'].split(' (')[0]} {row['gpu']} x{row['gpus']} TP {dep.tp} PP {dep.pp} {dep.dtype}; "
             f"token budget {budget}; ISL {isl:.0f} OSL {osl:.0f}"]
    for label, d in ((dep.runtime.name, dep), ("tensorrt-llm-1.0", trt)):
        eng = d.runtime.serving
        step = serving_eval.replica_step_model(d, max_tokens=budget + max(_BATCHES), max_sampled=budget + max(_BATCHES))
        issue = 1e3 * serving_eval.eager_issue_s(d) if eng.eager_prefill else 0.0
        lines.append(f"  {label} (nvfp4_gemm_fit {eng.nvfp4_gemm_fit}, chunked {eng.chunked_prefill}, "
                     f"eager context issue {issue:.1f} ms)")
        for b in _BATCHES:
            prompt = max(0, min(budget - b, round(b * isl / osl)))
            parts = _parts(step, b, prompt, isl, b * (isl + osl / 2.0))
            lines.append(f"    {b:5d} decodes + {prompt:5d} prompt tokens: " + "  ".join(f"{k} {v:7.2f}" for k, v in parts.items())
                         + " ms")
    return lines


def main(argv: list[str]) -> None:
    files = [a for a in argv if a.endswith(".csv")]
    ids = [a for a in argv if not a.endswith(".csv")]
    rows = {r["id"]: r for f in files for r in read_csv_file(f, "csv")[1]}
    for rid in ids:
        print("\n".join(report(rows[rid])))


if __name__ == "__main__":
    main(sys.argv[1:])
