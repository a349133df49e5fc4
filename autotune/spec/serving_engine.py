"""How a serving engine runs requests: its scheduler, batch limits, KV cache and memory share.

A :class:`Runtime` that is a serving engine (vLLM, SGLang, TensorRT-LLM, NVIDIA's MLPerf harness)
carries a :class:`ServingEngine` in ``runtime.serving``; training never reads it, so a serving field
cannot change a training price. Presets give every value with its source (``[serving]`` in
``autotune/data/runtimes/*.toml``); the load simulation (``autotune/cost/serving_sim.py``) and the
engine limits (``autotune/cost/serving_limits.py``) read them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from autotune.errors import AutotuneError, require, require_choice
from autotune.spec.serving_engine_checks import check_values
from autotune.spec.serving_kernel_rows import decode_attention_row, mla_row, prefill_attention_row

__all__ = ["ServingEngine", "SCHEDULERS", "KV_RESERVATIONS", "ADMISSIONS", "MEMORY_RULES", "BATCH_RULES", "KV_CACHE_DTYPES",
           "SERVING_EXPORTS", "SERVING_ENGINES", "serving_engine_from_dict", "SERVING_SETTING_NAMES",
           "NVFP4_GEMM_FITS", "FP8_GEMM_FITS", "FP8_BLOCK_GEMMS", "MOE_BACKENDS", "TP_ALLREDUCES", "FLASHINFER_AR_FUSIONS", "release_number",
           "VLLM_V1_RELEASE"]

# "prefill_first": a step runs either new prompts or one decode token for every running request,
# prompts first (vLLM's v0 scheduler without chunked prefill; SGLang's forward_step). "mixed": every
# step decodes the running requests and fills the rest of the token budget with prompts
# (TensorRT-LLM's in-flight fused batching; vLLM with chunked prefill, its V1 engine).
# ``chunked_prefill``: a prompt may be split over steps (else it runs whole in one step).
SCHEDULERS = ("prefill_first", "mixed")
# "grow": KV blocks taken as tokens are produced, a request preempted (recomputed later) when they
# run out (vLLM, SGLang); "full": a request is admitted only when its prompt plus all its output fit
# (TensorRT-LLM's GUARANTEED_NO_EVICT).
KV_RESERVATIONS = ("grow", "full")
# Which waiting request the scheduler admits: "prompt" (its prompt's KV blocks fit, plus its whole
# output under kv_reservation "full": vLLM, TensorRT-LLM); "reserve_output" (SGLang's PrefillAdder:
# its prompt plus its max_new_tokens fit beside the running requests' remaining max_new_tokens x
# new_token_ratio, the ratio decaying each decode step and re-estimated on a retraction).
ADMISSIONS = ("prompt", "reserve_output")
# What memory_fraction multiplies: "total" (vLLM gpu_memory_utilization: weights, activations and
# KV cache within fraction x total); "static" (SGLang mem_fraction_static: weights and KV pool within
# fraction x total; the profile of activations is not subtracted); "free" (TensorRT-LLM
# kv_cache_free_gpu_mem_fraction: the KV cache takes fraction x what is free after the weights and
# the activation buffers); "reserved" (SGLang today: everything but memory_reserved_bytes); "sglang_reserve"
# (SGLang 0.5.3-0.5.5: a reserve by prompt chunk, decode graphs and TP, cost/sglang_memory.py).
MEMORY_RULES = ("total", "static", "free", "reserved", "sglang_reserve")
# How the batch limits are set where a launch does not give them: "fixed" (the preset's values),
# "trtllm_bench" (trtllm-bench build's heuristic from the dataset's mean ISL/OSL and memory),
# "max_model_len" (vLLM v0 without chunked prefill: the token budget is max(max_model_len, 2048)),
# "vllm_device" (vLLM V1: by GPU memory, 8192 tokens and 1024 sequences on 70-160 GB GPUs).
# vLLM's V1 defaults changed twice: "vllm_by_name" (0.8: 8192 tokens on a GPU named H100 or H200,
# 2048 on any other, 1024 sequences on all) and "vllm_by_memory" (0.9 to 0.11: 8192 tokens and 1024
# sequences from 70 GiB except A100, else 2048 and 256; no larger tier from 160 GiB).
# Under "trtllm_bench" without chunked prefill the budget is at least a prompt plus a full batch
# (trtllm-bench's PyTorch path forces max_num_tokens to max ISL + max_batch_size).
BATCH_RULES = ("fixed", "trtllm_bench", "max_model_len", "vllm_device", "vllm_by_name", "vllm_by_memory")
# "auto": the activation dtype; "fp8": FP8 (E4M3) always; "weights": FP8 when the weights are
# FP8 (trtllm-bench build --quantization FP8 sets the KV cache to FP8 too).
KV_CACHE_DTYPES = ("auto", "fp8", "weights")
# The launch command a serving plan exports to (autotune/outputs/export/serving.py).
SERVING_EXPORTS = ("vllm", "sglang", "trtllm-serve", "")
# Engine names as published rows write them (the `engine` column of serving CSVs).
# the MoE kernels an engine runs: "" its own default (its serving_moe_gemm fit); "trtllm" TensorRT-LLM's
# TRTLLMGenFusedMoE (moe_config backend TRTLLM; llm_args.py MoeConfig.backend defaults to CUTLASS in 1.0), or
# the same TRTLLM-Gen kernels through FlashInfer (SGLang's --moe-runner-backend flashinfer_trtllm calls
# flashinfer.fused_moe.trtllm_fp4_block_scale_moe, which FlashInfer's docs list under "TensorRT-LLM Fused MoE")
MOE_BACKENDS = ("", "trtllm")
MOE_LAYER_TABLES = ("", "trtllm")  # "trtllm": autotune/data/trtllm_moe.toml
# the kernels of its TP all-reduces: NCCL's ring/tree, or TensorRT-LLM's AUTO strategy (its Lamport
# MIN_LATENCY kernels for small inputs inside an NVLink node, NCCL else: cost/serving_collectives.py)
# "nccl": NCCL (vLLM's and SGLang's own kernel below its buffer, priced by formula); "trtllm_auto": TensorRT-LLM's
# AUTO strategy; "sglang_v1" / "sglang_v2": SGLang's legacy CustomAllreduce (0.5.6-0.5.11) / CustomAllReduceV2
# (0.5.12 on) at their measured tables; "vllm_symm": vLLM 0.11-0.14's dispatch with symmetric memory, measured
# (cost/serving_custom_ar.py)
TP_ALLREDUCES = ("nccl", "trtllm_auto", "sglang_v1", "sglang_v2", "vllm_symm")
# where SGLang switches FlashInfer's all-reduce fusion on by itself (cost/serving_custom_ar.py sglang_fusion_on)
FLASHINFER_AR_FUSIONS = ("", "sm100", "sm90_sm100")
SERVING_ENGINES = ("vllm", "sglang", "tensorrt-llm", "mlperf-nvidia")
# The activation format of an engine's MXFP4 MoE GEMMs on Blackwell (on Hopper every engine runs them
# weight-only, dequantised to BF16): "bf16" (W4A16) or "mxfp8" (W4A8, FP8 tensor-core rate).
MXFP4_ACTIVATIONS = ("bf16", "mxfp8")
# The kernel of an engine's MXFP4 MoE on SM90 (vLLM mxfp4.py get_mxfp4_backend): Marlin, or OpenAI's triton_kernels matmul_ogs
MXFP4_SM90_KERNELS = ("marlin", "triton")
# Which fit prices an engine's NVFP4 linear layers on a device that has both: "sweep", the device's
# square-GEMM sweep (regressions.gemm.nvfp4); "linear", its measurement of the engine's linear layer at
# serving shapes, activation quantization included (regressions.serving_gemm.nvfp4, TensorRT-LLM's);
# "vllm" / "sglang", that engine's own linear measured the same way (regressions.serving_gemm_vllm.nvfp4,
# serving_gemm_sglang.nvfp4) and MoE layer (serving_moe_gemm_<engine>.nvfp4); "linear_dense", TensorRT-LLM's
# linear fit for the dense linear layers only, the MoE experts keeping the sweep (a TensorRT engine built with
# gemm_plugin nvfp4: the plugin runs FP4Linear / FP4RowLinear, the MoE layer its own MixtureOfExperts plugin).
# The same choice picks the engine's block-scale FP8 fits (.fp8_block) for a block-scaled FP8 checkpoint
# (ModelSpec.fp8_block_scaled) where the device has them (H100, H200); "sweep" keeps the per-tensor fit.
# "best_measured", the device's fastest measured engine linear (the lowest seconds per FLOP among
# regressions.serving_gemm*.nvfp4) for the dense linears, the experts at the sweep: a TensorRT engine built
# without gemm_plugin runs TensorRT's own FP4 GEMMs, which no table measures (cost/serving_gemm_fits.py)
NVFP4_GEMM_FITS = ("sweep", "linear", "linear_dense", "vllm", "sglang", "best_measured")
# Which fit prices an engine's per-tensor FP8 linear layers (a checkpoint not block-scaled): "sweep", the device's
# square-GEMM sweep (regressions.gemm.fp8, over kernel_efficiency); "linear", TensorRT-LLM's FP8 linear measured at
# serving shapes, its activation quantization included (regressions.serving_gemm.fp8, in_engine) where the device
# has it (H100, H200); the MoE experts keep the sweep (cost/serving_gemm_fits.py fp8_linear_cluster)
FP8_GEMM_FITS = ("sweep", "linear")
# The kernel a block-FP8 checkpoint's linears run where it is not the one the engine's fits measure ("": that
# one): "flashinfer", FlashInfer's groupwise FP8 GEMM (SGLang on SM100 with DeepGEMM off; cost/flashinfer_fp8_block.py,
# set from the row's launch environment by calibrate/serving_flags.py deepgemm_flags)
FP8_BLOCK_GEMMS = ("", "flashinfer")
# the host work a step overlaps with the GPU's (autotune/cost/serving_host.py): none, the previous
# step's output processing (vLLM 0.6's async output processor), or all of it (an overlap scheduler)
HOST_OVERLAPS = ("none", "output", "all")
# The first vLLM release whose default engine is V1 (envs.py VLLM_USE_V1 default 1 in the vllm-0.8.0 wheel)
VLLM_V1_RELEASE = (0, 8)


def release_number(text: str) -> tuple[int, ...] | None:
    """The first dotted number in ``text`` as a tuple that orders releases ('v0.20.2' -> (0, 20, 2)),
    trailing zeros dropped ("1.0" names the release "1.0.0" does); None where ``text`` has no number."""
    found = re.search(r"(\d+(?:\.\d+)*)", text)
    if not found:
        return None
    parts = [int(p) for p in found.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


@dataclass(frozen=True, kw_only=True)
class ServingEngine:
    """A serving engine's behaviour. Counts of 0 mean "no cap of its own" (memory decides)."""

    engine: str  # SERVING_ENGINES
    version: str  # the release the values are taken from
    scheduler: str = "mixed"  # SCHEDULERS
    chunked_prefill: bool = True  # a prompt may be split over steps (at most prefill_chunk_tokens a step if > 0)
    max_num_seqs: int = 0  # running requests at most (0: as many as the KV cache holds)
    max_num_batched_tokens: int = 0  # tokens one step processes at most (prompt chunks plus decodes)
    batch_rule: str = "fixed"  # BATCH_RULES
    # limits a launch states as flags (--max-num-seqs, --max_batch_size; --max-num-batched-tokens,
    # --max_num_tokens): they replace what batch_rule would pick, as the engines' argument parsers do; 0: none
    launch_max_num_seqs: int = 0
    launch_max_num_batched_tokens: int = 0
    max_model_len: int = 0  # context tokens a request may hold as launched (vLLM --max-model-len); 0: the model's
    prefill_chunk_tokens: int = 0  # with chunked_prefill: a prompt's chunk per step at most (0: the token budget)
    # the chunk by GPU memory where the engine picks it (SGLang): ((GiB from, chunk tokens), ...) ascending, the last
    # tier at or below the GPU's memory wins over prefill_chunk_tokens; (): prefill_chunk_tokens (a launch's flag clears it)
    prefill_chunk_by_memory: tuple[tuple[float, int], ...] = ()
    kv_block_tokens: int = 16  # tokens per KV cache block (paged attention); 1: token-granular
    kv_cache_dtype: str = "auto"  # KV_CACHE_DTYPES
    kv_reservation: str = "grow"  # KV_RESERVATIONS
    # sliding-window layers free the KV blocks behind their window (vLLM's hybrid KV cache manager);
    # False: a windowed layer holds every token, as a full-attention one
    kv_window_release: bool = False
    admission: str = "prompt"  # ADMISSIONS; the fields below act only under "reserve_output"
    new_token_ratio_init: float = 0.0  # the share of remaining max_new_tokens a running request reserves, when idle
    new_token_ratio_min: float = 0.0  # the floor it decays to
    new_token_ratio_decay: float = 0.0  # taken off the ratio at each decode step without a retraction
    retract_decode_steps: int = 0  # a retraction frees KV until every remaining request has room for this many tokens
    clip_max_new_tokens: int = 0  # max_new_tokens counted at most this many in admission estimates
    ignore_eos_reserves_all: bool = False  # running ignore_eos requests reserve all remaining tokens (ratio 1)
    memory_rule: str = "total"  # MEMORY_RULES
    memory_fraction: float = 0.9  # the share memory_rule applies (0 with the "reserved" rule)
    # (smallest TP degree, fraction): the engine's default by TP degree where it has one (SGLang 0.3)
    memory_fraction_by_tp: tuple[tuple[int, float], ...] = ()
    memory_reserved_bytes: float = 0.0  # "reserved" rule: memory kept outside weights and KV cache
    decode_cuda_graph_max_batch: int = 0  # decode steps of up to this many requests replay a CUDA graph
    # the largest captured decode batch by GPU memory where the engine picks it (SGLang 0.4.7-0.5.2's capture list):
    # ((GiB from, batch), ...) ascending as prefill_chunk_by_memory, or (GiB from, batch, TP from) where the TP degree
    # picks it too (SGLang 0.5.3 on); (): decode_cuda_graph_max_batch (a flag clears it)
    decode_graph_max_by_memory: tuple[tuple[float, ...], ...] = ()
    # the batch sizes its decode graphs are captured at, a step padded up to the next (cost/graph_padding.py); (): unpadded
    decode_graph_batch_sizes: tuple[int, ...] = ()
    # under DP attention the graph limit holds each rank's batch (the busiest rank's decodes); False: the replica's
    decode_graph_per_dp_rank: bool = False
    eager_prefill: bool = True  # prompts run as eager PyTorch (host issue per operator); False: a compiled engine
    # TensorRT-LLM PyTorch backend's overlap scheduler (py_executor.py _executor_loop_overlap): a step's requests are
    # fetched while the step before it runs, so a request waits for the end of the step after its arrival's
    overlap_admission: bool = False
    # host seconds per operator of its eager forward, as a multiple of Megatron-Core's (cost/host.py op_host_s)
    eager_op_host_scale: float = 1.0
    scheduler_steps: int = 1  # decode steps per scheduler call (vLLM multi-step); tokens stream per call
    # SGLang --scheduler-recv-interval: the scheduler takes new requests in only every this many decode
    # steps (at once after a prompt step or while idle); 1: every step
    scheduler_recv_interval: int = 1
    # a fixed-rate run's length where the harness sets one (MLPerf LoadGen's min_duration): it issues
    # rate x this many requests; 0: not stated
    rate_run_s: float = 0.0
    # how a harness spreads a rate load over the instances (cost/serving_dispatch.py DISPATCHES): "independent"
    # (each a Poisson share), "least_in_flight" (each query to the instance with the fewest in flight)
    server_dispatch: str = "independent"
    step_host_s: float = 0.0  # host seconds per scheduler call the GPU waits for
    step_host_share: float = 0.0  # host time the GPU waits for, as a share of each step's GPU time
    # host path outside the engine (cost/serving_frontend.py); zeros: the engine's own clock
    client_request_s: float = 0.0  # the client's request and first chunk over HTTP, on the TTFT clock
    prompt_encode_s: tuple[tuple[int, float], ...] = ()  # (prompt tokens, seconds) a front end takes to tokenize it
    stream_token_s: float = 0.0  # seconds a front end takes to pass each streamed token on (detokenize)
    step_host_s_per_seq: float = 0.0  # a scheduler call's host seconds per sequence it schedules (cost/serving_host.py)
    output_host_s: float = 0.0  # host seconds processing one step's output
    output_host_s_per_seq: float = 0.0  # host seconds processing one step's output per sequence
    host_overlap: str = "none"  # HOST_OVERLAPS: "none", "output" (async output processing), "all" (overlap scheduler)
    # the frontend process (API server) beside the engine: its seconds per sequence of a step (output
    # processing, detokenization, the streamed chunk); the slower of it and the engine paces the stream
    frontend_s_per_seq: float = 0.0
    frontend_per_dp_rank: bool = False  # one frontend process per DP rank (else one for the replica)
    # seconds of the API server's event loop a request's intake takes, on the loop that also streams
    # (cost/serving_loop.py); 0: the frontend is only the stage beside the engine (frontend_s_per_seq)
    frontend_intake_s: float = 0.0
    frontend_intake_before_send: float = 0.0  # the share of an intake the loop runs before the request yields
    # TensorRT-LLM's attention-DP balancer (llmapi AttentionDpConfig enable_balance / batching_wait_iters /
    # timeout_iters; defaults False / 10 / 50 in tensorrt_llm/llmapi/llm_args.py): cost/serving_adp.py
    adp_balance: bool = False
    adp_batching_wait_iters: int = 10
    adp_timeout_iters: int = 50
    supports_attention_dp: bool = False  # MoE: it can run attention data-parallel (each rank its own requests) beside EP
    weight_dtypes: tuple[str, ...] = ("bf16", "fp16", "fp8")  # weight formats it serves
    default_weight_dtype: str = "bf16"  # what it serves where a run does not say
    mxfp4_activation: str = "bf16"  # MXFP4_ACTIVATIONS: its MXFP4 experts' activations on Blackwell
    # (hidden multiple, intermediate multiple) its weight-only MXFP4 MoE kernel pads each expert's
    # weights to, on GPUs without FP4 tensor cores (vLLM's Marlin path); (): held as the checkpoint's
    mxfp4_weight_only_pad: tuple[int, ...] = ()
    mxfp4_sm90_moe: str = "marlin"  # MXFP4_SM90_KERNELS: its MXFP4 experts' kernel on Hopper (cost/serving_eval.py)
    nvfp4_gemm_fit: str = "sweep"  # NVFP4_GEMM_FITS: the fit its NVFP4 linear layers run at
    fp8_gemm_fit: str = "sweep"  # FP8_GEMM_FITS: the fit its per-tensor FP8 linear layers run at
    # its expert parallelism without an all-to-all runs the experts' activation, output zeroing and sum on every
    # routed row, its own experts' or not (vLLM's Triton fused MoE with an expert_map: cost/expert_map.py)
    moe_ep_masked_rows: bool = False
    # under pipeline parallelism its max_num_seqs bounds each of the pp micro-batches in flight (TensorRT-LLM: the
    # instance holds pp x max_batch_size requests) rather than the instance's running requests split among them
    pp_seqs_per_micro_batch: bool = False
    # the release whose tuned fused-MoE configs it ships (autotune/data/vllm_moe_configs.toml): a BF16 / per-tensor
    # FP8 expert shape without one runs the default tiles, at serving_moe_gemm_<engine>_untuned (cost/moe_configs.py)
    moe_tuned_configs: str = ""
    # its block-FP8 linear copies the BF16 input into a 4-row-padded buffer on every call on Hopper (vLLM 0.10.2-0.11.0;
    # cost/vllm_fp8_pad.py): set by release, not by preset
    fp8_block_input_pad: bool = False
    fp8_block_gemm: str = ""  # FP8_BLOCK_GEMMS: set by the row's launch environment, not by preset
    moe_layer_table: str = ""  # MOE_LAYER_TABLES: its MoE layer as measured at the model's shape (cost/serving_moe_table.py)
    moe_backend: str = ""  # MOE_BACKENDS: the kernels its MoE layers run (cost/serving_gemm_fits.py serving_cluster)
    # MOE_BACKENDS: the kernels it picks by itself for a DeepSeek-V3-architecture model's FP8 / NVFP4 experts on
    # Blackwell when no MoE backend is given (cost/serving_eval.py engine_moe_backend)
    deepseek_blackwell_moe_backend: str = ""
    # under TP its all-reduce kernel also adds the residual and applies the next RMSNorm, so a layer's two
    # residual adds and two norms run inside its two all-reduces (cost/serving_step.py FUSED_INTO_ALLREDUCE)
    allreduce_norm_fusion: bool = False
    # its RMSNorm adds the residual in the same kernel (fused_add_rmsnorm): a layer's two residual adds
    # launch no kernel of their own (cost/serving_ops.py fused_residual_adds)
    residual_norm_fusion: bool = False
    # its gated MLP's activation runs in the up GEMM's epilogue (TensorRT-LLM's gemm_swiglu_plugin, a build flag a
    # system's config sets: serving_systems.toml; cost/serving_ops.py swiglu_in_gemm)
    gemm_swiglu_fusion: bool = False
    tp_allreduce: str = "nccl"  # TP_ALLREDUCES
    flashinfer_allreduce_fusion: str = ""  # FLASHINFER_AR_FUSIONS
    # its decode-attention op as measured on a GPU for a KV dtype: rows [GPU key (runtime_kernels.gpu_keys),
    # KV dtype ("bf16" / "fp8"), latency_s, seconds per sequence x KV head(, the knee: sequences x KV heads
    # that cost only the latency)] (cost/serving_step.py); a GPU or KV dtype without a row: the generic pricing
    decode_attention: tuple[tuple, ...] = ()
    # its prompt (context) attention as measured on a GPU: rows [GPU key, head_dim, latency_s, seconds per
    # causal FLOP, optionally seconds per prompt token x query width (heads x head_dim)] (cost/serving_attention.py);
    # MLA layers, a GPU or head_dim without a row: the generic fit
    prefill_attention: tuple[tuple, ...] = ()
    # its MLA decode-attention op (absorbed form) as measured on a GPU: rows [GPU key, KV dtype, query heads
    # a GPU runs, latency_s, seconds per sequence, seconds per cached position of a sequence]
    # (cost/serving_step.py _measured_mla_decode); a GPU, KV dtype or head count without a row: generic
    mla_decode_attention: tuple[tuple[str, str, int, float, float, float], ...] = ()
    # and its MLA prompt (context) attention: rows [GPU key, KV dtype, heads, latency_s, seconds per prompt
    # token, seconds per causal query-key pair] (cost/serving_attention.py measured_mla_prefill)
    mla_prefill_attention: tuple[tuple[str, str, int, float, float, float], ...] = ()
    # its MLA decode's two absorbed BMMs (q_nope x W_UK, latent x W_UV) as measured on a GPU: rows [GPU key, BMM
    # dtype, heads a GPU runs, latency_s, seconds per token], a layer's both (cost/serving_mla_bmm.py); none: kv_up's GEMM
    mla_bmm: tuple[tuple[str, str, int, float, float], ...] = ()
    # its greedy sampler's kernels after the LM head: the bytes each moves per logit over [sampled rows x
    # vocabulary] (cost/serving_sampler.py); (): not priced
    sampler_pass_bytes: tuple[float, ...] = ()
    logits_gather_copy_bytes: float = 0.0  # bytes per logit its TP logits all-gather copies back into rows
    export: str = ""  # SERVING_EXPORTS

    def __post_init__(self) -> None:
        for name in ("memory_fraction_by_tp", "weight_dtypes", "prompt_encode_s", "mxfp4_weight_only_pad", "decode_attention",
                     "prefill_attention", "mla_decode_attention", "mla_prefill_attention", "mla_bmm", "sampler_pass_bytes",
                     "decode_graph_batch_sizes", "prefill_chunk_by_memory", "decode_graph_max_by_memory"):
            value = getattr(self, name)
            if isinstance(value, list):  # read back from TOML or JSON
                object.__setattr__(self, name, tuple(tuple(v) if isinstance(v, list) else v for v in value))
        self._check_choices()
        check_values(self)

    def _check_choices(self) -> None:
        """The named settings are ones it knows, and the engine-specific ones are this engine's."""
        require_choice("serving.engine", self.engine, SERVING_ENGINES)
        require(isinstance(self.version, str) and self.version != "", "serving.version", "must name a release")
        require(isinstance(self.moe_tuned_configs, str), "serving.moe_tuned_configs", "must name a release or be empty")
        require_choice("serving.scheduler", self.scheduler, SCHEDULERS)
        require_choice("serving.batch_rule", self.batch_rule, BATCH_RULES)
        require_choice("serving.kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        require_choice("serving.kv_reservation", self.kv_reservation, KV_RESERVATIONS)
        require_choice("serving.admission", self.admission, ADMISSIONS)
        require_choice("serving.server_dispatch", self.server_dispatch, ("independent", "least_in_flight"))
        require_choice("serving.memory_rule", self.memory_rule, MEMORY_RULES)
        require_choice("serving.export", self.export, SERVING_EXPORTS)
        require_choice("serving.mxfp4_activation", self.mxfp4_activation, MXFP4_ACTIVATIONS)
        require_choice("serving.mxfp4_sm90_moe", self.mxfp4_sm90_moe, MXFP4_SM90_KERNELS)
        require_choice("serving.nvfp4_gemm_fit", self.nvfp4_gemm_fit, NVFP4_GEMM_FITS)
        require_choice("serving.fp8_gemm_fit", self.fp8_gemm_fit, FP8_GEMM_FITS)
        require_choice("serving.fp8_block_gemm", self.fp8_block_gemm, FP8_BLOCK_GEMMS)
        require_choice("serving.moe_backend", self.moe_backend, MOE_BACKENDS)
        require_choice("serving.moe_layer_table", self.moe_layer_table, MOE_LAYER_TABLES)
        require_choice("serving.deepseek_blackwell_moe_backend", self.deepseek_blackwell_moe_backend, MOE_BACKENDS)
        require(self.deepseek_blackwell_moe_backend != "trtllm" or self.engine == "sglang", "serving.deepseek_blackwell_moe_backend",
                f"'trtllm' is picked by SGLang's server_args, not by {self.engine}")
        require(self.moe_backend != "trtllm" or self.engine in ("tensorrt-llm", "sglang"), "serving.moe_backend",
                f"'trtllm' is TensorRT-LLM's MoE backend (and SGLang's flashinfer_trtllm), not {self.engine}'s")
        require_choice("serving.tp_allreduce", self.tp_allreduce, TP_ALLREDUCES)
        require(self.tp_allreduce != "trtllm_auto" or self.engine == "tensorrt-llm", "serving.tp_allreduce",
                f"'trtllm_auto' is TensorRT-LLM's all-reduce, not {self.engine}'s")
        require(self.engine == "sglang" or not (self.tp_allreduce.startswith("sglang") or self.flashinfer_allreduce_fusion),
                "serving.tp_allreduce", f"SGLang's all-reduce settings are not {self.engine}'s")
        require(self.tp_allreduce != "vllm_symm" or self.engine == "vllm", "serving.tp_allreduce",
                f"'vllm_symm' is vLLM's all-reduce, not {self.engine}'s")
        require_choice("serving.flashinfer_allreduce_fusion", self.flashinfer_allreduce_fusion, FLASHINFER_AR_FUSIONS)
        require_choice("serving.host_overlap", self.host_overlap, HOST_OVERLAPS)

    def fraction_for_tp(self, tp: int) -> float:
        """The memory share at TP degree ``tp``: the by-TP default where the engine has one."""
        chosen = [f for t, f in sorted(self.memory_fraction_by_tp) if t <= tp]
        return chosen[-1] if chosen else self.memory_fraction

    def kv_bytes_per_element(self, weight_dtype: str, activation_bytes: int) -> float:
        """Bytes of one cached K or V element under this engine's KV dtype rule."""
        fp8 = self.kv_cache_dtype == "fp8" or (self.kv_cache_dtype == "weights" and weight_dtype in ("fp8", "nvfp4"))
        return 1.0 if fp8 else float(activation_bytes)

    def decode_attention_fit(self, gpu_keys: tuple[str, ...], kv_bytes: float) -> tuple[float, float, float] | None:
        """(latency_s, seconds per sequence x KV head, knee in sequences x KV heads) of its decode attention on
        the GPU of ``gpu_keys`` (most specific first) with a KV cache of ``kv_bytes`` per element; None where it
        has no row."""
        return decode_attention_row(self.decode_attention, gpu_keys, kv_bytes)

    def prefill_attention_fit(self, gpu_keys: tuple[str, ...], head_dim: int) -> tuple[float, ...] | None:
        """(latency_s, seconds per causal FLOP[, seconds per prompt token x query width]) of its prompt attention
        at ``head_dim`` on the GPU of ``gpu_keys`` (most specific first); None where it has no row."""
        return prefill_attention_row(self.prefill_attention, gpu_keys, head_dim)

    def mla_decode_attention_fit(self, gpu_keys: tuple[str, ...], kv_bytes: float,
                                 heads: int) -> tuple[float, float, float] | None:
        """(latency_s, s per sequence, s per cached position) of its MLA decode attention running
        ``heads`` query heads on the GPU of ``gpu_keys`` (most specific first) with a KV cache of
        ``kv_bytes`` per element; None where it has no row."""
        return mla_row(self.mla_decode_attention, gpu_keys, kv_bytes, heads)

    def mla_prefill_attention_fit(self, gpu_keys: tuple[str, ...], kv_bytes: float,
                                  heads: int) -> tuple[float, float, float] | None:
        """(latency_s, s per prompt token, s per causal pair) of its MLA prompt attention, as
        mla_decode_attention_fit looks it up."""
        return mla_row(self.mla_prefill_attention, gpu_keys, kv_bytes, heads)

    def chunk_tokens_on(self, memory_bytes: float) -> int:
        """The prompt chunk on a GPU of ``memory_bytes``: the tier of prefill_chunk_by_memory it reaches, else
        prefill_chunk_tokens."""
        tiers = [chunk for gib, chunk in self.prefill_chunk_by_memory if memory_bytes / 2**30 >= gib]
        return int(tiers[-1]) if tiers else self.prefill_chunk_tokens

    def graph_max_on(self, memory_bytes: float, tp: int = 1) -> int:
        """The largest decode batch replaying a CUDA graph on a GPU of ``memory_bytes`` at TP ``tp``: the last tier of
        decode_graph_max_by_memory it reaches (memory, and TP where the tier names one), else decode_cuda_graph_max_batch."""
        tiers = [tier[1] for tier in self.decode_graph_max_by_memory
                 if memory_bytes / 2**30 >= tier[0] and tp >= (tier[2] if len(tier) > 2 else 1)]
        return int(tiers[-1]) if tiers else self.decode_cuda_graph_max_batch

    def with_changes(self, **changes: Any) -> "ServingEngine":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SERVING_SETTING_NAMES = tuple(f.name for f in fields(ServingEngine))


def serving_engine_from_dict(data: object) -> ServingEngine:
    """A ServingEngine from ``to_dict`` output or a preset's ``[serving]`` values."""
    if isinstance(data, ServingEngine):
        return data
    if not isinstance(data, dict):
        raise AutotuneError("runtime.serving", f"must be an object of serving settings, got {data!r}")
    unknown = set(data) - set(SERVING_SETTING_NAMES)
    if unknown:
        raise AutotuneError("runtime.serving", f"has unknown setting(s) {', '.join(sorted(unknown))}; "
                                               f"valid: {', '.join(SERVING_SETTING_NAMES)}")
    return ServingEngine(**data)
