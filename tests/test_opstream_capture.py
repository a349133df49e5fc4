"""The capture behind the operator streams (profilers/opstream.py): sizes as symbols, CUDA's
autocast emulated from the dispatcher's own table, kernels, saved tensors and blocks."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from profilers.opstream import AUTOCAST_POLICIES, CAPTURE, capture_step, monomial  # noqa: E402

STREAMS = Path(__file__).resolve().parent.parent / "autotune" / "data" / "opstreams"


def _registered_for_cuda_autocast(op: str) -> bool:
    dump = torch._C._dispatch_dump(f"aten::{op}")
    return any(line.startswith("AutocastCUDA") and "fallthrough" not in line for line in dump.splitlines())


@pytest.mark.parametrize("policy", sorted(AUTOCAST_POLICIES))
def test_emulated_autocast_acts_on_what_cuda_autocast_registers(policy):
    ops, functions = AUTOCAST_POLICIES[policy]
    assert functions and all(_registered_for_cuda_autocast(op) for op in ops), [op for op in ops if not _registered_for_cuda_autocast(op)]


@pytest.mark.parametrize("op", ["mean", "silu", "gelu", "mul", "add", "cat", "embedding", "native_dropout"])
def test_what_cuda_autocast_leaves_alone_is_left_alone(op):
    assert not _registered_for_cuda_autocast(op)


def test_sizes_factor_into_monomials_of_the_symbols():
    c = CAPTURE
    assert monomial(c["b"] * c["s"] * c["g"] * c["r"] * c["c"]) == (1, {"b": 1, "s": 1, "g": 1, "r": 1, "c": 1})
    assert monomial(2 * c["d2"] * c["s"] ** 2) == (2, {"s": 2, "d2": 1})
    assert monomial(3) == (3, {})


class _Block(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Linear(hidden, ffn)
        self.down = torch.nn.Linear(ffn, hidden)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def test_a_linear_block_under_cuda_autocast():
    c = CAPTURE
    layers = torch.nn.ModuleList([_Block(c["c"], c["f"]) for _ in range(2)])
    model = torch.nn.Sequential(*layers)
    x = torch.randn(c["b"], c["s"], c["c"], requires_grad=True)
    capture = capture_step(model, list(layers), lambda: model(x).float().pow(2).mean())
    layer = [k for k in capture.kernels if k["block"] == "layer.1"]
    fwd = [(k["op"], k["class"], k["dtype"]) for k in layer if k["phase"] == "fwd"]
    assert fwd[0] == ("aten.native_layer_norm", "norm", "float32")  # fp32 list; its fp32 input stays
    gemms = [k for k in layer if k["class"] == "gemm"]
    assert len(gemms) == 6 and all(k["dtype"] == "bfloat16" for k in gemms)  # 2 forward, 4 backward
    # the up projection's weight cast reads the fp32 weight (c x f) and writes it in bf16
    casts = [k for k in layer if k["weight_cast"]]
    assert (4, {"c": 1, "f": 1}) in casts[0]["read"] and (2, {"c": 1, "f": 1}) in casts[0]["written"]
    assert casts[0]["params"] == [(1, {"c": 1, "f": 1})]
    flops = [k["flops"][0] for k in gemms if k["phase"] == "fwd"]
    assert flops[0] == (2, {"b": 1, "s": 1, "c": 1, "f": 1})
    blocks = {where[0] for where, _ in capture.saved.values()}
    assert blocks <= {"layer.0", "layer.1", "head"} and "layer.1" in blocks


@pytest.mark.slow
def test_capture_reproduces_the_shipped_reference_stream(tmp_path):
    from profilers.opstreams import write_streams
    (path,) = write_streams(tmp_path, ["torch-gpt"])
    fresh, shipped = json.loads(path.read_text()), json.loads((STREAMS / "torch-gpt.json").read_text())
    if fresh["versions"] != shipped["versions"]:
        pytest.skip(f"captured with {shipped['versions']}, this is {fresh['versions']}")
    assert fresh["blocks"] == shipped["blocks"]


@pytest.mark.parametrize("shapes", [((12, 8), (3, 8, 4)), ((8, 12), (12, 4)), ((3, 4, 8), (8, 12))])
def test_grouped_mm_by_groups_is_torchs_grouped_mm(shapes):
    # the capture's own loop (its prime sizes miss the CPU kernel's 16-byte strides) against the CPU kernel
    from profilers.opstream import _grouped_mm_by_groups
    torch.manual_seed(0)
    a, b = torch.randn(*shapes[0]), torch.randn(*shapes[1])
    offs = torch.tensor([5, 9, 12], dtype=torch.int32)
    assert torch.allclose(_grouped_mm_by_groups((a, b), {"offs": offs}), torch._grouped_mm(a, b, offs=offs), atol=1e-5)


class _Experts(torch.nn.Module):
    """A grouped GEMM over ``e`` experts (as transformers' grouped_mm experts call it)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(CAPTURE["e"], CAPTURE["c"], CAPTURE["f"]))

    def forward(self, x):
        rows = x.shape[0] * x.shape[1]
        offs = torch.linspace(rows / CAPTURE["e"], rows, CAPTURE["e"]).round().to(torch.int32)
        out = torch.nn.functional.grouped_mm(x.flatten(0, 1).to(self.weight.dtype), self.weight, offs=offs)
        return out.view(*x.shape[:2], -1)


def test_grouped_expert_gemms_are_captured_with_their_flops():
    layers = torch.nn.ModuleList([_Experts() for _ in range(2)])
    x = torch.randn(CAPTURE["b"], CAPTURE["s"], CAPTURE["c"], requires_grad=True)
    capture = capture_step(layers, list(layers), lambda: layers[1](layers[0](x)[..., :CAPTURE["c"]]).float().pow(2).mean())
    grouped = [k for k in capture.kernels if k["block"] == "layer.1" and k["op"] == "aten._grouped_mm"]
    assert [k["phase"] for k in grouped] == ["fwd", "bwd", "bwd"] and all(k["dtype"] == "float32" for k in grouped)
    # forward, input gradient and weight gradient: 2 x rows x c x f each (the weight gradient's
    # groups split its contracted rows, they do not multiply them)
    assert all(k["flops"] == [(2, {"b": 1, "s": 1, "c": 1, "f": 1})] for k in grouped)
