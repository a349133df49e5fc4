"""The package layout's rules, checked: arrows point down, heavy libraries load only where used."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1] / "autotune"
# Layers, top to bottom: a package may import only from its own layer or those below it.
LAYERS = [{"cli"}, {"scenarios", "validate", "calibrate"}, {"search"}, {"outputs"}, {"cost"}, {"plan", "graph"},
          {"spec"}, {"errors", "data"}]


def _imports(path: Path) -> set[str]:
    """Every autotune module imported anywhere in ``path`` (module level and inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "autotune" or name.startswith("autotune.")}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _package_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        if len(rel) == 1:
            continue  # top-level modules: __init__ (the lazy public API) and __main__
        for module in _imports(path):
            target = _package(module)
            if target and target != rel[0]:
                graph.add_edge(rel[0], target)
    return graph


def _layer(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def test_no_import_cycle_between_packages():
    cycles = list(nx.simple_cycles(_package_graph()))
    assert cycles == []


def test_every_arrow_points_down():
    upward = [(a, b) for a, b in _package_graph().edges if _layer(b) < _layer(a)]
    assert upward == []


def test_no_module_level_import_cycle():
    graph = nx.DiGraph()
    for path in ROOT.rglob("*.py"):
        name = ".".join(("autotune", *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:  # module level only: what runs at import
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autotune."):
                graph.add_edge(name, node.module)
    assert list(nx.simple_cycles(graph)) == []


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(m for m in ('torch', 'optuna', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_import_autotune_loads_no_heavy_library():
    assert _loaded_after("import autotune; autotune.search; autotune.evaluate") == set()


def test_inter_op_dp_loads_neither_torch_nor_optuna():
    assert _loaded_after("import autotune.search.inter_op") == set()


def test_evaluate_loads_neither_torch_nor_optuna():
    assert _loaded_after("import autotune; autotune.evaluate('large', 16)") == set()


def test_search_without_a_study_loads_neither_optuna_nor_torch():
    # the default space's stage spaces are small enough to enumerate: no Optuna trial per choice
    assert _loaded_after("import autotune; autotune.search(model='small', gpus=4)") == set()


def _runtime_imports(tree: ast.AST) -> list[ast.ImportFrom]:
    """Every ``from autotune... import`` that runs (module level or inside a function), leaving
    out ``if TYPE_CHECKING:`` blocks, which only the type checker reads."""
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for child in node.body for n in ast.walk(child)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and id(n) not in skipped
            and n.module and n.module.startswith("autotune")]


def test_no_import_cycle_between_modules_even_inside_functions():
    modules = {".".join(("autotune", *p.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in ROOT.rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in modules.items():
        if name == "autotune":
            continue  # the lazy public API names everything
        for node in _runtime_imports(ast.parse(path.read_text())):
            targets = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
            graph.add_edges_from((name, t) for t in (targets or [node.module]))
    assert [c for c in nx.simple_cycles(graph) if len(c) > 1] == []
