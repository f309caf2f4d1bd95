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
    prep.add_argument("--out", help="also write the rollout (JSON) to this file")
    prep.set_defaults(func=run_prepare)

    adhoc = actions.add_parser(
        "adhoc", help="a one-step rollout without a plan: change settings safely, or restart"
    )
    adhoc.add_argument("--engine", required=True, choices=["cassandra", "redis"])
    adhoc.add_argument(
        "--hosts", required=True, help="comma-separated inventory hosts of the engine"
    )
    adhoc.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter of the engine's space (repeatable)",
    )
    adhoc.add_argument("--restart-all", action="store_true", help="restart every node")
    adhoc.add_argument("--ring", help="live ring description (JSON or YAML); needed to restart")
    adhoc.add_argument("--cl", default="QUORUM", help="consistency level the batches keep")
    adhoc.add_argument("--tolerate", type=int, default=0, help="extra failures to tolerate")
    adhoc.add_argument("--state", required=True, help="rollout state file")
    adhoc.add_argument("--out", help="also write the rollout (JSON) to this file")
    adhoc.set_defaults(func=run_adhoc)

    pre = actions.add_parser("preflight", help="re-check a rollout's batches on the live ring")
    pre.add_argument("--rollout", required=True, help="the rollout JSON (prepare/adhoc --out)")
    pre.add_argument("--ring", required=True, help="live ring description (JSON or YAML)")
    pre.add_argument("--down", default="", help="comma-separated hosts that are down now")
    pre.set_defaults(func=run_preflight)

    rec = actions.add_parser("record", help="record a step's outcome in the state file")
    rec.add_argument(
        "plan", metavar="PLAN", nargs="?", help="the plan (for its default state file)"
    )
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
    return _emit(step, args.out)


def _emit(step: Any, out: str | None) -> int:
    text = json.dumps(step.to_dict(), sort_keys=True, default=str)
    if out:
        from pathlib import Path

        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
    print(text)
    return 0


def run_adhoc(args: argparse.Namespace) -> int:
    import yaml

    from planner.errors import ValidationError
    from planner.rollout import adhoc
    from planner.topology import load_ring

    settings: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValidationError(f"--set: expected KEY=VALUE, got {item!r}")
        # YAML scalars, as in cassandra.yaml: 64 -> int, true -> bool, 512M -> str.
        settings[key.strip()] = yaml.safe_load(value.strip()) if value.strip() else ""
    step = adhoc(
        engine=args.engine,
        hosts=_hosts(args.hosts),
        settings=settings,
        ring=load_ring(args.ring) if args.ring else None,
        consistency_level=args.cl,
        tolerated_failures=args.tolerate,
        restart_all=args.restart_all,
        state_path=args.state,
    )
    return _emit(step, args.out)


def run_preflight(args: argparse.Namespace) -> int:
    from planner.rollout import load_rollout, preflight
    from planner.topology import load_ring

    step = load_rollout(args.rollout)
    preflight(step, load_ring(args.ring), down=_hosts(args.down), aggressive=step.aggressive)
    print(
        json.dumps({"safe": True, "step": step.step_id, "batches": [list(b) for b in step.batches]})
    )
    return 0


def run_record(args: argparse.Namespace) -> int:
    from planner.errors import ValidationError
    from planner.rollout import record_step, state_path_for

    try:
        nodes = json.loads(args.nodes)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--nodes: not JSON: {exc}") from None
    if not (args.state or args.plan):
        raise ValidationError("give the plan or --state")
    path = args.state or state_path_for(args.plan)
    state = record_step(path, step_id=args.step, status=args.status, nodes=nodes, error=args.error)
    print(json.dumps({"state": str(path), "step": args.step, **state["steps"][args.step]}))
    return 0
