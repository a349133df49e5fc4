"""Print one TP all-reduce's price per kernel choice (serving_collectives.tp_all_reduce_s) for a cluster, group
size and hidden size, over token counts: the formula ("custom_ar" below 8 MiB), NCCL's sweep, SGLang's legacy
and V2 kernels with and without FlashInfer's fusion, vLLM 0.11-0.14's measured dispatch. Microseconds.

    python scripts/compare_engine_allreduce.py [CLUSTER] [GPUS] [HIDDEN]   (default dgx-b200 8 7168)
"""

from __future__ import annotations

import sys

import numpy as np

from autotune.cost.comm import GroupSpan
from autotune.cost.serving_collectives import tp_all_reduce_s
from autotune.cost.serving_custom_ar import FUSION_SUFFIX
from autotune.spec.hardware_data import load_cluster

KINDS = ("custom_ar", "nccl", "sglang_v1", "sglang_v1" + FUSION_SUFFIX, "sglang_v2", "sglang_v2" + FUSION_SUFFIX,
         "vllm_symm")
TOKENS = np.array([1, 8, 32, 64, 128, 192, 256, 512, 1024, 2048, 4096, 8192, 32768], dtype=float)


def main(name: str = "dgx-b200", gpus: int = 8, hidden: int = 7168) -> None:
    cluster, span = load_cluster(name), GroupSpan(gpus, 1)
    act = TOKENS * hidden * 2
    print(f"{name}, {gpus} GPUs, hidden {hidden} (BF16); us per all-reduce")
    print(f"{'tokens':>22s} " + " ".join(f"{int(t):>7d}" for t in TOKENS))
    for kind in KINDS:
        seconds = tp_all_reduce_s(act, TOKENS, span, cluster, kind)
        print(f"{kind:>22s} " + " ".join(f"{s * 1e6:7.1f}" for s in seconds))


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*(args[:1] + [int(a) for a in args[1:3]]))
