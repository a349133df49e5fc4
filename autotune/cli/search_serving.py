"""``autotune search --workload serve --runtime vllm|sglang|tensorrt-llm``: the engine's best deployment
and its launch command (autotune/search/serving_engines.py, autotune/outputs/export/serving.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["is_engine_search", "run_engine_search"]

_REFUSED = {"resume": "--resume", "storage": "--storage", "space": "--space", "set": "--set", "export": "--export"}


def is_engine_search(args: argparse.Namespace) -> bool:
    """Whether the search is for a serving engine (its --runtime is one)."""
    from autotune.spec.runtime import load_runtime, runtime_names

    name = args.runtime
    return bool(name) and name in runtime_names() and load_runtime(name).serving is not None


def run_engine_search(args: argparse.Namespace) -> int:
    from autotune.cli.evaluate_cmd import workload_from_args, runtime_from_args
    from autotune.errors import AutotuneError, require
    from autotune.spec.presets import resolve_model
    from autotune.spec.resolve import resolve_cluster

    for dest, flag in _REFUSED.items():
        require(not getattr(args, dest), dest, f"{flag} is for the stage search; a serving engine's plan "
                "is its launch settings (the engine search takes --model, --gpus, --cluster and the workload)")
    require(args.workload == "serve", "workload", f"--runtime {args.runtime} is a serving engine: give --workload serve")
    require(args.model is not None and args.gpus is not None, "model", "give --model and --gpus")
    model, runtime = resolve_model(args.model), runtime_from_args(args)
    workload = workload_from_args(args, model, runtime)
    cluster = resolve_cluster(args.cluster, args.profile)
    from autotune.search.serving_engines import best_engine_plan, engine_plans

    plans = engine_plans(model, args.gpus, cluster, runtime, workload)
    best = best_engine_plan(plans)
    if best is None:
        raise AutotuneError("gpus", f"no deployment of {model.name} on {args.gpus} {cluster.device.name} leaves "
                                    f"{runtime.name} room for a KV cache")
    from autotune.outputs.export.serving import launch_command

    launch = launch_command(best.deployment, best.run.limits)
    record = {"runtime": runtime.to_dict(), "model": model.name, "gpus": args.gpus, "cluster": cluster.name,
              "workload": {"batch": workload.batch, "prompt_len": workload.prompt_len, "output_len": workload.output_len,
                           "dtype": workload.dtype, "target_tpot_s": workload.target_tpot_s,
                           "target_ttft_s": workload.target_ttft_s},
              "plan": best.to_dict(), "launch": launch.to_dict(),
              "candidates": [p.to_dict() for p in sorted(plans, key=lambda p: -p.output_tokens_per_s)]}
    run_dir = _write(args, model.name, record, launch.text)
    if args.json:
        from autotune.cli.common import print_json

        print_json({**record, "run_dir": run_dir})
    else:
        _print(record, best, run_dir)
    return 0 if best.meets_targets else 1


def _write(args: argparse.Namespace, model_name: str, record: dict, command: str) -> str | None:
    if args.no_run_dir:
        return None
    from autotune.outputs.run_dir import create_run_dir

    run = create_run_dir(Path(args.runs_dir), model_name, args.gpus)
    (run / "serving-plan.json").write_text(json.dumps(record, indent=2) + "\n")
    (run / "launch.sh").write_text(f"#!/bin/sh\n# {record['launch']['engine']} {record['launch']['version']}\n{command}\n")
    return str(run)


def _print(record: dict, best, run_dir: str | None) -> None:
    plan, launch = record["plan"], record["launch"]
    print(f"{record['model']} on {record['gpus']} GPUs ({record['cluster']}); runtime {record['runtime']['name']}")
    print(f"plan: {plan['replicas']} replica(s) of tp {plan['tp']}" + (f", ep {plan['ep']}" if plan["ep"] > 1 else "")
          + (", DP attention" if plan["attention_dp"] else "") + f"; {plan['weight_dtype']} weights; "
          f"{plan['max_num_seqs']} requests and {plan['max_num_batched_tokens']} tokens a step at most; "
          f"KV cache {plan['kv_cache_tokens_per_replica']:,} tokens a replica")
    print(f"predicted: {plan['output_tokens_per_s']:,.0f} output tokens/s, TTFT {plan['ttft_s'] * 1e3:.1f} ms, "
          f"TPOT {plan['tpot_s'] * 1e3:.1f} ms (mean)" + ("" if best.meets_targets else "; misses the targets"))
    print("launch:")
    print(f"  {launch['command']}")
    for note in launch["notes"]:
        print(f"note: {note}")
    others = record["candidates"][1:4]
    if others:
        print("next best: " + "; ".join(f"tp {p['tp']} x {p['replicas']}" + (f" ep {p['ep']}" if p['ep'] > 1 else "")
                                         + f" {p['output_tokens_per_s']:,.0f} tok/s" for p in others))
    if run_dir:
        print(f"run directory: {run_dir} (serving-plan.json, launch.sh)")
