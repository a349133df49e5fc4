"""The reference torch MoE: FLOPs against the analytic graph, and real expert-parallel runs
(all-to-all over gloo) against one process and the prediction."""

import json

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from autotune.cli.main import main  # noqa: E402
from autotune.graph.table import model_tables  # noqa: E402
from autotune.plan.builders import uniform_plan  # noqa: E402
from autotune.spec.runtime import load_runtime  # noqa: E402
from autotune.plan.io import write_plan_file  # noqa: E402
from autotune.spec.workload import TrainingWorkload  # noqa: E402
from autotune.validate.model import build_model  # noqa: E402
from moe_models import MIXTRAL_8X7B, tiny_moe  # noqa: E402


@pytest.mark.parametrize("changes", [{}, {"router": "sigmoid_topk", "num_shared_experts": 0},
                                     {"router": "topk_softmax", "ffn_activation": "gelu", "num_layers": 6,
                                      "moe_layer_frequency": 2}])
def test_torch_moe_flops_match_the_analytic_graph(changes):
    spec = tiny_moe(**changes)
    model = build_model(spec, attention_impl="unfused")  # attention as counted matmuls
    batch, seq = 2, 128
    tokens = torch.randint(0, spec.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        model(tokens)
    analytic = model_tables(spec, seq, 4, "unfused").model_flops_per_sequence() / 3 * batch
    # the router GEMM, the experts' matmuls over the routed rows only (dropless), the shared expert
    assert counter.get_total_flops() == pytest.approx(analytic, rel=0.02)


@pytest.mark.parametrize("changes", [{}, {"router": "topk_softmax", "ffn_activation": "gelu", "num_layers": 6,
                                      "moe_layer_frequency": 2}, {"shared_expert_gate": True},
                                     {"router": "topk_sigmoid", "router_bias": True}])
def test_traced_moe_graph_matches_the_analytic_graph(changes):
    from profilers.trace import trace_module
    spec = tiny_moe(**changes)
    traced = trace_module(build_model(spec, device="meta"), (torch.zeros(1, 128, dtype=torch.long, device="meta"),))
    tables = model_tables(spec, 128, 4)
    assert traced.model_flops == pytest.approx(tables.model_flops_per_sequence() / 3, rel=0.02)
    assert traced.num_params == tables.num_params


@pytest.mark.parametrize("router", ["softmax_topk", "topk_sigmoid"])
def test_traced_form_computes_what_the_per_expert_form_does(router):
    from autotune.validate.moe_model import _gates
    spec = tiny_moe(first_k_dense_layers=0, router=router)
    layer = build_model(spec).layers["0"].feed_forward
    tokens = torch.randn(16, spec.hidden_size)
    with torch.no_grad():
        eager = layer(tokens[None])[0]
        weights, idx = _gates(layer.router(tokens), spec.num_experts_per_token, spec.router)
        gathered = layer._with_shared((layer._gathered(tokens, idx) * weights[..., None]).sum(1), tokens)
    assert torch.allclose(gathered, eager, atol=1e-6)


def test_moe_layer_routes_each_token_on_its_own():
    from autotune.validate.moe_model import MoEFeedForward
    spec = tiny_moe(first_k_dense_layers=0)
    layer = MoEFeedForward(spec)
    torch.nn.init.normal_(layer.experts_w1, std=0.1)
    torch.nn.init.normal_(layer.experts_w2, std=0.1)
    torch.nn.init.normal_(layer.experts_w3, std=0.1)
    x = torch.randn(2, 16, spec.hidden_size)
    out = layer(x)
    assert out.shape == x.shape and torch.isfinite(out).all()
    # a token's output only depends on its own experts: permuting tokens permutes outputs
    perm = torch.randperm(16)
    assert torch.allclose(layer(x[:, perm]), out[:, perm], atol=1e-5)


@pytest.mark.slow
def test_cli_validates_an_expert_parallel_plan(tmp_path, capsys):
    run = tmp_path / "runs" / "mixtral-16"
    # full recomputation renames the parameters (checkpoint wrapper): DDP must still leave the experts alone
    plan = uniform_plan(num_layers=32, gpus=16, micro_batch=1, global_batch=64, ep=8, zero=1, recompute="full")
    write_plan_file(run / "plan.json", plan=plan, model=MIXTRAL_8X7B,
                    workload=TrainingWorkload(global_batch=64, seq_len=4096), runtime=load_runtime("torch"),
                    cluster="dgx-h100")
    code = main(["validate", str(run), "--scale", "hidden=64,layers=4,seq=64,vocab=128,microbatches=2",
                 "--max-world", "2", "--steps", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    row = report["plans"][0]
    assert row["status"] == "ok" and row["world_size"] == 2, row
    assert row["plan"]["stages"][0]["ep"] == 2 and row["numerics_ok"]
    assert any("ep 8 -> 2" in note for note in row["notes"])
    for key in ("predicted_step_time_s", "measured_step_time_s", "predicted_peak_memory_bytes",
                "measured_peak_memory_bytes"):
        assert row[key] is not None


def test_scaling_an_expert_parallel_plan_keeps_experts_and_shrinks_ep():
    from autotune.validate.scale import parse_scale, scale_case
    plan = uniform_plan(num_layers=32, gpus=64, tp=2, micro_batch=1, global_batch=256, sequence_parallel=True,
                        ep=8, zero=1)
    case = scale_case(MIXTRAL_8X7B, TrainingWorkload(global_batch=256, seq_len=4096), plan,
                      parse_scale("hidden=64,layers=4,seq=64,vocab=128,microbatches=2", world=2))
    stage = case.plan.stages[0]
    assert (stage.tp, stage.dp, stage.ep, stage.zero) == (1, 2, 2, 0)  # tp folded into dp; DDP beside experts
    assert case.model.num_experts == 8 and case.model.num_experts_per_token == 2
    assert case.model.expert_ffn_hidden_size == 14336 * case.model.hidden_size // 4096
    assert any("ep 8 -> 2" in note for note in case.notes) and any("zero 1 -> 0" in note for note in case.notes)


def _scaled_plan_e():
    """Plan e of the H200 runs (olmoe-1b-7b, 8 x 2048, full recomputation), scaled as
    ``validate --scale`` scales it, its bf16 kept."""
    from pathlib import Path
    from autotune.plan.io import read_plan_file
    from autotune.validate.scale import parse_scale, scale_case
    e = read_plan_file(Path(__file__).parent / "data" / "h200" / "plans" / "e-olmoe.json")
    return scale_case(e.model, e.workload, e.plan, parse_scale("hidden=64,layers=2,seq=64,vocab=128,micro_batch=2",
                                                                world=1), ("bf16",))


def test_plan_e_trains_under_bf16_autocast_on_cpu():
    # it crashed on the H200: index_add_(): self (Float) and source (BFloat16) must have the same scalar type
    from autotune.validate.parallelize import apply_recompute
    case = _scaled_plan_e()
    assert case.workload.dtype == "bf16" and case.model.is_moe and case.plan.stages[0].recompute == "full"
    model = build_model(case.model, seed=0)
    apply_recompute(model, "full")
    tokens = torch.randint(0, case.model.vocab_size, (case.plan.micro_batch, case.workload.seq_len + 1),
                           generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    layer = model.layers["1"]._checkpoint_wrapped_module.feed_forward
    assert layer.experts_w1.grad.abs().sum() > 0  # the routed experts learn


@pytest.mark.slow
def test_cli_validates_plan_e_in_bf16_on_cpu(tmp_path, capsys):
    # the whole runner (worker process, reference losses) under bf16 autocast: the H200 cluster's
    # profile scores bf16, so the scaled case keeps it
    import shutil
    from pathlib import Path
    plan = tmp_path / "e-olmoe.json"
    shutil.copy(Path(__file__).parent / "data" / "h200" / "plans" / "e-olmoe.json", plan)
    code = main(["validate", str(plan), "--cluster", "dgx-h200", "--scale", "hidden=64,layers=2,seq=64,vocab=128",
                 "--max-world", "1", "--steps", "2", "--json"])
    row = json.loads(capsys.readouterr().out)["plans"][0]
    assert code == 0 and row["status"] == "ok" and row["numerics_ok"], row
    assert row["workload"]["dtype"] == "bf16" and row["model"]["num_experts"] > 1
