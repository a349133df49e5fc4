"""Host dispatch (cost/host.py): the GPU waiting for an eager host to issue its kernels."""

import pytest

from autotune.cost.evaluate import evaluate_plan
from autotune.cost.host import LAYER_OPS, exposed_host_s, host_cpu, layer_host_s, op_host_s
from autotune.errors import AutotuneError
from autotune.plan.builders import uniform_plan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.model import ModelSpec
from autotune.spec.runtime import Runtime
from autotune.spec.workload import TrainingWorkload
from moe_models import MIXTRAL_8X7B

H100 = load_cluster("dgx-h100")


def _dense(hidden: int, layers: int = 4) -> ModelSpec:
    return ModelSpec(name=f"dense-{hidden}", num_layers=layers, hidden_size=hidden, num_heads=hidden // 64,
                     num_kv_heads=hidden // 64, ffn_hidden_size=4 * hidden, ffn_activation="swiglu", vocab_size=32000,
                     max_seq_len=8192, tied_embeddings=False, norm="rmsnorm", bias=False, position_embedding="rotary")


NEUTRAL = Runtime(name="neutral")  # host hidden, no CUDA graphs: the old default workload's pricing


def _step(model, cluster=H100, seq_len=128, micro_batch=1, gpus=8, ep=1, **runtime):
    w = TrainingWorkload(global_batch=8 * micro_batch, seq_len=seq_len)
    plan = uniform_plan(num_layers=model.num_layers, gpus=gpus, micro_batch=micro_batch, global_batch=8 * micro_batch,
                        zero=1, ep=ep)
    return evaluate_plan(model, w, cluster.for_gpus(gpus), plan, runtime=NEUTRAL.with_changes(**runtime))


def test_small_layers_wait_for_the_host():
    tiny = _dense(256)
    eager, hidden = _step(tiny, host_dispatch="eager"), _step(tiny)
    assert hidden.breakdown["host_s"] == 0.0
    assert eager.breakdown["host_s"] > 0.0
    assert eager.step_time_s == pytest.approx(hidden.step_time_s + eager.breakdown["host_s"], rel=1e-6)


def test_big_layers_hide_the_host():
    big = _dense(8192, layers=2)
    eager, hidden = _step(big, seq_len=4096, host_dispatch="eager"), _step(big, seq_len=4096)
    assert eager.breakdown["host_s"] == 0.0
    assert eager.step_time_s == pytest.approx(hidden.step_time_s)


def test_cuda_graphs_remove_their_scopes_host_time():
    tiny = _dense(256)
    eager = _step(tiny, host_dispatch="eager").breakdown["host_s"]
    attn = _step(tiny, host_dispatch="eager", cuda_graph_scope=("attn",)).breakdown["host_s"]
    both = _step(tiny, host_dispatch="eager", cuda_graph_scope=("attn", "mlp")).breakdown["host_s"]
    full = _step(tiny, host_dispatch="eager", cuda_graph_scope=("full_iteration",)).breakdown["host_s"]
    assert eager > attn > both >= 0.0 and full == 0.0
    fwd, bwd = layer_host_s(Runtime(name="neutral", host_dispatch="eager", cuda_graph_scope=("attn", "mlp")), H100,
                            moe=False)
    assert fwd == bwd == pytest.approx(2 * op_host_s(H100))  # one graph launch per captured scope


def test_a_sync_per_moe_layer_exposes_host_time_behind_busy_gpus():
    """Mixtral's layers keep the GPU busier than the host, yet each MoE forward's wait for the
    token counts empties the queue: at least one operator's issue is exposed per layer."""
    eager = _step(MIXTRAL_8X7B, seq_len=4096, ep=8, host_dispatch="eager")
    per_microbatch = eager.breakdown["host_s"] / 1  # one micro-batch per replica
    assert per_microbatch >= MIXTRAL_8X7B.num_layers * op_host_s(H100) * 0.999
    fwd, bwd = layer_host_s(Runtime(name="neutral", host_dispatch="eager"), H100, moe=True)
    assert per_microbatch < MIXTRAL_8X7B.num_layers * (fwd + bwd)  # far from host-bound
    # a CUDA graph over the whole MoE block needs static shapes: no sync, nothing exposed
    graphed = _step(MIXTRAL_8X7B, seq_len=4096, ep=8, host_dispatch="eager",
                    cuda_graph_scope=("attn", "moe_router", "moe_preprocess", "moe"))
    assert graphed.breakdown["host_s"] == 0.0


def test_exposure_rules():
    op = 1e-5
    assert exposed_host_s(2.0, 1.0, 1.0, 3.0, op, synced_forward=False) == 0.0  # backward's lead covers forward
    assert exposed_host_s(2.0, 1.0, 1.0, 3.0, op, synced_forward=True) == pytest.approx(1.0)  # the sync resets it
    assert exposed_host_s(0.5, 0.5, 1.0, 1.0, op, synced_forward=True) == pytest.approx(op)
    assert exposed_host_s(0.0, 0.0, 1.0, 1.0, op, synced_forward=True) == 0.0  # nothing issued eagerly


def test_grace_hosts_issue_slower_than_x86():
    gb200 = load_cluster("gb200-nvl72")
    assert host_cpu(gb200) == "grace" and host_cpu(H100) == "x86" and host_cpu(load_cluster("dgx-b200")) == "x86"
    assert op_host_s(gb200) > 2 * op_host_s(H100)


def test_more_experts_per_layer_more_host_operators():
    w = Runtime(name="neutral", host_dispatch="eager")
    dense_fwd, _ = layer_host_s(w, H100, moe=False)
    moe_fwd, _ = layer_host_s(w, H100, moe=True)
    shared_fwd, _ = layer_host_s(w, H100, moe=True, shared_experts=True)
    assert dense_fwd < moe_fwd < shared_fwd
    assert shared_fwd - moe_fwd == pytest.approx(LAYER_OPS["fwd"]["mlp"] * op_host_s(H100))


@pytest.mark.parametrize("field, value", [("host_dispatch", "lazy"), ("cuda_graph_scope", ("everything",)),
                                          ("cuda_graph_scope", "attn")])
def test_bad_host_settings_are_refused(field, value):
    with pytest.raises(AutotuneError) as err:
        Runtime(name="neutral", **{field: value})
    assert err.value.field == f"runtime.{field}"


def test_nemo_moe_rows_carry_their_recipes_cuda_graphs(data_dir):
    import csv

    from autotune.calibrate.modern import modern_run_from_row

    rows = {r["id"]: r for r in csv.DictReader(open(data_dir / "modern_runs.csv"))}
    _, _, runtime, *_ = modern_run_from_row(rows["nemo-mb-042"])  # 25.11 GB200 Qwen3-30B-A3B FP8-MX
    assert runtime.host_dispatch == "eager" and runtime.cuda_graph_scope == ("moe_router", "moe_preprocess")
    _, _, runtime, *_ = modern_run_from_row(rows["nemo-mb-002"])  # 26.08 GB200 GPT-OSS: full-iteration graphs
    assert runtime.cuda_graph_scope == ("full_iteration",)
    _, _, runtime, *_ = modern_run_from_row(rows["nemo-mb-056"])  # 25.11 H100 FP8-CS: no graphs
    assert runtime.host_dispatch == "eager" and runtime.cuda_graph_scope == ()
    _, _, runtime, *_ = modern_run_from_row(rows["tt-31"])  # torchtitan: host not priced
    assert runtime.host_dispatch == "hidden"


def test_graph_scopes_read_back_from_json_as_a_tuple():
    w = Runtime(name="neutral", host_dispatch="eager", cuda_graph_scope=["attn", "mlp"])
    assert w.cuda_graph_scope == ("attn", "mlp")


def test_evaluate_flags_price_the_host(capsys):
    import json

    from autotune.cli.main import main

    def host_s(*flags):  # the default runtime, megatron, issues eagerly unless the flags say otherwise
        assert main(["evaluate", "--model", "small", "--gpus", "8", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["breakdown"]["host_s"]
    eager, graphed = host_s("--host-dispatch", "eager"), host_s("--host-dispatch", "eager", "--cuda-graph-scope", "attn")
    assert host_s("--host-dispatch", "hidden") == 0.0 and eager > graphed > 0.0
    assert host_s() == eager
    assert main(["evaluate", "--model", "small", "--gpus", "8", "--host-dispatch", "eager",
                 "--cuda-graph-scope", "attn,everything"]) == 2
    assert "cuda_graph_scope" in capsys.readouterr().err
