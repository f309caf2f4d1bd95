"""``kairos report``: a self-contained HTML page of the workload, forecast, plan and rollouts."""

from __future__ import annotations

import argparse
from typing import Any

from planner import inputs
from planner.engines import ENGINES


def register(subparsers: Any) -> None:
    """Add the ``report`` sub-command."""
    p = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report (workload, forecast, plan, rollouts)",
        description="Write one HTML page with inline SVG plots: the workload history (from the "
        "store or a trace) and the forecast with its interval band, the plan's steps on the "
        "time axis, the configuration each node ran, expected vs observed load, and each "
        "rollout's per-node timeline (from <plan>.state.json). Missing inputs leave their "
        "sections saying 'No data' and why.",
    )
    p.add_argument("--store", help="workload store (default: $KAIROS_STORE or .kairos/kairos.db)")
    p.add_argument("--trace", help="a trace file instead of the store (.csv or .json)")
    p.add_argument("--engine", choices=ENGINES, help="default: the plan's")
    p.add_argument("--cluster", help="cluster name in the store (default: the plan's)")
    p.add_argument("--since", help="history from: epoch seconds, ISO 8601 or an age (6h, 7d)")
    p.add_argument("--step", type=inputs.STEP_SECONDS, metavar="SECONDS",
                   help="history on a regular grid")
    p.add_argument("--plan", help="plan file")
    p.add_argument("--state", help="rollout state (default: <PLAN>.state.json)")
    p.add_argument("--forecast", help="forecast JSON (kairos forecast --out)")
    p.add_argument("--title", help="page title")
    p.add_argument("--model-track", metavar="JSONL",
                   help="the autopilot's judgements of the model "
                   "(<state dir>/models/<cluster>-<engine>-track.jsonl)")
    p.add_argument("--out", required=True, metavar="HTML", help="the page to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from planner.report.page import build_inputs, write_report
    from planner.workload.store import default_path, parse_since

    store = args.store
    if store is None and args.trace is None and default_path().exists():
        store = str(default_path())
    inputs = build_inputs(
        store=store, engine=args.engine, cluster=args.cluster, trace=args.trace,
        since=parse_since(args.since), step_seconds=args.step, plan=args.plan,
        forecast=args.forecast, state=args.state, title=args.title,
        model_track=args.model_track,
    )
    path = write_report(inputs, args.out)
    missing = "; ".join(f"{k}: {v}" for k, v in inputs.notes.items())
    print(f"wrote {path}" + (f" (missing — {missing})" if missing else ""))
    return 0
