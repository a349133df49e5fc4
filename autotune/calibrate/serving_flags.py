"""Engine launch flags a published serving row's notes quote (calibrate/serving_rows.py applies them to
the engine's preset): batch and token limits, the KV cache dtype, SGLang's chunk and graph limits,
TensorRT-LLM's attention-DP balancing, an attention backend other than the measured one, the MoE backend
and vLLM V1's async scheduling."""

from __future__ import annotations

import re

from autotune.calibrate.serving_names import block_scaled_fp8
from autotune.spec.runtime import load_runtime
from autotune.spec.serving_engine import ServingEngine, release_number

__all__ = ["adp_balance_flags", "async_scheduling_flags", "attention_backend_flags", "bf16_kv_flags", "deepgemm_flags", "dp_graph_flags",
           "limit_flags", "moe_backend_flags", "mxfp4_flags", "named_mla_kernel_flags", "note_number",
           "stores_no_kv_quantization"]


def note_number(pattern: str, text: str) -> float | None:
    """The first group of ``pattern`` in ``text`` as a number (thousands commas dropped); None if absent."""
    found = re.search(pattern, text, flags=re.IGNORECASE)
    return float(found.group(1).replace(",", "")) if found else None


# The MLA decode backends an engine's measured rows time (ServingEngine.mla_decode_attention): SGLang's defaults
# for DeepSeek, fa3 on SM90 and trtllm_mla on SM100 (aiconfigurator @095f58a5 collector/sglang/collect_mla.py)
_MEASURED_MLA_BACKENDS = {"sglang": ("fa3", "trtllm_mla")}


def attention_backend_flags(engine: ServingEngine, notes: str) -> dict:
    """SGLang's --attention-backend naming another kernel (flashinfer, triton, flashmla): its MLA decode and
    prompt attention keep the generic pricing instead of the measured rows."""
    backend = re.search(r"--attention[-_]backend[ =]+(\w+)", notes)
    measured = _MEASURED_MLA_BACKENDS.get(engine.engine)
    if backend is None or measured is None or backend.group(1) in measured:
        return {}
    return {name: () for name in ("mla_decode_attention", "mla_prefill_attention") if getattr(engine, name)}


# SGLang's TRTLLM-gen MLA kernels (--attention-backend trtllm_mla: FlashInfer's TRTLLM-gen MLA decode and
# trtllm_ragged_attention_deepseek prefill, python/sglang/srt/layers/attention/trtllm_mla_backend.py in the 0.5.3
# wheel as in 0.5.14's the measured rows time), by flag or in a source's words (LMSYS GB200 part II, 2025-09-25:
# "FlashInfer Blackwell TensorRT-LLM Attention for decode and FP8 KV-cache prefill")
_TRTLLM_MLA = r"--(?:decode[-_])?attention[-_]backend[ =]+trtllm_mla\b|\btrtllm[_-]mla\b|\bTensorRT-LLM Attention\b"


def named_mla_kernel_flags(engine: ServingEngine, notes: str, measured: ServingEngine) -> dict:
    """An SGLang release whose preset has no measured MLA rows (0.4-0.5.5: sglang-0.4*'s default backends
    differ, flashinfer MLA on Blackwell in 0.5.3's model_runner.py) where the notes name the kernels the
    ``measured`` preset's rows time (aiconfigurator's SGLang trtllm_mla backend): those rows."""
    if engine.engine != measured.engine or engine.engine not in _MEASURED_MLA_BACKENDS:
        return {}
    if not re.search(_TRTLLM_MLA, notes, flags=re.IGNORECASE):
        return {}
    return {name: getattr(measured, name) for name in ("mla_decode_attention", "mla_prefill_attention")
            if not getattr(engine, name) and getattr(measured, name)}


def adp_balance_flags(engine: ServingEngine, notes: str) -> dict:
    """TensorRT-LLM's llm_options.yml attention_dp_config (enable_balance, batching_wait_iters, timeout_iters;
    the MLPerf harness's adp_balancing_*) as the notes quote it; an unquoted count keeps the engine's default."""
    changes = {}
    if re.search(r"enable_balance|adp_balancing_enable", notes) and not engine.adp_balance:
        changes["adp_balance"] = True
    wait, timeout = note_number(r"batching_wait_iters[: =]+(\d+)", notes), note_number(r"timeout_iters[: =]+(\d+)", notes)
    if wait is not None and int(wait) != engine.adp_batching_wait_iters:
        changes["adp_batching_wait_iters"] = int(wait)
    if timeout is not None and int(timeout) != engine.adp_timeout_iters:
        changes["adp_timeout_iters"] = int(timeout)
    return changes


# Launch flags as the engines spell them: vLLM (--max-num-seqs, --max-num-batched-tokens, --kv-cache-dtype),
# SGLang (--max-running-requests, --max-prefill-tokens, --kv-cache-dtype), trtllm-bench / trtllm-serve and
# LLM-API YAML (--max_batch_size, --max_num_tokens, max_batch_size:, kv_cache_config: dtype: fp8).
_SEQ_FLAGS = r"(?:--max[-_]num[-_]seqs|--max[-_]running[-_]requests|max_batch_size)[ =:]+(\d+)"
_TOKEN_FLAGS = r"(?:--max[-_]num[-_]batched[-_]tokens|--max[-_]prefill[-_]tokens|max_num_tokens)[ =:]+(\d+)"
_FP8_KV = r"kv[-_ ]cache[-_ ]dtype[ =:]+[\"']?fp8|kv_cache_config\W{0,6}dtype\W{0,4}fp8|\bfp8[ -]kv\b"


# Checkpoints that store no KV cache quantization, so a kv_cache_dtype 'auto' engine (TensorRT-LLM's, taking the
# checkpoint's kv_cache_quant_algo) keeps the cache in BF16. NVIDIA's first DeepSeek-R1 NVFP4 release: the TensorRT-LLM
# best-practice page (docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md @01c4ece911eb) says only
# 'the latest DeepSeek-R1-0528-FP4 checkpoint had enabled FP8 KV cache by-default' and runs nvidia/DeepSeek-R1-FP4,
# no KV dtype set, under the title 'B200 max-throughput for R1 with FP16 KV cache'. And the makers' own block-FP8
# releases (config.json quantization_config quant_method fp8, weight_block_size [128, 128], no KV fields:
# serving_names.NATIVE_PRECISIONS, block_scaled_fp8), which TensorRT-LLM reads as FP8_BLOCK_SCALES weights and
# nothing for the cache (_torch/model_config.py ModelConfig.load_hf_quant_config, 'DeepSeek V3 FP8 ckpt' branch).
_BF16_KV_CHECKPOINTS = ("nvidia/deepseek-r1-fp4",)
_BLOCK_FP8_RELEASES = ("deepseek-ai/deepseek-v3", "deepseek-ai/deepseek-r1", "moonshotai/kimi-k2", "minimaxai/minimax-m2")
_BF16_KV = r"\b(?:bf16|fp16)[ -]kv\b|kv[-_ ]cache[-_ ]dtype[ =:]+[\"']?(?:bf16|fp16|bfloat16|float16)\b"


def stores_no_kv_quantization(hf_model_id: str, precision: str = "") -> bool:
    """Whether the checkpoint ``hf_model_id`` names, served as released (``precision`` not FP4), has no KV cache
    quantization (_BF16_KV_CHECKPOINTS, the makers' block-FP8 releases)."""
    name = hf_model_id.strip().lower()
    # DeepSeek's R1 distillations (deepseek-ai/DeepSeek-R1-Distill-*) are BF16 Llama / Qwen releases, not block FP8:
    # served at FP8 they are someone's quantization, whose KV cache that quantization sets
    maker = name.startswith(_BLOCK_FP8_RELEASES) and "-distill-" not in name
    released = (maker or block_scaled_fp8(name)) and "fp4" not in precision.lower()
    return name in _BF16_KV_CHECKPOINTS or released


def bf16_kv_flags(engine: ServingEngine, hf_model_id: str, notes: str, precision: str = "") -> dict:
    """A BF16 KV cache where the engine would take the checkpoint's FP8 one ('weights') but the checkpoint stores
    none (stores_no_kv_quantization; TensorRT-LLM serving the named checkpoint) or the notes name a BF16 / FP16
    cache; a cache the notes name FP8 stays FP8. NVIDIA's MLPerf harness serves its own ModelOpt export, not the
    named release, and states the cache: deepseek-r1's trtllm_checkpoint_flags kv_cache_dtype 'fp8' over an export
    whose hf_quant_config.json has kv_cache_quant_algo null (mlcommons/inference_results_v5.1 @965182b03376
    closed/NVIDIA/configs/B200-SXM-180GBx8/Offline/deepseek-r1.py, code/deepseek-r1/tensorrt/hf_quant_config.json)."""
    if engine.kv_cache_dtype != "weights" or re.search(_FP8_KV, notes, flags=re.IGNORECASE):
        return {}
    bare = engine.engine == "tensorrt-llm" and stores_no_kv_quantization(hf_model_id, precision)
    return {"kv_cache_dtype": "auto"} if bare or re.search(_BF16_KV, notes, flags=re.IGNORECASE) else {}


def limit_flags(notes: str) -> dict:
    """The batch and token limits and the KV cache dtype a row's notes quote as launch flags."""
    changes = {}
    seqs, tokens = note_number(_SEQ_FLAGS, notes), note_number(_TOKEN_FLAGS, notes)
    if seqs:
        changes["launch_max_num_seqs"] = int(seqs)
    if tokens:
        changes["launch_max_num_batched_tokens"] = int(tokens)
    if re.search(_FP8_KV, notes, flags=re.IGNORECASE):
        changes["kv_cache_dtype"] = "fp8"
    # SGLang's prompt chunk and decode CUDA-graph limits (server_args.py --chunked-prefill-size, --cuda-graph-max-bs)
    chunk, graphs = note_number(r"--chunked[-_]prefill[-_]size[ =]+(\d+)", notes), note_number(r"--cuda[-_]graph[-_]max[-_]bs[ =]+(\d+)", notes)
    if chunk:
        changes["prefill_chunk_tokens"], changes["prefill_chunk_by_memory"] = int(chunk), ()  # the flag wins over the rule
    if graphs:
        changes["decode_cuda_graph_max_batch"], changes["decode_graph_max_by_memory"] = int(graphs), ()  # as the chunk's
    recv = note_number(r"(?:--)?scheduler[-_]recv[-_]interval[ =:]+(\d+)", notes)  # SGLang server_args.py, recipe YAML
    if recv:
        changes["scheduler_recv_interval"] = int(recv)
    return changes


# The first vLLM release whose wheel ships OpenAI's triton_kernels (vllm/third_party/triton_kernels in the 0.13.0 wheel,
# not in 0.11.0's; PR #28788), so that get_mxfp4_backend takes Triton on SM90 without a separate install (0.12 not read)
_VLLM_TRITON_KERNELS = (0, 13)


def mxfp4_flags(engine: ServingEngine, version: str, notes: str) -> dict:
    """vLLM's MXFP4 MoE kernel on Hopper as the row's release and notes select it: VLLM_MXFP4_USE_MARLIN=1 takes
    Marlin (envs.py; mxfp4.py get_mxfp4_backend: 'if envs.VLLM_MXFP4_USE_MARLIN or not triton_kernels_supported'),
    a release from _VLLM_TRITON_KERNELS on a preset older than it Triton (SGLang's MXFP4 is its presets': sglang-0.5.0)."""
    if engine.engine != "vllm":
        return {}
    if re.search(r"VLLM_MXFP4_USE_MARLIN\s*=\s*(?:1|true)\b", notes, flags=re.IGNORECASE):
        kernel = "marlin"
    elif (release_number(version) or ()) >= _VLLM_TRITON_KERNELS:
        kernel = "triton"
    else:
        return {}
    return {"mxfp4_sm90_moe": kernel} if kernel != engine.mxfp4_sm90_moe else {}


def moe_backend_flags(engine: ServingEngine, notes: str) -> dict:
    """The MoE backend the row's notes pick, or the one SGLang would pick that they turn off."""
    changes = {}
    # TensorRT-LLM's extra-llm-api-config.yml 'moe_config: backend: TRTLLM' (or --moe_backend TRTLLM): TRTLLMGenFusedMoE
    if engine.engine == "tensorrt-llm" and re.search(r"moe_(?:config\W{0,8}backend|backend)\W{0,4}TRTLLM\b", notes, re.IGNORECASE):
        changes["moe_backend"] = "trtllm"
    # SGLang's --moe-runner-backend flashinfer_trtllm (server_args.py): FlashInfer's TRTLLM-Gen fused MoE, the same
    # kernels (aiconfigurator @095f58a5 collects them as sglang_flashinfer_trtllm_moe)
    if engine.engine == "sglang" and re.search(r"--moe[-_]runner[-_]backend[ =]+flashinfer_trtllm\b", notes):
        changes["moe_backend"] = "trtllm"
    # another runner, or DeepEP's all-to-all, and SGLang keeps its own pick off (server_args.py: only at
    # moe_runner_backend auto and moe_a2a_backend none)
    elif engine.deepseek_blackwell_moe_backend and re.search(
            r"--moe[-_]runner[-_]backend[ =]+(?!auto\b)\w|--moe[-_]a2a[-_]backend[ =]+deepep|--enable[-_]deepep[-_]moe", notes):
        changes["deepseek_blackwell_moe_backend"] = ""
    return changes


def async_scheduling_flags(engine: ServingEngine, notes: str) -> dict:
    """A V1 row's --async-scheduling: the host's step work overlaps the GPU's (host_overlap 'all'); its
    --no-async-scheduling on a release where it is the default: vllm-0.8's synchronous host time."""
    if re.search(r"--no-async[-_]scheduling\b", notes) and engine.step_host_s + engine.step_host_s_per_seq == 0:
        sync = load_runtime("vllm-0.8").serving
        return {"step_host_s": sync.step_host_s, "step_host_s_per_seq": sync.step_host_s_per_seq, "host_overlap": "none"}
    if re.search(r"--async[-_]scheduling\b|async[-_]scheduling: *true", notes) and engine.host_overlap != "all":
        return {"host_overlap": "all"}
    return {}


# The first SGLang release read whose fp8_utils.py _dispatch_auto_backend runs FlashInfer's gemm_fp8_nt_groupwise
# (backend "trtllm" on SM100/103: _get_flashinfer_groupwise_backend) for block-FP8 linears when DeepGEMM is off
# (the 0.5.12 wheel; 0.5.6's dispatch_w8a8_block_fp8_linear picks by other switches; releases between not read)
_SGLANG_FLASHINFER_FP8_BLOCK = (0, 5, 12)
# DeepGEMM off in the launch environment: SGL_* is renamed SGLANG_* at import (0.5.12 environ.py _convert_SGL_to_SGLANG)
_DEEPGEMM_OFF = r"\bSGL(?:ANG)?_ENABLE_JIT_DEEPGEMM\s*=\s*[\"']?(?:0|false)\b"


def deepgemm_flags(engine: ServingEngine, version: str, notes: str) -> dict:
    """SGLang from _SGLANG_FLASHINFER_FP8_BLOCK with DeepGEMM turned off in the notes' launch environment: its
    block-FP8 linears run FlashInfer's groupwise FP8 GEMM (fp8_block_gemm "flashinfer"; the device fit, where
    measured, in cost/serving_gemm_fits.py)."""
    if engine.engine != "sglang" or (release_number(version) or ()) < _SGLANG_FLASHINFER_FP8_BLOCK:
        return {}
    return {"fp8_block_gemm": "flashinfer"} if re.search(_DEEPGEMM_OFF, notes, flags=re.IGNORECASE) else {}


# The SGLang releases whose CUDA graphs under DP attention hold the ranks' summed decodes: model_executor/
# cuda_graph_runner.py CudaGraphRunner.can_run compares sum(forward_batch.global_num_tokens_cpu) with max_bs in the
# 0.4.5-0.4.9 wheels, max(...) (the busiest rank's) in 0.4.0-0.4.4 and from 0.4.10 (0.4.10, 0.5.0rc0-0.5.3, 0.5.6,
# 0.5.7, 0.5.12 wheels read)
_SGLANG_SUMMED_GRAPHS = ((0, 4, 5), (0, 4, 10))


def dp_graph_flags(engine: ServingEngine, version: str) -> dict:
    """SGLang's decode-graph limit under DP attention as the row's release compares it (ServingEngine.
    decode_graph_per_dp_rank), where it differs from the preset's release (sglang-0.4 spans 0.4.0-0.4.6,
    sglang-0.4.8 0.4.8-0.5.5)."""
    release = release_number(version)
    if engine.engine != "sglang" or release is None:
        return {}
    per_rank = not _SGLANG_SUMMED_GRAPHS[0] <= release < _SGLANG_SUMMED_GRAPHS[1]
    return {"decode_graph_per_dp_rank": per_rank} if per_rank != engine.decode_graph_per_dp_rank else {}
