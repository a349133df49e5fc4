"""Probe the CLI and the library with bad or unlucky inputs, by issue 29's classes, and classify
each case. Every case runs ``python -m autotune`` (or a library call) in its own fresh directory
with a timeout; a refusal is clean when it exits 2 (1: a valid problem with no plan) with one line
on stderr naming the field, no traceback, nothing on stdout, and the directory as it was; a pass
must exit 0 and, where the case says, leave the file it made where it was asked for.

    python scripts/probe_inputs.py                 # every case; prints the failures and counts
    python scripts/probe_inputs.py --only paths    # the cases whose class or name holds "paths"
    python scripts/probe_inputs.py --list          # the cases, without running them

The disk-full cases mount a small tmpfs where the process may (root in a container), else they
use RLIMIT_FSIZE (``ulimit -f``). The fixtures (a finished run, a Hugging Face config, a
cluster, a profile, a space) are made once in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_PROCESSES": "1"}
LLAMA = json.loads((ROOT / "tests/data/hf/llama-3-8b.json").read_text())
DEEPSEEK = json.loads((ROOT / "tests/data/hf_configs/deepseek-v3.json").read_text())
DGX = tomllib.loads((ROOT / "autotune/data/clusters.toml").read_text())["dgx-h100"]
PROFILE = json.loads((ROOT / "autotune/data/devices/h100-sxm-measured.json").read_text())
SPACE = (ROOT / "search_spaces/default.toml").read_text()
SMALL8 = ("search", "--model", "small", "--gpus", "8", "--plots", "none", "--quiet")
EVAL = ("evaluate", "--model", "small", "--gpus", "8")
MOE = ("evaluate", "--model", "mixtral-8x7b", "--gpus", "64")
SERVE = EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "16")
LIBRARY = """
import sys, math, dataclasses
from pathlib import Path
import autotune
from autotune.errors import AutotuneError
try:
{body}
except AutotuneError as err:
    print(f"AutotuneError field={{err.field}}: {{err}}", file=sys.stderr)
    sys.exit(2)
"""


@dataclass(frozen=True, kw_only=True)
class Case:
    cls: str
    name: str
    argv: tuple = ()
    code: str = ""  # a library call instead of argv
    setup: Callable[[Path], None] | None = None
    expect: str = "refuse"  # refuse | pass | nofit | clean (refuse or pass)
    names: str = ""  # what the one line must hold (refusals)
    made: str = ""  # a pass must leave this path (relative to the case directory)
    timeout_s: float = 60.0
    prefix: str = ""  # shell text run first (ulimit), argv then runs under bash
    stdin_null: bool = True
    stdout_to: str = ""  # a file stdout goes to (e.g. /dev/full)


# ---- fixtures and setups -------------------------------------------------------------------

FIX: dict[str, Path] = {}


def make_fixtures(base: Path) -> None:
    base.mkdir(parents=True, exist_ok=True)
    runs = base / "runs"
    subprocess.run([sys.executable, "-m", "autotune", *SMALL8, "--runs-dir", str(runs)], env=ENV, check=True,
                   stdout=subprocess.DEVNULL)
    (run,) = runs.iterdir()
    FIX["run"] = run
    other = base / "runs4"
    subprocess.run([sys.executable, "-m", "autotune", "search", "--model", "small", "--gpus", "4", "--plots", "none",
                    "--quiet", "--runs-dir", str(other)], env=ENV, check=True, stdout=subprocess.DEVNULL)
    (FIX["run4"],) = other.iterdir()


def copy_run(dest: str = "RUN", which: str = "run") -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        target = d / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(FIX[which], target)
    return setup


def write(name: str, content: str | bytes) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return setup


def both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        for one in setups:
            one(d)
    return setup


def run_file(name: str, edit: Callable[[str], str | bytes], file_name: str | None = None) -> Callable[[Path], None]:
    """A copy of the good run as RUN with ``name`` (plan.json, search.json, report.md) edited."""
    def setup(d: Path) -> None:
        copy_run()(d)
        path = d / "RUN" / name
        text = path.read_text() if path.exists() and path.suffix != ".db" else ""
        out = edit(text)
        if out is None:
            return
        path.write_bytes(out if isinstance(out, bytes) else out.encode())
    return setup


def json_edit(fn: Callable[[dict], None]) -> Callable[[str], str]:
    def edit(text: str) -> str:
        data = json.loads(text)
        fn(data)
        return json.dumps(data, indent=1)
    return edit


def raw(key_path: tuple, literal: str) -> Callable[[str], str]:
    """Set a nested key to a JSON literal json.dumps cannot write (Infinity, NaN, 1e999)."""
    def fn(data: dict) -> None:
        node = data
        for key in key_path[:-1]:
            node = node[key]
        node[key_path[-1]] = "@@RAW@@"
    return lambda text: json_edit(fn)(text).replace('"@@RAW@@"', literal)


def setk(key_path: tuple, value) -> Callable[[str], str]:
    def fn(data: dict) -> None:
        node = data
        for key in key_path[:-1]:
            node = node[key]
        node[key_path[-1]] = value
    return json_edit(fn)


def delk(key_path: tuple) -> Callable[[str], str]:
    def fn(data: dict) -> None:
        node = data
        for key in key_path[:-1]:
            node = node[key]
        del node[key_path[-1]]
    return json_edit(fn)


def special(name: str, kind: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            path.mkdir()
        elif kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "loop":
            path.symlink_to(path.name)
        elif kind == "urandom":
            path.symlink_to("/dev/urandom")
    return setup


def hf(**changes) -> str:
    return json.dumps({**LLAMA, **changes})


def hf_raw(key: str, literal: str, base: dict = LLAMA) -> str:
    return json.dumps({**base, key: "@@"}).replace('"@@"', literal)


def cluster(**changes) -> str:
    return json.dumps({**DGX, **changes})


def cluster_in(path: tuple, value) -> str:
    data = json.loads(json.dumps(DGX))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(data)


def profile_in(path: tuple, value, literal: str = "") -> str:
    data = json.loads(json.dumps(PROFILE))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@" if literal else value
    text = json.dumps(data)
    return text.replace('"@@"', literal) if literal else text


def space(pattern: str, replacement: str) -> str:
    text, n = re.subn(pattern, replacement, SPACE, count=1, flags=re.M)
    assert n == 1, pattern
    return text


def tmpfs_or_ulimit(size_kb: int) -> str:
    """Shell text that makes writes under ./full fail after ``size_kb``: a tmpfs mounted there
    when the process may mount, else RLIMIT_FSIZE for the whole command."""
    return (f"mkdir -p full && (mount -t tmpfs -o size={size_kb}k tmpfs full 2>/dev/null "
            f"|| ulimit -f {size_kb // 1}) ; ")


# ---- the cases, by class -------------------------------------------------------------------

def path_cases() -> list[Case]:
    odd = ["r#1", "r?x", "r%41", "r%", "sp ace", "ünï", "a#b?c%d é", "tab\tname", "new\nline", "'quote\"", "{b}"]
    out = []
    for name in odd:
        out.append(Case(cls="paths", name=f"runs-dir {name!r}", argv=SMALL8 + ("--runs-dir", name), expect="pass",
                        made=f"{name}/*/plan.json"))
    # a storage is a URL: '%23' is '#', and '?' starts its query (a '?' in a file name is '%3F')
    for name, made in [("s#1.db", "s#1.db"), ("s%23.db", "s#.db"), ("s%3Fx.db", "s?x.db"), ("sp ace.db", "sp ace.db"),
                       ("ü.db", "ü.db"), ("d%23%3F/s.db", "d#?/s.db"), ("%7Bs%7D.db", "{s}.db")]:
        out.append(Case(cls="paths", name=f"storage {name!r}", setup=write("d#?/.keep", ""),
                        argv=SMALL8 + ("--no-run-dir", "--storage", f"sqlite:///{name}"), expect="pass", made=made))
    for name in ["s?x.db", "d#?/s.db", "s.db?nosuch=1", "{s}.db"]:  # a query SQLAlchemy drops; Optuna's template
        out.append(Case(cls="paths", name=f"storage {name!r} (query)", setup=write("d#?/.keep", ""),
                        argv=SMALL8 + ("--no-run-dir", "--storage", f"sqlite:///{name}"), names="storage"))
    # (the query cases are named "(query)" in the listing)
    out += [
        Case(cls="paths", name="resume a#b?c%/R", setup=copy_run("a#b?c%/R"), argv=("search", "--resume", "a#b?c%/R",
             "--plots", "none", "--quiet"), expect="pass"),
        Case(cls="paths", name="resume ü n/R trailing slash", setup=copy_run("ü n/R"),
             argv=("search", "--resume", "ü n/R/", "--plots", "none", "--quiet"), expect="pass"),
        Case(cls="paths", name="resume plan.json instead of the run", setup=copy_run(),
             argv=("search", "--resume", "RUN/plan.json"), names="resume"),
        Case(cls="paths", name="show a#b/R", setup=copy_run("a#b/R"), argv=("show", "a#b/R"), expect="pass"),
        Case(cls="paths", name="explain %41/R", setup=copy_run("%41/R"), argv=("explain", "%41/R"), expect="pass"),
        Case(cls="paths", name="export --out o#?%é/m.sh", setup=copy_run(),
             argv=("export", "RUN", "--format", "megatron", "--out", "o#?%é/m.sh"), expect="pass", made="o#?%é/m.sh"),
        Case(cls="paths", name="export --out existing dir 'd #'", setup=both(copy_run(), write("d #/x", "")),
             argv=("export", "RUN", "--format", "megatron", "--out", "d #"), names="out"),
        Case(cls="paths", name="curve --runs-dir c#?%", argv=("curve", "--model", "small", "--gpus", "1,2",
             "--runs-dir", "c#?%"), expect="pass", made="c#?%/*/curve.json"),
        Case(cls="paths", name="runs-dir is a file", setup=write("f#", "x"), argv=SMALL8 + ("--runs-dir", "f#"),
             names="runs"),
        Case(cls="paths", name="storage sqlite:// (memory)", argv=SMALL8 + ("--no-run-dir", "--storage", "sqlite://"),
             expect="clean"),
        Case(cls="paths", name="storage in a missing folder", argv=SMALL8 + ("--no-run-dir", "--storage",
             "sqlite:///nope#/s.db"), expect="clean"),
        Case(cls="paths", name="storage with ?mode=ro", argv=SMALL8 + ("--no-run-dir", "--storage",
             "sqlite:///s.db?mode=ro"), expect="clean"),
        Case(cls="paths", name="storage mysql without driver", argv=SMALL8 + ("--no-run-dir", "--storage",
             "mysql://u@localhost/db"), names="storage"),
        Case(cls="paths", name="storage a directory", setup=write("adir/x", ""),
             argv=SMALL8 + ("--no-run-dir", "--storage", "sqlite:///adir"), names="storage"),
        Case(cls="paths", name="storage sqlite:////abs with #", argv=SMALL8 + ("--no-run-dir", "--storage",
             "sqlite:///ABS"), expect="pass"),
        Case(cls="paths", name="validate --out under a file", setup=both(copy_run(), write("f", "x")),
             argv=("validate", "RUN", "--out", "f/v#.json"), names="out"),
        Case(cls="paths", name="profile --refit --out under a file",
             setup=both(write("p.json", json.dumps(PROFILE)), write("f", "x")),
             argv=("profile", "--refit", "p.json", "--out", "f/p.json"), names="out"),
    ]
    return out


def storage_cases() -> list[Case]:
    def study_of(run: str) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            shutil.copy(FIX[run] / "study.db", d / "shared.db")
        return setup

    def hardlink(d: Path) -> None:
        copy_run()(d)
        os.link(d / "RUN/study.db", d / "hl.db")

    s = ("--storage", "sqlite:///shared.db", "--no-run-dir")
    return [
        Case(cls="storage", name="two problems in turn", argv=("bash", "-c",
             f"{SMALL8_SH} {' '.join(s)} && {SMALL4_SH} {' '.join(s)}"), expect="pass", made="shared.db"),
        Case(cls="storage", name="same problem two seeds in turn", argv=("bash", "-c",
             f"{SMALL8_SH} {' '.join(s)} && {SMALL8_SH} {' '.join(s)} --seed 3"), expect="pass"),
        Case(cls="storage", name="two problems at once", argv=("bash", "-c",
             f"{SMALL8_SH} {' '.join(s)} & p1=$!; {SMALL4_SH} {' '.join(s)} & p2=$!; wait $p1 && wait $p2"), expect="pass"),
        Case(cls="storage", name="three same at once", argv=("bash", "-c",
             f"{SMALL8_SH} {' '.join(s)} & p1=$!; {SMALL8_SH} {' '.join(s)} & p2=$!; {SMALL8_SH} {' '.join(s)} & "
             "p3=$!; wait $p1 && wait $p2 && wait $p3"), expect="pass", timeout_s=120),
        Case(cls="storage", name="explicit --study for two problems", argv=("bash", "-c",
             f"rm -f shared.db; {SMALL8_SH} {' '.join(s)} --study one 2>/dev/null >/dev/null && "
             f"cp shared.db first.db && {SMALL4_SH} {' '.join(s)} --study one; rc=$?; cmp -s shared.db first.db && "
             "rm first.db shared.db && exit $rc"), names="study"),
        Case(cls="storage", name="storage a hard link to a run's study.db", setup=hardlink,
             argv=SMALL8 + ("--no-run-dir", "--storage", "sqlite:///hl.db"), names="storage"),
        Case(cls="storage", name="storage a copy of another problem's study.db", setup=study_of("run4"),
             argv=SMALL8 + s, expect="pass"),
        Case(cls="storage", name="storage a text file", setup=write("shared.db", "not a db\n" * 50), argv=SMALL8 + s,
             names="storage"),
        Case(cls="storage", name="storage empty file", setup=write("shared.db", b""), argv=SMALL8 + s, expect="pass"),
        Case(cls="storage", name="storage a plan.json", setup=copy_run(),
             argv=SMALL8 + ("--no-run-dir", "--storage", "sqlite:///RUN/plan.json"), names="storage"),
        Case(cls="storage", name="storage through ../ at run's study", setup=both(copy_run(), write("x/.k", "")),
             argv=SMALL8 + ("--no-run-dir", "--storage", "sqlite:///x/../RUN/./study.db"), names="storage"),
        Case(cls="storage", name="runs-dir then resume with storage flag", setup=copy_run(),
             argv=("search", "--resume", "RUN", "--study", "x"), names="study"),
        Case(cls="storage", name="--study without --storage on resume", setup=copy_run(),
             argv=("search", "--resume", "RUN", "--seed", "4"), names="seed"),
        Case(cls="storage", name="a run, then a shared storage, then the run resumed", argv=("bash", "-c",
             f"{SMALL8_SH} --runs-dir r 2>/dev/null && {SMALL8_SH} {' '.join(s)} 2>/dev/null && "
             f"{PY_SH} -m autotune search --resume r/* --plots none --quiet"), expect="pass"),
    ]


def disk_cases() -> list[Case]:
    def sh(size_kb: int, command: str) -> tuple:
        return ("bash", "-c", tmpfs_or_ulimit(size_kb) + command + "; rc=$?; find full -mindepth 1 ! -name pad "
                "! -path 'full/RUN*' > leftovers.txt; umount full 2>/dev/null; exit $rc")
    # a run directory kept with its finished slices and a resume command is the designed outcome
    return [
        Case(cls="disk", name="search runs-dir on 40k tmpfs", argv=sh(40, f"{SMALL8_SH} --runs-dir full/runs"),
             names="cannot write"),
        Case(cls="disk", name="search runs-dir on 200k tmpfs", argv=sh(200, f"{SMALL8_SH} --runs-dir full/runs"),
             names="cannot write"),
        Case(cls="disk", name="search storage on 60k tmpfs",
             argv=sh(60, f"{SMALL8_SH} --no-run-dir --storage sqlite:///full/s.db"), names="cannot write"),
        Case(cls="disk", name="export --out on 4k tmpfs filled", setup=copy_run(),
             argv=sh(8, f"head -c 8192 /dev/zero > full/pad 2>/dev/null; {PY_SH} -m autotune export RUN --format "
                         "megatron --out full/m.sh"), names="cannot write"),
        Case(cls="disk", name="curve runs-dir on 12k tmpfs", argv=sh(12, f"{PY_SH} -m autotune curve --model small "
             "--gpus 1,2 --runs-dir full/c"), names="cannot write"),
        Case(cls="disk", name="resume with disk full", setup=copy_run("RUNCOPY"),
             argv=sh(400, f"cp -r RUNCOPY full/RUN 2>/dev/null; head -c 10000000 /dev/zero > full/pad 2>/dev/null; "
                          f"{PY_SH} -m autotune search --resume full/RUN --plots none --quiet"), expect="clean"),
        Case(cls="disk", name="stdout to /dev/full", argv=EVAL, stdout_to="/dev/full", names="space"),
        Case(cls="disk", name="show --json to /dev/full", setup=copy_run(), argv=("show", "RUN", "--json"),
             stdout_to="/dev/full", names="space"),
        Case(cls="disk", name="ulimit -f 8 search", argv=("bash", "-c", f"ulimit -f 8; {SMALL8_SH} --runs-dir r"),
             names="cannot write"),
        Case(cls="disk", name="profile --refit --out on full tmpfs", setup=write("p.json", json.dumps(PROFILE)),
             argv=sh(4, f"head -c 4096 /dev/zero > full/pad 2>/dev/null; {PY_SH} -m autotune profile --refit p.json "
                        "--out full/q.json"), names="cannot write"),
    ]


def corrupt_cases() -> list[Case]:
    cmds = {
        "show": ("show", "RUN"), "show-json": ("show", "RUN", "--json"), "explain": ("explain", "RUN"),
        "export": ("export", "RUN", "--format", "megatron"), "validate": ("validate", "RUN", "--out", "v.json"),
        "evaluate": EVAL + ("--plan", "RUN/plan.json"), "resume": ("search", "--resume", "RUN", "--plots", "none"),
    }
    plan_edits = {
        "layers-reversed": (setk(("plan", "stages", 0, "layers"), [12, 0]), "layers"),
        "layers-short": (setk(("plan", "stages", 0, "layers"), [0, 6]), "layers"),
        "layers-beyond": (setk(("plan", "stages", 0, "layers"), [0, 13]), "layers"),
        "stages-empty": (setk(("plan", "stages"), []), "stages"),
        "stages-dict": (setk(("plan", "stages"), {"a": 1}), "stages"),
        "tp-zero": (setk(("plan", "stages", 0, "tp"), 0), "tp"),
        "tp-negative": (setk(("plan", "stages", 0, "tp"), -2), "tp"),
        "recompute-bogus": (setk(("plan", "stages", 0, "recompute"), "sometimes"), "recompute"),
        "zero-9": (setk(("plan", "stages", 0, "zero"), 9), "zero"),
        "share-nan": (raw(("plan", "stages", 0, "kv_cache_in_share"), "NaN"), "kv_cache_in_share"),
        "gpus-1e6": (setk(("plan", "gpus"), 10**6), "gpus"),
        "micro-batch-0": (setk(("plan", "micro_batch"), 0), "micro_batch"),
        "schedule-number": (setk(("plan", "schedule"), 1), "schedule"),
        "bucket-inf": (raw(("plan", "grad_bucket_bytes"), "Infinity"), "grad_bucket_bytes"),
        "workload-batch-0": (setk(("workload", "global_batch"), 0), "global_batch"),
        "workload-dtype": (setk(("workload", "dtype"), "bf17"), "dtype"),
        "workload-seq-float": (setk(("workload", "seq_len"), 512.5), "seq_len"),
        "model-hidden-huge": (setk(("model", "hidden_size"), 10**12), "hidden_size"),
        "model-heads-nan": (raw(("model", "num_heads"), "NaN"), "num_heads"),
        "model-unknown-key": (setk(("model", "bogus_key"), 1), "bogus_key"),
        "runtime-string": (setk(("runtime",), "nosuch"), "runtime"),
        "runtime-number": (setk(("runtime",), 5), "runtime"),
        "runtime-speed-inf": (raw(("runtime", "attention_speed"), "Infinity"), "attention_speed"),
        "runtime-zero-stages": (setk(("runtime", "zero_stages"), ["x"]), "zero_stages"),
        "cluster-unknown": (setk(("cluster",), "dgx-z900"), "cluster"),
        "profile-number": (setk(("profile",), 5), "profile"),
        "schema-other": (setk(("schema",), "autotune.plan/99"), "schema"),
        "schema-missing": (delk(("schema",)), "schema"),
        "bom": (lambda t: "\ufeff" + t, ""),
        "truncated": (lambda t: t[: len(t) // 2], "JSON"),
        "nul-bytes": (lambda t: t.replace("{", "{\x00", 1), "plan"),
        "big-50mb": (lambda t: t[:-2] + " " * 50_000_000 + t[-2:], "plan"),
        "utf16": (lambda t: t.encode("utf-16"), "UTF-8"),
    }
    out = []
    for i, (edit_name, (edit, names)) in enumerate(plan_edits.items()):
        for cmd_name in rotate(cmds, i, 3):
            argv = cmds[cmd_name]
            # a plan file without "schema" is one written before it was recorded; 50 MB of spaces is JSON
            expect = ("clean" if edit_name in ("bom", "model-unknown-key", "schema-missing", "big-50mb")
                      or cmd_name == "resume" or (edit_name == "cluster-unknown" and cmd_name in
                                                  ("show", "show-json", "export", "validate")) else "refuse")
            out.append(Case(cls="corrupt", name=f"plan.json {edit_name} -> {cmd_name}",
                            setup=run_file("plan.json", edit), argv=argv, names=names, expect=expect))
    for kind in ("zero", "loop", "urandom"):
        for cmd_name, argv in cmds.items():
            out.append(Case(cls="corrupt", name=f"plan.json {kind} -> {cmd_name}",
                            setup=both(copy_run(), special("RUN/plan.json", kind)), argv=argv, names="plan",
                            expect="clean" if cmd_name == "resume" else "refuse"))
    search_edits = {
        "truncated": (lambda t: t[: len(t) // 3], "search"),
        "runtime-number": (setk(("runtime",), 5), "runtime"),
        "stats-missing": (delk(("stats",)), "stats"),
        "step-negative": (setk(("estimate", "step_time_s"), -1.0), "step_time_s"),
        "baselines-dict": (setk(("baselines",), {"a": 1}), "baselines"),
        "problem-number": (setk(("problem",), 5), "problem"),
        "run-dir-number": (setk(("run_dir",), 5), "run_dir"),
        "history-inf": (raw(("slice_history",), "[[1, Infinity]]"), "slice_history"),
        "zero": (None, "search"),
        "dir": (None, "search"),
        "missing": (None, ""),
    }
    for edit_name, (edit, names) in search_edits.items():
        if edit_name in ("zero", "dir"):
            setup = both(copy_run(), special("RUN/search.json", "zero" if edit_name == "zero" else "dir"))
        elif edit_name == "missing":
            setup = both(copy_run(), lambda d: (d / "RUN/search.json").unlink())
        else:
            setup = run_file("search.json", edit)
        for cmd_name in ("show", "show-json", "explain", "resume"):
            out.append(Case(cls="corrupt", name=f"search.json {edit_name} -> {cmd_name}", setup=setup,
                            argv=cmds[cmd_name], names=names,  # explain re-prices plan.json alone; resume rebuilds search.json from the study
                            expect="clean" if edit_name == "missing" or cmd_name in ("resume", "explain") else "refuse"))
    for kind in ("fifo", "dir", "zero", "binary-nul", "missing"):
        if kind == "binary-nul":
            setup = run_file("report.md", lambda t: b"\x00\xff" * 1000)
        elif kind == "missing":
            setup = both(copy_run(), lambda d: (d / "RUN/report.md").unlink())
        else:
            setup = both(copy_run(), special("RUN/report.md", kind))
        for cmd_name in ("show", "show-json"):
            out.append(Case(cls="corrupt", name=f"report.md {kind} -> {cmd_name}", setup=setup, argv=cmds[cmd_name],
                            names="report", expect="clean"))
    for kind, setup in {
        "random": run_file("study.db", lambda t: os.urandom(8192)),
        "truncated": lambda d: (copy_run()(d), _truncate(d / "RUN/study.db", 4096)),
        "fifo": both(copy_run(), special("RUN/study.db", "fifo")),
        "dir": both(copy_run(), special("RUN/study.db", "dir")),
        "zero-link": both(copy_run(), special("RUN/study.db", "zero")),
        "other-problem": lambda d: (copy_run()(d), shutil.copy(FIX["run4"] / "study.db", d / "RUN/study.db")),
        "readonly": lambda d: (copy_run()(d), os.chmod(d / "RUN/study.db", 0o444), os.chmod(d / "RUN", 0o555)),
    }.items():
        expect = "clean" if kind in ("readonly",) else "refuse"
        out.append(Case(cls="corrupt", name=f"study.db {kind} -> resume", setup=setup, argv=cmds["resume"],
                        names="study" if kind != "other-problem" else "problem", expect=expect))
    hf_cases = {
        "kv-heads-5": (hf(num_key_value_heads=5), "kv"),
        "kv-heads-0": (hf(num_key_value_heads=0), "kv"),
        "intermediate-0": (hf(intermediate_size=0), "intermediate_size"),
        "vocab-negative": (hf(vocab_size=-1), "vocab_size"),
        "head-dim-float": (hf(head_dim=128.5), "head_dim"),
        "max-pos-string": (hf(max_position_embeddings="8k"), "max_position_embeddings"),
        "rms-eps-nan": (hf_raw("rms_norm_eps", "NaN"), "rms_norm_eps"),
        "sliding-negative": (json.dumps({**LLAMA, "model_type": "mistral", "sliding_window": -5}), "sliding_window"),
        "experts-0": (json.dumps({**LLAMA, "model_type": "mixtral", "num_local_experts": 0,
                                  "num_experts_per_tok": 2}), "experts"),
        "topk-above-experts": (json.dumps({**LLAMA, "model_type": "mixtral", "num_local_experts": 4,
                                           "num_experts_per_tok": 8}), "experts_per_tok"),
        "layer-types-short": (json.dumps({**LLAMA, "model_type": "qwen3", "head_dim": 128,
                                          "layer_types": ["full_attention"] * 3}), "layer_types"),
        "layer-types-bogus": (json.dumps({**LLAMA, "model_type": "qwen3", "head_dim": 128,
                                          "layer_types": ["banana"] * 32}), "layer_types"),
        "bom": ("\ufeff" + json.dumps(LLAMA), ""),
        "dup-keys": (json.dumps(LLAMA)[:-1] + ', "num_hidden_layers": "x"}', "num_hidden_layers"),
        "moe-intermediate-inf": (json.dumps({**DEEPSEEK, "moe_intermediate_size": "@@"}).replace('"@@"', "Infinity"),
                                 "moe_intermediate_size"),
        "n-routed-huge": (json.dumps({**DEEPSEEK, "n_routed_experts": 10**9}), "n_routed_experts"),
        "text-config-list": (json.dumps({"model_type": "gemma3", "text_config": [1]}), "text_config"),
        "hidden-bool": (hf(hidden_size=True), "hidden_size"),
        "heads-float-integral": (hf(num_attention_heads=32.0), "num_attention_heads"),
    }
    for i, (name, (text, names)) in enumerate(hf_cases.items()):
        for cmd in rotate({"evaluate": 0, "search": 0, "curve": 0}, i, 1):
            argv = {"evaluate": ("evaluate", "--model", "c.json", "--gpus", "8"),
                    "search": ("search", "--model", "c.json", "--gpus", "8", "--no-run-dir", "--quiet"),
                    "curve": ("curve", "--model", "c.json", "--gpus", "8", "--no-run-dir")}[cmd]
            out.append(Case(cls="corrupt", name=f"config.json {name} -> {cmd}", setup=write("c.json", text), argv=argv,
                            names=names, expect="clean" if name in ("bom",) else "refuse", timeout_s=90))
    for kind in ("zero", "loop", "urandom", "fifo"):
        out.append(Case(cls="corrupt", name=f"config.json {kind} -> curve", setup=special("c.json", kind),
                        argv=("curve", "--model", "c.json", "--gpus", "8", "--no-run-dir"), names="c.json"))
    space_cases = {
        "tp-zero": (space(r"^tp = \[.*\]", "tp = [0]"), "tp"),
        "recompute-bogus": (space(r"^recompute = \[.*\]", 'recompute = ["sometimes"]'), "recompute"),
        "sampler-unknown": (space(r'^sampler = "tpe"', 'sampler = "annealing"'), "sampler"),
        "n-trials-zero": (space(r"^n_trials = 24", "n_trials = 0"), "n_trials"),
        "grid-negative": (space(r"^grid_max = 96", "grid_max = -1"), "grid_max"),
        "micro-batch-huge": (space(r"^micro_batch = \[.*\]", "micro_batch = [1000000000]"), "micro_batch"),
        "syntax": ("tp = [1,\n[[[", "space"),
        "binary": (bytes(range(256)), "space"),
        "dup-table": (SPACE + "\n[stage]\ntp = [1]\n", "space"),
        "zero-strings-mixed": (space(r"^zero = \[.*\]", "zero = [0, 1.0]"), "zero"),
        "max-stages-negative": (space(r"^max_stages = 128", "max_stages = -3"), "max_stages"),
        "bool-for-list": (space(r"^zero = \[.*\]", "zero = true"), "zero"),
    }
    for i, (name, (text, names)) in enumerate(space_cases.items()):
        for cmd in rotate({"search": 0, "curve": 0}, i, 1):
            argv = (("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--quiet", "--space", "s.toml")
                    if cmd == "search" else ("curve", "--model", "small", "--gpus", "8", "--no-run-dir",
                                             "--space", "s.toml"))
            out.append(Case(cls="corrupt", name=f"space {name} -> {cmd}", setup=write("s.toml", text), argv=argv,
                            names=names))
    for kind in ("fifo", "dir", "zero"):
        out.append(Case(cls="corrupt", name=f"space {kind}", setup=special("s.toml", kind),
                        argv=("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--space", "s.toml"),
                        names="s.toml"))
    cluster_cases = {
        "gpus-per-node-0": (cluster(gpus_per_node=0), "gpus_per_node"),
        "device-unknown": (cluster(device="h999"), "device"),
        "bandwidth-0": (cluster_in(("intra_node", "bandwidth"), 0), "bandwidth"),
        "max-nodes-float": (cluster(max_nodes=1.5), "max_nodes"),
        "typo-key": (cluster(bandwith=5), "bandwith"),
        "latency-nan": (cluster_in(("intra_node", "latency_s"), "@@").replace('"@@"', "NaN"), "latency_s"),
        "gpus-per-node-huge": (cluster(gpus_per_node=10**9), "gpus_per_node"),
        "inter-node-string": (cluster(inter_node="ib"), "inter_node"),
        "toml-syntax": ("device = \n[", "cluster"),
        "binary": (bytes(range(256)), "cluster"),
    }
    for i, (name, (text, names)) in enumerate(cluster_cases.items()):
        ext = "toml" if name == "toml-syntax" else "json"
        for cmd in rotate({"evaluate": 0, "search": 0, "curve": 0, "validate": 0}, i, 2):
            argv = {"evaluate": EVAL + ("--cluster", f"c.{ext}"),
                    "search": ("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--quiet",
                               "--cluster", f"c.{ext}"),
                    "curve": ("curve", "--model", "small", "--gpus", "8", "--no-run-dir", "--cluster", f"c.{ext}"),
                    "validate": ("validate", "RUN", "--cluster", f"c.{ext}", "--out", "v.json")}[cmd]
            setup = both(write(f"c.{ext}", text), copy_run()) if cmd == "validate" else write(f"c.{ext}", text)
            out.append(Case(cls="corrupt", name=f"cluster {name} -> {cmd}", setup=setup, argv=argv, names=names))
    for kind in ("fifo", "dir", "zero"):
        out.append(Case(cls="corrupt", name=f"cluster {kind}", setup=special("c.json", kind),
                        argv=EVAL + ("--cluster", "c.json"), names="c.json"))
    profile_cases = {
        "gemm-nan": (profile_in(("device", "regressions", "gemm"), None, "NaN"), "gemm"),
        "peak-negative": (profile_in(("device", "peak_flops", "bf16"), -1.0), "peak_flops"),
        "list": ("[1, 2]", "profile"),
        "truncated": (json.dumps(PROFILE)[:500], "profile"),
        "memory-huge": (profile_in(("device", "memory_bytes"), 1e30), "memory"),
        "measurements-string": (json.dumps({**PROFILE, "measurements": "x"}), "measurements"),
        "host-number": (json.dumps({**PROFILE, "host": 5}), "host"),
    }
    for i, (name, (text, names)) in enumerate(profile_cases.items()):
        for cmd in rotate({"evaluate": 0, "show": 0, "refit": 0, "curve": 0, "search": 0}, i, 2):
            argv = {"evaluate": EVAL + ("--profile", "p.json"), "show": ("profile", "--show", "p.json"),
                    "refit": ("profile", "--refit", "p.json", "--out", "q.json"),
                    "curve": ("curve", "--model", "small", "--gpus", "8", "--no-run-dir", "--profile", "p.json"),
                    "search": ("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--quiet",
                               "--profile", "p.json")}[cmd]
            out.append(Case(cls="corrupt", name=f"profile {name} -> {cmd}", setup=write("p.json", text), argv=argv,
                            names=names, expect="clean" if name in ("memory-huge",) else "refuse"))
    for kind in ("fifo", "dir", "zero"):
        for cmd in (("profile", "--show", "p.json"), ("profile", "--refit", "p.json", "--out", "q.json")):
            out.append(Case(cls="corrupt", name=f"profile {kind} -> {cmd[1]}", setup=special("p.json", kind),
                            argv=cmd, names="p.json"))
    runtime_names = ["", " megatron", "MEGATRON", "../data/runtimes/megatron", "megatron.toml", "vllm", "x" * 300]
    for i, name in enumerate(runtime_names):
        for cmd in rotate({"evaluate": 0, "search": 0, "export": 0, "curve": 0}, i, 2):
            argv = {"evaluate": EVAL + ("--runtime", name),
                    "search": ("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--quiet",
                               "--runtime", name),
                    "export": ("export", "RUN", "--format", "megatron", "--runtime", name),
                    "curve": ("curve", "--model", "small", "--gpus", "8", "--no-run-dir", "--runtime", name)}[cmd]
            if "\x00" in name:
                continue  # argv cannot carry a NUL
            out.append(Case(cls="corrupt", name=f"runtime {name[:20]!r} -> {cmd}", setup=copy_run(), argv=argv,
                            names="runtime"))
    csv_head = (ROOT / "tests/data/published_runs.csv").read_text().splitlines()
    csv_cases = {
        "binary": bytes(range(256)) * 4,
        "empty": b"",
        "header-only": (csv_head[0] + "\n").encode(),
        "missing-column": ("\n".join(",".join(line.split(",")[:-3]) for line in csv_head[:3]) + "\n").encode(),
        "nan-iter": ("\n".join([csv_head[0], csv_head[1].replace(",3.528,", ",nan,")]) + "\n").encode(),
        "inf-layers": ("\n".join([csv_head[0], csv_head[1].replace("GPT-1.7B,24,", "GPT-1.7B,inf,")]) + "\n").encode(),
        "negative-gpus": ("\n".join([csv_head[0], csv_head[1].replace(",16,32,A100", ",16,-32,A100")]) + "\n").encode(),
        "huge-layers": ("\n".join([csv_head[0], csv_head[1].replace("GPT-1.7B,24,", "GPT-1.7B,100000000,")])
                        + "\n").encode(),
        "quote-unclosed": ("\n".join([csv_head[0], '"' + csv_head[1]]) + "\n").encode(),
    }
    for name, content in csv_cases.items():
        out.append(Case(cls="corrupt", name=f"check-published csv {name}", setup=write("r.csv", content),
                        argv=("check-published", "r.csv"), names="r.csv"))
    for kind in ("fifo", "dir", "zero"):
        out.append(Case(cls="corrupt", name=f"check-published csv {kind}", setup=special("r.csv", kind),
                        argv=("check-published", "r.csv"), names="r.csv"))
    return out


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def size_cases() -> list[Case]:
    deep = json.dumps({**LLAMA, "num_hidden_layers": 10_000})
    thousand = json.dumps({**LLAMA, "num_hidden_layers": 1000, "hidden_size": 1024, "intermediate_size": 4096,
                           "num_attention_heads": 8, "num_key_value_heads": 8})
    return [
        Case(cls="sizes", name="evaluate 10,000 layers pp 100", setup=write("c.json", deep),
             argv=("evaluate", "--model", "c.json", "--gpus", "800", "--pp", "100", "--tp", "8"), expect="clean",
             timeout_s=60),
        Case(cls="sizes", name="search 1,000 layers on 1024 GPUs", setup=write("c.json", thousand),
             argv=("search", "--model", "c.json", "--gpus", "1024", "--no-run-dir", "--quiet"), expect="clean",
             timeout_s=120),
        Case(cls="sizes", name="curve many counts", argv=("curve", "--model", "small", "--gpus",
             ",".join(str(8 * i) for i in range(1, 201)), "--no-run-dir"), expect="clean", timeout_s=120),
        Case(cls="sizes", name="evaluate global batch 1e8 micro-batch 1", argv=EVAL + ("--global-batch", "100000000",
             "--micro-batch", "1", "--pp", "2"), expect="clean", timeout_s=60),
        Case(cls="sizes", name="serve output-len 1e6", argv=EVAL + ("--workload", "serve", "--prompt-len", "64",
             "--output-len", "1000000"), expect="clean", timeout_s=60),
        Case(cls="sizes", name="serve concurrency 1e6", argv=EVAL + ("--workload", "serve", "--prompt-len", "64",
             "--output-len", "16", "--concurrency", "1000000"), expect="clean", timeout_s=60),
        Case(cls="sizes", name="search serve output-len 1e5", argv=("search", "--model", "small", "--gpus", "8",
             "--workload", "serve", "--prompt-len", "64", "--output-len", "100000", "--no-run-dir", "--quiet"),
             expect="clean", timeout_s=120),
        Case(cls="sizes", name="evaluate seq-len 1e7 small", argv=EVAL + ("--seq-len", "10000000"), expect="clean"),
        Case(cls="sizes", name="search gpus 65536", argv=("search", "--model", "small", "--gpus", "65536",
             "--no-run-dir", "--quiet"), expect="clean", timeout_s=120),
        Case(cls="sizes", name="evaluate vpp 12 pp 12", argv=EVAL + ("--pp", "4", "--vpp", "3", "--global-batch",
             "4096", "--micro-batch", "1"), expect="clean"),
        Case(cls="sizes", name="exhaustive llama3-70b 1024", argv=("search", "--model", "llama3-70b", "--gpus",
             "1024", "--method", "exhaustive", "--no-run-dir", "--quiet"), expect="clean", timeout_s=120),
        Case(cls="sizes", name="cxl-lora --set huge", argv=("search", "--space", "cxl-lora", "--set", "d=1000000000"),
             expect="clean"),
        Case(cls="sizes", name="validate max-world 1e6", setup=copy_run(), argv=("validate", "RUN", "--max-world",
             "1000000", "--out", "v.json"), names="max-world", timeout_s=60),
    ]


def number_cases() -> list[Case]:
    flags = [
        (SERVE + ("--target-ttft-ms", "nan"), "--target-ttft-ms"),
        (SERVE + ("--target-ttft-ms", "-0"), "?"),  # 0: no target (--help)
        (SERVE + ("--target-tpot-ms", "0"), "?"),
        (SERVE + ("--target-tpot-ms", "1e-300"), "target_tpot"),  # a target no plan meets
        (EVAL + ("--workload", "serve", "--prompt-len", "0", "--output-len", "4"), "--prompt-len"),
        (EVAL + ("--workload", "serve", "--prompt-len", "nan", "--output-len", "4"), "--prompt-len"),
        (EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "4", "--concurrency", "0"),
         "--concurrency"),
        (EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "4", "--concurrency", "2.5"),
         "--concurrency"),
        (EVAL + ("--seq-len", "inf"), "--seq-len"),
        (EVAL + ("--seq-len", "0x10"), "--seq-len"),
        (EVAL + ("--global-batch", "6.4e1"), "--global-batch"),
        (EVAL + ("--dp-shard", "0", "--runtime", "torchtitan", "--zero", "3"), "?"),  # 0: shard over all of dp
        (EVAL + ("--vpp", "0"), "--vpp"),
        (EVAL + ("--cp", "-1"), "--cp"),
        (EVAL + ("--dp", "nan"), "--dp"),
        (EVAL + ("--micro-batch", "0"), "--micro-batch"),
        (EVAL + ("--cache-tile-tokens", "1e30"), "--cache-tile-tokens"),
        (EVAL + ("--activation-offload-layers", "1e9"), "activation"),
        (EVAL + ("--gpus", "0"), "--gpus"),
        (MOE + ("--ep", "0"), "--ep"),
        (MOE + ("--ep", "8", "--etp", "-1"), "--etp"),
        (("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--seed", "nan"), "--seed"),
        (("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--seed", "1.5"), "--seed"),
        (("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--seed", "-1"), "--seed"),
        (("curve", "--model", "small", "--gpus", "1,2", "--no-run-dir", "--threshold", "nan"), "--threshold"),
        (("curve", "--model", "small", "--gpus", "1,2", "--no-run-dir", "--threshold", "-0.5"), "--threshold"),
        (("curve", "--model", "small", "--gpus", "1,inf"), "--gpus"),
        (("curve", "--model", "small", "--gpus", "1,,2", "--no-run-dir"), "?"),  # counts are sorted and deduplicated
        (("curve", "--model", "small", "--gpus", "2,1,2", "--no-run-dir"), "?"),
        (("search", "--space", "cxl-lora", "--set", "d=nan"), "d"),
        (("search", "--space", "cxl-lora", "--set", "d=-5"), "d"),
        (("search", "--space", "cxl-lora", "--set", "nosuch=1"), "nosuch"),
        (("validate", "RUN", "--steps", "0", "--out", "v.json"), "--steps"),
        (("validate", "RUN", "--steps", "1e9", "--out", "v.json"), "--steps"),
        (("validate", "RUN", "--timeout", "nan", "--out", "v.json"), "--timeout"),
        (("validate", "RUN", "--timeout", "-1", "--out", "v.json"), "--timeout"),
        (("validate", "RUN", "--max-world", "0", "--out", "v.json"), "--max-world"),
        (("profile", "--threads", "0", "--out", "p.json"), "--threads"),
        (("profile", "--world-sizes", "0,2", "--out", "p.json"), "--world-sizes"),
        (("profile", "--world-sizes", "nan", "--out", "p.json"), "--world-sizes"),
        (("profile", "--workers-per-node", "-1", "--out", "p.json"), "--workers-per-node"),
        (("benchmark", "--model", "small", "--seq-len", "nan"), "--seq-len"),
        (("benchmark", "--model", "small", "--steps", "inf"), "--steps"),
        (("graph", "--model", "small", "--batch", "nan"), "--batch"),
        (("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--param-gather-gbps", "-0",
          "--runtime", "torchtitan"), "?"),  # 0: the network's rate
        (EVAL + ("--workload", "decode", "--prompt-len", "64", "--output-len", "0"), "output"),
    ]
    return [Case(cls="numbers", name=" ".join(argv[3:] if argv[0] in ("evaluate",) else argv)[:70], argv=argv,
                 names=names.lstrip("?"), expect="clean" if names.startswith("?") else "refuse",
                 setup=copy_run() if "RUN" in argv else None) for argv, names in flags]


def noop_cases() -> list[Case]:
    s = ("search", "--model", "small", "--gpus", "8", "--no-run-dir", "--quiet")
    flags = [
        (EVAL + ("--ep", "2"), "ep"),
        (EVAL + ("--etp", "2"), "etp"),
        (EVAL + ("--ep-dispatcher", "deepep"), "ep"),
        (EVAL + ("--overlap-ep-comm",), "ep"),
        (EVAL + ("--cp-comm", "all_gather"), "cp"),
        (EVAL + ("--vpp", "2"), "vpp"),
        (EVAL + ("--schedule", "interleaved"), "schedule"),
        (EVAL + ("--recompute-layers", "2"), "recompute"),
        (EVAL + ("--recompute", "full", "--recompute-modules", "core_attn"), "recompute"),
        (EVAL + ("--cache-tile-tokens", "128"), "cache"),
        (EVAL + ("--kv-cache-in", "host"), "kv"),
        (EVAL + ("--output-len", "16"), "output"),
        (EVAL + ("--target-tpot-ms", "30"), "target"),
        (EVAL + ("--fp8-params",), "fp8"),
        (EVAL + ("--fp8-all-gather",), "fp8"),
        (EVAL + ("--no-reshard-after-forward", "--runtime", "torchtitan", "--zero", "1"), "zero"),  # 0 or 3 there
        (EVAL + ("--sequence-parallel",), "sequence"),
        (EVAL + ("--tp", "1", "--async-tp"), "async"),
        (EVAL + ("--tp", "1", "--overlap-tp-comm"), "overlap"),
        (EVAL + ("--recompute", "none", "--recompute-early-stop"), "recompute"),
        (EVAL + ("--activation-offload-layers", "2", "--activations-in", "host"), ""),  # two separate offloads
        (EVAL + ("--param-gather-gbps", "50"), "param"),
        (EVAL + ("--cache-group-layers", "2"), "cache"),
        (EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "16", "--recompute", "full"), "recompute"),
        (EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "16", "--zero", "1"), "zero"),
        (EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "16", "--global-batch", "64"), "batch"),
        (EVAL + ("--workload", "serve", "--prompt-len", "64", "--output-len", "16", "--grad-reduce", "bf16"), "grad"),
        (s + ("--expert-load-imbalance", "2"), "expert"),
        (s + ("--fp8-recipe", "te_current"), "fp8"),
        (s + ("--study", "x", "--runs-dir", "r"), "runs_dir"),
        (s + ("--plots", "sync"), "plots"),
        (s + ("--plots", "none"), ""),  # consistent with no run directory
        (s + ("--method", "exhaustive", "--seed", "3"), "seed"),
        (("search", "--space", "cxl-lora", "--model", "small"), "model"),
        (("search", "--space", "cxl-lora", "--gpus", "8"), "gpus"),
        (("search", "--space", "cxl-lora", "--runtime", "torchtitan"), "runtime"),
        (("search", "--space", "cxl-lora", "--runs-dir", "r"), "runs_dir"),
        (EVAL + ("--tp", "2", "--sequence-parallel"), ""),
        (EVAL + ("--pp", "2", "--vpp", "2", "--micro-batch", "1"), ""),
        (("export", "RUN", "--format", "megatron", "--runtime", "torchtitan"), "runtime"),
        (("show", "RUN", "--json"), ""),
        (EVAL + ("--plan", "RUN", "--global-batch", "128"), "global"),
        (EVAL + ("--plan", "RUN", "--runtime", "torchtitan"), "runtime"),
        (("evaluate", "--model", "large", "--gpus", "8", "--plan", "RUN"), "stages"),
        (("curve", "--model", "small", "--gpus", "1,2", "--no-run-dir", "--expert-load-imbalance", "2"), "expert"),
        (("validate", "RUN", "--cluster", "dgx-h100", "--device", "cpu", "--out", "v.json", "--max-world", "1",
          "--scale", "tp=1"), ""),
    ]
    out = []
    for argv, names in flags:
        expect = "clean" if not names or argv[:2] in (("show", "RUN"),) or argv[0] == "validate" else "refuse"
        out.append(Case(cls="noop", name=" ".join(argv[3:] if argv[0] == "evaluate" else argv)[:70], argv=argv,
                        names=names, expect=expect, setup=copy_run() if "RUN" in argv else None, timeout_s=90))
    return out


def library_cases() -> list[Case]:
    calls = {
        "search gpus 8.0": ('autotune.search("small", 8.0)', "gpus"),
        "search gpus numpy int": ('import numpy as np; r = autotune.search("small", np.int64(8))', "?gpus"),
        "evaluate model Path": ('autotune.evaluate(Path("c.json"), 8)', "model"),
        "evaluate cluster 5": ('autotune.evaluate("small", 8, cluster=5)', "cluster"),
        "evaluate runtime 5": ('autotune.evaluate("small", 8, runtime=5)', "runtime"),
        "evaluate runtime unknown": ('autotune.evaluate("small", 8, runtime="jax")', "runtime"),
        "evaluate dtype 5": ('autotune.evaluate("small", 8, dtype=5)', "dtype"),
        "evaluate recompute True": ('autotune.evaluate("small", 8, recompute=True)', "recompute"),
        "evaluate sequence_parallel 1": ('autotune.evaluate("small", 8, tp=2, sequence_parallel=1)',
                                         "sequence_parallel"),
        "evaluate tp 2.0": ('autotune.evaluate("small", 8, tp=2.0)', "tp"),
        "evaluate tp nan": ('autotune.evaluate("small", 8, tp=math.nan)', "tp"),
        "evaluate seq_len bool": ('autotune.evaluate("small", 8, seq_len=True)', "seq_len"),
        "evaluate global_batch numpy": ('import numpy as np; autotune.evaluate("small", 8, global_batch=np.int64(64))',
                                        "?global_batch"),
        "evaluate profile 5": ('autotune.evaluate("small", 8, profile=5)', "profile"),
        "evaluate gpus negative": ('autotune.evaluate("small", -8)', "gpus"),
        "evaluate model dict bad": ('autotune.evaluate({"model_type": "llama"}, 8)', "model"),
        "evaluate plan and cluster other gpus": (
            'from autotune.plan.builders import uniform_plan\n'
            'p = uniform_plan(num_layers=12, gpus=16, tp=2, global_batch=64)\n'
            'autotune.evaluate("small", 8, plan=p)', "gpus"),
        "evaluate plan wrong layers": (
            'from autotune.plan.builders import uniform_plan\n'
            'p = uniform_plan(num_layers=24, gpus=8, tp=2, global_batch=64)\n'
            'autotune.evaluate("small", 8, plan=p)', "stages"),
        "search space 5": ('autotune.search("small", 8, space=5)', "space"),
        "search space unknown": ('autotune.search("small", 8, space="nosuch")', "space"),
        "search runs_dir 5": ('autotune.search("small", 8, runs_dir=5)', "runs_dir"),
        "search storage 5": ('autotune.search("small", 8, storage=5)', "storage"),
        "search seed -1": ('autotune.search("small", 8, seed=-1)', "seed"),
        "search seed 1.5": ('autotune.search("small", 8, seed=1.5)', "seed"),
        # a space narrows or replaces the runtime's; stages the runtime cannot run are dropped (README)
        "search runtime and another space": ('autotune.search("small", 8, runtime="megatron", space="deepspeed")',
                                             "?space"),
        "search workload inference and global_batch": (
            'from autotune.spec.workload import InferenceWorkload\n'
            'w = InferenceWorkload(batch=4, prompt_len=64, output_len=4, kind="serve")\n'
            'autotune.search("small", 8, workload=w, global_batch=8)', "global_batch"),
        "resume 5": ("autotune.resume(5)", "run_dir"),
        "resume missing": ('autotune.resume("nowhere")', "run"),
        "scaling_curve gpus empty": ('autotune.scaling_curve("small", gpus=[])', "gpus"),
        "scaling_curve gpus strings": ('autotune.scaling_curve("small", gpus=["1", "2"])', "gpus"),
        "scaling_curve gpus nan": ('autotune.scaling_curve("small", gpus=[1, math.nan])', "gpus"),
        "load_preset 5": ("autotune.load_preset(5)", "model"),
        "load_cluster 5": ("autotune.load_cluster(5)", "cluster"),
        "load_runtime None": ("autotune.load_runtime(None)", "runtime"),
        "Runtime speed inf": ('autotune.Runtime(name="x", attention_speed=math.inf)', "attention_speed"),
        "Runtime zero_stages str": ('autotune.Runtime(name="x", zero_stages="01")', "zero_stages"),
        "TrainingWorkload dtype 5": ("autotune.TrainingWorkload(global_batch=8, seq_len=64, dtype=5)", "dtype"),
        "TrainingWorkload batch bool": ("autotune.TrainingWorkload(global_batch=True, seq_len=64)", "global_batch"),
        "StagePlan tp str": ('autotune.StagePlan(layers=(0, 12), has_embedding=True, has_head=True, num_gpus=8, '
                             'tp="2", cp=1, dp=4)', "tp"),
        "StagePlan layers reversed": ('autotune.StagePlan(layers=(12, 0), has_embedding=True, has_head=True, '
                                      'num_gpus=8, tp=2, cp=1, dp=4)', "layers"),
        "Plan stages list of dict": ('autotune.Plan(stages=[{"layers": [0, 12]}], gpus=8, micro_batch=1, '
                                     'num_microbatches=1)',
                                     "stages"),
    }
    return [Case(cls="library", name=name, code=body, names=names.lstrip("?"),
                 expect="pass" if not names else "clean" if names.startswith("?") else "refuse",
                 setup=write("c.json", json.dumps({"model_type": "llama"}))) for name, (body, names) in calls.items()]


PY_SH = f"{sys.executable!s}"
SMALL8_SH = f"{PY_SH} -m autotune search --model small --gpus 8 --plots none --quiet"
SMALL4_SH = f"{PY_SH} -m autotune search --model small --gpus 4 --plots none --quiet"
FULL = False  # --full: every corrupt file to every command that reads it (else a rotation covering each)


def rotate(items: dict, i: int, k: int) -> list:
    """``k`` of ``items``' keys for the ``i``-th case, in turn, so every key is used across cases."""
    keys = list(items)
    return keys if FULL else [keys[(i * k + j) % len(keys)] for j in range(min(k, len(keys)))]


ALL = (path_cases, storage_cases, disk_cases, corrupt_cases, size_cases, number_cases, noop_cases, library_cases)


# ---- running and classifying ---------------------------------------------------------------

def listing(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            out[str(path.relative_to(root))] = (st.st_size if not path.is_dir() else 0, st.st_mtime_ns)
    return out


def run_case(case: Case, where: Path) -> tuple[str, str]:
    """(verdict, detail): verdict is 'ok' or a failure kind."""
    where.mkdir(parents=True)
    if case.setup:
        case.setup(where)
    before = listing(where)
    if case.code:
        body = "\n".join("    " + line.strip() for line in case.code.splitlines())
        cmd = [sys.executable, "-c", LIBRARY.format(body=body)]
    elif case.argv[0] == "bash":
        cmd = list(case.argv)
    else:
        argv = [a.replace("ABS", str(where / "a#b c.db")) for a in case.argv]
        cmd = [sys.executable, "-m", "autotune", *argv]
        if case.prefix:
            cmd = ["bash", "-c", case.prefix + " ".join(map(_quote, cmd))]
    stdout = open(case.stdout_to, "w") if case.stdout_to else subprocess.PIPE
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=where, env=ENV, stdin=subprocess.DEVNULL, stdout=stdout,
                              stderr=subprocess.PIPE, timeout=case.timeout_s, start_new_session=True)
    except subprocess.TimeoutExpired:
        _unmount(where)
        return "hang", f"no answer in {case.timeout_s:.0f} s"
    finally:
        if case.stdout_to:
            stdout.close()
    elapsed = time.monotonic() - start
    _unmount(where)
    out = (proc.stdout or b"").decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    after = listing(where)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    detail = f"rc={proc.returncode} {elapsed:.1f}s: {last[:300]}"
    if "Traceback" in err or "Exception ignored" in err:
        return "traceback", detail + "\n      " + "\n      ".join(err.strip().splitlines()[-4:])
    refused = proc.returncode in (1, 2)
    if case.expect == "pass" or (case.expect == "clean" and proc.returncode == 0):
        if proc.returncode != 0:
            return "refused-valid", detail
        if case.made and not list(where.glob(case.made)):
            return "not-made", detail + f" ({case.made} missing: {sorted(after)[:8]})"
        return "ok", detail
    if not refused:
        return "accepted", detail + f" stdout: {out.strip().splitlines()[-1][:200] if out.strip() else ''}"
    lines = [line for line in err.splitlines() if line.strip()]
    if proc.returncode == 1 and case.expect == "clean" and len(lines) <= 1:
        return "ok", detail  # a valid problem with no plan (evaluate prints the estimate that does not fit; validate
        # reports a plan this machine cannot run)
    if len(lines) != 1:
        return "not-one-line", detail + f" ({len(lines)} lines)"
    if case.expect == "refuse" and case.names and case.names.lstrip("-").lower() not in err.lower():
        return "unnamed", detail + f" (should name {case.names!r})"
    new = sorted(set(after) - set(before) - {"full", "leftovers.txt"})
    if (where / "leftovers.txt").exists():  # what a disk-full case left on its tmpfs, listed before unmounting
        new += (where / "leftovers.txt").read_text().splitlines()
    kept = re.search(r"kept in (\S+);", err)  # a run kept with its finished slices and a resume command
    new = [n for n in new if not (kept and (n.startswith(kept.group(1)) or kept.group(1).startswith(n)))]
    if case.argv[:1] == ("validate",) and proc.returncode == 1:
        new = [n for n in new if n != "v.json"]  # validate's report of plans that could not run here
    changed = sorted(k for k in before if k in after and after[k] != before[k] and not os.path.isdir(where / k))
    if new or changed:
        return "left-behind", detail + f" new={new[:5]} changed={changed[:5]}"
    if out.strip() and case.cls != "library":
        return "stdout", detail + f" stdout: {out.strip()[:120]}"
    if elapsed > 15 and case.argv[:1] != ("bash",):  # (a compound case runs whole searches first)
        return "slow", detail
    return "ok", detail


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _unmount(where: Path) -> None:
    full = where / "full"
    if full.is_dir() and os.path.ismount(full):
        subprocess.run(["umount", str(full)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="a regular expression over 'class: name'")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the case directories")
    parser.add_argument("--json", help="write every verdict here")
    parser.add_argument("--full", action="store_true", help="every corrupt file to every command that reads it")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    global FULL
    FULL = args.full
    cases = [case for make in ALL for case in make() if re.search(args.only, f"{case.cls}: {case.name}")]
    if args.list:
        for case in cases:
            print(f"{case.cls}: {case.name}")
        print(f"{len(cases)} cases")
        return 0
    base = Path(tempfile.mkdtemp(prefix="probe-inputs-"))
    make_fixtures(base / "fixtures")
    counts: Counter = Counter()
    fails: Counter = Counter()
    verdicts = []
    def one(i: int) -> tuple[str, str]:
        try:
            return run_case(cases[i], base / f"case-{i:04d}")
        except Exception as exc:  # a setup that failed is the harness's bug: say so, go on
            return "harness", repr(exc)[:300]

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = pool.map(one, range(len(cases)))
        for i, (case, (verdict, detail)) in enumerate(zip(cases, results)):
            _report(i, case, verdict, detail, counts, fails, verdicts, base, args.keep)
    print("\nclass        cases  failures")
    for cls in counts:
        print(f"{cls:12s} {counts[cls]:5d}  {fails[cls]:8d}")
    print(f"{'all':12s} {sum(counts.values()):5d}  {sum(fails.values()):8d}")
    if args.json:
        Path(args.json).write_text(json.dumps(verdicts, indent=1))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if fails else 0


def _report(i, case, verdict, detail, counts, fails, verdicts, base, keep) -> None:
    counts[case.cls] += 1
    verdicts.append({"class": case.cls, "name": case.name, "verdict": verdict, "detail": detail})
    if verdict != "ok":
        fails[case.cls] += 1
        print(f"FAIL {verdict:14s} {case.cls}: {case.name}\n      {detail}", flush=True)
    if not keep:
        _chmod_all(base / f"case-{i:04d}")
        shutil.rmtree(base / f"case-{i:04d}", ignore_errors=True)


def _chmod_all(root: Path) -> None:
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)


if __name__ == "__main__":
    sys.exit(main())
