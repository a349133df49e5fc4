"""Megatron-Core MoE runs whose sources give the command line (tests/data/moe_ab_runs.csv): the
optional cells that state the dispatcher, the 1F1B all-to-all overlap, the recomputed modules and
the CUDA-graph scopes, and shortened proxies of a preset model."""

import csv

import pytest
from archive_rows import priced_checks, read_rows

from autotune.calibrate.modern import modern_run_from_row
from autotune.calibrate.published import check_published
from autotune.calibrate.row_cells import normalized_row
from autotune.errors import AutotuneError


@pytest.fixture
def path(data_dir):
    return data_dir / "moe_ab_runs.csv"


def test_every_row_is_priced_with_the_settings_it_states(path):
    rows = {r["id"]: r for r in read_rows(path)}
    for check in priced_checks(path):
        row, run = rows[check.run.run_id], check.run
        assert run.runtime.ep_dispatcher == row["ep_dispatcher"]
        assert run.runtime.overlap_ep_comm == (row["ep_overlap"] == "yes")
        assert run.runtime.host_dispatch == "eager" and run.runtime.cuda_graph_scope == ()
        assert all(s.recompute_modules == tuple(row["recompute_modules"].split()) for s in run.plan.stages)


def test_the_a_b_pairs_differ_only_in_the_overlap(path):
    """Each source's two arms differ in --overlap-moe-expert-parallel-comm alone, so the model
    prices the overlapped arm faster, by the exchange it hides."""
    checks = {c.run.run_id: c for c in priced_checks(path)}
    for off, on in (("zoo-h100-1", "zoo-h100-2"), ("pr6429-c", "pr6429-b")):
        assert checks[on].estimate.step_time_s < checks[off].estimate.step_time_s
        hidden = checks[off].estimate.breakdown["ep_comm_s"] - checks[on].estimate.breakdown["ep_comm_s"]
        assert hidden > 0


def test_a_stated_cell_outside_its_choices_names_the_column(tmp_path, path):
    rows = read_rows(path)
    bad = dict(rows[0], ep_dispatcher="nccl")
    file = tmp_path / "bad.csv"
    with open(file, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([bad, rows[1]])
    checks, skipped = check_published(file)
    assert [c.run.run_id for c in checks] == [rows[1]["id"]]
    assert "ep_dispatcher" in skipped[0].reason and "alltoall" in skipped[0].reason
    for column, value in (("recompute_modules", "layernorm attention"), ("ep_overlap", "maybe"),
                          ("cuda_graph_scope", "attn everything")):
        cells, why = normalized_row(dict(rows[0], **{column: value}), ("H100-SXM5-80GB",))
        assert cells is None and why.startswith(column), why


def test_a_proxy_keeps_the_preset_shape_with_fewer_layers(path):
    row = next(r for r in read_rows(path) if r["id"] == "pr6429-c")
    model, *_, plan, _ = modern_run_from_row(row)
    assert model.num_experts == 256 and model.is_mla and model.first_k_dense_layers == 3
    # 14 layers in pp 4 x vpp 2 chunks: the embedding and the loss take a slot each (the megatron runtime's
    # account_for_embedding/loss_in_pipeline_split), one layer fewer on the first and last stages
    assert model.num_layers == 14 and [s.num_layers for s in plan.stages] == [3, 4, 4, 3]
    with pytest.raises(AutotuneError, match="num_layers"):
        modern_run_from_row(dict(row, layers="62"))
