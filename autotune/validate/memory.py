"""Peak memory of a CPU rank, measured as live tensor bytes.

A CPU process has no ``torch.cuda.max_memory_allocated``. Resident set size (RSS) is no
substitute: glibc keeps freed blocks, the torch and gloo libraries and thread stacks count,
so it neither falls when tensors die nor isolates the model. What the cost model predicts is
tensor bytes (weights, gradients, optimizer states, activations, temporaries), and torch's
CPU allocator keeps that count itself: c10's ProfiledCPUMemoryReporter adds every
allocation and subtracts every free, on every thread, once c10's flag
``caffe2_report_cpu_memory_usage`` is on, and stamps the running total ("Total Allocated") on
the allocation events it hands the profiler (``profile_memory=True``).
:class:`TensorMemoryTracker` turns the flag on (for good: a count switched off misses frees)
and runs the profiler from before the model is built; the largest total inside a marked window is the step's peak, the CPU analogue of
``max_memory_allocated``. Where the flag cannot be set (a torch build without the symbol),
allocations and frees are paired by address instead (``window_peak``). The profiler slows
the steps it watches, so timed steps run without it. Peak RSS growth is reported beside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import resource
import tempfile
from pathlib import Path

__all__ = ["TensorMemoryTracker", "peak_rss_bytes", "window_peak", "live_tensor_bytes", "set_allocator_accounting"]

_FLAG = "FLAGS_caffe2_report_cpu_memory_usage"


def peak_rss_bytes() -> float:
    """Peak resident set size of this process so far (Linux reports ``ru_maxrss`` in KiB)."""
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0


def set_allocator_accounting(on: bool) -> bool:
    """Switch c10's all-thread count of live CPU tensor bytes; False if this torch lacks it."""
    import torch

    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libc10.so"))
        ctypes.c_bool.in_dll(library, _FLAG).value = on
    except (OSError, ValueError):
        return False
    return True


class TensorMemoryTracker:
    """Context manager; ``peak_bytes`` is the peak live tensor bytes inside the last ``window()``."""

    WINDOW = "autotune.validate.measured_step"

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._profiler = None
        self._counted = False
        self.peak_bytes = 0.0
        self.baseline_bytes = 0.0
        self.end_bytes = 0.0
        self.start_bytes = 0.0

    def __enter__(self) -> "TensorMemoryTracker":
        if self.enabled:
            from torch.profiler import ProfilerActivity, profile
            self._counted = set_allocator_accounting(True)
            self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._profiler.__enter__()
        return self

    def window(self) -> contextlib.AbstractContextManager:
        """Marks the step whose peak is measured (a profiler range, so it shares its clock)."""
        from torch.profiler import record_function
        return record_function(self.WINDOW) if self._profiler is not None else contextlib.nullcontext()

    def __exit__(self, *exc: object) -> None:
        if self._profiler is None:
            return
        self._profiler.__exit__(*exc)  # the count stays on: turned off, later frees would go uncounted
        if exc[0] is not None:
            return
        with tempfile.TemporaryDirectory(prefix="autotune-memory-") as tmp:
            path = Path(tmp) / "trace.json"
            self._profiler.export_chrome_trace(str(path))
            events = json.loads(path.read_text()).get("traceEvents", [])
        self.baseline_bytes, self.peak_bytes, self.end_bytes = window_peak(events, self.WINDOW, self._counted)
        first = next(iter(_cpu_allocations(events)), None)
        if self._counted and first is not None:  # what was counted before the tracker started
            self.start_bytes = float(first["args"]["Total Allocated"]) - float(first["args"]["Bytes"])


def _cpu_allocations(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                  key=lambda e: e["ts"])


def window_peak(events: list[dict], window: str, counted: bool = False) -> tuple[float, float, float]:
    """(live bytes when the last ``window`` opens, their peak inside it, live bytes at the end).

    ``counted``: the allocator's own all-thread total ("Total Allocated") is on every event.
    Otherwise allocations and frees are paired by address; a free made on a thread the
    profiler does not watch (gloo's workers release collective buffers) is not reported, but
    the block's address being handed out again proves it was freed, so a new allocation at a
    live address retires the old block there first.
    """
    marks = [e for e in events if e.get("name") == window and "dur" in e]
    if not marks:
        return 0.0, 0.0, 0.0
    start, end = marks[-1]["ts"], marks[-1]["ts"] + marks[-1]["dur"]
    blocks: dict[int, float] = {}
    live, baseline, peak = 0.0, None, 0.0
    for event in _cpu_allocations(events):
        args = event["args"]
        nbytes = float(args["Bytes"])
        if baseline is None and event["ts"] >= start:
            baseline = peak = float(args["Total Allocated"]) - nbytes if counted else live
        if counted:
            live = float(args["Total Allocated"])
        else:
            live -= blocks.pop(args["Addr"], 0.0)
            if nbytes > 0:
                blocks[args["Addr"]] = nbytes
                live += nbytes
        if baseline is not None and event["ts"] <= end:
            peak = max(peak, live)
    baseline = live if baseline is None else baseline
    return baseline, max(peak, baseline), live


def live_tensor_bytes() -> float:
    """Bytes of the distinct CPU storages of every tensor the garbage collector can reach
    (DTensors by their local shard): a check on the profiler's running count."""
    import gc
    import warnings

    import torch

    gc.collect()
    storages: dict[int, int] = {}
    with warnings.catch_warnings():  # isinstance on deprecated torch module attributes warns
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]
    from torch._subclasses.fake_tensor import FakeTensor

    for obj in tensors:
        tensor = getattr(obj, "_local_tensor", obj)
        if tensor.device.type == "cpu" and not tensor.is_meta and not isinstance(tensor, FakeTensor):
            storage = tensor.untyped_storage()
            try:
                storages[storage.data_ptr()] = storage.nbytes()
            except RuntimeError:  # a functional tensor (left by torch.compile's tracing) holds no memory
                continue
    return float(sum(storages.values()))
