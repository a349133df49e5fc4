"""SGLang's and vLLM's TP all-reduce as they run it, for the serving path (cost/serving_collectives.py tp_all_reduce_s).

SGLang's GroupCoordinator.all_reduce (distributed/parallel_state.py) hands an input to its own custom
all-reduce where ``should_custom_ar`` takes it, else to NCCL. Which custom kernel depends on the release
(read from the PyPI wheels): the legacy CustomAllreduce (0.5.6 .. 0.5.11; inputs under 8 MiB on 2, 4, 6 or 8
GPUs of one NVLink node) or, from 0.5.12, the JIT CustomAllReduceV2 (environ.py SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2
= EnvBool(True); inputs up to its 16 MiB pull buffer on 2..8 GPUs). Both are timed by their measured tables
(data/engine_all_reduce.toml, scripts/extract_engine_allreduce.py: NVIDIA aiconfigurator's CUDA-graph sweeps of
SGLang 0.5.10 and 0.5.14), interpolated in bytes; a cluster or group size without a table keeps comm.py's
formula there, as before.

SGLang also switches FlashInfer's AllReduce+residual+RMSNorm fusion on by itself for some models
(server_args.py _handle_model_specific_adjustments): 0.5.6 for DeepseekV3 and GptOss on SM100; 0.5.7 on for
DeepseekV3, GptOss, Glm4Moe and Qwen3Moe on SM90 or SM100; each only with TP > 1, without DP attention, on
one node and without an all-to-all MoE backend. A layer then runs the all-reduce of a batch of at most
FUSE_ALLREDUCE_MAX_BATCH_SIZE (2048) tokens (layers/communicator.py) as FlashInfer's trtllm_allreduce_fusion,
TensorRT-LLM's fused kernel: one-shot (Lamport) while tokens x hidden x 2 x ranks x 2 bytes stays within
_FUSION_ONESHOT_MIB, two-shot above. The one-shot is priced at the cluster's measured TensorRT-LLM one-shot
(LinkLevel.collectives trtllm_all_reduce, clusters.toml); the two-shot, unmeasured, as the unfused path
(SGLang's own kernel or NCCL). The RMSNorm the fused kernel absorbs is still priced as its own kernel.

vLLM 0.11.0-0.14 ("vllm_symm") hands an input to its CustomAllreduce up to a size by compute capability and
group size, then to torch symmetric memory, then to NCCL (scripts/extract_engine_allreduce.py); its measured
0.14.0 sweep (same dispatch tables) prices every size it covers. vLLM 0.10 (symmetric memory off) and
clusters without a sweep keep serving_collectives' "custom_ar" pricing (the formula under 8 MiB, NCCL above).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from autotune.cost.comm import collective_time_s
from autotune.cost.measured_sweep import SizeSweep, sweep_fields
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.serving_engine import release_number

__all__ = ["SGLANG_ALLREDUCES", "VLLM_SYMM", "vllm_all_reduce_s", "FUSION_SUFFIX", "engine_tables", "sglang_all_reduce_s",
           "sglang_release_allreduce", "release_allreduce_runtime", "sglang_fusion_on", "FUSION_MAX_TOKENS"]

SGLANG_ALLREDUCES = ("sglang_v1", "sglang_v2")
VLLM_SYMM = "vllm_symm"
FUSION_SUFFIX = "+flashinfer"  # appended by serving_eval where SGLang runs the fused kernel


@dataclass(frozen=True, kw_only=True)
class _Kernel:
    table: str  # its key in engine_all_reduce.toml
    world_sizes: tuple[int, ...]
    max_bytes: int
    max_inclusive: bool


# sglang 0.5.6 / 0.5.10 wheels custom_all_reduce.py CustomAllreduce: _SUPPORTED_WORLD_SIZES [2, 4, 6, 8],
# _MAX_CAR_SIZE 8192 * 1024, should_custom_ar inp_size < max_size; sglang 0.5.12 / 0.5.14 wheels
# custom_all_reduce_v2.py: THRESHOLD_2_SHOT_MAP keys 2..8, max_pull_size 16 MiB, should_custom_ar inp_size <= max_size
_KERNELS = {
    "sglang_v1": _Kernel(table="sglang-v1", world_sizes=(2, 4, 6, 8), max_bytes=8192 * 1024, max_inclusive=False),
    "sglang_v2": _Kernel(table="sglang-v2", world_sizes=tuple(range(2, 9)), max_bytes=16 * 1024 * 1024,
                         max_inclusive=True),
}
# sglang 0.5.6 / 0.5.12 wheels layers/communicator.py FUSE_ALLREDUCE_MAX_BATCH_SIZE
FUSION_MAX_TOKENS = 2048
# flashinfer-ai/flashinfer @01021e50 flashinfer/comm/trtllm_ar.py _use_oneshot_heuristics (MiB of
# tokens x hidden x 2 x world size x element bytes, "based on all configs of trtllm_allreduce_fusion on B200")
_FUSION_ONESHOT_MIB = {2: 512, 4: 64, 8: 42}
_TRTLLM_ONESHOT = "trtllm_all_reduce"  # the measured one-shot's key in LinkLevel.collectives (clusters.toml)
# GPU names by the SM generation SGLang's is_sm90_supported / is_sm100_supported report (SM100 and SM103)
_SM_GPUS = {"sm90": ("H100", "H200", "H800"), "sm100": ("B200", "B300", "GB200", "GB300")}


@lru_cache(maxsize=1)
def engine_tables() -> dict[tuple[str, str, int], SizeSweep]:
    """Every shipped sweep, keyed by (kernel table, cluster preset name, GPU count)."""
    data = tomllib.loads(resources.files("autotune.data").joinpath("engine_all_reduce.toml").read_text())
    tables = {}
    for kernel, entries in data.items():
        for entry in entries.values():
            for gpus, sweep in entry["gpus"].items():
                table = SizeSweep(label="engine_all_reduce", **sweep_fields(gpus, sweep), source=entry["source"])
                tables.update({(kernel, name, table.gpus): table for name in entry["clusters"]})
    return tables


def sglang_all_reduce_s(act: np.ndarray, tokens: np.ndarray, span, cluster: ClusterSpec, kind: str,
                        nccl: np.ndarray) -> np.ndarray:
    """One TP all-reduce of ``act`` bytes (``tokens`` rows) as SGLang's ``kind`` (SGLANG_ALLREDUCES, with
    FUSION_SUFFIX where the fused kernel runs) takes it: its custom kernel where should_custom_ar does (the
    measured table; comm.py's formula where the cluster has none), ``nccl`` (NCCL's time) else; under the
    fusion, batches up to FUSION_MAX_TOKENS whose size picks the one-shot take the measured one-shot."""
    kernel = _KERNELS[kind.removesuffix(FUSION_SUFFIX)]
    n = span.size
    if span.n_inter > 1 or n not in kernel.world_sizes:
        return nccl
    act = np.asarray(act, dtype=float)
    takes = (act <= kernel.max_bytes) if kernel.max_inclusive else (act < kernel.max_bytes)
    table = engine_tables().get((kernel.table, cluster.name, n))
    custom = table.time_s(act) if table is not None else collective_time_s("all_reduce", act, span, cluster)
    unfused = np.where(takes & (act > 0), custom, nccl)
    fit = cluster.intra_node.collectives.get((_TRTLLM_ONESHOT, n))
    if not kind.endswith(FUSION_SUFFIX) or fit is None or n not in _FUSION_ONESHOT_MIB:
        return unfused
    oneshot = (tokens <= FUSION_MAX_TOKENS) & (act * n * 2 <= _FUSION_ONESHOT_MIB[n] * 2**20) & (act > 0)
    return np.where(oneshot, fit.latency_s + act * fit.seconds_per_unit, unfused)


def vllm_all_reduce_s(act: np.ndarray, span, cluster: ClusterSpec, nccl: np.ndarray) -> np.ndarray | None:
    """One TP all-reduce of ``act`` bytes as vLLM 0.11-0.14 runs it: its measured sweep inside one node where
    the cluster has one for this group size (``nccl`` past its largest size); None where there is none."""
    table = engine_tables().get(("vllm-symm", cluster.name, span.size))
    if table is None or span.n_inter > 1:
        return None
    act = np.asarray(act, dtype=float)
    return np.where(act <= table.nbytes[-1], table.time_s(act), nccl)


def sglang_release_allreduce(version: str) -> dict[str, object]:
    """The serving settings of SGLang release ``version``'s all-reduce (0.5.6 on; {} for older or unnamed
    releases): its custom kernel generation and where it switches the FlashInfer fusion on by itself."""
    release = release_number(version) or ()
    if release < (0, 5, 6):
        return {}
    kind = "sglang_v2" if release >= (0, 5, 12) else "sglang_v1"
    return {"tp_allreduce": kind, "flashinfer_allreduce_fusion": "sm100" if release < (0, 5, 7) else "sm90_sm100"}


def release_allreduce_runtime(runtime: Runtime, version: str) -> Runtime:
    """``runtime`` with release ``version``'s all-reduce settings: SGLang's where its preset runs SGLang's
    measured kernels (tp_allreduce sglang_*); vLLM's symmetric-memory dispatch for 0.11.0-0.14; unchanged else."""
    engine, release = runtime.serving, release_number(version) or ()
    if engine and engine.tp_allreduce.startswith("sglang"):
        changes = sglang_release_allreduce(version)
    elif engine and engine.engine == "vllm" and release and engine.tp_allreduce in ("nccl", VLLM_SYMM):
        changes = {"tp_allreduce": VLLM_SYMM if (0, 11) <= release < (0, 15) else "nccl"}
    else:
        changes = {}
    return runtime.with_changes(serving=engine.with_changes(**changes)) if changes else runtime


def sglang_fusion_on(rule: str, model: ModelSpec, gpu: str, *, tp: int, attention_dp: bool, one_node: bool,
                     moe_alltoall: bool) -> bool:
    """Whether SGLang's ``rule`` ("", "sm100": 0.5.6; "sm90_sm100": 0.5.7 on) switches the FlashInfer
    all-reduce fusion on for ``model`` on ``gpu``: DeepseekV3 (MLA with group-limited routing) and GptOss
    (MoE with attention sinks) under both rules, MoE with per-head QK norms (Qwen3Moe, Glm4Moe) from 0.5.7;
    TP > 1, no DP attention, one node, no all-to-all MoE backend."""
    if not rule or tp <= 1 or attention_dp or not one_node or moe_alltoall:
        return False
    words = gpu.upper().replace("-", " ").split()
    on_gpu = any(w.startswith(_SM_GPUS[sm]) for sm in rule.split("_") for w in words)
    deepseek_or_gptoss = (model.is_mla and model.router_groups > 0) or (model.is_moe and model.attention_sinks)
    return on_gpu and (deepseek_or_gptoss or (rule == "sm90_sm100" and model.is_moe and model.qk_norm == "head"))
