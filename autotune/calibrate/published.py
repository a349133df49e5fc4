"""Published training runs (``tests/data/published_runs.csv``) and how we predict each.

Where a source leaves settings unstated, the assumption is made here, once, for all rows:

* Narayanan et al. SC'21 (Megatron-LM, 2021): attention without FlashAttention (it appeared
  in 2022; Megatron used its fused scale-mask-softmax), no overlap of gradient all-reduce, TP
  or pipeline communication with compute (added to Megatron-Core in 2023), no ZeRO.
* Megatron-Core r0.8.0 README table: the usual Megatron-Core defaults the README of the data
  names (micro-batch 1, no recomputation, sequence parallelism with TP > 1, distributed
  optimizer = ZeRO-1), fused (flash) attention, and the overlaps the Megatron-LM README states
  for these runs (--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap, overlapped
  pipeline communication).
* Both: GPT models with learned positions, LayerNorm, biases, dropout 0.1 and tied
  embeddings (Megatron-LM's GPT defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.calibrate.modern import GPU_CLUSTERS, Unexpressible, regime_of, safe_modern_run
from autotune.calibrate.row_cells import missing_columns, normalized_row
from autotune.calibrate.source_flops import derive_iter_s
from autotune.cost.estimate import Estimate
from autotune.cost.evaluate import evaluate_plan
from autotune.errors import AutotuneError
from autotune.spec.json_file import read_csv_file
from autotune.plan.builders import uniform_plan
from autotune.plan.plan import Plan
from autotune.spec.hardware import ClusterSpec
from autotune.spec.hardware_data import load_cluster
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime, load_runtime
from autotune.spec.workload import TrainingWorkload

__all__ = ["PublishedRun", "RunCheck", "Unexpressible", "load_published_runs", "load_runs", "check_runs", "check_published", "moe_priced"]


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    run_id: str
    source: str
    model: ModelSpec
    workload: TrainingWorkload
    cluster_name: str
    plan: Plan
    iter_s: float
    runtime: Runtime  # the row's runtime preset with what its cells set
    regime: str = ""  # device | dense or moe | precision | framework (check-published groups by it)


@dataclass(frozen=True, kw_only=True)
class RunCheck:
    run: PublishedRun
    estimate: Estimate

    @property
    def error(self) -> float:
        """Signed relative error of the predicted step time."""
        return (self.estimate.step_time_s - self.run.iter_s) / self.run.iter_s


def _is_megatron_2021(row: dict[str, str]) -> bool:
    return row["source"].startswith("Narayanan et al. SC'21")


def _run_from_row(row: dict[str, str]) -> PublishedRun:
    legacy = _is_megatron_2021(row)
    model = ModelSpec(
        name=row["model"], num_layers=int(row["layers"]), hidden_size=int(row["hidden"]),
        num_heads=int(row["heads"]), num_kv_heads=int(row["kv_heads"]), ffn_hidden_size=int(row["ffn"]),
        ffn_activation=row["ffn_act"], vocab_size=int(row["vocab"]), max_seq_len=int(row["seq"]),
        tied_embeddings=True, dropout=True, source=row["source"])
    runtime = load_runtime("megatron-2021" if legacy else "megatron")
    workload = TrainingWorkload(global_batch=int(row["global_batch"]), seq_len=int(row["seq"]), dtype=row["dtype"],
                                attention_impl=runtime.attention_impl)
    tp = int(row["tp"])
    sp = row["sequence_parallel"] == "yes" if row["sequence_parallel"] else tp > 1
    overlap = not legacy
    plan = uniform_plan(
        num_layers=model.num_layers, gpus=int(row["gpus"]), tp=tp, pp=int(row["pp"]), dp=int(row["dp"]),
        cp=int(row["cp"] or 1), vpp=int(row["vpp"] or 1), micro_batch=int(row["micro_batch"] or 1),
        global_batch=workload.global_batch, sequence_parallel=sp, recompute=row["recompute"] or "none",
        zero=int(row["zero"]) if row["zero"] else 1, overlap_grad_reduce=overlap, overlap_param_gather=overlap,
        overlap_tp_comm=overlap, overlap_p2p_comm=overlap)
    cluster = "dgx-a100-80gb" if "A100" in row["gpu"] else "dgx-h100"
    return PublishedRun(run_id=row["id"], source=row["source"], model=model, workload=workload, runtime=runtime,
                        cluster_name=cluster, plan=plan, iter_s=float(row["iter_s"]),
                        regime=f"{row['gpu']} | dense | {row['dtype']} | megatron")


def _modern_run(row: dict[str, str]) -> PublishedRun | Unexpressible:
    built = safe_modern_run(row)
    if isinstance(built, Unexpressible):
        return built
    model, workload, runtime, cluster, plan, regime = built
    try:
        load_cluster(cluster)
    except AutotuneError as err:
        return Unexpressible(run_id=row["id"], regime=regime, reason=err.message)
    if model.is_moe and not moe_priced():
        return Unexpressible(run_id=row["id"], regime=regime,
                             reason="MoE: the operator graph has no expert layers yet (they light up when it does)")
    return PublishedRun(run_id=row["id"], source=row["source"], model=model, workload=workload, runtime=runtime,
                        cluster_name=cluster, plan=plan, iter_s=float(row["iter_s"]), regime=regime)


def moe_priced() -> bool:
    """Whether the operator graph prices routed experts (another part of the project adds them)."""
    from autotune.graph.table import model_tables

    probe = ModelSpec(name="moe-probe", num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=4,
                      ffn_hidden_size=128, ffn_activation="swiglu", vocab_size=128, max_seq_len=16,
                      tied_embeddings=False, num_experts=4, num_experts_per_token=2, expert_ffn_hidden_size=32)
    return model_tables(probe, 16, 2, "flash").experts is not None  # routed experts: autotune/graph/moe_ops.py


def _with_derived_iter_s(row: dict[str, str], rows: list[dict[str, str]]) -> dict[str, str] | Unexpressible:
    """The row with the iteration time its TFLOP/s imply under its source's FLOP count (source_flops)."""
    derived = derive_iter_s(row, rows)
    if isinstance(derived, str):
        return Unexpressible(run_id=row["id"], regime=regime_of(row), reason=derived)
    return derived


def load_runs(path: str | Path) -> tuple[list[PublishedRun], list[Unexpressible]]:
    """Parse a published-runs CSV (either layout of shared/reference/README.md): the runs the
    cost model can price, and the rows it cannot with the reason. Each row is checked on its own
    (calibrate/row_cells.py): a malformed cell leaves that row unpriced, not the file."""
    fieldnames, rows = read_csv_file(path, "runs")
    if missing := missing_columns(fieldnames):
        raise AutotuneError("runs", f"{str(path)!r} lacks the column(s) {', '.join(missing)} "
                                    "(see tests/data/modern_runs.csv for the layout)")
    runs, skipped, readable = [], [], []
    for number, row in enumerate(rows, start=2):
        cells, why = normalized_row(row, tuple(GPU_CLUSTERS))
        if cells is None:
            skipped.append(Unexpressible(run_id=row.get("id") or f"line {number}", regime=_regime(row), reason=why))
        else:
            readable.append(cells)
    for row in readable:
        built = _built(row, readable)
        (skipped if isinstance(built, Unexpressible) else runs).append(built)
    return runs, skipped


def _regime(row: dict[str, str]) -> str:
    try:
        return regime_of(row) if "framework" in row else f"{row['gpu']} | dense | {row['dtype']} | megatron"
    except KeyError:
        return "unknown"


def _built(row: dict[str, str], rows: list[dict[str, str]]) -> PublishedRun | Unexpressible:
    """One checked row priced as a run, or why it cannot be (an inconsistency the cells show only
    together, such as GPUs that the parallel degrees do not multiply to)."""
    try:
        if "framework" in row and not row.get("iter_s"):  # TFLOP/s only: the source's FLOP count
            row = _with_derived_iter_s(row, rows)
            if isinstance(row, Unexpressible):
                return row
        return _modern_run(row) if "framework" in row else _run_from_row(row)
    except AutotuneError as err:
        return Unexpressible(run_id=row["id"], regime=_regime(row), reason=f"{err.field}: {err.message}")
    except (KeyError, ValueError, ZeroDivisionError) as err:
        return Unexpressible(run_id=row["id"], regime=_regime(row), reason=f"inconsistent cells: {err}")


def load_published_runs(path: str | Path) -> list[PublishedRun]:
    """The runs of a published-runs CSV that the cost model can price."""
    return load_runs(path)[0]


def check_published(path: str | Path, clusters: dict[str, ClusterSpec] | None = None
                    ) -> tuple[list[RunCheck], list[Unexpressible]]:
    """Predict every run of a CSV that the cost model can price; the others with the reason."""
    runs, skipped = load_runs(path)
    checks = []
    for run in runs:
        try:
            checks.extend(check_runs([run], clusters))
        except AutotuneError as err:
            skipped.append(Unexpressible(run_id=run.run_id, regime=run.regime, reason=f"{err.field}: {err.message}"))
    return checks, skipped


def check_runs(runs: list[PublishedRun], clusters: dict[str, ClusterSpec] | None = None) -> list[RunCheck]:
    """Predict every run; ``clusters`` may replace the presets (e.g. with another profile)."""
    clusters = dict(clusters or {})
    checks = []
    for run in runs:
        if run.cluster_name not in clusters:  # one object per name: the runtime's kernels are cached by it
            clusters[run.cluster_name] = load_cluster(run.cluster_name)
        estimate = evaluate_plan(run.model, run.workload, clusters[run.cluster_name], run.plan, runtime=run.runtime)
        checks.append(RunCheck(run=run, estimate=estimate))
    return checks
