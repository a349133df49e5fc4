"""One published serving row, read as a deployment, a load and a metric (serving_runs.csv's schema).

Each row is priced by its engine's runtime preset and its own cells, nothing else: the model, GPU,
GPU count, parallel degrees, precision, engine and version, input/output lengths (or the dataset its
notes name, autotune/data/serving_datasets.toml), how load was applied, the metric and its unit, and
the engine flags its notes quote, and what its system was published with where the row names a
benchmark system rather than its settings (autotune/data/serving_systems.toml). Where a cell the
pricing needs is empty and neither has it, the row is not priced and says why; where a default or a
published setting fills it, the row lists that under ``assumed``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources

from autotune.calibrate.serving_systems import PublishedSystem, published_system
from autotune.cost.serving_eval import ServingDeployment
from autotune.cost.serving_lengths import request_lengths
from autotune.cost.serving_load import METRICS, Load
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import Runtime, load_runtime, runtime_names

__all__ = ["ServingCase", "RowProblem", "case_from_row", "engine_runtime", "COLUMNS", "RATE_REQUESTS",
           "MAX_RATE_REQUESTS"]

COLUMNS = ("id", "model", "gpu", "gpus", "tp", "pp", "ep", "dp", "precision", "engine", "engine_version", "isl", "osl",
           "concurrency_or_batch", "metric", "value", "unit", "notes")
# Requests simulated per replica for a rate whose run length the row does not state.
RATE_REQUESTS = 2000
# A rate row stating its run's length (MLPerf LoadGen's "min_duration (ms)") issues rate x duration
# requests; near capacity the queue takes that long to settle, so 2,000 requests are a transient
# (Llama 2 70B on one H200 at 12.6 QPS: mean TPOT 80 ms over 2,000 requests, 126-128 ms over 10,000,
# 20,000 and the run's 30,300, each the mean of 4 draws). Past this many per replica the averaged
# metrics agree within 2%, so longer runs are simulated at this length (the simulation's cost).
MAX_RATE_REQUESTS = 10000
# LoadGen's Offline query holds max(min_query_count, 1.1 x target_qps x min_duration) samples
# (v4.1 NVIDIA, 8 H100s: 200,640 for Llama 2 at 76 QPS, 971,520 for Mixtral at 368, over 2,400 s;
# closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/{llama2-70b-99,mixtral-8x7b}/Offline/performance/
# run_1/mlperf_log_summary.txt @a2f5d66d17e8), not the sample set's 24,576 or 15,000: with lengths
# spread, a run as short as the set ends in a long tail of the longest requests, which the real
# run's steady state dilutes. Under a harness with a run length (rate_run_s) an Offline row runs
# the steady state's MAX_RATE_REQUESTS per replica, as a rate row does (an instance above 4.2
# samples/s issues more in 2,400 s).
OFFLINE_RUN_NOTE = f"{MAX_RATE_REQUESTS} requests per replica (the harness's Offline query lasts its min_duration)"
# Model names in rows (lower case, without -instruct/-hf/-chat) -> presets (autotune/data/models.toml)
_MODELS = {"llama-3.1-8b": "llama3-8b", "llama-3-8b": "llama3-8b", "llama-3.1-70b": "llama3-70b",
           "llama-3.3-70b": "llama3-70b", "llama-3-70b": "llama3-70b", "llama-3.1-405b": "llama3-405b",
           "llama-2-70b": "llama2-70b", "mixtral-8x7b": "mixtral-8x7b", "mixtral-8x22b": "mixtral-8x22b",
           "deepseek-v3": "deepseek-v3", "deepseek-r1": "deepseek-v3",  # R1: V3's architecture (its config.json)
           "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b",
           "gpt-oss-120b": "gpt-oss-120b", "gpt-oss-20b": "gpt-oss-20b"}
_PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "nvfp4", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


class RowProblem(Exception):
    """Why a row cannot be priced (a one-line reason)."""


@dataclass(frozen=True, kw_only=True)
class ServingCase:
    """A row as something to simulate: ``deployment`` under ``load``, read as ``metric`` over ``scope``."""

    row_id: str
    engine: str
    gpu: str
    deployment: ServingDeployment
    load: Load
    metric: str
    scope: str
    unit: str
    unit_to_si: float  # measured x unit_to_si = seconds (latencies) or tokens/s (throughputs)
    measured: float
    assumed: tuple[str, ...] = field(default=())


@lru_cache(maxsize=1)
def _datasets() -> dict:
    return tomllib.loads(resources.files("autotune.data").joinpath("serving_datasets.toml").read_text())


def _version(text: str) -> tuple[int, ...]:
    found = re.search(r"(\d+(?:\.\d+)*)", text)
    if not found:
        raise RowProblem(f"no version number in {text!r}")
    parts = [int(p) for p in found.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:  # "1.0" names the release "1.0.0" does
        parts.pop()
    return tuple(parts)


def engine_runtime(engine: str, version: str) -> Runtime:
    """The engine's preset for ``version``: the newest preset of that engine not newer than it."""
    presets = [load_runtime(n) for n in runtime_names()]
    ours = [r for r in presets if r.serving is not None and r.serving.engine == engine]
    if not ours:
        raise RowProblem(f"no runtime preset for engine {engine!r}")
    wanted = _version(version) if version.strip() else (10**6,)
    ranked = sorted(ours, key=lambda r: _version(r.serving.version))
    older = [r for r in ranked if _version(r.serving.version) <= wanted]
    return older[-1] if older else ranked[0]


def _model(row: dict) -> str:
    for text in (row["model"], row.get("hf_model_id", "").split("/")[-1]):
        name = text.split(" (")[0].strip().lower()
        for suffix in ("-instruct", "-hf", "-chat", "-fp8", "-fp4"):
            name = name.replace(suffix, "")
        name = name.removeprefix("meta-")
        if name in _MODELS:
            return _MODELS[name]
    raise RowProblem(f"no model preset for {row['model']!r}")


def _cluster(gpu: str) -> str:
    g = gpu.upper()
    for key, name in (("GB200", "gb200-nvl72"), ("B200", "dgx-b200"), ("H200", "dgx-h200"), ("H100", "dgx-h100")):
        if key in g:
            return name
    if "A100" in g:
        return "dgx-a100-40gb" if "40" in g else "dgx-a100-80gb"
    raise RowProblem(f"no cluster preset for GPU {gpu!r}")


def _int(row: dict, column: str) -> int | None:
    text = row.get(column, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise RowProblem(f"{column} {text!r} is not an integer") from None


def _degrees(row: dict, system: PublishedSystem | None) -> tuple[int, int, int, tuple[str, ...]]:
    """(tp, replicas, ep, assumptions) from the gpus / tp / pp / ep / dp cells (tp: else the system's)."""
    gpus, tp, pp, ep, dp = (_int(row, c) for c in ("gpus", "tp", "pp", "ep", "dp"))
    if gpus is None:
        raise RowProblem("the row states no GPU count")
    assumed = ()
    if tp is None and system is not None and system.get("tp"):
        tp, assumed = system.get("tp"), (system.note("tp"),)
    if tp is None:
        if gpus != 1:
            raise RowProblem("the row states no tensor-parallel degree")
        tp, assumed = 1, ("tp 1 (one GPU)",)
    if (pp or 1) > 1:
        raise RowProblem("pipeline-parallel serving is not modelled (pp > 1)")
    replicas = dp if dp else gpus // tp
    if replicas * tp != gpus:
        raise RowProblem(f"tp {tp} x dp {replicas} does not make the {gpus} GPUs")
    return tp, replicas, ep or 1, assumed


def _lengths(row: dict) -> tuple[int, int, tuple[str, ...], dict]:
    """(isl, osl, assumptions, the dataset entry the notes name or {})."""
    isl, osl = _int(row, "isl"), _int(row, "osl")
    if isl and osl:
        return isl, osl, (), {}
    notes = f"{row.get('notes', '')} {row.get('model', '')}".lower()  # the notes or the benchmark name the data
    for name, data in _datasets().items():
        if any(m in notes for m in data["match"]):
            if "mean_input_tokens" not in data:
                raise RowProblem(f"the row's lengths are not stated and {name}'s mean input length is not published "
                                 "(autotune/data/serving_datasets.toml)")
            i, o = data["mean_input_tokens"]["value"], data["mean_output_tokens"]["value"]
            return isl or round(i), osl or round(o), (f"{name} means: {i:g} input / {o:g} output tokens",), data
    raise RowProblem("input/output lengths are not stated and the notes name no dataset of serving_datasets.toml")


def _number(pattern: str, text: str) -> float | None:
    found = re.search(pattern, text, flags=re.IGNORECASE)
    return float(found.group(1).replace(",", "")) if found else None


def _load(row: dict, isl: int, osl: int, replicas: int, dataset: dict, run_s: float) -> tuple[Load, tuple[str, ...]]:
    """The load one replica sees, from concurrency_or_batch and the notes (a maximum-throughput row
    without a count: the benchmark's own minimum, the dataset's ``offline_samples``, and under a
    harness with a run length ``run_s``, MAX_RATE_REQUESTS; a rate row: the notes' LoadGen
    min_duration, else the harness's ``run_s``, else RATE_REQUESTS)."""
    text = f"{row['concurrency_or_batch']}; {row.get('notes', '')}"
    count = (_number(r"num_requests=([\d,]+)", text) or _number(r"([\d,]+) prompts", text)
             or _number(r"([\d,]+) requests", text) or _number(r"([\d,]+)-sample", text))
    rate = (_number(r"QPS=([\d.]+)", text) or _number(r"request rate ([\d.]+)", text)
            or _number(r"target_qps=([\d.]+)", text))
    concurrency = _number(r"concurrency[ =:]+(\d+)", text)
    assumed = ()
    duration_ms = _number(r"min_duration \(ms\)[: ]+([\d,]+)", text) or run_s * 1000.0
    if rate and duration_ms:  # LoadGen issues rate x duration queries, drawn from the N-sample set
        count = round(rate * duration_ms / 1000.0)
    if rate:
        n = int(count / replicas) if count else RATE_REQUESTS
        assumed = () if count else (f"{RATE_REQUESTS} requests per replica (run length not stated)",)
        if n > MAX_RATE_REQUESTS:
            assumed = (f"{MAX_RATE_REQUESTS} of the run's {n} requests per replica simulated (the steady state)",)
            n = MAX_RATE_REQUESTS
        return Load(kind="rate", num_requests=n, input_len=isl, output_len=osl, rate_per_s=rate / replicas), assumed
    if concurrency:
        return Load(kind="concurrency", num_requests=int((count or 10 * concurrency) / replicas), input_len=isl,
                    output_len=osl, concurrency=int(concurrency / replicas)), assumed
    if re.search(r"infinite|rate inf|max load|offline|all samples", text, flags=re.IGNORECASE):
        if not count and "offline_samples" in dataset:
            count = dataset["offline_samples"]["value"]
            assumed = (f"{count} requests ({dataset['offline_samples']['source']})",)
        if not count:
            raise RowProblem("a maximum-throughput row must state its number of requests")
        n = max(1, int(count / replicas))
        if run_s:  # the harness's query lasts run_s: far more requests than the sample set
            n, assumed = MAX_RATE_REQUESTS, (OFFLINE_RUN_NOTE,)
        return Load(kind="max_throughput", num_requests=n, input_len=isl, output_len=osl), assumed
    raise RowProblem(f"cannot read how load was applied from {row['concurrency_or_batch']!r}")


def _spread(load: Load, row: dict, dataset: dict) -> tuple[Load, tuple[str, ...]]:
    """Each request's lengths drawn from the dataset's distribution, where it has one and the row
    states neither length (a stated one fixes the benchmark's lengths)."""
    if "lengths" not in dataset or _int(row, "isl") or _int(row, "osl"):
        return load, ()
    lengths = request_lengths(dataset["lengths"])
    return replace(load, lengths=lengths), (f"lengths drawn per request ({lengths.name}, serving_lengths.toml)",)


def _metric(row: dict) -> tuple[str, str, float]:
    """(metric, scope, unit -> SI factor)."""
    metric, unit = row["metric"].strip(), row["unit"].strip()
    if metric not in METRICS:
        raise RowProblem(f"metric {metric!r} is not one autotune predicts ({', '.join(METRICS)})")
    if METRICS[metric][0] != "total":
        if unit not in _TIME_UNITS:
            raise RowProblem(f"latency unit {unit!r} is not one of {', '.join(_TIME_UNITS)}")
        return metric, "replica", _TIME_UNITS[unit]
    u = unit.lower()
    scope = ("gpu" if re.search(r"per gpu|/gpu", u) else "replica" if "tp group" in u
             else "system" if re.search(r"system|server|node|gpus?\)", u) else None)
    if scope is None:
        raise RowProblem(f"cannot tell whose throughput unit {unit!r} counts")
    return metric, scope, 1.0


def _engine(row: dict) -> tuple[Runtime, tuple[str, ...]]:
    """The engine's preset, with the engine flags the row's notes quote."""
    runtime = engine_runtime(row["engine"].strip(), row.get("engine_version", ""))
    engine, notes, changes = runtime.serving, row.get("notes", ""), {}
    steps = _number(r"--num-scheduler-steps (\d+)", notes)
    if steps:
        changes["scheduler_steps"] = int(steps)
    context = _number(r"--max[-_]model[-_]len[ =](\d+)", notes)
    if context:
        changes["max_model_len"] = int(context)
    fraction = _number(r"mem[-_]frac(?:tion[-_]static)?[ =]([\d.]+)", notes) or _number(
        r"kv_cache_free_gpu_mem_fraction[ =]([\d.]+)", notes) or _number(r"gpu[-_]memory[-_]utilization[ =]([\d.]+)", notes)
    if fraction:
        changes.update(memory_fraction=fraction, memory_fraction_by_tp=())
    if not changes:
        return runtime, ()
    return (runtime.with_changes(serving=engine.with_changes(**changes)),
            tuple(f"{k} {v} (the row's notes)" for k, v in changes.items() if k != "memory_fraction_by_tp"))


def _with_system(runtime: Runtime, system: PublishedSystem | None) -> tuple[Runtime, tuple[str, ...]]:
    """The engine with the batch and token limits the row's system was published with."""
    limits = {k: system.get(k) for k in ("max_num_seqs", "max_num_batched_tokens")} if system else {}
    limits = {k: v for k, v in limits.items() if v}
    if not limits:
        return runtime, ()
    return (runtime.with_changes(serving=runtime.serving.with_changes(**limits)),
            tuple(system.note(k) for k in limits))


def _precision(row: dict, runtime: Runtime, system: PublishedSystem | None) -> tuple[str, tuple[str, ...]]:
    """The row's precision cell, else its system's, else the engine's default."""
    precision = _PRECISIONS.get(row.get("precision", "").strip().lower(), "")
    if precision:
        return precision, ()
    if system is not None and system.get("precision"):
        return _PRECISIONS[str(system.get("precision"))], (system.note("precision"),)
    precision = runtime.serving.default_weight_dtype
    return precision, (f"precision {precision} ({runtime.name}'s default)",)


def case_from_row(row: dict) -> ServingCase:
    """The row as a case to simulate, or RowProblem with the reason."""
    try:
        runtime, engine_notes = _engine(row)
        model = resolve_model(_model(row))
        system = published_system(runtime.name, model.name, row["gpu"], _int(row, "gpus"), row["concurrency_or_batch"])
        runtime, system_notes = _with_system(runtime, system)
        tp, replicas, ep, degree_notes = _degrees(row, system)
        precision, precision_notes = _precision(row, runtime, system)
        assumed = engine_notes + system_notes + degree_notes + precision_notes
        isl, osl, length_notes, dataset = _lengths(row)
        load, load_notes = _load(row, isl, osl, replicas, dataset, runtime.serving.rate_run_s)
        load, spread_notes = _spread(load, row, dataset)
        metric, scope, factor = _metric(row)
        attention_dp = bool(re.search(r"attention[ _-]?dp|attn[ _-]dp|dp[ _-]attention", row.get("notes", ""), re.I))
        deployment = ServingDeployment(model=model, cluster=load_cluster(_cluster(row["gpu"])), runtime=runtime, tp=tp,
                                       replicas=replicas, ep=ep, attention_dp=attention_dp, weight_dtype=precision)
        measured = float(row["value"])
    except AutotuneError as err:
        raise RowProblem(f"{err.field}: {err.message}") from None
    except (KeyError, ValueError) as err:
        raise RowProblem(f"unreadable cell: {err}") from None
    return ServingCase(row_id=row["id"], engine=row["engine"], gpu=row["gpu"], deployment=deployment, load=load,
                       metric=metric, scope=scope, unit=row["unit"], unit_to_si=factor, measured=measured,
                       assumed=assumed + length_notes + spread_notes + load_notes)
