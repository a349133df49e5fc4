"""The size rules of the design notes, checked: modules under about 400 lines, functions under about 40.

The functions longer than 40 lines when the check was written are listed with their length then as a
ceiling: each may shrink, none may grow, and no other function may pass 40 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "autotune"
MODULE_MOST_LINES = 400
FUNCTION_MOST_LINES = 40
# (module under autotune/, function) -> its length in lines when this check was written (2026-11-28)
LONGER = {
    ("spec/runtime.py", "__post_init__"): 69,
    ("search/api.py", "search"): 65,
    ("search/inter_op.py", "_min_sum_uniform"): 55,
    ("search/caps.py", "branch_and_bound"): 48,
    ("search/bounds.py", "least_slowest_s"): 44,
    ("cost/evaluate.py", "assemble_estimate"): 44,
    ("cli/evaluate_cmd.py", "add_runtime_args"): 44,  # one add_argument a runtime setting
    ("cost/runtime_kernels.py", "runtime_cluster"): 42,
    ("spec/model.py", "_check_moe"): 41,
    ("search/inter_op.py", "_min_sum"): 41,
    ("cost/serving_step.py", "step_model"): 44,  # 20 keyword settings and their docstring; the body is 15 lines
    ("calibrate/serving_rows.py", "case_from_row"): 41,
}


def function_lengths(source: str) -> dict[str, int]:
    """Each function's (and method's) lines, decorators apart, by name (the longest of a name)."""
    lengths: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lengths[node.name] = max(lengths.get(node.name, 0), node.end_lineno - node.lineno + 1)
    return lengths


def too_long(root: Path) -> list[str]:
    """The functions under ``root`` over FUNCTION_MOST_LINES lines, or over their LONGER ceiling."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for name, lines in function_lengths(path.read_text()).items():
            if lines > LONGER.get((module, name), FUNCTION_MOST_LINES):
                found.append(f"{module} {name}: {lines} lines")
    return found


def test_no_module_passes_400_lines():
    assert [p.name for p in ROOT.rglob("*.py") if len(p.read_text().splitlines()) > MODULE_MOST_LINES] == []


def test_no_function_passes_40_lines_or_its_ceiling():
    assert too_long(ROOT) == []


def test_the_length_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_MOST_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    assert function_lengths((tmp_path / "m.py").read_text()) == {"short": 2, "long": FUNCTION_MOST_LINES + 1}
    assert too_long(tmp_path) == [f"m.py long: {FUNCTION_MOST_LINES + 1} lines"]
