"""The ``kairos`` console script: one sub-command per operation.

Each sub-command lives in ``planner/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (``args -> int``).
Command modules import their heavy dependencies (statsmodels, DEAP) inside ``func``
so that ``kairos --help`` stays fast.
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kairos",
        description=(
            "Reconfigure Cassandra and Redis clusters when the workload ahead makes it pay."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kairos {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"planner.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except KairosError as exc:
        print(f"kairos {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
