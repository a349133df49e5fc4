"""TensorRT-LLM's attention-DP MoE padded to its busiest rank's tokens (issue 31, trtdep45).

Under attention DP every rank runs its own requests, then the MoE layer gathers all ranks' rows. Where the
model's MoE block asks for ``use_dp_padding``, each rank first pads its rows to the largest rank's count
(``max(all_rank_num_tokens)``), so the gather, the experts and the reduce-scatter run tp x that many rows
(fused_moe_cutlass.py / fused_moe_trtllm_gen.py forward_impl: ``all_rank_num_tokens_padded``). Which MoE
blocks pad (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models, stored revisions, index ids as read here):

* Llama 4 (modeling_llama.py ``Llama4MoE.compute_routed_output``, ids 3642749976, 38009908308, 50019512026):
  always under attention DP ("Use padding here to keep the behavior unchanged");
* Qwen3-MoE (modeling_qwen3_moe.py ``Qwen3MoE.forward``, id 3793318909) and DeepSeek-V3 (modeling_deepseekv3.py
  ``Deepseekv3MoE.compute_routed_output``, the same test in the diff id 56338329362, commit b558232ce1 of
  2025-06-19): when the experts are not the CUTLASS module (TRTLLM-Gen: ``moe_config: backend: TRTLLM``) or carry
  NVFP4 weights (``not has_fp8_qdq and has_nvfp4``: the input's scale factors travel with it); per-tensor FP8 and
  block-FP8 CUTLASS gather the ranks' own counts unpadded. Releases before _UNPADDED_RELEASE only: "feat: Remove
  padding in attention DP" (NVIDIA/TensorRT-LLM #6064, commit 07e8813984, 2025-07-18, between the 1.0.0rc4 and
  1.0.0rc5 version bumps of 2025-07-16 / 07-22; index id 56537323666) dropped it, and PR #7965 (2025-09-24, "Add DP
  padding back on SM120") restored it on SM120 only (the later revisions, ids 57691043244 / 4402535747:
  ``get_sm_version() == 120``), a GPU no preset prices.

Llama 4 likewise: the three revisions above are of the 0.2x era (two build ``FusedMoE``, one ``create_moe``
without ``layer_idx``); a later one (id 426411151, ``create_moe`` with ``layer_idx``) calls the experts with
``use_dp_padding=False`` and pads nothing, and PR #8052 (2025-09-29) says DP padding "is only enabled on" SM120.
The commit that dropped Llama 4's is not read; #6064, whose title covers every model, is taken as it, so no
TensorRT-LLM release from 1.0 pads.

A decode-only step runs every rank at the same padded CUDA-graph batch (graph_padding.py), so only steps with
prompt tokens, whose prompts sit whole on their ranks, move: StepModel.gpu_s prices their experts and exchange
at tp x the busiest rank's tokens. Other engines (SGLang's MAX_LEN, vLLM) and the MLPerf harness are not
changed here.
"""

from __future__ import annotations

from dataclasses import replace

from autotune.spec.serving_engine import release_number

__all__ = ["pads_dp_moe", "with_dp_padding"]

# Llama4MoE's routing (top-k, then a sigmoid on the chosen logit, applied to the expert's input)
_ALWAYS_PADDING_ROUTERS = ("topk_sigmoid",)
# the first release whose MoE blocks pad nothing off SM120 (PR #6064, 2025-07-18: in 1.0.0rc5 and later)
_UNPADDED_RELEASE = (1,)


def pads_dp_moe(engine: str, model, dtype: str, moe_backend: str, attention_dp: bool, tp: int,
                version: str = "") -> bool:
    """Whether TensorRT-LLM release ``version`` (no number: the newest) pads every rank's MoE rows to the busiest
    rank's under attention DP."""
    if engine != "tensorrt-llm" or not (attention_dp and tp > 1 and model.is_moe):
        return False
    if (release_number(version) or (10**6,)) >= _UNPADDED_RELEASE:
        return False
    return model.router in _ALWAYS_PADDING_ROUTERS or dtype == "nvfp4" or moe_backend == "trtllm"


def with_dp_padding(step, dep, moe_backend: str):
    """``step`` (a StepModel) marked to price its MoE at the busiest rank's padded rows where ``dep``'s engine pads."""
    engine = dep.runtime.serving
    if not pads_dp_moe(engine.engine, dep.model, dep.dtype, moe_backend, dep.attention_dp, dep.tp, engine.version):
        return step
    return replace(step, dp_padded_moe=True)
