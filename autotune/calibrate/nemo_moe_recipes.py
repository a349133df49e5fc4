"""MoE settings of the NeMo / Megatron-Bridge performance recipes that the published tables do not
print, per (container, gpu, model key): the token dispatcher and 1F1B all-to-all overlap, the CUDA
graph scope and the selectively recomputed modules (calibrate/modern.py keys the rows and reads them).

Which Megatron-Bridge release each NeMo container shipped (git history of NVIDIA-NeMo/Megatron-Bridge):
  25.09 = v0.1.0rc4, 25.11 = v0.2.0, 26.02 = v0.3.0, 26.04 = v0.4.0, 26.06 = v0.5.0: the "Megatron-Bridge"
    line of each container in docs/releases/software-versions.md @v0.5.1 (25.09's Megatron Core 0.14.0).
  26.02.01 = release branch r0.3.0 @1f0cfc3bc (inferred): the commit that cherry-picks the 26.02.01 table
    into r0.3.0 (2026-03-21, "patch container data"), a day after tag v0.3.1; its recipes are v0.3.1's
    plus 904597bd3 of the same day (GPT-OSS B200 V2: ep 8, hybridep), which the 26.02.01 B200 row's ep 8 needs.
  26.04.01 = v0.4.2 (inferred): the 26.04.01 tables were cherry-picked into r0.4.0 on 2026-05-26/27 (cab6db381,
    2b82f6f17) and tag v0.4.2 on r0.4.0 the next day is the first tag whose docs/performance-summary.md leads
    with them (v0.4.1 sits on branch r0.4.1, whose docs never got a 26.04 table).
  26.06.01 = v0.5.1 (inferred: 2026-07-20 tag on r0.5.0, table cherry-picked there 2026-07-22, cba825fdd).
  26.08 = v0.6.0 (inferred: 26.08 table cherry-picked into r0.6.0 2026-08-11, 5796c06a1; tag 2026-08-19).
Each entry names the tag, the file and the config whose GPU count, TP/PP/VPP/EP, GBS, MBS and precision
match the row (configs V1/V2: --config_variant). Paths are under scripts/performance/ (src/megatron/bridge/
perf_recipes/ from v0.6.0). How the settings take effect, per tag:
  dispatcher: v0.4.0 on, utils/overrides.py set_workload_base_configs applies moe_flex_dispatcher_backend
    (deepep or hybridep: moe_token_dispatcher_type flex, both "deepep" here) and sets alltoall when it is
    None; v0.3.x, configs/qwen/qwen3_llm_pretrain.py sets the type per GPU (flex, but alltoall for B200 and
    H100 Qwen3-235B), recipes/deepseek/deepseek_v3.py applies its backend, and the GPT-OSS recipe never
    reads the backend (recipes/gpt_oss/gpt_oss.py: alltoall); v0.2.0 and v0.3.0 pass the backend to the
    recipe, which applies it (training/flex_dispatcher_backend.py).
  overlap: moe_a2a_overlap sets comm_overlap.overlap_moe_expert_parallel_comm (utils/overrides.py
    _set_moe_a2a_overlap_overrides); full-iteration recipes set it themselves.
  graphs: cuda_graph_impl transformer_engine with the config's cuda_graph_scope, or full_iteration; without
    either the recipes' cuda_graph_impl "none" (recipes/*/: no graphs).
  recompute: recompute_modules sets recompute_granularity selective (utils/overrides.py
    _set_recompute_overrides); DeepSeek's *_llm_pretrain.py sets selective itself.
"""

from __future__ import annotations

__all__ = ["NEMO_MOE_RECIPES", "NEMO_CUDA_GRAPHS", "NEMO_RECOMPUTE_MODULES", "NEMO_NO_TP_OVERLAP"]

_DS = "configs/deepseek/deepseek_workload_base_configs.py"
_GO = "configs/gpt_oss/gpt_oss_workload_base_configs.py"
_QW = "configs/qwen/qwen3_workload_base_configs.py"
_R0301 = "Megatron-Bridge r0.3.0@1f0cfc3bc"  # = 26.02.01, see above

H100, B200, GB200 = "H100-SXM5-80GB", "B200", "GB200"
DSV3, GPT_OSS, Q30, Q235 = "deepseekv3", "gpt oss 120b", "qwen3_30b_a3b", "qwen3_235b_a22b"

# (container, gpu, model key) -> (ep_dispatcher, overlap_ep_comm, source). Unlisted: alltoall, no
# overlap (Megatron-Core's defaults: moe_token_dispatcher_type alltoall, overlap off).
NEMO_MOE_RECIPES = {
    ("25.09", H100, DSV3): (
        "deepep", True, "Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py: DeepEP on H100 and "
        "A2A_1F1B (overlap_moe_expert_parallel_comm, delay_wgrad_compute) on H100"),
    ("25.11", H100, Q30): (
        "alltoall", True, "Megatron-Bridge v0.2.0 scripts/performance/configs/qwen3/workload_base_configs.py "
        "QWEN3_30B_A3B_H100_*: moe_a2a_overlap=True"),
    ("25.11", H100, Q235): ("alltoall", True, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
                            "QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG: no flex backend, moe_a2a_overlap=True"),
    ("25.11", B200, DSV3): ("alltoall", False, "Megatron-Bridge v0.2.0 configs/deepseek/workload_base_configs.py "
                            "DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG: no flex backend (DeepSeekProvider alltoall)"),
    ("25.11", B200, Q30): ("alltoall", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
                           "QWEN3_30B_A3B_B200_FP8_MX_BASE_CONFIG: no flex backend, moe_a2a_overlap=False"),
    ("25.11", B200, Q235): (
        "alltoall", True, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_235B_A22B_B200_*: moe_a2a_overlap=True"),
    ("25.11", GB200, Q30): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_30B_A3B_GB200_*: moe_flex_dispatcher_backend=hybridep"),
    ("25.11", GB200, Q235): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
        "QWEN3_235B_A22B_GB200_*: moe_flex_dispatcher_backend=hybridep"),
    ("25.11", GB200, DSV3): (
        "deepep", False, "Megatron-Bridge v0.2.0 configs/deepseek/workload_base_configs.py "
        "DEEPSEEK_V3_GB200_BASE_CONFIG: hybridep, moe_a2a_overlap=False"),
    # 26.02 = v0.3.0
    ("26.02", H100, GPT_OSS): ("alltoall", False, f"Megatron-Bridge v0.3.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
    ("26.02", H100, Q30): ("deepep", True, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 "
                           "(pp 2, vpp 12, ep 8): deepep, moe_a2a_overlap=True"),
    ("26.02", H100, Q235): ("alltoall", True, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2"
                            ": no flex backend, moe_a2a_overlap=True"),
    ("26.02", B200, DSV3): ("deepep", False, f"Megatron-Bridge v0.3.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2: hybridep"),
    ("26.02", B200, GPT_OSS): ("alltoall", False, f"Megatron-Bridge v0.3.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 "
                               "(ep 64): no flex backend"),
    ("26.02", B200, Q30): ("alltoall", False, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 "
                           "(mbs 1): no flex backend"),
    ("26.02", B200, Q235): ("alltoall", False, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_B200_FP8_MX_V2"
                            ": no flex backend"),
    ("26.02", GB200, DSV3): ("deepep", False, f"Megatron-Bridge v0.3.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    ("26.02", GB200, GPT_OSS): ("alltoall", False, f"Megatron-Bridge v0.3.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
    ("26.02", GB200, Q30): ("deepep", False, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: hybridep"),
    ("26.02", GB200, Q235): ("deepep", False, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    # 26.02.01 = r0.3.0@1f0cfc3bc (inferred)
    ("26.02.01", H100, GPT_OSS): ("alltoall", False, f"{_R0301} {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
    ("26.02.01", H100, Q235): ("alltoall", True, f"{_R0301} {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2: "
                               "moe_a2a_overlap=True; its deepep is unused, qwen3_llm_pretrain.py h100 235B sets alltoall"),
    ("26.02.01", B200, DSV3): ("deepep", False, f"{_R0301} {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2: hybridep"),
    ("26.02.01", B200, GPT_OSS): ("alltoall", False, f"{_R0301} {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 (ep 8): its "
                                  "hybridep is unused, gpt_oss_llm_pretrain.py never applies it (recipe alltoall)"),
    ("26.02.01", B200, Q30): ("deepep", False, f"{_R0301} {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 (mbs 4): "
                              "hybridep, qwen3_llm_pretrain.py b200 30B flex"),
    ("26.02.01", GB200, DSV3): ("deepep", False, f"{_R0301} {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    ("26.02.01", GB200, GPT_OSS): ("alltoall", False, f"{_R0301} {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
    ("26.02.01", GB200, Q30): ("deepep", False, f"{_R0301} {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: hybridep"),
    ("26.02.01", GB200, Q235): ("deepep", False, f"{_R0301} {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    # 26.04 = v0.4.0
    ("26.04", H100, GPT_OSS): ("alltoall", False, f"Megatron-Bridge v0.4.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
    ("26.04", H100, Q30): ("deepep", False, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 "
                           "(ep 16): hybridep"),
    ("26.04", H100, Q235): ("alltoall", True, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2"
                            ": no flex backend, moe_a2a_overlap=True"),
    ("26.04", B200, GPT_OSS): ("deepep", False, f"Megatron-Bridge v0.4.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 "
                               "(ep 8): hybridep"),
    ("26.04", B200, Q30): ("deepep", False, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1: hybridep"),
    ("26.04", GB200, DSV3): ("deepep", False, f"Megatron-Bridge v0.4.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    ("26.04", GB200, GPT_OSS): ("deepep", True, f"Megatron-Bridge v0.4.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2: "
                                "hybridep, moe_a2a_overlap=True"),
    ("26.04", GB200, Q30): ("deepep", False, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: hybridep"),
    ("26.04", GB200, Q235): ("deepep", False, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 "
                             "(vpp 3): hybridep"),
    # 26.04.01 = v0.4.2 (inferred)
    ("26.04.01", H100, Q30): ("deepep", False, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 "
                              "(ep 16): hybridep"),
    ("26.04.01", H100, Q235): ("alltoall", True, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2"
                               ": no flex backend, moe_a2a_overlap=True"),
    ("26.04.01", B200, DSV3): ("deepep", True, f"Megatron-Bridge v0.4.2 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 "
                               "(pp 8, vpp 2, ep 32): deepep, moe_a2a_overlap=True"),
    ("26.04.01", B200, GPT_OSS): ("alltoall", False, f"Megatron-Bridge v0.4.2 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 "
                                  "(GBS 1280, ep 8): no flex backend since 78934c150 (r0.4.0, 2026-05-11; v0.4.0 had hybridep)"),
    ("26.04.01", B200, Q30): ("deepep", False, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1: hybridep"),
    ("26.04.01", GB200, DSV3): ("deepep", False, f"Megatron-Bridge v0.4.2 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    ("26.04.01", GB200, GPT_OSS): ("alltoall", True, f"Megatron-Bridge v0.4.2 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2: "
                                   "no flex backend, moe_a2a_overlap=True"),
    ("26.04.01", GB200, Q30): ("deepep", False, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: hybridep"),
    ("26.04.01", GB200, Q235): ("deepep", False, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: hybridep"),
    # 26.06 = v0.5.0, 26.06.01 = v0.5.1 (inferred): the same configs, full-iteration graphs on GB200
    ("26.06", H100, Q30): ("deepep", False, f"Megatron-Bridge v0.5.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1: hybridep"),
    ("26.06", GB200, DSV3): ("deepep", True, f"Megatron-Bridge v0.5.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                             "hybridep, moe_a2a_overlap=True"),
    ("26.06", GB200, GPT_OSS): ("deepep", True, f"Megatron-Bridge v0.5.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                                "hybridep, moe_a2a_overlap=True"),
    ("26.06", GB200, Q30): ("deepep", True, f"Megatron-Bridge v0.5.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: "
                            "hybridep, moe_a2a_overlap=True"),
    ("26.06", GB200, Q235): ("deepep", True, f"Megatron-Bridge v0.5.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                             "hybridep, moe_a2a_overlap=True"),
    ("26.06.01", GB200, DSV3): ("deepep", True, f"Megatron-Bridge v0.5.1 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                                "hybridep, moe_a2a_overlap=True"),
    ("26.06.01", GB200, GPT_OSS): ("deepep", True, f"Megatron-Bridge v0.5.1 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"
                                   ": hybridep, moe_a2a_overlap=True"),
    ("26.06.01", GB200, Q30): ("deepep", True, f"Megatron-Bridge v0.5.1 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: "
                               "hybridep, moe_a2a_overlap=True"),
    ("26.06.01", GB200, Q235): ("deepep", True, f"Megatron-Bridge v0.5.1 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"
                                ": hybridep, moe_a2a_overlap=True"),
    # 26.08 = v0.6.0 (inferred): flat perf_recipes, HybridEP full-iteration MXFP8 helpers
    ("26.08", GB200, DSV3): ("deepep", True, "Megatron-Bridge v0.6.0 perf_recipes/deepseek/gb200/deepseek_v3.py "
                             "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config; common.py _enable_deepseek_full_iteration_mxfp8"),
    ("26.08", GB200, GPT_OSS): (
        "deepep", True, "Megatron-Bridge @067f987 perf_recipes/gpt_oss/gb200/gpt_oss.py "
        "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config: HybridEP (NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN 64); "
        "common.py:49 _apply_gpt_oss_120b_full_iter_fp8mx_configs overlap_moe_expert_parallel_comm = True"),
    ("26.08", GB200, Q30): ("deepep", True, "Megatron-Bridge v0.6.0 perf_recipes/qwen/gb200/qwen3_moe.py "
                            "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config; common.py _enable_hybridep_full_iteration_mxfp8"),
    ("26.08", GB200, Q235): ("deepep", True, "Megatron-Bridge v0.6.0 perf_recipes/qwen/gb200/qwen3_moe.py "
                             "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config; common.py _enable_hybridep_full_iteration_mxfp8"),
}


# CUDA graphs of the NeMo / Megatron-Bridge MoE performance recipes (cost/host.py removes the
# host time of a captured scope): (container, gpu, model key) -> (cuda_graph_scope, source).
# Unlisted: no graphs. 25.09's graphs are Megatron-Core's per-layer local graphs
# (enable_cuda_graph) of token-drop runs, padded to capacity: every scope of the layer.
_LAYER = ("attn", "mlp", "moe_router", "moe_preprocess", "moe")
_ROUTER = ("moe_router", "moe_preprocess")
_ATTN_ROUTER = ("attn", "moe_router", "moe_preprocess")
_FULL = ("full_iteration",)
NEMO_CUDA_GRAPHS = {
    ("25.09", GB200, Q30): (_LAYER, "Megatron-Bridge v0.1.0rc4 configs/qwen3/"
                            "qwen3_30b_a3b_llm_pretrain.yaml gb200: cuda_graphs true"),
    ("25.09", B200, Q30): (_LAYER, "v0.1.0rc4 qwen3_30b_a3b_llm_pretrain.yaml b200: cuda_graphs true"),
    ("25.09", GB200, Q235): (_LAYER, "v0.1.0rc4 qwen3_235b_a22b_llm_pretrain.yaml gb200: cuda_graphs true"),
    ("25.11", B200, Q30): (_ROUTER, "Megatron-Bridge v0.2.0 configs/qwen3/workload_base_configs.py "
                           "QWEN3_30B_A3B_B200_FP8_MX_BASE_CONFIG"),
    ("25.11", GB200, Q30): (_ROUTER, "Megatron-Bridge v0.2.0 configs/qwen3/"
                            "workload_base_configs.py QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG"),
    ("25.11", GB200, Q235): (_ATTN_ROUTER, "v0.2.0 configs/qwen3/workload_base_configs.py QWEN3_235B_A22B_GB200_*"),
    ("25.11", GB200, DSV3): (_ROUTER, "v0.2.0 configs/deepseek/workload_base_configs.py DEEPSEEK_V3_GB200_BASE_CONFIG"),
    ("26.02", B200, Q30): (_ROUTER, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1"),
    ("26.02", GB200, DSV3): (_ATTN_ROUTER, f"Megatron-Bridge v0.3.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.02", GB200, Q30): (_ROUTER, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1"),
    ("26.02", GB200, Q235): (_ATTN_ROUTER, f"Megatron-Bridge v0.3.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.02.01", B200, Q30): (_ATTN_ROUTER, f"{_R0301} {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1"),
    ("26.02.01", GB200, DSV3): (_ATTN_ROUTER, f"{_R0301} {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.02.01", GB200, Q30): (_ROUTER, f"{_R0301} {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1"),
    ("26.02.01", GB200, Q235): (_ATTN_ROUTER, f"{_R0301} {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.04", B200, Q30): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1"),
    ("26.04", GB200, DSV3): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.04", GB200, Q30): (_ROUTER, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1"),
    ("26.04", GB200, Q235): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.04.01", B200, DSV3): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.2 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    ("26.04.01", B200, Q30): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1"),
    ("26.04.01", GB200, DSV3): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.2 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.04.01", GB200, Q30): (_ROUTER, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1"),
    ("26.04.01", GB200, Q235): (_ATTN_ROUTER, f"Megatron-Bridge v0.4.2 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.06", GB200, DSV3): (_FULL, f"Megatron-Bridge v0.5.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: full_iteration"),
    ("26.06", GB200, GPT_OSS): (_FULL, f"Megatron-Bridge v0.5.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                                "full_iteration"),
    ("26.06", GB200, Q30): (_FULL, f"Megatron-Bridge v0.5.0 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: full_iteration"),
    ("26.06", GB200, Q235): (_FULL, f"Megatron-Bridge v0.5.0 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                             "full_iteration"),
    ("26.06.01", GB200, DSV3): (_FULL, f"Megatron-Bridge v0.5.1 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                                "full_iteration"),
    ("26.06.01", GB200, GPT_OSS): (_FULL, f"Megatron-Bridge v0.5.1 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                                   "full_iteration"),
    ("26.06.01", GB200, Q30): (_FULL, f"Megatron-Bridge v0.5.1 {_QW} QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: "
                               "full_iteration"),
    ("26.06.01", GB200, Q235): (_FULL, f"Megatron-Bridge v0.5.1 {_QW} QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2: "
                                "full_iteration"),
    ("26.08", GB200, DSV3): (_FULL, "Megatron-Bridge v0.6.0 perf_recipes/deepseek/common.py "
                             "_enable_deepseek_full_iteration_mxfp8 (deepseek_v3_pretrain_256gpu_gb200_fp8mx_config)"),
    ("26.08", GB200, GPT_OSS): (_FULL, "Megatron-Bridge @067f987 perf_recipes/gpt_oss/common.py "
                                "_apply_gpt_oss_120b_full_iter_fp8mx_configs: cuda_graph_impl full_iteration"),
    ("26.08", GB200, Q30): (_FULL, "Megatron-Bridge v0.6.0 perf_recipes/qwen/common.py _enable_hybridep_full_iteration_mxfp8 "
                            "(qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config)"),
    ("26.08", GB200, Q235): (_FULL, "Megatron-Bridge v0.6.0 perf_recipes/qwen/common.py _enable_hybridep_full_iteration_mxfp8 "
                             "(qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config)"),
}


# Megatron-Core modules the NeMo / Megatron-Bridge MoE performance recipes recompute
# (recompute_granularity selective with recompute_modules; cost/recompute_modules.py):
# (container, gpu, model key) -> (modules, source). Unlisted: none (the Qwen3 MoE recipes set
# recompute_granularity None: v0.1.0rc4 configs/qwen3/*_llm_pretrain.yaml, v0.2.0
# configs/qwen3/qwen3_llm_pretrain.py, set_qwen3_common_configs through v0.5.1, perf_recipes/qwen @v0.6.0).
_GPT_OSS_MODULES = ("layernorm", "moe_act")
NEMO_RECOMPUTE_MODULES = {
    ("25.09", H100, DSV3): (
        ("mla_up_proj", "mlp"), "Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py:90-91 (h100), "
        "configs/deepseek/deepseek_v3_llm_pretrain.yaml:22 recompute_granularity selective"),
    ("25.11", B200, DSV3): (("mla_up_proj",), "Megatron-Bridge v0.2.0 configs/deepseek/workload_base_configs.py "
                            "DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG; deepseek_llm_pretrain.py:37 selective"),
    ("25.11", GB200, DSV3): (
        ("mla_up_proj",), "Megatron-Bridge v0.2.0 scripts/performance/configs/deepseek/workload_base_configs.py "
        "DEEPSEEK_V3_GB200_BASE_CONFIG; deepseek_llm_pretrain.py:37 selective"),
    ("26.02", H100, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.3.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
    ("26.02", B200, DSV3): (("mla_up_proj",), f"Megatron-Bridge v0.3.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    ("26.02", B200, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.3.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2"),
    ("26.02", GB200, DSV3): (("mla_up_proj",), f"Megatron-Bridge v0.3.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.02", GB200, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.3.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
    ("26.02.01", H100, GPT_OSS): (_GPT_OSS_MODULES, f"{_R0301} {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
    ("26.02.01", B200, DSV3): (("mla_up_proj",), f"{_R0301} {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    ("26.02.01", B200, GPT_OSS): (_GPT_OSS_MODULES, f"{_R0301} {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2"),
    ("26.02.01", GB200, DSV3): (("mla_up_proj",), f"{_R0301} {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.02.01", GB200, GPT_OSS): (_GPT_OSS_MODULES, f"{_R0301} {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
    ("26.04", H100, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.4.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2"),
    ("26.04", B200, DSV3): (
        ("mla_up_proj",), "Megatron-Bridge @067f987 perf_recipes/deepseek/b200/deepseek_v3.py:229 "
        "deepseek_v3_pretrain_256gpu_b200_fp8mx_large_scale_config (pp 16, ep 8)"),
    ("26.04", B200, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.4.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2"),
    ("26.04", GB200, DSV3): (("mlp",), f"Megatron-Bridge v0.4.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.04", GB200, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.4.0 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
    ("26.04.01", B200, DSV3): (("mla_up_proj", "mlp"), f"Megatron-Bridge v0.4.2 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"),
    ("26.04.01", B200, GPT_OSS): (
        _GPT_OSS_MODULES, "Megatron-Bridge @067f987 perf_recipes/gpt_oss/b200/gpt_oss.py:39-40 "
        "gpt_oss_120b_pretrain_64gpu_b200_bf16_config"),
    ("26.04.01", H100, GPT_OSS): (
        _GPT_OSS_MODULES, "Megatron-Bridge @067f987 perf_recipes/gpt_oss/h100/gpt_oss.py:39-40 "
        "gpt_oss_120b_pretrain_64gpu_h100_bf16_config"),
    ("26.04.01", GB200, DSV3): (("mlp",), f"Megatron-Bridge v0.4.2 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.04.01", GB200, GPT_OSS): (_GPT_OSS_MODULES, f"Megatron-Bridge v0.4.2 {_GO} GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2"),
    ("26.06", GB200, DSV3): (("mla_up_proj",), f"Megatron-Bridge v0.5.0 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.06.01", GB200, DSV3): (("mla_up_proj",), f"Megatron-Bridge v0.5.1 {_DS} DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2"),
    ("26.08", GB200, DSV3): (("mla_up_proj",), "Megatron-Bridge v0.6.0 perf_recipes/deepseek/gb200/deepseek_v3.py "
                             "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config; common.py _deepseek_v3_common selective"),
    # 26.06 / 26.06.01 GB200 GPT-OSS: GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 sets recompute_modules=[]
    # (v0.5.0, v0.5.1), and 26.08's gb200/gpt_oss.py:240-241 sets recompute_modules = [] after its
    # full-iteration CUDA graph settings, so nothing is recomputed (unlisted)
}


# Recipes that turn Megatron's TP communication overlap off where the rows' TP > 1 (the NeMo rows'
# default is on: calibrate/modern.py _plan_options): (container, gpu, model key) -> source.
_Q235_H100_TP = "qwen3_235b_a22b_pretrain_config_h100: CommOverlapConfig(tp_comm_overlap=False)"
NEMO_NO_TP_OVERLAP = {
    ("25.11", H100, Q235): "Megatron-Bridge v0.2.0 configs/qwen3/qwen3_llm_pretrain.py qwen3_235b_a22b_h100_config: "
                           "CommOverlapConfig(tp_comm_overlap=False)",
    ("26.02", H100, Q235): f"Megatron-Bridge v0.3.0 configs/qwen/qwen3_llm_pretrain.py {_Q235_H100_TP}",
    ("26.02.01", H100, Q235): f"{_R0301} configs/qwen/qwen3_llm_pretrain.py {_Q235_H100_TP}",
    ("26.04", H100, Q235): f"Megatron-Bridge v0.4.0 configs/qwen/qwen3_llm_pretrain.py {_Q235_H100_TP}",
    ("26.04.01", H100, Q235): f"Megatron-Bridge v0.4.2 configs/qwen/qwen3_llm_pretrain.py {_Q235_H100_TP}",
}
