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
