"""Per-system harness settings published with benchmark results (autotune/data/serving_systems.toml).

An MLPerf result row names its system and config, not the tensor-parallel degree, precision or batch
limits the submitter's harness ran; those are published beside the results (NVIDIA's configs per
system). A row takes the entry whose runtime, model, GPU, GPU count and scenario match; its own
cells still win. Nothing here is fitted: every value carries its source.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from autotune.calibrate.serving_names import RowProblem, gpu_cluster
from autotune.errors import AutotuneError, require
from autotune.spec.serving_engine import NVFP4_GEMM_FITS

__all__ = ["PublishedSystem", "published_system", "SCENARIOS"]

# "": the entry holds for every scenario; "interactive": MLPerf v5's Server run under tighter TTFT/TPOT limits
SCENARIOS = ("offline", "server", "interactive", "")
_COUNTS = ("tp", "pp", "ep", "max_num_seqs", "max_num_batched_tokens", "max_output_len", "adp_batching_wait_iters",
           "adp_timeout_iters", "decode_cuda_graph_max_batch", "min_query_count")  # whole numbers >= 1
# Engine settings a system's config overrides in the row's runtime preset (serving_rows._with_system)
# (a TensorRT-LLM PyTorch-backend harness: its decode CUDA graphs, their padding sizes, its eager prompt steps)
ENGINE_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "memory_fraction", "chunked_prefill", "rate_run_s",
                   "adp_balance", "adp_batching_wait_iters", "adp_timeout_iters", "nvfp4_gemm_fit",
                   "decode_cuda_graph_max_batch", "decode_graph_batch_sizes", "eager_prefill", "gemm_swiglu_fusion",
                   "overlap_admission")
_SETTINGS = ("tp", "pp", "ep", "attention_dp", "precision", "max_num_seqs", "max_num_batched_tokens",
             "memory_fraction", "chunked_prefill", "rate_run_s", "max_output_len", "adp_balance",
             "adp_batching_wait_iters", "adp_timeout_iters", "nvfp4_gemm_fit", "effective_bits",
             "decode_cuda_graph_max_batch", "decode_graph_batch_sizes", "eager_prefill", "min_query_count", "gemm_swiglu_fusion",
             "offline_expected_qps", "overlap_admission")


@dataclass(frozen=True, kw_only=True)
class PublishedSystem:
    """One system's published settings; a setting it does not publish is absent from ``values``."""

    runtime: str
    model: str
    gpu: str
    gpus: int
    scenario: str
    config: str
    values: tuple[tuple[str, object], ...]  # (setting, value) for the settings it publishes
    sources: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        require(self.scenario in SCENARIOS, "serving_systems.scenario", f"must be one of {SCENARIOS}, got {self.scenario!r}")
        require(isinstance(self.gpus, int) and self.gpus >= 1, "serving_systems.gpus", f"must be >= 1, got {self.gpus!r}")
        for key, value in self.values:
            require(key in _SETTINGS, "serving_systems", f"unknown setting {key!r}; valid: {', '.join(_SETTINGS)}")
            _check(key, value)
        require(dict(self.sources).keys() == dict(self.values).keys(), "serving_systems", "every value needs a source")

    def get(self, key: str) -> object | None:
        return dict(self.values).get(key)

    def note(self, key: str) -> str:
        """How a row's ``assumed`` names a value taken from here."""
        return f"{key} {self.get(key)} ({self.config}: {dict(self.sources)[key]})"


def _check(key: str, value: object) -> None:
    if key in _COUNTS:
        require(isinstance(value, int) and not isinstance(value, bool) and value >= 1, f"serving_systems.{key}",
                f"must be a whole number >= 1, got {value!r}")
    elif key in ("attention_dp", "chunked_prefill", "adp_balance", "eager_prefill", "gemm_swiglu_fusion", "overlap_admission"):
        require(isinstance(value, bool), f"serving_systems.{key}", f"must be true or false, got {value!r}")
    elif key == "memory_fraction":
        require(isinstance(value, float) and 0 < value <= 1, f"serving_systems.{key}", f"must be in (0, 1], got {value!r}")
    elif key == "nvfp4_gemm_fit":
        require(value in NVFP4_GEMM_FITS, f"serving_systems.{key}", f"must be one of {NVFP4_GEMM_FITS}, got {value!r}")
    elif key == "effective_bits":  # an AutoQuantize checkpoint's bits a weight (cost/serving_mix.py)
        require(isinstance(value, float) and 4 <= value <= 16, f"serving_systems.{key}", f"must be in [4, 16], got {value!r}")
    elif key == "decode_graph_batch_sizes":  # a CUDA-graph batch list, as the engine preset's (cost/graph_padding.py)
        require(isinstance(value, tuple) and value and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in value)
                and list(value) == sorted(set(value)), f"serving_systems.{key}", f"must be increasing whole numbers >= 1, got {value!r}")
    elif key in ("rate_run_s", "offline_expected_qps"):  # seconds; LoadGen's expected Offline samples/s
        require(isinstance(value, (int, float)) and value > 0, f"serving_systems.{key}", f"must be > 0, got {value!r}")


def _entry(raw: dict) -> PublishedSystem:
    try:
        settings = {k: raw[k] for k in _SETTINGS if k in raw}
        return PublishedSystem(runtime=raw["runtime"], model=raw["model"], gpu=raw["gpu"], gpus=raw["gpus"],
                               scenario=raw["scenario"], config=raw["config"],
                               values=tuple((k, tuple(v["value"]) if isinstance(v["value"], list) else v["value"])
                                            for k, v in settings.items()),
                               sources=tuple((k, v["source"]) for k, v in settings.items()))
    except (KeyError, TypeError) as err:
        raise AutotuneError("serving_systems", f"entry {raw!r} lacks {err}") from None


@lru_cache(maxsize=1)
def _systems() -> tuple[PublishedSystem, ...]:
    text = resources.files("autotune.data").joinpath("serving_systems.toml").read_text()
    return tuple(_entry(raw) for raw in tomllib.loads(text).get("system", []))


def _scenario(load_text: str) -> str:
    # "Interactive scenario" (v5.1) or the benchmark llama2-70b-interactive (v5.0, a Server run): its own config
    if re.search(r"\binteractive\b", load_text, flags=re.IGNORECASE):
        return "interactive"
    found = re.search(r"\b(offline|server)\b", load_text, flags=re.IGNORECASE)
    return found.group(1).lower() if found else ""


def _part(gpu: str) -> str:
    """The GPU a cell names, however spelled ('B200-SXM-180GB', 'NVIDIA B200'): its cluster preset, else the cell."""
    try:
        return gpu_cluster(gpu)
    except RowProblem:
        return gpu.strip().lower()


def published_system(runtime: str, model: str, gpu: str, gpus: int | None, load_text: str) -> PublishedSystem | None:
    """The entry for a row's runtime, model preset, GPU, GPU count and load description, if any; else the same
    GPU's entry at another count whose instance divides the row's GPUs, as that many of its instances."""
    scenario, part = _scenario(load_text), _part(gpu)
    matches = [s for s in _systems() if (s.runtime, s.model) == (runtime, model) and _part(s.gpu) == part
               and s.scenario in ("", scenario)]
    for system in matches:
        if system.gpus == gpus:
            return system
    fits = [s for s in matches if gpus is not None and gpus % _instance_gpus(s) == 0]
    if not fits:
        return None
    return _as_instances(min(fits, key=lambda s: (abs(s.gpus - gpus), -s.gpus)), gpus)


def _instance_gpus(system: PublishedSystem) -> int:
    tp, pp = system.get("tp"), system.get("pp")
    return (tp if isinstance(tp, int) else 1) * (pp if isinstance(pp, int) else 1)


def _as_instances(system: PublishedSystem, gpus: int) -> PublishedSystem:
    """``system``'s engine on ``gpus`` GPUs. NVIDIA's MLPerf configs set a system's engine once per instance (v4.1:
    configs/<benchmark>/<scenario>/__init__.py, an x8 class inheriting its x1 class's TP, precision and batch limits;
    v5.x partners' configs copy NVIDIA's per GPU), so another count of the same GPU runs the same instances. The
    whole system's LoadGen settings (offline_expected_qps, min_query_count) are not instance settings and are dropped."""
    why = f"; read for {gpus} GPUs as {gpus // _instance_gpus(system)} of its instances (no entry for {gpus})"
    kept = [(k, v) for k, v in system.values if k not in ("offline_expected_qps", "min_query_count")]
    return PublishedSystem(runtime=system.runtime, model=system.model, gpu=system.gpu, gpus=gpus,
                           scenario=system.scenario, config=f"{system.config} (its {system.gpus}-GPU entry)",
                           values=tuple(kept), sources=tuple((k, dict(system.sources)[k] + why) for k, _ in kept))
