"""Full recomputation under PyTorch's non-reentrant checkpoint stops early: what the backward reads
exists again before a block's FFN down projection runs, so that GEMM and the residual add after it
are not rerun (Runtime.recompute_early_stop, cost/recompute_modules.py EARLY_STOP_SKIPPED)."""

import subprocess
import sys
from dataclasses import astuple, replace

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from autotune.calibrate.published import load_runs
from autotune.cost.contract import stage_cost
from autotune.cost.recompute_modules import EARLY_STOP_SKIPPED, early_stop_skipped_fwd_s
from autotune.cost.stage import StageContext, StagePosition, _block
from autotune.graph import model_tables
from autotune.plan.plan import StagePlan
from autotune.spec.hardware_data import load_cluster
from autotune.spec.presets import load_preset
from autotune.spec.runtime import Runtime, load_runtime
from autotune.spec.workload import TrainingWorkload

POS = StagePosition(inflight=2.0, neighbors=2, p2p_inter_node=False)


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class _PreNormBlock(nn.Module):
    def __init__(self, hidden, dropout):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        q, k, v = self.qkv(self.n1(x)).chunk(3, -1)
        x = x + self.out(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        return x + self.drop(self.down(nn.functional.gelu(self.up(self.n2(x)))))


def _linears_rerun(dropout, reentrant):
    torch.manual_seed(0)
    block = _PreNormBlock(32, dropout).train()
    x = torch.randn(2, 8, 32, requires_grad=True)
    y = checkpoint(block, x, use_reentrant=reentrant)
    with _OpLog() as log:
        y.sum().backward()
    return log.ops.count("addmm")


def test_pytorch_checkpoint_skips_the_down_projection_when_it_stops_early():
    # the measurement EARLY_STOP_SKIPPED rests on: 4 linears in the block, 3 rerun
    assert _linears_rerun(dropout=0.0, reentrant=False) == 3
    assert _linears_rerun(dropout=0.1, reentrant=False) == 4  # the dropout mask after it is saved
    assert _linears_rerun(dropout=0.0, reentrant=True) == 4  # Megatron-style: the whole block


def _ctx(early_stop, model=None):
    model = model or load_preset("llama3-8b")
    w = TrainingWorkload(global_batch=64, seq_len=4096)
    runtime = Runtime(name="neutral", recompute_early_stop=early_stop)
    return StageContext(tables=model_tables(model, 4096, 2), workload=w, runtime=runtime, cluster=load_cluster("dgx-h100").for_gpus(8),
                        micro_batch=1, num_microbatches=8)


def _stage(recompute):
    return StagePlan(layers=(0, 8), has_embedding=False, has_head=False, num_gpus=8, tp=1, cp=1, dp=8,
                     recompute=recompute)


def test_early_stop_takes_the_skipped_operators_out_of_the_recomputed_forward():
    full, early = stage_cost(_ctx(False), _stage("full"), POS), stage_cost(_ctx(True), _stage("full"), POS)
    ctx = _ctx(True)
    block = _block(ctx, ctx.tables.layer, _stage("full"))
    skipped = early_stop_skipped_fwd_s(block, ctx.tables.layer)
    names = ctx.tables.layer.names
    by_hand = sum(float(block.fwd_ops_s[names.index(n)]) for n in EARLY_STOP_SKIPPED)
    assert skipped == pytest.approx(by_hand) and skipped > 0
    assert float(full.bwd_s - early.bwd_s) == pytest.approx(8 * skipped, rel=1e-9)
    assert float(full.fwd_s) == pytest.approx(float(early.fwd_s))


@pytest.mark.parametrize("recompute", ["none", "selective", "selective_op"])
def test_early_stop_changes_nothing_without_full_recomputation(recompute):
    plain, early = stage_cost(_ctx(False), _stage(recompute), POS), stage_cost(_ctx(True), _stage(recompute), POS)
    assert np.allclose(plain.bwd_s, early.bwd_s)
    assert all(np.allclose(a, b) for a, b in zip(astuple(plain.time), astuple(early.time)))


def test_a_dropout_after_the_ffn_keeps_the_whole_recomputation():
    model = load_preset("llama3-8b").with_changes(dropout=True)
    plain, early = stage_cost(_ctx(False, model), _stage("full"), POS), stage_cost(_ctx(True, model), _stage("full"), POS)
    assert float(plain.bwd_s) == pytest.approx(float(early.bwd_s))


def test_published_rows_stop_early_where_their_runtime_does(data_dir):
    runs, _ = load_runs(data_dir / "modern_runs.csv")
    by_framework = {}
    for run in runs:
        framework = run.source.split()[0].lower()
        by_framework.setdefault(framework, set()).add(run.runtime.recompute_early_stop)
    assert by_framework["pytorch/torchtitan"] == {True}
    assert by_framework["mosaicml/llm-foundry"] == {True}
    assert by_framework["nvidia-nemo/megatron-bridge"] == {False}


def test_cli_flag_prices_early_stop():
    def step_s(*extra):
        import json

        out = subprocess.run([sys.executable, "-m", "autotune", "evaluate", "--model", "llama3-8b", "--gpus", "8",
                              "--dp", "8", "--zero", "3", "--micro-batch", "1", "--global-batch", "16", "--recompute", "full",
                              "--runtime", "deepspeed", "--json", *extra],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)["step_time_s"]
    assert step_s("--recompute-early-stop") < step_s()


def test_runtime_default_is_the_whole_layer():
    assert replace(Runtime(name="neutral")).recompute_early_stop is False
    assert load_runtime("megatron").recompute_early_stop is False


def test_the_torchtitan_space_prices_recomputation_as_torchtitan_runs_it():
    from autotune.search.driver import SearchProblem
    from autotune.search.space import load_space

    model, cluster = load_preset("llama3-8b"), load_cluster("dgx-h100")
    work = TrainingWorkload(global_batch=64, seq_len=4096)
    neutral = Runtime(name="neutral")
    titan = SearchProblem(model=model, workload=work, runtime=neutral, cluster=cluster, gpus=8,
                          space=load_space("torchtitan"))
    megatron = SearchProblem(model=model, workload=work, runtime=neutral, cluster=cluster, gpus=8,
                             space=load_space("megatron"))
    assert load_space("torchtitan").recompute_early_stop and not load_space("megatron").recompute_early_stop
    assert titan.runtime.recompute_early_stop and not megatron.runtime.recompute_early_stop
    assert load_runtime("torchtitan").recompute_early_stop


def test_a_runtime_flag_that_is_not_a_bool_is_refused():
    from autotune.errors import AutotuneError

    with pytest.raises(AutotuneError, match="runtime.recompute_early_stop") as err:
        Runtime(name="neutral", recompute_early_stop="yes")
    assert err.value.field == "runtime.recompute_early_stop"
