"""``kairos metrics``: Kairos' own metrics for Prometheus, from the files it records.

Writes the text exposition format to stdout, or atomically to a node-exporter textfile
(``--textfile``). Reads plans, rollout state, the autopilot's state and log, the model's
track and the locks; contacts no server (docs/metrics.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from planner.engines import ENGINES


def register(subparsers: Any) -> None:
    """Add the ``metrics`` sub-command."""
    p = subparsers.add_parser(
        "metrics",
        help="write Kairos' metrics in the Prometheus text format (stdout or a textfile)",
        description="Export Kairos' own metrics — plan steps and their state, expected gain "
        "and P(gain > cost), the last rollout per node and phase, the autopilot's last run, "
        "the model's error, the locks' holders, the capacity advice — read from the files "
        "Kairos records (no server is contacted). See docs/metrics.md.",
    )
    p.add_argument("--state-dir", default=".kairos",
                   help="the autopilot's directory (kairos_autopilot_dir; default .kairos)")
    p.add_argument("--apply-state-dir", metavar="DIR",
                   help="the executors' directory (kairos_state_dir: the run and apply locks, "
                   "rollout files), when it differs from --state-dir")
    p.add_argument("--cluster", default="lab", help="cluster name (default lab)")
    p.add_argument("--engine", action="append", choices=ENGINES, dest="engines",
                   help="engine to export (repeatable; default both)")
    p.add_argument("--plan", action="append", default=[], dest="plans", metavar="PLAN",
                   help="a plan file to export besides the autopilot's current one "
                   "(repeatable; one per cluster and engine; it wins over the autopilot's)")
    p.add_argument("--textfile", metavar="PATH.prom",
                   help="write here atomically (node-exporter --collector.textfile.directory) "
                   "instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.report.exposition import render, write_textfile
    from planner.report.metrics import Sources, collect

    sources = Sources(
        state_dir=Path(args.state_dir), cluster=args.cluster,
        engines=tuple(dict.fromkeys(args.engines or ENGINES)),
        apply_state_dir=Path(args.apply_state_dir) if args.apply_state_dir else None,
        plans=tuple(Path(p) for p in args.plans),
    )
    collected = collect(sources)
    for warning in collected.warnings:
        print(f"kairos metrics: warning: {warning}", file=sys.stderr)
    text = render(collected.families.values())
    if args.textfile:
        path = write_textfile(text, args.textfile)
        print(f"wrote {path}: {sum(len(f.samples) for f in collected.families.values())} "
              f"series", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
