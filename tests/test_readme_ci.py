"""README's quick start says what .ci/run does: the same test command (CI adds only --durations), the
extras the README installs among those CI installs, and the torch version CI pins."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _quick_start() -> str:
    return (ROOT / "README.md").read_text().split("## Quick start")[1].split("\n## ")[0]


def _ci() -> str:
    return (ROOT / ".ci" / "run").read_text()


def readme_test_command(quick_start: str) -> list[str]:
    """The words of the README's test command (the last step of the line that runs pytest)."""
    line = next(line for line in quick_start.splitlines() if "python -m pytest" in line)
    return shlex.split(line.split("&&")[-1])


def ci_test_command(ci: str) -> list[str]:
    """The words of .ci/run's pytest command, without its exit-status bookkeeping and --durations."""
    line = next(line for line in ci.splitlines() if line.strip().startswith("python -m pytest"))
    words = shlex.split(line.split("||")[0])
    return [w for w in words if not w.startswith("--durations")]


def extras(text: str) -> set[str]:
    """The optional-dependency groups of every ``-e ".[a,b]"`` install in ``text``."""
    return {name for group in re.findall(r'-e "\.\[([^\]]*)\]"', text) for name in group.split(",")}


def test_readme_runs_the_tests_as_ci_does():
    assert readme_test_command(_quick_start()) == ci_test_command(_ci())


def test_readme_installs_extras_ci_installs():
    readme = extras(_quick_start())
    assert readme and readme <= extras(_ci())


def test_readme_names_the_torch_ci_pins():
    pinned = set(re.findall(r"torch==([\d.]+)", _ci()))
    assert len(pinned) == 1
    assert f"torch pinned to {pinned.pop()}" in " ".join(_quick_start().split())


def test_the_checks_can_fail():
    ci = 'python -m pytest -q -n 2 --dist loadgroup --durations=25 || status=$?\nuv pip install -e ".[test,hf]"\n'
    assert ci_test_command(ci) == ["python", "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup"]
    assert readme_test_command("pip install x && python -m pytest -q -n 2") != ci_test_command(ci)
    assert not extras('pip install -e ".[test,exports]"') <= extras(ci)
