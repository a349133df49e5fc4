import sys

from autotune.cli import dataclass_code, signals

try:  # install inside the try: a signal may land as soon as its handler is set, still in install()
    signals.install()  # before the (slower) imports of the commands: a signal at any moment is handled
    dataclass_code.install()  # before the commands' modules make their dataclasses
    from autotune.cli.main import keep_compiled, main
except KeyboardInterrupt:
    sys.stderr.write("autotune: interrupted\n")
    # finish: after our handler's signal, exit 130 without the interpreter's teardown (it can end by SIGINT, -2)
    raise SystemExit(signals.finish(signals.EXIT_INTERRUPTED)) from None

signals.leave(signals.finish(keep_compiled(main())))  # after a signal: exit 130 at once; else without the interpreter's teardown
