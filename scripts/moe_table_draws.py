"""How much of autotune/data/trtllm_moe.toml's GPU-to-GPU difference is the collector's random routing draw.

aiconfigurator's power-law MoE rows (ai-dynamo/aiconfigurator @095f58a5 collector/trtllm/collect_moe.py) time
each token count over 5 routings drawn by collector/helper.py sample_power_law (torch.rand, no seed: a new draw
on every collection run), one warm-up and one timed run; its balanced rows take one routing, 3 warm-ups and 6
runs. A heavy-tailed draw (alpha 1.01, loads up to 0.8 x tokens) sets the busiest rank's load, so two GPUs'
power-law rows can differ by their draws, not only by their hardware. For each expert shape the step model
reads (scripts/extract_trtllm_moe.py SHAPES), this prints, per (moe_tp, moe_ep), the median B200 / GB200 time
ratio over the token counts for balanced and for power-law routing, and per GPU the power-law / balanced ratio
at a few token counts. A diagnostic, not a test; MLPerf v5.1 measured B200 x8 and GB200 NVL72 at one
DeepSeek-R1 config (EP 8, attention DP, 512 requests a rank) at 4,172 and 4,024 output tokens/s a GPU.

    python scripts/moe_table_draws.py <aiconfigurator git dir> [version=1.3.0rc20]   (needs pandas + pyarrow)
"""

from __future__ import annotations

import io
import subprocess
import sys

import pandas as pd

GPUS = ("b200_sxm", "gb200", "b300_sxm", "gb300")
SHAPES = {(7168, 2048, 256, 8): 1.01, (4096, 1536, 128, 8): 1.2, (2048, 768, 128, 8): 1.2}
SHOWN_TOKENS = (64, 1024, 2048, 4096, 16384)
_KEYS = ["kernel_source", "moe_dtype", "num_tokens", "moe_tp_size", "moe_ep_size"]


def _table(git_dir: str, gpu: str, version: str) -> pd.DataFrame:
    path = f"HEAD:aic-core/src/aiconfigurator_core/systems/data/{gpu}/moe/trtllm/{version}/moe_perf.parquet"
    blob = subprocess.run(["git", f"--git-dir={git_dir}", "show", path], capture_output=True, check=True).stdout
    d = pd.read_parquet(io.BytesIO(blob))
    return d[(d.kernel_source == "moe_torch_flow_cutlass") & (d.moe_dtype == "nvfp4")]


def _shape(d: pd.DataFrame, shape: tuple[int, int, int, int]) -> pd.DataFrame:
    h, i, e, k = shape
    return d[(d.hidden_size == h) & (d.inter_size == i) & (d.num_experts == e) & (d.topk == k)]


def main(git_dir: str, version: str) -> None:
    tables = {g: _table(git_dir, g, version) for g in GPUS}
    for shape, alpha in SHAPES.items():
        print(f"== {'x'.join(map(str, shape))} NVFP4 CUTLASS, TensorRT-LLM {version}")
        rows = {g: _shape(t, shape) for g, t in tables.items()}
        for dist in ("balanced", f"power_law_{alpha}"):
            b, g = (rows[x][rows[x].distribution == dist] for x in ("b200_sxm", "gb200"))
            m = b.merge(g, on=_KEYS, suffixes=("_b", "_g"))
            ratio = (m.latency_b / m.latency_g).groupby([m.moe_tp_size, m.moe_ep_size]).median()
            print(f"  B200 / GB200, {dist}: " + " ".join(f"{tp}x{ep} {r:.2f}" for (tp, ep), r in ratio.items()))
        for gpu, d in rows.items():
            one = d[(d.moe_tp_size == 1) & (d.moe_ep_size == 8)]
            p = one.pivot_table(index="num_tokens", columns="distribution", values="latency")
            if p.empty or f"power_law_{alpha}" not in p:
                continue
            skew = (p[f"power_law_{alpha}"] / p["balanced"]).reindex(SHOWN_TOKENS)
            print(f"  {gpu:9s} 1x8 power-law / balanced at {SHOWN_TOKENS} tokens: "
                  + " ".join(f"{v:.2f}" for v in skew))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "1.3.0rc20")
