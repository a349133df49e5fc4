"""Iteration times of published rows that gave only TFLOP/s, from their source's own FLOP count."""

import csv

import pytest

from autotune.calibrate.source_flops import derive_iter_s, nemo_llama_flops


@pytest.fixture
def rows(data_dir):
    with open(data_dir / "modern_runs.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _row(rows, run_id):
    return next(r for r in rows if r["id"] == run_id)


def test_nemo_count_is_six_times_the_layer_weights_plus_attention_and_logits(rows):
    # NeMo's llama form: 6 FLOPs per weight per token for Q, K, V, O and the three SwiGLU matrices,
    # 12 s h per layer and token for the (uncausal) score and context products, 6 h V for the logits
    row = _row(rows, "nemo-longseq-09")  # Llama 2 7B, 4K
    s, l, h, f, v = 4096, 32, 4096, 11008, 32000
    layer_weights = 4 * h * h + 3 * h * f  # 32 heads of 32: K and V as wide as Q
    tokens = int(row["global_batch"]) * s
    expected = tokens * (6 * l * layer_weights + 12 * s * h * l + 6 * h * v)
    assert nemo_llama_flops(row, 32000) == pytest.approx(expected, rel=1e-12)
    assert nemo_llama_flops(row, 32000, causal=True) < expected  # the later (Aug 2025) discount


def test_iteration_time_is_the_source_count_over_the_reported_throughput(rows):
    row = _row(rows, "nemo-longseq-17")
    derived = derive_iter_s(row, rows)
    flops = nemo_llama_flops(row, 32000)
    assert float(derived["iter_s"]) == pytest.approx(flops / (536e12 * 1024), rel=1e-5)
    faster = derive_iter_s({**row, "reported_value": "1072"}, rows)
    assert float(faster["iter_s"]) == pytest.approx(float(derived["iter_s"]) / 2, rel=1e-5)


def test_b200_long_sequence_rows_take_the_gpus_their_parallel_degrees_multiply_to(rows):
    # the table's #GPUs column (8 ... 1024) cannot hold its batch sizes; TP x CP x DP (2 ... 256) can
    for run_id, gpus in (("nemo-longseq-01", 2), ("nemo-longseq-08", 256)):
        derived = derive_iter_s(_row(rows, run_id), rows)
        assert int(derived["gpus"]) == gpus and derived["dp"] in ("2", "4")
        degrees = int(derived["tp"]) * int(derived["pp"]) * int(derived["cp"]) * int(derived["dp"])
        assert degrees == gpus and int(derived["global_batch"]) % int(derived["dp"]) == 0


def test_a_megatron_bridge_row_takes_its_sibling_rows_flops_per_token(rows):
    # nemo-mb-082 printed both tokens/s and Model TFLOP/s; nemo-mb-083 (another FP8 scaling) only TFLOP/s
    sibling = _row(rows, "nemo-mb-082")
    derived = derive_iter_s(_row(rows, "nemo-mb-083"), rows)
    assert float(derived["iter_s"]) == pytest.approx(float(sibling["iter_s"]) * 338 / 330, rel=0.002)


def test_llama3_8k_rows_take_6n_plus_causal_attention(rows):
    # Llama 3 405B on 8,192 H100 at 430 TFLOP/s, 16M tokens per step: ~12.1 s (the issue's own figure)
    derived = derive_iter_s(_row(rows, "llama3paper-1"), rows)
    assert float(derived["iter_s"]) == pytest.approx(12.1, rel=0.01)
    assert float(derive_iter_s(_row(rows, "llama3paper-2"), rows)["iter_s"]) == pytest.approx(12.08 * 430 / 400 / 2,
                                                                                                rel=0.01)


def test_rows_without_a_known_count_say_why(rows):
    row = _row(rows, "nemo-mb-083")
    alone = derive_iter_s(row, [row])
    assert isinstance(alone, str) and "FLOP count is not known" in alone
    assert "FLOP count" in derive_iter_s(_row(rows, "llama3paper-3"), rows)  # 128K: the counts differ 2.3x
    unknown = {**_row(rows, "nemo-longseq-01"), "source": "performance_long_sequence.md (NeMo 99.01)"}
    assert "no FLOP formula" in derive_iter_s(unknown, rows)
