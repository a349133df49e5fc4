"""Mixture-of-experts FFN of the reference transformer, with expert parallelism over a group.

A token's router logits (``router``, hidden -> experts, with GPT-OSS's bias where the spec has
it) pick its top-k experts; the gate weights follow the spec's router (softmax then top-k; top-k
then softmax, Mixtral; sigmoid then top-k, normalised over the chosen, DeepSeek-V3; top-k then
each one's sigmoid, Llama 4, applied here to the expert's output, not its input: the same work).
Routed rows are sorted by expert, and under expert parallelism sent to the experts' owners with
``torch.distributed.nn.functional.all_to_all_single`` (differentiable: backward runs the
reverse all-to-all), computed per expert as plain matmuls over that expert's rows (dropless,
as Megatron-Core's grouped GEMM), sent back, and summed with their gate weights. Shared
experts are a dense FFN beside them. Expert weights are ``(experts, in, out)`` tensors, so an
expert-parallel rank keeps a slice of them (:func:`shard_experts`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autotune.spec.model import ModelSpec
from autotune.validate.feed_forward import FeedForward

__all__ = ["MoEFeedForward", "shard_experts", "expert_parameters"]


def _activate(up: torch.Tensor, gate: torch.Tensor | None, activation: str) -> torch.Tensor:
    if gate is not None:  # swiglu, or geglu
        return (F.silu(up) if activation == "swiglu" else F.gelu(up)) * gate
    return {"gelu": F.gelu, "relu": F.relu}.get(activation, lambda t: t)(up)


def _gates(logits: torch.Tensor, k: int, router: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, expert indices), each (tokens, k)."""
    if router in ("topk_softmax", "topk_sigmoid"):  # Llama 4: each weight the sigmoid of its logit
        top, idx = logits.topk(k, dim=-1)
        return (top.softmax(-1) if router == "topk_softmax" else top.sigmoid()), idx
    scores = logits.sigmoid() if router == "sigmoid_topk" else logits.softmax(-1)
    top, idx = scores.topk(k, dim=-1)
    if router == "sigmoid_topk":
        top = top / top.sum(-1, keepdim=True)
    return top, idx


class MoEFeedForward(nn.Module):
    """Routed experts (and shared experts) of one MoE layer."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, f, n = spec.hidden_size, spec.expert_ffn_hidden_size, spec.num_experts
        self.k, self.router_kind, self.activation = spec.num_experts_per_token, spec.router, spec.ffn_activation
        self.num_experts = n
        self.scale = float(spec.router_scaling_factor)  # DeepSeek's routed_scaling_factor
        self.router = nn.Linear(h, n, bias=spec.router_bias)  # GPT-OSS: a bias per expert
        self.experts_w1 = nn.Parameter(torch.empty(n, h, f))
        self.experts_w3 = nn.Parameter(torch.empty(n, h, f)) if spec.is_gated_ffn else None
        self.experts_w2 = nn.Parameter(torch.empty(n, f, h))
        self.shared = None
        if spec.num_shared_experts:
            width = spec.num_shared_experts * spec.shared_expert_ffn_hidden_size
            self.shared = FeedForward(spec.with_changes(ffn_hidden_size=width, num_experts=0, num_experts_per_token=0,
                                                        num_shared_experts=0, shared_expert_ffn_hidden_size=0,
                                                        first_k_dense_layers=0, shared_expert_gate=False))
        self.shared_gate = nn.Linear(h, 1, bias=False) if spec.shared_expert_gate else None
        self.ep_group = None  # set by shard_experts
        self.ep_size = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        weights, idx = _gates(self.router(tokens).float(), self.k, self.router_kind)
        weights = weights * self.scale
        if torch.compiler.is_compiling() and self.ep_group is None:  # torch.export: static shapes
            y = (self._gathered(tokens, idx) * weights[..., None].to(tokens.dtype)).sum(1)
            return self._with_shared(y, tokens).reshape(shape)
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)  # routed rows grouped by expert
        rows = tokens[order // self.k]
        counts = torch.bincount(flat, minlength=self.num_experts)
        out = self._experts(rows, counts)
        gated = out * weights.reshape(-1)[order, None].to(out.dtype)
        # in the experts' dtype: under autocast their matmuls return bf16 while the tokens are fp32,
        # and index_add takes one dtype (the dense FFN's output projection returns bf16 too)
        y = gated.new_zeros(tokens.shape).index_add(0, order // self.k, gated)
        return self._with_shared(y, tokens).reshape(shape)

    def _with_shared(self, y: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        if self.shared is None:
            return y
        shared = self.shared(tokens)
        if self.shared_gate is not None:
            shared = torch.sigmoid(self.shared_gate(tokens)) * shared
        return y + shared

    def _experts(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if self.ep_group is None:
            return self._local(rows, counts.tolist())
        import torch.distributed as dist
        from torch.distributed.nn.functional import all_to_all_single

        local_n = self.num_experts // self.ep_size
        send = counts.view(self.ep_size, local_n)  # rows for each owner, by its local expert
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.ep_group)  # how many rows each peer sends
        send_split, recv_split = send.sum(1).tolist(), recv.sum(1).tolist()
        got = all_to_all_single(rows.new_empty(sum(recv_split), rows.shape[1]), rows, recv_split, send_split,
                                group=self.ep_group)
        # received rows come grouped by sender, then by expert: regroup them by expert
        expert_of = torch.repeat_interleave(torch.arange(local_n).repeat(self.ep_size), recv.reshape(-1))
        regroup = expert_of.argsort(stable=True)
        out = self._local(got[regroup], recv.sum(0).tolist())
        back = torch.empty_like(out).index_copy(0, regroup, out)
        return all_to_all_single(back.new_empty(rows.shape), back, send_split, recv_split, group=self.ep_group)

    def _gathered(self, tokens: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """(tokens, k, hidden) expert outputs with static shapes, for tracing: each routed row
        times its expert's gathered weights, one batched matmul per projection. The same FLOPs
        as the dropless per-expert matmuls (2 x rows x in x out each); the gathered weights make
        its traced memory larger than a real run's."""
        rows = tokens.repeat_interleave(self.k, 0)[:, None, :]
        chosen = idx.reshape(-1)
        gate = torch.bmm(rows, self.experts_w3[chosen]) if self.experts_w3 is not None else None
        hidden = _activate(torch.bmm(rows, self.experts_w1[chosen]), gate, self.activation)
        return torch.bmm(hidden, self.experts_w2[chosen]).reshape(tokens.shape[0], self.k, -1)

    def _local(self, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
        # One unbind per weight, not an index per expert: indexing experts_w1[e] makes autograd
        # fill a zero tensor of the whole (experts, in, out) weight and add it into the gradient
        # for every expert. On an H200 that was 2.47 s of a 3.86 s OLMoE step, 64 experts x 3
        # weights x 16 layers (tests/data/h200/check-2026-11-27/trace_e.json). unbind's backward
        # stacks the experts' gradients once.
        w1, w2 = self.experts_w1.unbind(0), self.experts_w2.unbind(0)
        w3 = self.experts_w3.unbind(0) if self.experts_w3 is not None else None
        # One split, not a slice per expert: a slice's backward fills a zero tensor of all the routed
        # rows and adds it into their gradient, per expert (64 x 1 GiB per OLMoE layer in the same
        # trace after the unbind: tests/data/h200/check-2026-11-27b); split's backward is one cat.
        outs = []
        for e, part in enumerate(rows.split(counts)):
            gate = part @ w3[e] if w3 is not None else None
            outs.append(_activate(part @ w1[e], gate, self.activation) @ w2[e])
        return torch.cat(outs) if outs else rows.new_zeros(0, rows.shape[1])


def expert_parameters(model: nn.Module) -> list[torch.Tensor]:
    """The routed experts' weights (synchronised over expert data parallelism, not dp)."""
    return [p for m in model.modules() if isinstance(m, MoEFeedForward)
            for p in (m.experts_w1, m.experts_w3, m.experts_w2) if p is not None]


@torch.no_grad()
def shard_experts(model: nn.Module, group, ep_rank: int, ep_size: int) -> None:
    """Keep experts ``[ep_rank * E/ep, (ep_rank+1) * E/ep)`` of every MoE layer on this rank."""
    for module in model.modules():
        if not isinstance(module, MoEFeedForward):
            continue
        n = module.num_experts // ep_size
        for name in ("experts_w1", "experts_w3", "experts_w2"):
            full = getattr(module, name)
            if full is not None:
                setattr(module, name, nn.Parameter(full[ep_rank * n:(ep_rank + 1) * n].clone()))
        module.ep_group, module.ep_size = group, ep_size
