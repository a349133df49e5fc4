import sys

from autotune.cli import signals

try:  # install inside the try: a signal may land as soon as its handler is set, still in install()
    signals.install()  # before the (slower) imports of the commands: a signal at any moment is handled
    from autotune.cli.main import main
except KeyboardInterrupt:
    sys.stderr.write("autotune: interrupted\n")
    raise SystemExit(signals.EXIT_INTERRUPTED) from None

signals.leave(signals.finish(main()))  # after a signal: exit 130 at once; else without the interpreter's teardown
