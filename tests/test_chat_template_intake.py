"""vLLM 0.11.0's per-request chat-template parse (autotune/calibrate/chat_template_intake.py): which rows pay it,
how much, and that the timed templates are the files kept in tests/data/chat_templates/."""

from __future__ import annotations

import csv
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from autotune.calibrate.chat_template_intake import chat_endpoint, template_parse, with_template_parse
from autotune.calibrate.serving_rows import case_from_row, engine_runtime

DATA = Path(__file__).parent / "data"
TABLE = tomllib.loads(resources.files("autotune.data").joinpath("chat_template_parse.toml").read_text())


def _rows() -> dict:
    with open(DATA / "vllm_newer_check.csv", newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def _intake(row: dict) -> tuple[float, float, tuple[str, ...]]:
    runtime, notes = with_template_parse(engine_runtime("vllm", row["engine_version"]), row)
    return runtime.serving.frontend_intake_s, runtime.serving.frontend_intake_before_send, notes


def test_every_timed_template_is_the_kept_file_of_its_length():
    for name, t in TABLE["templates"].items():
        text = (DATA / "chat_templates" / t["file"]).read_text(encoding="utf-8")
        assert len(text) == t["characters"], name


def test_checkpoints_find_their_family_template():
    assert template_parse("deepseek-ai/DeepSeek-R1-0528").name == "deepseek_r1_0528"
    assert template_parse("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8").name == "qwen3_instruct_2507"
    assert template_parse("Qwen/Qwen3-14B").name == "qwen3"
    assert template_parse("zai-org/GLM-4.5-Air").name == "glm_4_5"
    assert template_parse("Qwen/Qwen3-Next-80B-A3B-Instruct") is None  # not timed
    assert template_parse("deepseek-ai/DeepSeek-R1").name == "deepseek_r1"  # R1's own, not R1-0528's


@pytest.mark.parametrize("hf_id, name", [
    ("deepseek-ai/DeepSeek-R1", "deepseek_r1"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3_1_instruct"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3_1_instruct"),  # the same template (SOURCES.md)
    ("meta-llama/Llama-3.2-3B-Instruct", "llama3_2_instruct"),
    ("meta-llama/Llama-3.2-11B-Vision-Instruct", "llama3_2_vision"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_scout"),
    ("google/gemma-3-27b-it", "gemma3"),
    ("microsoft/phi-4", "phi4"),
    ("moonshotai/Kimi-K2-Thinking", "kimi_k2_thinking"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3_next_80b_thinking"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_coder_30b"),
])
def test_each_checkpoint_maps_to_the_template_its_source_names(hf_id, name):
    assert template_parse(hf_id).name == name


@pytest.mark.parametrize("hf_id", ["meta-llama/Llama-4-Maverick-17B-128E-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
                                   "google/gemma-3-1b-it", "deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
                                   "Qwen/Qwen3-Coder-480B-A35B-Instruct", "moonshotai/Kimi-K2-Instruct"])
def test_checkpoints_whose_own_template_was_not_found_stay_unmapped(hf_id):
    # a sibling's template is not taken for theirs (SOURCES.md says which were not found, or why not mapped)
    assert template_parse(hf_id) is None



def test_a_0_11_chat_row_pays_its_template_parse_before_the_request_is_sent():
    row = _rows()["vn-ds-03"]
    base = engine_runtime("vllm", "0.11.0").serving
    intake_s, before, notes = _intake(row)
    extra = TABLE["templates"]["deepseek_r1_0528"]["parse_s"]["value"] - TABLE["intake_template_parse_s"]["value"]
    assert intake_s == pytest.approx(base.frontend_intake_s + extra)
    # the parse runs before the first suspension: the share before it grows to what the bench measured (0.94-0.97)
    assert before == pytest.approx((base.frontend_intake_s * base.frontend_intake_before_send + extra) / intake_s)
    assert before > 0.9 and "deepseek_r1_0528" in notes[0]


def test_a_llama_3_3_chat_row_pays_the_llama_3_1_template_parse():
    row = dict(_rows()["vn-ds-01"], hf_model_id="meta-llama/Llama-3.3-70B-Instruct")
    intake_s, _, notes = _intake(row)
    extra = TABLE["templates"]["llama3_1_instruct"]["parse_s"]["value"] - TABLE["intake_template_parse_s"]["value"]
    assert extra > 0
    assert intake_s == pytest.approx(engine_runtime("vllm", "0.11.0").serving.frontend_intake_s + extra)
    assert "llama3_1_instruct" in notes[0]


def test_a_longer_parse_costs_more_intake():
    rows = _rows()
    assert _intake(rows["vn-ds-01"])[0] > _intake(rows["vn-qw-01"])[0] > engine_runtime("vllm", "0.11.0").serving.frontend_intake_s


@pytest.mark.parametrize("change", [{"engine_version": "0.10.2"}, {"engine_version": "0.11.1"}, {"engine_version": "0.13.0"},
                                    {"source": "vLLM PR #23696 (backend vllm, /v1/completions)", "notes": ""},
                                    {"hf_model_id": "openai/gpt-oss-120b"}])
def test_rows_that_do_not_parse_per_request_are_left_alone(change):
    row = dict(_rows()["vn-ds-01"], **change)
    base = engine_runtime("vllm", row["engine_version"]).serving
    intake_s, before, notes = _intake(row)
    assert (intake_s, before, notes) == (base.frontend_intake_s, base.frontend_intake_before_send, ())


def test_an_untimed_template_is_said_not_priced():
    row = dict(_rows()["vn-ds-01"], hf_model_id="moonshotai/Kimi-K2-Instruct")
    intake_s, _, notes = _intake(row)
    assert intake_s == engine_runtime("vllm", "0.11.0").serving.frontend_intake_s
    assert "not priced" in notes[0]


def test_the_chat_endpoint_is_read_off_the_source_or_notes():
    assert chat_endpoint({"source": "gpustack ... [vllm bench serve --backend openai-chat]"})
    assert chat_endpoint({"notes": "--endpoint /v1/chat/completions"})
    assert not chat_endpoint({"source": "vLLM PR #23696", "notes": "vllm bench serve --backend vllm"})


def test_the_burst_row_carries_the_note():
    case = case_from_row(_rows()["vn-qw-03"])
    assert any("qwen3_instruct_2507" in a for a in case.assumed)
