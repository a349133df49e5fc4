"""What each framework of the published runs does where a row's cell is empty.

``FRAMEWORK_DEFAULTS`` lists, per framework, (setting, value assumed, why), printed by
``autotune check-published --assumptions``; the constants beside it are the numbers those
entries name. calibrate/modern.py applies them to the rows.
"""

from __future__ import annotations

from autotune.calibrate.deepspeed_2021 import (DEEPSPEED_2021_MAX_REUSE_ELEMENTS, DEEPSPEED_2021_PERSISTENCE_ELEMENTS,
                                               PYTHON_OP_S)
from autotune.calibrate.framework_kernels import PYTORCH_GEMM_IN_STEP_HOPPER
from autotune.calibrate.source_flops import SOURCE_FLOPS
from autotune.spec.runtime import load_runtime

__all__ = ["FRAMEWORK_DEFAULTS", "DEEPSPEED_2021_GATHER_BYTES_PER_S"]

# DeepSpeed's ZeRO-3 of 2021 gathered parameters at about 21 GB/s received per GPU (the deepspeed-2021
# runtime preset gives the source); how a prefetch of one tensor overlaps its module's compute is
# calibrate/deepspeed_2021.py's and cost/zero3_calls.py's.
DEEPSPEED_2021_GATHER_BYTES_PER_S = load_runtime("deepspeed-2021").param_gather_bytes_per_s

# (setting, value assumed, why). Printed by ``autotune check-published --assumptions``.
FRAMEWORK_DEFAULTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "llm-foundry": (
        ("sharding", "zero 3, reshard after forward", "FSDP1 FULL_SHARD in every benchmark yaml (scripts/train/benchmarking)"),
        ("zero 2", "FSDP1 SHARD_GRAD_OP: zero 3 without resharding after forward (one gather per micro-batch)",
         "composer's only ZeRO-2-like strategy; SHARD_GRAD_OP shards parameters at rest and keeps them gathered "
         "from forward to backward (torch.distributed.fsdp.ShardingStrategy)"),
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
        ("activation checkpointing", "whole block, early stop: the FFN down projection and last residual add "
         "are not rerun", "activation_checkpointing_reentrant: false on torch 2.1 (sweep.sh image); early stop "
         "is non-reentrant checkpoint's default since 2.1 (pytorch#96866)"),
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
        ("full activation checkpointing", "early stop: the FFN down projection and last residual add are not rerun",
         "apply_ac wraps each block in non-reentrant checkpoint_wrapper; compiled blocks' partitioner recomputes "
         "only what the backward reads"),
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
        ("K/V heads", "repeated to every query head before attention: the context-parallel ring moves K/V as wide as Q",
         "torchtitan llama3 model.py @9dec370: repeat_kv(xk, n_rep) before F.scaled_dot_product_attention"),
        ("selective checkpointing", "op-level (selective_op): every other matmul and all elementwise ops recomputed",
         "activation_checkpoint.selective_ac_option defaults to op (torchtitan _op_sac policy)"),
        ("torch.compile", "as the compile column; empty = off (torchtitan's default)",
         "compiled rows price each norm and activation as one fused kernel; eager rows as the unfused "
         "ops of torchtitan's RMSNorm and SwiGLU (cost/runtime_kernels.py EAGER_ELEMENTWISE)"),
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
        ("MoE recompute modules", "Megatron-Core selective recomputation of named modules on the MoE rows whose "
         "recipe sets them (calibrate/nemo_moe_recipes.py NEMO_RECOMPUTE_MODULES); Qwen3 MoE recipes set none",
         "Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py, v0.2.0 configs/*/workload_base_configs.py, "
         "perf_recipes @067f987"),
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
        ("gradient reduction", "bf16 gradient buffers and data-parallel reductions on Megatron-Bridge's tables and "
         "NeMo 25.04's FP8 rows; fp32 on NeMo 24.x's (not stated; Megatron-LM's bf16 default)",
         "Megatron-Bridge v0.1.0rc4 configs/*.yaml and v0.2.0-v0.6.0 performance configs: grad_reduce_in_fp32 False; "
         "NeMo scripts/performance/utils.py @efa5817 (2025-04): grad_reduce_in_fp32 = False for FP8"),
        ("fp8 weights", "FP8/MXFP8 rows keep their weights in FP8 (no BF16 copy) and all-gather them in FP8 on "
         "Megatron-Bridge's tables and NeMo 25.04's per-tensor FP8; not NVFP4, not the tables' sub-channel FP8 numbers",
         "Megatron-Bridge training/mixed_precision.py (v0.1.0rc4-v0.4.2): fp8_param_gather = True in the FP8 and MXFP8 "
         "configs, False in bf16_with_nvfp4_mixed and the sub-channel ones; NeMo recipes/precision/mixed_precision.py @efa5817"),
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
