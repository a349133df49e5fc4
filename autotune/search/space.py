"""Search spaces: data files in ``search_spaces/`` (TOML), read into a frozen spec."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, closest, require, require_choice
from autotune.plan.plan import MESH_ORDERS, RECOMPUTE

__all__ = ["SearchSpace", "load_space", "space_names", "OFFLOADS", "SHARDINGS"]

# Training offload options: StagePlan placements (ZeRO-Offload keeps optimizer states and
# gradients in host memory, Ren et al. 2021; ZeRO-Infinity also the weights, Rajbhandari et al. 2021).
OFFLOADS = {
    "none": {},
    "optimizer": {"optimizer_in": "host", "gradients_in": "host"},
    "optimizer+weights": {"optimizer_in": "host", "gradients_in": "host", "weights_in": "host"},
    # every saved activation to host memory and back for backward (cost/offload.py; torch's
    # save_on_cpu hooks, DeepSpeed cpu_checkpointing); the cost model has no partial share
    "activations": {"activations_in": "host"},
}

# How ZeRO/FSDP state is sharded (cost/sharding.py): "full" over all of dp, weights resharded
# after forward (FSDP's default); "keep": weights kept gathered for the step, gradients reduced
# once (FSDP2 reshard_after_forward=False); "node": HSDP, sharded over the stage's data-parallel
# ranks inside one node and replicated across nodes.
SHARDINGS = ("full", "keep", "node")


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """Candidate values of every knob; see search_spaces/default.toml for their meaning."""

    name: str
    description: str
    micro_batch: tuple[int, ...]
    vpp: tuple[int, ...]
    overlap_tp_comm: bool
    tp: tuple[int, ...]
    cp: tuple[int, ...]
    sequence_parallel: tuple[str, ...]
    recompute: tuple[str, ...]
    zero: tuple[int, ...]
    mesh_order: tuple[str, ...]
    offload: tuple[str, ...]
    offload_fallback: tuple[str, ...]
    kv_cache: tuple[str, ...]
    cache_grouping: bool
    max_stages: int
    max_units_for_uneven_submeshes: int
    uniform_stages: bool
    n_trials: int
    sampler: str
    grid_max: int = 0  # stage spaces of at most this many choices are enumerated (0: n_trials)
    sharding: tuple[str, ...] = ("full",)  # ZeRO/FSDP variants (search/choices.py SHARDINGS)
    ep: tuple[int, ...] = (1,)  # expert-parallel degrees (mixture-of-experts models only)
    etp: tuple[int, ...] = (1,)  # expert tensor-parallel degrees (at most the stage's tp)
    fp8: tuple[bool, ...] = (False,)  # FP8 GEMMs per stage, where the device and a bf16 workload allow
    # partial full recomputation per stage: ("all",) every count 1 .. layers - 1, or the counts to try
    recompute_layers: tuple[int | str, ...] = ()
    # the runtime's full recomputation skips each block's trailing FFN down projection (PyTorch's
    # non-reentrant checkpoint: TrainingWorkload.recompute_early_stop); false: Megatron-Core's
    recompute_early_stop: bool = False
    # context-parallel exchanges to choose among (StagePlan.cp_comm); () takes the runtime's own
    cp_comm: tuple[str, ...] = ()
    kind: str = "parallel"  # "parallel" plans, or a standalone problem such as "cxl-lora"
    raw: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.kind != "parallel":
            return
        for name in ("micro_batch", "vpp", "tp", "cp", "ep", "etp"):
            values = getattr(self, name)
            require(len(values) > 0 and all(isinstance(v, int) and v > 0 for v in values), f"space.{name}",
                    f"needs positive integers, got {list(values)}")
        for value in self.recompute:
            require_choice("space.recompute", value, RECOMPUTE)
        for value in self.zero:
            require_choice("space.zero", value, (0, 1, 2, 3))
        for value in self.mesh_order:
            require_choice("space.mesh_order", value, MESH_ORDERS)
        for value in self.sequence_parallel:
            require_choice("space.sequence_parallel", value, ("auto", "on", "off"))
        for value in self.offload + self.offload_fallback:
            require_choice("space.offload", value, tuple(OFFLOADS))
        for value in self.sharding:
            require_choice("space.sharding", value, SHARDINGS)
        for value in self.cp_comm:
            require_choice("space.cp_comm", value, ("ring", "all_gather", "all_to_all"))
        for value in self.fp8:
            require(isinstance(value, bool), "space.fp8", f"needs true/false values, got {list(self.fp8)}")
        counts = self.recompute_layers
        require(counts in ((), ("all",)) or all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in counts),
                "space.recompute_layers", f'"all" or positive layer counts, got {list(counts)!r}')
        require(not counts or "full" in self.recompute, "space.recompute_layers",
                "counts layers of full recomputation: add \"full\" to recompute")
        for value in self.kv_cache:
            tier, _, share = value.partition(":")
            require(value == "hbm" or (tier in ("host", "cxl") and share.replace(".", "", 1).isdigit()
                                       and 0 < float(share) <= 1),
                    "space.kv_cache", f"{value!r}; use hbm, or host:SHARE / cxl:SHARE with 0 < SHARE <= 1")
        require(self.n_trials > 0, "space.n_trials", "must be positive")
        require(isinstance(self.grid_max, int) and self.grid_max >= 0, "space.grid_max", "must be a whole number >= 0")
        require_choice("space.sampler", self.sampler, ("tpe", "random"))

    @property
    def grid_limit(self) -> int:
        """Stage spaces up to this size are enumerated by Optuna's grid sampler."""
        return max(self.grid_max, self.n_trials)

    @property
    def raw_dict(self) -> dict[str, Any]:
        return dict(self.raw)


def _folder() -> Any:
    return resources.files("search_spaces")


def space_names() -> list[str]:
    return sorted(e.name[:-5] for e in _folder().iterdir() if e.name.endswith(".toml"))


def _from_table(data: dict[str, Any], fallback_name: str) -> SearchSpace:
    name = data.get("name", fallback_name)
    kind = data.get("kind", "parallel")
    if kind != "parallel":
        return SearchSpace(name=name, description=data.get("description", ""), micro_batch=(), vpp=(),
                           overlap_tp_comm=False, tp=(), cp=(), sequence_parallel=(), recompute=(), zero=(),
                           mesh_order=(), offload=(), offload_fallback=(), kv_cache=(), cache_grouping=False,
                           max_stages=0, max_units_for_uneven_submeshes=0, uniform_stages=False, n_trials=1,
                           sampler="tpe", kind=kind, raw=tuple(data.items()))
    try:
        glob, stage, pipe, opt = data["global"], data["stage"], data["pipeline"], data["optuna"]
        infer = data.get("inference", {})
        return SearchSpace(
            name=name, description=data.get("description", ""),
            micro_batch=tuple(glob["micro_batch"]), vpp=tuple(glob["vpp"]),
            overlap_tp_comm=bool(glob.get("overlap_tp_comm", False)),
            tp=tuple(stage["tp"]), cp=tuple(stage["cp"]), sequence_parallel=tuple(stage["sequence_parallel"]),
            recompute=tuple(stage["recompute"]), zero=tuple(stage["zero"]), mesh_order=tuple(stage["mesh_order"]),
            offload=tuple(stage.get("offload", ["none"])), offload_fallback=tuple(stage.get("offload_fallback", [])),
            kv_cache=tuple(infer.get("kv_cache", ["hbm"])), cache_grouping=bool(infer.get("cache_grouping", False)),
            max_stages=int(pipe["max_stages"]), max_units_for_uneven_submeshes=int(pipe["max_units_for_uneven_submeshes"]),
            uniform_stages=bool(pipe.get("uniform_stages", False)),
            n_trials=int(opt["n_trials"]), sampler=str(opt.get("sampler", "tpe")),
            grid_max=int(opt.get("grid_max", 0)), sharding=tuple(stage.get("sharding", ["full"])),
            ep=tuple(stage.get("ep", [1])), etp=tuple(stage.get("etp", [1])),
            fp8=tuple(stage.get("fp8", [False])), recompute_layers=_counts(stage.get("recompute_layers", [])),
            recompute_early_stop=bool(glob.get("recompute_early_stop", False)),
            cp_comm=tuple(stage.get("cp_comm", [])),
            raw=tuple(data.items()))
    except (KeyError, TypeError) as err:
        raise AutotuneError("space", f"space {name!r} is missing or mistypes {err}") from None


def _counts(value: Any) -> tuple:
    """recompute_layers: "all" or a list of counts."""
    return ("all",) if value == "all" else tuple(value) if isinstance(value, list) else (value,)


def load_space(name_or_path: str | Path = "default") -> SearchSpace:
    """A shipped space by name, or a TOML file by path."""
    key = str(name_or_path)
    if key.endswith(".toml") or Path(key).is_file():
        try:
            return _from_table(tomllib.loads(Path(key).read_text()), Path(key).stem)
        except OSError as err:
            raise AutotuneError("space", f"cannot read {key!r}: {err.strerror}") from None
        except tomllib.TOMLDecodeError as err:
            raise AutotuneError("space", f"{key!r} is not valid TOML: {err}") from None
    names = space_names()
    if key not in names:
        near = closest(key, names)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise AutotuneError("space", f"unknown space {key!r}; {hint}spaces: {', '.join(names)}, or a path to a .toml file")
    return _from_table(tomllib.loads(_folder().joinpath(f"{key}.toml").read_text()), key)
