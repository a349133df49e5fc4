"""The documentation runs as written: every ``autotune ...`` command in the fenced blocks of
README.md and docs/*.md runs (as ``python -m autotune``) in a temporary directory, in page
order, and must exit 0 (2 where the output the page shows is an ``autotune ...: error:`` line);
where the page shows its output (a
``$ autotune ...`` line followed by text), that output must still match.

Matching is loose, and these are the rules: blank lines and lines that are only ``...`` are
skipped; ``...`` inside a line matches any text; every other expected line must appear in the
output with the same words; numbers must agree within 10% (``NUMBER_TOLERANCE``), except the
wall-clock seconds after "trials in" and run-directory names (``runs/<time>-...``), which
change every run. Placeholders are replaced: ``runs/<ts>-NAME``, ``runs/<time>-NAME`` and
``runs/...-NAME`` by the run directory an earlier command of the page made, ``runs/<run>`` by
the latest run, and ``path/to/...`` or ``mypkg`` by the samples in docs/samples/.

Commands that need a GPU or a remote host are not run; ``SKIPPED`` lists each with the reason.
The whole run takes minutes (searches of GPT-3 175B on 1024 GPUs, a profile), so it is slow.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
NUMBER_TOLERANCE = 0.10
# (page, start of the command) -> why it is not run here.
SKIPPED = {
    ("README.md", "autotune search --model gpt3-1.3b --gpus 64 --cluster dgx-a100-80gb --storage"): "remote host (db-host)",
    ("README.md", "autotune worker"): "remote host (db-host)",
    ("docs/ecosystem.md", "autotune search --model gpt3-1.3b --gpus 64 --cluster dgx-a100-80gb --global-batch 256 --storage"):
        "remote host (db-host)",
    ("docs/ecosystem.md", "autotune worker"): "remote host (db-host)",
    ("docs/profiling.md", "autotune benchmark --model small --device cuda"): "needs a GPU",
    # Measurements of this machine: minutes of torch work on 2 cores, and a shared CI host is too
    # noisy for the fits (exit 2 by design). tests/test_profilers.py and tests/test_validate_*.py
    # run them on small cases.
    ("docs/profiling.md", "autotune profile --quick"): "measures this machine (its output: PROVIDED)",
    ("docs/validation.md", "autotune validate"): "runs torch training steps for minutes",
    ("docs/profiling.md", "autotune benchmark --model small --backward"):
        "times the real model with torch (15 steps each, minutes on 2 cores; tests/test_profilers.py runs it small)",
    ("docs/profiling.md", "autotune graph --model llama3-8b --seq-len 2048 --training"):
        "traces Llama 3 8B's joint forward+backward graph (2.5 minutes on 2 cores; tests/test_trace.py runs the graph "
        "CLI on a preset and --training liveness on small and gpt3-125m)",
}
# Commands whose exit code is not 0, and why (the page says so).
EXIT_CODES = {("docs/models.md", "autotune evaluate --model tests/data/hf_configs/deepseek-v3.json --gpus 64"): 1,
              # the plan is torchtitan's, the model is not one torchtitan builds: no export, exit 1
              ("docs/ecosystem.md", "autotune search --model small --gpus 4 --export torchtitan"): 1}
# Files a skipped command would have written, given from the repository instead.
PROVIDED = {("docs/profiling.md", "my-machine.json"): "autotune/data/devices/cpu.json"}
COMMAND = re.compile(r"^(\$ )?autotune [a-z][a-z-]*( |$)")


def _blocks(text: str) -> list[list[str]]:
    blocks, inside, current = [], False, []
    for line in text.splitlines():
        if line.startswith("```"):
            if inside:
                blocks.append(current)
                current = []
            inside = not inside
        elif inside:
            current.append(line)
    return blocks


def page_commands(page: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of each command on ``page``, in order; the output is
    what follows a ``$ autotune`` line up to the next ``$`` line."""
    out = []
    for block in _blocks((ROOT / page).read_text()):
        i = 0
        while i < len(block):
            line = block[i].rstrip()
            if not COMMAND.match(line) or re.match(r"^(\$ )?autotune [a-z-]+:", line):
                i += 1
                continue
            shown = line.startswith("$ ")
            command = line.removeprefix("$ ")
            while command.endswith("\\"):
                i += 1
                command = command[:-1].rstrip() + " " + block[i].strip()
            i += 1
            expected = []
            while shown and i < len(block) and not block[i].startswith("$ "):
                expected.append(block[i])
                i += 1
            out.append((command.split("  #")[0].split(" # ")[0].strip(), expected))
    return out


def _skip_reason(page: str, command: str) -> str | None:
    return next((why for (p, start), why in SKIPPED.items() if p == page and command.startswith(start)), None)


def _resolve(command: str, cwd: Path) -> str:
    """Placeholders -> files: run directories made earlier on the page, docs/samples."""
    def run_dir(match: re.Match) -> str:
        name, rest = match.group(2), match.group(3) or ""
        runs = sorted((cwd / "runs").glob(f"*-{name}") if name else (cwd / "runs").glob("*-*"))
        if not runs:
            pytest.fail(f"{command!r}: no earlier command of the page made a run directory for {name or 'any run'}")
        return f"runs/{runs[-1].name}{rest}"

    command = re.sub(r"runs/(<ts>-|<time>-|\d{8}-\.\.\.-)([\w.-]+)(/[\w.]+)?", run_dir, command)
    command = re.sub(r"runs/<run>()()(/[\w.]+)?", run_dir, command)
    return command


_NUMBER = r"(-?\d+(?:,\d{3})*(?:\.\d+)?)"  # 1,482,430 and 44.2; a comma after a number is text


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _pattern(expected: str) -> tuple[re.Pattern, list[float]]:
    """A regex for an expected line (``...`` = any text, each number captured) and its numbers."""
    regex, numbers = [], []
    for k, part in enumerate(expected.strip().split("...")):
        if k:
            regex.append(".*?")
        for i, piece in enumerate(re.split(_NUMBER, part)):
            if i % 2:
                regex.append(_NUMBER)
                numbers.append(_number(piece))
            else:
                regex.append(r"\s+".join(re.escape(word) for word in re.split(r"\s+", piece)))
    return re.compile("".join(regex)), numbers


def _without_volatile(line: str) -> str:
    line = re.sub(r"runs/[\w.-]+", "runs/RUN", line)
    return re.sub(r"trials in [\d.]+ s", "trials in T s", line)


def check_output(expected: list[str], actual: str) -> None:
    """Each expected line (loosely, see the module docstring) in ``actual``."""
    lines = [_without_volatile(line) for line in actual.splitlines()]
    for want in expected:
        want = _without_volatile(want).strip()
        if not want or want == "...":
            continue
        pattern, want_numbers = _pattern(want)
        found = [m for m in (pattern.search(line) for line in lines) if m]
        assert found, f"the page shows {want!r}; the output has no such line:\n{actual[-3000:]}"
        error = min(_distance(want_numbers, [_number(g) for g in m.groups()]) for m in found)
        assert error <= NUMBER_TOLERANCE, f"the page shows {want!r}, the output {found[0].string!r}"


def _distance(want: list[float], got: list[float]) -> float:
    return max((abs(w - g) / max(abs(w), 1e-9) for w, g in zip(want, got)), default=0.0)


def _environment(cwd: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "docs" / "samples")]))
    env.pop("CI", None)
    return env


def _run_page(page: str, tmp_path: Path) -> list[str]:
    for name in ("docs", "search_spaces", "autotune", "tests"):  # paths the pages name, from the repository root
        (tmp_path / name).symlink_to(ROOT / name)
    for (where, name), source in PROVIDED.items():
        if where == page:
            (tmp_path / name).write_bytes((ROOT / source).read_bytes())
    ran = []
    for command, expected in page_commands(page):
        if _skip_reason(page, command):
            continue
        resolved = _resolve(command, tmp_path)
        argv = [sys.executable, "-m", "autotune", *shlex.split(resolved)[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=_environment(tmp_path))
        code = 2 if any(re.match(r"autotune [a-z-]+: error:", line) for line in expected) else next(
            (c for (p, start), c in EXIT_CODES.items() if p == page and command.startswith(start)), 0)
        assert proc.returncode == code, f"{page}: {command!r} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
        if expected:
            check_output(expected, proc.stdout + proc.stderr)
        ran.append(command)
    return ran


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_page_runs_as_written(page, tmp_path):
    commands = page_commands(page)
    ran = _run_page(page, tmp_path)
    assert len(ran) == len([c for c, _ in commands if not _skip_reason(page, c)])


# Fast checks of the machinery and of what the pages promise.

def test_every_skipped_command_is_on_its_page_and_every_page_has_commands():
    for page, start in SKIPPED:
        assert any(c.startswith(start) for c, _ in page_commands(page)), (page, start)
    assert all(page_commands(p) for p in ("README.md", "docs/ecosystem.md", "docs/inference.md"))


def test_no_placeholder_path_without_a_sample():
    for page in PAGES:
        for command, _ in page_commands(page):
            for path in re.findall(r"(?:docs/samples/[\w./-]+)", command):
                assert (ROOT / path).exists(), f"{page}: {command!r} names {path}, which is not in the repository"
            assert "path/to/" not in command, f"{page}: {command!r}: use a sample in docs/samples/"


def test_output_check_can_fail():
    check_output(["step time 44.2 ms (+-2%), 1,482,430 tokens/s", "..."], "step time 45.0 ms (+-2%), 1,490,000 tokens/s")
    with pytest.raises(AssertionError):
        check_output(["step time 44.2 ms (+-2%)"], "step time 60.0 ms (+-2%)")
    with pytest.raises(AssertionError):
        check_output(["searched 24 slices"], "searched 24 plans")
    check_output(["- dp (...): 44.2 ms, 1.00x"], "- dp (DDP, ZeRO-1 or ZeRO-3): 44.9 ms, 1.00x")  # elided numbers
    with pytest.raises(AssertionError):
        check_output(["- dp (...): 44.2 ms, 1.00x"], "- dp (DDP, ZeRO-1 or ZeRO-3): 54.9 ms, 1.00x")


def test_the_quick_start_block_does_not_start_ci():
    quick = _blocks((ROOT / "README.md").read_text().split("## Quick start")[1])[0]
    assert not any(line.strip().startswith(("bash .ci/run", ".ci/run")) for line in quick)


def test_version_and_every_help_line_shows_its_default(capsys):
    from autotune.cli.main import build_parser

    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0 and re.fullmatch(r"autotune \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        text = " ".join(command.format_help().split())
        for action in command._actions:
            if (not action.option_strings or action.default in (None, [], (), argparse.SUPPRESS)
                    or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction))):
                continue
            help_text = " ".join(command._get_formatter()._expand_help(action).split())
            assert "default" in help_text.lower() and help_text in text, (name, action.option_strings)
