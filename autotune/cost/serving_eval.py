"""Price a serving deployment under a load: a model on replicas of ``tp`` GPUs run by a serving engine.

Ties the parts together: the step costs of one replica (serving_step), the engine's limits under
its memory rule (serving_limits), and its scheduler played over the load's requests (serving_sim).
Replicas are independent (each gets ``1 / replicas`` of the requests, as a load balancer or the
MLPerf harness's instances spread them), so the system's throughput is the replicas' sum.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.cost.checkpoint_layout import bf16_mtp
from autotune.cost.graph_padding import graph_sizes, replica_graph_max
from autotune.cost.runtime_kernels import gpu_generation, gpu_keys, runtime_cluster
from autotune.cost.serving_adp import AdpBalance
from autotune.cost.serving_admission import output_reserve
from autotune.cost.serving_limits import EngineLimits, engine_limits, scheduling_ranks
from autotune.cost.serving_load import Load, metric_value, requests_for
from autotune.cost.serving_collectives import engine_tp_allreduce, moe_comm_dtype
from autotune.cost.serving_custom_ar import FUSION_SUFFIX, sglang_fusion_on
from autotune.cost.serving_dispatch import dispatched_runs
from autotune.cost.serving_run import Requests, Schedule, Trace
from autotune.cost.serving_sampler import with_sampler
from autotune.cost.serving_pp_rounds import instance_trace
from autotune.cost.serving_attention import attention_coefficients
from autotune.cost.serving_mla_bmm import mla_bmm_fit
from autotune.cost.serving_mix import blend_steps
from autotune.cost.serving_speculative import Speculation, speculative_step, speculative_tokens
from autotune.cost.serving_gemm_fits import fp8_linear_cluster, gemm_rate_dtype
from autotune.cost.serving_step import ReplicaShape, StepModel, priced_cluster, step_model
from autotune.cost.trtllm_dp_padding import with_dp_padding
from autotune.errors import require
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.serving_engine import release_number

__all__ = ["ServingDeployment", "ServingRun", "run_serving", "replica_limits", "replica_step_model", "replica_gemm_fits", "arrival_draws", "expected_metric",
           "ARRIVAL_DRAWS", "engine_moe_backend"]

# Poisson arrivals make a rate run's latencies a random variable, and a benchmark reports one draw of
# it; near the engine's capacity the draws spread widely (TensorRT-LLM's 500-request runs at 16 QPS:
# mean ITL 39-52 ms over seeds 0-2). The prediction is their expectation, the mean over this many
# independent draws: the errors of the 40 shipped rate rows averaged over 4, 8 and 16 draws agree
# within 0.1 point (measured, tests/data/serving_runs.csv), so 4 draws have converged.
ARRIVAL_DRAWS = 4


@dataclass(frozen=True, kw_only=True)
class ServingDeployment:
    """``replicas`` engine instances of ``tp`` x ``pp`` GPUs each (``ep`` for experts), weights in
    ``weight_dtype``. With ``pp`` > 1 an instance runs ``pp`` micro-batches in flight: one simulated
    run is one micro-batch's stream of requests (serving_step.ReplicaShape), ``pp`` of them an instance."""

    model: ModelSpec
    cluster: ClusterSpec
    runtime: Runtime
    tp: int
    replicas: int = 1
    ep: int = 1
    attention_dp: bool = False  # DP attention (MoE): each GPU of a replica runs its own requests' attention
    weight_dtype: str = ""  # "": the engine's default
    pp: int = 1  # pipeline stages of tp GPUs each
    speculation: Speculation | None = None  # MTP speculative decoding (serving_speculative.py)
    eplb: bool = False  # an expert-parallel load balancer runs (cost/moe_skew.py)
    # (format, share) of the linear weights where the checkpoint mixes formats (serving_mix.autoquantize_mix);
    # (): all in weight_dtype
    weight_mix: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        require(self.runtime.serving is not None, "runtime",
                f"{self.runtime.name} is not a serving engine; give vllm, sglang, tensorrt-llm or their versions")
        require(isinstance(self.replicas, int) and self.replicas >= 1, "replicas", f"must be >= 1, got {self.replicas!r}")
        require(isinstance(self.pp, int) and 1 <= self.pp <= self.model.num_layers, "pp",
                f"must be 1..{self.model.num_layers} (the model's layers), got {self.pp!r}")
        # an instance wider than a node only where no tensor-parallel group crosses nodes: DP attention
        # with one expert group a GPU (SGLang --enable-dp-attention --ep-size = tp over nnodes, DeepEP),
        # whose only cross-node traffic is the experts' all-to-all, priced over the inter-node link
        require(self.tp <= self.cluster.gpus_per_node or (self.attention_dp and self.ep == self.tp), "tp",
                f"tp={self.tp} spans more than a node of {self.cluster.gpus_per_node} GPUs "
                "(only DP attention with ep = tp may span nodes)")
        engine = self.runtime.serving
        if self.weight_dtype:
            require(self.weight_dtype in engine.weight_dtypes, "precision",
                    f"{engine.engine} {engine.version} serves {', '.join(engine.weight_dtypes)} weights, not {self.weight_dtype}")
        if self.model.has_attention and not self.attention_dp:
            require(self.model.num_heads % self.tp == 0, "tp", f"tp={self.tp} must divide the {self.model.num_heads} heads")
        require(isinstance(self.eplb, bool) and (not self.eplb or (self.model.is_moe and self.ep > 1)), "eplb",
                "an expert load balancer needs a mixture of experts over ep > 1 ranks")
        require(not self.attention_dp or (engine.supports_attention_dp and self.model.is_moe), "attention_dp",
                f"needs a mixture-of-experts model and an engine that runs DP attention "
                f"({engine.engine} {engine.version} {'does' if engine.supports_attention_dp else 'does not'})")

    @property
    def dtype(self) -> str:
        return self.weight_dtype or self.runtime.serving.default_weight_dtype

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas


@dataclass(frozen=True, kw_only=True, eq=False)
class ServingRun:
    """One replica's simulated run, the limits it ran under and its step costs."""

    deployment: ServingDeployment
    load: Load
    limits: EngineLimits
    step: StepModel
    trace: Trace


def replica_step_model(dep: ServingDeployment, *, max_tokens: int, max_sampled: int) -> StepModel:
    engine = dep.runtime.serving
    cluster = fp8_linear_cluster(runtime_cluster(dep.cluster.for_gpus(dep.tp), dep.runtime), dep.runtime.serving.fp8_gemm_fit, dep.model.fp8_block_scaled)
    shape = ReplicaShape(tp=dep.tp, ep=dep.ep, attention_dp=dep.attention_dp, pp=dep.pp,
                         moe_alltoall=_moe_alltoall(dep), eplb=dep.eplb,
                         moe_comm_dtype=moe_comm_dtype(dep.model, engine.engine, dep.dtype) if dep.attention_dp else "",
                         adp_all_reduce=_adp_all_reduce(dep))
    spec = dep.speculation
    kv_bytes = engine.kv_bytes_per_element(dep.dtype, 2)
    tokens, sampled = speculative_tokens(max_tokens, spec), speculative_tokens(max_sampled, spec)
    step = _dtype_step(dep, cluster, shape, dep.dtype, kv_bytes, tokens, sampled) if not dep.weight_mix else \
        blend_steps(tuple(_dtype_step(dep, cluster, shape, dtype, kv_bytes, tokens, sampled) for dtype, _ in dep.weight_mix),
                    tuple(share for _, share in dep.weight_mix))
    if spec is None:
        return step
    # the MTP module of a checkpoint that keeps it in BF16 drafts at BF16's costs (checkpoint_layout.bf16_mtp)
    draft = _dtype_step(dep, cluster, shape, "bf16", kv_bytes, max_tokens, max_sampled) if bf16_mtp(dep.model, dep.dtype) else None
    return speculative_step(step, spec, verification_s_per_position(dep, cluster, shape, kv_bytes), draft)


def replica_gemm_fits(dep: ServingDeployment) -> tuple[ClusterSpec, str, str]:
    """The replica's cluster with the device fits its step model prices GEMMs with, the experts' GEMM rate and their
    MoE backend (serving_step.priced_cluster on the engine's settings, as _dtype_step passes them to step_model):
    for diagnostics that price single operators beside the step."""
    engine = dep.runtime.serving
    cluster = fp8_linear_cluster(runtime_cluster(dep.cluster.for_gpus(dep.tp), dep.runtime), dep.runtime.serving.fp8_gemm_fit, dep.model.fp8_block_scaled)
    served, backend = priced_cluster(dep.model, cluster, ReplicaShape(tp=dep.tp, ep=dep.ep), dep.dtype,
                                     mxfp4_activation=engine.mxfp4_activation, nvfp4_gemm_fit=engine.nvfp4_gemm_fit,
                                     moe_backend=engine_moe_backend(dep), moe_tuned_configs=engine.moe_tuned_configs,
                                     mxfp4_kernel=_mxfp4_kernel(dep, cluster))
    return served, gemm_rate_dtype(cluster.device, dep.dtype, engine.mxfp4_activation), backend


def _dtype_step(dep: ServingDeployment, cluster: ClusterSpec, shape: ReplicaShape, dtype: str, kv_bytes: float,
                max_tokens: int, max_sampled: int) -> StepModel:
    """The replica's step model with its weights in ``dtype``, its sampler's passes in the head (serving_sampler.py)."""
    engine = dep.runtime.serving
    step = step_model(dep.model, cluster, shape, weight_dtype=dtype, kv_bytes=kv_bytes,
                      max_tokens=max_tokens, max_sampled=max_sampled,
                      mxfp4_activation=engine.mxfp4_activation, nvfp4_gemm_fit=engine.nvfp4_gemm_fit,
                      mxfp4_pad=engine.mxfp4_weight_only_pad, moe_backend=engine_moe_backend(dep),
                      allreduce_norm_fusion=engine.allreduce_norm_fusion,
                      tp_allreduce=_tp_allreduce(dep, shape),
                      residual_norm_fusion=engine.residual_norm_fusion,
                      moe_ep_masked_rows=engine.moe_ep_masked_rows,
                      moe_tuned_configs=engine.moe_tuned_configs, fp8_input_pad=engine.fp8_block_input_pad,
                      mla_prefix=engine.engine == "vllm",  # its MLA backends' chunked prefill (vllm_mla_prefix.py)
                      moe_layer_table=engine.moe_layer_table,
                      decode_attention=engine.decode_attention_fit(gpu_keys(cluster.device.name), kv_bytes),
                      prefill_attention=engine.prefill_attention_fit(gpu_keys(cluster.device.name), dep.model.head_dim),
                      mla_attention=_mla_fits(dep, cluster, kv_bytes), mla_bmm=_mla_bmm_fit(dep, cluster),
                      mxfp4_kernel=_mxfp4_kernel(dep, cluster), fp8_block_gemm=engine.fp8_block_gemm, gemm_swiglu=engine.gemm_swiglu_fusion)
    return with_sampler(with_dp_padding(step, dep, engine_moe_backend(dep)), dep.model.vocab_size, cluster.device, shape,
                        engine.sampler_pass_bytes, engine.logits_gather_copy_bytes)


def _mxfp4_kernel(dep: ServingDeployment, cluster: ClusterSpec) -> str:
    """The engine's MXFP4 MoE kernel on Hopper (ServingEngine.mxfp4_sm90_moe); Marlin elsewhere below Blackwell:
    vLLM's Triton path needs SM 9.0-10.x (mxfp4.py get_mxfp4_backend, triton_kernels_supported), Blackwell runs
    FlashInfer's, which the step model prices without padding either way (serving_experts.pads_experts)."""
    return dep.runtime.serving.mxfp4_sm90_moe if gpu_generation(cluster.device.name) == "hopper" else "marlin"


# The MLA head geometry the measured rows time (aiconfigurator @095f58a5 collector/trtllm/collect_mla.py Scenario,
# DeepSeek-V3's config.json): kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim
MEASURED_MLA_GEOMETRY = (512, 64, 128, 128)


def _mla_fits(dep: ServingDeployment, cluster: ClusterSpec, kv_bytes: float) -> tuple | None:
    """The engine's measured MLA decode and prompt ops (each None where it has no row) for the query heads
    a GPU runs (all of them under DP attention, 1/tp under TP); None for other models and for MLA of
    another head geometry than the rows timed."""
    m = dep.model
    if not m.is_mla or (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim) != MEASURED_MLA_GEOMETRY:
        return None
    heads, keys, engine = dep.model.num_heads // (1 if dep.attention_dp else dep.tp), gpu_keys(cluster.device.name), dep.runtime.serving
    return (engine.mla_decode_attention_fit(keys, kv_bytes, heads), engine.mla_prefill_attention_fit(keys, kv_bytes, heads))


def verification_s_per_position(dep: ServingDeployment, cluster: ClusterSpec, shape: ReplicaShape,
                                kv_bytes: float) -> float | None:
    """A cached position's cost to one layer's MTP verification of an MLA model (its 1 + k query tokens a
    sequence scoring it in one kernel); None for other models (their cache read once, base's cost). The
    absorbed decode packs a sequence's query tokens with its heads, s_q x h_q rows per KV head (deepseek-ai/
    FlashMLA README: get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv); tests/test_flash_mla.py counts
    s_q x positions x h_q x (d + dv) x 2 FLOPs), so a position costs what the engine's measured row at (1 + k)
    x the heads costs; past its widest (128, aiconfigurator's tables time one query token a sequence) that
    row's cost x the heads' ratio: its FLOPs at the rate the kernel reaches there, FLOP-bound at 128 heads on
    Hopper (the 128-head row 1.55-1.93x the 64-head one) and on B200 with an FP8 cache (2.6 PFLOPS, the FP8
    GEMM fit's rate), an upper bound with Blackwell's BF16 cache (1.3 PFLOPS there); generic: the roofline of
    a single-token decode with (1 + k) x the heads, the latent read once and the FLOPs 1 + k times."""
    m, spec = dep.model, dep.speculation
    if not m.is_mla:
        return None
    tokens, ranks = 1 + spec.draft_tokens, dep.tp if dep.attention_dp else 1
    heads = m.num_heads // (1 if dep.attention_dp else dep.tp) * tokens
    fits = _mla_fits(dep, cluster, kv_bytes)
    engine, keys, widest = dep.runtime.serving, gpu_keys(cluster.device.name), 128
    own, wide = (engine.mla_decode_attention_fit(keys, kv_bytes, h) for h in (heads, widest))
    if fits is not None and fits[0] is not None and (own or wide):
        per_position = own[2] if own else wide[2] * heads / widest
        return max(per_position, fits[0][2]) / ranks
    wider = m.with_changes(num_heads=m.num_heads * tokens)
    return attention_coefficients(wider, cluster.device, shape, kv_bytes)["decode_s_per_position"]


def _mla_bmm_fit(dep: ServingDeployment, cluster: ClusterSpec) -> tuple[float, float] | None:
    """The engine's measured absorbed MLA BMMs (cost/serving_mla_bmm.py) for the heads a GPU runs; None
    for other models, MLA of another head geometry than the rows timed, and GPUs without a row."""
    m = dep.model
    if not m.is_mla or (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim) != MEASURED_MLA_GEOMETRY:
        return None
    heads = m.num_heads // (1 if dep.attention_dp else dep.tp)
    return mla_bmm_fit(dep.runtime.serving.mla_bmm, gpu_keys(cluster.device.name), m, dep.dtype, heads)


def _tp_allreduce(dep: ServingDeployment, shape: ReplicaShape) -> str:
    """The TP all-reduce kernels of the engine (serving_collectives.tp_all_reduce_s), with SGLang's FlashInfer
    fusion where its release switches it on for this model, GPU and layout (serving_custom_ar.sglang_fusion_on)."""
    engine = dep.runtime.serving
    kind = engine_tp_allreduce(engine.engine, engine.tp_allreduce)
    fused = kind.startswith("sglang") and sglang_fusion_on(
        engine.flashinfer_allreduce_fusion, dep.model, dep.cluster.device.name, tp=dep.tp,
        attention_dp=dep.attention_dp, one_node=dep.tp <= dep.cluster.gpus_per_node, moe_alltoall=shape.moe_alltoall)
    return kind + FUSION_SUFFIX if fused else kind


def engine_moe_backend(dep: ServingDeployment) -> str:
    """The MoE kernels the engine runs: its own setting, else what it picks for a DeepSeek-V3-architecture
    model (MLA with group-limited routing) at FP8 or NVFP4 (SGLang 0.5.6+ server_args.py
    _handle_model_specific_adjustments: on SM100 with moe_a2a_backend none and moe_runner_backend auto,
    quantization fp8 / modelopt_fp8 / modelopt_fp4 takes flashinfer_trtllm); the step model applies it only
    on a GPU with that kernel's fit (Blackwell, serving_gemm_fits.trtllm_gen_moe)."""
    engine, model = dep.runtime.serving, dep.model
    if engine.moe_backend or not (model.is_moe and model.is_mla and model.router_groups):
        return engine.moe_backend
    return engine.deepseek_blackwell_moe_backend if dep.dtype in ("fp8", "nvfp4") else ""


def _moe_alltoall(dep: ServingDeployment) -> bool:
    """Whether the engine's MoE layer dispatches by all-to-all under DP attention: TensorRT-LLM where
    MnnvlMemory.supports_mnnvl() and moe_ep_size > top_k (fused_moe_cutlass.py select_alltoall_method_type),
    multi-node NVLink being an NVLink domain beyond one 8-GPU baseboard (GB200 NVL72's trays); every
    other case gathers and reduce-scatters (serving_collectives.layer_collectives_s)."""
    return (dep.attention_dp and dep.runtime.serving.engine == "tensorrt-llm" and dep.cluster.gpus_per_node > 8
            and dep.ep > dep.model.num_experts_per_token)


def _adp_all_reduce(dep: ServingDeployment) -> str:
    """When SGLang's DP attention gathers by all-reduce (serving_collectives.ADP_ALL_REDUCE): always before the
    MAX_LEN mode (the 0.4 preset), in steps with prompts after it; never for the other engines."""
    engine = dep.runtime.serving
    if not dep.attention_dp or engine.engine != "sglang":
        return ""
    return "always" if (release_number(engine.version) or ()) < (0, 5) else "prefill"


def eager_issue_s(dep: ServingDeployment) -> float:
    """Host seconds a Python engine takes to issue one eager forward of every layer: each layer's
    kernel-launching operators by its own structure (cost/host.py layer_fwd_ops: attention, MLA's
    extra projections and norms, a dense MLP or a MoE layer's router, dispatch, grouped experts and
    shared experts) at the host's seconds per operator (op_host_s) times the engine's own
    ``eager_op_host_scale``. An MLA + MoE layer of DeepSeek-V3 issues 73 operators, a dense
    grouped-query layer 32."""
    from autotune.cost.host import layer_fwd_ops, op_host_s

    m = dep.model
    ops = sum(layer_fwd_ops(m, layer) for layer in range(m.num_layers))
    return ops * op_host_s(dep.cluster) * dep.runtime.serving.eager_op_host_scale


def _host_overlap(dep: ServingDeployment) -> str:
    """The engine's host overlap as the deployment runs it: vLLM 0.6's async output processing is off
    under pipeline parallelism (config.py ModelConfig.verify_async_output_proc, 0.6.0)."""
    overlap = dep.runtime.serving.host_overlap
    return "none" if overlap == "output" and dep.pp > 1 else overlap


def _adp_balance(dep: ServingDeployment, ranks: int) -> AdpBalance | None:
    """The attention-DP balancer where the engine runs it: TensorRT-LLM's PyExecutor._schedule calls it only
    under enable_attention_dp with enable_balance (py_executor.py @9521caf4)."""
    engine = dep.runtime.serving
    if not (engine.adp_balance and dep.attention_dp and ranks > 1):
        return None
    return AdpBalance(ranks=ranks, batching_wait_iters=engine.adp_batching_wait_iters,
                      timeout_iters=engine.adp_timeout_iters)


def _window_release(dep: ServingDeployment) -> dict:
    """The Schedule's hybrid-KV fields: the windowed layers' share of the KV bytes and their window,
    where the engine frees blocks behind a sliding window (not chunked windows: vLLM turns its hybrid
    manager off for chunked local attention by default, config VllmConfig.__post_init__ 0.11.0)."""
    model = dep.model
    if not (dep.runtime.serving.kv_window_release and model.sliding_window and model.window_kind == "sliding"):
        return {}
    return dict(kv_windowed_share=model.windowed_share, kv_window_tokens=model.sliding_window)


def replica_limits(dep: ServingDeployment, load: Load):
    """The engine's limits on one replica of ``dep`` under ``load``; under pipeline parallelism a replica is one of the
    pp micro-batches in flight, which holds the engine's max_num_seqs where the engine bounds each micro-batch with it
    (TensorRT-LLM: ServingEngine.pp_seqs_per_micro_batch), else its share (SGLang: max_running_requests // pp)."""
    engine = dep.runtime.serving
    probe = replica_step_model(dep, max_tokens=1, max_sampled=1)
    limits = engine_limits(engine, dep.model, dep.cluster, tp=dep.tp, weight_dtype=dep.dtype,
                           weight_bytes_per_gpu=probe.weight_bytes_per_gpu,
                           kv_bytes_per_token_per_gpu=probe.kv_bytes_per_token_per_gpu,
                           input_len=load.input_len, output_len=load.output_len, attention_dp=dep.attention_dp,
                           ep=dep.ep)
    if dep.pp > 1 and not engine.pp_seqs_per_micro_batch:
        limits = replace(limits, max_num_seqs=max(1, limits.max_num_seqs // dep.pp))
    return limits


def _budget_ranks(dep: ServingDeployment, dp_ranks: int) -> int:
    """The ranks whose own token budgets split the replica's (serving_rank_budget.py): the step's DP ranks where
    the limits are each rank's summed (serving_limits.scheduling_ranks: TensorRT-LLM and NVIDIA's MLPerf harness),
    else 1 (one scheduler holds the budget)."""
    return dp_ranks if scheduling_ranks(dep.runtime.serving, dep.tp, dep.attention_dp) > 1 else 1


def run_serving(dep: ServingDeployment, load: Load, sent: Requests | None = None) -> ServingRun:
    """Simulate ``load`` (the requests reaching one replica; ``sent``: these, else drawn) on one replica of ``dep``."""
    engine = dep.runtime.serving
    limits = replica_limits(dep, load)
    # a decode step holds at most as many requests as the KV cache has room for
    decodes = min(limits.max_num_seqs, max(1, limits.kv_capacity_tokens // max(1, load.input_len)))
    tokens = max(limits.max_num_batched_tokens, decodes)
    # the host schedules and processes outputs once a speculative step: 1 / A of that a token step
    per_step = 1.0 if dep.speculation is None else 1.0 / dep.speculation.acceptance_length
    step = replica_step_model(dep, max_tokens=tokens,
                              max_sampled=decodes + limits.max_num_batched_tokens // load.shortest_input_len + 1)
    schedule = Schedule(scheduler=engine.scheduler, chunked_prefill=engine.chunked_prefill,
                        prefill_chunk_tokens=engine.chunk_tokens_on(dep.cluster.device.memory_bytes), max_num_seqs=decodes,
                        max_num_batched_tokens=limits.max_num_batched_tokens,
                        kv_capacity_tokens=limits.kv_capacity_tokens, kv_block_tokens=engine.kv_block_tokens,
                        kv_reservation=engine.kv_reservation, scheduler_steps=engine.scheduler_steps,
                        recv_interval=engine.scheduler_recv_interval, admit_lag=engine.overlap_admission,
                        step_host_s=engine.step_host_s * per_step, step_host_share=engine.step_host_share,
                        step_host_s_per_seq=engine.step_host_s_per_seq * per_step,
                        output_host_s=engine.output_host_s * per_step, reserve=output_reserve(engine, dep.attention_dp),
                        output_host_s_per_seq=engine.output_host_s_per_seq * per_step, host_overlap=_host_overlap(dep),
                        frontend_s_per_seq=engine.frontend_s_per_seq * per_step,
                        frontend_per_dp_rank=engine.frontend_per_dp_rank,
                        eager_issue_s=eager_issue_s(dep) if engine.eager_prefill else 0.0,
                        decode_graph_max_batch=replica_graph_max(engine, dep.cluster.device.memory_bytes, step.dp_ranks, dep.tp),
                        decode_graph_sizes=graph_sizes(engine.decode_graph_batch_sizes,
                                                       min(limits.max_num_seqs, limits.max_num_batched_tokens) // step.dp_ranks),
                        adp_balance=_adp_balance(dep, step.dp_ranks), dp_ranks=_budget_ranks(dep, step.dp_ranks),
                        **_window_release(dep))
    trace = instance_trace(engine, dep.pp, load, sent, schedule, step)  # pp > 1: pipeline rounds (TensorRT-LLM)
    return ServingRun(deployment=dep, load=load, limits=limits, step=step, trace=trace)


def arrival_draws(dep: ServingDeployment, load: Load) -> tuple[ServingRun, ...]:
    """The runs a prediction averages: ARRIVAL_DRAWS Poisson draws of a rate load (seeds load.seed, ...; serving_dispatch.py), else one."""
    runs = tuple(run_serving(dep, replace(load, seed=load.seed + k)) for k in range(ARRIVAL_DRAWS if load.kind == "rate" else 1))
    return dispatched_runs(runs, run_serving, requests_for)


def expected_metric(runs: tuple[ServingRun, ...], metric: str, *, scope: str = "replica") -> float:
    """``metric`` (serving_load.METRICS, in seconds or tokens/s) averaged over the draws ``runs``."""
    require(len(runs) > 0, "runs", "needs at least one simulated run")
    dep = runs[0].deployment
    if scope == "replica":  # an instance: its pp micro-batches' runs (one when pp = 1)
        scope, replicas = "system", dep.pp
    else:
        replicas = dep.replicas * dep.pp
    values = [metric_value(r.trace, metric, scope=scope, replicas=replicas, gpus_per_replica=dep.tp) for r in runs]
    return sum(values) / len(values)
