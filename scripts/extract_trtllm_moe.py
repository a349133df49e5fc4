"""Cut autotune/data/trtllm_moe.toml from NVIDIA aiconfigurator's measured TensorRT-LLM MoE layers.

aiconfigurator's collector (ai-dynamo/aiconfigurator @095f58a5 collector/trtllm/collect_moe.py) times one
rank's whole fused-MoE module (quantization, routing metadata, permute, both grouped GEMMs, finalize) in a
CUDA graph for ``num_tokens`` tokens entering the layer across the EP group, with the experts of one rank
(E / moe_ep of them, each split over moe_tp), routed by power-law logits that give that rank the busiest
load (collector/helper.py power_law_logits_v3). Kernel sources: ``moe_torch_flow_cutlass`` (moe_config
backend CUTLASS, the default) and ``moe_torch_flow_min_latency`` (backend TRTLLM, the TRTLLM-Gen kernels).
This keeps the expert shapes in SHAPES, each at the power-law exponent the step model routes that shape
with (cost/moe_skew.py routing_alpha: 1.01 for DeepSeek's group-limited routing, 1.2 otherwise, the
exponents of aiconfigurator's docs/POWER_LAW_DISTRIBUTION.md), at every (moe_tp, moe_ep) measured, latency in
ms by token count.

usage: python scripts/extract_trtllm_moe.py GPU=PARQUET=ORIGIN[=DTYPE,...] [...] > autotune/data/trtllm_moe.toml
    GPU: a runtime_kernels.gpu_keys model key (h100, h200, b200, gb200, b300, gb300); ORIGIN: the file's path in
    aiconfigurator (printed in the table); DTYPE: only these of the file's formats (bfloat16, fp8, fp8_block,
    nvfp4), e.g. h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, cut with:
    git --git-dir=<aiconfigurator> show 095f58a5:aic-core/src/aiconfigurator_core/systems/data/h200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet
--pool-draws=P1,P2,...: for a GPU argument whose PARQUET is one of these files, each power-law row becomes the
    median over the listed files of their row at the same kernel, format, shape, moe_tp, moe_ep, exponent and tokens,
    each file's row first scaled to this file's speed by the median ratio of the two files' balanced rows over all
    their shared cells of that kernel and format (pool_draws): the collector draws every power-law routing afresh
    (collector/helper.py sample_power_law: torch.rand, unseeded, one timed run), so one file's power-law rows carry
    one draw of the busiest rank, and files of one die (B200 and GB200, two releases each) pool their draws. A row
    no other file holds keeps its time.
The shipped table: h100 1.3.0rc20 =fp8_block,fp8,bfloat16; h200 1.3.0rc20 =fp8_block,fp8 and 1.3.0rc10 =bfloat16;
b200 and gb200 1.3.0rc20 =nvfp4,fp8 and 1.3.0rc10 =bfloat16, with --pool-draws= over b200_sxm's and gb200's
1.3.0rc10 and 1.3.0rc20 moe_perf.parquet; b300 1.3.0rc10 (every format); gb300 1.3.0rc20 =nvfp4,fp8.
(needs pandas + pyarrow)
"""

from __future__ import annotations

import sys

import pandas as pd

# (hidden_size, moe_intermediate_size, experts, top-k) from each model's config.json -> routing alpha
SHAPES = {
    (7168, 2048, 256, 8): 1.01,  # DeepSeek-V3/R1 (group-limited routing)
    (4096, 1536, 128, 8): 1.2,  # Qwen3-235B-A22B
    (2048, 768, 128, 8): 1.2,  # Qwen3-30B-A3B
}
# Not kept: Llama 4 Maverick's top-1 shape (5120, 8192, 128, 1). Its power_law_1.2 rows are not a routing the
# engine runs: on H200 FP8 at moe_ep 8 they take 2.5-4.8x the balanced time at 1-8 tokens (each token meets one
# expert either way) and 4.3-9.3x at 128-16k tokens, above reading the rank's 16 experts once plus every token's
# FLOPs on one rank (about 0.65 ms at 512 tokens against 2.76 measured).
KERNELS = {"moe_torch_flow_cutlass": "cutlass", "moe_torch_flow_min_latency": "trtllm"}
DTYPES = {"fp8_block": "fp8_block", "fp8": "fp8", "nvfp4": "nvfp4", "bfloat16": "bf16"}


def shape_key(hidden: int, inter: int, experts: int, topk: int, alpha: float) -> str:
    """The table's name for an expert shape routed at ``alpha`` (serving_moe_table.measured_moe_key builds the same)."""
    return f"{hidden}x{inter}x{experts}x{topk}@{alpha}"


_CELL = ["kernel_source", "moe_dtype", "hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size", "moe_ep_size",
         "num_tokens"]


def _cells(path: str) -> tuple[pd.DataFrame, pd.Series]:
    """One file's power-law rows (median ms by cell and distribution) and its balanced rows (by cell)."""
    d = pd.read_parquet(path)
    d = d[d.kernel_source.isin(KERNELS)].groupby(_CELL + ["distribution"]).latency.median().reset_index()
    balanced = d[d.distribution == "balanced"].set_index(_CELL).latency
    return d[d.distribution.str.startswith("power_law_")].set_index(_CELL + ["distribution"]).latency, balanced


def pool_draws(d: pd.DataFrame, path: str, pool: list[str]) -> pd.DataFrame:
    """``d``'s power-law rows as the median of the ``pool`` files' draws, each file first brought to this file's
    speed by the median ratio of the two files' balanced rows over every cell of a kernel and format (module doc)."""
    cells = {p: _cells(p) for p in pool}
    own_balanced = cells[path][1]
    scaled = []
    for law, balanced in cells.values():
        ratio = (own_balanced / balanced).dropna()
        speed = ratio.groupby(level=["kernel_source", "moe_dtype"]).median().rename("speed")
        scaled.append(law.to_frame().join(speed, on=["kernel_source", "moe_dtype"]).eval("latency * speed"))
    pooled = pd.concat(scaled, axis=1).median(axis=1).rename("pooled")
    law = d[d.distribution.str.startswith("power_law_")].join(pooled, on=_CELL + ["distribution"])
    return pd.concat([d[d.distribution == "balanced"], law.assign(latency=law.pooled.fillna(law.latency))[d.columns]])


def rows(gpu: str, path: str, origin: str, dtypes: list[str], pool: list[str] | None = None) -> list[str]:
    d = pd.read_parquet(path)
    d = d[d.kernel_source.isin(KERNELS) & d.moe_dtype.isin(dtypes)]
    if pool and path in pool:
        d = pool_draws(d, path, pool)
    out = [f"# {gpu}: {origin}" + (f" (power-law rows: the median of {len(pool)} files' draws)"
                                   if pool and path in pool else "")]
    for shape, alpha in SHAPES.items():
        s = d[(d.hidden_size == shape[0]) & (d.inter_size == shape[1]) & (d.num_experts == shape[2])
              & (d.topk == shape[3]) & (d.distribution == f"power_law_{alpha}")]
        if s.empty:
            continue
        out.append(f"# {shape_key(*shape, alpha)}: TensorRT-LLM {', '.join(map(str, sorted(set(s.version))))}; "
                   f"{len(s)} rows")
        for (kernel, dtype, tp, ep), g in s.groupby(["kernel_source", "moe_dtype", "moe_tp_size", "moe_ep_size"]):
            t = g.groupby("num_tokens").latency.median()
            tokens = ", ".join(str(int(n)) for n in t.index)
            ms = ", ".join(f"{v:.5g}" for v in t.to_numpy())
            out.append(f'"{gpu}.{KERNELS[kernel]}.{DTYPES[dtype]}.{shape_key(*shape, alpha)}.{tp}x{ep}" = [[{tokens}], [{ms}]]')
    return out


def main() -> None:
    print("# TensorRT-LLM's fused MoE layer as NVIDIA's aiconfigurator measured it (ai-dynamo/aiconfigurator @095f58a5,"
          "\n# collector/trtllm/collect_moe.py; power-law routing at the shape's alpha, the busiest rank's experts):"
          "\n# key GPU.backend.dtype.<hidden>x<inter>x<experts>x<topk>@<alpha>.<moe_tp>x<moe_ep>, value [tokens entering the"
          "\n# layer, ms]. Cut by scripts/extract_trtllm_moe.py; read by autotune/cost/serving_moe_table.py.\n\n[layers]")
    pool = next((a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--pool-draws=")), None)
    for arg in (a for a in sys.argv[1:] if not a.startswith("--")):
        gpu, path, origin, *only = arg.split("=")
        print("\n".join(rows(gpu, path, origin, only[0].split(",") if only else list(DTYPES), pool)))


if __name__ == "__main__":
    main()
