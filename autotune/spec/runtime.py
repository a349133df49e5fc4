"""How a plan is run: the runtime (framework or reference runner) that executes it.

A workload says what the step is (batch, sequence, dtype, phase); a :class:`Runtime` says how a
framework runs it: which kernels it issues (fused or eager norms, one or three QKV GEMMs, its
attention kernel and GEMM rate inside a step), how its sharding gathers and reduces, what it
overlaps, how its host issues kernels and what it replays as CUDA graphs, which plan choices it
can express (its search space) and the config it exports to. Presets are data files, one per
runtime, in ``autotune/data/runtimes/`` (each value with its source); ``load_runtime`` reads them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from autotune.data import data_path
from autotune.errors import AutotuneError, closest, require, require_choice
from autotune.spec.serving_engine import SERVING_SETTING_NAMES, ServingEngine, serving_engine_from_dict

__all__ = ["Runtime", "load_runtime", "runtime_names", "resolve_runtime", "DEFAULT_RUNTIME", "ATTENTION_IMPLS",
           "FP8_RECIPES", "HOST_DISPATCH", "KV_CACHE_APPEND", "runtime_from_dict", "CUDA_GRAPH_SCOPES", "EP_DISPATCHERS", "NCCL_TUNINGS", "EXPORT_FORMATS",
           "SETTING_NAMES", "EXPORT_RUNTIMES", "RESHARD_RULES", "PIPELINE_SPLITS"]

# Megatron-Core is what most published large-scale runs use (NVIDIA's, the Llama/GPT-3 era papers)
# and its flags express every plan its search space holds, so the quick start's plan exports to it.
DEFAULT_RUNTIME = "megatron"

# "flash": fused attention kernel, no s x s matrix in memory (FlashAttention, Dao et al. 2022).
# "unfused": scores, softmax and dropout materialised, as Megatron-LM did before FlashAttention
# (Narayanan et al. SC'21 used its fused scale-mask-softmax kernel).
# "unfused_eager_mask": the same, with the scaling and the causal mask as eager PyTorch kernels, as
# Megatron-LM ran before its fused scale-mask-softmax (added 2020-09-11, commit 51a2e6b0ff): Q and K
# each divided by d^(1/4), then torch.mul(scores, mask) - 10000 (1 - mask), then torch.nn.Softmax
# (Megatron-LM @ebbe40cd36, Oct 2019, megatron/mpu/transformer.py lines 122-137).
ATTENTION_IMPLS = ("flash", "unfused", "unfused_eager_mask")
# How the per-tensor ``fp8`` recipe casts: "cast": a standalone cast kernel per operand that takes
# the amax itself (torchao's Float8Linear; Transformer Engine's delayed scaling in te.Linear swapped
# for nn.Linear, as Composer does); "te_delayed": TE's delayed scaling in Megatron-Core's TE layers,
# whose norm and activation kernels write FP8 themselves; "te_current": TE's current scaling there,
# an amax kernel before each standalone cast, the norms and activations computing their own amax.
FP8_RECIPES = ("cast", "te_delayed", "te_current")
# How the host's kernel issue is priced (cost/host.py): "hidden" (never: the host always runs
# ahead) or "eager" (PyTorch eager issuing Megatron-Core's operators from Python).
HOST_DISPATCH = ("hidden", "eager")
KV_CACHE_APPEND = ("in_place", "concat")
# Scopes a step replays as CUDA graphs (Megatron --cuda-graph-scope; "full_iteration": the whole step).
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe_router", "moe_preprocess", "moe", "full_iteration")
# How tokens reach the experts (cost/moe.py): Megatron-Core's NCCL all-to-all or DeepEP / HybridEP.
EP_DISPATCHERS = ("alltoall", "deepep")
# NCCL's ring latency model: "" the cluster's alpha per step; "2.8": NCCL 2.8's protocols (cost/comm.py).
NCCL_TUNINGS = ("", "2.8")
# Config formats autotune writes (autotune/outputs/export); "" for a runtime with no config file.
EXPORT_FORMATS = ("megatron", "torchtitan", "torchtitan-0.2", "deepspeed", "")
ZERO_STAGES = (0, 1, 2, 3)
# Families of operator streams captured from a runtime's own code (profilers/opstreams.py)
OP_STREAM_FAMILIES = ("", "torch", "transformers")
# "always": weights freed after forward and gathered again for backward (FSDP's default);
# "unless_pipelined": kept gathered when pp > 1 (torchtitan: reshard_after_forward = not pp_enabled);
# "never": gathered once per step (the Llama 3 paper's FSDP).
RESHARD_RULES = ("always", "unless_pipelined", "never")
# How layers that pp x vpp does not divide are placed: "embedding_loss_slots": the embedding and the
# loss each take a layer's slot on the first and last stages where that makes the split even
# (Megatron-Core's account_for_embedding/loss_in_pipeline_split); otherwise, and under "equal", the
# layers are priced rounded up to a multiple of pp x vpp (an uneven split runs at its fullest chunk).
PIPELINE_SPLITS = ("equal", "embedding_loss_slots")
# The runtime a plan is made for when only its export format is named (search --export FMT).
EXPORT_RUNTIMES = {"megatron": "megatron", "torchtitan": "torchtitan", "torchtitan-0.2": "torchtitan",
                   "deepspeed": "deepspeed"}


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """A framework's way of running a plan. Every setting's meaning is in its comment; a preset
    file gives each setting it changes from these neutral defaults with its source."""

    name: str
    description: str = ""
    space: str = "default"  # its search space (search_spaces/NAME.toml): the plans it can run
    export_format: str = ""  # autotune export --format it writes; "" none
    zero_stages: tuple[int, ...] = ZERO_STAGES  # the ZeRO/FSDP stages it runs
    reshard_variants: bool = True  # FSDP2 reshard_after_forward=False and HSDP expressible
    # -- what the runtime does where a run does not say (autotune.plan.builders.runtime_plan) --
    zero_default: int = 0  # the ZeRO stage it runs unless told
    reshard_after_forward: str = "always"  # RESHARD_RULES: FSDP frees gathered weights after forward
    pipeline_microbatches: str = "given"  # "stages": a pipelined step splits the local batch into pp micro-batches
    selective_recompute: str = "selective"  # what "selective" recomputes (selective: Megatron's attention core)
    pipeline_split: str = "equal"  # PIPELINE_SPLITS: how layers that pp x vpp does not divide are placed
    vpp_default: int = 1  # virtual stages per rank of a pipelined run unless told
    zero2_keeps_params: bool = False  # its "ZeRO 2" shards parameters too, kept gathered for the step (FSDP SHARD_GRAD_OP)
    no_tp_overlap_dtypes: tuple[str, ...] = ()  # dtypes under which it does not overlap TP communication
    # -- kernels --
    attention_impl: str = "flash"  # its attention kernel (ATTENTION_IMPLS)
    attention_speed: float = 1.0  # its attention kernel's speed over the device's fitted one
    # its bf16/fp16 GEMMs inside a training step over the device's GEMM fit, per GPU generation
    # (("hopper", 0.81),); a generation not listed runs at the fit
    gemm_in_step_speed: tuple[tuple[str, float], ...] = ()
    # its 16-bit GEMMs over a dimension that is not a multiple of 8 (cuBLAS's align1 kernels) over
    # its aligned ones, forward and backward, per GPU generation (("hopper", 0.118, 0.184),); only
    # priced where the operator stream shows such a GEMM (graph/opstream.py "gemm_unaligned")
    gemm_unaligned_speed: tuple[tuple[str, float, float], ...] = ()
    # its fused attention kernels (forward and backward) inside a step over the device's attention
    # fits, per GPU generation, as gemm_in_step_speed; a generation not listed runs at the fits
    attention_in_step_speed: tuple[tuple[str, float], ...] = ()
    # the same for attention with dropout (a model whose ModelSpec.dropout is set: the reference
    # model passes its dropout to SDPA), a different kernel; a generation not listed: as without
    attention_dropout_in_step_speed: tuple[tuple[str, float], ...] = ()
    # the head-dimension multiple its attention kernel pads a head to, per GPU generation
    # (("hopper", 64),); a generation not listed keeps the device's head-dim figure
    attention_head_dim_tile: tuple[tuple[str, int], ...] = ()
    # its attention kernel at head dim 64 over head dim 128 inside a step, per GPU (("h200", 0.776),);
    # where not stated, the device's figure (DeviceProfile.attention_head_dim_64_speed)
    attention_head_dim_64_speed: tuple[tuple[str, float], ...] = ()
    # its attention kernel at head dim 256 over head dim 128, per GPU (("h200", 0.82),); where not
    # stated, 1 (cost/compute.py attention_head_dim_speed holds the 128 speed above 128)
    attention_head_dim_256_speed: tuple[tuple[str, float], ...] = ()
    # windowed layers' attention (sliding or chunked, window <= sequence) gets a mask tensor, not
    # is_causal (graph/opstream.py explicit_mask_share): the kernel then skips no causal blocks
    masks_windowed_attention: bool = False
    # its attention kernel given a mask over the same kernel with is_causal, time at the same shape,
    # per GPU generation and head dim: (("hopper", 128, forward, backward), ...); a generation not
    # listed: 2 (all s x s pairs instead of the causal half: cost/compute.py attention_mask_slowdown)
    attention_mask_slowdown: tuple[tuple[str, float, float, float], ...] = ()
    # the measured profiles (autotune/data/devices) its in-step speeds were taken against, by the
    # datasheet device preset they stand for (("h100-sxm", "h100-sxm-measured"),): a cluster on that
    # preset is priced from the measured profile's lines (cost/runtime_kernels.py reference_lines)
    in_step_lines: tuple[tuple[str, str], ...] = ()
    # its memory-bound kernels (norms, activations, casts, elementwise) inside a step over the device's
    # memory fits, per GPU generation
    memory_in_step_speed: tuple[tuple[str, float], ...] = ()
    eager_elementwise: bool = False  # norms and activations as eager PyTorch's unfused kernels
    # the family of captured operator streams its steps are priced from (autotune/data/opstreams,
    # graph/opstream.py): "torch" (autotune's reference model), "transformers"; "" the graph
    op_stream: str = ""
    qkv_fused: bool = True  # Q, K and V projected by one GEMM (else three)
    kv_heads_expanded: bool = False  # K/V repeated to every query head before attention
    sp_batch_first: bool = False  # sequence-parallel buffers copied by each TP gather/reduce-scatter
    recompute_early_stop: bool = False  # full recomputation skips the FFN down projection (torch checkpoint)
    reuse_weight_casts: bool = True  # low-precision weight casts once per step, not per micro-batch
    fp8_recipe: str = "cast"  # how per-tensor fp8 casts run (FP8_RECIPES)
    # -- sharding and communication --
    grad_reduce_in_fp32: bool = True  # gradient buffers and reductions in fp32 (else the 16-bit dtype)
    fp8_params: bool = False  # under an FP8 recipe: weights kept only in FP8 and gathered in FP8
    fp8_all_gather: bool = False  # under an FP8 recipe: FSDP gathers FP8 weights
    fp8_tp_all_gather: bool = False  # under tp_gather_dtypes: sequence-parallel gathers move the GEMM format
    tp_gather_dtypes: tuple[str, ...] = ("fp8", "mxfp8", "nvfp4")  # the recipes whose TP gathers it quantizes
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_p2p_comm: bool = True
    overlap_tp_comm: bool = False  # TP collectives hidden behind GEMMs (TE userbuffers, async TP)
    overlap_tp_backward: bool = True  # with overlap_tp_comm: the backward's collectives too
    cp_comm: str = "ring"  # its context-parallel exchange (ring, all_gather, all_to_all)
    ep_dispatcher: str = "alltoall"  # EP_DISPATCHERS
    overlap_ep_comm: bool = False  # 1F1B all-to-all overlap
    param_gather_bytes_per_s: float = 0.0  # ZeRO-3 gather rate per GPU where below the network's; 0: network
    # ZeRO-3 collectives per weight tensor of at least this many elements, smaller ones persisting
    # (DeepSpeed's param_persistence_threshold of 2021, cost/zero3_calls.py); 0: one flat call per layer
    zero3_persistence_elements: int = 0
    # with per-tensor calls: a tensor is gathered again for the backward after a full recomputation
    # when twice its layer's later weights exceed this (DeepSpeed's max_reuse_distance); 0: never
    zero3_max_reuse_elements: float = 0.0
    per_rank_copies: bool = False  # list-based collectives copy each rank's chunk (PyTorch <= 1.8 NCCL)
    gather_host_s_per_rank: float = 0.0  # exposed host seconds per rank of each ZeRO-3 gather
    nccl_tuning: str = ""  # NCCL_TUNINGS
    # -- host --
    host_dispatch: str = "hidden"  # HOST_DISPATCH
    # -- inference --
    # how a decode step adds its token's K and V to the cache: written into a preallocated or paged
    # cache ("in_place"), or the whole cache copied with the new position appended ("concat")
    kv_cache_append: str = "in_place"  # KV_CACHE_APPEND
    cuda_graph_scope: tuple[str, ...] = ()  # CUDA_GRAPH_SCOPES replayed as graphs
    # -- memory beyond the tensors --
    # device memory its allocator holds at the step's peak beyond the bytes allocated to tensors, as a
    # share of them (PyTorch's caching allocator: blocks cached or split, fragmentation); the CUDA
    # context and library modules are the device's reserved_bytes (cost/memory.py StageMemory)
    allocator_reserve_share: float = 0.0
    # gradients freed after every optimizer step (zero_grad(set_to_none=True)) and allocated again
    # in backward, where no data-parallel wrapper keeps them in buckets; else held for the whole step
    grads_freed_each_step: bool = False
    # -- serving: a serving engine's scheduler, batch limits, KV cache and memory share
    # (autotune/spec/serving_engine.py); None for training runtimes, and training never reads it --
    serving: ServingEngine | None = None
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # (setting, where its value comes from)

    def __post_init__(self) -> None:
        for name in ("zero_stages", "cuda_graph_scope", "gemm_in_step_speed", "gemm_unaligned_speed", "attention_in_step_speed",
                     "attention_dropout_in_step_speed",
                     "attention_head_dim_tile", "attention_head_dim_64_speed", "attention_head_dim_256_speed", "attention_mask_slowdown",
                     "memory_in_step_speed", "in_step_lines",
                     "sources", "no_tp_overlap_dtypes", "tp_gather_dtypes"):
            value = getattr(self, name)
            if isinstance(value, list):  # read back from TOML or JSON
                object.__setattr__(self, name, tuple(tuple(v) if isinstance(v, list) else v for v in value))
        require(isinstance(self.name, str) and self.name.strip() != "", "runtime.name", "must be a non-empty string")
        if self.serving is not None:
            object.__setattr__(self, "serving", serving_engine_from_dict(self.serving))
        for f in fields(self):
            if f.type == "bool":
                require(isinstance(getattr(self, f.name), bool), f"runtime.{f.name}",
                        f"must be true or false, got {getattr(self, f.name)!r}")
        require_choice("runtime.attention_impl", self.attention_impl, ATTENTION_IMPLS)
        require_choice("runtime.fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        require_choice("runtime.host_dispatch", self.host_dispatch, HOST_DISPATCH)
        require_choice("runtime.kv_cache_append", self.kv_cache_append, KV_CACHE_APPEND)
        require_choice("runtime.ep_dispatcher", self.ep_dispatcher, EP_DISPATCHERS)
        require_choice("runtime.nccl_tuning", self.nccl_tuning, NCCL_TUNINGS)
        require_choice("runtime.export_format", self.export_format, EXPORT_FORMATS)
        require_choice("runtime.cp_comm", self.cp_comm, ("ring", "all_gather", "all_to_all"))
        require_choice("runtime.op_stream", self.op_stream, OP_STREAM_FAMILIES)
        require_choice("runtime.reshard_after_forward", self.reshard_after_forward, RESHARD_RULES)
        require_choice("runtime.pipeline_microbatches", self.pipeline_microbatches, ("given", "stages"))
        require_choice("runtime.selective_recompute", self.selective_recompute, ("selective", "selective_op"))
        require_choice("runtime.pipeline_split", self.pipeline_split, PIPELINE_SPLITS)
        require(all(d in ("fp8", "fp8_rowwise", "mxfp8", "nvfp4") for d in self.tp_gather_dtypes), "runtime.tp_gather_dtypes",
                f"must list low-precision dtypes (fp8, fp8_rowwise, mxfp8, nvfp4), got {list(self.tp_gather_dtypes)}")
        require(isinstance(self.zero_stages, (tuple, list)) and len(self.zero_stages) > 0
                and all(z in ZERO_STAGES for z in self.zero_stages), "runtime.zero_stages",
                f"must be a non-empty list of {list(ZERO_STAGES)}, got {self.zero_stages!r}")
        require(self.zero_default in self.zero_stages, "runtime.zero_default",
                f"must be one of its zero_stages {list(self.zero_stages)}, got {self.zero_default!r}")
        require(isinstance(self.vpp_default, int) and self.vpp_default >= 1, "runtime.vpp_default",
                f"must be an integer >= 1, got {self.vpp_default!r}")
        require(all(s in CUDA_GRAPH_SCOPES for s in self.cuda_graph_scope), "runtime.cuda_graph_scope",
                f"must be a list of {', '.join(CUDA_GRAPH_SCOPES)}, got {list(self.cuda_graph_scope)}")
        require(isinstance(self.zero3_persistence_elements, int) and self.zero3_persistence_elements >= 0,
                "runtime.zero3_persistence_elements", f"must be an integer >= 0, got {self.zero3_persistence_elements!r}")
        share = self.allocator_reserve_share
        require(isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share < 1,
                "runtime.allocator_reserve_share", f"must be a number in [0, 1), got {share!r}")
        for name in ("attention_speed", "param_gather_bytes_per_s", "zero3_max_reuse_elements", "gather_host_s_per_rank"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")
                    and (name != "attention_speed" or value > 0), f"runtime.{name}",
                    f"must be a finite number {'> 0' if name == 'attention_speed' else '>= 0'}, got {value!r}")
        for name in ("gemm_in_step_speed", "attention_in_step_speed", "attention_dropout_in_step_speed",
                     "memory_in_step_speed", "attention_head_dim_64_speed", "attention_head_dim_256_speed"):
            value = getattr(self, name)
            require(all(isinstance(g, str) and isinstance(s, (int, float)) and 0 < s < float("inf") for g, s in value),
                    f"runtime.{name}", f"must map GPU generations to positive speeds, got {value!r}")

        require(all(len(row) == 3 and isinstance(row[0], str) and all(isinstance(s, (int, float)) and not isinstance(s, bool)
                                                                     and 0 < s <= 1 for s in row[1:])
                    for row in self.gemm_unaligned_speed), "runtime.gemm_unaligned_speed",
                f"must list [generation, forward speed, backward speed] with speeds in (0, 1], got {self.gemm_unaligned_speed!r}")
        require(all(isinstance(g, str) and isinstance(t, int) and not isinstance(t, bool) and t > 0 and t % 8 == 0
                    for g, t in self.attention_head_dim_tile), "runtime.attention_head_dim_tile",
                f"must map GPU generations to positive multiples of 8, got {self.attention_head_dim_tile!r}")
        require(all(len(row) == 2 and all(isinstance(v, str) and v for v in row) for row in self.in_step_lines),
                "runtime.in_step_lines", f"must list [datasheet device preset, measured profile], got {self.in_step_lines!r}")
        require(all(len(row) == 4 and isinstance(row[0], str) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                                     for v in row[1:]) and row[1] > 0 and min(row[2:]) >= 1
                    for row in self.attention_mask_slowdown), "runtime.attention_mask_slowdown",
                f"must list [generation, head dim > 0, forward >= 1, backward >= 1], got {self.attention_mask_slowdown!r}")

    def with_changes(self, **changes: Any) -> "Runtime":
        return replace(self, **changes)

    def gemm_speed(self, generation: str) -> float:
        """Its bf16/fp16 GEMMs inside a step over the device's GEMM fit on this GPU generation."""
        return dict(self.gemm_in_step_speed).get(generation, 1.0)

    def kernel_key(self, keys: tuple[str, ...]) -> str:
        """The first of ``keys`` (most specific first: a GPU such as "h200", then its generation)
        that any of its per-GPU kernel tables states; the last where none does."""
        tables = (self.gemm_in_step_speed, self.gemm_unaligned_speed, self.attention_in_step_speed,
                  self.attention_dropout_in_step_speed, self.attention_head_dim_tile, self.memory_in_step_speed,
                  self.attention_head_dim_64_speed, self.attention_head_dim_256_speed, self.attention_mask_slowdown)
        stated = {row[0] for table in tables for row in table}
        return next((key for key in keys if key in stated), keys[-1])

    def gemm_unaligned(self, generation: str) -> tuple[float, float]:
        """(forward, backward) speed of its unaligned 16-bit GEMMs over its aligned ones on this
        GPU generation; (1, 1) where not stated."""
        return next(((f, b) for g, f, b in self.gemm_unaligned_speed if g == generation), (1.0, 1.0))

    def attention_in_step(self, generation: str, *, dropout: bool = False) -> float:
        """Its fused attention kernels inside a step over the device's fits on this GPU generation;
        ``dropout``: attention with dropout, where a speed for it is stated."""
        speeds = dict(self.attention_in_step_speed)
        if dropout:
            speeds |= dict(self.attention_dropout_in_step_speed)
        return speeds.get(generation, 1.0)

    def head_dim_64_speed(self, generation: str) -> float:
        """Its attention at head dim 64 over 128 on this GPU (0: not stated, the device's figure)."""
        return dict(self.attention_head_dim_64_speed).get(generation, 0.0)

    def mask_slowdown(self, generation: str) -> tuple[tuple[float, float, float], ...]:
        """(head dim, forward, backward) rows of its masked attention's slowdown on this GPU
        generation, by head dim; () where not stated."""
        return tuple(sorted(tuple(row[1:]) for row in self.attention_mask_slowdown if row[0] == generation))

    def head_dim_256_speed(self, generation: str) -> float:
        """Its attention at head dim 256 over 128 on this GPU (0: not stated, the device's figure)."""
        return dict(self.attention_head_dim_256_speed).get(generation, 0.0)

    def head_dim_tile(self, generation: str) -> int:
        """The head-dimension multiple its attention kernel pads to on this GPU generation (0: not known)."""
        return dict(self.attention_head_dim_tile).get(generation, 0)

    def measured_in_step(self, generation: str) -> bool:
        """Whether its GEMM, attention and memory-bound kernels all have in-step speeds measured on
        this generation (they then replace the device's class-blind kernel_efficiency)."""
        return all(generation in dict(v) for v in (self.gemm_in_step_speed, self.attention_in_step_speed,
                                                   self.memory_in_step_speed))

    def memory_in_step(self, generation: str) -> float:
        """Its memory-bound kernels inside a step over the device's memory fits on this GPU generation."""
        return dict(self.memory_in_step_speed).get(generation, 1.0)

    def source_of(self, setting: str) -> str:
        return dict(self.sources).get(setting, "")

    def settings(self) -> dict[str, Any]:
        """Every setting (not name, description or sources), for outputs and JSON."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("name", "description", "sources")}
        out["serving"] = self.serving.to_dict() if self.serving is not None else None
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, **self.settings()}


SETTING_NAMES = tuple(f.name for f in fields(Runtime) if f.name not in ("name", "description", "sources"))


def _files() -> dict[str, Any]:
    return {p.name[:-5]: p for p in data_path("runtimes").iterdir()
            if p.name.endswith(".toml")}


def runtime_names() -> list[str]:
    return sorted(_files())


@lru_cache(maxsize=None)
def load_runtime(name: str) -> Runtime:
    """The preset ``name`` (autotune/data/runtimes/NAME.toml), its ``based_on`` preset's settings
    first; each ``[settings]`` entry is ``{value = ..., source = "..."}``."""
    files = _files()
    if name not in files:
        hint = closest(name, files)
        raise AutotuneError("runtime", f"unknown runtime {name!r}; valid: {', '.join(sorted(files))}"
                                       + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    data = tomllib.loads(files[name].read_text())
    base = load_runtime(data["based_on"]) if data.get("based_on") else None
    values = {**(base.settings() if base else {})}
    sources = dict(base.sources) if base else {}
    for key, entry in data.get("settings", {}).items():
        if key not in SETTING_NAMES:
            raise AutotuneError(f"runtime {name}: settings.{key}", f"is not a runtime setting; valid: {', '.join(SETTING_NAMES)}")
        values[key], sources[key] = entry["value"], entry["source"]
    if "serving" in data:  # a serving engine: [serving] entries over its base's
        serving = dict(values.get("serving") or {})
        for key, entry in data["serving"].items():
            if key not in SERVING_SETTING_NAMES:
                raise AutotuneError(f"runtime {name}: serving.{key}",
                                    f"is not a serving setting; valid: {', '.join(SERVING_SETTING_NAMES)}")
            serving[key], sources[f"serving.{key}"] = entry["value"], entry["source"]
        values["serving"] = serving
    return Runtime(name=name, description=data["description"], sources=tuple(sources.items()), **values)


def runtime_from_dict(data: dict[str, Any]) -> Runtime:
    """A Runtime from ``to_dict`` output (a plan file, a stored problem); a name alone is its preset."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise AutotuneError("runtime", f"must be an object with a name, got {data!r}")
    if set(data) == {"name"}:
        return load_runtime(data["name"])
    unknown = set(data) - {"name", "description", *SETTING_NAMES}
    if unknown:
        raise AutotuneError("runtime", f"has unknown setting(s) {', '.join(sorted(unknown))}; valid: {', '.join(SETTING_NAMES)}")
    preset = load_runtime(data["name"]) if data["name"] in runtime_names() else None
    return Runtime(**{k: v for k, v in data.items()}, sources=preset.sources if preset else ())


def resolve_runtime(value: "str | Runtime | None") -> Runtime:
    """A preset by name, or a Runtime as given; None: the default runtime."""
    if value is None:
        return load_runtime(DEFAULT_RUNTIME)
    if isinstance(value, Runtime):
        return value
    if not isinstance(value, str):
        raise AutotuneError("runtime", f"must be a runtime name ({', '.join(runtime_names())}) or a Runtime, got {value!r}")
    return load_runtime(value)
