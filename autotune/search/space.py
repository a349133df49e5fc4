"""Search spaces: data files in ``search_spaces/`` (TOML), read into a frozen spec."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, closest, require, require_choice
from autotune.spec.json_file import check_tree, read_text_file
from autotune.plan.plan import MESH_ORDERS, RECOMPUTE
from autotune.spec.limits import check_limit

__all__ = ["SearchSpace", "load_space", "space_names", "OFFLOADS", "SHARDINGS", "SPACE_LIMITS"]

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

# Trials of a stage study, and the largest stage space enumerated: each costs a scoring (grid) or
# a TPE suggestion (several ms, growing with the trials), for each stage study of a search (tens
# to thousands); the shipped spaces use at most 300 and 96.
SPACE_LIMITS = {"n_trials": (10_000, "a sampled study of more would run for hours"),
                "grid_max": (1_000_000, "a grid of more choices would not fit a study in memory")}

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
        self._check_types()
        for name, bound in (("micro_batch", "global_batch"), ("vpp", "num_layers"), ("tp", "gpus"), ("cp", "gpus"),
                            ("ep", "gpus"), ("etp", "gpus")):
            values = getattr(self, name)
            require(len(values) > 0 and all(isinstance(v, int) and v > 0 for v in values), f"space.{name}",
                    f"needs positive integers, got {list(values)}")
            check_limit(f"space.{name}", max(values), bound)
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
        self._check_counts()
        for value in self.kv_cache:
            tier, _, share = value.partition(":")
            require(value == "hbm" or (tier in ("host", "cxl") and share.replace(".", "", 1).isdigit()
                                       and 0 < float(share) <= 1),
                    "space.kv_cache", f"{value!r}; use hbm, or host:SHARE / cxl:SHARE with 0 < SHARE <= 1")
        require_choice("space.sampler", self.sampler, ("tpe", "random"))

    def _check_types(self) -> None:
        """Each bool field true or false, each int field an integer ("no" is not false)."""
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if spec.type == "bool":
                require(isinstance(value, bool), f"space.{spec.name}", f"must be true or false, got {value!r:.60}")
            elif spec.type == "int":
                require(isinstance(value, int) and not isinstance(value, bool), f"space.{spec.name}",
                        f"must be a whole number, got {value!r:.60}")

    def _check_counts(self) -> None:
        """Stage counts, trials and layer counts: at least the least that searches anything, at
        most SPACE_LIMITS (a search's time grows with each)."""
        require(self.max_stages >= 1, "space.max_stages", f"must be at least 1 (one stage: no pipeline), got {self.max_stages}")
        check_limit("space.max_stages", self.max_stages, "num_layers")
        require(self.max_units_for_uneven_submeshes >= 0, "space.max_units_for_uneven_submeshes",
                f"must be >= 0 (0: every stage on one submesh size), got {self.max_units_for_uneven_submeshes}")
        check_limit("space.max_units_for_uneven_submeshes", self.max_units_for_uneven_submeshes, "gpus")
        for name, least in (("n_trials", 1), ("grid_max", 0)):
            value, (most, why) = getattr(self, name), SPACE_LIMITS[name]
            require(least <= value <= most, f"space.{name}", f"must be between {least} and {most:,} ({why}), got {value:,}")
        counts = self.recompute_layers
        require(counts in ((), ("all",)) or all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in counts),
                "space.recompute_layers", f'"all" or positive layer counts, got {list(counts)!r}')
        if counts and counts != ("all",):
            check_limit("space.recompute_layers", max(counts), "num_layers")
        require(not counts or "full" in self.recompute, "space.recompute_layers",
                "counts layers of full recomputation: add \"full\" to recompute")

    @property
    def grid_limit(self) -> int:
        """Stage spaces up to this size are enumerated by Optuna's grid sampler."""
        return max(self.grid_max, self.n_trials)

    @property
    def raw_dict(self) -> dict[str, Any]:
        return dict(self.raw)


def _folder() -> Path:
    """The shipped spaces: plain files beside search_spaces/__init__.py (pyproject.toml
    package-data), read by path as autotune.data's files are."""
    import search_spaces

    return Path(search_spaces.__file__).parent


def space_names() -> list[str]:
    return sorted(e.name[:-5] for e in _folder().iterdir() if e.name.endswith(".toml"))


# The TOML tables of a parallel space and the SearchSpace fields each holds (same names); the
# first are required. A key not listed is refused (a typo would otherwise change nothing).
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "global": (("micro_batch", "vpp"), ("overlap_tp_comm", "recompute_early_stop")),
    "stage": (("tp", "cp", "sequence_parallel", "recompute", "zero", "mesh_order"),
              ("offload", "offload_fallback", "sharding", "ep", "etp", "fp8", "recompute_layers", "cp_comm")),
    "pipeline": (("max_stages", "max_units_for_uneven_submeshes"), ("uniform_stages",)),
    "optuna": (("n_trials",), ("sampler", "grid_max")),
    "inference": ((), ("kv_cache", "cache_grouping")),
}
_TOP_KEYS = ("name", "description", "kind", *_TABLES)


def _fields(data: dict[str, Any], where: str) -> dict[str, Any]:
    """The SearchSpace fields a parallel space's tables give, each of the type the dataclass
    declares (a list where a tuple is, ``true``/``false`` where a bool is): ``uniform_stages =
    "no"`` or ``max_stages = "4"`` is refused naming the key, never coerced."""
    from autotune.plan.checks import check_value

    _known_keys(data, _TOP_KEYS, where)
    hints = typing.get_type_hints(SearchSpace)
    out: dict[str, Any] = {}
    for table, (required, optional) in _TABLES.items():
        section = data.get(table, {})
        require(isinstance(section, dict), f"{where}.{table}", f"must be a table [{table}], got {section!r:.60}")
        _known_keys(section, required + optional, f"{where}.{table}")
        for key in required:
            require(key in section, f"{where}.{table}.{key}", "is missing; see search_spaces/default.toml")
        for key, value in section.items():
            if key != "recompute_layers":  # "all" or a list of counts: __post_init__ checks it
                check_value(value, hints[key], f"{where}.{table}.{key}")
            out[key] = tuple(value) if isinstance(value, list) else value
    for key in ("name", "description"):
        require(isinstance(data.get(key, ""), str), f"{where}.{key}", f"must be a string, got {data.get(key)!r:.60}")
    return out


def _known_keys(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            near = closest(key, known)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise AutotuneError(f"{where}.{key}", f"is not a key here{hint}; known: {', '.join(known)}")


def _from_table(data: dict[str, Any], fallback_name: str, where: str = "space") -> SearchSpace:
    name = data.get("name", fallback_name)
    kind = data.get("kind", "parallel")
    require(isinstance(kind, str), f"{where}.kind", f"must be a string, got {kind!r:.60}")
    if kind != "parallel":
        return SearchSpace(name=name, description=data.get("description", ""), micro_batch=(), vpp=(),
                           overlap_tp_comm=False, tp=(), cp=(), sequence_parallel=(), recompute=(), zero=(),
                           mesh_order=(), offload=(), offload_fallback=(), kv_cache=(), cache_grouping=False,
                           max_stages=0, max_units_for_uneven_submeshes=0, uniform_stages=False, n_trials=1,
                           sampler="tpe", kind=kind, raw=tuple(data.items()))
    fields = _fields(data, where)
    defaults = {"overlap_tp_comm": False, "recompute_early_stop": False, "offload": ("none",), "offload_fallback": (),
                "kv_cache": ("hbm",), "cache_grouping": False, "uniform_stages": False, "sampler": "tpe", "grid_max": 0}
    return SearchSpace(name=name, description=data.get("description", ""),
                       **{**defaults, **fields, "recompute_layers": _counts(fields.get("recompute_layers", ()))},
                       raw=tuple(data.items()))


def _counts(value: Any) -> tuple:
    """recompute_layers: "all" or a list of counts."""
    return ("all",) if value == "all" else tuple(value) if isinstance(value, (list, tuple)) else (value,)


def load_space(name_or_path: str | Path = "default") -> SearchSpace:
    """A shipped space by name, or a TOML file by path (a regular file, read without blocking,
    at most MAX_BYTES, every number finite)."""
    key = str(name_or_path)
    if key.endswith(".toml") or Path(key).is_file():
        return _from_table(_read_toml(read_text_file(key, "space"), key), Path(key).stem)
    return _shipped_space(key)


@lru_cache(maxsize=None)  # shipped with the package: read and checked once a process
def _shipped_space(key: str) -> SearchSpace:
    names = space_names()
    if key not in names:
        near = closest(key, names)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise AutotuneError("space", f"unknown space {key!r}; {hint}spaces: {', '.join(names)}, or a path to a .toml file")
    return _from_table(_read_toml(_folder().joinpath(f"{key}.toml").read_text(), key), key)


def _read_toml(text: str, source: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise AutotuneError("space", f"{source!r} is not valid TOML: {err}") from None
    except RecursionError:
        raise AutotuneError("space", f"{source!r} is nested too deeply") from None
    check_tree(data, "space", source)  # TOML spells inf and nan
    return data
