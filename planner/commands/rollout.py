"""``kairos rollout prepare|preflight|record``: the executor's questions, answered in Python.

The apply playbooks call these on the control host; each prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``rollout`` sub-command and its actions."""
    p = subparsers.add_parser(
        "rollout",
        help="what the executor carries out: due step, pre-flight check, outcome record",
        description="Used by playbooks/apply_plan.yml; each action prints one JSON object.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    prep = actions.add_parser("prepare", help="validate the plan and pick the step to carry out")
    prep.add_argument("plan", metavar="PLAN")
    prep.add_argument(
        "--hosts", required=True, help="comma-separated inventory hosts of the engine"
    )
    prep.add_argument("--state", help="rollout state file (default: <PLAN>.state.json)")
    prep.add_argument("--step", help="carry out this step id rather than the due one")
    prep.add_argument("--now", help="ISO 8601 time to decide what is due (default: now)")
    prep.add_argument("--retry-failed", action="store_true", help="retry a step recorded as failed")
    prep.set_defaults(func=run_prepare)

    pre = actions.add_parser("preflight", help="re-check the step's batches on the live ring")
    pre.add_argument("plan", metavar="PLAN")
    pre.add_argument("--hosts", required=True, help="comma-separated inventory hosts of the engine")
    pre.add_argument("--step", required=True, help="the step id")
    pre.add_argument("--ring", required=True, help="live ring description (JSON or YAML)")
    pre.add_argument("--down", default="", help="comma-separated hosts that are down now")
    pre.set_defaults(func=run_preflight)

    rec = actions.add_parser("record", help="record a step's outcome in the state file")
    rec.add_argument("plan", metavar="PLAN")
    rec.add_argument("--state", help="rollout state file (default: <PLAN>.state.json)")
    rec.add_argument("--step", required=True)
    rec.add_argument("--status", required=True, choices=["applied", "failed"])
    rec.add_argument("--nodes", default="{}", help="JSON: host -> per-node timings")
    rec.add_argument("--error", help="why the step failed")
    rec.set_defaults(func=run_record)


def _hosts(value: str) -> list[str]:
    return [h.strip() for h in value.split(",") if h.strip()]


def run_prepare(args: argparse.Namespace) -> int:
    from planner.errors import ValidationError
    from planner.rollout import prepare

    now = None
    if args.now:
        try:
            now = datetime.fromisoformat(args.now)
        except ValueError:
            raise ValidationError(f"--now: not an ISO 8601 time: {args.now!r}") from None
        if now.tzinfo is None:
            raise ValidationError("--now: give a UTC offset, e.g. 2026-11-21T12:00:00+00:00")
    step = prepare(
        args.plan,
        hosts=_hosts(args.hosts),
        state_path=args.state,
        step_id=args.step,
        now=now,
        retry_failed=args.retry_failed,
    )
    print(json.dumps(step.to_dict(), sort_keys=True, default=str))
    return 0


def run_preflight(args: argparse.Namespace) -> int:
    from planner.rollout import preflight, prepare
    from planner.topology import load_ring

    step = prepare(args.plan, hosts=_hosts(args.hosts), step_id=args.step, retry_failed=True)
    from planner.plan import load_plan

    aggressive = load_plan(args.plan).availability.aggressive
    preflight(step, load_ring(args.ring), down=_hosts(args.down), aggressive=aggressive)
    print(json.dumps({"safe": True, "step": args.step, "batches": [list(b) for b in step.batches]}))
    return 0


def run_record(args: argparse.Namespace) -> int:
    from planner.errors import ValidationError
    from planner.rollout import record_step, state_path_for

    try:
        nodes = json.loads(args.nodes)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--nodes: not JSON: {exc}") from None
    path = args.state or state_path_for(args.plan)
    state = record_step(path, step_id=args.step, status=args.status, nodes=nodes, error=args.error)
    print(json.dumps({"state": str(path), "step": args.step, **state["steps"][args.step]}))
    return 0
