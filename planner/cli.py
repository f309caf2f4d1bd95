"""The ``kairos`` console script: one sub-command per operation.

Each sub-command lives in ``planner/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (``args -> int``).
Command modules import their heavy dependencies (statsmodels, DEAP) inside ``func``
so that ``kairos --help`` stays fast, and a run of one command registers that command's
parser alone (:func:`build_parser`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from planner import __version__
from planner.errors import KairosError

# Order is the order shown in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "forecast",
    "tune",
    "plan",
    "explain",
    "simulate",
    "validate_plan",
    "batches",
    "rollout",
    "load",
    "calibrate",
    "collect",
    "report",
    "autopilot",
    "metrics",
    "drift",
)


def command_module(command: str) -> str | None:
    """The module of sub-command ``command`` (``validate-plan`` -> ``validate_plan``), or None."""
    name = command.replace("-", "_")
    return name if name in COMMAND_MODULES else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every sub-command, or of ``command``'s alone when it names one: a
    command's run then imports its own module's dependencies only, not the planner's
    (about a second a process on a quiet machine, three on a busy one)."""
    parser = argparse.ArgumentParser(
        prog="kairos",
        description=(
            "Reconfigure Cassandra and Redis clusters when the workload ahead makes it pay."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kairos {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = command_module(command) if command else None
    for name in (only,) if only else COMMAND_MODULES:
        importlib.import_module(f"planner.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        build_parser().print_help()  # every command, as for ``kairos`` alone
        return 2
    try:
        return int(args.func(args))
    except KairosError as exc:
        print(f"kairos {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
