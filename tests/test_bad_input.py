"""Bad input over every command: exit 2, one line naming the field, no traceback, nothing written.

Each case runs ``autotune`` in a working directory that holds a finished run and a few broken
files; the directory's listing (names, sizes, modification times, modes) must be the same
afterwards, so a refused command created or changed nothing, not even an empty ``runs/``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from autotune.cli.main import main

TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 1000, "n_positions": 512}


def _cluster_toml(**changes: str) -> str:
    """A one-node H100 cluster file; ``changes`` replace a line's value (TOML text)."""
    values = {"device": '"h100"', "gpus_per_node": "8", "bandwidth": "400e9"}
    values.update(changes)
    link = (f'latency_s = 6.6e-6\nstep_latency_s = 0.6e-6\nbandwidth = {values["bandwidth"]}\n')
    extra = "".join(f"{k} = {v}\n" for k, v in changes.items() if k not in values or k in ("max_nodes", "cores_per_node"))
    return (f'device = {values["device"]}\ngpus_per_node = {values["gpus_per_node"]}\n{extra}'
            f'[intra_node]\nname = "nvlink"\n{link}[host_link]\nname = "pcie"\n{link}')


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A working directory with a finished run (RUN), broken inputs, and a plain file (afile)
    under which nothing can be written."""
    root = tmp_path_factory.mktemp("bad-input")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert main(["search", "--model", "small", "--gpus", "2", "--runs-dir", "made", "--plots", "none",
                     "--quiet"]) == 0
    finally:
        os.chdir(cwd)
    (run,) = (root / "made").iterdir()
    run.rename(root / "RUN")
    (root / "made").rmdir()
    (root / "tiny.json").write_text(json.dumps(TINY))
    (root / "wrongtype.json").write_text(json.dumps({**TINY, "n_inner": {"x": 1}}))
    (root / "listlayers.json").write_text(json.dumps({**TINY, "n_layer": [2]}))
    (root / "deep.json").write_text(json.dumps({**TINY, "n_layer": 10**6}))
    (root / "binary.json").write_bytes(bytes(range(256)) * 4)
    (root / "afile").write_text("a plain file\n")
    (root / "adir").mkdir()
    (root / "c-gpus.toml").write_text(_cluster_toml(gpus_per_node='"8"'))
    (root / "c-bandwidth.toml").write_text(_cluster_toml(bandwidth='"fast"'))
    (root / "c-nodes.toml").write_text(_cluster_toml(max_nodes='"two"'))
    (root / "c-device.toml").write_text(_cluster_toml(device="5"))
    (root / "c-broken.toml").write_text("device = \n")
    empty_run = root / "EMPTYDB"
    empty_run.mkdir()
    (empty_run / "study.db").write_bytes(b"")
    junk_run = root / "JUNKDB"
    junk_run.mkdir()
    (junk_run / "study.db").write_bytes(b"not a database" * 100)
    (root / "NOSTUDY").mkdir()
    corrupt = root / "CORRUPT"
    shutil.copytree(root / "RUN", corrupt)
    (corrupt / "plan.json").write_text("{")
    missing = root / "NOPLAN"
    shutil.copytree(root / "RUN", missing)
    (missing / "plan.json").unlink()
    (root / "badplan.json").write_text(json.dumps({"plan": {"stages": "x"}}))
    (root / "space.toml").write_text("tp = [\n")
    return root


def _listing(root: Path) -> dict[str, tuple]:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


SEARCH = ["search", "--model", "large", "--gpus", "16", "--quiet"]
EVAL = ["evaluate", "--model", "large", "--gpus", "8"]

CASES = [
    # search: sizes beyond any real input are refused at once (the search would run for minutes)
    (SEARCH + ["--global-batch", "1000000007"], "global_batch"),
    (SEARCH + ["--global-batch", "100000001"], "global_batch"),
    (SEARCH + ["--seq-len", "1000000000"], "seq_len"),
    (["search", "--model", "large", "--gpus", "2000000"], "gpus"),
    (["search", "--model", "deep.json", "--gpus", "8"], "config.n_layer"),
    (SEARCH + ["--global-batch", "0"], "--global-batch"),
    (SEARCH + ["--global-batch", "1e23"], "--global-batch"),
    (["search", "--model", "nosuch", "--gpus", "8"], "model"),
    (["search", "--gpus", "8"], "model"),
    (["search", "--model", "large"], "gpus"),
    (["search", "--model", "large", "--gpus", "12"], "gpus"),
    (["search", "--model", "large", "--gpus", "-8"], "--gpus"),
    (SEARCH + ["--space", "nosuch"], "space"),
    (SEARCH + ["--space", "space.toml"], "space"),
    (SEARCH + ["--set", "d=1024"], "set"),
    (SEARCH + ["--dtype", "fp64"], "dtype"),
    (SEARCH + ["--attention", "sparse"], "attention"),
    (SEARCH + ["--method", "random"], "--method"),
    (SEARCH + ["--cluster", "nope"], "cluster"),
    (SEARCH + ["--cluster", "c-gpus.toml"], "gpus_per_node"),
    (SEARCH + ["--profile", "binary.json"], "profile"),
    (SEARCH + ["--export", "megatron", "--no-run-dir"], "export"),
    (SEARCH + ["--runs-dir", "afile/runs"], "runs_dir"),
    (SEARCH + ["--storage", "bogus://nowhere"], "storage"),
    (SEARCH + ["--workload", "train", "--seq-len", "100000"], "seq_len"),
    (["search", "--model", "wrongtype.json", "--gpus", "8"], "n_inner"),
    (SEARCH + ["--no-run-dir", "--runs-dir", "elsewhere"], "runs_dir"),
    (SEARCH + ["--workload", "decode", "--global-batch", "4"], "global_batch"),
    (SEARCH + ["--workload", "generate"], "workload"),
    (SEARCH + ["--concurrency", "64"], "batch"),
    (SEARCH + ["--seed", "99999999999999"], "seed"),
    (["search", "--space", "cxl-lora", "--seed", "-1"], "seed"),
    (["search", "--no-run-dir", "--resume", "RUN"], "no_run_dir"),
    (["search", "--resume", "RUN", "--model", "large"], "model"),
    (["search", "--resume", "RUN", "--storage", "sqlite:///x.db"], "storage"),
    (["search", "--resume", "NOSTUDY"], "resume"),
    (["search", "--resume", "EMPTYDB"], "resume"),
    (["search", "--resume", "JUNKDB"], "resume"),
    (["search", "--resume", "nowhere"], "resume"),
    # evaluate
    (EVAL + ["--global-batch", "1000000007"], "global_batch"),
    (EVAL + ["--tp", "3"], "gpus"),
    (EVAL + ["--tp", "0"], "--tp"),
    (EVAL + ["--zero", "7"], "zero"),
    (EVAL + ["--recompute", "sometimes"], "recompute"),
    (EVAL + ["--cluster", "c-bandwidth.toml"], "bandwidth"),
    (EVAL + ["--cluster", "c-nodes.toml"], "max_nodes"),
    (EVAL + ["--cluster", "c-device.toml"], "device"),
    (EVAL + ["--cluster", "c-broken.toml"], "cluster"),
    (EVAL + ["--profile", "missing.json"], "profile"),
    (EVAL + ["--workload", "training"], "workload"),
    (EVAL + ["--prompt-len", "128"], "prompt_len"),
    (EVAL + ["--plan", "RUN/plan.json", "--tp", "2"], "tp"),
    (EVAL + ["--plan", "RUN", "--zero", "3"], "zero"),
    (["evaluate", "--model", "binary.json", "--gpus", "1"], "model"),
    (["evaluate", "--model", "listlayers.json", "--gpus", "1"], "n_layer"),
    (["evaluate", "--model", "large", "--gpus", "8", "--plan", "badplan.json"], "plan"),
    # show / explain
    (["show", "nowhere"], "run"),
    (["show", "CORRUPT"], "plan"),
    (["show", "NOPLAN"], "plan"),
    (["show", "NOSTUDY"], "plan"),
    (["explain", "CORRUPT"], "plan"),
    (["explain", "nowhere"], "plan"),
    # export
    (["export", "RUN", "--format", "nope"], "format"),
    (["export", "RUN", "--format", "megatron", "--out", "afile/x.sh"], "out"),
    (["export", "RUN", "--format", "deepspeed", "--out", "adir"], "out"),
    (["export", "nowhere", "--format", "megatron"], "plan"),
    # scenario
    (["scenario", "nope"], "scenario"),
    (["scenario", "seed-experiment", "--out", "afile/x.md"], "out"),
    (["scenario", "seed-experiment", "--plan", "noequals"], "--plan"),
    # validate
    (["validate", "nowhere"], "plan"),
    (["validate", "RUN", "--out", "afile/v.json"], "out"),
    (["validate", "RUN", "--scale", "bogus=1"], "scale"),
    # profile
    (["profile", "--show", "binary.json"], "profile"),
    (["profile", "--show", "missing.json"], "profile"),
    (["profile", "--show", "RUN/plan.json", "--out", "p.json"], "show"),
    (["profile", "--out", "afile/p.json"], "out"),
    (["profile", "--device", "tpu"], "device"),
    (["profile", "--refit", "missing.json"], "profile"),
    # graph
    (["graph", "--model", "tiny.json", "--input", "1x8:int64"], "input"),
    (["graph", "--module", "nosuch:factory", "--batch", "4"], "batch"),
    (["graph", "--model", "nosuch"], "model"),
    (["graph", "--model", "tiny.json", "--dtype", "fp64"], "dtype"),
    (["graph", "--model", "tiny.json", "--module", "a:b"], "--module"),
    # benchmark
    (["benchmark", "--model", "tiny.json", "--device", "tpu"], "device"),
    (["benchmark", "--model", "tiny.json", "--dtype", "fp64"], "dtype"),
    (["benchmark", "--model", "nosuch"], "model"),
    (["benchmark", "--model", "tiny.json", "--warmup", "-1"], "warmup"),
    # curve
    (["curve", "--model", "large", "--gpus", "0,1"], "gpus"),
    (["runtimes", "megatorn"], "runtime"),
    (["evaluate", "--model", "large", "--gpus", "8", "--runtime", "jax"], "runtime"),
    (["search", "--model", "large", "--gpus", "8", "--runtime", "megatron", "--space", "nosuch"], "space"),
    (["evaluate", "--model", "large", "--gpus", "8", "--runtime", "megatron", "--zero", "3"], "zero"),
    (["curve", "--model", "large", "--gpus", "x"], "gpus"),
    (["curve", "--model", "nosuch", "--gpus", "1,2"], "model"),
    (["curve", "--model", "large", "--gpus", "1,2", "--runs-dir", "afile/r"], "runs_dir"),
    (["curve", "--model", "large", "--gpus", "2000000"], "gpus"),
    (["curve", "--model", "large", "--gpus", "1", "--threshold", "2"], "threshold"),
    (["curve", "--model", "large", "--gpus", "1,2", "--seed", "-3"], "seed"),
    (["curve", "--model", "large", "--gpus", "1,2", "--global-batch", "1000000007"], "global_batch"),
    # worker, check-published
    (["worker", "--study", "s", "--storage", "bogus://nowhere"], "storage"),
    (["worker", "--study", "s", "--storage", "sqlite:///new.db"], "storage"),
    (["worker", "--study", "nosuch", "--storage", "sqlite:///RUN/study.db"], "study"),
    (["check-published", "missing.csv"], "runs"),
    (["check-published", "binary.json"], "runs"),
    # the command itself
    (["nosuch"], "invalid choice"),
]


@pytest.mark.parametrize("argv, field", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_exit_2_one_line_nothing_written(workdir, monkeypatch, capsys, argv, field):
    monkeypatch.chdir(workdir)
    before = _listing(workdir)
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert field in lines[0] and "Traceback" not in err, err
    assert _listing(workdir) == before, "a refused command wrote or changed files"


def test_enough_cases_over_every_command():
    from autotune.cli.main import COMMANDS

    covered = {argv[0] for argv, _ in CASES}
    assert len(CASES) >= 60
    assert set(COMMANDS) | {"explain"} <= covered | {"nosuch"}
