"""Bytes per GPU of one pipeline stage: weights, gradients, optimizer states, activations.

Mixed precision keeps 16-bit weights, fp32 gradient buffers, fp32 master weights and two fp32
Adam moments: 2 + 4 + 4 + 8 = 18 bytes per parameter (19 under FP8: the FP8 weight copy) (Megatron-LM's ``main_grad`` buffers;
Korthikanti et al. 2022 sec. 2); fp32 training keeps 4 + 4 + 8 = 16. ZeRO stage 1 shards the
master weights and moments over the data-parallel ranks, stage 2 also the gradients, stage 3
also the weights (Rajbhandari et al. 2020, Fig. 1). Context-parallel ranks hold the same weights,
so ZeRO shards over dp x cp, as Megatron-Core's distributed optimizer does.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.spec.workload import GEMM_OPERAND_BYTES

# Block scales per element of the block-scaled formats (OCP MX spec: one E8M0 per 32; NVFP4: one
# E4M3 per 16), as cost/quantize.py counts them.
_SCALE_BYTES = {"mxfp8": 1.0 / 32.0, "nvfp4": 1.0 / 16.0}

__all__ = ["StateBytes", "state_bytes_per_param", "StageMemory", "sharded_state_bytes", "memory_at_risk",
           "TENSOR_BYTES_UNCERTAINTY"]

# How far the predicted tensor bytes of a step (max_memory_allocated) may be off: the target the
# H200 runs are held to (tests/data/h200/runs.json); the runtimes priced from operator streams reach
# 3.2% there (tests/test_opstream.py), the hand-written graph 9.1% (docs/h200-measured.md).
TENSOR_BYTES_UNCERTAINTY = 0.10


@dataclass(frozen=True, kw_only=True)
class StateBytes:
    """Bytes per parameter of each model-state class, before ZeRO sharding."""

    weights: float
    gradients: float
    master: float
    moments: float


def state_bytes_per_param(dtype: str, grad_reduce_in_fp32: bool = True, fp8_params: bool = False) -> StateBytes:
    """Low-precision recipes add the GEMM-format copy of each weight, kept for the step
    (Transformer Engine caches it across micro-batches; 1 byte in FP8, 0.5 in FP4). Gradient
    buffers are fp32 unless the run reduces in 16 bits (TrainingWorkload.grad_reduce_in_fp32:
    Megatron-Core's DDP then allocates them in the parameters' dtype). With ``fp8_params`` the weights
    are held only in the GEMM format (TrainingWorkload.fp8_params), block scales included."""
    if dtype == "fp32":
        return StateBytes(weights=4.0, gradients=4.0, master=0.0, moments=8.0)
    low = GEMM_OPERAND_BYTES.get(dtype, 0.0)
    weights = low + _SCALE_BYTES.get(dtype, 0.0) if fp8_params and low else 2.0 + low
    return StateBytes(weights=weights, gradients=4.0 if grad_reduce_in_fp32 else 2.0, master=4.0, moments=8.0)


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """Peak bytes on one GPU of a stage, by class. ``reserved`` is the device's own overhead (CUDA
    context, library modules: DeviceProfile.reserved_bytes); ``allocator_share`` the runtime's
    allocator reserve beyond the tensors (Runtime.allocator_reserve_share), so the peak is what
    the process holds on the device, not only what its tensors occupy."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    activations_bytes: float
    temporary_bytes: float
    reserved_bytes: float
    offloaded_bytes: float = 0.0  # held in host or CXL memory instead of HBM (host + cxl)
    host_bytes: float = 0.0  # of which in host DRAM (cost/offload.py)
    cxl_bytes: float = 0.0  # of which in CXL-attached memory
    allocator_share: float = 0.0

    @property
    def tensor_bytes(self) -> float:
        """What the tensors occupy at the peak (torch.cuda.max_memory_allocated)."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_states_bytes
                + self.activations_bytes + self.temporary_bytes)

    @property
    def allocator_bytes(self) -> float:
        """Held by the allocator beyond the tensors (affine in them, as the search's memory is)."""
        return self.allocator_share * self.tensor_bytes

    @property
    def peak_bytes(self) -> float:
        return self.tensor_bytes + self.allocator_bytes + self.reserved_bytes

    def as_dict(self) -> dict[str, float]:
        return {
            "weights_bytes": self.weights_bytes, "gradients_bytes": self.gradients_bytes,
            "optimizer_states_bytes": self.optimizer_states_bytes,
            "activations_bytes": self.activations_bytes, "temporary_bytes": self.temporary_bytes,
            "allocator_bytes": self.allocator_bytes, "reserved_bytes": self.reserved_bytes,
            "offloaded_bytes": self.offloaded_bytes,
        }


def sharded_state_bytes(params: float, dtype: str, zero: int, shards: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes per GPU for ``params`` parameters."""
    per = state_bytes_per_param(dtype)
    weights = params * per.weights / (shards if zero >= 3 else 1)
    grads = params * per.gradients / (shards if zero >= 2 else 1)
    optim = params * (per.master + per.moments) / (shards if zero >= 1 else 1)
    return weights, grads, optim


def memory_at_risk(memory: StageMemory, capacity_bytes: float) -> bool:
    """The stage fits, but would not with its tensors TENSOR_BYTES_UNCERTAINTY larger."""
    peak = float(memory.peak_bytes)
    grown = peak + TENSOR_BYTES_UNCERTAINTY * (1.0 + memory.allocator_share) * float(memory.tensor_bytes)
    return peak <= capacity_bytes < grown
