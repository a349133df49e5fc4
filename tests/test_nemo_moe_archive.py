"""Megatron-Bridge's archived MoE pre-training rows (tests/data/nemo_moe_archive.csv, containers
25.11 .. 26.08) priced with the recipe settings of calibrate/nemo_moe_recipes.py."""

import csv
import re

import pytest
from archive_rows import priced_checks

from autotune.calibrate.modern import (NEMO_CUDA_GRAPHS, NEMO_MOE_RECIPES, NEMO_RECOMPUTE_MODULES, _recipe_key,
                                       modern_run_from_row)
from autotune.calibrate.published import check_published

# Rows whose published layout no recipe of their container's release matches (see the module's notes).
UNSOURCED = {"nemo-arch-006", "nemo-arch-028", "nemo-arch-052", "nemo-arch-064"}


@pytest.fixture
def rows(data_dir):
    with open(data_dir / "nemo_moe_archive.csv", newline="") as handle:
        return {row["id"]: row for row in csv.DictReader(handle)}


def test_every_archive_row_is_priced(data_dir, rows):
    priced_checks(data_dir / "nemo_moe_archive.csv")


def test_every_sourced_row_finds_its_recipe(rows):
    for run_id, row in rows.items():
        key = _recipe_key(row)
        assert (key in NEMO_MOE_RECIPES) == (run_id not in UNSOURCED), (run_id, key)


def test_recipe_entries_cite_a_tag_or_commit():
    cited = re.compile(r"v\d+\.\d+\.\d+|@[0-9a-f]{7}")
    for table in (NEMO_MOE_RECIPES, NEMO_CUDA_GRAPHS, NEMO_RECOMPUTE_MODULES):
        for key, entry in table.items():
            assert cited.search(entry[-1]), key
    for dispatcher, overlap, _ in NEMO_MOE_RECIPES.values():
        assert dispatcher in ("alltoall", "deepep") and isinstance(overlap, bool)


def test_gb200_26_04_01_qwen3_30b_runs_hybridep_with_router_graphs(rows):
    _, _, runtime, _, _, _ = modern_run_from_row(rows["nemo-arch-048"])
    assert runtime.ep_dispatcher == "deepep" and not runtime.overlap_ep_comm
    assert runtime.cuda_graph_scope == ("moe_router", "moe_preprocess")


def test_b200_26_04_01_deepseek_overlaps_deepep_and_recomputes_mla_and_mlp(rows):
    _, _, runtime, _, plan, _ = modern_run_from_row(rows["nemo-arch-004"])
    assert runtime.ep_dispatcher == "deepep" and runtime.overlap_ep_comm
    assert runtime.cuda_graph_scope == ("attn", "moe_router", "moe_preprocess")
    assert all(stage.recompute_modules == ("mla_up_proj", "mlp") for stage in plan.stages)


def test_gb200_26_06_qwen3_235b_captures_the_full_iteration(rows):
    _, _, runtime, _, plan, _ = modern_run_from_row(rows["nemo-arch-041"])
    assert runtime.cuda_graph_scope == ("full_iteration",) and runtime.overlap_ep_comm
    assert all(not stage.recompute_modules for stage in plan.stages)


def test_26_02_01_gpt_oss_keeps_alltoall_its_script_never_switched(rows):
    _, _, runtime, _, plan, _ = modern_run_from_row(rows["nemo-arch-008"])
    assert runtime.ep_dispatcher == "alltoall" and not runtime.overlap_ep_comm
    assert all(stage.recompute_modules == ("layernorm", "moe_act") for stage in plan.stages)


def test_h100_qwen3_235b_overlaps_alltoall(rows):
    _, _, runtime, _, _, _ = modern_run_from_row(rows["nemo-arch-061"])
    assert runtime.ep_dispatcher == "alltoall" and runtime.overlap_ep_comm
    assert runtime.cuda_graph_scope == ()


def test_unsourced_rows_fall_back_to_megatron_core_defaults(rows):
    for run_id in UNSOURCED:
        _, _, runtime, _, _, _ = modern_run_from_row(rows[run_id])
        assert runtime.ep_dispatcher == "alltoall" and not runtime.overlap_ep_comm, run_id


def test_h100_qwen3_235b_recipes_run_tp_without_comm_overlap(rows, data_dir):
    """v0.2.0-v0.4.2's H100 Qwen3-235B recipe sets tp_comm_overlap=False (NEMO_NO_TP_OVERLAP); the
    other NeMo rows with TP > 1 keep the overlap (25.09's run_script.py sets it for Qwen3)."""
    from autotune.calibrate.modern import NEMO_NO_TP_OVERLAP

    _, _, _, _, plan, _ = modern_run_from_row(rows["nemo-arch-061"])
    assert plan.stages[0].tp == 2 and not plan.overlap_tp_comm
    assert _recipe_key(rows["nemo-arch-061"]) in NEMO_NO_TP_OVERLAP
    with open(data_dir / "modern_runs.csv", newline="") as handle:
        given = {row["id"]: row for row in csv.DictReader(handle)}
    _, _, _, _, plan, _ = modern_run_from_row(given["nemo-mb-085"])  # 25.09 H100 Qwen3-235B, TP 2
    assert plan.stages[0].tp == 2 and plan.overlap_tp_comm


def _release(source: str) -> tuple:
    match = re.search(r"container (\d+)\.(\d+)", source)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def test_settled_gb200_releases_of_deepseek_and_qwen3_235b_are_predicted_within_8_percent(data_dir):
    """From 26.02 NVIDIA's GB200 DeepSeek-V3 and Qwen3-235B-A22B layouts move at most a few percent between
    releases (scripts/nemo_container_spread.py); there the model holds (14 rows, worst 5.5% when written)."""
    checks, _ = check_published(data_dir / "nemo_moe_archive.csv")
    settled = [c for c in checks if c.run.regime.startswith("GB200") and _release(c.run.source) >= (26, 2)
               and c.run.model.name.lower().startswith(("deepseekv3", "qwen3_235b"))]
    assert len(settled) == 14
    assert max(abs(c.error) for c in settled) <= 0.08, {c.run.run_id: round(c.error, 3) for c in settled}


def test_archive_errors_stay_where_they_are(data_dir):
    """57 rows, all releases: mean 14.8%, worst 62.6% when written (nemo-arch-014: B200 Qwen3-30B-A3B at
    micro-batch 1 in 25.11, 28.2 s a step, where 26.02.01 ran micro-batch 4 at 9.8 s for the same tokens)."""
    from autotune.calibrate.regimes import overall_error

    total = overall_error(check_published(data_dir / "nemo_moe_archive.csv")[0])
    assert total.num_runs == 57
    assert total.mean_abs_error <= 0.16 and total.worst_abs_error <= 0.65
