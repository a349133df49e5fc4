"""Print how much slower an engine's measured MoE layer runs under skewed routing than under balanced
routing, by token count: aiconfigurator's moe_perf.parquet times the busiest expert-parallel rank's
layer (collector/helper.py _generate_power_law_distribution swaps the most loaded rank to rank 0) under
"balanced", "power_law_1.01" and "power_law_1.2" expert loads on the same shapes. aiconfigurator prices
its own predictions at power_law 1.01 for DeepSeek-family models and 1.2 for the generic MoE class
(sdk/config.py workload_distribution = "power_law"; sdk/models/deepseek.py and moe.py _power_law_alpha),
while cost/serving_step.py prices every rank at the balanced fit (scripts/fit_engine_moe.py).

usage: python scripts/moe_routing_skew.py PARQUET [HIDDEN INTER EXPERTS TOPK]
e.g.   python scripts/moe_routing_skew.py .../h200_sxm/moe/trtllm/1.2.0rc5/moe_perf.parquet 4096 1536 128 8
(needs pandas + pyarrow; the data: ai-dynamo/aiconfigurator @095f58a5 aic-core/.../systems/data)"""

from __future__ import annotations

import sys

import pandas as pd

TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SKEWED = ("power_law_1.01", "power_law_1.2")


def ratios(path: str, shape: tuple[int, int, int, int]) -> pd.DataFrame:
    """Skewed over balanced latency per (dtype, moe_tp, moe_ep, distribution) and token count."""
    d = pd.read_parquet(path)
    h, inter, e, k = shape
    d = d[(d.hidden_size == h) & (d.inter_size == inter) & (d.num_experts == e) & (d.topk == k)
          & d.num_tokens.isin(TOKENS)]
    t = d.pivot_table(index=["moe_dtype", "moe_tp_size", "moe_ep_size", "num_tokens"], columns="distribution",
                      values="latency", aggfunc="median")
    out = pd.DataFrame({s: t[s] / t["balanced"] for s in SKEWED if s in t and "balanced" in t})
    return out.unstack("num_tokens")


def main(argv: list[str]) -> None:
    if len(argv) not in (1, 5):
        raise SystemExit(__doc__)
    shape = tuple(int(v) for v in argv[1:]) if len(argv) == 5 else (7168, 2048, 256, 8)  # DeepSeek-V3/R1
    table = ratios(argv[0], shape)
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.max_rows", 1000, "display.precision", 2):
        for skew in SKEWED:
            if skew in table:
                print(f"{skew} / balanced latency, hidden {shape[0]} inter {shape[1]} E {shape[2]} top-{shape[3]}:")
                print(table[skew])


if __name__ == "__main__":
    main(sys.argv[1:])
