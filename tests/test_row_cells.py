"""Published-runs CSVs from other hands: spellings mapped, malformed rows set aside one by one."""

import csv

import pytest

from autotune.calibrate.modern import GPU_CLUSTERS, framework_of
from autotune.calibrate.published import check_published, load_runs
from autotune.calibrate.row_cells import canonical_gpu, normalized_row
from autotune.cli.main import main
from autotune.errors import AutotuneError

MODERN = "tests/data/modern_runs.csv"
KNOWN = tuple(GPU_CLUSTERS)


def _rows(ids):
    with open(MODERN, newline="") as handle:
        reader = csv.DictReader(handle)
        by_id = {row["id"]: row for row in reader}
        return reader.fieldnames, [dict(by_id[i]) for i in ids]


def _write(path, fields, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("spelling, canonical", [
    ("H100-SXM5-80GB", "H100-SXM5-80GB"), ("H100-80GB", "H100-80GB"),  # known names stay as they are
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"), ("h100 sxm", "H100-SXM5-80GB"),
    ("H100 96GB", "H100-96GB-HBM2e-500W"), ("H200-SXM-141GB", "H200"), ("DGX B200", "B200"),
    ("GB200 NVL72", "GB200"), ("A100-SXM4-40GB", "A100-40GB"), ("A100 80GB SXM", "A100-SXM4-80GB"),
])
def test_gpu_spellings_map_to_the_part_they_name(spelling, canonical):
    assert canonical_gpu(spelling, KNOWN) == canonical


@pytest.mark.parametrize("spelling", ["A100", "A100-PCIe-80GB", "H100 PCIe", "H100 NVL", "H800", "H20",
                                      "GB300", "V100-32GB", "MI300X", ""])
def test_ambiguous_or_other_boards_are_not_guessed(spelling):
    assert canonical_gpu(spelling, KNOWN) is None


def test_cells_are_spelled_canonically():
    _, (row,) = _rows(["nemo-2407-01"])
    row.update(precision="BF16", sequence_parallel="True", zero="ZeRO-1", recompute="Full", tp=" 4 ", gpu="H100 SXM")
    cells, why = normalized_row(row, KNOWN)
    assert why == ""
    assert (cells["precision"], cells["sequence_parallel"], cells["zero"], cells["recompute"], cells["tp"],
            cells["gpu"]) == ("bf16", "yes", "1", "full", "4", "H100-SXM5-80GB")


@pytest.mark.parametrize("column, value, says", [
    ("tp", "x", "tp: 'x' is not a whole number"), ("seq", "4k", "seq:"), ("global_batch", "1.5", "global_batch:"),
    ("micro_batch", "0", "micro_batch:"), ("iter_s", "n/a", "iter_s:"), ("iter_s", "-1", "iter_s:"),
    ("recompute", "block", "full, selective, none"), ("zero", "4", "zero:"), ("precision", "int4", "precision:"),
    ("gpu", "MI300X", "gpu: no preset"), ("layers", "", "layers: empty"),
])
def test_a_malformed_cell_names_its_column(column, value, says):
    _, (row,) = _rows(["nemo-2407-01"])
    row[column] = value
    cells, why = normalized_row(row, KNOWN)
    assert cells is None and says in why


def test_one_bad_row_leaves_the_others_priced(tmp_path):
    fields, rows = _rows(["nemo-2407-01", "nemo-2407-02", "tt-01"])
    good, _ = check_published(_write(tmp_path / "good.csv", fields, rows))
    rows[1]["tp"] = "four"
    rows[2]["gpus"] = "7"  # the degrees do not multiply to it: caught when the plan is built
    checks, skipped = check_published(_write(tmp_path / "bad.csv", fields, rows))
    assert [c.run.run_id for c in checks] == ["nemo-2407-01"]
    assert checks[0].estimate.step_time_s == good[0].estimate.step_time_s
    reasons = {s.run_id: s.reason for s in skipped}
    assert "tp: 'four'" in reasons["nemo-2407-02"] and "gpus" in reasons["tt-01"]


def test_respelled_rows_predict_what_the_shipped_spelling_does(tmp_path):
    fields, rows = _rows(["nemo-2407-01", "tt-01"])
    shipped, _ = check_published(_write(tmp_path / "a.csv", fields, rows))
    rows[0].update(gpu="NVIDIA H100 80GB HBM3", precision="FP8")
    rows[1].update(gpu="H100 96GB", precision="BF16")
    respelled, skipped = check_published(_write(tmp_path / "b.csv", fields, rows))
    assert not skipped
    assert [c.estimate.step_time_s for c in respelled] == [c.estimate.step_time_s for c in shipped]


def test_a_missing_column_refuses_the_file_naming_it(tmp_path, capsys):
    fields, rows = _rows(["nemo-2407-01"])
    fields = [f for f in fields if f != "tp"]
    path = _write(tmp_path / "x.csv", fields, [{k: v for k, v in r.items() if k != "tp"} for r in rows])
    with pytest.raises(AutotuneError, match="tp"):
        load_runs(path)
    assert main(["check-published", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tp" in err[0]


@pytest.mark.parametrize("name, framework", [
    ("MosaicML Composer", "llm-foundry"), ("Megatron-LM", "megatron"), ("megatron-core 0.12", "megatron"),
    ("NeMo 2.0 (megatron-core)", "nemo"), ("torchtitan (FSDP2)", "torchtitan"), ("", "megatron"),
])
def test_framework_names(name, framework):
    assert framework_of({"framework": name}) == framework
