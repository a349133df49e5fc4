"""Peak memory by liveness analysis over an operator schedule (seed 003: "FX graph enables
precise peak memory analysis ... track the time intervals during which tensors are alive").

Pure Python: the tracer turns its graph into :class:`Step` records. A storage is allocated
by the step that creates it and freed after the last step that reads it or any view of it
(views alias their base and allocate nothing). Persistent storages (parameters, buffers,
inputs the caller holds) live throughout; graph outputs live to the end. A step's inputs and
outputs are live together while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Step", "Liveness", "liveness"]


@dataclass(frozen=True, kw_only=True)
class Step:
    """One operator: the storages it reads, and the storages it creates with their bytes."""

    name: str
    reads: tuple[int, ...]
    creates: tuple[tuple[int, float], ...]  # (storage id, bytes)


@dataclass(frozen=True, kw_only=True)
class Liveness:
    persistent_bytes: float  # parameters, buffers, held inputs
    peak_transient_bytes: float  # most bytes of created storages live at once
    peak_step: str  # the step at which that peak occurs
    live_bytes: tuple[float, ...]  # transient bytes live during each step

    @property
    def peak_bytes(self) -> float:
        return self.persistent_bytes + self.peak_transient_bytes


def liveness(steps: Sequence[Step], persistent_bytes: float, outputs: Sequence[int] = ()) -> Liveness:
    """Replay ``steps`` in order, freeing each created storage after its last reader."""
    last_use: dict[int, int] = {}
    for i, step in enumerate(steps):
        for sid, _ in step.creates:
            last_use[sid] = i
        for sid in step.reads:
            last_use[sid] = i
    for sid in outputs:
        last_use[sid] = len(steps)
    sizes = {sid: nbytes for step in steps for sid, nbytes in step.creates}
    frees: dict[int, list[int]] = {}
    for sid, i in last_use.items():
        if sid in sizes:
            frees.setdefault(i, []).append(sid)
    live, peak, peak_step, trace = 0.0, 0.0, "", []
    for i, step in enumerate(steps):
        live += sum(nbytes for _, nbytes in step.creates)
        trace.append(live)
        if live > peak:
            peak, peak_step = live, step.name
        live -= sum(sizes[sid] for sid in frees.get(i, []))
    return Liveness(persistent_bytes=persistent_bytes, peak_transient_bytes=peak, peak_step=peak_step,
                    live_bytes=tuple(trace))
