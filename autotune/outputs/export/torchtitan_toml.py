"""A plan as a torchtitan 0.2.x TOML job file (``--job.config_file``), format ``torchtitan-0.2``.

Target: torchtitan v0.2.2 (PyPI, 2026-02-20), the last release that reads TOML; 0.3 takes
Python config functions instead (:mod:`.torchtitan`). Keys and choices follow
torchtitan/config/job_config.py of v0.2.2 (tests/data/frameworks/torchtitan_job_config_keys.tsv,
read from that file, since 0.2.2 and 0.3 cannot be installed side by side).

Differences from 0.3 that this file follows: tensor parallelism always shards norms along the
sequence (no ``enable_sequence_parallel`` switch), async TP is
``parallelism.enable_async_tensor_parallel``, recomputation is ``[activation_checkpoint] mode``,
and the output projection module is ``output``.
"""

from __future__ import annotations

import tomli_w

from autotune.outputs.export.common import ExportResult, header_lines, recompute_frequency, refuse
from autotune.outputs.export.torchtitan import (
    async_tp_notes, flavor_args, job_sections, llama_flavor, selective_note, torchtitan_context)
from autotune.plan.io import PlanFile

__all__ = ["to_torchtitan_toml"]

CP_ROTATE = {"ring": "alltoall", "all_gather": "allgather"}  # its names: "alltoall" passes K/V around a ring

NAME = "torchtitan 0.2"
TARGET = "torchtitan v0.2.2 (73a0e6979, 2026-02-20): torchrun ... -m torchtitan.train --job.config_file FILE"


def _low_precision(config: dict, workload, runtime, fp8_stages: bool = False) -> None:
    """torchao float8 (tensorwise or rowwise) or MXFP8 training of the linear layers; FP8
    stages of a bf16 plan are the tensorwise recipe (per-tensor scales)."""
    dtype = "fp8" if fp8_stages and workload.dtype == "bf16" else workload.dtype
    if dtype in ("fp8", "fp8_rowwise"):
        config["model"]["converters"] = ["quantize.linear.float8"]
        recipe = "tensorwise" if dtype == "fp8" else "rowwise"
        config["quantize"] = {"linear": {"float8": {
            "recipe_name": recipe, "enable_fsdp_float8_all_gather": bool(runtime.fp8_all_gather)}}}
    elif dtype == "mxfp8":
        config["model"]["converters"] = ["quantize.linear.mx"]
        config["quantize"] = {"linear": {"mx": {"recipe_name": "mxfp8"}}}


def to_torchtitan_toml(plan_file: PlanFile) -> ExportResult:
    ctx = torchtitan_context(plan_file, NAME, extra_fields=("recompute_layers", "fp8"))
    s = ctx.stage
    if s.tp > 1 and not s.sequence_parallel:
        raise refuse(NAME, "stages.sequence_parallel", "its tensor parallelism always shards norms along the "
                                                       "sequence; tp > 1 without sequence parallelism has no setting")
    flavor = llama_flavor(ctx.model)
    notes = []
    if flavor is None:
        flavor = ctx.model.name
        notes.append(f"torchtitan v0.2.2 has no llama3 flavor of this shape: add \"{ctx.model.name}\": "
                     f"TransformerModelArgs({flavor_args(ctx.model)}) to llama3_args in "
                     "torchtitan/models/llama3/__init__.py")
    job = job_sections(ctx, "output")
    if s.cp > 1:
        job["parallelism"]["context_parallel_rotate_method"] = CP_ROTATE[s.cp_comm]
    checkpoint = {"mode": "selective" if s.recompute == "selective_op" else s.recompute}
    if s.recompute in ("selective", "selective_op"):
        checkpoint["selective_ac_option"] = "op"
    elif s.recompute == "full" and (frequency := recompute_frequency(ctx)):  # every f-th block, fully
        checkpoint = {"mode": "selective", "selective_ac_option": str(frequency)}
    if s.recompute == "selective":  # selective_op is exactly its op-level policy
        notes.append(selective_note())
    config = {"job": {"description": f"autotune plan for {ctx.model.name} on {ctx.plan.gpus} GPUs"},
              "model": {"name": "llama3", "flavor": flavor}, **job, "activation_checkpoint": checkpoint}
    _low_precision(config, ctx.workload, ctx.runtime, fp8_stages=s.fp8)
    if s.tp > 1 and ctx.plan.overlap_tp_comm:
        notes += async_tp_notes(ctx)
        config["parallelism"]["enable_async_tensor_parallel"] = True  # needs [compile] enable (tensor_parallel.py)
        config["compile"] = {"enable": True, "components": ["model", "loss"]}
    header = "".join(f"# {line}\n" for line in header_lines(ctx, TARGET) + [f"note: {n}" for n in notes])
    return ExportResult(format="torchtitan-0.2", text=header + tomli_w.dumps(config), suffix=".toml",
                        notes=tuple(notes))
