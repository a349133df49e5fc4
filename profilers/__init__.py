"""Micro-benchmarks and tracing with PyTorch: the measurements behind ``autotune profile``,
``autotune benchmark`` and ``autotune graph``.

The only top-level package that imports torch; ``autotune`` itself imports it lazily, and so
does this package: ``from profilers import trace_module`` loads torch then.

* ``measure_profile`` (profilers.measure): kernel sweeps and collectives of a profile;
* ``benchmark_model`` (profilers.benchmark): forward/backward timing of the reference model;
* ``trace_module``, ``trace_training`` (profilers.trace): a module's operator graph, FLOPs and
  liveness peak memory; ``trace_factory``, ``trace_spec``, ``trace_spec_training``
  (profilers.trace_inputs): the same from ``pkg.mod:factory`` or a model spec.
"""

__all__ = ["measure_profile", "benchmark_model", "trace_module", "trace_training", "trace_factory", "trace_spec",
           "trace_spec_training"]

_HOME = {"measure_profile": "profilers.measure", "benchmark_model": "profilers.benchmark",
         "trace_module": "profilers.trace", "trace_training": "profilers.trace",
         "trace_factory": "profilers.trace_inputs", "trace_spec": "profilers.trace_inputs",
         "trace_spec_training": "profilers.trace_inputs"}


def __getattr__(name: str):
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(name)
