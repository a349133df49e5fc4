"""Validation by real torch runs: the reference model, its parallelisation as a plan says,
launching one worker per rank, and the predicted-vs-measured report.

torch is imported by the submodules only; importing this package does not load it.
"""

__all__ = ["build_model"]


def __getattr__(name: str):  # lazy: ``from autotune.validate import build_model`` loads torch then
    if name == "build_model":
        from autotune.validate.model import build_model
        return build_model
    raise AttributeError(name)
