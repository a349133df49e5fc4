"""Per-request prompt and output lengths of a benchmark dataset, drawn from its published distribution.

A serving benchmark that samples a dataset (ShareGPT through `sglang.bench_serving` or vLLM's
`benchmark_serving.py`, MLPerf's OpenOrca and Mixtral sets through LoadGen) issues requests of
widely spread lengths; at the same mean lengths a spread makes some prefills and some decodes much
longer, which the engine's batches feel. The distributions are quantile tables in
autotune/data/serving_lengths.toml, each with its source, read when first asked for (no I/O at
import). A request's two lengths are drawn independently by inverse transform, linear between the
listed percentiles, so the table's mean is the trapezoid over them (:attr:`RequestLengths.mean_input_tokens`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

import numpy as np

from autotune.errors import AutotuneError, require

__all__ = ["RequestLengths", "request_lengths", "length_names", "uniform_lengths"]


@dataclass(frozen=True, kw_only=True)
class RequestLengths:
    """A dataset's prompt and output lengths as quantiles: ``input_tokens[k]`` and ``output_tokens[k]``
    are the ``percents[k]``-th percentiles (0 and 100 included, increasing)."""

    name: str
    percents: tuple[float, ...]
    input_tokens: tuple[float, ...]
    output_tokens: tuple[float, ...]
    source: str

    def __post_init__(self) -> None:
        p = np.asarray(self.percents, dtype=float)
        require(len(p) >= 2 and p[0] == 0.0 and p[-1] == 100.0 and bool(np.all(np.diff(p) > 0)), "percents",
                f"{self.name}: must rise from 0 to 100, got {self.percents!r}")
        for field_name in ("input_tokens", "output_tokens"):
            q = np.asarray(getattr(self, field_name), dtype=float)
            require(len(q) == len(p) and q[0] >= 1.0 and bool(np.all(np.diff(q) >= 0)), field_name,
                    f"{self.name}: needs one non-decreasing length >= 1 token per percent ({len(p)})")
        require(bool(self.source.strip()), "source", f"{self.name}: a length distribution needs its source")

    def _mean(self, quantiles: tuple[float, ...]) -> float:
        q, p = np.asarray(quantiles, dtype=float), np.asarray(self.percents, dtype=float) / 100.0
        return float(np.sum((q[1:] + q[:-1]) / 2.0 * np.diff(p)))

    @property
    def mean_input_tokens(self) -> float:
        return self._mean(self.input_tokens)

    @property
    def mean_output_tokens(self) -> float:
        return self._mean(self.output_tokens)

    @property
    def shortest_input_tokens(self) -> int:
        return max(1, int(round(self.input_tokens[0])))

    def capped(self, max_output_tokens: int) -> RequestLengths:
        """The distribution with outputs cut at ``max_output_tokens`` (an engine's output-length limit:
        a longer request stops there)."""
        require(isinstance(max_output_tokens, int) and max_output_tokens >= 1, "max_output_len",
                f"must be a whole number >= 1, got {max_output_tokens!r}")
        return replace(self, name=f"{self.name} (outputs <= {max_output_tokens})",
                       output_tokens=tuple(min(q, float(max_output_tokens)) for q in self.output_tokens))

    def draw(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` requests' (input, output) lengths in whole tokens, from numpy's default_rng((seed, 1)):
        a stream apart from default_rng(seed), which draws a rate load's arrivals."""
        u = np.random.default_rng((seed, 1)).random((2, n)) * 100.0
        lengths = [np.interp(u[k], self.percents, q) for k, q in enumerate((self.input_tokens, self.output_tokens))]
        return tuple(np.maximum(1, np.rint(x)).astype(np.int64) for x in lengths)


@lru_cache(maxsize=1)
def _tables() -> dict:
    return tomllib.loads(resources.files("autotune.data").joinpath("serving_lengths.toml").read_text())


def length_names() -> tuple[str, ...]:
    return tuple(k for k, v in _tables().items() if isinstance(v, dict))


@lru_cache(maxsize=None)
def request_lengths(name: str) -> RequestLengths:
    """The length distribution ``name`` of autotune/data/serving_lengths.toml."""
    tables = _tables()
    if name not in length_names():
        raise AutotuneError("lengths", f"{name!r} is not a length distribution; valid: {', '.join(length_names())}")
    entry = tables[name]
    return RequestLengths(name=name, percents=tuple(tables["percents"]), input_tokens=tuple(entry["input_tokens"]),
                          output_tokens=tuple(entry["output_tokens"]), source=entry["source"])


def uniform_lengths(input_len: int, output_len: int, ratio: float, source: str) -> RequestLengths:
    """A random dataset's lengths drawn uniformly from [int(L x ratio), L] for each of the two stated
    lengths L, as sglang.bench_serving (benchmark/datasets/common.py compute_random_lens, 0.5.12 wheel) and
    InferenceX's utils/bench_serving/benchmark_serving.py (sample_uniform) draw them under --random-range-ratio."""
    require(isinstance(ratio, (int, float)) and 0 < ratio <= 1, "random_range_ratio",
            f"must be in (0, 1] for lengths drawn from [L x ratio, L], got {ratio!r}")
    low_in, low_out = max(1, int(input_len * ratio)), max(1, int(output_len * ratio))
    return RequestLengths(name=f"uniform [{ratio:g} x L, L]", percents=(0.0, 100.0),
                          input_tokens=(float(low_in), float(input_len)),
                          output_tokens=(float(low_out), float(output_len)), source=source)
