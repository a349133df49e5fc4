"""scripts/mixtral_dense_control.py types TensorRT-LLM v0.17's TP 1 FP8 overview rows of Mixtral 8x7B, Mistral 7B
and Llama 3.1 8B. The two its check file already holds must carry the check rows' values (a typo in the table shows
up here), the typed rows must price the deployments they name, and the control rests on Mixtral being Mistral 7B
with its MLP made experts: the same layers, hidden size and attention, the expert the MLP's shape (the registry's
Mistral 7B is v0.3's config, whose vocabulary is 768 tokens wider than v0.1's 32,000: a head 2.4% wider)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from autotune.calibrate.serving_rows import case_from_row

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("mixtral_dense_control", ROOT / "scripts" / "mixtral_dense_control.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_table_holds_the_check_rows_values():
    script = _script()
    with open(ROOT / "tests" / "data" / "serving_runs.csv", newline="") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    h200, h100 = script.TABLE["Mixtral-8x7B"][script.LENGTHS.index((128, 2048))]
    assert (h200, h100) == (float(rows["trt017-017"]["value"]), float(rows["trt017-021"]["value"]))
    assert rows["trt017-017"]["concurrency_or_batch"].endswith(f"num_requests={script.REQUESTS[(128, 2048)]}")


def test_the_typed_rows_name_one_gpu_tp1_fp8_deployments_of_each_model():
    _, rows = _script().overview_rows()
    assert len(rows) == 3 * 9 * 2
    seen = set()
    for row in rows:
        dep = case_from_row(row).deployment
        assert (dep.tp, dep.dtype) == (1, "fp8"), row["id"]
        seen.add((dep.model.name, row["gpu"], row["isl"], row["osl"]))
    assert len(seen) == len(rows)


def test_mixtral_is_mistral_7b_with_its_mlp_made_eight_experts():
    _, rows = _script().overview_rows()
    models = {r["model"]: case_from_row(r).deployment.model for r in rows}
    mixtral, mistral = models["Mixtral-8x7B"], models["Mistral-7B"]
    same = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_activation")
    assert [getattr(mixtral, f) for f in same] == [getattr(mistral, f) for f in same]
    assert 0 <= mistral.vocab_size - mixtral.vocab_size <= 768
    assert (mixtral.num_experts, mixtral.num_experts_per_token) == (8, 2)
    assert mixtral.expert_ffn_hidden_size == mistral.ffn_hidden_size
    assert not mistral.is_moe
