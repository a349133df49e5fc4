"""``autotune search``: the fastest plan that fits, with baselines, in a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

from autotune.cli.common import add_model_args, add_workload_args, parser_defaults
from autotune.cli.evaluate_cmd import add_inference_args, add_moe_args, add_runtime_args
from autotune.cli.export_cmd import FORMATS

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "search", help="find the fastest parallel plan that fits (inter-op DP + intra-op Optuna)",
        description="Search pipeline stages (DP over layers and submeshes) and each stage's TP/CP/DP, ZeRO, "
                    "recomputation, micro-batch and virtual stages (Optuna); print the plan beside baselines.")
    add_model_args(parser, gpus_required=False, model_required=False)
    add_workload_args(parser)
    add_inference_args(parser)
    add_moe_args(parser)
    add_runtime_args(parser)
    parser.add_argument("--space", default=None, help="search space name (search_spaces/*.toml) or a .toml path; "
                                                      "default: the runtime's (every plan it can run)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a parameter of a standalone space (e.g. --space cxl-lora --set d=1024)")
    parser.add_argument("--seed", type=int, default=0, help="random seed: results are deterministic for a seed")
    parser.add_argument("--method", default="optuna", choices=("optuna", "exhaustive"),
                        help="optuna (default) or the exhaustive reference solver over the same space")
    parser.add_argument("--runs-dir", default="runs", help="where run directories go (default: runs/)")
    parser.add_argument("--no-run-dir", action="store_true", help="write nothing: no run directory, no study")
    parser.add_argument("--resume", metavar="RUN", default=None, help="continue an interrupted search from its run directory")
    parser.add_argument("--storage", default=None, help="keep the study in this database (postgresql+psycopg://...) shared with `autotune worker`")
    parser.add_argument("--study", default=None, help="study name in --storage (default: derived from the problem)")
    parser.add_argument("--export", default=None, choices=FORMATS, metavar="FORMAT",
                        help=f"also write the plan as a {'/'.join(FORMATS)} config into the run directory; without "
                             "--runtime the search plans for that framework (an export that fails exits 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--plots", default="background", choices=("background", "sync", "none"),
                        help="draw the run's plots in a detached process after returning (default), before "
                             "returning (sync), or not at all")
    parser.set_defaults(func=run)
    _DEFAULTS.update(parser_defaults(parser))


def _progress(args: argparse.Namespace):
    if args.quiet or args.json or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(total=None, desc="slices", unit="slice", delay=1.0, file=sys.stderr, leave=False)

    def update(outcome, done: int, total: int) -> None:
        bar.total = total
        bar.update(1)
        if done == total:
            bar.close()
    return update


# Options that --resume must not be given: the problem and where it is kept come from RUN.
_KEPT_WITH_RESUME = {"resume", "quiet", "json", "plots", "export", "func", "command"}
_DEFAULTS: dict[str, object] = {}


def _check_resume(args: argparse.Namespace) -> None:
    from autotune.errors import AutotuneError

    for dest, default in _DEFAULTS.items():
        if dest not in _KEPT_WITH_RESUME and getattr(args, dest, default) != default:
            flag = "--" + dest.replace("_", "-")
            why = ("--resume writes RUN's results into RUN" if dest == "no_run_dir" else
                   "--resume continues the problem and study recorded in RUN")
            raise AutotuneError(dest, f"{flag} cannot be combined with --resume: {why}; drop {flag}")


def run(args: argparse.Namespace) -> int:
    from autotune.cli.scenario_search import STANDALONE_RUNNERS
    from autotune.search.space import load_space

    from autotune.cli.search_serving import is_engine_search, run_engine_search

    if is_engine_search(args):  # a serving engine's plan is its launch settings
        return run_engine_search(args)
    _check_request(args)
    scenario = None if args.resume or args.space is None else STANDALONE_RUNNERS.get(load_space(args.space).kind)
    _check_outputs(args, scenario)
    if scenario is not None:
        return scenario(args)
    from autotune.search import api as search_api

    progress = _progress(args)
    searched = {}  # a new search's model and workload, as it recorded them (else read back from the run)
    result = (search_api.resume(args.resume, progress=progress, plots=args.plots) if args.resume
              else _new_search(args, progress, searched))
    exported = _export(args.export, result.run_dir) if args.export and result.run_dir else None
    code = _print(args, result, exported, searched)
    return 1 if exported and exported["path"] is None else code


def _check_request(args: argparse.Namespace) -> None:
    """--resume takes no problem flags; a new search's seed, workload and its flags are checked."""
    if args.resume:
        _check_resume(args)
        return
    from autotune.errors import require_choice
    from autotune.spec.arguments import seed_arg

    seed_arg("seed", args.seed)  # the standalone scenarios seed Optuna with it too
    from autotune.cli.evaluate_cmd import check_workload_flags

    require_choice("workload", args.workload, ("train", "prefill", "decode", "serve"))
    check_workload_flags(args, _DEFAULTS)


def _check_outputs(args: argparse.Namespace, scenario) -> None:
    """Flags the search would ignore are refused: --set outside a standalone space, --export and
    --runs-dir / --plots without a run directory, and what a standalone ``scenario`` does not read."""
    from autotune.cli.common import refuse_given
    from autotune.errors import AutotuneError, require

    require(scenario is not None or not args.set, "set",
            f"--set overrides a parameter of a standalone space (e.g. --space cxl-lora); space {args.space!r} "
            "takes none: copy its TOML file, edit it and pass --space FILE.toml")
    if args.export and not args.resume and (scenario or args.no_run_dir or args.storage):
        raise AutotuneError("export", "--export writes into the run directory, so not with --no-run-dir, --storage "
                                      "or a standalone scenario space; run autotune export on a plan file instead")
    if not args.resume and (args.no_run_dir or args.storage):
        made = f"with {'--no-run-dir' if args.no_run_dir else '--storage'} none is made"
        refuse_given(args, _DEFAULTS, ("runs_dir",), f"names where run directories go, and {made}")
        require(args.plots in (_DEFAULTS["plots"], "none"), "plots",
                f"--plots {args.plots} draws a run directory's plots, and {made}; drop it")
    if scenario is not None:
        from autotune.cli.scenario_search import STANDALONE_READS

        refuse_given(args, _DEFAULTS, tuple(d for d in _DEFAULTS if d not in STANDALONE_READS),
                     f"changes nothing for the standalone space {args.space!r} (it reads only "
                     f"{', '.join('--' + d for d in STANDALONE_READS)})")


def _export(fmt: str, run_dir: str) -> dict:
    """The run's plan as a ``fmt`` config in the run directory. A plan the framework cannot express
    is one line on stderr and exit 1 (the run is kept: the search itself succeeded)."""
    from autotune.errors import AutotuneError
    from autotune.outputs.export import write_export
    from autotune.plan.io import read_plan_file

    try:
        path, result = write_export(read_plan_file(run_dir), fmt, run_dir=run_dir)
    except AutotuneError as err:
        sys.stderr.write(f"autotune search: no {fmt} export: {err}\n")
        return {"format": fmt, "path": None, "refused": str(err), "notes": []}
    for note in () if result.notes_in_text else result.notes:  # else they are comments in the file
        sys.stderr.write(f"note: {note}\n")
    return {"format": fmt, "path": str(path), "refused": None, "notes": list(result.notes)}


def _new_search(args: argparse.Namespace, progress, searched: dict):
    """Everything is validated by the library before it makes the run directory (nothing
    half-written; a search stopped before any finished slice leaves nothing behind)."""
    from autotune.search import api as search_api
    from autotune.cli.evaluate_cmd import workload_from_args, refuse_idle_flags, runtime_from_args
    from autotune.errors import require
    from autotune.spec.presets import resolve_model

    require(args.model is not None, "model", "give --model (a preset or a config.json), or --resume RUN")
    require(args.gpus is not None, "gpus", "give --gpus N (or --resume RUN)")
    model = resolve_model(args.model)
    runtime = runtime_from_args(args, export_format=args.export)
    workload = workload_from_args(args, model, runtime)
    refuse_idle_flags(args, model, workload, runtime)
    require(args.study is None or args.storage is not None, "study", "names a study in --storage; give --storage too "
                                                                     "(a run directory keeps one study of its own)")
    runs_dir = None if (args.no_run_dir or args.storage) else args.runs_dir
    searched.update(model=model, workload=workload)
    return search_api.search(model, args.gpus, cluster=args.cluster, profile=args.profile, workload=workload, runtime=runtime,
                             space=args.space, seed=args.seed, method=args.method, runs_dir=runs_dir,
                             storage=args.storage, study_name=args.study, progress=progress, announce=_announce,
                             plots=args.plots)


def _announce(study_name: str, storage: str) -> None:
    from autotune.plan.sqlite_url import shell_word

    sys.stderr.write(f"study {study_name!r} queued; more machines can help with:\n"
                     f"  autotune worker --study {shell_word(study_name)} --storage {shell_word(storage)}\n")


def _plots_status(args: argparse.Namespace, result) -> dict | None:
    """Where the run's plots stand when the command returns: "written" (--plots sync), "pending"
    (drawn by a detached process: a script waits for the files), or None (no run directory, or
    --plots none)."""
    from autotune.outputs.search_run import PLOT_FILES

    if not result.run_dir or args.plots == "none" or result.extra.get("scenario"):
        return None
    run = Path(result.run_dir)
    if args.plots == "sync":
        return {"state": "written", "files": [str(run / f"{n}.png") for n in PLOT_FILES if (run / f"{n}.png").exists()]}
    return {"state": "pending", "files": [str(run / f"{n}.png") for n in PLOT_FILES], "log": str(run / "plots.log")}


def _print(args: argparse.Namespace, result, exported: dict | None = None, searched: dict | None = None) -> int:
    from autotune.cli.common import print_json
    from autotune.outputs.report import LAYERS_KEY, plan_table, summary_text, why_it_wins
    from autotune.spec.summary import architecture_dict, architecture_line

    model, workload = (searched["model"], searched["workload"]) if searched else _searched(args, result)
    plots = _plots_status(args, result)
    if args.json:
        described = {"model": architecture_dict(model)} if model is not None else {}
        if result.estimate.inference is not None and workload is not None:
            from autotune.outputs.serving_report import targets_dict

            described["targets"] = targets_dict(result.estimate.inference, workload)
        print_json({**result.to_dict(), **described, **({"export": exported} if exported else {}),
                    **({"plots": plots} if plots else {})})
        return 0
    if model is not None:
        print(f"{architecture_line(model)}; runtime {result.runtime.name if result.runtime else 'megatron'}")
    capacity = result.estimate.memory_capacity_bytes
    print("\n".join(plan_table(result.plan, result.estimate)))
    print(f"({LAYERS_KEY})")
    print("\n".join(summary_text(result.plan, result.estimate, capacity, workload)))
    print("baselines (same cost model):")
    print("\n".join(why_it_wins(result.estimate, result.baselines, workload)))
    s = result.stats
    print(f"searched {s.num_slices} slices ({s.num_slices_solved} solved, {s.num_slices_pruned} pruned by bound, "
          f"{s.num_slices_resumed} resumed), {s.num_intra_op_studies} intra-op studies, {s.num_trials} trials "
          f"in {s.wall_time_s:.2f} s")
    if result.run_dir:
        print(f"run directory: {result.run_dir}")
    if plots and plots["state"] == "pending":
        names = ", ".join(Path(f).name for f in plots["files"])
        print(f"plots: {names} are being drawn in the background (errors go to plots.log)")
    if exported and exported["path"]:
        print(f"{exported['format']} config: {exported['path']}")
    return 0


def _searched(args: argparse.Namespace, result) -> tuple[object, object]:
    """(model, workload) searched: the run's plan file records both; a search without a run
    directory (--no-run-dir, --storage) has them from its flags."""
    if result.run_dir:
        from autotune.plan.io import read_plan_file

        plan_file = read_plan_file(result.run_dir)
        return plan_file.model, plan_file.workload
    if args.model and not args.resume:
        from autotune.cli.evaluate_cmd import workload_from_args
        from autotune.spec.presets import resolve_model

        model = resolve_model(args.model)
        return model, workload_from_args(args, model, result.runtime)
    return None, None
