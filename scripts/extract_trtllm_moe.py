"""Cut autotune/data/trtllm_moe.toml from NVIDIA aiconfigurator's measured TensorRT-LLM MoE layers.

aiconfigurator's collector (ai-dynamo/aiconfigurator @095f58a5 collector/trtllm/collect_moe.py) times one
rank's whole fused-MoE module (quantization, routing metadata, permute, both grouped GEMMs, finalize) in a
CUDA graph for ``num_tokens`` tokens entering the layer across the EP group, with the experts of one rank
(E / moe_ep of them, each split over moe_tp), routed by power-law logits that give that rank the busiest
load (collector/helper.py power_law_logits_v3, alpha 1.01 for DeepSeek-V3/R1). Kernel sources:
``moe_torch_flow_cutlass`` (moe_config backend CUTLASS, the default) and ``moe_torch_flow_min_latency``
(backend TRTLLM, the TRTLLM-Gen kernels). This keeps DeepSeek-V3/R1's expert shape (hidden 7168,
intermediate 2048, 256 experts, top-8) at alpha 1.01 and EP > 1, latency in ms by token count.

usage: python scripts/extract_trtllm_moe.py GPU=PARQUET=ORIGIN[=DTYPE,...] [...] > autotune/data/trtllm_moe.toml
    GPU: a runtime_kernels.gpu_keys model key (h100, h200, b200, gb200, b300, gb300); ORIGIN: the file's path in
    aiconfigurator (printed in the table); DTYPE: only these of the file's formats (bfloat16, fp8_block, nvfp4), e.g.
    h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, cut with:
    git --git-dir=<aiconfigurator> show 095f58a5:aic-core/src/aiconfigurator_core/systems/data/h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet
(needs pandas + pyarrow)
"""

from __future__ import annotations

import sys

import pandas as pd

SHAPE = {"hidden_size": 7168, "inter_size": 2048, "num_experts": 256, "topk": 8}  # DeepSeek-V3 config.json
DISTRIBUTION = "power_law_1.01"
KERNELS = {"moe_torch_flow_cutlass": "cutlass", "moe_torch_flow_min_latency": "trtllm"}
DTYPES = {"fp8_block": "fp8_block", "nvfp4": "nvfp4", "bfloat16": "bf16"}  # block FP8 and NVFP4 checkpoints, their BF16 MTP module


def rows(gpu: str, path: str, origin: str, dtypes: list[str]) -> list[str]:
    d = pd.read_parquet(path)
    mask = (d.distribution == DISTRIBUTION) & (d.moe_ep_size > 1) & d.kernel_source.isin(KERNELS) & d.moe_dtype.isin(dtypes)
    for column, value in SHAPE.items():
        mask &= d[column] == value
    d = d[mask]
    version = sorted(set(d.version))
    out = [f"# {gpu}: {origin} (TensorRT-LLM {', '.join(map(str, version))}; {len(d)} rows)"]
    for (kernel, dtype, tp, ep), g in d.groupby(["kernel_source", "moe_dtype", "moe_tp_size", "moe_ep_size"]):
        s = g.groupby("num_tokens").latency.median()
        tokens = ", ".join(str(int(t)) for t in s.index)
        ms = ", ".join(f"{v:.5g}" for v in s.to_numpy())
        out.append(f'"{gpu}.{KERNELS[kernel]}.{DTYPES[dtype]}.{tp}x{ep}" = [[{tokens}], [{ms}]]')
    return out


def main() -> None:
    print("# TensorRT-LLM's fused MoE layer of DeepSeek-V3/R1's expert shape as NVIDIA's aiconfigurator measured it"
          "\n# (ai-dynamo/aiconfigurator @095f58a5, collector/trtllm/collect_moe.py; power-law routing alpha 1.01, the"
          "\n# busiest rank's experts): key GPU.backend.dtype.<moe_tp>x<moe_ep>, value [tokens entering the layer, ms]."
          "\n# Cut by scripts/extract_trtllm_moe.py; read by autotune/cost/serving_moe_table.py.\n\n[layers]")
    for arg in sys.argv[1:]:
        gpu, path, origin, *only = arg.split("=")
        print("\n".join(rows(gpu, path, origin, only[0].split(",") if only else list(DTYPES))))


if __name__ == "__main__":
    main()
