"""LMSYS's GB200 NVL72 wide-EP DeepSeek rows (tests/data/sglang_newer_check.csv sglnew-036..040, SGLang 0.4.7 /
0.5.3): the kernels and checkpoint their notes name reach the pricing. An older release naming SGLang's
TRTLLM-gen MLA kernels takes the newest preset's measured MLA rows; an NVFP4 checkpoint that quantizes the
attention output projection (NVIDIA's -v2 releases, or the notes' words) prices it in NVFP4; the posts' EPLB
caps the busiest rank's share; SGLang's NVFP4 low-latency dispatch, where named, sends NVFP4 bytes."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.calibrate.serving_rows import case_from_row
from autotune.cost.checkpoint_layout import bf16_attention_gemms
from autotune.cost.serving_eval import replica_step_model
from autotune.cost.serving_overlap import deepep_exchange_s, exchange_from_notes
from autotune.cost.serving_phase import phase_tokens_per_gpu_s
from autotune.graph.table import model_tables
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import resolve_model

CHECK = Path(__file__).parent / "data" / "sglang_newer_check.csv"


def _row(row_id: str) -> dict:
    with open(CHECK, newline="") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == row_id)


def _tokens_per_gpu_s(case) -> float:
    p = case.phase
    return phase_tokens_per_gpu_s(case.deployment, phase=p.phase, per_rank=p.per_rank, context=p.context,
                                  exchange=p.exchange)


def test_an_older_release_naming_the_trtllm_mla_kernels_takes_their_measured_rows():
    row = _row("sglnew-040")  # SGLang 0.5.3: the sglang-0.4 preset, no measured MLA rows of its own
    named = case_from_row(row).deployment.runtime.serving
    assert named.mla_decode_attention and named.mla_prefill_attention
    for notes in (row["notes"].replace("TensorRT-LLM Attention", "attention"),
                  row["notes"].replace("TensorRT-LLM Attention", "attention") + "; --attention-backend cutlass_mla"):
        assert not case_from_row(dict(row, notes=notes)).deployment.runtime.serving.mla_decode_attention
    flag = dict(row, notes=row["notes"].replace("TensorRT-LLM Attention", "attention") + "; --attention-backend trtllm_mla")
    assert case_from_row(flag).deployment.runtime.serving.mla_decode_attention == named.mla_decode_attention


def test_the_measured_fp8_latent_read_beats_the_generic_mla_roofline():
    # the generic MLA decode is FLOP-bound at 128 heads whatever the cache dtype; the measured TRTLLM-gen kernel
    # reads an FP8 latent at about half a BF16 one's cost, so naming it speeds the FP8-cache decode pool up
    row = _row("sglnew-040")
    generic = case_from_row(dict(row, notes=row["notes"].replace("TensorRT-LLM Attention", "attention")))
    assert _tokens_per_gpu_s(case_from_row(row)) > 1.15 * _tokens_per_gpu_s(generic)


@pytest.mark.parametrize(("hf_model_id", "words", "expected"), [
    ("nvidia/DeepSeek-R1-0528-FP4-v2", "", True), ("nvidia/DeepSeek-R1-0528-NVFP4-v2", "", True),
    ("nvidia/DeepSeek-R1-0528-FP4", "", False), ("deepseek-ai/DeepSeek-V3", "NVFP4 MoE and output projection", True),
    ("deepseek-ai/DeepSeek-V3", "NVFP4 MoE", False)])
def test_the_checkpoint_or_the_notes_put_the_output_projection_in_nvfp4(hf_model_id, words, expected):
    row = _row("sglnew-040")
    row = dict(row, hf_model_id=hf_model_id, notes=row["notes"].replace("NVFP4 MoE and output projection", words))
    model = case_from_row(row).deployment.model
    assert model.nvfp4_out_proj is expected
    table = model_tables(model, 1, 2.0, "flash").moe_layer
    kept = {n for n, bf16 in zip(table.names, bf16_attention_gemms(model, table)) if bf16}
    assert ("out_proj" in kept) is not expected and "q_up" in kept


def test_an_nvfp4_output_projection_is_held_and_run_in_four_bits():
    case = case_from_row(_row("sglnew-040"))
    assert case.deployment.model.nvfp4_out_proj
    bf16 = replace(case.deployment, model=case.deployment.model.with_changes(nvfp4_out_proj=False))
    fp4_step, bf16_step = (replica_step_model(d, max_tokens=1408 * 48, max_sampled=1408 * 48) for d in (case.deployment, bf16))
    assert fp4_step.weight_bytes_per_gpu < bf16_step.weight_bytes_per_gpu
    assert _tokens_per_gpu_s(case) > _tokens_per_gpu_s(replace(case, deployment=bf16))


def test_the_gb200_posts_run_eplb_and_it_caps_the_busiest_rank():
    for row_id in ("sglnew-036", "sglnew-037", "sglnew-038", "sglnew-039", "sglnew-040"):
        assert case_from_row(_row(row_id)).deployment.eplb
    case = case_from_row(_row("sglnew-038"))
    unbalanced = replace(case, deployment=replace(case.deployment, eplb=False))
    assert _tokens_per_gpu_s(case) > 1.3 * _tokens_per_gpu_s(unbalanced)  # 48 ranks: 3.9x the mean without it


@pytest.mark.parametrize(("notes", "phase", "expected"), [
    ("--moe-a2a-backend deepep; SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH=1", "decode", True),
    ("--moe-a2a-backend deepep; SGLANG_MOE_NVFP4_DISPATCH: '1'", "decode", True),
    ("DeepEP low_latency; 'Fusing NVFP4 in DeepEP'", "decode", True),
    ("--moe-a2a-backend deepep; SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH=0", "decode", False),
    ("--moe-a2a-backend deepep; SGLANG_CUTEDSL_MOE_NVFP4_DISPATCH=1", "prefill", False),  # normal kernels: FP8
])
def test_sglangs_nvfp4_dispatch_is_read_from_its_environment_or_words(notes, phase, expected):
    assert exchange_from_notes(notes, phase).nvfp4_dispatch is expected


def test_an_nvfp4_dispatch_sends_about_half_the_fp8_bytes_and_combines_the_same():
    model, cluster = resolve_model("deepseek-v3"), load_cluster("gb200-nvl72")
    fp8 = deepep_exchange_s(model, cluster, ep=48, tokens_per_rank=1408, mode="low_latency")
    fp4 = deepep_exchange_s(model, cluster, ep=48, tokens_per_rank=1408, mode="low_latency", nvfp4=True)
    assert fp4[0] == pytest.approx(fp8[0] * (0.5 + 1 / 16 + 16 / 7168) / (1 + 4 / 128 + 16 / 7168), rel=1e-9)
    assert fp4[1] == fp8[1]
    case = case_from_row(_row("sglnew-040"))
    assert case.phase.exchange.nvfp4_dispatch
    fp8_dispatch = replace(case, phase=replace(case.phase, exchange=replace(case.phase.exchange, nvfp4_dispatch=False)))
    assert _tokens_per_gpu_s(case) > _tokens_per_gpu_s(fp8_dispatch)
    fp8_weights = replace(case, deployment=replace(case.deployment, weight_dtype="fp8"))  # FP8 experts: FP8 dispatch
    fp8_both = replace(fp8_dispatch, deployment=fp8_weights.deployment)
    assert _tokens_per_gpu_s(fp8_weights) == pytest.approx(_tokens_per_gpu_s(fp8_both), rel=1e-12)
