"""Host time of the argument validation FlashInfer's ``gemm_fp8_nt_groupwise`` runs on every call, beside one
``nn.Linear`` forward on the same CPU (docs/serving.md, sgc1_45).

SGLang 0.5.12 with DeepGEMM off (the InferenceX B200 FP8 recipe) runs each block-FP8 linear of a prompt step through
FlashInfer's ``gemm_fp8_nt_groupwise`` (flashinfer-python 0.6.11.post1, the version the 0.5.12 wheel pins). That
function is wrapped by ``backend_requirement`` (flashinfer/utils.py), which, unless the caller passes
``skip_check=True`` (SGLang does not: layers/quantization/fp8_utils.py ``gemm_fp8_nt_groupwise``), binds the call's
arguments to the signature with ``inspect.Signature.bind`` and ``apply_defaults`` before its checks. This script times
that binding for a function of the same ten parameters called as SGLang calls it (four tensors, ``out_dtype`` and
``backend`` by keyword): standard-library Python, no FlashInfer code. The ratio to an ``nn.Linear`` forward carries
the published per-Linear host time (cost/host.py LINEAR_FWD_HOST_S, 13.48 us on a DGX H100's Xeon 8480C) to a server
CPU, as profilers/host_ops.py does for an operator. Not timed: the checks themselves, the custom-op dispatch and
FlashInfer's C++ entry (``trtllm_gemm`` in data/csrc/trtllm_gemm_runner.cu builds a runner each call, which filters
the whole kernel-config table, and picks an FP8 kernel by comparing names over that table; the table,
flashinferMetaInfo.h, is fetched with the cubins and is not in the wheel).

usage: python scripts/bench_fp8_linear_wrapper_host.py [REPEATS]"""

from __future__ import annotations

import inspect
import sys
import time

import torch

from autotune.cost.host import LINEAR_FWD_HOST_S

# the block-FP8 linear calls one prompt step of DeepSeek-V3/R1 makes (docs/serving.md: six linears a layer, 61 layers)
CALLS_PER_PROMPT_STEP = 366


def _groupwise(a, b, a_scale, b_scale, scale_major_mode=None, mma_sm=1, scale_granularity_mnk=(1, 128, 128),
               out=None, out_dtype=None, backend="cutlass"):
    """The parameter list of gemm_fp8_nt_groupwise (flashinfer/gemm/gemm_base.py, 0.6.11.post1); body empty."""


def _best(fn, repeats: int) -> float:
    """The 10th-percentile seconds of one call of ``fn`` (least disturbed by other load), 100 calls a sample."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(100):
            fn()
        samples.append((time.perf_counter() - start) / 100)
    return sorted(samples)[len(samples) // 10]


def measure(repeats: int = 200) -> dict[str, float]:
    """Seconds of one signature binding and of one nn.Linear(256, 256) forward on 8 rows, and their ratio."""
    sig = inspect.signature(_groupwise)
    t = torch.empty(8, 8)

    def bind():
        bound = sig.bind(t, t, t, t, out_dtype=torch.bfloat16, backend="trtllm")
        bound.apply_defaults()
        return dict(bound.arguments)

    linear, x = torch.nn.Linear(256, 256), torch.randn(8, 256)
    with torch.no_grad():
        bind_s, linear_s = _best(bind, repeats), _best(lambda: linear(x), repeats)
    return {"bind_s": bind_s, "linear_fwd_s": linear_s, "bind_over_linear": bind_s / linear_s}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    m = measure(repeats)
    server_s = m["bind_over_linear"] * LINEAR_FWD_HOST_S["x86"]
    print(f"torch {torch.__version__}: bind {m['bind_s'] * 1e6:.1f} us, nn.Linear forward {m['linear_fwd_s'] * 1e6:.1f} us,"
          f" ratio {m['bind_over_linear']:.2f}")
    print(f"on a DGX H100 host (x{LINEAR_FWD_HOST_S['x86'] * 1e6:.2f} us a Linear): {server_s * 1e6:.1f} us a call,"
          f" {server_s * CALLS_PER_PROMPT_STEP * 1e3:.2f} ms over {CALLS_PER_PROMPT_STEP} calls of a prompt step")


if __name__ == "__main__":
    main()
