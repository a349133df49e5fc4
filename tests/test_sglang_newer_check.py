"""SGLang after 0.4: tests/data/sglang_newer_check.csv, 43 published rows from newer releases and GPUs
(InferenceX DeepSeek-R1 on H200/B200, LMSYS's PD-disaggregated large-EP DeepSeek on H100 and GB200 NVL72,
GPT-OSS with DP attention on B200, gpustack's Qwen3-235B ShareGPT burst on H100). Rows naming 0.5.6 or later
take the `sglang` preset, whose memory rule (a reserve, not a fixed share) the 0.5.6 and 0.5.12 wheels'
server_args.py share (0.5.3-0.5.5: sglang-0.5.3's reserve by chunk, graphs and TP); a prefill-only or decode-only row of a
disaggregated deployment is priced as that pool's step run back to back."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_phase_rows import phase_row
from autotune.calibrate.serving_published import check_serving_rows
from autotune.calibrate.serving_rows import RowProblem, case_from_row, engine_runtime
from autotune.cost.serving_eval import ServingDeployment
from autotune.cost.serving_phase import phase_tokens_per_gpu_s
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

CHECK = Path(__file__).parent / "data" / "sglang_newer_check.csv"
# B200 TP4 DeepSeek-R1 FP8 (InferenceX 8k/1k): the recipe's --mem-fraction-static 0.95 of the B200's
# 183359 MiB leaves a KV cache beside the 157.5 GiB of weights a GPU holds (of 180e9 bytes, it did not)
TP4_B200 = {f"sglnew-{n:03d}" for n in range(12, 17)}


def _rows() -> list[dict]:
    with open(CHECK, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize(("version", "preset"), [("0.4.10", "sglang-0.4.8"), ("0.5.0rc0", "sglang-0.5.0"), ("0.5.2", "sglang-0.5.0"), ("0.5.5", "sglang-0.5.3"),
                                                 ("0.5.6", "sglang"), ("0.5.12", "sglang"), ("0.5.23", "sglang")])
def test_releases_from_0_5_6_take_the_reserve_rule_preset(version, preset):
    assert engine_runtime("sglang", version).name == preset
    assert (load_runtime(preset).serving.memory_rule in ("reserved", "sglang_reserve")) == (preset in ("sglang", "sglang-0.5.3"))


def test_a_stated_mem_fraction_replaces_sglangs_reserve():
    row = next(r for r in _rows() if r["id"] == "sglnew-001")
    engine = case_from_row(row).deployment.runtime.serving
    assert (engine.memory_rule, engine.memory_fraction) == ("static", 0.82)
    assert (engine.prefill_chunk_tokens, engine.decode_cuda_graph_max_batch) == (32768, 128)


def _dep(tp: int, cluster: str = "gb200-nvl72", dtype: str = "fp8") -> ServingDeployment:
    return ServingDeployment(model=resolve_model("deepseek-v3"), cluster=load_cluster(cluster),
                             runtime=load_runtime("sglang"), tp=tp, ep=tp, attention_dp=True, weight_dtype=dtype)


def test_a_decode_pool_gains_per_gpu_throughput_with_its_batch_and_loses_it_with_context():
    dep = _dep(16)
    small, large = (phase_tokens_per_gpu_s(dep, phase="decode", per_rank=b, context=2000) for b in (64, 512))
    assert large > 2.0 * small  # weights read once a step for more requests
    assert phase_tokens_per_gpu_s(dep, phase="decode", per_rank=512, context=8000) < large


def test_a_prefill_pool_slows_per_token_with_longer_prompts():
    dep = _dep(4)
    short, long = (phase_tokens_per_gpu_s(dep, phase="prefill", per_rank=16384, context=n) for n in (1024, 4096))
    assert long < short  # causal attention pairs grow with the prompt


def test_an_instance_spans_nodes_only_with_dp_attention_and_one_expert_group_a_gpu():
    assert _dep(32, cluster="dgx-h100").tp == 32
    with pytest.raises(AutotuneError, match="spans more than a node"):
        ServingDeployment(model=resolve_model("deepseek-v3"), cluster=load_cluster("dgx-h100"),
                          runtime=load_runtime("sglang"), tp=16, ep=16, weight_dtype="fp8")


def test_a_phase_row_needs_its_batch_and_measures_its_phases_tokens():
    row = next(r for r in _rows() if r["id"] == "sglnew-032")
    assert phase_row(row, gpus=32, gpus_per_node=8).per_gpu_to_unit == 8.0  # tokens/s per node of 8 H100s
    with pytest.raises(RowProblem, match="tokens per device"):
        phase_row(dict(row, concurrency_or_batch="prefill phase only"), gpus=32, gpus_per_node=8)
    with pytest.raises(RowProblem, match="input tokens/s"):
        phase_row(dict(row, metric="output_tokens_per_s"), gpus=32, gpus_per_node=8)
    with pytest.raises(AutotuneError, match="batch per device must be >= 1"):  # PhaseRow checks itself
        phase_row(dict(row, concurrency_or_batch="prefill phase only: 0 tokens per device"), gpus=32, gpus_per_node=8)
    assert "batch per device" in next(c.reason for c in check_serving_rows(
        [dict(row, concurrency_or_batch="prefill phase only: 0 tokens per device")]))


@pytest.mark.slow
def test_every_check_row_is_priced():
    rows = _rows()
    checks = check_serving_rows(rows)
    assert len(checks) == len(rows) == 43
    assert [c.row_id for c in checks if c.error_pct is None] == []
    assert {c.row_id for c in checks} >= TP4_B200
    phases = [c for c in checks if "phase only" in next(r for r in rows if r["id"] == c.row_id)["concurrency_or_batch"]]
    assert len(phases) == 9 and all(c.predicted > 0 for c in phases)
