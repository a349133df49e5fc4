"""Two kernel rates a training step's trace showed the cost model missing (issue 27), measured alone.

1. GEMMs with a dimension that is not a multiple of 8 (a vocabulary of 50,257): cuBLAS cannot use
   its 16-byte-aligned Hopper kernels and falls back to ``align1`` kernels. Each of the LM head's
   three GEMMs (forward, input gradient, weight gradient) is timed with the vocabulary as it is
   and padded to a multiple of 128, in bf16.
2. torch's fused AdamW (``torch.optim.AdamW(fused=True)``, the eager runtimes' optimizer) over
   fp32 parameters, gradients and states, timed per step, reported as bytes moved per second
   (28 bytes per parameter: parameter, exp_avg and exp_avg_sq read and written, gradient read).
3. SDPA (``F.scaled_dot_product_attention``, causal, bf16, the kernel PyTorch picks) at head
   dimensions 64 to 256 with the width (heads x head dim) held at 2048, so every row does the
   same matmul FLOPs: forward and backward timed apart, with and without dropout. Gemma 2's head
   dim 256 ran at about 0.39 of the head-128 rate inside its step (tests/data/h200/check-2026-11-27b).

    python scripts/gpu_kernel_rates.py OUT.json [sdpa_head_dims|head_gemms|fused_adamw ...]
"""

from __future__ import annotations

import json
import sys

import torch

# (tokens, hidden, vocab): GPT-2/GPT-3's 50,257 and LLaMA-1's 32,000 (+1: an added pad token)
HEAD_SHAPES = [(16384, 2048, 50257), (16384, 2560, 50257), (8192, 4096, 50257), (4096, 2048, 50257),
               (16384, 2048, 32001), (16384, 768, 50257)]
# parameter tensors of one optimizer step: (count, elements each)
ADAM_SETS = [("1.3b-like", [(24, 4 * 2048 * 2048 * 3), (1, 50257 * 2048)]), ("0.3b", [(24, 12 * 1024 * 1024)]),
             ("3.4b-experts", [(8, 64 * 3 * 2048 * 1024), (2, 50304 * 2048)])]


def _time_ms(fn, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def _head_rows(tokens: int, hidden: int, v: int) -> list[dict]:
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(v, hidden, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(tokens, v, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * tokens * hidden * v
    rows = []
    for name, fn in (("fwd", lambda: x @ w.t()), ("dgrad", lambda: dy @ w), ("wgrad", lambda: dy.t() @ x)):
        ms = _time_ms(fn)
        rows.append({"tokens": tokens, "hidden": hidden, "vocab": v, "gemm": name, "ms": ms, "tflops": flops / ms / 1e9})
    return rows


def head_gemms() -> list[dict]:
    rows = []
    for tokens, hidden, vocab in HEAD_SHAPES:
        for v in (vocab, -(-vocab // 128) * 128):
            rows += _head_rows(tokens, hidden, v)
            torch.cuda.empty_cache()
    return rows


def fused_adamw() -> list[dict]:
    rows = []
    for name, groups in ADAM_SETS:
        params = [torch.nn.Parameter(torch.randn(n, device="cuda")) for count, n in groups for _ in range(count)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
        count = sum(p.numel() for p in params)
        ms = _time_ms(opt.step)
        rows.append({"set": name, "params": count, "tensors": len(params), "ms": ms,
                     "tb_per_s_at_28_bytes": 28.0 * count / ms / 1e9})
        del params, opt
        torch.cuda.empty_cache()
    return rows


# (batch, sequence) at width 2048; head dims of GPT-2 (64), GPT-3 2.7B (80), 96, Llama (128), 192, Gemma (256)
SDPA_SHAPES = [(2, 4096), (8, 2048)]
SDPA_HEAD_DIMS = [64, 80, 96, 128, 192, 256]


def _sdpa_row(batch: int, seq: int, head_dim: int, dropout_p: float, masked: bool = False) -> dict:
    heads = 2048 // head_dim
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    # masked: the causal pattern passed as a boolean mask, as transformers does where it cannot use
    # is_causal (masking_utils._ignore_causal_mask_sdpa: a sliding window at least the sequence long)
    mask = torch.ones(seq, seq, device="cuda", dtype=torch.bool).tril().expand(batch, 1, seq, seq) if masked else None

    def attend():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                                is_causal=not masked)

    grad = torch.randn_like(attend())
    fwd_ms = _time_ms(attend)
    both_ms = _time_ms(lambda: torch.autograd.grad(attend(), (q, k, v), grad))
    flops = 2.0 * batch * heads * seq * seq * head_dim  # QK^T and PV, causal: half of 4 b h s^2 d
    return {"batch": batch, "seq": seq, "head_dim": head_dim, "heads": heads, "dropout_p": dropout_p, "masked": masked,
            "fwd_ms": fwd_ms, "bwd_ms": both_ms - fwd_ms, "fwd_tflops": flops / fwd_ms / 1e9,
            "bwd_tflops": 2.5 * flops / (both_ms - fwd_ms) / 1e9}


def sdpa_head_dims() -> list[dict]:
    rows = []
    for batch, seq in SDPA_SHAPES:
        for head_dim in SDPA_HEAD_DIMS:
            for dropout_p in (0.0, 0.1):
                try:
                    rows.append(_sdpa_row(batch, seq, head_dim, dropout_p))
                except RuntimeError as err:  # a head dim no kernel on this GPU takes
                    rows.append({"batch": batch, "seq": seq, "head_dim": head_dim, "dropout_p": dropout_p,
                                 "error": str(err).splitlines()[0]})
                torch.cuda.empty_cache()
            if head_dim in (64, 128, 256):
                rows.append(_sdpa_row(batch, seq, head_dim, 0.0, masked=True))
    return rows


PARTS = {"sdpa_head_dims": sdpa_head_dims, "head_gemms": head_gemms, "fused_adamw": fused_adamw}


def main() -> None:
    """OUT.json [PART ...]: every part unless named."""
    parts = sys.argv[2:] or list(PARTS)
    report = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "gpu": torch.cuda.get_device_name(), **{part: PARTS[part]() for part in parts}}
    with open(sys.argv[1], "w") as f:
        json.dump(report, f, indent=1)
    for part in parts:
        for row in report[part]:
            print(row, flush=True)


if __name__ == "__main__":
    main()
