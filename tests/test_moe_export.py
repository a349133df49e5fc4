"""MoE plans exported: Megatron-LM expert and model flags, torchtitan's expert degrees, DeepSpeed's refusal."""

import pytest

from autotune.errors import AutotuneError
from autotune.outputs.export import export_plan
from autotune.outputs.export.megatron_moe import layer_pattern
from autotune.plan.builders import uniform_plan
from autotune.plan.io import PlanFile
from autotune.spec.workload import TrainingWorkload
from moe_models import MIXTRAL_8X7B, tiny_moe
from test_export import MEGATRON, megatron_flags


def _pf(model=MIXTRAL_8X7B, **degrees):
    work = TrainingWorkload(global_batch=64, seq_len=min(4096, model.max_seq_len))
    plan = uniform_plan(num_layers=model.num_layers, global_batch=64, **degrees)
    return PlanFile(plan=plan, model=model, workload=work, cluster="dgx-h100")


def _check_documented(flags):
    for flag, value in flags.items():
        assert flag in MEGATRON, f"{flag} is not a Megatron-LM option"
        kind, choices = MEGATRON[flag]
        assert (value is None) == (kind == "switch"), f"{flag}: switch/value mismatch ({value!r})"
        assert not choices or value in choices, f"{flag} {value} not in {choices}"


def test_megatron_mixtral_expert_flags():
    pf = _pf(gpus=16, tp=2, sequence_parallel=True, zero=1, ep=4, etp=1)
    flags = megatron_flags(export_plan(pf, "megatron"))
    _check_documented(flags)
    assert flags["--num-experts"] == "8" and flags["--moe-router-topk"] == "2"
    assert flags["--expert-model-parallel-size"] == "4" and flags["--expert-tensor-parallel-size"] == "1"
    assert flags["--moe-ffn-hidden-size"] == "14336" and flags["--moe-layer-freq"] == "1"
    assert flags["--moe-token-dispatcher-type"] == "alltoall" and "--moe-grouped-gemm" in flags
    assert flags["--moe-router-score-function"] == "softmax" and "--moe-router-pre-softmax" not in flags
    assert flags["--rotary-base"] == "1000000" and flags["--num-query-groups"] == "8"
    assert "--moe-shared-expert-intermediate-size" not in flags


def test_megatron_first_dense_layers_shared_experts_and_modern_attention():
    m = tiny_moe(num_layers=6, first_k_dense_layers=2, num_shared_experts=2, router="sigmoid_topk",
                 qkv_bias=True, sliding_window=64, sliding_window_every=2, head_dim_size=32)
    flags = megatron_flags(export_plan(_pf(m, gpus=4, ep=2), "megatron"))
    _check_documented(flags)
    assert eval(flags["--moe-layer-freq"]) == [0, 0, 1, 1, 1, 1]  # Megatron evaluates the list expression
    assert flags["--moe-shared-expert-intermediate-size"] == str(2 * 32)
    assert flags["--moe-router-score-function"] == "sigmoid"
    assert "--add-qkv-bias" in flags and "--disable-bias-linear" in flags
    assert flags["--window-size"] == "63,0" and flags["--window-attn-skip-freq"] == "2"  # megatron.py's windows
    assert flags["--kv-channels"] == "32"


def test_layer_pattern_run_lengths():
    assert layer_pattern([0, 0, 0, 1, 1]) == "([0]*3+[1]*2)"
    assert eval(layer_pattern([1, 0, 1])) == [1, 0, 1]


def test_torchtitan_refuses_an_moe_model_it_has_no_config_function_for():
    # torchtitan 0.3 builds Qwen3-30B-A3B and DeepSeek-V3 16B/671B MoE models, no Mixtral (torchtitan_moe.py)
    with pytest.raises(AutotuneError) as err:
        export_plan(_pf(gpus=16, tp=2, sequence_parallel=True, zero=3, ep=8), "torchtitan")
    assert err.value.field == "model" and "qwen3_30b_a3b" in err.value.message and "8 experts" in err.value.message


def _qwen_pf(**degrees):
    from autotune.spec.presets import load_preset
    return _pf(load_preset("qwen3-30b-a3b"), **degrees)


def _titan_options(text):
    words = [w for line in text.splitlines() if line and not line.startswith("#") for w in line.split()]
    return {w: words[i + 1] if i + 1 < len(words) else None for i, w in enumerate(words) if w.startswith("--")}


def test_torchtitan_exports_expert_parallelism_of_qwen3_moe():
    options = _titan_options(export_plan(_qwen_pf(gpus=16, zero=3, ep=8), "torchtitan"))
    assert options["--module"] == "qwen3" and options["--config"] == "qwen3_30b_a3b"
    assert options["--parallelism.expert-parallel-degree"] == "8"
    # ep borrows tp ranks: tp 2 x dp_shard 8 = 16 ranks hold 2 x 8 EP groups
    options = _titan_options(export_plan(_qwen_pf(gpus=16, tp=2, sequence_parallel=True, zero=3, ep=16), "torchtitan"))
    assert options["--parallelism.expert-parallel-degree"] == "16" and options["--parallelism.tensor-parallel-degree"] == "2"


@pytest.mark.parametrize("degrees, field", [
    (dict(gpus=16, tp=2, sequence_parallel=True, zero=3, ep=4, etp=2), "stages.etp"),  # 0.3 has no expert TP
    (dict(gpus=16, tp=2, sequence_parallel=True, zero=3), "stages.etp"),  # ep 1: experts follow tp, etp must be 2
    (dict(gpus=16, zero=3, dp_shard=2, ep=4), "stages.ep"),  # ep 4 does not divide dp_shard 2 x cp x tp
])
def test_torchtitan_refuses_expert_layouts_it_cannot_build(degrees, field):
    with pytest.raises(AutotuneError) as err:
        export_plan(_qwen_pf(**degrees), "torchtitan")
    assert err.value.field == field, err.value


def test_torchtitan_0_2_toml_still_refuses_moe():
    with pytest.raises(AutotuneError) as err:
        export_plan(_qwen_pf(gpus=16, zero=3, ep=8), "torchtitan-0.2")
    assert err.value.field == "model"


def test_deepspeed_refuses_expert_parallelism_with_the_reason():
    with pytest.raises(AutotuneError) as err:
        export_plan(_pf(gpus=8, zero=1, ep=8), "deepspeed")
    assert err.value.field == "stages.ep" and "deepspeed.moe" in err.value.message


def test_deepspeed_exports_an_moe_model_without_expert_parallelism_with_a_note():
    text = export_plan(_pf(gpus=8, zero=1), "deepspeed")
    assert "train_batch_size" in text
    from autotune.outputs.export import export
    result = export(_pf(gpus=8, zero=1), "deepspeed")
    assert any("deepspeed.moe.layer.MoE" in note for note in result.notes)


def test_megatron_qk_norm_per_head_and_refusals():
    from autotune.spec.presets import load_preset
    qwen = load_preset("qwen3-30b-a3b")
    flags = megatron_flags(export_plan(_pf(qwen, gpus=8, ep=8), "megatron"))
    _check_documented(flags)
    assert "--qk-layernorm" in flags and flags["--kv-channels"] == "128" and flags["--num-experts"] == "128"
    with pytest.raises(AutotuneError) as err:
        export_plan(_pf(load_preset("olmoe-1b-7b"), gpus=8, ep=8), "megatron")
    assert err.value.field == "model.qk_norm"


def test_megatron_gpt_oss_sinks_windows_and_yarn():
    """Megatron-Bridge's gpt-oss flags: --softmax-type learnable, windows on odd 1-based layers, YaRN
    without rounding the correction range."""
    from autotune.spec.presets import load_preset
    flags = megatron_flags(export_plan(_pf(load_preset("gpt-oss-20b"), gpus=8, ep=8), "megatron"))
    _check_documented(flags)
    assert flags["--softmax-type"] == "learnable" and "--no-yarn-correction-range-round-to-int" in flags
    assert flags["--window-size"] == "127,0" and flags["--window-attn-skip-freq"] == "2"
    assert flags["--moe-router-score-function"] == "softmax" and flags["--moe-router-topk"] == "4"


def test_megatron_llama4_router_and_chunked_windows():
    """Llama 4's router at top-1: sigmoid of the logit on the expert's input; at top-2 and with
    chunked attention, refused."""
    top1 = tiny_moe(router="topk_sigmoid", num_experts_per_token=1)
    flags = megatron_flags(export_plan(_pf(top1, gpus=4, ep=2), "megatron"))
    _check_documented(flags)
    assert flags["--moe-router-score-function"] == "sigmoid" and "--moe-apply-probs-on-input" in flags
    gemma3_like = tiny_moe(sliding_window=32, full_attention_every=4)
    assert megatron_flags(export_plan(_pf(gemma3_like, gpus=4, ep=2), "megatron"))["--window-attn-skip-freq"] == "4"
    for model, field in ((tiny_moe(router="topk_sigmoid"), "model.router"),
                         (tiny_moe(sliding_window=32, window_kind="chunked"), "model.window_kind")):
        with pytest.raises(AutotuneError) as err:
            export_plan(_pf(model, gpus=4, ep=2), "megatron")
        assert err.value.field == field
