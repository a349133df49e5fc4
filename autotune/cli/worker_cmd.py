"""``autotune worker``: join a shared search kept in a database (PostgreSQL, or SQLite)."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("worker", help="solve queued slices of a shared search study",
                                   description="Work on the slices a `autotune search --storage URL` queued, until none is left.")
    parser.add_argument("--study", required=True, help="study name (printed by autotune search --storage)")
    parser.add_argument("--storage", required=True, help="database URL, e.g. postgresql+psycopg://user@host/db")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from autotune.cli.common import print_json
    from autotune.search.api import work

    solved = work(args.study, args.storage)
    if args.json:
        print_json({"study": args.study, "slices_solved": solved})
    else:
        print(f"solved {solved} slice(s) of study {args.study!r}; none is left in the queue")
    return 0
