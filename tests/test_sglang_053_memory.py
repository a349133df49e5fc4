"""SGLang 0.5.3-0.5.5 (runtimes/sglang-0.5.3.toml): decode CUDA graphs up to 512 requests on 60-160 GiB GPUs
at TP >= 4 and a KV pool beside a reserve derived from the prompt chunk, the graphs and TP
(server_args.py _handle_gpu_memory_settings in the 0.5.3-0.5.5.post1 wheels; cost/sglang_memory.py), checked
on the gpustack H100 Qwen3-235B burst (tests/data/sglang_newer_check.csv sglnew-041..043)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row, engine_runtime
from autotune.cost.serving_eval import replica_limits
from autotune.cost.sglang_memory import sglang_graph_max, sglang_reserved_bytes

CHECK = Path(__file__).parent / "data" / "sglang_newer_check.csv"
H100, A100_40, B200 = 81559 * 2**20, 40960 * 2**20, 183359 * 2**20  # MiB as nvidia-smi reports them


def _row(row_id: str) -> dict:
    with open(CHECK, newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == row_id)


@pytest.mark.parametrize(("version", "preset"), [("0.5.2", "sglang-0.5.0"), ("0.5.3", "sglang-0.5.3"),
                                                 ("0.5.5.post1", "sglang-0.5.3"), ("0.5.6", "sglang")])
def test_releases_0_5_3_to_0_5_5_take_their_own_preset(version, preset):
    assert engine_runtime("sglang", version).name == preset


def test_graph_limit_follows_memory_and_tp():
    assert (sglang_graph_max(H100, 8), sglang_graph_max(H100, 2)) == (512, 256)
    assert (sglang_graph_max(A100_40, 8), sglang_graph_max(A100_40, 1)) == (160, 32)
    engine = engine_runtime("sglang", "0.5.5").serving
    assert (engine.graph_max_on(H100, 8), engine.graph_max_on(A100_40, 8), engine.graph_max_on(B200, 8)) == (512, 160, 512)
    # the schedule replays graphs only as far as SGLang captures them: 256 at TP 1-2 on an H100 (review47)
    assert (engine.graph_max_on(H100, 2), engine.graph_max_on(A100_40, 1), engine.graph_max_on(B200, 1)) == (256, 32, 512)
    assert engine_runtime("sglang", "0.5.2").serving.graph_max_on(H100) == 160


@pytest.mark.parametrize("version", ["0.5.3", "0.5.6", "0.5.12"])
def test_preset_tiers_match_the_reserve_rule(version):
    """The schedule's graph limit and the reserve's come from one rule, from 35 GiB (the 20-35 GiB tier's TP < 4
    size is 16 in 0.5.3-0.5.4, 24 from 0.5.5)."""
    engine = engine_runtime("sglang", version).serving
    for memory in (A100_40, H100, 143771 * 2**20, B200):
        for tp in (1, 2, 4, 8):
            assert engine.graph_max_on(memory, tp) == sglang_graph_max(memory, tp)


def test_newest_preset_reserves_by_chunk_graphs_and_tp():
    """0.5.6 on (server_args.py _handle_gpu_memory_settings, 0.5.6 and 0.5.12 wheels): B200 TP 8 reserves 512 + 1.5 x
    16384 + 2 x 512 + 1024 = 27136 MiB, more than the 10 GiB floor the preset used to hold."""
    from autotune.cost.sglang_memory import engine_reserved_bytes

    engine = engine_runtime("sglang", "0.5.6").serving
    assert engine.memory_rule == "sglang_reserve"
    expected = (1 - round((183359 - 27136) / 183359, 3)) * B200
    assert engine_reserved_bytes(engine, B200, 8, False) == pytest.approx(expected)
    # H100 TP 1: 256 graphs, 1/8 GiB for TP: 512 + 12288 + 512 + 128 = 13440 MiB
    assert engine_reserved_bytes(engine, H100, 1, False) == pytest.approx((1 - round((81559 - 13440) / 81559, 3)) * H100)


def test_reserve_is_the_sources_share_of_memory():
    # H100 TP 8: 512 + 1.5 x 8192 + 2 x 512 + 1024 = 14848 MiB -> mem_fraction_static round(0.81795, 3) = 0.818
    assert sglang_reserved_bytes(memory_bytes=H100, chunk_tokens=8192, tp=8) == pytest.approx((1 - 0.818) * H100)
    # TP 1 reserves less (256 graphs, 128 MiB for TP), DP attention more, and 60+ GiB GPUs keep at least 10 GiB
    tp1 = sglang_reserved_bytes(memory_bytes=H100, chunk_tokens=8192, tp=1)
    assert tp1 < sglang_reserved_bytes(memory_bytes=H100, chunk_tokens=8192, tp=8)
    assert sglang_reserved_bytes(memory_bytes=H100, chunk_tokens=8192, tp=8, attention_dp=True) > (1 - 0.818) * H100
    assert sglang_reserved_bytes(memory_bytes=H100, chunk_tokens=2048, tp=1) >= 10 * 2**30 - 0.001 * H100


def test_qwen3_burst_gets_the_larger_kv_pool_and_graphs():
    case = case_from_row(_row("sglnew-041"))
    dep = case.deployment
    assert dep.runtime.name == "sglang-0.5.3"
    limits = replica_limits(dep, case.load)
    older = case_from_row(dict(_row("sglnew-041"), engine_version="0.5.2")).deployment
    assert limits.kv_capacity_tokens > replica_limits(older, case.load).kv_capacity_tokens
    assert "reserve" in limits.memory_note


def test_a_stated_mem_fraction_still_wins():
    row = _row("sglnew-041")
    row = dict(row, notes=row["notes"].replace("--tp-size 8", "--tp-size 8 --mem-fraction-static 0.7"))
    engine = case_from_row(row).deployment.runtime.serving
    assert (engine.memory_rule, engine.memory_fraction) == ("static", 0.7)


def test_export_writes_the_share_sglang_would_derive():
    from autotune.outputs.export.serving import _memory_fraction

    assert _memory_fraction(case_from_row(_row("sglnew-041")).deployment) == 0.818


def test_a_launched_graph_limit_sets_the_reserve():
    """--cuda-graph-max-bs 128 on the H100 TP 8 burst: SGLang reserves 2 MiB a batch of the given limit, 512 + 1.5 x
    8192 + 2 x 128 + 1024 = 14080 MiB -> 0.827 (0.818 at the tier's 512), and the KV pool grows with it."""
    from autotune.outputs.export.serving import _memory_fraction

    row = _row("sglnew-041")
    launched = case_from_row(dict(row, notes=row["notes"].replace("--tp-size 8", "--tp-size 8 --cuda-graph-max-bs 128")))
    assert launched.deployment.runtime.serving.graph_max_on(H100) == 128
    assert _memory_fraction(launched.deployment) == 0.827
    tier = case_from_row(row)
    assert replica_limits(launched.deployment, launched.load).kv_capacity_tokens > \
        replica_limits(tier.deployment, tier.load).kv_capacity_tokens
