"""A parallel plan: pipeline stages, each with its intra-operator choices. Frozen, versioned, JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from autotune.errors import AutotuneError, require, require_choice, require_positive

__all__ = ["Plan", "StagePlan", "SCHEDULES", "RECOMPUTE", "RECOMPUTE_MODULES", "PLAN_SCHEMA", "PLACEMENTS", "MESH_ORDERS"]

PLAN_SCHEMA = "autotune.plan/1"
SCHEDULES = ("1f1b", "gpipe", "interleaved")
# "selective": Megatron's core-attention recomputation (Korthikanti et al. 2022); "selective_op":
# torchtitan's op-level selective checkpointing (saves attention and every other matmul output,
# recomputes the other matmuls and every elementwise op); "full": each layer from its input.
RECOMPUTE = ("none", "selective", "full", "selective_op")
# Megatron-Core's named modules of selective recomputation (TransformerConfig.recompute_modules,
# megatron/core/transformer/transformer_config.py); priced in cost/recompute_modules.py.
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")
# Where a tensor class lives: HBM, host DRAM over PCIe, or CXL-attached memory.
PLACEMENTS = ("hbm", "host", "cxl")
# Order in which the TP, CP and DP groups take ranks of a stage's submesh, innermost first
# (Megatron-Core's ``order="tp-cp-ep-dp-pp"`` convention): the innermost group gets the
# closest GPUs (same node), so its collectives use NVLink.
MESH_ORDERS = ("tp-cp-dp", "tp-dp-cp", "cp-tp-dp", "cp-dp-tp", "dp-tp-cp", "dp-cp-tp")


# Stages whose fields but their place passed every check, by those fields' types and values: a
# search builds tens of thousands of stages (pipelines of one choice on many layer ranges, each
# first, middle or last) from a few hundred such sets, and the checks cost more than the pricing's
# bookkeeping around them. The place (layers, embedding, head) is left out: _check_fields reads
# none of it, and the layers' own checks run on every stage.
_CHECKED: set[tuple] = set()
_CHECKED_KEPT = 4096
_PLACE = ("layers", "has_embedding", "has_head")


def _checked_key(stage: "StagePlan") -> tuple:
    """Every field but the place (_PLACE), each with its type (1 and True differ): the fields in
    their declared order, then their types (unhashable where a field is: StagePlan checks it in full)."""
    named = dict(vars(stage))
    for name in _PLACE:
        del named[name]
    values = tuple(named.values())
    return values, tuple(map(type, values))


@dataclass(frozen=True, kw_only=True)
class StagePlan:
    """One pipeline stage: layers ``[first, last+1)`` on ``num_gpus = tp * cp * dp`` GPUs.

    Expert layers are laid out as Megatron-Core does (MoE parallel folding): the same GPUs form
    ``etp x ep x edp`` for the experts, with ``etp * ep`` dividing ``tp * cp * dp`` and the
    expert data-parallel degree ``edp = num_gpus / (etp * ep)``. ``dp_shard`` (0: all of dp)
    is the group parameters/gradients/optimizer states are sharded over when zero > 0 (HSDP:
    shard over dp_shard, replicate over dp / dp_shard). ``reshard_after_forward`` (ZeRO-3 /
    FSDP2) frees gathered parameters after each forward, so backward gathers them again.
    """

    layers: tuple[int, int]
    has_embedding: bool
    has_head: bool
    num_gpus: int
    tp: int
    cp: int
    dp: int
    sequence_parallel: bool = False
    recompute: str = "none"
    zero: int = 0
    mesh_order: str = "tp-cp-dp"
    weights_in: str = "hbm"
    optimizer_in: str = "hbm"
    activations_in: str = "hbm"
    gradients_in: str = "hbm"  # off HBM: gradients accumulate where the optimizer runs (ZeRO-Offload)
    kv_cache_in: str = "hbm"  # inference: where the KV cache lives
    kv_cache_in_share: float = 1.0  # share of the KV cache in kv_cache_in's tier; the rest stays in HBM
    cache_group_layers: int = 0  # layers per on-chip cache group (0: off; >= the stage's layers: one group)
    cache_tile_tokens: int = 0  # tokens per tile streamed through a cache group (0: no tiling)
    ep: int = 1  # expert-parallel degree (divides the experts)
    etp: int = 1  # tensor-parallel degree inside each expert
    dp_shard: int = 0  # sharding group size inside dp (0: dp, i.e. no replication)
    reshard_after_forward: bool = True  # ZeRO-3/FSDP2: free gathered parameters after forward
    cp_comm: str = "ring"  # context-parallel exchange: ring, all_gather or all_to_all (cost/context_parallel.py)
    # with recompute="full": recompute only the first N layers of the stage, the rest keep all
    # activations (Megatron-LM --recompute-method block --recompute-num-layers N); 0: every layer.
    # N >= the stage's layers recomputes them all, as Megatron does (cost/recompute.py).
    recompute_layers: int = 0
    fp8: bool = False  # this stage's GEMMs in FP8 (per-tensor scales) under a BF16 workload (cost/recompute.py)
    # modules whose forward runs again in backward, on top of ``recompute`` none or selective
    # (Megatron-Core --recompute-modules; cost/recompute_modules.py)
    recompute_modules: tuple[str, ...] = ()
    # activations of the stage's first N layers to host memory in forward, back in backward
    # (Megatron-Core cpu_offloading_num_layers; cost/offload.py layer_offload); 0: none
    activation_offload_layers: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(map(int, self.layers)))
        first, end = self.layers
        if not 0 <= first < end:  # (the message made only when it is raised: a search builds tens of thousands)
            require(False, "stage.layers", f"must be [first, last+1) with first < last+1, got {list(self.layers)}")
        key = _checked_key(self)
        try:  # one hash of the key (a set lookup)
            checked = key in _CHECKED
        except TypeError:  # a list where a tuple belongs (recompute_modules): checked in full, not kept
            key, checked = None, False
        if checked:  # the same stage elsewhere passed: only its layers are new
            self._check_activation_offload()
            return
        self._check_fields()
        if key is not None:
            if len(_CHECKED) >= _CHECKED_KEPT:
                _CHECKED.clear()
            _CHECKED.add(key)

    def _check_fields(self) -> None:
        for name in ("num_gpus", "tp", "cp", "dp"):
            require_positive(f"stage.{name}", getattr(self, name))
        require(self.tp * self.cp * self.dp == self.num_gpus, "stage.num_gpus",
                f"tp x cp x dp = {self.tp}x{self.cp}x{self.dp} = {self.tp * self.cp * self.dp} "
                f"must equal num_gpus {self.num_gpus}")
        require_choice("recompute", self.recompute, RECOMPUTE)
        require_choice("zero", self.zero, (0, 1, 2, 3))
        require_choice("mesh_order", self.mesh_order, MESH_ORDERS)
        for name in ("weights_in", "optimizer_in", "activations_in", "gradients_in", "kv_cache_in"):
            require_choice(name, getattr(self, name), PLACEMENTS)
        require(self.gradients_in in ("hbm", self.optimizer_in), "gradients_in",
                f"gradients can leave HBM only for where the optimizer runs: use hbm or optimizer_in={self.optimizer_in!r}")
        require(isinstance(self.kv_cache_in_share, (int, float)) and 0 < self.kv_cache_in_share <= 1,
                "kv_cache_in_share", f"must be in (0, 1], got {self.kv_cache_in_share!r}")
        for name in ("ep", "etp"):
            require_positive(f"stage.{name}", getattr(self, name))
        require(self.num_gpus % (self.ep * self.etp) == 0, "stage.ep",
                f"ep x etp = {self.ep}x{self.etp} must divide the stage's {self.num_gpus} GPUs")
        require(isinstance(self.dp_shard, int) and self.dp_shard >= 0 and (self.dp_shard == 0 or self.dp % self.dp_shard == 0),
                "stage.dp_shard", f"must be 0 (all of dp) or divide dp {self.dp}, got {self.dp_shard!r}")
        for name in ("cache_group_layers", "cache_tile_tokens"):
            value = getattr(self, name)
            require(isinstance(value, int) and not isinstance(value, bool), name, f"must be an integer, got {value!r}")
        require_choice("stage.cp_comm", self.cp_comm, ("ring", "all_gather", "all_to_all"))
        require(isinstance(self.recompute_layers, int) and not isinstance(self.recompute_layers, bool)
                and self.recompute_layers >= 0, "stage.recompute_layers",
                f"must be a whole number >= 0 (0: every layer), got {self.recompute_layers!r}")
        require(self.recompute_layers == 0 or self.recompute == "full", "stage.recompute_layers",
                f"counts layers of full recomputation; recompute={self.recompute!r} needs 0")
        self._check_recompute_modules()
        self._check_activation_offload()
        require(isinstance(self.fp8, bool), "stage.fp8", f"must be true or false, got {self.fp8!r}")
        require(self.cache_group_layers >= 0, "cache_group_layers", "must be >= 0 (0: no grouping)")
        require(self.cache_tile_tokens >= 0 and (self.cache_tile_tokens == 0) == (self.cache_group_layers == 0),
                "cache_tile_tokens", "must be > 0 exactly when cache_group_layers > 0 (a group streams tiles)")

    def _check_recompute_modules(self) -> None:
        modules = self.recompute_modules
        require(isinstance(modules, (tuple, list)) and all(isinstance(x, str) for x in modules),
                "stage.recompute_modules", f"must be a list of module names, got {modules!r}")
        object.__setattr__(self, "recompute_modules", tuple(modules))
        for name in modules:
            require_choice("stage.recompute_modules", name, RECOMPUTE_MODULES)
        require(len(set(modules)) == len(modules), "stage.recompute_modules", f"names a module twice: {list(modules)}")
        require(not modules or self.recompute in ("none", "selective"), "stage.recompute_modules",
                f"adds to recompute none or selective, not {self.recompute!r}")

    def _check_activation_offload(self) -> None:
        """Megatron-Core's rules for cpu_offloading (megatron/core/transformer/transformer_config.py
        __post_init__): 0 <= N < the layers (Transformer Engine's handler keeps one layer's set on the
        GPU), and no activation recomputation beside it."""
        n, name = self.activation_offload_layers, "stage.activation_offload_layers"
        if n == 0 and type(n) is int:  # none (every stage a search builds): each rule holds
            return
        require(isinstance(n, int) and not isinstance(n, bool) and 0 <= n and (n == 0 or n < self.num_layers), name,
                f"must be a whole number from 0 to the stage's layers - 1 = {self.num_layers - 1} "
                f"(Megatron-Core needs cpu_offloading_num_layers < num_layers), got {n!r}")
        require(n == 0 or self.activations_in == "hbm", name,
                f"offloads some layers' activations; activations_in={self.activations_in!r} already moves them all: "
                "use one of the two")
        require(n == 0 or (self.recompute == "none" and not self.recompute_modules), name,
                "Megatron-Core refuses CPU offloading with activation recomputation: use recompute none "
                "and no recompute modules")

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: the replicas of each expert shard."""
        return self.num_gpus // (self.ep * self.etp)

    @property
    def shard_degree(self) -> int:
        """GPUs that ZeRO/FSDP state is sharded over (dp unless HSDP narrows it)."""
        return self.dp_shard or self.dp


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A full parallel plan for ``gpus`` devices.

    ``micro_batch`` is sequences per micro-batch on one data-parallel replica (Megatron-LM's
    ``--micro-batch-size``), so the global batch is ``micro_batch * num_microbatches * dp``;
    every stage has the same ``dp``. ``vpp`` > 1 (interleaved schedule) gives each pipeline
    rank ``vpp`` model chunks.
    """

    gpus: int
    micro_batch: int
    num_microbatches: int
    stages: tuple[StagePlan, ...]
    schedule: str = "1f1b"
    vpp: int = 1
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    overlap_tp_comm: bool = False  # Megatron --tp-comm-overlap (needs sequence parallelism)
    # with overlap_tp_comm, the backward's TP collectives overlap too (Megatron's userbuffers);
    # False: the forward pass's only (PyTorch async TP, torchtitan: cost/stage.py _overlapped_tp_s)
    overlap_tp_backward: bool = True
    overlap_p2p_comm: bool = True
    grad_bucket_bytes: float = 0.0  # 0: the seed's optimal bucket sqrt(s * w * o)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        for name in ("gpus", "micro_batch", "num_microbatches", "vpp"):
            require_positive(name, getattr(self, name))
        require_choice("schedule", self.schedule, SCHEDULES)
        require(len(self.stages) > 0, "stages", "a plan needs at least one stage")
        bad = next((s for s in self.stages if not isinstance(s, StagePlan)), None)
        require(bad is None, "stages", f"must be StagePlans (Plan.from_dict reads dicts), got {type(bad).__name__}")
        require(self.grad_bucket_bytes >= 0, "grad_bucket_bytes", "must be >= 0")
        used = sum(s.num_gpus for s in self.stages)
        require(used == self.gpus, "gpus", f"stages use {used} GPUs but the plan has {self.gpus}")
        require(len({s.dp for s in self.stages}) == 1, "dp",
                f"every stage needs the same dp, got {[s.dp for s in self.stages]}")
        require(self.stages[0].has_embedding or not any(s.has_embedding for s in self.stages[1:]),
                "stages", "only the first stage may hold the embedding")
        require(not any(s.has_head for s in self.stages[:-1]), "stages", "only the last stage may hold the head")
        for before, after in zip(self.stages, self.stages[1:]):
            require(before.layers[1] == after.layers[0], "stages",
                    f"stage layers must be contiguous: {list(before.layers)} then {list(after.layers)}")
        require(self.pp == 1 or not any(s.activation_offload_layers for s in self.stages), "activation_offload_layers",
                "Megatron-Core's CPU offloading needs one pipeline stage (transformer_config.py refuses it with "
                "pipeline_model_parallel_size > 1)")
        require((self.vpp > 1) == (self.schedule == "interleaved"), "vpp",
                "vpp > 1 goes with schedule 'interleaved', and 'interleaved' needs vpp > 1")

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def dp(self) -> int:
        return self.stages[0].dp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.num_microbatches * self.dp

    @property
    def num_layers(self) -> int:
        return self.stages[-1].layers[1] - self.stages[0].layers[0]

    def check_against(self, num_layers: int, global_batch: int, has_embeddings: bool = True) -> None:
        """The plan covers layers ``[0, num_layers)`` once and the workload's global batch."""
        require(self.stages[0].layers[0] == 0 and self.stages[-1].layers[1] == num_layers, "stages",
                f"stages must cover layers [0, {num_layers}) exactly, they cover "
                f"[{self.stages[0].layers[0]}, {self.stages[-1].layers[1]})")
        if has_embeddings:
            require(self.stages[0].has_embedding and self.stages[-1].has_head, "stages",
                    "the first stage must hold the embedding and the last the head")
        require(self.global_batch == global_batch, "micro_batch",
                f"micro_batch {self.micro_batch} x num_microbatches {self.num_microbatches} x dp "
                f"{self.dp} = {self.global_batch} must equal the global batch {global_batch}")
        if self.schedule == "interleaved":  # an embedding or head may take a layer's slot (Megatron-Core's
            # account_for_embedding/loss_in_pipeline_split)
            require(all(s.num_layers % self.vpp == 0 or (s.num_layers + s.has_embedding + s.has_head) % self.vpp == 0
                        for s in self.stages), "vpp",
                    f"every stage's layer count (its embedding and head counted as a layer each, or not) "
                    f"must divide into vpp={self.vpp} chunks")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data = {"pp": self.pp, "dp": self.dp, "global_batch": self.global_batch, **data}
        for stage in data["stages"]:
            stage["layers"] = list(stage["layers"])
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
            raise AutotuneError("plan", "a plan needs a 'stages' list")
        from autotune.plan.checks import check_fields

        check_fields(data, cls, "plan")  # each field of the type it declares: one line naming a wrong one
        stage_keys = {f.name for f in fields(StagePlan)}
        plan_keys = {f.name for f in fields(cls)} - {"stages"}
        try:
            stages = tuple(StagePlan(**{k: v for k, v in s.items() if k in stage_keys}) for s in data["stages"])
            return cls(stages=stages, **{k: v for k, v in data.items() if k in plan_keys})
        except (KeyError, TypeError, AttributeError) as err:
            raise AutotuneError("plan", f"malformed plan: {err}") from None

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as err:
            raise AutotuneError("plan", f"not valid JSON: {err}") from None

    def with_changes(self, **changes: Any) -> "Plan":
        return replace(self, **changes)
