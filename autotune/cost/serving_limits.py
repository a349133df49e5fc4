"""What a serving engine lets run at once: its KV cache under memory, its sequence cap, its token budget.

The KV cache gets what the engine's memory rule leaves (autotune/spec/serving_engine.py MEMORY_RULES):
vLLM subtracts the weights and the profiled peak of a forward pass of its token budget from
``gpu_memory_utilization x total``; SGLang's static pool is ``mem_fraction_static x total`` less the
weights; TensorRT-LLM's is ``kv_cache_free_gpu_mem_fraction`` of what is free after the engine and its
activation buffers. Every rule also loses the CUDA context and communicator buffers (the device
profile's ``reserved_bytes``). The caps are the engine's own where it has fixed ones, else derived as
the engine derives them (trtllm-bench build's heuristic, vLLM's defaults by GPU memory, SGLang's
pool size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.cost.cache import tile_bytes_per_token
from autotune.cost.sglang_memory import engine_reserved_bytes
from autotune.errors import require
from autotune.graph.table import model_tables
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.serving_engine import VLLM_V1_RELEASE, ServingEngine, release_number

__all__ = ["EngineLimits", "engine_limits", "bench_param_count", "bench_head_size", "trtllm_bench_setting", "vllm_device_defaults", "activation_bytes_per_token",
           "scheduling_ranks", "vllm_profile_peak_bytes", "trtllm_profile_peak_bytes",
           "sglang_max_running"]

_GIB = 2.0**30
# the PyTorch backend's KvCacheCreator sizes the KV cache from 0.19 on (runtimes/tensorrt-llm-0.19.toml: trtllm-bench's
# PyTorch path from 0.19); 0.17's TensorRT engines reserve their activations at build time
TRTLLM_PYTORCH_RELEASE = (0, 19)
# bytes a weight in trtllm-bench's heuristic (tensorrt_llm/bench/build/tuning.py BYTES_PER_ELEM: FP8 1, NVFP4 0.5, else 2;
# MXFP4's W4A16_MXFP4 / W4A8_MXFP4_MXFP8 are not listed @04cba882, so GPT-OSS counts 2)
_BENCH_WEIGHT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}
# Elements a quantized weight takes in its safetensors file, which is what trtllm-bench's param_count sums
# (bench/build/dataclasses.py get_param_count: huggingface_hub's parameter_count, the product of each tensor's
# shape by dtype): ModelOpt's NVFP4 export packs two E2M1 values in one U8 and keeps an F8_E4M3 scale per 16;
# MXFP4 (OCP MX v1.0) a U8 pair and a U8 E8M0 scale per 32; FP8 one F8_E4M3 each (per-tensor scales aside).
_STORED_ELEMENTS = {"nvfp4": 0.5 + 1.0 / 16.0, "mxfp4": 0.5 + 1.0 / 32.0}


def bench_param_count(model: ModelSpec, weight_dtype: str) -> float:
    """The parameter count trtllm-bench reads from the checkpoint's safetensors headers: the BF16 token
    embedding, LM head and MoE routers (cost/serving_step.py: left unquantized by ModelOpt) counted whole,
    the quantized weights as stored (all linear weights; MXFP4: the routed experts only)."""
    total = float(model.num_parameters())
    stored = _STORED_ELEMENTS.get(weight_dtype)
    if stored is None:
        return total
    if weight_dtype == "mxfp4":  # experts only: all experts' weights from the active/total gap
        e, k = model.num_experts, model.num_experts_per_token
        quantized = (total - model.num_active_parameters()) * e / (e - k)
    else:
        embeddings = model.vocab_size * model.hidden_size * (1 if model.tied_embeddings else 2)
        quantized = total - embeddings - model.num_moe_layers * model.hidden_size * model.num_experts
    return total - quantized * (1.0 - stored)


def bench_head_size(model: ModelSpec) -> int:
    """trtllm-bench's head_size: config.json's head_dim, else hidden_size / num_attention_heads
    (dataclasses.py ModelConfig.set_values_if_none). MLA checkpoints (DeepSeek-V3/R1) name no head_dim:
    their config class is the checkpoint's own configuration_deepseek.py (auto_map, loaded under
    trust_remote_code=True), which sets none."""
    return model.hidden_size // model.num_heads if model.is_mla else model.head_dim


@dataclass(frozen=True, kw_only=True)
class EngineLimits:
    """One replica's limits: requests running at most, tokens a step, KV tokens the cache holds."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    kv_cache_bytes_per_gpu: float
    memory_note: str  # how the KV cache was sized (for outputs)

    def __post_init__(self) -> None:
        require(self.max_num_seqs >= 1, "max_num_seqs", f"must be >= 1, got {self.max_num_seqs}")
        require(self.max_num_batched_tokens >= 1, "max_num_batched_tokens", f"must be >= 1, got {self.max_num_batched_tokens}")


def activation_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Live activation bytes of one token in a forward pass per GPU: the widest operator's input
    and output beside the residual stream (BF16), as the engines' profiling forward peaks."""
    tables = model_tables(model, 1, 2, "flash")
    widest = tile_bytes_per_token(tables.layer, 1, tp, False)
    if tables.moe_layer is not None and tables.experts is not None:
        widest = max(widest, tile_bytes_per_token(tables.experts, 1, tp, False) * model.num_experts_per_token)
    return widest


# vLLM's fused MoE allocates per call intermediate_cache13 of M x topk x max(2N, K) and intermediate_cache2 of
# M x topk x N elements in the activation dtype (M the step's tokens, K the hidden size, N one expert's FFN width
# on this GPU: vllm-project/vllm model_executor/layers/fused_moe/fused_marlin_moe.py and fused_moe.py
# fused_experts_impl @13cb3e44), M chunked at VLLM_FUSED_MOE_CHUNK_SIZE (envs.py: 16 x 1024 tokens)
_VLLM_MOE_CHUNK_TOKENS = 16 * 1024
# The V1 profile run then samples one token for each of min(tokens, max_num_seqs) dummy requests: the head's
# logits over the whole vocabulary (BF16) and the sampler's float32 copy of them, both live
# (v1/worker/gpu_model_runner.py _dummy_sampler_run; v1/sample/sampler.py 'Use float32 for the logits.')
_VLLM_SAMPLER_BYTES_PER_LOGIT = 2.0 + 4.0


def vllm_profile_peak_bytes(model: ModelSpec, *, tp: int, ep: int, tokens: int, seqs: int, v1: bool = True) -> float:
    """Activation bytes per GPU of vLLM's profiling forward of ``tokens`` tokens (worker
    determine_available_memory subtracts its peak): the widest dense operator's tile as for any engine,
    the fused-MoE kernel's two intermediate caches for an MoE model (experts split by TP unless EP holds
    them whole), and on the V1 engine the dummy sampler's logits, whichever is largest."""
    dense = tile_bytes_per_token(model_tables(model, 1, 2, "flash").layer, 1, tp, False) * max(tokens, 1)
    moe = 0.0
    if model.num_experts:
        width = model.expert_ffn_hidden_size / (1 if ep > 1 else tp)
        rows = min(max(tokens, 1), _VLLM_MOE_CHUNK_TOKENS) * model.num_experts_per_token
        moe = rows * (max(2 * width, model.hidden_size) + width) * 2.0
    sampler = min(max(tokens, 1), seqs) * model.vocab_size * _VLLM_SAMPLER_BYTES_PER_LOGIT if v1 else 0.0
    return max(dense, moe, sampler)


# NVIDIA/TensorRT-LLM, read in stored revisions whose commits the code index does not record (the repository's
# snapshot is over the fetch limit, so no tag could be pinned): its PyTorch backend sizes the KV cache from one
# profiling forward (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator, a 1.x revision and the executor_config-era
# 0.19-0.21 one alike): dummy context requests filling max_num_tokens, the list repeated tp_size times under attention
# DP, so every rank runs max_num_tokens; free memory is fraction x (total - torch peak - memory outside torch). Under
# attention DP the fused MoE all-gathers every rank's rows (allgather / reducescatter unless MNNVL alltoall:
# _torch/modules/fused_moe/fused_moe_cutlass.py enable_alltoall) and moe_max_num_tokens defaults to max_num_tokens x
# dp_size (the same module and its siblings in modules/fused_moe), so the profiled MoE holds tp x max_num_tokens rows
# unchunked. Its CUTLASS workspace a row x top-k (cpp/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_kernels.cu
# getWorkspaceDeviceBufferSizes): the GEMM inputs overlapped, max(permuted input H x a, FC1 result I x a, FC2 output
# H x 2), and the outputs overlapped, max(gated FC1 output 2I x 2, FC2 output H x 2), a the GEMM input's bytes,
# outputs in BF16
_TRTLLM_MOE_INPUT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}  # FP8 per-tensor / NVFP4 quantized inputs; BF16 (2) else
_BF16_BYTES = 2.0


def trtllm_profile_peak_bytes(model: ModelSpec, *, tp: int, ep: int, tokens: int, attention_dp: bool,
                              weight_dtype: str) -> float:
    """Activation bytes per GPU of TensorRT-LLM's KV-estimation forward of ``tokens`` tokens a rank: the widest
    dense tile as for any engine, and for an MoE model the fused MoE's rows (every rank's under attention DP) with
    the CUTLASS workspace at this rank's expert width (moe_tp = tp / ep), the gathered input and the BF16 output."""
    dense = tile_bytes_per_token(model_tables(model, 1, 2, "flash").layer, 1, tp, False) * max(tokens, 1)
    if not model.num_experts:
        return dense
    rows = max(tokens, 1) * (tp if attention_dp else 1)
    width = model.expert_ffn_hidden_size / max(tp // max(ep, 1), 1)
    a = 2.0 if model.fp8_block_scaled else _TRTLLM_MOE_INPUT_BYTES.get(weight_dtype, 2.0)
    h = model.hidden_size
    expanded = max(h * a, width * a, h * _BF16_BYTES) + max(2 * width * _BF16_BYTES, h * _BF16_BYTES)
    moe = rows * (model.num_experts_per_token * expanded + h * (a + _BF16_BYTES))
    return max(dense, moe)


def trtllm_bench_setting(*, params_b: float, num_layers: int, num_kv_heads: int, head_dim: int, tp: int,
                         device_memory_gib: float, weight_bytes: float, kv_bytes: float, input_len: float,
                         output_len: float, kv_fraction: float = 0.95) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as ``trtllm-bench build`` sets them from the dataset's mean
    lengths (tensorrt_llm/bench/build/tuning.py calc_engine_setting and finetune_setting, the
    version with 1 byte a weight under FP8 and 2 otherwise): requests the KV cache holds at
    ISL + OSL tokens each, then rounded up "slightly optimistic"."""
    byte_per_token = 2 * num_layers * max(tp, num_kv_heads) * head_dim * kv_bytes / 1024**3
    available = device_memory_gib * tp - params_b * weight_bytes
    max_requests = available * kv_fraction / byte_per_token / (input_len + output_len)
    raw_bs = min(max_requests, 4096)
    raw_tokens = min(raw_bs * (1 + input_len / output_len), 32768)
    if raw_bs < 256:
        max_bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        max_bs = 128 * math.ceil(raw_bs / 128)
    else:
        max_bs = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        max_tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        max_tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        max_tokens = 1024 * math.ceil(raw_tokens / 1024)
    return max_bs, max_tokens


def vllm_device_defaults(device_name: str, memory_bytes: float, rule: str = "vllm_device") -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of `vllm serve` by GPU (OPENAI_API_SERVER). "vllm_device"
    (0.33.0 engine/arg_utils.py get_batch_defaults): 1024 and 16384 from 160 GiB, 1024 and 8192 from
    70 GiB except A100, else 256 and 2048. "vllm_by_memory" (0.9.0 and 0.11.0 _set_default_args_v1):
    the same without the 160 GiB tier. "vllm_by_name" (0.8.0 _set_default_args_v1): 8192 tokens on a
    GPU whose name holds h100 or h200, else 2048; 1024 sequences on every GPU."""
    name = device_name.lower()
    if rule == "vllm_by_name":
        return 1024, (8192 if "h100" in name or "h200" in name else 2048)
    if memory_bytes >= 160 * _GIB and rule == "vllm_device":
        return 1024, 16384
    if memory_bytes >= 70 * _GIB and "a100" not in name:
        return 1024, 8192
    return 256, 2048


def sglang_max_running(kv_tokens: int, context_len: int) -> int:
    """SGLang's running-request cap when not given: max_total_num_tokens // 2, below its request pool
    of min(max(tokens / context_len x 512, 2048), 5120) slots, one kept free (tp_worker.py and
    model_runner.py init_memory_pool, 0.3.0)."""
    pool = min(max(int(kv_tokens / context_len * 512), 2048), 5120)
    return max(1, min(kv_tokens // 2, pool - 1))


def scheduling_ranks(engine: ServingEngine, tp: int, attention_dp: bool) -> int:
    """Schedulers a replica runs, each under the engine's batch and token limits. TensorRT-LLM's
    PyTorch backend under enable_attention_dp: every rank's PyExecutor schedules its own active
    requests up to max_batch_size and max_num_tokens, and rank 0 admits up to ``tp_size x
    max_num_active_requests`` across them (tensorrt_llm/_torch/pyexecutor/py_executor.py
    _fetch_new_requests @9521caf4: total_max_num_active_requests); NVIDIA's MLPerf harness runs that
    executor, its configs stating the limits per rank. Other engines: one scheduler."""
    return tp if attention_dp and engine.engine in ("tensorrt-llm", "mlperf-nvidia") else 1


def _kv_bytes_per_gpu(engine: ServingEngine, cluster: ClusterSpec, tp: int, weights: float,
                      activations: float, attention_dp: bool = False) -> tuple[float, str]:
    device = cluster.device
    total, context = device.memory_bytes, device.reserved_bytes
    fraction = engine.fraction_for_tp(tp)
    if engine.memory_rule == "total":
        return fraction * total - weights - activations - context, f"{fraction:g} x total - weights - activations - context"
    if engine.memory_rule == "static":
        return fraction * total - weights - context, f"{fraction:g} x total - weights - context"
    if engine.memory_rule == "free":
        return fraction * (total - weights - activations - context), f"{fraction:g} x (total - weights - activations - context)"
    if engine.memory_rule == "sglang_reserve":  # SGLang 0.5.3-0.5.5's reserve by chunk, graphs and TP (sglang_memory.py)
        reserve = engine_reserved_bytes(engine, total, tp, attention_dp)
        return total - reserve - weights - context, f"total - {reserve / _GIB:.2f} GiB reserve - weights - context"
    return total - engine.memory_reserved_bytes - weights - context, "total - reserve - weights - context"


def engine_limits(engine: ServingEngine, model: ModelSpec, cluster: ClusterSpec, *, tp: int, weight_dtype: str,
                  weight_bytes_per_gpu: float, kv_bytes_per_token_per_gpu: float, input_len: float,
                  output_len: float, attention_dp: bool = False, ep: int = 1) -> EngineLimits:
    """The replica's limits for a workload of mean ``input_len`` / ``output_len`` tokens (``attention_dp``:
    the replica runs DP attention, each of its ``tp`` ranks scheduling its own requests)."""
    seqs, tokens = engine.max_num_seqs, engine.max_num_batched_tokens
    if engine.batch_rule == "trtllm_bench":
        kv_elem = engine.kv_bytes_per_element(weight_dtype, 2)
        seqs, tokens = trtllm_bench_setting(
            params_b=bench_param_count(model, weight_dtype) / 1e9, num_layers=model.num_layers,
            num_kv_heads=model.num_kv_heads, head_dim=bench_head_size(model), tp=tp, device_memory_gib=cluster.device.memory_bytes / _GIB,
            weight_bytes=_BENCH_WEIGHT_BYTES.get(weight_dtype, 2.0), kv_bytes=kv_elem, input_len=input_len,
            output_len=output_len)
        if not engine.chunked_prefill:  # bench/benchmark/utils/general.py get_settings (PyTorch path)
            tokens = max(tokens, math.ceil(input_len) + seqs)
    elif engine.batch_rule in ("vllm_device", "vllm_by_name", "vllm_by_memory"):
        seqs, tokens = vllm_device_defaults(cluster.device.name, cluster.device.memory_bytes, engine.batch_rule)
    elif engine.batch_rule == "max_model_len":  # the launch's --max-model-len, else the model's context
        tokens = max(engine.max_model_len or model.max_seq_len, 2048)
    seqs = engine.launch_max_num_seqs or seqs  # a stated flag wins over the engine's own rule
    tokens = engine.launch_max_num_batched_tokens or tokens
    if engine.engine == "vllm" and engine.memory_rule == "total":  # the profiled peak of its own kernels
        activations = vllm_profile_peak_bytes(model, tp=tp, ep=ep, tokens=tokens, seqs=seqs,
                                              v1=(release_number(engine.version) or ()) >= VLLM_V1_RELEASE)
    elif engine.engine == "tensorrt-llm" and (release_number(engine.version) or ()) >= TRTLLM_PYTORCH_RELEASE:
        activations = trtllm_profile_peak_bytes(model, tp=tp, ep=ep, tokens=tokens, attention_dp=attention_dp,
                                                weight_dtype=weight_dtype)
    else:
        activations = activation_bytes_per_token(model, tp) * max(tokens, 1)
    kv_bytes, note = _kv_bytes_per_gpu(engine, cluster, tp, weight_bytes_per_gpu, activations, attention_dp)
    ranks = scheduling_ranks(engine, tp, attention_dp)
    seqs, tokens = seqs * ranks, tokens * ranks
    require(kv_bytes > 0, "gpus", f"{model.name}'s weights ({weight_bytes_per_gpu / _GIB:.1f} GiB per GPU at tp={tp}) "
            f"leave no KV cache on {cluster.device.name} under {engine.engine} {engine.version}'s memory rule ({note})")
    capacity = int(kv_bytes / kv_bytes_per_token_per_gpu) // engine.kv_block_tokens * engine.kv_block_tokens
    if seqs == 0:  # memory decides
        seqs = sglang_max_running(capacity, engine.max_model_len or model.max_seq_len) if engine.engine == "sglang" else max(1, capacity)
    require(tokens > 0, "serving.max_num_batched_tokens", f"{engine.engine} {engine.version} states no token budget and no rule for one")
    return EngineLimits(max_num_seqs=int(seqs), max_num_batched_tokens=int(tokens),
                        kv_capacity_tokens=capacity, kv_cache_bytes_per_gpu=kv_bytes, memory_note=note)
