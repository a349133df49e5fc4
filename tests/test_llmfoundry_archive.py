"""llm-foundry's other MPT benchmark rows (tests/data/llmfoundry_archive.csv, built by
scripts/llmfoundry_archive.py from scripts/train/benchmarking/README.md @8c8dd48): the 145 rows of
its tables that modern_runs.csv does not hold, priced with the llm-foundry defaults of the given
rows. The script asserts the 71 shared rows come out cell for cell as modern_runs.csv has them."""

from archive_rows import priced_checks, read_rows

from autotune.calibrate.published import check_published
from autotune.calibrate.regimes import overall_error


def test_every_row_is_priced_and_none_is_a_given_row(data_dir):
    priced_checks(data_dir / "llmfoundry_archive.csv")
    given = {r["id"] for r in read_rows(data_dir / "modern_runs.csv")}
    assert not given & {r["id"] for r in read_rows(data_dir / "llmfoundry_archive.csv")}


def test_archive_accuracy(data_dir):
    # 145 rows at 5.6% mean (7.0% before full recomputation stopped early), worst 28.5% (A100-40GB MPT-70b
    # on 64 GPUs at micro-batch 2, 40% slower per token than on 128 GPUs at 4; docs/published-runs.md)
    checks, _ = check_published(data_dir / "llmfoundry_archive.csv")
    total = overall_error(checks)
    assert total.mean_abs_error <= 0.06 and total.worst_abs_error <= 0.30, total
    # full checkpointing: 6.8% / +2.5% (10.8% / +8.7% before early stop); none: 4.8% / -2.5%
    for recompute, bound in (("none", 0.05), ("full", 0.07)):
        rows = overall_error([c for c in checks if c.run.plan.stages[0].recompute == recompute])
        assert rows.mean_abs_error <= bound and abs(rows.mean_signed_error) <= 0.035, (recompute, rows)


def test_shard_grad_op_rows_keep_parameters_gathered_from_forward_to_backward(data_dir):
    # composer's SHARD_GRAD_OP (written zero 2) is FSDP that does not reshard after forward
    checks, _ = check_published(data_dir / "llmfoundry_archive.csv")
    rows = {r["id"]: r for r in read_rows(data_dir / "llmfoundry_archive.csv")}
    shard_grad_op = [c for c in checks if rows[c.run.run_id]["zero"] == "2"]
    assert len(shard_grad_op) == 6
    for c in shard_grad_op:
        stage = c.run.plan.stages[0]
        assert stage.zero == 3 and not stage.reshard_after_forward, c.run.run_id
