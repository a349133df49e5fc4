"""``autotune`` command line: a thin layer over the library.

Exit codes: 0 success; 1 the request ran but its answer is negative (a plan that does not
fit, a failed validation); 2 bad input (one line naming the field, no traceback); 130
interrupted (finished work is kept).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

__all__ = ["main", "build_parser", "COMMANDS", "entry", "keep_compiled"]

# Command name -> module under autotune.cli; each module has register(subparsers).
COMMANDS = {
    "search": "autotune.cli.search_cmd",
    "show": "autotune.cli.show_cmd",
    "worker": "autotune.cli.worker_cmd",
    "evaluate": "autotune.cli.evaluate_cmd",
    "check-published": "autotune.cli.check_cmd",
    "validate": "autotune.cli.validate_cmd",
    "scenario": "autotune.cli.scenario_cmd",
    "export": "autotune.cli.export_cmd",
    "profile": "autotune.cli.profile_cmd",
    "graph": "autotune.cli.graph_cmd",
    "benchmark": "autotune.cli.benchmark_cmd",
    "curve": "autotune.cli.curve_cmd",
    "runtimes": "autotune.cli.runtimes_cmd",
}

EXAMPLES = """examples:
  autotune search --model large --gpus 16
  autotune evaluate --model gpt3-175b --gpus 1024 --cluster dgx-a100-80gb --tp 8 --pp 16 --recompute full
  autotune evaluate --model path/to/config.json --gpus 8 --tp 8 --json

exit codes: 0 ok, 1 negative answer (e.g. the plan does not fit), 2 bad input, 130 interrupted
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; each option's help ends with its default, unless
    the help already names it or the option is a switch (off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text.lower() or default is None or default is argparse.SUPPRESS
                or default == [] or default == ()
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction,
                                       argparse._VersionAction))):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})"


def _given_text(text: str) -> str:
    """An empty value (``--runtime ''``, ``--storage ''``) is a mistake, never "the default": code
    that tests a value's truth would take it for an option not given."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must not be empty, got {text!r}")
    return text


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line and exit code 2, like every other bad input. Every parser
    shows option defaults in its help (:class:`_HelpFormatter`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["formatter_class"] = _HelpFormatter
        super().__init__(*args, **kwargs)
        self.register("type", None, _given_text)  # every option taking text, unless it names a type of its own

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _version() -> str:
    """The installed distribution's version, else the source tree's pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("autotune")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"] if pyproject.exists() else "unknown"


class _VersionAction(argparse.Action):
    """--version, looked up only when asked for (importlib.metadata costs every start ~30 ms)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help="show program's version number and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"autotune {_version()}\n", sys.stdout)
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` (a command name) that command's alone: a run names
    its command first, and the other commands' parsers (tens of milliseconds to build) would
    only be thrown away."""
    parser = _Parser(prog="autotune", description="Auto-parallel planner for transformer training and inference.",
                     epilog=EXAMPLES)
    parser.add_argument("--version", action=_VersionAction)
    parser.register("type", None, str)  # the command's own arguments pass through here; its parser checks them
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module_name).register(subparsers)
    return parser


def _named_command(argv: list[str] | None) -> str | None:
    """The command ``argv`` starts with, if it starts with one (else the whole parser is built:
    top-level help, --version, a mistyped command)."""
    args = sys.argv[1:] if argv is None else argv
    return args[0] if args and args[0] in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    from autotune.cli import signals

    command = "autotune"
    try:
        signals.install()  # inside the try: a signal may land as soon as its handler is set
        parser = build_parser(_named_command(argv))
        args = parser.parse_args(argv)
        command = f"autotune {args.command}" if getattr(args, "command", None) else command
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        code = int(args.func(args) or 0)
    except BaseException as err:  # noqa: BLE001  (every outcome becomes an exit code and at most one line)
        return _exit_code(command, err, signals)
    if signals.received():  # the interrupt was swallowed somewhere, but the user asked to stop
        sys.stderr.write(f"{command}: interrupted\n")
        return signals.EXIT_INTERRUPTED
    return code


def entry() -> NoReturn:
    """The console script: :func:`main` with the dataclasses' compiled methods cached between runs
    (autotune.cli.dataclass_code), then after a signal leave at once (signals.finish), else
    without the interpreter's teardown where nothing needs it (signals.leave)."""
    from autotune.cli import dataclass_code, signals

    dataclass_code.install()
    signals.leave(signals.finish(keep_compiled(main())))
    raise AssertionError("signals.leave returns only by raising SystemExit")


def keep_compiled(code: int) -> int:
    """``code``, once the dataclass methods this run compiled are written to the cache (not after
    a signal: the user asked to stop)."""
    from autotune.cli import dataclass_code, signals

    if not signals.received():
        try:
            dataclass_code.save()
        except KeyboardInterrupt:  # a signal while writing: signals.finish leaves with exit 130
            pass
    return code


def _one_line(err: BaseException) -> str:
    """The message on one line: what it quotes from a file (a CSV cell with a line break) may not
    break it."""
    return " ".join(str(err).split("\n"))


def _exit_code(command: str, err: BaseException, signals) -> int:
    from autotune.errors import AutotuneError, Interrupted, NoPlanError

    if isinstance(err, KeyboardInterrupt) or signals.received():
        note = err.note if isinstance(err, Interrupted) and err.note else ""
        sys.stderr.write(f"{command}: interrupted{'; ' + note if note else ''}\n")
        return signals.EXIT_INTERRUPTED
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else (0 if err.code is None else 2)
    if isinstance(err, NoPlanError):
        sys.stderr.write(f"{command}: no plan: {_one_line(err)}\n")
        return 1
    if isinstance(err, AutotuneError):
        sys.stderr.write(f"{command}: error: {_one_line(err)}\n")
        return 2
    if isinstance(err, BrokenPipeError):
        return 0
    from autotune.errors import write_failure

    failure = write_failure(err)  # a full disk or a read-only file system, wherever it was met
    if failure is not None:
        sys.stderr.write(f"{command}: error: {failure}\n")
        return 2
    raise err


if __name__ == "__main__":
    raise SystemExit(main())
