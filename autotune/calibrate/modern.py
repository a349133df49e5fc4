"""Modern published runs (``tests/data/modern_runs.csv``): FSDP, FP8, MoE, newer GPUs.

Each row names its framework; where a cell is empty the framework's defaults are assumed,
once per framework, in ``FRAMEWORK_DEFAULTS`` below (setting, value, reason). A row the cost
model cannot price yet is returned as :class:`Unexpressible` with the reason, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from autotune.calibrate.deepspeed_2021 import (DEEPSPEED_2021_MAX_REUSE_ELEMENTS, DEEPSPEED_2021_PERSISTENCE_ELEMENTS,
                                               PYTHON_OP_S, deepspeed_2021_calls)
from autotune.calibrate.framework_kernels import ATTENTION_KERNEL_SPEED, PYTORCH_GEMM_IN_STEP_HOPPER  # noqa: F401
from autotune.calibrate.nemo_recipes import (NEMO_NO_TP_OVERLAP_PRECISIONS, embedding_loss_slots, fp8_recipe_of,
                                             low_precision_tp_gathers, with_embedding_loss_slots)
from autotune.calibrate.source_flops import SOURCE_FLOPS
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.spec.model import ModelSpec
from autotune.spec.presets import load_preset
from autotune.spec.workload import TrainingWorkload

__all__ = ["FRAMEWORK_DEFAULTS", "GPU_CLUSTERS", "ATTENTION_KERNEL_SPEED", "EAGER_ELEMENTWISE", "Unexpressible", "runs_eager", "framework_of", "modern_run_from_row"]

# DeepSpeed's ZeRO-3 of 2021 gathered parameters at about 21 GB/s received per GPU even over
# NVLink: each of 8 GPUs took in 7/8 of 10 GB of fp16 weights in the 420 ms a 5B model's forward
# took longer than under ZeRO-2 on one 8-A100 node (DeepSpeed issue #1174, v0.3.16). There each
# prefetch held several tensors whose gathers each synchronised the device: "the async version is
# not async at all" (DeepSpeed PR #1188, June 2021); how a prefetch of one tensor overlaps its
# module's compute is calibrate/deepspeed_2021.py's and cost/zero3_calls.py's.
DEEPSPEED_2021_GATHER_BYTES_PER_S = 10e9 * 7 / 8 / 0.42

# Frameworks whose FP8 weights are cast on a step's first micro-batch and reused by the rest
# (TrainingWorkload.reuse_weight_casts): Megatron-Core's schedules.forward_step calls
# set_is_first_microbatch, and Transformer Engine's modules keep the cast weight while it is
# False. torchao's Float8Linear (torchtitan) and TE modules called without the flag
# (Composer/llm-foundry) cast it at every forward.
WEIGHT_CAST_REUSERS = ("nemo", "megatron")

# (setting, value assumed, why). Printed by ``autotune check-published --assumptions``.
FRAMEWORK_DEFAULTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "llm-foundry": (
        ("sharding", "zero 3, reshard after forward", "FSDP1 FULL_SHARD in every benchmark yaml (scripts/train/benchmarking)"),
        ("gradient reduce", "reduce-scatter every micro-batch", "FSDP1 reduces each backward; composer uses no no_sync under FULL_SHARD"),
        ("precision", "bf16 gathers, fp32 gradient reduce", "composer mixed_precision DEFAULT: param bf16, reduce fp32"),
        ("model", "GPT: LayerNorm, biases, learned positions, tied embeddings, no dropout",
         "MPT benchmark configs; the NumParams column matches biases and learned positions"),
        ("attention", "Triton FlashAttention at 1/1.8 of FlashAttention-2's speed",
         "submit_benchmarks.py defaults attn_impl to triton; FA2 is 1.3-2.5x faster (Dao 2023, sec. 4.1)"),
        ("GEMMs on Hopper", f"bf16 GEMMs at {PYTORCH_GEMM_IN_STEP_HOPPER:.2f} of the device's GEMM fit",
         "eager PyTorch's GEMMs inside fwd+bwd steps on an H100 against the micro-benchmark line at the same "
         "shapes (docs/h100-measured.md; framework_kernels.py); A100 keeps the fit (not measured)"),
        ("micro-batches", "global_batch / (micro_batch x dp)", "GradAccum column of the source table"),
    ),
    "torchtitan": (
        ("sharding", "zero 3 (FSDP2); reshard after forward unless pipelined",
         "parallelize_llama: reshard_after_forward = not pp_enabled"),
        ("gradient reduce", "every micro-batch; once per step when pipelined",
         "torch.distributed.pipelining turns gradient sync and resharding off but for the last micro-batch"),
        ("precision", "bf16 params, fp32 gradient reduce", "torchtitan mixed_precision_reduce = float32"),
        ("model", "Llama: RMSNorm, no biases, rotary, untied embeddings", "torchtitan llama3 model"),
        ("attention", "SDPA's FlashAttention-2 backend (the device's fit)",
         "cuDNN SDPA was opt-in on H100 until torch 2.9 (pytorch#138522, #142132, #162073)"),
        ("GEMMs on Hopper", f"bf16 GEMMs at {PYTORCH_GEMM_IN_STEP_HOPPER:.2f} of the device's GEMM fit",
         "as llm-foundry: PyTorch issues cuBLAS GEMMs, compiled or not (Inductor leaves matmuls to cuBLAS)"),
        ("pipeline micro-batches", "pp (one per stage)", "pipeline_parallel_microbatches defaults to the stage count"),
        ("interleaved stages per rank", "2", "not stated in the table; the smallest interleaving"),
        ("tensor parallel", "sequence parallel, loss parallel; async TP overlaps when the row says so, "
         "the forward pass's collectives only",
         "torchtitan TP plan; PyTorch's async TP blog: up to 29%/20% faster forward, 8% end to end (8B/70B)"),
        ("sequence-parallel layout", "batch-first: each TP gather and reduce-scatter copies its buffer once",
         "DTensor redistributes Shard(1) through functional collectives that cat tp chunks when the dim is not 0"),
        ("attention projections", "Q, K and V as three GEMMs, each casting its own input under float8",
         "torchtitan llama3 model.py: separate nn.Linear wq, wk, wv; torchao swaps every nn.Linear for a "
         "Float8Linear (the small-linear filter, torchtitan PR #1319 / ao PR #2410, came after these benchmarks)"),
        ("fp8 tensor parallel", "tensorwise rows all-gather FP8 activations and gradients; reduce-scatters BF16",
         "parallelize_llama: Float8ColwiseParallel/Float8RowwiseParallel/PrepareFloat8ModuleInput with float8 "
         "(tensorwise only, enable_float8_tensorwise_tp); they cast before redistributing"),
        ("fp8", "tensorwise dynamic scaling on linears, bf16 all-gather unless stated; weights cast at every "
         "forward", "torchao float8 defaults (enable_fsdp_float8_all_gather false); Float8Linear casts in forward"),
        ("context parallel", "K/V all-gathered per layer (rotate method allgather), causal load balancing, "
         "partial outputs merged and gradients accumulated in fp32, dK/dV passed around the ring in fp32",
         "PyTorch context_parallel's default rotate method, round-robin sharding and convert_to_f32 "
         "(torch.distributed.tensor.experimental._attention)"),
        ("selective checkpointing", "op-level (selective_op): every other matmul and all elementwise ops recomputed",
         "activation_checkpoint.selective_ac_option defaults to op (torchtitan _op_sac policy)"),
        ("torch.compile", "as the compile column; empty = off (torchtitan's default)",
         "compiled rows price each norm and activation as one fused kernel; eager rows as the unfused "
         "ops of torchtitan's RMSNorm and SwiGLU (EAGER_ELEMENTWISE)"),
    ),
    "deepspeed": (
        ("sharding", "the row's ZeRO stage; parameters prefetched and gradients reduced overlapped",
         "DeepSpeed ZeRO-3 prefetches the next modules' parameters (prefetch_bucket_size)"),
        ("parameter gathers, 2021", f"{DEEPSPEED_2021_GATHER_BYTES_PER_S / 1e9:.0f} GB/s received per GPU, "
         "where the row is of 2021 (its source or framework says 2021, SC'21, or 0.3-0.5)",
         "DeepSpeed issue #1174 (v0.3.16, one 8-A100 node): a 5B model's forward 420 ms slower under ZeRO-3 "
         "than ZeRO-2 with 10 GB of fp16 weights gathered"),
        ("prefetch, 2021", "each module's fetch synchronises the device, then starts the next tensor's gather "
         "beside the module's compute; reduce-scatters waited for at the next fetch",
         "stage3.py v0.3.13-0.3.16 fetch_sub_module / prefetch_next_sub_modules (prefetch_bucket_size 5e7 "
         "elements: one GPT-3 tensor); PR #1188: several prefetched tensors serialise (each gather synchronises)"),
        ("collectives, 2021", f"one all-gather and one reduce-scatter per weight tensor of >= "
         f"{DEEPSPEED_2021_PERSISTENCE_ELEMENTS:,} elements (smaller ones persist), each with a copy kernel per rank "
         f"(2.6 us on A100) and, for gathers, {PYTHON_OP_S * 1e6:.0f} us of exposed Python per rank",
         "DeepSpeed v0.3.13-0.3.16 partition_parameters.py: _allgather_param / _reduce_scatter_gradient per "
         "parameter with lists of world-size tensors, a narrow per rank after torch.cuda.synchronize(); "
         "PyTorch 1.8 ProcessGroupNCCL copies each; param_persistence_threshold default 1e5; Python op ~2 us "
         "(pytorch/pytorch#41383); back-to-back kernel 2.6 us (gpu-benches gpu-small-kernels)"),
        ("re-gathers under full recompute, 2021", f"a tensor gathered again for the backward when twice its "
         f"layer's later weights exceed {DEEPSPEED_2021_MAX_REUSE_ELEMENTS:.0e} elements",
         "stage3.py _keep_for_later / get_reuse_distance_in_numel; max_reuse_distance default 1e9"),
        ("NCCL, 2021", "2.8: ring latency per step and protocol from its tuning model",
         "NVIDIA/nccl src/graph/tuning.cc v2.8.4-1 (baseLat, hwLat, llMaxBws, ll128MaxBwPerCh)"),
        ("attention, 2021", "unfused (Megatron's fused scale-mask-softmax)", "FlashAttention appeared in 2022"),
        ("model", "GPT: LayerNorm, biases, learned positions, tied embeddings, vocab 51200",
         "Megatron-DeepSpeed's GPT-3 configuration"),
    ),
    "nemo": (
        ("sharding", "zero 1 (distributed optimizer); zero 3 = Megatron-FSDP where the FSDP column is set",
         "NeMo/Megatron-Bridge performance recipes"),
        ("overlap", "grad reduce, param gather, TP comm (TP > 1) and pipeline p2p overlapped",
         "the recipes' comm overlap callbacks"),
        ("sequence parallel", "on with TP > 1", "Megatron-Core default in the recipes"),
        ("context parallel", "ring (p2p) with causal load balancing", "Megatron-Core's default cp_comm_type"),
        ("recompute", "none", "performance recipes train without recomputation unless noted"),
        ("model", "Llama-style rows: RMSNorm, no biases, rotary, untied; GPT3: LayerNorm, biases, learned, tied",
         "NeMo model configs"),
        ("uneven pipeline split", "the embedding and the loss take a layer's slot on the first and last stages "
         "where the layers plus two split into pp x vpp chunks (126 layers in 128 slots for Llama 3.1 405B); "
         "otherwise layers rounded up to a multiple of pp x vpp (at most pp x vpp - 1 layers' work added)",
         "Megatron-Core's account_for_embedding/loss_in_pipeline_split, set by Megatron-Bridge's 405B recipe "
         "(recipes/llama/h100/llama3.py @067f987)"),
        ("vocab", "51200 for GPT3-175B (empty cell)", "NeMo GPT-3 tokenizer padded to a multiple of 128 x TP"),
        ("squared ReLU", "priced as relu", "Nemotron's relu2 is one elementwise kernel like relu"),
        ("fp8", "TE per-tensor scaling on linears, attention bf16: delayed scaling (norms and activations "
         "write FP8 themselves) on NeMo's rows, current scaling (an amax kernel before each standalone cast) "
         "on Megatron-Bridge's",
         "NeMo scripts/performance/argument_parser.py @8cfedd7: --fp8_recipe defaults to ds (delayed); "
         "Megatron-Bridge scripts/performance/utils/precision.py: per-tensor FP8 is fp8_cs "
         "(bf16_with_fp8_current_scaling_mixed, first/last layers not kept in BF16)"),
        ("mxfp8 / nvfp4", "every linear layer's GEMMs in the format, none kept in BF16; attention BF16",
         "Megatron-Bridge bf16_with_mxfp8_mixed / bf16_with_nvfp4_mixed leave num_layers_at_start/end_in_bf16 at 0 "
         "and fp8_dot_product_attention off"),
        ("low-precision TP gathers", "sequence-parallel all-gathers move the GEMMs' format (inputs forward, "
         "output gradients backward); reduce-scatters BF16",
         "Transformer Engine's Linear/LayerNormLinear quantize before gather_along_first_dim or the userbuffers "
         "all-gather (module/linear.py, layernorm_linear.py); the recipes' userbuffers_fp8_* overlap configs"),
        ("nvfp4 TP overlap", "TP communication not overlapped (the recipes turn userbuffers off for NVFP4)",
         "Megatron-Bridge llama3/llama31 perf configs: tp_comm_overlap = False if precision == 'nvfp4'"),
        ("attention on Hopper", "the device's FlashAttention-2 fit",
         "TE selects cuDNN's fused attention on sm90 (since v1.2), but the containers' cuDNN speeds are unsourced "
         "(framework_kernels.py); the FA3 paper's 1.6x made the H100 TE rows 7-28% too fast, so it is not applied"),
        ("fp8 weight casts", "once per step (the first micro-batch's), reused by the others",
         "megatron/core/pipeline_parallel/schedules.py forward_step: set_is_first_microbatch; TE keeps the cast"),
        ("MoE model shapes", "the named model's preset (head_dim, MLA, shared experts, dense first layers, windows)",
         "the CSV columns cannot say them; MOE_PRESETS, each preset citing its config.json"),
        ("MoE dispatcher", "alltoall, no all-to-all overlap, unless NEMO_MOE_RECIPES lists the container, GPU and model",
         "Megatron-Core defaults; the listed DeepEP/HybridEP and 1F1B-overlap settings cite their recipe files"),
    ),
    "meta": (
        ("sharding", "zero 3 without resharding after forward: parameters gathered and gradients reduce-scattered "
         "once per step", "Llama 3 paper (Dubey et al. 2024) sec. 3.3.2: FSDP that does not reshard after the "
         "forward pass, gradients reduced once per step"),
        ("interleaved stages per rank", "2 where not stated",
         "the paper's Figure 6 interleaves 8 stages over 4 ranks and gives no count for the 405B run"),
        ("uneven pipeline split", "one layer fewer on the first and last stages (126 layers in 128 slots)",
         "sec. 3.3.2: the embedding and the loss take those slots"),
        ("tensor parallel", "sequence parallel, collectives not overlapped", "the paper does not say they are"),
    ),
    # Not a framework: how rows that gave only TFLOP/s per GPU get their iteration time (source_flops.py).
    "TFLOP/s-only rows (the source's FLOP count)": SOURCE_FLOPS,
}

# Eager PyTorch runs a norm or an activation as several kernels, each streaming the whole tensor
# through HBM, where the cost model's operators are one fused kernel (read x, write y): per role,
# (bytes moved / the fused kernel's, kernels launched). Counted from torchtitan's RMSNorm
# (torchtitan/models/norms.py: x.float(), pow, mean, rsqrt, mul, type_as, * weight: 20 B read and
# 16 B written per bf16 element against 2 + 2 fused, 7 launches) and its SwiGLU
# (silu(w1 x) * w3 x: silu r2 w2 plus mul r4 w2 = 10 B per element of the FFN width against the
# fused 6 B, 2 launches). torch.compile fuses both back (Inductor), so compiled rows keep 1.
EAGER_ELEMENTWISE = {"norm": (36.0 / 4.0, 7), "activation": (10.0 / 6.0, 2)}

# Which cluster preset (or shipped cluster) each GPU column names.
GPU_CLUSTERS = {
    "A100-40GB": "dgx-a100-40gb", "A100-80GB": "dgx-a100-80gb", "A100-SXM4-80GB": "dgx-a100-80gb",
    "H100-80GB": "dgx-h100", "H100-SXM5-80GB": "dgx-h100", "H200": "dgx-h200",
    "H100-96GB-HBM2e-500W": "grand-teton-h100", "B200": "dgx-b200", "GB200": "gb200-nvl72-64",
}


@dataclass(frozen=True, kw_only=True)
class Unexpressible:
    """A published row the cost model cannot price (yet), and why."""

    run_id: str
    regime: str
    reason: str


def runs_eager(row: dict[str, str]) -> bool:
    """Whether the row ran eager PyTorch elementwise kernels (torchtitan without torch.compile)."""
    return framework_of(row) == "torchtitan" and (row.get("compile") or "no").lower() != "yes"


def framework_of(row: dict[str, str]) -> str:
    name = row.get("framework", "").lower()
    for key in FRAMEWORK_DEFAULTS:
        if key in name:
            return key
    return "megatron" if not name else name.split()[0]


# The CSV's shape columns cannot say a mixture-of-experts model's attention and layer details
# (head_dim other than hidden / heads, latent attention, shared experts, dense first layers,
# sliding windows, biases). Rows naming one of these models take them from its preset, whose
# source is the model's own config.json; the row's own columns must agree with the preset.
# The published Model TFLOP/s confirm the preset shapes: Qwen3-30B-A3B's 547 TFLOP/s at 23766
# tokens/s/GPU (nemo-mb-042) is 23.0 GFLOP per token, 6 x 79.9 M per layer with head_dim 128
# (62 M with hidden / heads = 64).
MOE_PRESETS = {"qwen3_30b_a3b": "qwen3-30b-a3b", "qwen3_235b_a22b": "qwen3-235b-a22b",
               "deepseekv3": "deepseek-v3", "gpt oss 120b": "gpt-oss-120b"}
_PRESET_CHECKS = ("hidden_size", "num_heads", "num_kv_heads", "vocab_size", "num_experts",
                  "num_experts_per_token", "expert_ffn_hidden_size")


# MoE settings of NeMo / Megatron-Bridge performance recipes the table does not print:
# (container, gpu, model key) -> (ep_dispatcher, overlap_ep_comm, source). Unlisted: alltoall,
# no overlap (Megatron-Core's defaults: moe_token_dispatcher_type alltoall, overlap off).
NEMO_MOE_RECIPES = {
    ("25.09", "H100-SXM5-80GB", "deepseekv3"): (
        "deepep", True, "Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py: DeepEP on H100 and "
        "A2A_1F1B (overlap_moe_expert_parallel_comm, delay_wgrad_compute) on H100"),
    ("25.11", "H100-SXM5-80GB", "qwen3_30b_a3b"): (
        "alltoall", True, "Megatron-Bridge v0.2.0 scripts/performance/configs/qwen3/workload_base_configs.py "
        "QWEN3_30B_A3B_H100_*: moe_a2a_overlap=True"),
    ("25.11", "B200", "qwen3_235b_a22b"): (
        "alltoall", True, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_235B_A22B_B200_*: moe_a2a_overlap=True"),
    ("25.11", "GB200", "qwen3_30b_a3b"): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_30B_A3B_GB200_*: moe_flex_dispatcher_backend=hybridep"),
    ("25.11", "GB200", "qwen3_235b_a22b"): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_235B_A22B_GB200_*: moe_flex_dispatcher_backend=hybridep"),
    ("25.11", "GB200", "deepseekv3"): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/deepseek/workload_base_configs.py "
        "DEEPSEEK_V3_GB200_BASE_CONFIG: hybridep, moe_a2a_overlap=False"),
    ("26.04.01", "B200", "gpt oss 120b"): (
        "deepep", False, "Megatron-Bridge 26.04 configs/gpt_oss/gpt_oss_workload_base_configs.py "
        "GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 (GBS 1280): hybridep"),
    ("26.08", "GB200", "gpt oss 120b"): (
        "deepep", False, "Megatron-Bridge @067f987 perf_recipes/gpt_oss/gb200/gpt_oss.py "
        "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config: HybridEP (NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 64)"),
}


# CUDA graphs of the NeMo / Megatron-Bridge MoE performance recipes (cost/host.py removes the
# host time of a captured scope): (container, gpu, model key) -> (cuda_graph_scope, source).
# Unlisted: no graphs. 25.09's graphs are Megatron-Core's per-layer local graphs
# (enable_cuda_graph) of token-drop runs, padded to capacity: every scope of the layer.
_LAYER = ("attn", "mlp", "moe_router", "moe_preprocess", "moe")
NEMO_CUDA_GRAPHS = {
    ("25.09", "GB200", "qwen3_30b_a3b"): (_LAYER, "Megatron-Bridge v0.1.0rc4 configs/qwen3/"
                                          "qwen3_30b_a3b_llm_pretrain.yaml gb200: cuda_graphs true"),
    ("25.09", "B200", "qwen3_30b_a3b"): (_LAYER, "v0.1.0rc4 qwen3_30b_a3b_llm_pretrain.yaml b200: cuda_graphs true"),
    ("25.09", "GB200", "qwen3_235b_a22b"): (_LAYER, "v0.1.0rc4 qwen3_235b_a22b_llm_pretrain.yaml gb200: cuda_graphs true"),
    ("25.11", "GB200", "qwen3_30b_a3b"): (("moe_router", "moe_preprocess"), "Megatron-Bridge v0.2.0 configs/qwen3/"
                                          "workload_base_configs.py QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG"),
    ("25.11", "GB200", "qwen3_235b_a22b"): (("attn", "moe_router", "moe_preprocess"),
                                            "v0.2.0 configs/qwen3/workload_base_configs.py QWEN3_235B_A22B_GB200_*"),
    ("25.11", "GB200", "deepseekv3"): (("moe_router", "moe_preprocess"),
                                       "v0.2.0 configs/deepseek/workload_base_configs.py DEEPSEEK_V3_GB200_BASE_CONFIG"),
    ("26.08", "GB200", "gpt oss 120b"): (("full_iteration",), "Megatron-Bridge @067f987 perf_recipes/gpt_oss/common.py "
                                         "_apply_gpt_oss_120b_full_iter_fp8mx_configs: cuda_graph_impl full_iteration"),
}


def _host_settings(row: dict[str, str], framework: str) -> dict:
    """Megatron-Core rows issue kernels from eager PyTorch (cost/host.py), outside the CUDA
    graphs a NeMo MoE recipe captures (NEMO_CUDA_GRAPHS)."""
    if framework not in ("nemo", "megatron"):
        return {}
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    graphs = NEMO_CUDA_GRAPHS.get((match.group(1) if match else "", row["gpu"], key)) if row.get("arch") == "moe" else None
    return {"host_dispatch": "eager", "cuda_graph_scope": graphs[0] if graphs else ()}


def _moe_recipe(row: dict[str, str]) -> dict:
    """Workload fields of the row's NeMo MoE recipe (NEMO_MOE_RECIPES); empty when unlisted."""
    match = re.search(r"container (\d+\.\d+(?:\.\d+)?)", row.get("source", ""))
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    recipe = NEMO_MOE_RECIPES.get((match.group(1) if match else "", row["gpu"], key))
    if recipe is None or row.get("arch") != "moe":
        return {}
    return {"ep_dispatcher": recipe[0], "overlap_ep_comm": recipe[1]}


def _moe_preset(row: dict[str, str], columns: ModelSpec) -> ModelSpec:
    """The preset the row's model names (see MOE_PRESETS), with the row's name, source and
    context; the row's columns when it names none."""
    name = row["model"].lower()
    key = next((k for k in MOE_PRESETS if name.startswith(k)), None)
    if row.get("arch") != "moe" or key is None:
        return columns
    preset = load_preset(MOE_PRESETS[key])
    differ = [f for f in _PRESET_CHECKS if getattr(preset, f) != getattr(columns, f)]
    if differ or preset.num_layers != columns.num_layers:
        raise AutotuneError("model", f"row {row['id']} disagrees with preset {preset.name} on {differ or ['num_layers']}")
    return preset.with_changes(name=columns.name, source=columns.source, max_seq_len=columns.max_seq_len)


def _model(row: dict[str, str], framework: str) -> ModelSpec:
    act = {"relu2": "relu"}.get(row["ffn_act"] or "gelu", row["ffn_act"] or "gelu")
    llama = act == "swiglu"
    moe = row.get("arch") == "moe"
    vocab = int(row["vocab"] or 51200)
    return ModelSpec(
        name=row["model"], num_layers=int(row["layers"]), hidden_size=int(row["hidden"]),
        num_heads=int(row["heads"]), num_kv_heads=int(row["kv_heads"] or row["heads"]),
        ffn_hidden_size=int(row["ffn"]), ffn_activation=act, vocab_size=vocab,
        max_seq_len=int(row["seq"]), tied_embeddings=not llama, dropout=False,
        norm="rmsnorm" if llama else "layernorm", bias=not llama,
        position_embedding="rotary" if llama else "learned", source=row["source"],
        num_experts=int(row["num_experts"]) if moe else 0,
        num_experts_per_token=int(row["top_k"]) if moe else 0,
        expert_ffn_hidden_size=int(row["expert_ffn"]) if moe else 0,
    )


def _precision(row: dict[str, str]) -> str:
    return row.get("precision") or row.get("dtype") or "bf16"


def regime_of(row: dict[str, str]) -> str:
    return f"{row['gpu']} | {row.get('arch') or 'dense'} | {_precision(row)} | {framework_of(row)}"




def _plan_options(row: dict[str, str], framework: str, pp: int, tp: int) -> dict:
    """Plan fields the framework's defaults decide."""
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    zero = int(row["zero"]) if row["zero"] else (3 if framework in ("llm-foundry", "torchtitan", "meta") else 1)
    async_tp = (("asynctp" in text.replace(" ", "") or "async tp" in text or _captioned_async_tp(text))
                and "vanilla tp" not in text)
    nemo_overlap = framework == "nemo" and _precision(row) not in NEMO_NO_TP_OVERLAP_PRECISIONS
    options = {"zero": zero, "overlap_grad_reduce": True, "overlap_param_gather": True, "overlap_p2p_comm": True,
               "overlap_tp_comm": tp > 1 and (nemo_overlap or async_tp)}
    if framework == "meta":  # FSDP without resharding after forward (FRAMEWORK_DEFAULTS)
        options["reshard_after_forward"] = False
    if framework == "torchtitan":
        options["overlap_tp_backward"] = False  # PyTorch async TP decomposes the forward graph's collectives
        options["reshard_after_forward"] = pp == 1
        options["cp_comm"] = "all_gather"
    return options


# Tables whose caption, not their rows, says the runs used async TP: the December 2024 page's
# Table 5 ("3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP") and Table 6
# ("4D parallelism ... + AsyncTP + 1F1B"), pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md.
ASYNC_TP_CAPTIONS = {"llama3_h100_202412_torchtitan.md": ("table5", "table6")}


def _captioned_async_tp(text: str) -> bool:
    return any(page in text and any(f"{table} " in text or text.endswith(table) for table in tables)
               for page, tables in ASYNC_TP_CAPTIONS.items())


def _schedule(row: dict[str, str], framework: str, pp: int) -> tuple[int, str | None]:
    """(vpp, schedule): the row's vpp; torchtitan's interleaved tables and Meta's runs at 2 stages per rank."""
    if row["vpp"]:
        vpp = int(row["vpp"])
        return vpp, ("interleaved" if vpp > 1 else None)
    if pp > 1 and (framework == "meta" or (framework == "torchtitan" and "interleaved" in row["source"].lower())):
        return 2, "interleaved"
    return 1, None


def _deepspeed_2021(row: dict[str, str], framework: str) -> bool:
    """A DeepSpeed row of 2021 (its source or framework says 2021, SC'21, or release 0.3-0.5)."""
    text = " ".join(row.get(k, "") for k in ("source", "framework", "confidence")).lower()
    return framework == "deepspeed" and bool(re.search(r"2021|sc'?21|\b0\.[345]\.\d", text))


def modern_run_from_row(row: dict[str, str]):
    """(model, workload, cluster name, plan) of one modern row, or an Unexpressible."""
    framework = framework_of(row)
    regime = regime_of(row)
    if not row.get("iter_s"):
        return Unexpressible(run_id=row["id"], regime=regime, reason="no iteration time (the source gave only TFLOP/s)")
    text = (row.get("source", "") + " " + row.get("confidence", "")).lower()
    cluster = GPU_CLUSTERS.get(row["gpu"])
    if cluster is None:
        return Unexpressible(run_id=row["id"], regime=regime, reason=f"no cluster preset for {row['gpu']}")
    model = _moe_preset(row, _model(row, framework))
    tp, pp, cp = int(row["tp"]), int(row["pp"]), int(row["cp"] or 1)
    vpp, schedule = _schedule(row, framework, pp)
    slots = embedding_loss_slots(model.num_layers, pp * vpp, framework)
    if model.num_layers % (pp * vpp) and not slots:  # rounded up (see FRAMEWORK_DEFAULTS)
        model = model.with_changes(num_layers=-(-model.num_layers // (pp * vpp)) * pp * vpp)
    tp, pp, cp = int(row["tp"]), int(row["pp"]), int(row["cp"] or 1)
    gpus = int(row["gpus"])
    dp = int(row["dp"]) if row["dp"] else gpus // (tp * pp * cp)
    global_batch = int(row["global_batch"])
    micro_batch = int(row["micro_batch"] or 1)
    if framework == "torchtitan" and pp > 1:  # one micro-batch per stage
        micro_batch = max(1, global_batch // dp // pp)
    dtype = "fp8_rowwise" if _precision(row) == "fp8" and "rowwise" in text else _precision(row)
    of_2021 = _deepspeed_2021(row, framework)
    workload = TrainingWorkload(global_batch=global_batch, seq_len=int(row["seq"]), dtype=dtype,
                                attention_impl="unfused" if of_2021 else "flash",
                                fp8_all_gather="fp8 all-gather on" in text, sp_batch_first=framework == "torchtitan",
                                fp8_tp_all_gather=low_precision_tp_gathers(framework, dtype, tp),
                                qkv_fused=framework != "torchtitan",
                                reuse_weight_casts=framework in WEIGHT_CAST_REUSERS,
                                fp8_recipe=fp8_recipe_of(row, framework),
                                param_gather_bytes_per_s=DEEPSPEED_2021_GATHER_BYTES_PER_S if of_2021 else 0.0,
                                **(deepspeed_2021_calls(model, tp, True) if of_2021 else {}),
                                **(_moe_recipe(row) if framework == "nemo" else {}), **_host_settings(row, framework))
    sp = row["sequence_parallel"] == "yes" if row["sequence_parallel"] else tp > 1
    plan = uniform_plan(
        num_layers=model.num_layers + slots, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, micro_batch=micro_batch,
        global_batch=global_batch, sequence_parallel=sp, recompute=row["recompute"] or "none",
        schedule=schedule, ep=int(row.get("ep") or 1), **_plan_options(row, framework, pp, tp))
    if slots:
        plan = with_embedding_loss_slots(plan)
    if framework == "torchtitan" and plan.stages[0].recompute == "selective":  # its op-level policy
        plan = plan.with_changes(stages=tuple(replace(s, recompute="selective_op") for s in plan.stages))
    return model, workload, cluster, plan, regime


def safe_modern_run(row: dict[str, str]):
    """As :func:`modern_run_from_row`, a row the specs reject becoming Unexpressible."""
    try:
        return modern_run_from_row(row)
    except AutotuneError as err:
        return Unexpressible(run_id=row["id"], regime=regime_of(row), reason=f"{err.field}: {err.message}")
