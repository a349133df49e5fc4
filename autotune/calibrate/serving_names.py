"""How other sources spell a serving row's model, engine, precision and GPU, read onto autotune's names.

Published serving tables name the same thing many ways: ``nvidia/DeepSeek-R1-0528-FP4``,
``Qwen3-30B-A3B-Instruct-2507``, ``trtllm`` or ``TRT-LLM``, ``FP8 (W8A8)``, ``H100 SXM5 80GB HBM3``.
Each reader here returns autotune's name, or raises ``RowProblem`` with a one-line reason naming
the cell and what is valid. Nothing is guessed where two readings differ in cost: another board of
the same chip (H100 PCIe or NVL), a GPU without a device profile, a weight format no engine preset
serves.
"""

from __future__ import annotations

import re

from autotune.calibrate.modern import GPU_CLUSTERS
from autotune.calibrate.row_cells import canonical_gpu

__all__ = ["RowProblem", "model_preset", "name_precision", "engine_name", "precision_name", "gpu_cluster",
           "MODEL_ALIASES", "NATIVE_PRECISIONS", "served_precision", "nvfp4_out_proj_source"]


class RowProblem(Exception):
    """Why a row cannot be priced (a one-line reason)."""


# Model names (lower case, words joined by "-", without an org prefix, variant or quantization
# suffixes) -> presets of autotune/data/models.toml.
MODEL_ALIASES = {
    "llama-3.1-8b": "llama3-8b", "llama-3-8b": "llama3-8b", "llama-3.1-70b": "llama3-70b",
    # Llama 3.3 70B is Llama 3.1 70B's architecture (meta-llama/Llama-3.3-70B-Instruct config.json: the same shapes)
    "llama-3.3-70b": "llama3-70b", "llama-3-70b": "llama3-70b", "llama-3.1-405b": "llama3-405b",
    "llama-2-70b": "llama2-70b", "llama-2-13b": "llama2-13b", "mixtral-8x7b": "mixtral-8x7b", "mixtral-8x22b": "mixtral-8x22b",
    # R1 and V3.1 are V3's architecture (their config.json: DeepseekV3ForCausalLM, the same shapes)
    "deepseek-v3": "deepseek-v3", "deepseek-r1": "deepseek-v3", "deepseek-v3.1": "deepseek-v3",
    "deepseek-v3.1-terminus": "deepseek-v3",
    "dsr1": "deepseek-v3", "dsv3": "deepseek-v3",  # InferenceMAX's and SemiAnalysis' short names
    # the R1 distillations are their base models' architectures (DeepSeek-R1 model card: Llama-3.1-8B,
    # Llama-3.3-70B-Instruct, Qwen2.5-14B and -32B; Qwen2.5-Math-7B, whose shapes are Qwen2.5-7B's)
    "deepseek-r1-distill-llama-8b": "llama3-8b", "deepseek-r1-distill-llama-70b": "llama3-70b",
    "deepseek-r1-distill-qwen-7b": "qwen2.5-7b", "deepseek-r1-distill-qwen-14b": "qwen2.5-14b",
    "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
    "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen3-8b": "qwen3-8b", "qwen3-14b": "qwen3-14b", "qwen3-32b": "qwen3-32b",
    "qwen3-coder-480b-a35b": "qwen3-coder-480b-a35b",
    "qwen2.5-7b": "qwen2.5-7b", "qwen2.5-14b": "qwen2.5-14b", "qwen2.5-32b": "qwen2.5-32b", "qwen2.5-72b": "qwen2.5-72b",
    # Mistral 7B v0.2 and v0.3: full attention (v0.2 has vocab 32000, 0.09% fewer parameters than v0.3's 32768)
    "mistral-7b": "mistral-7b",
    # Mistral Large 2 (2407) and its 2411 update: the same shapes (Lightning-AI/litgpt litgpt/config.py)
    "mistral-large-2": "mistral-large-2", "mistral-large": "mistral-large-2",
    # Kimi K2 Instruct and its 0905 update: the same weights' shapes (the 0905 config: 262144 positions)
    "kimi-k2": "kimi-k2",
    "gpt-oss-120b": "gpt-oss-120b", "gpt-oss-20b": "gpt-oss-20b",
    "llama-4-scout-17b-16e": "llama4-scout-17b-16e", "llama-4-scout": "llama4-scout-17b-16e",
    "llama-4-maverick-17b-128e": "llama4-maverick-17b-128e", "llama-4-maverick": "llama4-maverick-17b-128e",
    # GLM-4.7 keeps GLM-4.6's sizes and 202752 positions (ai-dynamo/aiconfigurator@a0ba9ec6
    # src/aiconfigurator/model_configs/zai-org--GLM-4.7-FP8_config.json)
    "glm-4.5": "glm-4.5", "glm-4.6": "glm-4.6", "glm-4.7": "glm-4.6", "glm-4.5-air": "glm-4.5-air",
    # MiniMax-M2.5: M2's shapes (THUDM/slime@624b824a scripts/models/minimax-m2.sh: 62 layers, 256 experts, top-8)
    "minimax-m2": "minimax-m2", "minimax-m2.5": "minimax-m2",
}
# Models known by name whose architecture autotune's graph does not express (a regex on the squashed
# name, read before the aliases): their rows are refused with what is missing rather than priced as a
# near relative.
_NOT_EXPRESSIBLE = (
    (r"^deepseek-v3\.2", "DeepSeek-V3.2's DeepSeek Sparse Attention (a lightning indexer picks 2048 keys per "
                         "query) is not in autotune's graph; V3's dense MLA would over-price long contexts"),
    (r"^qwen3-next|^qwen3\.[5-9]", "Qwen3-Next and Qwen3.5 interleave Gated DeltaNet linear attention (3 of every 4 "
                                   "layers) and gated full attention; autotune's graph has softmax attention only"),
    (r"^kimi-linear", "Kimi Linear's KDA linear-attention layers are not in autotune's graph"),
    (r"^mistral-7b(-instruct)?-v0\.1", "Mistral 7B v0.1 attends within a 4096-token sliding window and has vocab 32000; "
                                       "the mistral-7b preset is v0.2/v0.3 (full attention, vocab 32768)"),
    (r"^glm-[5-9]", "GLM-5 (glm_moe_dsa) attends through DeepSeek Sparse Attention (an indexer picks 2048 keys per "
                    "query) over MLA; autotune's graph has dense attention only"),
    (r"^minimax-(m1|text-01)", "MiniMax-M1 and MiniMax-Text-01 interleave lightning (linear) attention with softmax "
                               "attention; autotune's graph has softmax attention only"),
)
# Trailing words that name a variant of the same weights' shapes: tuning, reasoning mode, a release
# date (DeepSeek-R1-0528, Qwen3-...-2507), a version (Mixtral-...-v0.1), MLPerf's accuracy targets
# and scenario (llama2-70b-99.9, llama2-70b-interactive-99) and the quantization formats below.
_VARIANTS = re.compile(r"[-.](instruct|chat|hf|base|it|original|thinking|reasoning|preview|interactive|\d{4}|\d{6}|v\d+(\.\d+)*"
                       r"|99(\.9)?|fp8|fp4|nvfp4|mxfp4|int4|int8|w4a16|w8a8|w4a8|awq|gptq|bf16|fp16|dynamic|block"
                       r"|quantized|fp8-dynamic)$")
# Quantization suffixes of checkpoint names -> the precision cell they imply.
_NAME_PRECISIONS = (("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), ("fp4", "nvfp4"), ("fp8", "fp8"), ("int4", "w4a16"),
                    ("awq", "w4a16"), ("gptq", "w4a16"), ("w4a16", "w4a16"), ("w8a8", "w8a8"), ("int8", "w8a8"))


def _squash(text: str) -> str:
    """Lower case, no parenthetical, no org prefix, words joined by '-', 'llama3.1' as 'llama-3.1'."""
    name = text.split(" (")[0].strip().lower().split("/")[-1]
    name = re.sub(r"(\d)_(\d)", r"\1.\2", name)  # MLPerf's llama3_1-405b
    name = re.sub(r"[\s_]+", "-", name).removeprefix("meta-")
    return re.sub(r"^llama-?(\d)", r"llama-\1", name)


def model_preset(model: str, hf_model_id: str = "") -> str:
    """The preset a row's model (or hf_model_id) cell names, trailing variant words dropped one by one;
    a model whose architecture the graph cannot express is refused saying what it lacks."""
    for text in (model, hf_model_id):
        name = _squash(text)
        for pattern, why in _NOT_EXPRESSIBLE:
            if name and re.search(pattern, name):
                raise RowProblem(f"no model preset for {text!r}: {why}")
        while name:
            if name in MODEL_ALIASES:
                return MODEL_ALIASES[name]
            shorter = _VARIANTS.sub("", name)
            if shorter == name:
                break
            name = shorter
    raise RowProblem(f"no model preset for {model!r} (models: {', '.join(sorted(set(MODEL_ALIASES.values())))})")


# Checkpoints released quantized under a preset whose other releases are not, named by their squashed
# name's start: the format the name does not spell.
_RELEASED_FORMATS = (
    # moonshotai/Kimi-K2-Thinking model card: native INT4 by quantization-aware training, weight-only on
    # the routed experts (config.json quantization_config: compressed-tensors, 4-bit integer weights, groups of 32)
    ("kimi-k2-thinking", "w4a16"),
)


def name_precision(model: str, hf_model_id: str = "") -> str:
    """The precision a checkpoint's name states (``-FP8``, ``-NVFP4``, ``-AWQ``) or, for a checkpoint
    released quantized (Kimi-K2-Thinking), implies; or ''."""
    words = set(re.split(r"[^a-z0-9]+", f"{model} {hf_model_id}".lower()))
    stated = next((precision for word, precision in _NAME_PRECISIONS if word in words), "")
    names = (_squash(model), _squash(hf_model_id))
    released = next((fmt for start, fmt in _RELEASED_FORMATS if any(n.startswith(start) for n in names)), "")
    return stated or released


# Checkpoints whose FP8 weights carry 128 x 128 block scales where the preset's model does not say so, by
# organisation and name: the Qwen team's own -FP8 releases (Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 model card:
# "fine-grained fp8 quantization with block size of 128"; config.json quantization_config quant_method fp8,
# weight_block_size [128, 128]); others' FP8 releases of the same models (nvidia/*-FP8, ModelOpt) are per-tensor.
_BLOCK_SCALED_FP8 = (("qwen/qwen3", "-fp8"),)


def block_scaled_fp8(hf_model_id: str) -> bool:
    """Whether the checkpoint ``hf_model_id`` names stores block-scaled FP8 weights (_BLOCK_SCALED_FP8)."""
    name = hf_model_id.strip().lower()
    return any(name.startswith(org) and name.endswith(suffix) for org, suffix in _BLOCK_SCALED_FP8)


# NVIDIA's DeepSeek NVFP4 -v2 releases quantize the attention output projection too (nvidia/DeepSeek-R1-0528-FP4-v2
# model card: "additionally quantizes the wo module in attention layers"); a source may say so in words (LMSYS GB200
# part II: "NVFP4 MoE and output projection")
_V2_CHECKPOINT = r"\bnvidia/deepseek-[\w.-]*fp4-v2\b"
_OUT_PROJ_WORDS = r"\bnvfp4\b[^;.]{0,40}\boutput projection\b|\boutput projection\b[^;.]{0,20}\bnvfp4\b"


def nvfp4_out_proj_source(hf_model_id: str, notes: str) -> str | None:
    """What says the NVFP4 checkpoint quantizes the attention output projection: its name, the notes, or None."""
    if re.search(_V2_CHECKPOINT, hf_model_id, re.IGNORECASE):
        return hf_model_id.strip()
    return "the row's notes" if re.search(_OUT_PROJ_WORDS, notes, re.IGNORECASE) else None


# The format a preset's released checkpoint is stored in, where it is not BF16: a row that states no
# precision serves that (what an engine loads from the checkpoint as published).
NATIVE_PRECISIONS = {
    "deepseek-v3": ("fp8", "deepseek-ai/DeepSeek-V3 and DeepSeek-R1 config.json quantization_config: fp8 e4m3, "
                           "128x128 weight blocks"),
    "gpt-oss-120b": ("mxfp4", "openai/gpt-oss-120b config.json quantization_config: mxfp4 but attention, router, "
                              "embedding and lm_head (tests/data/hf_configs/gpt-oss-120b.json)"),
    "gpt-oss-20b": ("mxfp4", "openai/gpt-oss-20b config.json quantization_config: mxfp4 (tests/data/hf_configs/)"),
    "minimax-m2": ("fp8", "MiniMaxAI/MiniMax-M2 config.json quantization_config: fp8 e4m3, 128x128 weight blocks "
                          "(tests/data/hf_configs/minimax-m2.json)"),
    "kimi-k2": ("fp8", "moonshotai/Kimi-K2-Instruct config.json quantization_config: fp8 e4m3, 128x128 weight blocks "
                       "(tests/data/hf_configs/kimi-k2-instruct.json)"),
}


# Engine spellings -> the engine names of the runtime presets' [serving] tables.
_ENGINES = (("tensorrtllm", "tensorrt-llm"), ("trtllm", "tensorrt-llm"), ("vllm", "vllm"), ("sglang", "sglang"),
            ("mlperf", "mlperf-nvidia"))


def engine_name(cell: str) -> str:
    """The engine a cell names: 'TensorRT-LLM', 'trtllm-serve', 'TRT-LLM (PyTorch backend)', 'vLLM', 'SGLang'."""
    squeezed = re.sub(r"[^a-z0-9]+", "", cell.lower())
    found = {engine for word, engine in _ENGINES if word in squeezed}
    if "mlperf-nvidia" in found and len(found) > 1:
        found.discard("mlperf-nvidia")  # "MLPerf ... TensorRT-LLM harness": the harness's engine is named
    if len(found) != 1:
        what = "names none" if not found else f"names {len(found)} ({', '.join(sorted(found))})"
        raise RowProblem(f"engine {cell!r} {what} of tensorrt-llm, vllm, sglang, mlperf-nvidia")
    return found.pop()


# Precision cells -> canonical names; "w4a16" (4-bit integer weights into BF16 GEMMs: AWQ, GPTQ),
# "w8a8" (INT8 weights and activations) and "w4a8" are read so that their rows say why they are not priced.
_PRECISIONS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
               "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "fp8e4m3": "fp8", "w8a8fp8": "fp8", "fp8w8a8": "fp8",
               "fp8dynamic": "fp8", "fp8block": "fp8", "fp8blockwise": "fp8", "fp4": "nvfp4", "nvfp4": "nvfp4",
               "w4a4": "nvfp4", "w4a4nvfp4": "nvfp4", "modeloptfp4": "nvfp4", "mxfp4": "mxfp4",
               "w4a16": "w4a16", "int4": "w4a16", "int4awq": "w4a16", "awq": "w4a16", "gptq": "w4a16",
               "int4gptq": "w4a16", "w4a16awq": "w4a16", "int8": "w8a8", "w8a8": "w8a8", "w8a8int8": "w8a8",
               "smoothquant": "w8a8", "w4a8": "w4a8", "w4a8awq": "w4a8", "int4fp8": "w4a8"}


def precision_name(cell: str) -> str:
    """The canonical precision of a cell ('FP8 (W8A8)', 'bfloat16', 'int4-awq'), '' when empty."""
    text = cell.strip().lower()
    if not text:
        return ""
    head = re.split(r"[(;,/+]| weights| kv", text)[0]  # 'fp8 (w8a8)', 'fp8 weights + fp8 kv cache'
    key = re.sub(r"[^a-z0-9]+", "", head)
    if key not in _PRECISIONS:
        raise RowProblem(f"precision {cell!r} is not one of {', '.join(sorted(set(_PRECISIONS.values())))}")
    return _PRECISIONS[key]


# Serving prices a replica inside one NVLink domain: a GB200 or GB300 row gets the whole NVL72 rack.
_SERVING_CLUSTERS = {**GPU_CLUSTERS, "GB200": "gb200-nvl72", "GB300": "gb300-nvl72", "B300": "dgx-b300"}
# Grace-Blackwell parts, read before canonical_gpu: their cells often say "NVL72", which names the rack
_SUPERCHIPS = ("GB300", "GB200")
# Parts with no device profile, and what they are (a regex on the lower-cased cell): their rows
# stay unpriced with this reason.
_UNPROFILED = ((r"gh200", "GH200 (an H100 with 96 or 144 GB on NVLink-C2C to a Grace CPU, up to 1000 W)"),
               (r"station|desktop", "a DGX Station / desktop GB300 (252 GB at 1,300 W, not the NVL72 part)"),
               (r"h800", "H800 (export H100, 400 GB/s NVLink)"), (r"\bh20\b", "H20 (export Hopper, 148 TFLOP/s BF16)"),
               (r"h100\W*nvl", "H100 NVL (94 GB PCIe card, 400 W)"), (r"h200\W*nvl", "H200 NVL (PCIe card, 600 W)"),
               (r"pcie", "a PCIe card (lower power and clocks than the SXM part, no NVSwitch)"),
               (r"\bl40s", "L40S (Ada PCIe card)"), (r"\bl40\b", "L40 (Ada PCIe card)"), (r"\bl4\b", "L4 (Ada PCIe card)"),
               (r"\ba10g?\b", "A10 (Ampere PCIe card)"), (r"\bmi\d{3}", "AMD Instinct (the engine presets model CUDA kernels)"),
               (r"gaudi", "Intel Gaudi"), (r"\btpu", "Google TPU"), (r"trainium|inferentia", "AWS Trainium/Inferentia"))
_PROFILED = "profiled: A100 SXM 40/80GB, H100 SXM 80GB, H200 SXM, B200, GB200, B300, GB300"


def gpu_cluster(cell: str) -> str:
    """The cluster preset of a row's GPU cell: the SXM parts with device profiles (A100, H100, H200,
    B200, GB200, B300, GB300); other boards and GPUs without a profile are refused with what they are."""
    text = cell.lower()
    for pattern, what in _UNPROFILED:
        if re.search(pattern, text):
            raise RowProblem(f"GPU {cell!r}: {what} has no device profile (autotune/data/devices/); {_PROFILED}")
    part = next((chip for chip in _SUPERCHIPS if chip.lower() in text), None) \
        or canonical_gpu(cell.strip(), tuple(_SERVING_CLUSTERS))
    if part is None and "a100" in text:  # a bare A100 is the 80 GB part unless it says 40
        part = "A100-40GB" if "40" in text else "A100-80GB"
    if part is None:
        raise RowProblem(f"no cluster preset for GPU {cell!r}; {_PROFILED}")
    return _SERVING_CLUSTERS[part]


# Why a format no engine preset serves cannot be priced, and a substitute where one costs the same.
_NOT_SERVED = {"w4a16": "4-bit integer weights dequantized into BF16 GEMMs (AWQ, GPTQ, Marlin kernels)",
               "w4a8": "4-bit integer weights with FP8 activations (TensorRT-LLM W4A8_AWQ)",
               "w8a8": "INT8 weights and activations", "mxfp4": "MXFP4 weights"}


# GPUs whose INT8 tensor-core rate is a small fraction of their FP8 rate: Blackwell Ultra (dense INT8
# 153.5 TOPS on B300 and 165 on GB300 against 4.5 / 5 PFLOPS FP8; NVIDIA Blackwell Ultra datasheet as
# ai-dynamo/aiconfigurator @095f58a5 systems/{b300_sxm,gb300}.yaml quote it)
_SLOW_INT8 = ("B300", "GB300")


def served_precision(precision: str, engine: str, served: tuple[str, ...], gemm_dtypes: set[str],
                     device: str = "") -> tuple[str, str]:
    """(the weight dtype ``engine``, serving ``served``, runs ``precision`` as on the GPU ``device`` with
    GEMM fits for ``gemm_dtypes``; how it was substituted or ''), or RowProblem."""
    if precision in served:
        return precision, ""
    if precision == "mxfp4" and "nvfp4" in served and "nvfp4" in gemm_dtypes:
        # Blackwell's FP4 tensor cores run MXFP4 and NVFP4 E2M1 elements at one rate (B200 datasheet:
        # one FP4 figure); the scales differ (E8M0 per 32 vs E4M3 per 16): 4.25 vs 4.5 bits a weight
        return "nvfp4", "mxfp4 priced as nvfp4 (same E2M1 elements and FP4 tensor-core rate; scale blocks differ)"
    if precision == "w8a8" and device in _SLOW_INT8:
        raise RowProblem(f"precision w8a8 (INT8 weights and activations) on {device}: its INT8 tensor cores "
                         "run at about 1/30 of its FP8 rate, and no profile fits them")
    if precision == "w8a8" and "fp8" in served and "fp8" in gemm_dtypes:
        # H100/H200 datasheets: INT8 1,979 TOPS = FP8 1,979 TFLOPS dense; B200: 4.5 POPS = 4.5 PFLOPS; 1-byte weights
        return "fp8", "int8 w8a8 priced as fp8 (the same tensor-core rate and weight bytes on Hopper and Blackwell)"
    what = f" ({_NOT_SERVED[precision]})" if precision in _NOT_SERVED else ""
    if precision in ("mxfp4", "nvfp4") and "nvfp4" not in gemm_dtypes:
        what += " on a GPU without FP4 tensor cores"
    raise RowProblem(f"precision {precision}{what}: {engine} serves {', '.join(served)} weights")
