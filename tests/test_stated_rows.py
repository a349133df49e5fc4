"""Every given published row stated as a user states a run (``autotune evaluate --runtime R`` with the
row's cells, autotune/calibrate/stated_rows.py) is priced exactly as ``check-published`` prices it."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from autotune.calibrate.published import check_published
from autotune.calibrate.source_flops import derive_iter_s
from autotune.calibrate.stated_rows import model_config, stated_argv

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))


def _stated(row, tmp_path, table, **kwargs):
    from stated_rows import _evaluate

    if not row.get("iter_s"):
        row = derive_iter_s(row, table)
    argv = stated_argv(row, tmp_path, **kwargs)
    assert isinstance(argv, list), (row["id"], argv)
    step_s, why = _evaluate(argv)
    assert step_s is not None, (row["id"], why)
    return argv, step_s


@pytest.mark.slow
@pytest.mark.parametrize("name", ["published_runs.csv", "modern_runs.csv"])
def test_every_given_row_stated_with_evaluate_reproduces_check_published(name, tmp_path):
    checks = {c.run.run_id: c for c in check_published(DATA / name)[0]}
    table = list(csv.DictReader(open(DATA / name)))
    assert len(checks) >= (19 if name.startswith("published") else 150)
    for row in table:
        if row["id"] in checks:
            argv, step_s = _stated(row, tmp_path, table)
            assert step_s == pytest.approx(checks[row["id"]].estimate.step_time_s, rel=1e-9), (row["id"], argv)


def test_a_stated_row_names_its_runtime_and_only_flags_a_user_has(tmp_path):
    table = list(csv.DictReader(open(DATA / "modern_runs.csv")))
    rows = {r["id"]: r for r in table}
    argv = stated_argv(rows["tt-13"], tmp_path, cells_only=True)
    assert argv[argv.index("--runtime") + 1] == "torchtitan"
    assert "--micro-batch" not in argv  # its cell is torchtitan's local batch: the runtime splits it over pp
    from autotune.cli.main import build_parser

    build_parser().parse_args(argv)  # every flag is one evaluate has
    sc21 = next(r for r in csv.DictReader(open(DATA / "published_runs.csv")) if r["id"] == "sc21-t1-1")
    argv = stated_argv(sc21, tmp_path)
    assert argv[argv.index("--runtime") + 1] == "megatron-2021"


def test_the_model_config_a_row_states_is_read_as_the_row_is(tmp_path):
    from autotune.calibrate.modern import _model, framework_of
    from autotune.spec.presets import resolve_model

    for row in csv.DictReader(open(DATA / "modern_runs.csv")):
        if row.get("arch") == "moe":
            continue
        path = tmp_path / f"{row['id']}.json"
        path.write_text(json.dumps(model_config(row, legacy_dropout=False)))
        read, built = resolve_model(str(path)), _model(row, framework_of(row))
        assert read.num_parameters() == built.num_parameters() and read.ffn_activation == built.ffn_activation, row["id"]
