"""What ``autotune graph`` traces: a user's ``pkg.mod:factory`` with example inputs, or the
reference transformer of a model spec (``autotune.validate.model``), on the meta device."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autotune.errors import AutotuneError
from profilers.liveness import Liveness
from profilers.trace import TracedModel, trace_module, trace_training

__all__ = ["load_factory", "parse_input", "trace_factory", "trace_spec", "trace_spec_training"]


def load_factory(path: str) -> Callable[..., Any]:
    """``pkg.mod:factory`` -> the callable; a one-line AutotuneError if it does not import."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise AutotuneError("module", f"{path!r}: expected pkg.mod:factory")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure of user code is bad input here
        raise AutotuneError("module", f"{module_name!r} does not import: {type(err).__name__}: {err}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise AutotuneError("module", f"{module_name!r} has no callable {attr!r}")
    return factory


def parse_input(text: str) -> torch.Tensor:
    """``1x512:int64`` -> a meta tensor of that shape and dtype (default float32)."""
    shape_text, _, dtype_name = text.partition(":")
    dtype = getattr(torch, dtype_name or "float32", None)
    try:
        shape = tuple(int(d) for d in shape_text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) <= 0 or not isinstance(dtype, torch.dtype):
        raise AutotuneError("input", f"{text!r}: expected SHAPE[:DTYPE] such as 1x512:int64")
    return torch.zeros(shape, dtype=dtype, device="meta")


def trace_factory(path: str, inputs: Sequence[str] = ()) -> TracedModel:
    """Trace ``pkg.mod:factory``; the factory runs under ``torch.device("meta")`` and returns a
    module, or ``(module, example_args)``; ``inputs`` (``1x512:int64``) replace the args."""
    factory = load_factory(path)
    try:
        with torch.device("meta"):
            made = factory()
    except Exception as err:  # user code
        raise AutotuneError("module", f"{path!r} failed: {type(err).__name__}: {err}") from None
    module, args = (made if isinstance(made, tuple) else (made, ()))
    if not isinstance(module, torch.nn.Module):
        raise AutotuneError("module", f"{path!r} returned {type(module).__name__}, not an nn.Module")
    if inputs:
        args = tuple(parse_input(text) for text in inputs)
    if not args:
        raise AutotuneError("input", f"{path!r} returned no example inputs; give --input SHAPE[:DTYPE]")
    return trace_module(module, tuple(_as_meta(a) for a in args))


def _reference(spec: Any, batch: int, seq_len: int, attention_impl: str) -> tuple[torch.nn.Module, torch.Tensor]:
    from autotune.validate.model import build_model

    model = build_model(spec, attention_impl=attention_impl, device="meta")
    shape = (batch, seq_len) if spec.has_embeddings else (batch, seq_len, spec.hidden_size)
    dtype = torch.long if spec.has_embeddings else torch.float32
    return model, torch.zeros(shape, dtype=dtype, device="meta")


def trace_spec(spec: Any, batch: int, seq_len: int, attention_impl: str = "flash") -> TracedModel:
    """Trace the reference transformer of a ModelSpec (autotune.validate.model) on tokens."""
    model, tokens = _reference(spec, batch, seq_len, attention_impl)
    return trace_module(model, (tokens,))


def trace_spec_training(spec: Any, batch: int, seq_len: int, attention_impl: str = "flash") -> Liveness:
    """Training-step liveness of the reference transformer, cross entropy on token targets."""
    model, tokens = _reference(spec, batch, seq_len, attention_impl)
    targets = torch.zeros((batch, seq_len), dtype=torch.long, device="meta") if spec.has_embeddings else None
    return trace_training(model, (tokens,), targets)


def _as_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.device.type != "meta":
        return torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta")
    return value
