"""The base install has no torch (README, quick start): search, evaluate, curve, export,
check-published and `profile --show` run with torch unimportable and never try to import it;
validate, profile, graph and benchmark say in one line (exit 2) that they need it and how to
install the CPU wheel.

torch is made unimportable by a ``sitecustomize`` on PYTHONPATH whose import hook refuses
``torch`` and writes down every attempt (in forked and spawned children too), so an import that
a ``try``/``except ImportError`` would swallow still fails the test.
"""

from __future__ import annotations

import json
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


_DRIVER = """
import contextlib, io, json, sys
from autotune.cli.main import main

results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    results.append({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""


@pytest.fixture
def no_torch(tmp_path):
    """(run, attempts): run(*commands) runs each command's argv with ``autotune.cli.main.main``, one
    after the other in one Python process (in tmp_path, torch blocked), and returns each one's
    {argv, code, stdout, stderr}; attempts() lists the torch modules anything tried to import."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_BLOCKER)
    log = tmp_path / "torch-imports.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]), NO_TORCH_LOG=str(log))
    env.pop("CI", None)

    def run(*commands: list[str]) -> list[dict]:
        proc = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(commands)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.splitlines()[-1])

    def attempts() -> list[str]:
        return log.read_text().split() if log.exists() else []
    return run, attempts


def test_the_blocker_blocks(no_torch):
    run, attempts = no_torch
    (graph,) = run(["graph", "--model", "small"])
    assert graph["code"] == 2
    assert attempts()[:1] == ["torch"]


def test_planning_commands_run_without_torch(no_torch, tmp_path):
    run, attempts = no_torch
    (search,) = run(["search", "--model", "small", "--gpus", "4", "--plots", "sync", "--quiet"])
    assert search["code"] == 0, search["stderr"]
    run_dir = next((tmp_path / "runs").glob("*-small-4"))
    assert {p.name for p in run_dir.glob("*.png")} == {"timeline.png", "memory.png", "pareto.png", "history.png"}
    commands = [["evaluate", "--model", "small", "--gpus", "4", "--tp", "2"],
                ["curve", "--model", "small", "--gpus", "1,2", "--no-run-dir"],
                ["export", str(run_dir), "--format", "megatron"],
                ["show", str(run_dir)], ["explain", str(run_dir)],
                ["check-published", str(ROOT / "tests" / "data" / "published_runs.csv")],
                ["profile", "--show", str(ROOT / "autotune" / "data" / "devices" / "cpu.json")],
                ["runtimes", "torchtitan"]]
    for result in run(*commands):
        assert result["code"] == 0, (result["argv"], result["stderr"][-2000:])
        assert result["stdout"].strip(), result["argv"]
    assert attempts() == [], "a planning command tried to import torch"


def test_torch_commands_say_how_to_install_it(no_torch):
    run, _ = no_torch
    commands = [["validate", "plan.json"], ["profile", "--quick"], ["graph", "--model", "small"],
                ["benchmark", "--model", "small"]]
    for result in run(*commands):
        assert result["code"] == 2
        lines = result["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"autotune {result['argv'][0]}: error: torch: "), result
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in lines[0]
        assert result["stdout"] == ""
