"""What `autotune search` loads and how it leaves: a dense training search, run directory written,
does not import the inference and MoE cost models, the Hugging Face config readers, the
exporters, the plots or multiprocessing (each is imported where it is used), finds its device
without parsing every device file, and ends without the interpreter's teardown only where that
changes nothing. The CLI figure of scripts/bench_search.py depends on all of these."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
import subprocess
import sys
import tomllib

import pytest

from autotune.cli import signals
from autotune.spec import hardware_data

ROOT = Path(__file__).resolve().parents[1]

# Modules a dense training search on a preset must not load (imported lazily where used).
LAZY = ("autotune.cost.inference", "autotune.cost.inference_plan", "autotune.cost.inference_moe", "autotune.cost.moe",
        "autotune.cost.moe_stage", "autotune.spec.hf_config",
        "autotune.outputs.export.megatron", "autotune.outputs.export.torchtitan", "autotune.outputs.export.deepspeed",
        "autotune.outputs.plots", "multiprocessing", "zipfile", "matplotlib")

_SEARCH = """
import json, sys
from autotune.cli.main import main
code = main(["search", "--model", "large", "--gpus", "16", "--runs-dir", sys.argv[1], "--plots", "none", "--json"])
sys.stdout.flush()
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_PROCESSES": "1"}


def _modules_after(script: str, *args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=_env(), check=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["code"] == 0
    return set(answer["modules"])


def test_every_lazy_module_exists():
    """The list names real modules: a renamed one would make the next test pass vacuously."""
    for name in LAZY:
        if name == "matplotlib":  # an optional dependency
            continue
        assert importlib.util.find_spec(name) is not None, name


def test_a_training_search_does_not_import_what_it_does_not_use(tmp_path):
    loaded = _modules_after(_SEARCH, str(tmp_path))
    assert "autotune.search.driver" in loaded and "autotune.outputs.run_dir" in loaded  # it searched and wrote its run
    assert next(tmp_path.iterdir()).joinpath("plan.json").is_file()
    assert sorted(loaded & set(LAZY)) == []


def test_the_lazy_modules_load_when_their_work_is_asked_for(tmp_path):
    """An inference search and an export load what the training search left out."""
    prefill = _SEARCH.replace('"--json"]', '"--json", "--workload", "prefill", "--prompt-len", "256"]')
    assert {"autotune.cost.inference", "autotune.cost.inference_plan"} <= _modules_after(prefill, str(tmp_path / "a"))
    exported = _SEARCH.replace('"--json"]', '"--json", "--export", "megatron"]')
    assert "autotune.outputs.export.megatron" in _modules_after(exported, str(tmp_path / "b"))


def test_the_public_names_are_there_before_and_after_their_modules_load():
    import autotune.outputs as outputs
    from autotune.outputs.export import FORMATS, export

    assert outputs.export is export and callable(outputs.plot_timeline) and outputs.FORMATS == FORMATS
    assert set(outputs.__all__) <= set(dir(outputs))
    import autotune.outputs.export.megatron  # noqa: F401  (the package's ``export`` stays the function)

    assert outputs.export is export


def _device_files() -> list[Path]:
    return sorted(p for p in (ROOT / "autotune" / "data" / "devices").iterdir() if p.suffix in (".toml", ".json"))


def test_each_device_name_and_alias_is_in_one_file_only():
    """The device index stops at the first file naming a device, so no two files may share a name."""
    owners: dict[str, str] = {}
    for path in _device_files():
        data = tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(path.read_text())["device"]
        for key in [data["name"], *data.get("aliases", [])]:
            assert owners.setdefault(key.lower(), path.name) == path.name, (key, owners[key.lower()], path.name)


def test_the_device_index_finds_what_parsing_every_file_finds():
    full = hardware_data._device_files()
    index = hardware_data._toml_device_index()
    assert index and set(index) <= set(full)
    for key in full:
        assert hardware_data._shipped_device(key) == full[key], key
    toml_keys = {k for p in _device_files() if p.suffix == ".toml"
                 for d in [tomllib.loads(p.read_text())] for k in [d["name"].lower(), *(a.lower() for a in d.get("aliases", []))]}
    assert set(index) == toml_keys
    assert hardware_data._shipped_device("no-such-gpu") is None


def test_leave_keeps_python_exit_where_shutdown_has_work():
    """Here (pytest has atexit hooks) and after a failure, leave is an ordinary SystemExit."""
    with pytest.raises(SystemExit) as ok:
        signals.leave(0)
    assert ok.value.code == 0
    with pytest.raises(SystemExit) as failed:
        signals.leave(2)
    assert failed.value.code == 2


@pytest.mark.parametrize("args", [["--json"], []])
def test_a_search_that_leaves_early_prints_all_of_its_answer(tmp_path, args):
    """`python -m autotune search` ends by os._exit: its output, written to a pipe, is complete
    and the run directory holds no SQLite write-ahead log."""
    out = subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "large", "--gpus", "16", "--runs-dir",
                          str(tmp_path), "--plots", "none", *args], capture_output=True, text=True, env=_env())
    assert out.returncode == 0, out.stderr
    if args:
        assert json.loads(out.stdout)["plan"]["gpus"] == 16
    else:
        assert out.stdout.rstrip().splitlines()[-1].startswith("run directory: ")
    run = next(tmp_path.iterdir())
    assert sorted(p.name for p in run.iterdir()) == ["plan.json", "report.md", "search.json", "study.db"]


def test_the_types_that_files_are_checked_against_resolve():
    """check_fields reads a dataclass's declared types (typing.get_type_hints): a name moved under
    TYPE_CHECKING to import it lazily would break reading a run back (`autotune show`)."""
    import typing

    from autotune.plan.plan import Plan, StagePlan
    from autotune.search.space import SearchSpace
    from autotune.spec.model import ModelSpec
    from autotune.spec.runtime import Runtime
    from autotune.spec.workload import InferenceWorkload, TrainingWorkload

    for cls in (Runtime, ModelSpec, TrainingWorkload, InferenceWorkload, Plan, StagePlan, SearchSpace):
        assert typing.get_type_hints(cls), cls


def test_a_profiled_command_still_writes_its_profile(tmp_path):
    """Under cProfile (which writes its report after the command returns) leave is Python's exit."""
    report = tmp_path / "search.prof"
    out = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(report), "-m", "autotune", "search", "--model", "large",
                          "--gpus", "16", "--no-run-dir"], capture_output=True, text=True, env=_env())
    assert out.returncode == 0, out.stderr
    assert report.stat().st_size > 0


@pytest.mark.parametrize("file_name", ["models.toml", "clusters.toml"])
def test_a_preset_read_alone_is_the_table_the_whole_file_holds(file_name):
    from autotune.spec import toml_tables

    path = ROOT / "autotune" / "data" / file_name
    full = tomllib.loads(path.read_text())
    assert toml_tables._split(path) is not None  # the shipped files are read one table at a time
    assert toml_tables.table_names(path) == list(full)
    for name, data in full.items():
        assert toml_tables.table(path, name) == data, name
    assert toml_tables.table(path, "no-such-preset") is None


def test_a_file_not_split_cleanly_is_read_whole(tmp_path):
    from autotune.spec import toml_tables

    nested = tmp_path / "nested.toml"  # a line of a multi-line array starts with "[": not a header
    nested.write_text('[a]\nx = [\n[1, 2],\n]\n\n[b]\ny = 1\n')
    assert toml_tables.table(nested, "a") == {"x": [[1, 2]]} and toml_tables.table_names(nested) == ["a", "b"]
    indented = tmp_path / "indented.toml"  # an indented header of an unusual form
    indented.write_text("[a]\nx = 1\n  [ 'b' ]\ny = 2\n")
    assert toml_tables.table(indented, "b") == {"y": 2} and toml_tables.table_names(indented) == ["a", "b"]
