"""The base install has no torch (README, quick start): search, evaluate, curve, export,
check-published and `profile --show` run with torch unimportable and never try to import it;
validate, profile, graph and benchmark say in one line (exit 2) that they need it and how to
install the CPU wheel.

torch is made unimportable by a ``sitecustomize`` on PYTHONPATH whose import hook refuses
``torch`` and writes down every attempt (in forked and spawned children too), so an import that
a ``try``/``except ImportError`` would swallow still fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_BLOCKER = '''
import os, sys

class _NoTorch:
    """Refuses torch, as on a machine where it is not installed, and records the attempt."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            with open(os.environ["NO_TORCH_LOG"], "a") as log:
                log.write(name + "\\n")
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoTorch())
'''


@pytest.fixture
def no_torch(tmp_path):
    """(run, attempts): run(*argv) runs ``python -m autotune argv`` in tmp_path with torch blocked;
    attempts() lists the torch modules anything tried to import."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_BLOCKER)
    log = tmp_path / "torch-imports.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]), NO_TORCH_LOG=str(log))
    env.pop("CI", None)

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autotune", *argv], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    def attempts() -> list[str]:
        return log.read_text().split() if log.exists() else []
    return run, attempts


def test_the_blocker_blocks(no_torch):
    run, attempts = no_torch
    proc = run("graph", "--model", "small")
    assert proc.returncode == 2
    assert attempts()[:1] == ["torch"]


def test_planning_commands_run_without_torch(no_torch, tmp_path):
    run, attempts = no_torch
    search = run("search", "--model", "small", "--gpus", "4", "--plots", "sync", "--quiet")
    assert search.returncode == 0, search.stderr
    run_dir = next((tmp_path / "runs").glob("*-small-4"))
    assert {p.name for p in run_dir.glob("*.png")} == {"timeline.png", "memory.png", "pareto.png", "history.png"}
    commands = [("evaluate", "--model", "small", "--gpus", "4", "--tp", "2"),
                ("curve", "--model", "small", "--gpus", "1,2", "--no-run-dir"),
                ("export", str(run_dir), "--format", "megatron"),
                ("show", str(run_dir)), ("explain", str(run_dir)),
                ("check-published", str(ROOT / "tests" / "data" / "published_runs.csv")),
                ("profile", "--show", str(ROOT / "autotune" / "data" / "devices" / "cpu.json")),
                ("runtimes", "torchtitan")]
    for argv in commands:
        proc = run(*argv)
        assert proc.returncode == 0, (argv, proc.stderr[-2000:])
        assert proc.stdout.strip(), argv
    assert attempts() == [], "a planning command tried to import torch"


@pytest.mark.parametrize("argv", [("validate", "plan.json"), ("profile", "--quick"), ("graph", "--model", "small"),
                                  ("benchmark", "--model", "small")])
def test_torch_commands_say_how_to_install_it(no_torch, argv):
    run, _ = no_torch
    proc = run(*argv)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"autotune {argv[0]}: error: torch: "), proc.stderr
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in lines[0]
    assert proc.stdout == ""
