"""Operator graphs of a transformer: one decoder layer, the embedding, and the head.

Each node carries an :class:`Operator` with its forward FLOPs and bytes for ONE sequence of
``seq_len`` tokens, its parameters, the activation bytes it saves for backward, and how it may
be sharded. Quantities scale linearly with the number of sequences, except ``weight_bytes``
(read once per kernel whatever the batch). The cost model divides them by the parallel degrees.

Saved-activation counts follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models", sec. 4.1): 34 s b h + 5 a s^2 b bytes per layer in 16-bit with
dropout, which ``tests/test_graph.py`` checks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # networkx is imported when a graph is built, not by the cost model's hot path
    import networkx as nx

from autotune.graph.moe_ops import moe_ffn_operators
from autotune.graph.operator import OP_KINDS, SHARDINGS, TP_SPLIT, Operator, _elementwise, _linear, _norm
from autotune.spec.model import ModelSpec

__all__ = ["Operator", "SHARDINGS", "TP_SPLIT", "OP_KINDS", "layer_graph", "embedding_graph", "head_graph", "operators",
           "layer_operators", "embedding_operators", "head_operators", "attention_operators", "attended_pairs",
           "qkv_proj_width", "decode_attention", "QKV_SPLIT", "qkv_projection_indices"]

def _residual(name: str, m: ModelSpec, s: int, e: int) -> Operator:
    # bias-dropout-add: read branch and residual, write the sum; the dropout mask is 1 byte
    # per element (Korthikanti: sbh).
    mask = s * m.hidden_size * 1.0 if m.dropout else 0.0
    extra = mask / (s * m.hidden_size * e)
    return _elementwise(name, s, m.hidden_size, e, reads=2.0, writes=1.0 + extra, saved=mask)


def attended_pairs(m: ModelSpec, s: int) -> float:
    """(query, key) pairs a causal kernel computes for one sequence, averaged over the layers:
    s^2 / 2 on full-attention layers; on sliding-window layers each query sees at most ``w``
    keys, s w - w^2 / 2 pairs for s > w (Beltagy et al. 2020, Longformer sec. 3; Mistral 7B's
    window, Jiang et al. 2023 sec. 2); on chunked layers (Llama 4) a query sees its own chunk of
    ``w`` only, w^2 / 2 pairs per whole chunk (transformers' chunked_overlay: key and query in the
    same chunk)."""
    full = s * s / 2.0
    w = m.sliding_window
    if not w or s <= w:
        return full
    if m.window_kind == "chunked":
        chunks, rest = divmod(s, w)
        windowed_pairs = chunks * w * w / 2.0 + rest * rest / 2.0
    else:
        windowed_pairs = s * w - w * w / 2.0
    return (1.0 - m.windowed_share) * full + m.windowed_share * windowed_pairs


def _attention_widths(m: ModelSpec) -> tuple[int, int, int, int]:
    """(Q, K, V, output) widths entering the attention kernel. MLA trains in the decompressed
    form: every head gets its own key (nope + shared rope part) and value (DeepSeek-V2 sec. 2.1.2)."""
    if m.is_mla:
        return m.q_width, m.q_width, m.attn_out_width, m.attn_out_width
    return m.q_width, m.kv_dim, m.kv_dim, m.attn_out_width


def _attention_ops(m: ModelSpec, s: int, e: int, impl: str) -> list[Operator]:
    a = m.num_heads
    wq, wk, wv, wo = _attention_widths(m)
    pair_flops = 2.0 * (wq + wo)  # QK^T and AV for one (query, key) pair, summed over heads
    executed = attended_pairs(m, s)
    # Model-FLOPs convention: twice the causal pairs (s^2 without a window, as Megatron counts).
    model_flops = pair_flops * 2.0 * executed
    qkv_in = s * (wq + wk + wv) * e
    if impl == "flash":
        # One fused kernel (FlashAttention): causal masking skips about half of the s x s blocks
        # (a window skips the blocks outside it), nothing s x s touches HBM; it saves Q, K, V and
        # fp32 row statistics (its output is saved once, as the output projection's input).
        # Backward recomputes the scores: 2.5x forward FLOPs (Dao 2023, FlashAttention-2 sec. 3).
        return [Operator(
            name="attention", kind="attention", flops=pair_flops * executed, model_flops=model_flops,
            act_in_bytes=qkv_in, act_out_bytes=s * wo * e, weight_bytes=0.0, params=_sink_params(m),
            saved_bytes=qkv_in + 4.0 * a * s, sharding="split",
            bwd_flops_factor=2.5, bwd_bytes_factor=2.0, head_dim=wq / a,
        )]
    ops = _unfused_attention_ops(m, s, e, model_flops / (pair_flops * s * s))
    return _eager_mask_ops(m, s, e) + ops if impl == "unfused_eager_mask" else ops


def _sink_params(m: ModelSpec) -> int:
    """GPT-OSS's attention sinks: one learned logit per head joins the softmax's denominator
    (transformers' GptOssAttention.sinks); split with the heads. Their FLOPs (one more score per
    query and head) are left out: 1 / s of the softmax's."""
    return m.num_heads if m.attention_sinks else 0


def _eager_mask_ops(m: ModelSpec, s: int, e: int) -> list[Operator]:
    """Megatron-LM's attention before its fused scale-mask-softmax (spec.workload.ATTENTION_IMPLS):
    ``qk_scale`` divides Q and K by d^(1/4) (two kernels each way); ``attn_mask`` is torch.mul(scores,
    mask) then the subtraction of 10000 (1 - mask), two passes over the s x s scores (the [s, s] mask
    term is small and stays in cache). Backward: the subtraction passes its gradient through, the
    product multiplies it by the mask: one pass (bwd bytes 0.5x forward). Neither saves an
    activation: the product keeps only the mask, which needs no gradient."""
    wq, wk = _attention_widths(m)[:2]
    scores = m.num_heads * s * s * e
    qk_scale = replace(_elementwise("qk_scale", s, wq + wk, e, reads=1.0, writes=1.0, saved=0.0,
                                    sharding="split", selective=True), kernels=2, bwd_kernels=2,
                       bwd_bytes_factor=1.0)
    mask = Operator(name="attn_mask", kind="elementwise", flops=0.0, model_flops=0.0,
                    act_in_bytes=2.0 * scores, act_out_bytes=2.0 * scores, weight_bytes=0.0, params=0,
                    saved_bytes=0.0, sharding="split", bwd_bytes_factor=0.5, kernels=2,
                    selective_recompute=True)
    return [qk_scale, mask]


def _unfused_attention_ops(m: ModelSpec, s: int, e: int, share: float) -> list[Operator]:
    """The full s x s scores computed and masked (a window too), one matrix per head; ``share``
    scales their FLOPs to model FLOPs."""
    a = m.num_heads
    wq, wk, wv, wo = _attention_widths(m)
    qkv_in = s * (wq + wk + wv) * e
    qk_flops, av_flops = 2.0 * s * s * wq, 2.0 * s * s * wo
    scores = a * s * s * e
    mask = a * s * s * 1.0 if m.dropout else 0.0
    ops = [
        # Selective recomputation (Korthikanti sec. 5) redoes QK^T, softmax, dropout and the
        # product with V from the kept Q, K and V, and drops the s x s tensors.
        Operator(name="attn_scores", kind="bmm", flops=qk_flops, model_flops=qk_flops * share,
                 act_in_bytes=s * (wq + wk) * e, act_out_bytes=scores, weight_bytes=0.0,
                 params=0, saved_bytes=qkv_in, sharding="split", bwd_flops_factor=2.0,
                 bwd_bytes_factor=2.0, bwd_kernels=2, selective_recompute=True),
        # Megatron's fused scale-mask-softmax: read scores, write probabilities (saved: 2as^2b).
        Operator(name="softmax", kind="elementwise", flops=0.0, model_flops=0.0,
                 act_in_bytes=scores, act_out_bytes=scores, weight_bytes=0.0, params=_sink_params(m),
                 saved_bytes=scores, sharding="split", selective_recompute=True,
                 selective_dropped_bytes=scores),
    ]
    if m.dropout:
        ops.append(Operator(name="attn_dropout", kind="elementwise", flops=0.0, model_flops=0.0,
                            act_in_bytes=scores, act_out_bytes=scores + mask, weight_bytes=0.0,
                            params=0, saved_bytes=mask, sharding="split", selective_recompute=True,
                            selective_dropped_bytes=mask))
    ops.append(Operator(name="attn_context", kind="bmm", flops=av_flops, model_flops=av_flops * share,
                        act_in_bytes=scores + s * wv * e, act_out_bytes=s * wo * e,
                        weight_bytes=0.0, params=0, saved_bytes=scores,
                        sharding="split", bwd_flops_factor=2.0, bwd_bytes_factor=2.0,
                        bwd_kernels=2, selective_recompute=True, selective_dropped_bytes=scores))
    return ops


def _bias(m: ModelSpec, which: str) -> bool:
    value = getattr(m, which)
    return m.bias if value is None else value


def qkv_proj_width(m: ModelSpec) -> int:
    """Output width of the ``qkv_proj`` operator: Q, K and V; under MLA the fused down
    projections (query latent, KV latent and the shared rope key)."""
    if m.is_mla:
        return m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim
    return m.q_width + 2 * m.kv_dim


# The three GEMMs of an unfused Q/K/V projection (torchtitan's Llama wq, wk, wv; HF-style q_proj,
# k_proj, v_proj): one layer input, three weights, three kernels.
QKV_SPLIT = ("q_proj", "k_proj", "v_proj")


def qkv_projection_indices(names: tuple[str, ...]) -> list[int]:
    """Positions of the GEMMs that project the attention input to Q, K and V in a layer table:
    the fused ``qkv_proj`` (MLA's fused down projection too), else the three unfused ones."""
    if "qkv_proj" in names:
        return [names.index("qkv_proj")]
    return [names.index(n) for n in QKV_SPLIT if n in names]


def _qkv_projections(m: ModelSpec, s: int, e: int, fused: bool) -> list[Operator]:
    """Q, K and V from the attention input: one GEMM of width q + 2 kv (Megatron's linear_qkv, MPT's
    Wqkv), or three (torchtitan's Llama: separate nn.Linear wq, wk, wv), which read the input three
    times and, with grouped-query attention, give K and V narrow GEMMs. Same FLOPs, parameters and
    weight bytes in total; autograd saves the shared input once (in q_proj's slot) and, under FP8,
    it is cast once (``shares_input``): torch.compile's common-subexpression elimination merges
    the three Float8Linears' identical input casts (tests/test_qkv_split.py shows it on a
    torchao-like cast), and torchtitan's tensorwise TP casts the module input before its gather."""
    h, bias = m.hidden_size, _bias(m, "qkv_bias")
    if fused:
        return [_linear("qkv_proj", s, h, qkv_proj_width(m), e, "column", bias)]
    return [_linear("q_proj", s, h, m.q_width, e, "column", bias),
            _linear("k_proj", s, h, m.kv_dim, e, "column", bias, save_input=False, shares_input=True),
            _linear("v_proj", s, h, m.kv_dim, e, "column", bias, save_input=False, shares_input=True)]


def _mla_projections(m: ModelSpec, s: int, e: int) -> list[Operator]:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1): x is compressed to a
    query latent (q_lora_rank) and a joint KV latent (kv_lora_rank) plus one rope key shared by the
    heads; RMSNorms on the latents; up projections give every head's query, key (nope part) and
    value. The down projections are small and kept whole on every TP rank, as Megatron-Core's MLA
    does; the up projections are column-parallel over heads."""
    h, bias = m.hidden_size, _bias(m, "qkv_bias")
    ops = [_linear("qkv_proj", s, h, qkv_proj_width(m), e, "replicated", bias),
           _norm("latent_norm", m, s, e, m.q_lora_rank + m.kv_lora_rank,
                 params=m.q_lora_rank + m.kv_lora_rank)]  # RMSNorm: one scale per feature
    if m.q_lora_rank:
        ops.append(_linear("q_up", s, m.q_lora_rank, m.q_width, e, "column", False))
    else:
        ops.append(_linear("q_proj", s, h, m.q_width, e, "column", False))
    ops.append(_linear("kv_up", s, m.kv_lora_rank, m.num_heads * (m.qk_nope_head_dim + m.v_head_dim), e,
                       "column", False))
    return ops


def attention_operators(m: ModelSpec, s: int, e: int, impl: str, qkv_fused: bool = True) -> list[Operator]:
    """The attention branch after its input norm: projections, QK norms, the attention kernel,
    the output projection (and Gemma 2's norm of the branch output). ``qkv_fused`` False: Q, K
    and V as three GEMMs (_qkv_projections); MLA keeps its own projections either way."""
    h = m.hidden_size
    if m.is_mla:
        ops = _mla_projections(m, s, e)
    else:
        ops = _qkv_projections(m, s, e, qkv_fused)
        if m.qk_norm != "none":  # Qwen3: RMSNorm per head (weights shared by heads); OLMoE: over Q and K
            width = m.q_width + m.kv_dim
            params = {"head": 2 * m.head_dim, "full": width, "l2": 0}[m.qk_norm]
            norm = _norm("qk_norm", m, s, e, width, sharding="split",
                         params=params * (2 if m.norm == "layernorm" else 1))
            # Llama 4's L2 norm has no weights (and runs on its RoPE layers only; priced on all)
            ops.append(replace(norm, weight_bytes=0.0) if m.qk_norm == "l2" else norm)
    ops.extend(_attention_ops(m, s, e, impl))
    ops.append(_linear("out_proj", s, m.attn_out_width, h, e, "row", _bias(m, "attn_out_bias")))
    if m.norms_per_layer == 4:  # sandwich norms (Gemma 2 report, sec. 2.2)
        ops.append(_norm("post_attn_norm", m, s, e))
    return ops


def decode_attention(m: ModelSpec, context_len: float, e: int) -> dict[str, float]:
    """FLOPs and bytes of the attention kernel for one new token over ``context_len`` cached
    positions (flash-decoding, Dao et al. 2023): it reads the token's Q (and K, V), the cached
    K/V of every position (windowed layers: of the last ``sliding_window`` only) and writes its
    output. MLA decodes in the absorbed form (DeepSeek-V2 sec. 2.1.3; FlashMLA): every head scores
    the cached latent and rope key (kv_lora_rank + rope) and sums the latents (kv_lora_rank)."""
    positions = m.cached_positions(context_len)
    if m.is_mla:
        flops = 2.0 * positions * m.num_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        token = m.q_width + m.kv_lora_rank + m.qk_rope_head_dim
    else:
        flops = 2.0 * positions * (m.q_width + m.attn_out_width)
        token = m.q_width + 2 * m.kv_dim
    cached = positions * m.kv_cache_elements_per_token_per_layer()
    return {"flops": flops, "in_bytes": (token + cached) * e, "out_bytes": m.attn_out_width * e}


def _ffn_ops(m: ModelSpec, s: int, e: int, moe_layer: bool = False) -> list[Operator]:
    if moe_layer:
        return moe_ffn_operators(m, s, e)
    h, f = m.hidden_size, m.ffn_hidden_size
    gated = m.is_gated_ffn
    up_width = 2 * f if gated else f
    ops = [_linear("ffn_up", s, h, up_width, e, "column", _bias(m, "ffn_bias"))]
    if m.ffn_activation != "none":
        # Activation reads the up projection (both halves when gated) and writes f; it saves its
        # input (Korthikanti: the GeLU input 8sbh), which the down projection's input is not
        # when gated, so the down projection saves its own input too.
        ops.append(_elementwise("ffn_act", s, f, e, reads=up_width / f, writes=1.0,
                                saved=s * up_width * e, sharding="split"))
    ops.append(_linear("ffn_down", s, f, h, e, "row", _bias(m, "ffn_bias")))
    return ops


def layer_operators(m: ModelSpec, seq_len: int, act_bytes: int, attention_impl: str = "flash",
                    moe_layer: bool = False, qkv_fused: bool = True) -> list[Operator]:
    """Operators of one transformer layer (pre-norm) in execution order; ``moe_layer``: its FFN
    is the mixture of experts (graph/moe_ops.py); ``qkv_fused``: see attention_operators."""
    s, e = seq_len, act_bytes
    ops: list[Operator] = []
    if m.has_attention:
        ops.append(_norm("attn_norm", m, s, e))
        ops.extend(attention_operators(m, s, e, attention_impl, qkv_fused))
        ops.append(_residual("attn_residual", m, s, e))
        if m.norms_per_layer > 1:  # Falcon-7B's parallel block feeds attention and FFN one norm
            ops.append(_norm("ffn_norm", m, s, e))
        ops.extend(_ffn_ops(m, s, e, moe_layer))
        if m.norms_per_layer == 4:
            ops.append(_norm("post_ffn_norm", m, s, e))
        ops.append(_residual("ffn_residual", m, s, e))
    else:
        ops.extend(_ffn_ops(m, s, e, moe_layer))
    return ops


def layer_graph(m: ModelSpec, seq_len: int, act_bytes: int, attention_impl: str = "flash",
                moe_layer: bool = False, qkv_fused: bool = True) -> nx.DiGraph:
    """One transformer layer as a DiGraph: the operator chain plus the residual edges."""
    graph = _chain(layer_operators(m, seq_len, act_bytes, attention_impl, moe_layer, qkv_fused))
    if m.has_attention:  # residual connections skip their branch
        graph.add_edge("input", "attn_residual")
        graph.add_edge("attn_residual", "ffn_residual")
    return graph


def embedding_operators(m: ModelSpec, seq_len: int, act_bytes: int) -> list[Operator]:
    """Token (and learned position) embedding; vocab-parallel under TP."""
    s, e, h = seq_len, act_bytes, m.hidden_size
    ops = [Operator(name="token_embedding", kind="embedding", flops=0.0, model_flops=0.0,
                    act_in_bytes=s * h * e, act_out_bytes=s * h * e, weight_bytes=0.0,
                    params=m.vocab_size * h, saved_bytes=0.0, sharding="vocab")]
    if m.position_embedding == "learned":
        ops.append(Operator(name="position_embedding", kind="elementwise", flops=0.0, model_flops=0.0,
                            act_in_bytes=2.0 * s * h * e, act_out_bytes=s * h * e,
                            weight_bytes=0.0, params=m.max_seq_len * h, saved_bytes=0.0,
                            sharding="replicated"))
    if m.embedding_norm:  # BLOOM normalises the embedding output
        ops.append(_norm("embedding_norm", m, s, e))
    if m.dropout:
        ops.append(_elementwise("embedding_dropout", s, h, e, reads=1.0, writes=1.0 + 1.0 / e,
                                saved=s * h * 1.0))
    return ops


def embedding_graph(m: ModelSpec, seq_len: int, act_bytes: int) -> nx.DiGraph:
    return _chain(embedding_operators(m, seq_len, act_bytes))


def head_operators(m: ModelSpec, seq_len: int, act_bytes: int) -> list[Operator]:
    """Final norm, output logits (vocab-parallel) and cross-entropy loss."""
    s, e, h, v = seq_len, act_bytes, m.hidden_size, m.vocab_size
    logits = _linear("logits", s, h, v, e, "column", False)
    if m.tied_embeddings:
        logits = Operator(**{**logits.__dict__, "params": 0})  # shares the embedding matrix
    # Megatron's vocab-parallel cross entropy works in fp32: it reads the logits, writes an fp32
    # copy, exponentiates in place and reduces (about three fp32 passes) and keeps the fp32
    # softmax for backward. Backward (its autograd backward, then the fp32 cast's): read the saved
    # softmax and write the gradient (4 + 4), scale it by the loss gradient in place (4 + 4),
    # cast it to the 16-bit logits gradient (4 + e): as many bytes as forward, for e = 2.
    loss = Operator(name="cross_entropy", kind="loss", flops=0.0, model_flops=0.0,
                    act_in_bytes=s * v * (e + 8.0), act_out_bytes=s * v * 4.0,
                    weight_bytes=0.0, params=0, saved_bytes=s * v * 4.0, sharding="split",
                    bwd_bytes_factor=1.0)
    return [_norm("final_norm", m, s, e), logits, loss]


def head_graph(m: ModelSpec, seq_len: int, act_bytes: int) -> nx.DiGraph:
    """Final norm, output logits (vocab-parallel) and cross-entropy loss, as a DiGraph."""
    return _chain(head_operators(m, seq_len, act_bytes))


def _chain(ops: list[Operator]) -> nx.DiGraph:
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_node("input")
    previous = "input"
    for op in ops:
        graph.add_node(op.name, op=op)
        graph.add_edge(previous, op.name)
        previous = op.name
    graph.add_node("output")
    graph.add_edge(previous, "output")
    return graph


def operators(graph: nx.DiGraph) -> list[Operator]:
    """The operators of ``graph`` in topological (execution) order."""
    import networkx as nx

    return [graph.nodes[n]["op"] for n in nx.topological_sort(graph) if "op" in graph.nodes[n]]
