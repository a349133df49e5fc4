"""``autotune runtimes``: the runtimes a plan can be priced for, what each sets and where from."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("runtimes", help="list the runtimes (frameworks) plans are priced for, with sources",
                                   description="The runtime presets (autotune/data/runtimes/*.toml): what each one "
                                               "prices and the source of every setting it changes.")
    parser.add_argument("name", nargs="?", default=None, help="one runtime: every setting with its source")
    parser.add_argument("--json", action="store_true", help="print the presets as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from autotune.cli.common import print_json
    from autotune.spec.runtime import DEFAULT_RUNTIME, load_runtime, runtime_names

    names = [args.name] if args.name else runtime_names()
    runtimes = [load_runtime(name) for name in names]
    if args.json:
        print_json([{**r.to_dict(), "sources": dict(r.sources)} for r in runtimes])
        return 0
    for runtime in runtimes:
        default = " (default)" if runtime.name == DEFAULT_RUNTIME else ""
        print(f"{runtime.name}{default}: {runtime.description}")
        if runtime.serving is not None:  # a serving engine: what it runs and how it launches
            engine = runtime.serving
            print(f"    serving engine {engine.engine} {engine.version}; launches as {engine.export or 'no command'}; "
                  f"serves {', '.join(engine.weight_dtypes)} weights")
        else:
            print(f"    search space {runtime.space}; exports to {runtime.export_format or 'no config format'}; "
                  f"ZeRO {', '.join(map(str, runtime.zero_stages))}")
        if args.name and runtime.serving is not None:
            for setting, value in runtime.serving.to_dict().items():
                source = runtime.source_of(f"serving.{setting}")
                print(f"    serving.{setting} = {value!r}" + (f"  ({source})" if source else "  (default)"))
        elif args.name:
            for setting, value in runtime.settings().items():
                source = runtime.source_of(setting)
                print(f"    {setting} = {value!r}" + (f"  ({source})" if source else "  (neutral default)"))
    return 0
