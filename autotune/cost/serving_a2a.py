"""TensorRT-LLM's MoE all-to-all under attention DP on a multi-node NVLink domain (GB200 NVL72) as measured.

autotune/data/trtllm_alltoall.toml (scripts/extract_trtllm_alltoall.py) holds NVIDIA's aiconfigurator sweep of the
MNNVL alltoallv that TensorRT-LLM selects where MnnvlMemory.supports_mnnvl() and moe_ep_size > top_k
(serving_eval._moe_alltoall): prepare + dispatch and combine seconds by tokens a rank, EP size and the dispatched
format (BF16, FP8, NVFP4: serving_collectives.moe_comm_dtype). It was swept for one MoE shape only (DeepSeek-V3's:
hidden 7168, top-8 routing), so it prices models of that hidden size and top-k; others, EP sizes without a sweep and
token counts outside its range keep the alpha-beta formula (NaN here).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from autotune.errors import require
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

__all__ = ["AlltoallTable", "trtllm_alltoall_tables", "trtllm_alltoall_s"]


@dataclass(frozen=True, kw_only=True, eq=False)
class AlltoallTable:
    """One sweep: dispatch (with its prepare) and combine seconds for ``tokens[i]`` tokens on each of ``ep`` ranks."""

    ep: int
    hidden_size: int
    top_k: int
    tokens: tuple[float, ...]
    dispatch_seconds: tuple[float, ...]
    combine_seconds: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        where = f"trtllm_alltoall.ep.{self.ep}"
        require(len(self.tokens) >= 2 and len(self.tokens) == len(self.dispatch_seconds) == len(self.combine_seconds),
                where, "needs at least two token counts and one time of each phase per count")
        require(all(b > a for a, b in zip(self.tokens, self.tokens[1:])), f"{where}.tokens", "must increase")
        require(all(t > 0 for t in self.dispatch_seconds + self.combine_seconds), where, "must be positive seconds")

    def time_s(self, tokens_per_rank: np.ndarray) -> np.ndarray:
        """Dispatch + combine, interpolated in tokens; NaN outside the swept range. Each phase is read as the least
        time measured at this or more tokens: moving fewer rows cannot take longer, and the sweep has lone slow
        points at one or two tokens (EP16's combine: 69 us at 1 token, 17 us at 8)."""
        t = np.asarray(tokens_per_rank, dtype=float)
        inside = (t >= self.tokens[0]) & (t <= self.tokens[-1])
        both = sum(np.interp(t, self.tokens, np.minimum.accumulate(np.array(phase)[::-1])[::-1])
                   for phase in (self.dispatch_seconds, self.combine_seconds))
        return np.where(inside, both, np.nan)


@lru_cache(maxsize=1)
def trtllm_alltoall_tables() -> dict[tuple[str, str, int], AlltoallTable]:
    """Every shipped sweep, keyed by (cluster preset name, dispatched format, EP size)."""
    data = tomllib.loads(resources.files("autotune.data").joinpath("trtllm_alltoall.toml").read_text())
    tables = {}
    for entry in data.values():
        for dtype, sweeps in ((k, v) for k, v in entry.items() if isinstance(v, dict)):
            for ep, sweep in sweeps["ep"].items():
                table = AlltoallTable(ep=int(ep), hidden_size=entry["hidden_size"], top_k=entry["top_k"],
                                      tokens=tuple(float(t) for t in sweep["tokens"]),
                                      dispatch_seconds=tuple(sweep["dispatch_seconds"]),
                                      combine_seconds=tuple(sweep["combine_seconds"]), source=entry["source"])
                tables.update({(name, dtype, table.ep): table for name in entry["clusters"]})
    return tables


def trtllm_alltoall_s(model: ModelSpec, cluster: ClusterSpec, *, ep: int, comm_dtype: str,
                      tokens_per_rank: np.ndarray) -> np.ndarray | None:
    """One MoE layer's measured dispatch + combine for ``tokens_per_rank`` tokens on each of ``ep`` ranks (NaN
    outside the sweep's token range); None where no sweep fits the cluster, EP size, format or model shape."""
    table = trtllm_alltoall_tables().get((cluster.name, comm_dtype or "bf16", ep))
    if table is None or (model.hidden_size, model.num_experts_per_token) != (table.hidden_size, table.top_k):
        return None
    return table.time_s(tokens_per_rank)
