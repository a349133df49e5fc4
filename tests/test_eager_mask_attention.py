"""Megatron-LM 2019's attention (spec.workload ATTENTION_IMPLS "unfused_eager_mask"): the reference
model runs that code's arithmetic, and the operator table prices the kernels that arithmetic runs."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autotune.graph import model_tables
from autotune.spec.model import ModelSpec
from autotune.validate.model import Attention, build_model

_ELEMENTWISE = {"mul", "sub", "div", "rsub", "add"}


def _spec(**extra) -> ModelSpec:
    base = dict(name="tiny", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, ffn_hidden_size=128,
                vocab_size=101, max_seq_len=32, position_embedding="learned", norm="layernorm", bias=True,
                ffn_activation="gelu", tied_embeddings=True)
    return ModelSpec(**{**base, **extra})


class _Recorder(TorchDispatchMode):
    """Elementwise ATen kernels by the number of elements they write."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _ELEMENTWISE and isinstance(out, torch.Tensor):
            self.kernels.append((name, out.numel()))
        return out


def _elementwise_kernels(impl: str, batch: int, seq: int) -> tuple[list, list, ModelSpec]:
    spec = _spec()
    attention = Attention(spec, impl, 0.0)
    q, k, v = (torch.randn(batch, spec.num_heads, seq, spec.head_dim, requires_grad=True) for _ in range(3))
    with _Recorder() as forward:
        out = attention._core(q, k, v)
    with _Recorder() as backward:
        out.sum().backward()
    return forward.kernels, backward.kernels, spec


def test_eager_mask_attention_matches_causal_softmax_attention():
    spec = _spec()
    tokens = torch.randint(0, spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    flash = build_model(spec, attention_impl="flash")(tokens)
    eager = build_model(spec, attention_impl="unfused_eager_mask")(tokens)
    assert torch.allclose(flash, eager, atol=1e-5)


def test_operator_table_prices_the_kernels_the_2019_code_runs():
    """The reference attention's elementwise kernels over the b a s^2 scores: two in the forward (the
    product with the mask, the subtraction) and one in the backward (the product's gradient), as
    graph/operators.py attn_mask prices (forward bytes 2 x (read + write), backward half of that).
    Q and K are each divided once forward and once backward (qk_scale); the fused variant runs none."""
    batch, seq = 2, 24
    forward, backward, spec = _elementwise_kernels("unfused_eager_mask", batch, seq)
    scores = batch * spec.num_heads * seq * seq
    per_head_dim = batch * spec.num_heads * seq * spec.head_dim
    assert sorted(n for n, size in forward if size == scores) == ["mul", "sub"]
    assert [n for n, size in backward if size == scores] == ["mul"]
    assert sum(size == per_head_dim for _, size in forward) == 2  # q / root, k / root
    assert sum(size == per_head_dim and n == "div" for n, size in backward) == 2

    e = 2
    table = model_tables(spec, seq, e, "unfused_eager_mask").layer
    mask = table.names.index("attn_mask")
    head_bytes = spec.num_heads * seq * seq * e
    assert table.in_bytes[mask] + table.out_bytes[mask] == pytest.approx(4 * head_bytes)
    assert table.kernels[mask] == 2 and table.bwd_bytes_factor[mask] == pytest.approx(0.5)
    assert table.saved_bytes[mask] == 0.0
    fused = model_tables(spec, seq, e, "unfused").layer.names
    assert "attn_mask" not in fused and "qk_scale" not in fused


@pytest.mark.parametrize("impl", ["flash", "unfused"])
def test_eager_mask_is_priced_slower_than_the_fused_softmax(impl):
    import autotune
    from autotune.spec.workload import TrainingWorkload

    model = _spec(num_layers=4, hidden_size=1024, num_heads=16, num_kv_heads=16, ffn_hidden_size=4096,
                  max_seq_len=1024)
    steps = {i: autotune.evaluate(model, 8, cluster="dgx-2", workload=TrainingWorkload(
        global_batch=64, seq_len=1024, dtype="fp16", attention_impl=i)).step_time_s
        for i in (impl, "unfused_eager_mask")}
    assert steps["unfused_eager_mask"] > steps[impl]
