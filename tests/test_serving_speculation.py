"""MTP speculative decoding (cost/serving_speculative.py), read from a row's notes
(calibrate/serving_speculation.py), and the TensorRT-LLM blog rows priced in full."""

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.calibrate.serving_published import check_serving_csv
from autotune.calibrate.serving_rows import case_from_row
from autotune.calibrate.serving_speculation import speculation_from_notes
from autotune.cost import serving_experts, serving_ops, serving_step
from autotune.cost.checkpoint_layout import bf16_attention
from autotune.cost.serving_eval import ServingDeployment, replica_step_model, run_serving
from autotune.cost.serving_load import Load, metric_value
from autotune.cost.serving_speculative import MTP_ACCEPTANCE_LENGTH, Speculation, geometric_acceptance_length
from autotune.errors import AutotuneError
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model
from autotune.spec.runtime import load_runtime

BLOGS = Path(__file__).parent / "data" / "trtllm_blogs_check.csv"


def _deployment(speculation=None):
    return ServingDeployment(model=resolve_model("llama3-8b"), cluster=load_cluster("dgx-h100"),
                             runtime=load_runtime("tensorrt-llm"), tp=1, speculation=speculation)


def _step_s(dep, decodes, context=2048.0):
    step = replica_step_model(dep, max_tokens=64, max_sampled=64)
    return step.gpu_s(decodes=decodes, context=context * decodes, prefill_tokens=0, pairs=0.0, sampled=decodes)


@pytest.mark.parametrize("decodes", [1, 32])
def test_drafts_that_are_never_accepted_cost_more_than_no_speculation(decodes):
    plain = _step_s(_deployment(), decodes)
    rejected = _step_s(_deployment(Speculation(method="mtp", draft_tokens=1, acceptance_length=1.0)), decodes)
    assert rejected > plain


def test_higher_acceptance_emits_more_tokens_a_step():
    times = [_step_s(_deployment(Speculation(method="mtp", draft_tokens=3, acceptance_length=a)), 4)
             for a in (1.0, 2.0, 3.0, 4.0)]
    assert times == sorted(times, reverse=True)  # seconds per emitted token fall as A rises
    assert times[0] / times[-1] == pytest.approx(4.0)  # the same speculative step, 4x the tokens


def test_a_single_stream_decodes_faster_with_accepted_drafts():
    load = Load(kind="concurrency", num_requests=4, input_len=1024, output_len=256, concurrency=1)

    def per_user(dep):
        return 1.0 / metric_value(run_serving(dep, load).trace, "tpot_mean")

    plain = per_user(_deployment())
    mtp = per_user(_deployment(Speculation(method="mtp", draft_tokens=3, acceptance_length=2.8)))
    assert plain < mtp < 2.8 * plain  # the drafts and the wider verification are not free


def test_geometric_acceptance_length():
    assert geometric_acceptance_length(3, 0.0) == 1.0
    assert geometric_acceptance_length(1, 0.85) == pytest.approx(1.85)
    assert geometric_acceptance_length(3, 0.85) > geometric_acceptance_length(2, 0.85) > geometric_acceptance_length(2, 0.5)
    with pytest.raises(AutotuneError, match="acceptance"):
        geometric_acceptance_length(3, 1.0)


def test_acceptance_length_is_bounded_by_the_drafts():
    with pytest.raises(AutotuneError, match="acceptance"):
        Speculation(method="mtp", draft_tokens=2, acceptance_length=3.5)
    with pytest.raises(AutotuneError, match="MTP"):
        Speculation(method="eagle", draft_tokens=2, acceptance_length=2.0)


def test_notes_in_trtllm_spelling():
    yaml = "extra-llm-api-config.yml: speculative_config: decoding_type: MTP, num_nextn_predict_layers: 3"
    spec, assumed = speculation_from_notes(yaml + "; acceptance length 2.82 (the table's 'Acceptance Rate')")
    assert (spec.draft_tokens, spec.acceptance_length) == (3, 2.82) and "stated" in assumed[0]
    spec, _ = speculation_from_notes("--spec_decode_algo MTP --spec_decode_nextn 2, acceptance rate 80%")
    assert spec.acceptance_length == pytest.approx(1 + 0.8 + 0.64)  # a per-draft probability
    spec, assumed = speculation_from_notes(yaml + "; MTP acceptance not stated")
    assert spec.acceptance_length == MTP_ACCEPTANCE_LENGTH[3] and "tech blog 1" in assumed[0]
    spec, _ = speculation_from_notes(yaml.replace(": 3", ": 7"))  # past the measured table: its last
    assert spec.acceptance_length == MTP_ACCEPTANCE_LENGTH[5]
    spec, _ = speculation_from_notes(yaml + '; response "avg_decoded_tokens_per_iter": 2.4')
    assert spec.acceptance_length == 2.4
    assert speculation_from_notes("no speculative decoding (it does not use MTP)") == (None, ())
    spec, assumed = speculation_from_notes("speculative_config: decoding_type: Eagle, max_draft_len: 3")
    assert spec is None and "not modelled" in assumed[0]


def test_mla_nvfp4_checkpoints_keep_attention_in_bf16(monkeypatch):
    deepseek, llama = resolve_model("deepseek-v3"), resolve_model("llama3-70b")
    assert bf16_attention(deepseek, "nvfp4") and not bf16_attention(deepseek, "fp8")
    assert not bf16_attention(llama, "nvfp4")
    dep = ServingDeployment(model=deepseek, cluster=load_cluster("dgx-b200"), runtime=load_runtime("tensorrt-llm-1.0"),
                            tp=8, ep=8, weight_dtype="nvfp4")
    step = replica_step_model(dep, max_tokens=1, max_sampled=1)
    fp8 = replica_step_model(replace(dep, weight_dtype="fp8"), max_tokens=1, max_sampled=1)
    assert step.weight_bytes_per_gpu < fp8.weight_bytes_per_gpu  # the experts still in 4.5 bits
    # the same checkpoint with its attention projections in NVFP4 too: fewer bytes held, and its attention GEMMs
    # priced at another rate (at batch 1 the NVFP4 fit, activation quantization included, is the slower one)
    serving_step._step_model.cache_clear()
    monkeypatch.setattr(serving_experts, "bf16_attention", lambda model, dtype: False)  # the GEMMs priced
    monkeypatch.setattr(serving_ops, "bf16_attention", lambda model, dtype: False)  # the weights held
    try:
        all_fp4 = replica_step_model(dep, max_tokens=1, max_sampled=1)
    finally:
        serving_step._step_model.cache_clear()
    assert step.weight_bytes_per_gpu > all_fp4.weight_bytes_per_gpu

    def decode_s(s):
        return s.gpu_s(decodes=1, context=2048.0, prefill_tokens=0, pairs=0.0, sampled=1)

    assert decode_s(step) != pytest.approx(decode_s(all_fp4), rel=1e-3)


def test_every_blog_row_reads_as_a_case():
    with BLOGS.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    cases = [case_from_row(r) for r in rows]  # RowProblem on any refusal
    assert len(cases) == len(rows) >= 15
    assert sum(c.deployment.speculation is not None for c in cases) >= 5


@pytest.mark.slow  # about 5 s alone, 40 s on a busy 2-core machine
def test_the_blog_rows_are_priced_in_full():
    checks = check_serving_csv(BLOGS)
    assert len(checks) >= 15
    assert [c.row_id for c in checks if c.predicted is None] == []
    mtp = [c for c in checks if any("MTP" in a for a in c.assumed)]
    assert len(mtp) >= 5
