"""The shipped data files: model, cluster and device presets, runtimes, operator streams.

They are installed as plain files beside this module (pyproject.toml package-data), so they are
read by path: ``importlib.resources.files`` gives the same files but its first call loads
importlib's readers and zipfile, about 10 ms of every command's start."""

from __future__ import annotations

from pathlib import Path

__all__ = ["data_path"]

_FOLDER = Path(__file__).parent


def data_path(*parts: str) -> Path:
    """``autotune/data/<parts...>`` (a file or folder; not checked for existence)."""
    return _FOLDER.joinpath(*parts)
