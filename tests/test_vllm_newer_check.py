"""vLLM's V1 engine (0.10-0.18) as published runs measured it: tests/data/vllm_newer_check.csv (gpustack's
performance lab on H100/H200, vLLM PR #23696's B200 run, SemiAnalysis InferenceX's gpt-oss sweep on H100). Every row is priced; the
profiled activation peak that sizes vLLM's KV cache is its own kernels' (fused-MoE caches, the dummy
sampler's logits), and a quoted --async-scheduling overlaps the host's step work with the GPU's."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.calibrate.serving_published import check_serving_rows, summarise
from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.serving_eval import run_serving
from autotune.cost.serving_limits import activation_bytes_per_token, vllm_profile_peak_bytes
from autotune.spec.presets import resolve_model

CHECK = Path(__file__).parent / "data" / "vllm_newer_check.csv"


def _rows(*ids: str) -> list[dict]:
    with open(CHECK, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r for r in rows if r["id"] in ids] if ids else rows


@pytest.mark.slow  # 17 s on the 2-core dev machine
def test_every_check_row_is_priced_by_the_v1_preset_of_its_release():
    rows = _rows()
    checks = check_serving_rows(rows)
    assert len(checks) == len(rows) == 42
    assert [(c.row_id, c.reason) for c in checks if c.error_pct is None] == []
    # 0.10.2, 0.11.0, 0.13+: the 0.9.2-0.13 V1 defaults (the hybrid KV cache manager on since 0.9.2)
    assert {c.runtime for c in checks} == {"vllm-0.9.2"}
    kinds = {g.group: g.num_rows for g in summarise(checks, by="engine,kind")}
    assert kinds == {"vllm | latency": 17, "vllm | throughput": 25}  # total_token_throughput is a throughput


def test_fixed_concurrency_rows_price_within_the_latency_target_on_average():
    # InferenceX's sweep: 10 x concurrency requests at a fixed concurrency, no burst of 1,000 at once. Its script
    # forces Marlin (VLLM_MXFP4_USE_MARLIN=1), whose padded experts a decode step reads (14% more bytes at TP8):
    # 7.2% mean abs before the padding, 11-12% after, the worst row (vn-ix-01, TPOT at concurrency 4) +21%
    checks = check_serving_rows([r for r in _rows() if r["id"].startswith("vn-ix")])
    errors = [abs(c.error_pct) for c in checks]
    assert sum(errors) / len(errors) < 15.0 and max(errors) < 25.0, [(c.row_id, round(c.error_pct, 1)) for c in checks]


def test_the_moe_profile_peak_is_the_fused_moe_caches_not_a_training_tile():
    model = resolve_model("gpt-oss-120b")
    peak = vllm_profile_peak_bytes(model, tp=1, ep=1, tokens=8192, seqs=1024)
    # sampler: 1024 x 201,088 logits in BF16 and their float32 copy; fused MoE: 8192 x 4 x (5760 + 2880) x 2 B
    assert peak == pytest.approx(max(1024 * model.vocab_size * 6.0, 8192 * 4 * (5760 + 2880) * 2.0))
    assert peak < 0.2 * activation_bytes_per_token(model, 1) * 8192
    # experts whole under EP: the caches are as wide as one unsplit expert
    ep = vllm_profile_peak_bytes(resolve_model("qwen3-235b-a22b"), tp=4, ep=4, tokens=8192, seqs=1)
    assert ep == pytest.approx(8192 * 8 * (4096 + 1536) * 2.0)


def test_a_dense_models_peak_is_the_tile_every_engine_uses():
    # the shipped vLLM 0.6 rows (V0, Llama 3) keep the widest-operator peak; V1 adds the sampler's logits
    model = resolve_model("llama3-8b")
    for tokens in (2048, 8192, 131072):
        assert vllm_profile_peak_bytes(model, tp=1, ep=1, tokens=tokens, seqs=256, v1=False) == pytest.approx(
            activation_bytes_per_token(model, 1) * tokens)
    assert vllm_profile_peak_bytes(model, tp=1, ep=1, tokens=2048, seqs=256) == pytest.approx(256 * 128256 * 6.0)


def test_a_32k_prompt_fits_where_vllm_started_with_max_model_len_32768():
    # vLLM refuses to start unless one --max-model-len request fits; gpustack's run did start and serve it
    case = case_from_row(_rows("vn-go-11")[0])
    limits = run_serving(case.deployment, case.load).limits
    assert limits.kv_capacity_tokens >= 32768


def test_async_scheduling_in_the_notes_overlaps_the_v1_host_with_the_gpu():
    row = _rows("vn-go-12")[0]
    sync = case_from_row(row).deployment.runtime.serving
    overlapped = case_from_row(dict(row, notes=row["notes"] + "; --async-scheduling")).deployment.runtime.serving
    assert (sync.host_overlap, overlapped.host_overlap) == ("none", "all")
    assert sync.step_host_s_per_seq > 0  # the host's step work grows with the sequences in the step
    later = dict(row, engine_version="0.14.0")  # on by default from 0.14.0: no host time left; the flag turns it off
    default = case_from_row(later).deployment.runtime.serving
    assert default.step_host_s + default.step_host_s_per_seq == 0.0
    off = case_from_row(dict(later, notes=row["notes"] + "; --no-async-scheduling")).deployment.runtime.serving
    assert (off.host_overlap, off.step_host_s_per_seq) == ("none", sync.step_host_s_per_seq)
    checks = {c.row_id: c for c in check_serving_rows(_rows("vn-go-12", "vn-go-14"))}
    # TP 2 with --async-scheduling decodes 4 requests faster than TP 1 without it, as measured (8.31 -> 5.75 ms)
    assert checks["vn-go-14"].predicted < checks["vn-go-12"].predicted


def test_the_qwen_teams_fp8_checkpoint_is_priced_with_its_block_scales():
    # Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 stores 128 x 128 block-scaled FP8 (its model card); the preset
    # (BF16 release) does not say so, so the row's checkpoint does: block-scaled FP8 linears and experts
    fp8 = case_from_row(_rows("vn-qw-03")[0])
    assert fp8.deployment.weight_dtype == "fp8"
    assert fp8.deployment.model.fp8_block_scaled
    assert any("128 x 128 blocks" in note for note in fp8.assumed)
    bf16 = case_from_row(_rows("vn-qw-01")[0])  # the BF16 release: nothing to scale
    assert not bf16.deployment.model.fp8_block_scaled
    # another publisher's FP8 release of the same model (ModelOpt, per-tensor) keeps the per-tensor format
    nvidia = dict(_rows("vn-qw-03")[0], hf_model_id="nvidia/Qwen3-235B-A22B-FP8")
    assert not case_from_row(nvidia).deployment.model.fp8_block_scaled
