"""Traced operator graphs (profilers/trace.py) and liveness peak memory (profilers/liveness.py):
FLOPs against the analytic graph, peak memory against a real CPU run."""

import json
import subprocess
import sys

import pytest

from profilers.liveness import Step, liveness

torch = pytest.importorskip("torch")

from autotune.calibrate.passes import table_pass_s  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.graph.table import OpTable, model_tables  # noqa: E402
from autotune.spec.hardware_data import load_device  # noqa: E402
from autotune.spec.presets import resolve_model  # noqa: E402
from profilers.benchmark import cpu_peak_allocated_bytes  # noqa: E402
from profilers.trace import classify, trace_module  # noqa: E402
from profilers.trace_inputs import parse_input, trace_spec, trace_spec_training  # noqa: E402


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


# --- liveness on hand-made schedules -------------------------------------------------------

def test_chain_frees_each_tensor_after_its_last_reader():
    steps = [Step(name="a", reads=(0,), creates=((1, 100.0),)),
             Step(name="b", reads=(1,), creates=((2, 50.0),)),
             Step(name="c", reads=(2,), creates=((3, 10.0),))]
    live = liveness(steps, persistent_bytes=1000.0, outputs=(3,))
    assert live.live_bytes == (100.0, 150.0, 60.0)
    assert live.peak_transient_bytes == 150.0 and live.peak_step == "b" and live.peak_bytes == 1150.0


def test_a_view_keeps_its_base_alive():
    # b is a view of a's output (same storage 1): c reading the view keeps storage 1 alive
    steps = [Step(name="a", reads=(), creates=((1, 100.0),)),
             Step(name="b_view", reads=(1,), creates=()),
             Step(name="d", reads=(), creates=((2, 30.0),)),
             Step(name="c", reads=(1,), creates=((3, 5.0),))]
    live = liveness(steps, persistent_bytes=0.0)
    assert live.live_bytes == (100.0, 100.0, 130.0, 105.0)


def test_outputs_live_to_the_end():
    steps = [Step(name="a", reads=(), creates=((1, 10.0),)), Step(name="b", reads=(), creates=((2, 20.0),))]
    assert liveness(steps, 0.0, outputs=(1,)).live_bytes == (10.0, 30.0)
    assert liveness(steps, 0.0).live_bytes == (10.0, 20.0)


# --- tracing --------------------------------------------------------------------------------

class Toy(torch.nn.Module):
    def __init__(self, width=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(b, s, w)
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def test_toy_module_flops_kinds_and_graph():
    with torch.device("meta"):
        toy = Toy()
    traced = trace_module(toy, (torch.zeros(2, 16, 64, device="meta"),))
    tokens = 2 * 16
    linear = 2 * tokens * 64 * (3 * 64 + 4 * 64 + 4 * 64)
    attention = 4 * 2 * 16 * 16 * 64  # QK^T and PV over all s x s pairs
    assert traced.model_flops == linear + attention
    kinds = {op.kind for op in traced.operators}
    assert {"gemm", "attention", "norm", "elementwise"} <= kinds
    attn = [op for op in traced.operators if op.kind == "attention"][0]
    assert attn.flops == attn.model_flops / 2 and attn.bwd_flops_factor == 2.5  # causal: executed half
    assert traced.num_params == sum(p.numel() for p in Toy().parameters())
    fwd, bwd = table_pass_s(OpTable.from_graph(traced.graph), load_device("h100"), "fp32")
    assert 0 < fwd < bwd


def measured_forward_peak(module, inputs):
    """Peak live tensor bytes allocated during a real no-grad forward on the CPU (profiler events)."""
    with torch.no_grad():
        module(*inputs)
        return cpu_peak_allocated_bytes(lambda: module(*inputs))


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Unflatten(-1, (4, 64)),
                               torch.nn.Flatten(-2), torch.nn.Linear(256, 64), torch.nn.LayerNorm(64))


def test_mlp_liveness_matches_a_cpu_run():
    """Eager PyTorch frees a tensor when its last Python reference dies; a Sequential holds no
    locals, so that is after its last user, as liveness assumes (views included)."""
    with torch.device("meta"):
        traced = trace_module(mlp(), (torch.zeros(8, 128, 64),))
    measured = measured_forward_peak(mlp().eval(), (torch.randn(8, 128, 64),))
    assert traced.liveness.peak_transient_bytes == pytest.approx(measured, rel=0.10)
    assert traced.liveness.peak_transient_bytes == 2 * 8 * 128 * 256 * 4  # the GELU's input and output


SMALL_LAYERS = {"medium": 2, "gpt3-125m": 2, "llama3-8b": 2, "xxl-ffn": 2}


@pytest.mark.parametrize("name", ["small", *SMALL_LAYERS])
def test_traced_flops_and_params_match_the_analytic_graph(name):
    spec = resolve_model(name)
    if name in SMALL_LAYERS:  # fewer layers keep the trace fast; every layer is the same
        spec = spec.with_changes(num_layers=SMALL_LAYERS[name])
    seq = 128
    traced = trace_spec(spec, batch=1, seq_len=seq)
    tables = model_tables(spec, seq, 4, "flash")
    assert traced.model_flops == pytest.approx(tables.model_flops_per_sequence() / 3, rel=0.02)
    assert traced.num_params == tables.num_params


def test_small_preset_liveness_within_10_percent_of_a_cpu_run():
    from autotune.validate.model import build_model

    spec = resolve_model("small").with_changes(num_layers=2)
    traced = trace_spec(spec, batch=2, seq_len=256)
    torch.manual_seed(0)
    model = build_model(spec).eval()
    tokens = torch.randint(0, spec.vocab_size, (2, 256))
    measured = measured_forward_peak(model, (tokens,))
    assert traced.liveness.peak_transient_bytes == pytest.approx(measured, rel=0.10)
    params = sum(p.numel() * 4 for p in model.parameters()) + sum(b.numel() * 4 for b in model.buffers())
    assert traced.liveness.peak_bytes == pytest.approx(params + tokens.numel() * 8 + measured, rel=0.10)


def measured_training_peak(model, tokens, targets):
    """Peak live tensor bytes of a real forward + cross entropy + backward on the CPU."""
    params = list(model.parameters())

    def step():
        logits = model(tokens).float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return torch.autograd.grad(loss, params)

    step()
    return cpu_peak_allocated_bytes(step)


@pytest.mark.parametrize("name", ["small", "gpt3-125m"])
def test_training_liveness_within_10_percent_of_a_cpu_run(name):
    """Forward + backward: saved activations, their gradients and the parameter gradients."""
    from autotune.validate.model import build_model

    spec = resolve_model(name).with_changes(num_layers=2)
    batch, seq = 1, 64
    live = trace_spec_training(spec, batch, seq)
    torch.manual_seed(0)
    model = build_model(spec)
    tokens, targets = (torch.randint(0, spec.vocab_size, (batch, seq)) for _ in range(2))
    measured = measured_training_peak(model, tokens, targets)
    assert live.peak_transient_bytes == pytest.approx(measured, rel=0.10)


def test_classify_and_parse_input():
    assert classify("aten.linear.default", 3, 1) == "gemm"
    assert classify("aten.matmul.default", 4, 0) == "bmm"
    assert classify("aten.scaled_dot_product_attention.default", 4, 0) == "attention"
    assert classify("aten.rms_norm.default", 3, 1) == "norm"
    assert classify("aten.gelu.default", 3, 0) == "elementwise"
    t = parse_input("2x512:int64")
    assert t.shape == (2, 512) and t.dtype == torch.int64 and t.device.type == "meta"
    with pytest.raises(AutotuneError, match="input"):
        parse_input("2xbig")


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on values: torch.export cannot trace it on meta tensors
            return x * 2
        return x


def test_untraceable_module_is_an_autotune_error():
    with pytest.raises(AutotuneError, match="cannot be traced"):
        trace_module(DataDependent(), (torch.zeros(3, device="meta"),))


TOYMOD = (
    "import torch\n"
    "def make():\n"
    "    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)), (torch.zeros(4, 32),)\n"
    "def broken():\n"
    "    class M(torch.nn.Module):\n"
    "        def forward(self, x):\n"
    "            return x * 2 if x.sum() > 0 else x\n"
    "    return M()\n")


@pytest.fixture
def toymod(tmp_path, monkeypatch):
    (tmp_path / "toymod.py").write_text(TOYMOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_graph_cli_traces_a_user_module(toymod, capsys):
    from autotune.cli.main import main

    assert main(["graph", "--module", "toymod:make", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model_flops"] == 2 * 4 * (32 * 64 + 64 * 8) and data["num_params"] == 32 * 64 + 64 + 64 * 8 + 8


@pytest.mark.parametrize("module, needle", [("toymod:missing", "no callable"), ("nosuch.mod:f", "does not import"),
                                            ("toymod", "pkg.mod:factory")])
def test_graph_cli_bad_module(toymod, capsys, module, needle):
    from autotune.cli.main import main

    assert main(["graph", "--module", module]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_graph_cli_untraceable_module_is_one_line_exit_2(toymod):
    """In a subprocess: torch.export's own diagnostics must not reach stderr either."""
    import os

    proc = subprocess.run([sys.executable, "-m", "autotune", "graph", "--module", "toymod:broken", "--input", "3"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(toymod)})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot be traced" in proc.stderr and "Traceback" not in proc.stderr


def test_graph_cli_preset_reports_flops_against_analytic(capsys):
    from autotune.cli.main import main

    assert main(["graph", "--model", "small", "--seq-len", "64", "--device", "h100"]) == 0
    out = capsys.readouterr().out
    assert "analytic graph" in out and "+0.00%" in out and "liveness" in out
