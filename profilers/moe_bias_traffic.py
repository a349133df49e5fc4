"""Measure the memory traffic and kernels of the expert biases of Megatron-Core's TEGroupedMLP (GPT-OSS).

GPT-OSS's experts have biases. In Megatron-Core 0.16.1's TEGroupedMLP (megatron/core/transformer/moe/
experts.py) linear_fc1 is built with ``skip_bias_add=False``, so Transformer Engine's GroupedLinear adds
the fc1 bias inside its GEMM; linear_fc2 with ``skip_bias_add=True`` returns its per-expert biases and
``TEGroupedMLP._apply_bias`` adds them in Python: per local expert ``t + b * p`` (bf16 rows, bf16 bias,
fp32 probabilities: the sum comes out fp32), then ``torch.cat`` and ``.to(bf16)``. This script calls that
staticmethod on CPU tensors of those dtypes under the TorchDispatchMode of profilers/moe_traffic.py,
forward and backward, and reports the bytes read + written per element of the fc2 output (linear in rows:
two row counts) and the kernels (a fixed number plus a number per local expert: two expert counts).

It also measures the activation GPT-OSS runs instead of weighted SwiGLU: weighted_bias_quick_geglu_impl
(fusions/fused_bias_geglu.py) with GPT-OSS's clamp (``activation_func_clamp_value=7``) and linear offset 1,
against weighted_bias_swiglu_impl, per element of the fc1 output. Their jit-fused kernels
(``weighted_quick_geglu`` / ``weighted_swiglu`` and their ``_back``) count as one kernel each with their
boundary bytes (inputs and outputs); the eager kernels around them (the clamp's chunk, clamps and cat,
and their backward) are recorded one by one.

Run: ``python -m profilers.moe_bias_traffic`` (needs megatron-core).
"""

from __future__ import annotations

import collections
import json
import sys
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from profilers.moe_traffic import NO_TRAFFIC, _nbytes, _tensors


class _Recorder(TorchDispatchMode):
    """Kernels, bytes read and written of every kernel-launching ATen operator (not gradient
    accumulation into leaves, which stand for tensors that are not leaves in the model)."""

    def __init__(self):
        super().__init__()
        self.rec = collections.Counter()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        node = torch._C._current_autograd_node()
        if self.paused or name in NO_TRAFFIC or (node is not None and "AccumulateGrad" in node.name()):
            return out
        self.rec["kernels"] += 1
        self.rec["bytes"] += _nbytes(_tensors((args, kwargs))) + _nbytes(_tensors(out))
        self.rec[f"op:{name}"] += 1
        return out

    def fused(self, fn):
        """``fn`` run as one fused kernel: its boundary bytes, its inner operators not recorded."""
        def wrapped(*a, **k):
            self.paused = True
            try:
                out = fn(*a, **k)
            finally:
                self.paused = False
            self.rec["kernels"] += 1
            self.rec["bytes"] += _nbytes(_tensors((a, k))) + _nbytes(_tensors(out))
            self.rec[f"fused:{fn.__name__}"] += 1
            return out
        return wrapped


def _run(call, inputs: list, grad_like) -> dict:
    """Forward and backward records of ``call(*inputs)``; ``grad_like(out)`` makes the output's gradient."""
    fwd, bwd = _Recorder(), _Recorder()
    with fwd:
        out = call(fwd, *inputs)
    grad = grad_like(out)
    with bwd:
        torch.autograd.backward(out, grad, inputs=[t for t in inputs if isinstance(t, torch.Tensor)
                                                    and t.requires_grad] + _leaves(inputs))
    return {"fwd": dict(fwd.rec), "bwd": dict(bwd.rec)}


def _leaves(inputs) -> list:
    return [t for x in inputs if isinstance(x, list) for t in x if t.requires_grad]


def apply_bias(rows: int, experts: int, hidden: int) -> dict:
    """TEGroupedMLP._apply_bias on ``rows`` bf16 rows of ``hidden`` split evenly over ``experts``."""
    from megatron.core.transformer.moe.experts import TEGroupedMLP
    torch.manual_seed(0)
    out = torch.randn(rows, hidden, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(hidden, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    probs = torch.rand(rows, 1, dtype=torch.float32, requires_grad=True)  # permuted_probs.unsqueeze(-1)
    split = [rows // experts] * experts

    def call(_rec, t, bs, p):
        return TEGroupedMLP._apply_bias(t, bs, split, p)
    r = _run(call, [out, biases, probs], lambda y: torch.randn_like(y))
    r["shape"] = dict(rows=rows, experts=experts, hidden=hidden)
    return r


def activation(kind: str, rows: int, ffn: int) -> dict:
    """The experts' fused activation on ``rows`` bf16 fc1 rows of ``2 ffn`` (bias None: in the GEMM)."""
    import megatron.core.fusions.fused_bias_geglu as geglu
    import megatron.core.fusions.fused_bias_swiglu as swiglu
    torch.manual_seed(0)
    fc1 = (4 * torch.randn(rows, 2 * ffn, dtype=torch.bfloat16)).requires_grad_(True)
    probs = torch.rand(rows, 1, dtype=torch.float32, requires_grad=True)
    mod, names = (geglu, ("weighted_quick_geglu", "weighted_quick_geglu_back")) if kind == "quick_geglu" \
        else (swiglu, ("weighted_swiglu", "weighted_swiglu_back"))
    originals = {n: getattr(mod, n) for n in names}

    def call(rec, x, p):
        for n in names:
            setattr(mod, n, rec.fused(originals[n]))
        if kind == "quick_geglu":  # GPT-OSS (Megatron-Bridge gpt_oss provider): offset 1, clamp 7
            return geglu.weighted_bias_quick_geglu_impl(x, None, p, False, 1.0, 7.0)
        return swiglu.weighted_bias_swiglu_impl(x, None, p, False)
    fwd, bwd = _Recorder(), _Recorder()
    try:
        with fwd:
            y = call(fwd, fc1, probs)
        grad = torch.randn_like(y)
        for n in names:  # the backward kernel counts on the backward recorder
            setattr(mod, n, bwd.fused(originals[n]))
        with bwd:
            torch.autograd.backward(y, grad, inputs=[fc1, probs])
    finally:
        for n, f in originals.items():
            setattr(mod, n, f)
    return {"fwd": dict(fwd.rec), "bwd": dict(bwd.rec), "shape": dict(kind=kind, rows=rows, ffn=ffn)}


def per_element(a: dict, b: dict, elements) -> dict:
    """{pass: (bytes per element, fixed bytes)} from two runs differing in rows (``elements(run)``)."""
    out = {}
    for p in ("fwd", "bwd"):
        slope = (b[p]["bytes"] - a[p]["bytes"]) / (elements(b) - elements(a))
        out[p] = {"bytes_per_element": slope, "fixed_bytes": a[p]["bytes"] - slope * elements(a)}
    return out


def per_expert_kernels(a: dict, b: dict) -> dict:
    """{pass: {per_expert, fixed}} kernels from two runs differing in expert count."""
    out = {}
    for p in ("fwd", "bwd"):
        slope = (b[p]["kernels"] - a[p]["kernels"]) / (b["shape"]["experts"] - a["shape"]["experts"])
        out[p] = {"per_expert": slope, "fixed": a[p]["kernels"] - slope * a["shape"]["experts"]}
    return out


def measure(small: bool = False) -> dict:
    hidden, ffn, rows = (256, 128, 64) if small else (2880, 2880, 512)  # GPT-OSS: hidden 2880, FFN 2880
    bias = [apply_bias(rows, 4, hidden), apply_bias(2 * rows, 4, hidden), apply_bias(2 * rows, 8, hidden)]
    acts = {k: [activation(k, rows, ffn), activation(k, 2 * rows, ffn)] for k in ("quick_geglu", "swiglu")}
    out_elems = lambda r: r["shape"]["rows"] * r["shape"]["hidden"]  # noqa: E731 (fc2 output)
    fc1_elems = lambda r: r["shape"]["rows"] * 2 * r["shape"]["ffn"]  # noqa: E731 (fc1 output)
    summary = {"apply_bias": {**per_element(bias[0], bias[1], out_elems),
                              "kernels": per_expert_kernels(bias[1], bias[2])}}
    for k, (a, b) in acts.items():
        summary[k] = {**per_element(a, b, fc1_elems), "kernels": {p: a[p]["kernels"] for p in ("fwd", "bwd")}}
    return {"summary": summary, "runs": {"apply_bias": bias, **acts}}


def main() -> None:
    warnings.filterwarnings("ignore")
    torch._dynamo.config.disable = True  # the jit-fused activations (torch.compile) run eagerly on the CPU
    import megatron.core
    result = {"megatron_core": megatron.core.__version__, "torch": torch.__version__,
              **measure(small="--small" in sys.argv)}
    print(json.dumps(result["summary"], indent=1), file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
