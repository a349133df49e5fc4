"""What a step does: a training step (this module) or inference (prefill, decode, serve)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import require, require_choice, require_positive
from autotune.spec.limits import check_limit

__all__ = ["TrainingWorkload", "InferenceWorkload", "INFERENCE_KINDS", "DTYPES", "ATTENTION_IMPLS",
           "bytes_per_element", "LOW_PRECISION_DTYPES", "FP8_RECIPES", "GEMM_OPERAND_BYTES", "gemm_dtype", "compute_dtype",
           "Workload", "is_training"]

# "fp8": FP8 GEMMs (E4M3 forward, E5M2 or E4M3 gradients) with per-tensor scales, BF16
# everywhere else, FP32 master weights and gradients (Micikevicius et al. 2022, "FP8 Formats
# for Deep Learning"; Transformer Engine, torchao float8). "mxfp8": the same with a shared
# scale per 32 elements (OCP Microscaling spec v1.0), in hardware on Blackwell. "nvfp4": FP4
# E2M1 GEMMs with a scale per 16 elements (NVIDIA Blackwell), BF16 elsewhere.
# "fp8_rowwise": FP8 with a scale per row of each operand (torchao's rowwise recipe), whose
# GEMMs run slower than per-tensor scaling on H100.
LOW_PRECISION_DTYPES = ("fp8", "fp8_rowwise", "mxfp8", "nvfp4")
DTYPES = ("fp32", "bf16", "fp16", *LOW_PRECISION_DTYPES)
# Inference prices weights in the compute dtype: FP8/FP4 serving with pre-quantized weights (no
# per-step casts, 1-byte weight reads) is not modelled, so those dtypes are training-only.
INFERENCE_DTYPES = ("fp32", "bf16", "fp16")
# "flash": fused attention kernel, no s x s matrix in memory (FlashAttention, Dao et al. 2022).
# "unfused": scores, softmax and dropout materialised, as Megatron-LM did before FlashAttention
# (Narayanan et al. SC'21 used its fused scale-mask-softmax kernel).
# "unfused_eager_mask": the same, with the scaling and the causal mask as eager PyTorch kernels, as
# Megatron-LM ran before its fused scale-mask-softmax (added 2020-09-11, commit 51a2e6b0ff): Q and K
# each divided by d^(1/4), then torch.mul(scores, mask) - 10000 (1 - mask), then torch.nn.Softmax
# (Megatron-LM @ebbe40cd36, Oct 2019, megatron/mpu/transformer.py lines 122-137).
ATTENTION_IMPLS = ("flash", "unfused", "unfused_eager_mask")

# Bytes per activation element: low-precision recipes keep activations in BF16.
_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp8_rowwise": 2, "mxfp8": 2, "nvfp4": 2}
# Bytes per element of a GEMM operand after the cast (scales aside).
GEMM_OPERAND_BYTES = {"fp8": 1.0, "fp8_rowwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}


def bytes_per_element(dtype: str) -> int:
    return _BYTES[dtype]


def gemm_dtype(dtype: str) -> str:
    """The dtype dense matmuls run in (the device's GEMM fit for it prices them)."""
    return dtype


def compute_dtype(dtype: str) -> str:
    """The dtype of everything but the GEMMs: BF16 under the low-precision recipes."""
    return "bf16" if dtype in LOW_PRECISION_DTYPES else dtype


EP_DISPATCHERS = ("alltoall", "deepep")  # see TrainingWorkload.ep_dispatcher
NCCL_TUNINGS = ("", "2.8")  # see TrainingWorkload.nccl_tuning
# How the per-tensor ``fp8`` recipe casts: "cast": a standalone cast kernel per operand that takes
# the amax itself (torchao's Float8Linear; Transformer Engine's delayed scaling in te.Linear swapped
# for nn.Linear, as Composer does); "te_delayed": TE's delayed scaling in Megatron-Core's TE layers,
# whose norm and activation kernels write FP8 themselves; "te_current": TE's current scaling there,
# an amax kernel before each standalone cast, the norms and activations computing their own amax.
# On Blackwell every recipe is priced without FP8 transposes (TE's GEMMs take any layout); torchao's
# torch._scaled_mm still wants its second operand column-major there, a copy not priced.
FP8_RECIPES = ("cast", "te_delayed", "te_current")
# How the host's kernel issue is priced (cost/host.py): "hidden" (never: the host always runs
# ahead) or "eager" (PyTorch eager issuing Megatron-Core's operators from Python).
HOST_DISPATCH = ("hidden", "eager")
# Scopes a step replays as CUDA graphs (Megatron --cuda-graph-scope; "full_iteration": the whole step).
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe_router", "moe_preprocess", "moe", "full_iteration")


@dataclass(frozen=True, kw_only=True)
class TrainingWorkload:
    """One optimizer step over ``global_batch`` sequences of ``seq_len`` tokens.

    ``dtype="fp32"`` trains in full precision. ``bf16``/``fp16`` are mixed precision: half
    precision weights and activations, fp32 master weights, fp32 gradient accumulation and
    Adam states (Micikevicius et al. 2018; Megatron-LM keeps fp32 ``main_grad`` buffers).
    ``fp8``/``mxfp8``/``nvfp4`` run the GEMMs in that format and keep BF16 otherwise.
    """

    global_batch: int
    seq_len: int
    dtype: str = "bf16"
    attention_impl: str = "flash"
    kind: str = "train"
    fp8_all_gather: bool = False  # FSDP gathers FP8 weights (torchao enable_fsdp_float8_all_gather)
    # Gradients accumulated and reduced in fp32 (Megatron-LM's default for bf16); False: in the
    # 16-bit training dtype (Megatron-Core DDPConfig grad_reduce_in_fp32=False, Megatron-LM
    # --grad-reduce-in-bf16: NVIDIA's NeMo / Megatron-Bridge performance recipes), which halves
    # the gradient buffers and the data-parallel reduction bytes
    grad_reduce_in_fp32: bool = True
    # Weights kept only in the GEMM format between steps (Transformer Engine's fp8_model_init, set by
    # Megatron-Core's fp8_param_gather): no BF16 copy is held, and the data-parallel all-gather of the
    # updated weights (distributed optimizer, FSDP) moves the low-precision copy
    fp8_params: bool = False
    # Sequence-parallel TP all-gathers move the low-precision activations (and, backward, gradients):
    # torchao's Float8ColwiseParallel / PrepareFloat8ModuleInput cast before redistributing, and
    # Float8RowwiseParallel casts the output gradient before its backward all-gather
    # (torchao/float8/float8_tensor_parallel.py); the reduce-scatters stay BF16. Transformer Engine's
    # Linear does the same in every low-precision format (gather_along_first_dim with its quantizer).
    fp8_tp_all_gather: bool = False
    # Sequence-parallel activations are batch-first (DTensor, torchtitan): each TP all-gather along the
    # sequence copies the gathered buffer and each reduce-scatter its input (PyTorch functional collectives)
    sp_batch_first: bool = False
    # Q, K and V projected by one GEMM (Megatron-Core's linear_qkv, MPT's Wqkv) or by three
    # (torchtitan's Llama: separate nn.Linear wq, wk, wv; under float8 each its own Float8Linear)
    qkv_fused: bool = True
    # K and V repeated to every query head before the attention kernel (torchtitan's Llama calls
    # repeat_kv before F.scaled_dot_product_attention, models/llama/model.py @9dec370): what
    # context parallelism gathers, concatenates and accumulates is as wide as Q
    kv_heads_expanded: bool = False
    # Mixture of experts: the busiest expert-parallel rank's routed tokens over the mean. 0: the
    # floor of unskewed routing (cost/moe.py load_imbalance); >= 1: a measured max/mean.
    expert_load_imbalance: float = 0.0
    # How tokens reach the experts (cost/moe.py): "alltoall" (Megatron-Core's NCCL all-to-all, a
    # copy per chosen expert) or "deepep" (DeepEP / HybridEP: one copy per destination node over
    # the network, fanned out over NVLink). ``overlap_ep_comm``: Megatron's 1F1B all-to-all overlap
    # (--overlap-moe-expert-parallel-comm) hides the exchange behind another micro-batch's compute.
    ep_dispatcher: str = "alltoall"
    overlap_ep_comm: bool = False
    # The runtime's ZeRO-3 parameter-gather rate per GPU (bytes/s) where it is below what the
    # network's collective reaches (cost/sharding.py layer_traffic); 0: the collective's rate.
    param_gather_bytes_per_s: float = 0.0
    # How the runtime issues ZeRO-3's collectives (cost/zero3_calls.py). (): one collective per layer
    # and pass (a flat parameter: FSDP, later DeepSpeed); else each weight tensor's share of the
    # layer, forward order, gathered and reduced one call each (DeepSpeed ZeRO-3 0.3-0.4).
    gather_tensor_shares: tuple[float, ...] = ()
    # The tensors (indices into the shares) gathered again for the backward after a full
    # recomputation (DeepSpeed released a module whose next use lay beyond max_reuse_distance).
    regathered_tensors: tuple[int, ...] = ()
    # torch.distributed.all_gather / reduce_scatter with a list of per-rank tensors: PyTorch's
    # ProcessGroupNCCL (to 1.8) copies each rank's chunk out of (into) a flat buffer, a copy
    # kernel per rank and call; runtimes on _all_gather_base / all_gather_into_tensor copy nothing.
    per_rank_copies: bool = False
    # Host seconds per rank of each ZeRO-3 gather call that the device waits for (DeepSpeed 2021
    # built a view per rank in Python after synchronising the device); 0: none.
    gather_host_s_per_rank: float = 0.0
    # NCCL's ring latency model: "" the cluster's alpha per step; "2.8": NCCL 2.8's protocols
    # (LL/LL128/Simple, each call the fastest; cost/comm.py nccl_2_8_ring_s).
    nccl_tuning: str = ""
    # The host issuing kernels (cost/host.py): "eager" prices the time the GPU waits for it,
    # outside the ``cuda_graph_scope`` scopes the step replays as CUDA graphs.
    host_dispatch: str = "hidden"
    cuda_graph_scope: tuple[str, ...] = ()
    # Low-precision recipes: the weights' casts happen on a step's first micro-batch and are
    # reused by the rest (Transformer Engine's is_first_microbatch, set by Megatron-Core's
    # schedules.forward_step), or at every forward (torchao's Float8Linear; TE modules called
    # without is_first_microbatch, as Composer/llm-foundry calls them).
    reuse_weight_casts: bool = True
    # How the per-tensor ``fp8`` recipe casts (FP8_RECIPES, priced in cost/quantize.py)
    fp8_recipe: str = "cast"
    # Full recomputation stops once every tensor the backward reads exists again: PyTorch's
    # non-reentrant torch.utils.checkpoint (early stop, its default since 2.1: pytorch#96866) and
    # torch.compile's partitioner skip a block's trailing operators that save nothing, the FFN
    # down projection and the residual add after it (cost/recompute_modules.py EARLY_STOP_SKIPPED).
    # Megatron-Core's and DeepSpeed's checkpoints rerun the whole layer (False).
    recompute_early_stop: bool = False

    def __post_init__(self) -> None:
        require_choice("ep_dispatcher", self.ep_dispatcher, EP_DISPATCHERS)
        require_choice("host_dispatch", self.host_dispatch, HOST_DISPATCH)
        if isinstance(self.cuda_graph_scope, list):  # read back from JSON
            object.__setattr__(self, "cuda_graph_scope", tuple(self.cuda_graph_scope))
        require(isinstance(self.cuda_graph_scope, tuple) and all(s in CUDA_GRAPH_SCOPES for s in self.cuda_graph_scope),
                "cuda_graph_scope", f"must be a tuple of {CUDA_GRAPH_SCOPES}, got {self.cuda_graph_scope!r}")
        require(isinstance(self.qkv_fused, bool), "qkv_fused", f"must be true or false, got {self.qkv_fused!r}")
        require(isinstance(self.kv_heads_expanded, bool), "kv_heads_expanded",
                f"must be true or false, got {self.kv_heads_expanded!r}")
        require(isinstance(self.reuse_weight_casts, bool), "reuse_weight_casts",
                f"must be true or false, got {self.reuse_weight_casts!r}")
        require(isinstance(self.recompute_early_stop, bool), "recompute_early_stop",
                f"must be true or false, got {self.recompute_early_stop!r}")
        require_choice("fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        require(isinstance(self.param_gather_bytes_per_s, (int, float)) and self.param_gather_bytes_per_s >= 0,
                "param_gather_bytes_per_s", f"must be >= 0 (0: the network's rate), got {self.param_gather_bytes_per_s!r}")
        self._check_gather_calls()
        for flag in ("fp8_all_gather", "fp8_tp_all_gather", "fp8_params"):
            require(not getattr(self, flag) or self.dtype in LOW_PRECISION_DTYPES, flag,
                    f"gathers FP8 tensors only under an FP8 recipe, not dtype {self.dtype!r}")
        require_positive("global_batch", self.global_batch)
        require_positive("seq_len", self.seq_len)
        check_limit("global_batch", self.global_batch, "global_batch")
        check_limit("seq_len", self.seq_len, "seq_len")
        require(isinstance(self.expert_load_imbalance, (int, float)) and (self.expert_load_imbalance == 0
                or self.expert_load_imbalance >= 1), "expert_load_imbalance",
                f"must be 0 (model it) or a max/mean load >= 1, got {self.expert_load_imbalance!r}")
        require_choice("dtype", self.dtype, DTYPES)
        require_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        require(self.kind == "train", "workload", "TrainingWorkload.kind is always 'train'")

    def _check_gather_calls(self) -> None:
        for field in ("gather_tensor_shares", "regathered_tensors"):  # JSON round trips give lists
            if isinstance(getattr(self, field), list):
                object.__setattr__(self, field, tuple(getattr(self, field)))
        shares, regathered = self.gather_tensor_shares, self.regathered_tensors
        require(isinstance(shares, tuple) and all(isinstance(x, (int, float)) and x > 0 for x in shares)
                and (not shares or abs(sum(shares) - 1.0) < 1e-6), "gather_tensor_shares",
                f"must be a tuple of positive shares summing to 1 (or empty), got {shares!r}")
        require(isinstance(regathered, tuple) and all(isinstance(i, int) and 0 <= i < max(1, len(shares))
                for i in regathered) and len(set(regathered)) == len(regathered), "regathered_tensors",
                f"must be distinct indices into gather_tensor_shares, got {regathered!r}")
        require(isinstance(self.per_rank_copies, bool), "per_rank_copies",
                f"must be true or false, got {self.per_rank_copies!r}")
        require(isinstance(self.gather_host_s_per_rank, (int, float)) and self.gather_host_s_per_rank >= 0,
                "gather_host_s_per_rank", f"must be >= 0, got {self.gather_host_s_per_rank!r}")
        require_choice("nccl_tuning", self.nccl_tuning, NCCL_TUNINGS)

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (the compute dtype)."""
        return _BYTES[self.dtype]

    @property
    def mixed_precision(self) -> bool:
        return self.dtype != "fp32"

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


# prefill: run the prompts once and fill the KV cache; decode: generate tokens with the prompts
# already cached; serve: a static batch of requests, prefill then decode.
INFERENCE_KINDS = ("prefill", "decode", "serve")


@dataclass(frozen=True, kw_only=True)
class InferenceWorkload:
    """``batch`` sequences (concurrent requests) with ``prompt_len`` prompt tokens each.

    ``prefill`` processes the prompts and writes their K and V (the KV cache) for later decoding.
    ``decode`` starts with ``prompt_len`` tokens per sequence in the KV cache and generates
    ``output_len`` tokens, one decode step each (a step feeds one token per sequence and attends
    over everything before it). ``serve`` is a static batch: the prefill gives every request its
    first token, then ``output_len - 1`` decode steps give the rest. Weights, activations and the
    KV cache are in ``dtype``. ``target_tpot_s`` / ``target_ttft_s`` (0: none) are service
    targets a plan must meet.
    """

    batch: int
    prompt_len: int
    output_len: int = 0
    kind: str = "decode"
    dtype: str = "bf16"
    attention_impl: str = "flash"
    target_tpot_s: float = 0.0
    target_ttft_s: float = 0.0

    def __post_init__(self) -> None:
        require_choice("workload", self.kind, INFERENCE_KINDS)
        require_positive("batch", self.batch)
        require_positive("prompt_len", self.prompt_len)
        check_limit("batch", self.batch, "batch")
        check_limit("prompt_len", self.prompt_len, "seq_len")
        require_choice("dtype", self.dtype, INFERENCE_DTYPES)
        require_choice("attention_impl", self.attention_impl, ATTENTION_IMPLS)
        if self.kind != "prefill":
            require_positive("output_len", self.output_len)
        check_limit("output_len", self.output_len, "seq_len")
        for name in ("target_tpot_s", "target_ttft_s"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and value >= 0, name, f"must be a number >= 0, got {value!r}")

    @property
    def activation_bytes(self) -> int:
        return _BYTES[self.dtype]

    @property
    def global_batch(self) -> int:
        """Sequences a plan must cover (``micro_batch x num_microbatches x dp``)."""
        return self.batch

    @property
    def seq_len(self) -> int:
        """Tokens per sequence in the prefill pass (the prompt)."""
        return self.prompt_len

    @property
    def decode_steps(self) -> int:
        """Decode steps: ``output_len`` for decode, ``output_len - 1`` after a serving prefill."""
        return {"prefill": 0, "decode": self.output_len, "serve": self.output_len - 1}[self.kind]

    @property
    def max_context_len(self) -> int:
        """Positions per sequence the KV cache holds at the end (the model's limit applies)."""
        return self.prompt_len + self.decode_steps

    @property
    def mean_decode_context_len(self) -> float:
        """Positions a decode step attends over, averaged over the steps: P+1 ... P+steps."""
        return self.prompt_len + (self.decode_steps + 1) / 2.0


Workload = TrainingWorkload | InferenceWorkload


def is_training(workload: Workload) -> bool:
    """Whether ``workload`` is a training step (the type says it, not a kind string)."""
    return isinstance(workload, TrainingWorkload)
