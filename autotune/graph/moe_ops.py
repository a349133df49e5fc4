"""Operators of a mixture-of-experts FFN (the FFN half of an MoE layer).

One sequence of ``s`` tokens, ``k`` experts per token out of ``E``, expert width ``f``:

* ``router``: a ``hidden x E`` GEMM on every token (weights replicated across TP, as
  Megatron-Core's TopKRouter), then ``router_topk`` (softmax/sigmoid and top-k, memory-bound;
  it keeps the fp32 scores for backward);
* ``permute``: gathers each token once per chosen expert, ``s k`` rows of ``hidden``
  (memory-bound; the row map is kept for backward);
* ``expert_up`` / ``expert_act`` / ``expert_down``: the routed experts as grouped GEMMs over
  the ``s k`` routed rows (sharding ``"expert"``: weights split over ep x etp, work over the
  stage's GPUs; autotune/cost/moe.py prices them per expert);
* ``unpermute``: the probability-weighted sum of each token's ``k`` expert outputs; the
  gradient of the probabilities needs the expert outputs, so they are saved
  (d(sum_k p_k y_k)/dp_k = y_k);
* ``shared_up`` / ``shared_act`` / ``shared_down``: shared experts as one dense FFN of
  ``num_shared_experts x shared width`` (DeepSeekMoE, Dai et al. 2024), tensor-parallel, and
  Qwen2-MoE's ``shared_gate`` (hidden -> 1) that scales it.

Router and top-k count as FLOPs of the model (the router GEMM is a matmul every token runs).
"""

from __future__ import annotations

from dataclasses import replace

from autotune.graph.operator import Operator, _elementwise, _linear
from autotune.spec.model import ModelSpec

__all__ = ["moe_ffn_operators", "EXPERT_OPS", "ffn_has_bias"]

EXPERT_OPS = ("expert_up", "expert_act", "expert_down")
_INDEX_BYTES = 8.0  # int64 row indices (torch.topk / argsort)
_SCORE_BYTES = 4.0  # router scores in fp32 (Megatron-Core keeps router logits in fp32)
_MAP_BYTES = 1.0  # Megatron-Core's bool routing map [tokens, E]
# Backward bytes of the fused permutation kernels over their forward bytes: Transformer Engine's
# moe_permute backward is an unpermute of the gradients (reads the k rows, writes the token) and
# moe_unpermute's backward a permute; both move what their forward moved. Measured with
# profilers/moe_traffic.py (megatron-core 0.16.1; docs/measurements/moe_traffic_2026-11-25.json): the
# boundary of moe_utils.permute / unpermute, 37.3 / 37.1 KB per token forward on Qwen3-30B-A3B's shape.
_PERMUTE_BWD_BYTES = 1.0


def _act_bwd_bytes_factor(reads: float, writes: float) -> float:
    """Backward bytes over forward bytes of a pointwise activation: the backward reads the output's
    gradient (``writes``) and the saved input (``reads``) and writes the input's gradient (``reads``).
    Measured for Megatron-Core's fused weighted SwiGLU and GPT-OSS's clamped GEGLU (61.5 vs 36.9 KB per
    token on Qwen3-30B-A3B, docs/measurements/moe_traffic_2026-11-25.json): 5/3 (boundaries; the clamp's
    eager kernels inside GPT-OSS's are CLAMP_BYTES_PER_ELEMENT)."""
    return (writes + 2.0 * reads) / (reads + writes)


# GPT-OSS's clamp (Megatron-Core 0.16.1 fusions/fused_bias_geglu.py, weighted_bias_quick_geglu_impl with
# activation_func_clamp_value): chunk, two clamps and a cat run eagerly before the fused kernel, and their
# backward (masks, where, cat) after it. Bytes read + written per element of the fc1 output in bf16,
# measured by profilers/moe_bias_traffic.py (docs/measurements/moe_bias_traffic_2026-11-25.json: 11.0 / 20.0
# with the clamp against weighted SwiGLU's 3.0 / 5.0, whose fused boundary is the same).
CLAMP_BYTES_PER_ELEMENT = {"fwd": 8.0, "bwd": 15.0}


def _expert_act(m: ModelSpec, rows: int, f: int, up_width: int, e: int) -> Operator:
    """The fused weighted activation over the routed rows; a clamp of its inputs (GPT-OSS) adds its eager
    kernels' bytes (scaled from bf16 by ``e``) and keeps the unclamped fc1 output for its backward."""
    reads, saved = up_width / f, rows * up_width * e
    fwd_bwd = (reads + 1.0, 1.0 + 2.0 * reads)  # bytes per row over f e of the fused kernel (see above)
    if m.expert_act_clamp > 0:
        clamp = up_width / f / 2.0  # fc1 elements per row over f e, the bf16 bytes per element over e
        fwd_bwd = (fwd_bwd[0] + CLAMP_BYTES_PER_ELEMENT["fwd"] * clamp,
                   fwd_bwd[1] + CLAMP_BYTES_PER_ELEMENT["bwd"] * clamp)
        reads, saved = fwd_bwd[0] - 1.0, 2.0 * saved
    act = _elementwise("expert_act", rows, f, e, reads=reads, writes=1.0, saved=saved, sharding="expert")
    return replace(act, bwd_bytes_factor=fwd_bwd[1] / fwd_bwd[0])


def ffn_has_bias(m: ModelSpec) -> bool:
    return m.bias if m.ffn_bias is None else m.ffn_bias


def _router_ops(m: ModelSpec, s: int, e: int) -> list[Operator]:
    n, h = m.num_experts, m.hidden_size
    router = _linear("router", s, h, n, e, "replicated", m.router_bias)  # GPT-OSS: a bias per expert
    # Megatron-Core's top-k (topk_routing_with_score_function, fused or not) writes dense [tokens, E]
    # probabilities in the logits' dtype and a bool routing map, not k indices (measured boundary:
    # 640 B per token for 128 experts in bf16, docs/measurements/moe_traffic_2026-11-25.json)
    topk = Operator(name="router_topk", kind="elementwise", flops=0.0, model_flops=0.0,
                    act_in_bytes=s * n * e, act_out_bytes=s * n * (e + _MAP_BYTES),
                    weight_bytes=0.0, params=0, saved_bytes=s * n * _SCORE_BYTES, sharding="replicated")
    return [router, topk]


def _permute(m: ModelSpec, s: int, e: int, name: str) -> Operator:
    k, h = m.num_experts_per_token, m.hidden_size
    rows = s * k * h * e
    if name == "permute":  # read each token once, write it once per expert; keep the row map
        return Operator(name=name, kind="elementwise", flops=0.0, model_flops=0.0, act_in_bytes=s * h * e,
                        act_out_bytes=rows, weight_bytes=0.0, params=0, saved_bytes=s * k * _INDEX_BYTES,
                        sharding="split", bwd_bytes_factor=_PERMUTE_BWD_BYTES)
    # unpermute: read k expert outputs per token and their probabilities, write one sum
    return Operator(name=name, kind="elementwise", flops=2.0 * s * k * h, model_flops=0.0,
                    act_in_bytes=rows + s * k * _SCORE_BYTES, act_out_bytes=s * h * e, weight_bytes=0.0,
                    params=0, saved_bytes=rows, sharding="split", bwd_bytes_factor=_PERMUTE_BWD_BYTES)


def _expert_ops(m: ModelSpec, s: int, e: int) -> list[Operator]:
    """Routed experts over all ``s k`` routed rows; params are those of all ``E`` experts."""
    n, k, h, f = m.num_experts, m.num_experts_per_token, m.hidden_size, m.expert_ffn_hidden_size
    up_width = 2 * f if m.is_gated_ffn else f
    rows, bias = s * k, ffn_has_bias(m)
    up = _linear("expert_up", rows, h, up_width, e, "expert", bias)
    down = _linear("expert_down", rows, f, h, e, "expert", bias)
    ops = [Operator(**{**up.__dict__, "params": n * up.params, "weight_bytes": n * up.weight_bytes})]
    if m.ffn_activation != "none":
        ops.append(_expert_act(m, rows, f, up_width, e))
    ops.append(Operator(**{**down.__dict__, "params": n * down.params, "weight_bytes": n * down.weight_bytes}))
    return ops


def _shared_ops(m: ModelSpec, s: int, e: int) -> list[Operator]:
    if m.num_shared_experts == 0:
        return []
    h, f = m.hidden_size, m.num_shared_experts * m.shared_expert_ffn_hidden_size
    up_width = 2 * f if m.is_gated_ffn else f
    bias = ffn_has_bias(m)
    ops = [_linear("shared_up", s, h, up_width, e, "column", bias)]
    if m.shared_expert_gate:  # Qwen2-MoE: sigmoid(x w) scales the shared expert's output
        ops.append(_linear("shared_gate", s, h, 1, e, "replicated", False))
    if m.ffn_activation != "none":
        act = _elementwise("shared_act", s, f, e, reads=up_width / f, writes=1.0,
                           saved=s * up_width * e, sharding="split")
        ops.append(replace(act, bwd_bytes_factor=_act_bwd_bytes_factor(up_width / f, 1.0)))
    ops.append(_linear("shared_down", s, f, h, e, "row", bias))
    return ops


def moe_ffn_operators(m: ModelSpec, s: int, e: int) -> list[Operator]:
    """The FFN half of an MoE layer in execution order (shared experts run beside the routed ones)."""
    return [*_router_ops(m, s, e), _permute(m, s, e, "permute"), *_expert_ops(m, s, e),
            _permute(m, s, e, "unpermute"), *_shared_ops(m, s, e)]
