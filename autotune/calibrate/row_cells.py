"""Cells of a published-runs CSV row, checked and spelled as the row builders expect.

Published tables are transcribed by hand, from many sources, so the same GPU, precision or
activation arrives spelled several ways ("H100 SXM5 80GB", "NVIDIA H100 80GB HBM3", "BF16",
"SwiGLU", "ZeRO-3"). Each row is checked on its own before it is priced: a malformed cell makes
that row unpriceable, with the column and what would be valid, and the rest of the file is still
priced. A spelling is mapped only where it names one part without doubt; an A100 without its
memory size, a PCIe card or an unknown GPU stays unpriced rather than guessed.
"""

from __future__ import annotations

import math

import re

from autotune.plan.plan import RECOMPUTE_MODULES
from autotune.spec.model import FFN_ACTIVATIONS
from autotune.spec.runtime import CUDA_GRAPH_SCOPES, EP_DISPATCHERS
from autotune.spec.workload import DTYPES

__all__ = ["REQUIRED_COLUMNS", "missing_columns", "normalized_row", "canonical_gpu"]

# Columns every row of each layout must have (shared/reference/README.md).
REQUIRED_COLUMNS = {
    "modern": ("id", "model", "layers", "hidden", "heads", "ffn", "seq", "global_batch", "gpus", "gpu",
               "framework", "tp", "pp", "iter_s"),
    "legacy": ("id", "model", "layers", "hidden", "heads", "kv_heads", "ffn", "ffn_act", "vocab", "seq",
               "global_batch", "gpus", "gpu", "tp", "pp", "dp", "dtype", "iter_s"),
}
# Whole-number cells that must be positive when given (empty allowed unless required above).
_POSITIVE_INTS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "num_experts", "top_k", "expert_ffn",
                  "seq", "global_batch", "micro_batch", "gpus", "tp", "pp", "dp", "cp", "ep", "vpp")
_YES, _NO = ("yes", "true", "y", "1", "on"), ("no", "false", "n", "0", "off")
_PRECISION_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float8": "fp8",
                      "fp8-rowwise": "fp8", "fp8_rowwise": "fp8", "fp8-tensorwise": "fp8", "fp8 (delayed)": "fp8",
                      "fp8-delayed": "fp8", "fp8 delayed": "fp8", "fp8-current": "fp8", "e4m3": "fp8"}
_ACTIVATION_ALIASES = {"silu": "swiglu", "swish": "swiglu", "swiglu": "swiglu", "gelu_new": "gelu",
                       "gelu_pytorch_tanh": "gelu", "squared-relu": "relu2", "squared_relu": "relu2", "relu^2": "relu2",
                       "relu2": "relu2"}
_RECOMPUTE = ("full", "selective", "none")
# Optional cells a row may state where no framework recipe says it (MoE runs of Megatron-Core):
# space-separated names of each column's valid set (calibrate/modern.py stated_settings).
LISTED_CELLS = {"recompute_modules": RECOMPUTE_MODULES, "cuda_graph_scope": CUDA_GRAPH_SCOPES,
                "ep_dispatcher": EP_DISPATCHERS}

# GPU spellings onto the names the cluster table knows (calibrate/modern.py GPU_CLUSTERS).
# Checked in order; each needs every listed token in the lower-cased, de-punctuated name.
_GPU_PATTERNS = (
    (("gb300",), "GB300"),
    (("b300",), "B300"),
    (("gb200",), "GB200"),
    (("b200",), "B200"),
    (("h200",), "H200"),
    (("h100", "96gb"), "H100-96GB-HBM2e-500W"),  # Meta's Grand Teton part (HBM2e, 500 W)
    (("h100", "hbm2e"), "H100-96GB-HBM2e-500W"),
    (("h100",), "H100-SXM5-80GB"),  # the SXM5 80 GB part (DGX/HGX H100); PCIe and NVL excluded below
    (("a100", "40gb"), "A100-40GB"),
    (("a100", "80gb"), "A100-SXM4-80GB"),
    # V100: only spellings that name the board. SXM3 exists only as the 32 GB part of DGX-2/-2H;
    # a bare "V100" or "V100 32GB" may be SXM2, SXM3 or PCIe, so it stays unmapped.
    (("v100", "sxm3"), "V100-SXM3-32GB"),
    (("dgx2",), "V100-SXM3-32GB"),  # DGX-2 and DGX-2H hold only V100 SXM3 32GB
    (("v100", "sxm2", "32gb"), "V100-SXM2-32GB"),
    (("v100", "sxm2", "16gb"), "V100-SXM2-16GB"),
)
# Parts with the same chip but another board (clocks, power, memory, links): no preset prices them.
_OTHER_BOARDS = ("pcie", "nvl", "h800", "h20", "a800")


def canonical_gpu(name: str, known: tuple[str, ...]) -> str | None:
    """The known GPU name a spelling means, or None (unknown, ambiguous, or another board)."""
    if name in known:
        return name
    flat = re.sub(r"[^a-z0-9]+", " ", name.lower())
    tokens = flat.split()
    squeezed = "".join(tokens)
    if any(board in tokens for board in _OTHER_BOARDS) or "pcie" in squeezed:
        return None
    for needed, canonical in _GPU_PATTERNS:
        if all(token in squeezed for token in needed) and canonical in known:
            return canonical
    return None


def missing_columns(header: list[str] | None) -> list[str]:
    """Required columns of the layout the header has (modern if it names a framework) it lacks."""
    header = list(header or ())
    layout = "modern" if "framework" in header else "legacy"
    return [column for column in REQUIRED_COLUMNS[layout] if column not in header]


def _whole(column: str, text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{column}: {text!r} is not a whole number") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ValueError(f"{column}: {text!r} is not a positive whole number")
    return str(int(value))


def _choice(column: str, text: str, aliases: dict[str, str], valid: tuple[str, ...]) -> str:
    value = aliases.get(text.lower(), text.lower())
    if value not in valid:
        raise ValueError(f"{column}: {text!r} is not one of {', '.join(valid)}")
    return value


def _zero(text: str) -> str:
    match = re.fullmatch(r"(?:zero|stage)?[\s_-]*([0-3])", text.lower())
    if not match:
        raise ValueError(f"zero: {text!r} is not a ZeRO stage 0-3")
    return match.group(1)


def _check_seconds(text: str) -> None:
    """An iter_s cell is a positive number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"iter_s: {text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise ValueError(f"iter_s: {text!r} is not a positive number of seconds")


def _checked(row: dict[str, str], required: tuple[str, ...], known_gpus: tuple[str, ...]) -> dict[str, str]:
    cells = {key: (value or "").strip() for key, value in row.items() if key is not None}
    for column in required:
        if not cells.get(column) and column != "iter_s":
            raise ValueError(f"{column}: empty (required)")
    for column in _POSITIVE_INTS:
        if cells.get(column):
            cells[column] = _whole(column, cells[column])
    if cells.get("iter_s"):
        _check_seconds(cells["iter_s"])
    gpu = canonical_gpu(cells["gpu"], known_gpus)
    if gpu is None:
        raise ValueError(f"gpu: no preset for {cells['gpu']!r} (known: {', '.join(known_gpus)}; an A100 "
                         "needs its memory size, PCIe/NVL boards and export parts have no preset)")
    cells["gpu"] = gpu
    for column in ("precision", "dtype"):
        if cells.get(column):
            cells[column] = _choice(column, cells[column], _PRECISION_ALIASES, DTYPES)
    if cells.get("ffn_act"):
        cells["ffn_act"] = _choice("ffn_act", cells["ffn_act"], _ACTIVATION_ALIASES, (*FFN_ACTIVATIONS, "relu2"))
    if cells.get("recompute"):
        cells["recompute"] = _choice("recompute", cells["recompute"], {}, _RECOMPUTE)
    for column in ("sequence_parallel", "ep_overlap"):
        if cells.get(column):
            flag = cells[column].lower()
            if flag not in _YES + _NO:
                raise ValueError(f"{column}: {cells[column]!r} is not yes or no")
            cells[column] = "yes" if flag in _YES else "no"
    for column, valid in LISTED_CELLS.items():
        for name in cells.get(column, "").split():
            if name not in valid:
                raise ValueError(f"{column}: {name!r} is not one of {', '.join(valid)}")
    if cells.get("zero"):
        cells["zero"] = _zero(cells["zero"])
    if cells.get("arch"):
        cells["arch"] = _choice("arch", cells["arch"], {"mixture-of-experts": "moe"}, ("dense", "moe"))
    return cells


def normalized_row(row: dict[str, str], known_gpus: tuple[str, ...]) -> tuple[dict[str, str] | None, str]:
    """(the row with its cells checked and spelled canonically, "") or (None, why it cannot be read)."""
    layout = "modern" if "framework" in row else "legacy"
    try:
        return _checked(row, REQUIRED_COLUMNS[layout], known_gpus), ""
    except ValueError as err:
        return None, str(err)
