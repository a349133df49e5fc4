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

from autotune.calibrate.chat_template_intake import with_template_parse
from autotune.calibrate.serving_degrees import row_degrees, row_int
from autotune.calibrate.serving_flags import adp_balance_flags, async_scheduling_flags, attention_backend_flags, \
    bf16_kv_flags, deepgemm_flags, dp_graph_flags, limit_flags, moe_backend_flags, mxfp4_flags, named_mla_kernel_flags, \
    note_number as _number
from autotune.calibrate.serving_phase_rows import PhaseRow, phase_row
from autotune.calibrate.serving_names import NATIVE_PRECISIONS, RowProblem, block_scaled_fp8, engine_name, gpu_cluster, \
    model_preset, name_precision, nvfp4_out_proj_source, precision_name, served_precision
from autotune.calibrate.serving_generated import generated_outputs
from autotune.calibrate.serving_speculation import speculation_from_notes
from autotune.calibrate.serving_phrases import PER_USER_WITH_CONTEXT, eplb_from_notes, latency_unit_s, load_words, \
    metric_name, per_user_rate, throughput_scope
from autotune.calibrate.loadgen_offline import offline_requests
from autotune.calibrate.serving_systems import ENGINE_SETTINGS, PublishedSystem, published_system
from autotune.cost.serving_mix import autoquantize_mix
from autotune.cost.serving_custom_ar import release_allreduce_runtime
from autotune.cost.vllm_fp8_pad import release_fp8_pad_runtime
from autotune.cost.serving_eval import ServingDeployment
from autotune.cost.serving_lengths import request_lengths, uniform_lengths
from autotune.cost.serving_load import METRICS, Load
from autotune.errors import AutotuneError
from autotune.spec.hardware import ClusterSpec
from autotune.spec.hardware_data import load_cluster
from autotune.spec.model import ModelSpec
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import Runtime, load_runtime, runtime_names
from autotune.spec.serving_engine import VLLM_V1_RELEASE, ServingEngine, release_number

__all__ = ["ServingCase", "RowProblem", "case_from_row", "engine_runtime", "COLUMNS", "RATE_REQUESTS",
           "MAX_RATE_REQUESTS", "BENCH_REQUESTS"]

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
# A maximum-throughput row that states neither its request count nor a dataset with one: the serving
# benchmark clients' default count, which such runs leave unchanged.
BENCH_REQUESTS = 1000
_BENCH_SOURCE = ("the default --num-prompts of vLLM's benchmark client (vllm 0.33.0 vllm/benchmarks/serve.py) and "
                 "SGLang's bench_serving (0.3.0 and 0.5.23)")
# LoadGen's Offline query holds max(min_query_count, 1.1 x target_qps x min_duration) samples
# (v4.1 NVIDIA, 8 H100s: 200,640 for Llama 2 at 76 QPS, 971,520 for Mixtral at 368, over 2,400 s;
# closed/NVIDIA/results/DGX-H100_H100-SXM-80GBx8_TRT/{llama2-70b-99,mixtral-8x7b}/Offline/performance/
# run_1/mlperf_log_summary.txt @a2f5d66d17e8), not the sample set's 24,576 or 15,000: with lengths
# spread, a run as short as the set ends in a long tail of the longest requests, which the real
# run's steady state dilutes. Under a harness with a run length (rate_run_s) an Offline row issues
# that count where its system gives the expected QPS (loadgen_offline.py), else MAX_RATE_REQUESTS
# per replica, as a rate row does (an instance above 4.2 samples/s issues more in 2,400 s).
OFFLINE_RUN_NOTE = f"{MAX_RATE_REQUESTS} requests per replica (the harness's Offline query lasts its min_duration)"


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
    inverse: bool = False  # the row measures 1 / metric (a per-user token rate: 1 / TPOT)
    measured: float
    phase: PhaseRow | None = None  # one phase of a disaggregated deployment (serving_phase_rows.py): no simulation
    assumed: tuple[str, ...] = field(default=())


@lru_cache(maxsize=1)
def _datasets() -> dict:
    return tomllib.loads(resources.files("autotune.data").joinpath("serving_datasets.toml").read_text())


def engine_runtime(engine: str, version: str) -> Runtime:
    """The engine's preset for ``version``: the newest preset of that engine not newer than it (no
    version number: the newest), with that SGLang release's own all-reduce (serving_custom_ar.py)."""
    presets = [load_runtime(n) for n in runtime_names()]
    ours = [r for r in presets if r.serving is not None and r.serving.engine == engine]
    if not ours:
        raise RowProblem(f"no runtime preset for engine {engine!r}")
    wanted = release_number(version) or (10**6,)
    ranked = sorted(ours, key=lambda r: release_number(r.serving.version) or ())
    older = [r for r in ranked if (release_number(r.serving.version) or ()) <= wanted]
    return release_fp8_pad_runtime(release_allreduce_runtime(older[-1] if older else ranked[0], version), version)


def _lengths(row: dict) -> tuple[int, int, tuple[str, ...], dict]:
    """(isl, osl, assumptions, the dataset entry the notes name or {})."""
    isl, osl = row_int(row, "isl"), row_int(row, "osl")
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


def _load(row: dict, isl: int, osl: int, replicas: int, dataset: dict, run_s: float,
          system: PublishedSystem | None = None) -> tuple[Load, tuple[str, ...]]:
    """The load one replica sees, from concurrency_or_batch and the notes (a maximum-throughput row
    without a count: the benchmark's own minimum, the dataset's ``offline_samples``, else the serving
    benchmarks' default, and under a harness with a run length ``run_s``, MAX_RATE_REQUESTS; a rate
    row: the notes' LoadGen min_duration, else the harness's ``run_s``, else RATE_REQUESTS, and at least
    the ``system``'s LoadGen min_query_count)."""
    words = load_words(row["concurrency_or_batch"], row.get("notes", ""))
    count, assumed = words.count, ((words.read_as,) if words.read_as else ())
    duration_ms = words.duration_ms or run_s * 1000.0
    if words.kind == "rate":
        if duration_ms:  # LoadGen issues rate x duration queries, drawn from the N-sample set
            count = round(words.rate_per_s * duration_ms / 1000.0)
        # and at least min_query_count: loadgen.cc GenerateQueries (the log's generated_query_count)
        count = max(count or 0, int(system.get("min_query_count") or 0) if system else 0) or None
        n = int(count / replicas) if count else RATE_REQUESTS
        assumed = () if count else (f"{RATE_REQUESTS} requests per replica (run length not stated)",)
        if n > MAX_RATE_REQUESTS:
            assumed = (f"{MAX_RATE_REQUESTS} of the run's {n} requests per replica simulated (the steady state)",)
            n = MAX_RATE_REQUESTS
        return Load(kind="rate", num_requests=n, input_len=isl, output_len=osl,
                    rate_per_s=words.rate_per_s / replicas), assumed
    if words.kind == "concurrency":
        per_replica = max(1, int(words.concurrency / replicas))
        return Load(kind="concurrency", num_requests=max(per_replica, int((count or 10 * words.concurrency) / replicas)),
                    input_len=isl, output_len=osl, concurrency=per_replica), assumed
    if not count and "offline_samples" in dataset:
        count = dataset["offline_samples"]["value"]
        assumed = (f"{count} requests ({dataset['offline_samples']['source']})",)
    if not count:
        count, assumed = BENCH_REQUESTS, (f"{BENCH_REQUESTS} requests (the run's count not stated; {_BENCH_SOURCE})",)
    n = max(1, int(count / replicas))
    if run_s:  # the harness's query lasts run_s: LoadGen's own count where the system gives its expected QPS
        n, assumed = offline_requests(system, run_s, dataset, replicas) or (MAX_RATE_REQUESTS, (OFFLINE_RUN_NOTE,))
    return Load(kind="max_throughput", num_requests=n, input_len=isl, output_len=osl), assumed


def _spread(load: Load, row: dict, dataset: dict, system: PublishedSystem | None) -> tuple[Load, tuple[str, ...]]:
    """Each request's lengths drawn from the dataset's distribution, where it has one and the row
    states neither length (a stated one fixes the benchmark's lengths); outputs cut at the harness's
    output limit where the system publishes one."""
    if "lengths" not in dataset or row_int(row, "isl") or row_int(row, "osl"):
        return load, ()
    lengths, notes = request_lengths(dataset["lengths"]), ()
    if system is not None and system.get("max_output_len"):
        lengths, notes = lengths.capped(int(system.get("max_output_len"))), (system.note("max_output_len"),)
        load = replace(load, output_len=max(1, round(lengths.mean_output_tokens)))
    return replace(load, lengths=lengths), (f"lengths drawn per request ({lengths.name}, serving_lengths.toml)",) + notes


# Clients that draw a random dataset's lengths from [int(L x ratio), L] (serving_lengths.uniform_lengths);
# vLLM's own `vllm bench serve` spreads them around L instead, so its rows keep the stated lengths
_LOW_RANGE_CLIENTS = re.compile(r"InferenceX|InferenceMAX|sglang\.bench_serving", flags=re.IGNORECASE)


def _random_range(load: Load, row: dict) -> tuple[Load, tuple[str, ...]]:
    """The stated lengths spread as the benchmark client's --random-range-ratio draws them, where the
    notes quote a ratio below 1 and the client is one whose rule is known (_LOW_RANGE_CLIENTS)."""
    notes = row.get("notes", "")
    ratio = _number(r"--random[-_]range[-_]ratio[ =]+([\d.]+)", notes)
    if ratio is None or ratio >= 1 or not (row_int(row, "isl") and row_int(row, "osl")):
        return load, ()
    if not _LOW_RANGE_CLIENTS.search(f"{row.get('source', '')} {notes}"):
        return load, (f"lengths fixed at the stated ones: the client's --random-range-ratio {ratio:g} rule is not known",)
    lengths = uniform_lengths(load.input_len, load.output_len, ratio, source=f"the row's --random-range-ratio {ratio:g}")
    load = replace(load, lengths=lengths, input_len=round(lengths.mean_input_tokens),
                   output_len=round(lengths.mean_output_tokens))
    return load, (f"lengths drawn per request from {lengths.name} (the client's --random-range-ratio)",)


def _metric(row: dict) -> tuple[str, str, float, bool, tuple[str, ...]]:
    """(metric, scope, unit -> SI factor, whether the row measures its inverse, assumptions): a
    per-user token rate is 1 / the TPOT statistic it names."""
    per_user = per_user_rate(row["metric"], row["unit"])
    if per_user == PER_USER_WITH_CONTEXT:
        return per_user, "replica", 1.0, False, (f"{row['metric'].strip()} read as trtllm-bench's: each request's output "
                                                 "tokens over its end-to-end latency, averaged",)
    if per_user:
        return per_user, "replica", 1.0, True, (f"{row['metric'].strip()} read as 1 / {per_user} "
                                                "(one request's decode rate)",)
    metric, unit = metric_name(row["metric"], row["unit"]), row["unit"].strip()
    if METRICS[metric][0] != "total":
        return metric, "replica", latency_unit_s(unit), False, ()
    scope, read_as = throughput_scope(unit)
    return metric, scope, 1.0, False, ((read_as,) if read_as else ())


def _loadgen_window(metric: str, runtime: Runtime, load: Load, notes: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """An MLPerf Server row's output tokens/s as LoadGen reads it: up to the final issued query's finish."""
    if runtime.serving.engine != "mlperf-nvidia" or load.kind != "rate" or metric != "output_tokens_per_s":
        return metric, notes
    return "loadgen_completed_tokens_per_s", notes + (
        "output tokens/s over the run until the final issued query completes (LoadGen Server: "
        "token_count / final_query_all_samples_done_time)",)


def _engine(row: dict) -> tuple[Runtime, tuple[str, ...]]:
    """The engine's preset, with the engine flags the row's notes quote."""
    version = row.get("engine_version", "")
    runtime = engine_runtime(engine_name(row["engine"]), version)
    engine, notes = runtime.serving, row.get("notes", "")
    named = () if release_number(version) or not version.strip() else (
        f"{runtime.name} (engine_version {version!r} names no version number: the newest preset)",)
    changes = _flag_changes(row, engine, version, notes)
    if changes:
        runtime = runtime.with_changes(serving=engine.with_changes(**changes))
        named += tuple(_change_note(k, v) for k, v in changes.items() if k != "memory_fraction_by_tp")
    runtime, parse_notes = with_template_parse(runtime, row)  # vLLM 0.11.0's per-request chat-template parse
    return runtime, named + parse_notes


def _flag_changes(row: dict, engine: ServingEngine, version: str, notes: str) -> dict:
    """The serving settings the engine flags quoted in the row's ``notes`` change on ``engine`` (release ``version``)."""
    changes = {}
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
        if engine.memory_rule in ("reserved", "sglang_reserve"):  # SGLang derives the reserve only when --mem-fraction-static is not given
            changes["memory_rule"] = "static"  # (server_args.py _handle_gpu_memory_settings, 0.5.6 / 0.5.12 wheels)
    changes.update(limit_flags(notes))
    # a blank precision cell serves the engine's default weights: MLPerf v5.1's harness re-quantizes every checkpoint
    # to NVFP4 with an FP8 cache (mlperf-nvidia-5.1.toml), so a maker's FP8 release is not served as released there
    served = row.get("precision", "") or engine.default_weight_dtype
    changes.update(bf16_kv_flags(engine, row.get("hf_model_id", ""), notes, served))
    changes.update(adp_balance_flags(engine, notes))
    changes.update(attention_backend_flags(engine, notes))
    changes.update(mxfp4_flags(engine, version, notes))
    changes.update(deepgemm_flags(engine, version, notes))
    changes.update(dp_graph_flags(engine, version))
    if engine.engine == "sglang":  # an older release naming the kernels the newest preset's MLA rows time
        changes.update(named_mla_kernel_flags(engine, notes, engine_runtime(engine.engine, "").serving))
    changes.update(moe_backend_flags(engine, notes))
    # vLLM V1's --async-scheduling (0.10+, config/scheduler.py async_scheduling; the default from 0.14.0): the
    # engine core schedules step n+1 and the runner prepares its inputs while step n runs (PR #19970, PR #23569
    # 'Fully overlap model execution'); --no-async-scheduling turns it off
    if engine.engine == "vllm" and (release_number(engine.version) or ()) >= VLLM_V1_RELEASE:
        changes.update(async_scheduling_flags(engine, notes))
    # vLLM 0.6's --disable-async-output-proc (arg_utils.py), SGLang 0.4's --disable-overlap-schedule
    # (server_args.py): the host's work runs between the GPU's steps (cost/serving_host.py)
    if re.search(r"--disable-async-output-proc|--disable-overlap-schedule", notes) and engine.host_overlap != "none":
        changes["host_overlap"] = "none"
    return changes


def _change_note(name: str, value) -> str:
    """An engine change as the row's assumptions list it; a measured table (named_mla_kernel_flags) by its rows' count."""
    if isinstance(value, tuple) and len(value) > 4:
        return f"{name}: the newest preset's {len(value)} measured rows (the kernel the row's notes name)"
    return f"{name} {value} (the row's notes)"


def _with_system(runtime: Runtime, system: PublishedSystem | None) -> tuple[Runtime, tuple[str, ...]]:
    """The engine with the batch and token limits (and KV share, chunking, run length) the row's system
    was published with."""
    limits = {k: system.get(k) for k in ENGINE_SETTINGS} if system else {}
    limits = {k: v for k, v in limits.items() if v is not None}
    if not limits:
        return runtime, ()
    return (runtime.with_changes(serving=runtime.serving.with_changes(**limits)),
            tuple(system.note(k) for k in limits))


def _precision(row: dict, runtime: Runtime, system: PublishedSystem | None, model: str,
               cluster: ClusterSpec) -> tuple[str, tuple[str, ...]]:
    """The row's precision cell, else its checkpoint name's (-FP8, -NVFP4), else its system's, else the
    checkpoint's own format, else the engine's default; as the engine serves it on this GPU."""
    precision, assumed = precision_name(row.get("precision", "")), ()
    named = name_precision(row.get("model", ""), row.get("hf_model_id", ""))
    if not precision and named:
        precision, assumed = named, (f"precision {named} (the checkpoint's name)",)
    if not precision and system is not None and system.get("precision"):
        precision, assumed = precision_name(str(system.get("precision"))), (system.note("precision"),)
    if not precision and model in NATIVE_PRECISIONS:
        precision, source = NATIVE_PRECISIONS[model]
        assumed = (f"precision {precision} (the released checkpoint: {source})",)
    if not precision:
        precision = runtime.serving.default_weight_dtype
        assumed = (f"precision {precision} ({runtime.name}'s default)",)
    gemms = {dtype for (kind, dtype) in cluster.device.compute if kind == "gemm"}
    served, how = served_precision(precision, runtime.name, runtime.serving.weight_dtypes, gemms, cluster.device.name)
    return served, assumed + ((how,) if how else ())


def _weight_mix(system: PublishedSystem | None, precision: str) -> tuple[tuple, tuple[str, ...]]:
    """The formats of the system's AutoQuantize checkpoint (cost/serving_mix.py) where it publishes its effective bits
    and the row is priced at the system's precision; () otherwise."""
    bits = system.get("effective_bits") if system is not None else None
    if bits is None or precision_name(str(system.get("precision") or "")) != precision:
        return (), ()
    mix = autoquantize_mix(precision, float(bits))
    shares = " / ".join(f"{share:.2%} {dtype}" for dtype, share in mix)
    return mix, (system.note("effective_bits"), f"linear weights priced as {shares} (cost/serving_mix.py)")


def _checkpoint_scales(model: ModelSpec, hf_model_id: str) -> tuple[ModelSpec, tuple[str, ...]]:
    """The model with its checkpoint's FP8 block scales where the checkpoint named has them and the preset not."""
    if model.fp8_block_scaled or not block_scaled_fp8(hf_model_id):
        return model, ()
    return model.with_changes(fp8_block_scaled=True), (f"FP8 weights in 128 x 128 blocks ({hf_model_id})",)


def _checkpoint_out_proj(model: ModelSpec, notes: tuple[str, ...], row: dict) -> tuple[ModelSpec, tuple[str, ...]]:
    """The MLA model with its NVFP4 output projection where the checkpoint or the notes say so (cost/checkpoint_layout.py),
    and ``notes`` with why."""
    why = nvfp4_out_proj_source(row.get("hf_model_id", ""), row.get("notes", ""))
    if not model.is_mla or model.nvfp4_out_proj or why is None:
        return model, notes
    return model.with_changes(nvfp4_out_proj=True), notes + (f"NVFP4 attention output projection ({why})",)


def case_from_row(row: dict) -> ServingCase:
    """The row as a case to simulate, or RowProblem with the reason."""
    try:
        runtime, engine_notes = _engine(row)
        model = resolve_model(model_preset(row["model"], row.get("hf_model_id", "")))
        model, checkpoint_notes = _checkpoint_out_proj(*_checkpoint_scales(model, row.get("hf_model_id", "")), row)
        cluster = load_cluster(gpu_cluster(row["gpu"]))
        # the scenario from the load, or the benchmark's name (MLPerf v5.0's llama2-70b-interactive)
        scenario_text = f"{row['concurrency_or_batch']} {row['model']}"
        system = published_system(runtime.name, model.name, row["gpu"], row_int(row, "gpus"), scenario_text)
        runtime, system_notes = _with_system(runtime, system)
        d = row_degrees(row, system)
        precision, precision_notes = _precision(row, runtime, system, model.name, cluster)
        mix, mix_notes = _weight_mix(system, precision)
        assumed = engine_notes + system_notes + d.assumed + precision_notes + mix_notes + checkpoint_notes
        phase = phase_row(row, gpus=d.gpus, gpus_per_node=cluster.gpus_per_node)
        eplb = d.ep > 1 and model.is_moe and eplb_from_notes(row.get("notes", ""))
        if phase is not None:
            return _phase_case(row, runtime, phase, ServingDeployment(
                model=model, cluster=cluster, runtime=runtime, tp=d.tp, replicas=d.replicas, ep=d.ep,
                attention_dp=d.attention_dp, weight_dtype=precision, pp=d.pp, eplb=eplb, weight_mix=mix), assumed)
        isl, osl, length_notes, dataset = _lengths(row)
        load, load_notes = _load(row, isl, osl, d.replicas * d.pp, dataset, runtime.serving.rate_run_s, system)  # per micro-batch
        load, spread_notes = _spread(load, row, dataset, system)
        load, spread_notes = _random_range(load, row) if not spread_notes else (load, spread_notes)
        load, stop_notes = generated_outputs(load, row, d.replicas * d.pp)
        metric, scope, factor, inverse, metric_notes = _metric(row)
        metric, metric_notes = _loadgen_window(metric, runtime, load, metric_notes)
        speculation, speculation_notes = speculation_from_notes(row.get("notes", ""))
        deployment = ServingDeployment(model=model, cluster=cluster, runtime=runtime, tp=d.tp, replicas=d.replicas,
                                       ep=d.ep, attention_dp=d.attention_dp, weight_dtype=precision, pp=d.pp,
                                       speculation=speculation, eplb=eplb, weight_mix=mix)
        measured = float(row["value"])
    except AutotuneError as err:
        raise RowProblem(f"{err.field}: {err.message}") from None
    except (KeyError, ValueError) as err:
        raise RowProblem(f"unreadable cell: {err}") from None
    return ServingCase(row_id=row["id"], engine=runtime.serving.engine, gpu=row["gpu"], deployment=deployment,
                       load=load, metric=metric, scope=scope, unit=row["unit"], unit_to_si=factor, inverse=inverse,
                       measured=measured,
                       assumed=assumed + length_notes + spread_notes + stop_notes + load_notes + metric_notes + speculation_notes)


def _phase_case(row: dict, runtime: Runtime, phase: PhaseRow, deployment: ServingDeployment,
                assumed: tuple[str, ...]) -> ServingCase:
    """A one-phase row: priced from its step costs (cost/serving_phase.py), its load only the lengths."""
    isl, osl = row_int(row, "isl"), row_int(row, "osl") or 1
    metric = "total_tokens_per_s" if phase.phase == "prefill" else "output_tokens_per_s"
    what = f"{phase.phase} steps back to back at {phase.per_rank} {'tokens' if phase.phase == 'prefill' else 'requests'} a rank"
    return ServingCase(row_id=row["id"], engine=runtime.serving.engine, gpu=row["gpu"], deployment=deployment,
                       load=Load(kind="max_throughput", num_requests=1, input_len=isl, output_len=osl), metric=metric,
                       scope="gpu", unit=row["unit"], unit_to_si=1.0, measured=float(row["value"]), phase=phase,
                       assumed=assumed + phase.assumed + (what,))
