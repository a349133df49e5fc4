"""Seconds of one serving-engine step on one replica, from the cost model's operator tables.

A continuous-batching engine runs steps that mix decodes (one token for each running request) and
prompt chunks (many tokens of a few requests). Every operator but attention sees the step's tokens
as one batch (``n``), so its time is the roofline of seed 003 at ``n`` tokens: the weights are read
once per step whatever ``n`` is (Pope et al. 2022, sec. 2), the FLOPs and activations grow with it.
Attention differs per request: a decode reads its request's cached K/V (memory-bound), a prompt
chunk of ``L`` tokens after ``P`` cached ones does ``L (P + (L + 1) / 2)`` query-key pairs of causal
work (compute-bound). So a step costs

    linear(n) + layers x (decode_attention(context) + prefill_attention(pairs)) + head(sampled)

with ``linear`` tabulated for every ``n`` up to the engine's token budget once per replica, TP
all-reduces (two per layer, Megatron's layout) and, for mixtures of experts, the grouped GEMMs of
the experts the step's tokens reach (``E (1 - (1 - k/E)^n)`` of them) inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.cost.comm import collective_time_s
from autotune.cost.expert_map import triton_experts
from autotune.cost.flashinfer_fp8_block import flashinfer_fp8_block_gpu, flashinfer_gemms, flashinfer_linears_s
from autotune.cost.moe_configs import untuned_experts
from autotune.cost.mesh import group_spans
from autotune.cost.serving_attention import attention_coefficients, kv_split
from autotune.cost.serving_collectives import (ADP_ALL_REDUCE, layer_collectives_s, moe_exchange_s,
                                               prefill_exchange_extra_s, stage_sends_s)
from autotune.cost.serving_experts import experts_s, non_expert_s, pads_experts, routed_moves, routing_in_kernel
from autotune.cost.serving_gemm_fits import gemm_rate_dtype, serving_cluster, trtllm_gen_moe
from autotune.cost.serving_mla_bmm import decode_bmm_s, is_kv_up
from autotune.cost.serving_window import NO_WINDOW, AttentionWindow, model_window
from autotune.cost.vllm_fp8_pad import layers_pad_s, pads_fp8_block_input
from autotune.cost.vllm_mla_prefix import prefix_s_per_token
from autotune.cost.serving_moe_table import measured_moe_key, measured_moe_s
from autotune.cost.serving_ops import (ACT_BYTES, EXPERTS_ONLY_DTYPES, FUSION_MIN_HIDDEN, STORED_BYTES, expert_pad_factor,
                                       fused_residual_adds, ops_s, select_ops, unfused, weight_bytes_per_param,
                                       swiglu_in_gemm, weights_per_gpu, without_loss)
from autotune.errors import require
from autotune.graph.table import OpTable, model_tables
from autotune.spec.hardware import ClusterSpec
from autotune.spec.model import ModelSpec

__all__ = ["ReplicaShape", "StepModel", "step_model", "priced_cluster", "weight_bytes_per_param", "serving_cluster",
           "trtllm_gen_moe", "gemm_rate_dtype"]

# vLLM's other Hopper MXFP4 MoE, OpenAI's triton_kernels matmul_ogs (Mxfp4Backend.TRITON): create_weights rounds
# intermediate_size_per_partition up to 64 and keeps hidden_size (mxfp4.py, the 0.13.0 / 0.14.0 wheels), and its
# layer, measured by aiconfigurator on H100 / H200 (vllm 0.24.0 moe_perf.parquet, gpt-oss shapes), runs within
# -27..+16% of the BF16 fit's padded-tile pricing at 1-8192 tokens, moe_tp 1-8, 32 and 128 experts: no ceiling
TRITON_MXFP4_PAD = (1, 64)


@dataclass(frozen=True, kw_only=True)
class ReplicaShape:
    """One engine instance: ``tp`` GPUs in a tensor-parallel group (one node); ``ep`` splits the
    experts (each expert then over tp / ep GPUs). ``attention_dp``: each of the tp ranks runs the
    non-expert part of every layer whole on its own requests (SGLang's DP attention, TensorRT-LLM's
    enable_attention_dp), so the KV cache is split by requests instead of heads (what MLA needs).
    ``pp``: the layers in ``pp`` stages of ``tp`` GPUs each, with ``pp`` micro-batches in flight (vLLM's
    max_concurrent_batches = pp: "PP requires PP-size concurrent batches to fill the pipeline",
    vllm 0.33.0 vllm/config/vllm.py; SGLang 0.5.23's event_loop_pp over pp micro-batches of
    max_running_requests // pp). The step model is then one micro-batch's: each stage holds its layers
    while the other micro-batches use the others, so a micro-batch's step crosses every layer and
    pp - 1 activation sends; the weights a GPU holds are 1/pp of them, and the KV cache per token is
    quoted for the whole model (a micro-batch's share: pp GPUs each hold 1/pp of the layers for pp
    micro-batches). ``moe_alltoall``: under DP attention the MoE layer dispatches each token's k copies
    to the ranks of its experts and combines them back (all-to-all) instead of gathering every rank's
    tokens before the experts and reduce-scattering after (serving_collectives.layer_collectives_s), each token's
    gathered row in ``moe_comm_dtype`` ("": the hidden state in BF16; serving_collectives.moe_comm_dtype)."""

    tp: int
    ep: int = 1
    attention_dp: bool = False
    pp: int = 1
    moe_alltoall: bool = False
    eplb: bool = False  # an expert load balancer (redundant experts by measured loads): cost/moe_skew.py
    moe_comm_dtype: str = ""
    adp_all_reduce: str = ""  # SGLang's SUM_LEN gather by all-reduce: "always", "prefill" (steps with prompts) or ""

    def __post_init__(self) -> None:
        require(isinstance(self.tp, int) and self.tp >= 1, "tp", f"must be an integer >= 1, got {self.tp!r}")
        require(isinstance(self.pp, int) and self.pp >= 1, "pp", f"must be an integer >= 1, got {self.pp!r}")
        require(isinstance(self.ep, int) and self.ep >= 1 and self.tp % self.ep == 0, "ep",
                f"must divide tp={self.tp}, got {self.ep!r}")
        require(isinstance(self.attention_dp, bool), "attention_dp", "must be true or false")
        require(isinstance(self.eplb, bool), "eplb", "must be true or false")
        require(isinstance(self.moe_alltoall, bool) and (self.attention_dp or not self.moe_alltoall), "moe_alltoall",
                "must be true or false, and true only under attention_dp")
        require(self.adp_all_reduce in ADP_ALL_REDUCE, "adp_all_reduce", f"one of {ADP_ALL_REDUCE}, got {self.adp_all_reduce!r}")
        require(self.moe_comm_dtype in ("", "bf16", "fp8", "nvfp4"), "moe_comm_dtype", f"got {self.moe_comm_dtype!r}")

    @property
    def op_tp(self) -> int:
        """The TP degree of the non-expert operators: 1 under DP attention."""
        return 1 if self.attention_dp else self.tp


@dataclass(frozen=True, kw_only=True, eq=False)
class StepModel:
    """Per-replica step costs. ``linear_s[n]``: every operator but attention and the head for ``n``
    tokens, all layers, TP collectives included; ``head_s[m]``: final norm and logits for ``m``
    sampled requests; attention per layer from its fitted coefficients."""

    linear_s: np.ndarray
    head_s: np.ndarray
    num_layers: int
    decode_lat_s: float  # one decode-attention kernel: latency
    decode_s_per_position: float  # seconds per cached position read (all layers' K/V of one position, one layer)
    decode_s_per_request: float  # the request's own Q/K/V and output
    decode_knee_requests: float = 0.0  # requests whose own cost hides under decode_lat_s (a measured op's knee)
    prefill_lat_s: float
    prefill_s_per_pair: float  # seconds per causal query-key pair of one layer
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float  # all layers
    # DP attention: ``dp_ranks`` ranks each run the non-expert operators on their own requests' tokens
    # (``rank_linear_s[m]``: one rank, ``m`` tokens; ``linear_s`` then holds the experts and collectives)
    dp_ranks: int = 1
    rank_linear_s: np.ndarray | None = None
    # the MoE token exchange inside ``linear_s`` (EP dispatch + combine, all MoE layers), which a
    # two-batch overlap hides behind compute (cost/serving_overlap.py); None: the model has none
    exchange_s: np.ndarray | None = None
    prefill_s_per_token: float = 0.0  # a prompt token's own attention work (an engine's measured op; generic: none)
    # what a step with prompt tokens pays beside ``linear_s`` for its MoE exchange (prefill_exchange_extra_s)
    prefill_exchange_s: np.ndarray | None = None
    # MLA at the engine's measured absorbed BMMs (cost/serving_mla_bmm.py): ``linear_s`` / ``rank_linear_s`` then
    # lack the kv_up GEMM, which ``prompt_up_s[m]`` prices on m prompt tokens and ``decode_bmm_s[m]`` on m
    # decodes (a GPU's, a rank's under DP attention; all layers)
    prompt_up_s: np.ndarray | None = None
    decode_bmm_s: np.ndarray | None = None
    # seconds (all layers) a prompt chunk spends per cached token of its own request's prefix beside the pairs:
    # vLLM's MLA re-expands it through kv_b_proj every chunk (cost/vllm_mla_prefix.py); 0: nothing
    prefix_s_per_token: float = 0.0
    # the model's windowed layers: the positions and pairs the simulator passes to gpu_s are averaged over
    # the layers with them (cost/serving_window.py)
    window: AttentionWindow = NO_WINDOW
    # TensorRT-LLM's MoE under DP attention pads every rank's rows to the busiest rank's (trtllm_dp_padding.py)
    dp_padded_moe: bool = False

    @property
    def max_tokens(self) -> int:
        return len(self.linear_s) - 1

    def gpu_s(self, *, decodes: int, context: float, prefill_tokens: int, pairs: float, sampled: int,
              rank_prefill: tuple[int, float] | None = None, prefix_tokens: float = 0.0) -> float:
        """GPU seconds of a step with ``decodes`` requests decoding over ``context`` cached positions
        in all, and ``prefill_tokens`` prompt tokens doing ``pairs`` causal query-key pairs. Under DP
        attention the step waits for its busiest rank: the decodes spread evenly, the prompts whole on
        their ranks (``rank_prefill``: the busiest rank's prompt tokens and pairs; None: spread evenly);
        ``prefix_tokens``: the cached tokens of the prompts' own requests before their chunks (all ranks')."""
        n, r = decodes + prefill_tokens, self.dp_ranks
        require(n <= self.max_tokens, "max_num_batched_tokens", f"a step of {n} tokens exceeds the tabulated {self.max_tokens}")
        own_tokens, own_pairs = rank_prefill if rank_prefill is not None else (-(-prefill_tokens // r), pairs / r)
        # the experts and exchange at tp x the busiest rank's rows where the engine pads them (trtllm_dp_padding.py)
        moe_n = min(r * (-(-decodes // r) + own_tokens), self.max_tokens) if self.dp_padded_moe and prefill_tokens else n
        linear = float(self.linear_s[moe_n]) + (float(self.prefill_exchange_s[n]) if prefill_tokens and self.prefill_exchange_s
                                                 is not None else 0.0)
        if r > 1:
            linear += float(self.rank_linear_s[min(-(-decodes // r) + own_tokens, self.max_tokens)])
            pairs = own_pairs * r  # prefill_s_per_pair is a pair's share of the replica's ranks
            prefill_tokens = own_tokens * r  # prefill_s_per_token likewise
            linear += self.up_projection_s(-(-decodes // r), own_tokens)
        else:
            linear += self.up_projection_s(decodes, prefill_tokens)
        attention = 0.0
        if decodes:
            attention += self.decode_attention_s(decodes, context)
        if prefill_tokens:
            attention += self.prefill_attention_s(prefill_tokens, pairs)
            linear += prefix_tokens * self.prefix_s_per_token / self.dp_ranks
        return float(linear + self.num_layers * attention + self.head_s[min(sampled, len(self.head_s) - 1)])

    def decode_attention_s(self, decodes: int, context: float) -> float:
        """One layer's decode attention for ``decodes`` requests over ``context`` cached positions in all."""
        own = max(decodes - self.decode_knee_requests, 0.0)
        return self.decode_lat_s + context * self.decode_s_per_position + own * self.decode_s_per_request

    def prefill_attention_s(self, prompt_tokens: float, pairs: float) -> float:
        """One layer's prompt attention for ``prompt_tokens`` prompt tokens doing ``pairs`` causal query-key pairs."""
        return self.prefill_lat_s + pairs * self.prefill_s_per_pair + prompt_tokens * self.prefill_s_per_token

    def up_projection_s(self, decodes: int, prompt_tokens: int) -> float:
        """MLA's key/value up-projection where it is priced apart: the measured BMMs of a GPU's decodes and
        the kv_up GEMM of its prompt tokens."""
        if self.decode_bmm_s is None:
            return 0.0
        top = len(self.decode_bmm_s) - 1
        return float(self.decode_bmm_s[min(decodes, top)] + self.prompt_up_s[min(prompt_tokens, top)])


def step_model(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, *, weight_dtype: str,
               kv_bytes: float, max_tokens: int, max_sampled: int, mxfp4_activation: str = "bf16",
               nvfp4_gemm_fit: str = "sweep", mxfp4_pad: tuple[int, ...] = (), moe_backend: str = "",
               allreduce_norm_fusion: bool = False, tp_allreduce: str = "nccl", residual_norm_fusion: bool = False,
               moe_ep_masked_rows: bool = False, moe_tuned_configs: str = "", fp8_input_pad: bool = False,
               mla_prefix: bool = False, moe_layer_table: str = "", decode_attention: tuple | None = None,
               mla_attention: tuple | None = None, prefill_attention: tuple[float, ...] | None = None,
               mla_bmm: tuple[float, float] | None = None, mxfp4_kernel: str = "marlin",
               fp8_block_gemm: str = "", gemm_swiglu: bool = False) -> StepModel:
    """The step costs of ``model`` on one replica of ``shape`` (``cluster`` with the runtime's kernels applied),
    weights in ``weight_dtype``, KV cache at ``kv_bytes`` per element; MXFP4 experts take ``mxfp4_activation``
    activations on Blackwell; the GEMM fits and MoE backend as priced_cluster picks them (``nvfp4_gemm_fit``,
    ``moe_backend``, ``moe_tuned_configs``, ``mxfp4_kernel``); weight-only MXFP4 experts are held padded to the
    engine's ``mxfp4_pad`` multiples (expert_pad_factor), or, under ``mxfp4_kernel`` "triton" (vLLM's matmul_ogs on
    Hopper), to TRITON_MXFP4_PAD; ``allreduce_norm_fusion``: the norms and residual adds in the TP all-reduces
    (FUSED_INTO_ALLREDUCE); ``tp_allreduce``: those all-reduces' kernels (serving_collectives.tp_all_reduce_s);
    ``residual_norm_fusion``: the residual adds inside the RMSNorm kernels (serving_ops.fused_residual_adds);
    ``moe_ep_masked_rows``: EP without an all-to-all runs the experts' elementwise work on every routed row (expert_map.py);
    ``fp8_input_pad``: the release pads its block-FP8 linears' BF16 inputs on Hopper (cost/vllm_fp8_pad.py);
    ``mla_prefix``: a prompt chunk re-expands its request's cached MLA prefix (cost/vllm_mla_prefix.py);
    ``moe_layer_table``: the engine's measured MoE layers price the routed experts where they hold the shape (serving_moe_table.py);
    ``decode_attention`` / ``mla_attention`` (MLA's (decode, prompt) ops for the heads a GPU runs, either None) /
    ``prefill_attention`` (non-MLA prompts): the engine's measured attention ops, None: generic
    (serving_attention.attention_coefficients); ``mla_bmm``: its measured absorbed MLA BMMs for the heads a GPU runs
    (cost/serving_mla_bmm.py), None: MLA's kv_up as the one GEMM for every token; ``fp8_block_gemm`` "flashinfer":
    a block-FP8 checkpoint's linears run FlashInfer's groupwise FP8 GEMM where measured (cost/flashinfer_fp8_block.py); ``gemm_swiglu``: SwiGLU in the up GEMM."""
    require(model.has_attention, "model", f"{model.name} has no attention layers: serving prices attention models")
    require(weight_dtype not in EXPERTS_ONLY_DTYPES or model.is_moe, "precision",
            f"{weight_dtype} checkpoints quantize the MoE experts only; {model.name} has none (use bf16, fp8 or nvfp4)")
    served, backend = priced_cluster(model, cluster, shape, weight_dtype, mxfp4_activation=mxfp4_activation,
                                     nvfp4_gemm_fit=nvfp4_gemm_fit, moe_backend=moe_backend,
                                     moe_tuned_configs=moe_tuned_configs, mxfp4_kernel=mxfp4_kernel)
    fused = allreduce_norm_fusion and shape.op_tp > 1 and model.hidden_size > FUSION_MIN_HIDDEN
    masked = moe_ep_masked_rows and triton_experts(cluster.device, weight_dtype)
    table = moe_layer_table and measured_moe_key(model, cluster.device.name, weight_dtype, backend, shape.tp, shape.ep, shape.eplb)
    triton = mxfp4_kernel == "triton"
    return _step_model(model, served, shape,
                       weight_dtype, float(kv_bytes), int(max_tokens), int(max_sampled), mxfp4_activation,
                       TRITON_MXFP4_PAD if triton else tuple(mxfp4_pad),
                       backend, fused, tp_allreduce, residual_norm_fusion, decode_attention, mla_attention,
                       prefill_attention, mla_bmm if model.is_mla else None, masked,
                       pads_fp8_block_input(fp8_input_pad, model, weight_dtype, cluster.device.name), mla_prefix, table,
                       fp8_block_gemm == "flashinfer" and weight_dtype == "fp8" and model.fp8_block_scaled
                       and flashinfer_fp8_block_gpu(cluster.device.name), gemm_swiglu)


def priced_cluster(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, weight_dtype: str, *,
                   mxfp4_activation: str = "bf16", nvfp4_gemm_fit: str = "sweep", moe_backend: str = "",
                   moe_tuned_configs: str = "", mxfp4_kernel: str = "marlin") -> tuple[ClusterSpec, str]:
    """``cluster`` with the device fits step_model prices ``model``'s GEMMs with (serving_cluster: the engine's
    ``nvfp4_gemm_fit``, a block-FP8 checkpoint's block-scale fits, the TRTLLM-Gen MoE where ``moe_backend`` runs it,
    the default-tile fit where ``moe_tuned_configs`` ships no tuned config for the shape, Marlin's ceiling unless
    ``mxfp4_kernel`` is "triton"), and the MoE backend its experts run ("" where the device lacks that fit)."""
    fp8_block = weight_dtype == "fp8" and model.fp8_block_scaled
    rate = gemm_rate_dtype(cluster.device, weight_dtype, mxfp4_activation)
    backend = moe_backend if trtllm_gen_moe(cluster.device, rate) else ""
    untuned = not fp8_block and untuned_experts(moe_tuned_configs, cluster.device.name, model, shape.tp, shape.ep, weight_dtype)
    return serving_cluster(cluster, nvfp4_gemm_fit, fp8_block, backend, untuned, mxfp4_kernel != "triton"), backend


def _fused_clamp(model: ModelSpec) -> ModelSpec:
    """``model`` with its experts' clamped activation as one fused kernel: the serving engines clamp inside it
    (vLLM's swigluoai_and_mul(out, x, alpha, limit) after Marlin's / the fused MoE's first GEMM and FusedActivation
    inside matmul_ogs, fused_marlin_moe.py / fused_moe.py / gpt_oss_triton_kernels_moe.py in the 0.10.2 wheel), not
    as the eager chunk, clamps and cat Megatron-Core runs before its fused kernel (graph/moe_ops.py _expert_act)."""
    return model.with_changes(expert_act_clamp=0.0) if model.expert_act_clamp else model



@lru_cache(maxsize=64)
def _step_model(model, cluster, shape, weight_dtype, kv_bytes, max_tokens, max_sampled, mxfp4_activation,
                mxfp4_pad=(), moe_backend="", fused=False, tp_allreduce="nccl", residual_fused=False,
                decode_attention=None, mla_attention=None, prefill_attention=None, mla_bmm=None,
                masked_rows=False, input_pad=False, mla_prefix=False, moe_table="", flashinfer=False, swiglu=False) -> StepModel:
    device = cluster.device
    expert_rate = gemm_rate_dtype(device, weight_dtype, mxfp4_activation)
    device.require_dtype(weight_dtype if weight_dtype not in STORED_BYTES else expert_rate)
    # the format the non-expert GEMMs run in: BF16 where the checkpoint quantizes experts only
    other = "bf16" if weight_dtype in EXPERTS_ONLY_DTYPES else weight_dtype
    other_rate = gemm_rate_dtype(device, other, mxfp4_activation)
    tables = model_tables(_fused_clamp(model), 1, ACT_BYTES, "flash")
    tokens = np.arange(max_tokens + 1, dtype=float)
    span = group_spans("tp-cp-dp", shape.tp, 1, 1, cluster.gpus_per_node)["tp"]
    dense, moe = tables.layer_counts()
    ranks = shape.tp if shape.attention_dp else 1
    # the non-expert operators: under DP attention on one rank's own tokens, priced per step at its busiest rank
    layer, moe_layer = _layer_ops(tables, moe, moe_backend, fused, residual_fused, swiglu)
    own, up = _non_expert_s(model, device, (other, other_rate), ((dense, layer), (moe, moe_layer)), tokens, shape.op_tp,
                            mla_bmm, input_pad, flashinfer)
    linear = (layer_collectives_s(model, cluster, shape, span, tokens, dense, moe, tp_allreduce) + stage_sends_s(model, cluster, shape, tokens)
              + (0.0 if ranks > 1 else own))
    if moe:
        linear = linear + _routed_s(tables, model, cluster, shape, (weight_dtype, expert_rate), tokens, moe, moe_backend,
                                    masked_rows, mxfp4_pad, moe_table)
    exchange, prefill_extra = _exchange_s(model, cluster, shape, span, tokens, tp_allreduce, moe)
    linear[0] = own[0] = 0.0
    return StepModel(linear_s=linear, head_s=_head_s(tables, model, cluster, shape, span, max_sampled),
                     num_layers=model.num_layers,
                     **attention_coefficients(model, device, shape, kv_bytes, decode_attention, mla_attention,
                                               prefill_attention),
                     weight_bytes_per_gpu=weights_per_gpu(tables, model, shape, weight_dtype,
                                                           mxfp4_pad if pads_experts(weight_dtype, device, mxfp4_pad) else ()),
                     kv_bytes_per_token_per_gpu=model.num_layers * model.cached_positions(1.0)
                     * model.kv_cache_elements_per_token_per_layer() * kv_bytes / kv_split(model, shape),
                     dp_ranks=ranks, rank_linear_s=own if ranks > 1 else None, exchange_s=exchange,
                     prefill_exchange_s=prefill_extra, window=model_window(model), **up,
                     prefix_s_per_token=prefix_s_per_token(tables.moe_layer if moe else tables.layer, model, device, other, other_rate,
                                                           shape.op_tp, kv_bytes, max_tokens, input_pad)
                     if mla_prefix else 0.0)


def _non_expert_s(model: ModelSpec, device, dtypes: tuple[str, str], layers: tuple, tokens: np.ndarray, op_tp: int,
                  mla_bmm, input_pad: bool, flashinfer: bool = False) -> tuple[np.ndarray, dict]:
    """Seconds of the ``layers`` ((dense count, operators), (MoE count, operators)) non-expert operators on
    ``tokens`` at ``dtypes`` (format, GEMM rate), and, under ``mla_bmm``, MLA's kv_up apart: the GEMM on prompt
    tokens, the measured BMMs on decodes (StepModel's prompt_up_s and decode_bmm_s); under ``flashinfer`` the
    block-FP8 linears at FlashInfer's groupwise GEMM (cost/flashinfer_fp8_block.py)."""
    (dense, layer), (moe, moe_layer) = layers
    other, other_rate = dtypes

    def ops(table: OpTable) -> np.ndarray:
        if not flashinfer:
            return non_expert_s(table, model, device, other, other_rate, tokens, op_tp)
        def priced(part: OpTable) -> np.ndarray:
            return non_expert_s(part, model, device, other, other_rate, tokens, op_tp)

        linear = flashinfer_gemms(table, model, other)
        rest = priced(select_ops(table, ~linear)) if not linear.all() else 0.0
        return rest + (flashinfer_linears_s(select_ops(table, linear), device, tokens, op_tp, priced) if linear.any() else 0.0)

    up = {}
    if mla_bmm is not None:  # kv_up apart: the GEMM on prompt tokens, the measured BMMs on decodes
        up = dict(prompt_up_s=(dense + moe) * ops(select_ops(layer, is_kv_up(layer))),
                  decode_bmm_s=decode_bmm_s(mla_bmm, dense + moe, tokens))
        up["prompt_up_s"][0] = 0.0
        layer, moe_layer = select_ops(layer, ~is_kv_up(layer)), select_ops(moe_layer, ~is_kv_up(moe_layer)) if moe else None
    own = dense * ops(layer)
    if moe:
        own = own + moe * ops(moe_layer)
    if input_pad:  # vLLM 0.10.2-0.11 copies each block-FP8 linear's input into a padded buffer on Hopper
        own = own + layers_pad_s(((dense, layer), (moe, moe_layer)), device, tokens, op_tp)
    return own, up


def _routed_s(tables, model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, dtypes: tuple[str, str],
              tokens: np.ndarray, moe: int, moe_backend: str, masked_rows: bool, mxfp4_pad: tuple[int, ...],
              moe_table: str) -> np.ndarray:
    """Seconds of the ``moe`` MoE layers' routed experts on ``tokens`` at ``dtypes`` (weight format, GEMM rate):
    the engine's measured MoE layer where it holds the shape (``moe_table``), else experts_s."""
    weight_dtype, expert_rate = dtypes
    moves = select_ops(tables.moe_layer, routed_moves(tables.moe_layer))
    # a padding kernel reads and multiplies the padded weights: its experts' time grows with their bytes
    padded = expert_pad_factor(model, shape.tp // shape.ep, mxfp4_pad) if pads_experts(weight_dtype, cluster.device, mxfp4_pad) else 1.0
    routed = measured_moe_s(moe_table, tokens) if moe_table else experts_s(
        tables.experts, moves, model, cluster, shape, weight_dtype, expert_rate, tokens, moe_backend, masked_rows)
    return moe * padded * routed


def _exchange_s(model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, span, tokens: np.ndarray, tp_allreduce: str,
                moe: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The ``moe`` MoE layers' token exchange inside linear (cost/serving_phase.py swaps in DeepEP's), and what a
    step with prompt tokens pays beside it (prefill_exchange_extra_s, None: nothing); (None, None) without MoE."""
    if not moe:
        return None, None
    exchange = moe * moe_exchange_s(model, cluster, shape, span, tokens, tp_allreduce)
    prefill_extra = prefill_exchange_extra_s(model, cluster, shape, span, tokens, tp_allreduce)
    exchange[0] = 0.0
    return exchange, None if prefill_extra is None else moe * prefill_extra


def _layer_ops(tables, moe: int, moe_backend: str, fused: bool, residual_fused: bool, swiglu: bool = False):
    """The dense and MoE layers' non-expert operators as the engine's fused kernels leave them (``swiglu``: the
    dense MLP's activation in its up GEMM, serving_ops.swiglu_in_gemm)."""
    layer, moe_layer = (unfused(tables.layer), unfused(tables.moe_layer) if moe else None) if fused \
        else (tables.layer, tables.moe_layer)
    layer = swiglu_in_gemm(layer) if swiglu else layer
    moe_layer = routing_in_kernel(moe_layer) if moe and moe_backend == "trtllm" else moe_layer
    if residual_fused and not fused:  # an all-reduce that runs the adds already took them out
        layer, moe_layer = fused_residual_adds(layer), fused_residual_adds(moe_layer) if moe else None
    return layer, moe_layer


def _head_s(tables, model: ModelSpec, cluster: ClusterSpec, shape: ReplicaShape, span, max_sampled: int) -> np.ndarray:
    """The LM head's seconds for 0..``max_sampled`` sampled rows: its operators on a rank's rows (its own share
    under DP attention), then, without DP attention, the all-gather of the TP-split logits."""
    sampled = np.arange(max_sampled + 1, dtype=float)
    rank_sampled = sampled / shape.tp if shape.attention_dp else sampled
    head = ops_s(without_loss(tables.head), cluster.device, "bf16", "bf16", rank_sampled, shape.op_tp) if tables.head is not None else 0 * sampled
    head = head + collective_time_s("all_gather", rank_sampled * model.vocab_size * ACT_BYTES / shape.op_tp,
                                    span, cluster) * (not shape.attention_dp)
    head[0] = 0.0
    return head
