"""``kairos validate-plan PLAN``: check a plan file before anything touches a node.

The Ansible executor runs it first; a non-zero exit carries the failing field and why.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``validate-plan`` sub-command."""
    p = subparsers.add_parser(
        "validate-plan",
        help="check a plan file against the plan-file contract",
        description="Validate a plan file (docs/plan-file.md). Exit 0 when valid; otherwise "
        "print the failing field path and the reason and exit non-zero.",
    )
    p.add_argument("plan", metavar="PLAN", help="the plan file (YAML)")
    p.add_argument(
        "--hosts",
        help="comma-separated inventory hosts of the engine: every batch host must be one of "
        "them and each must appear in exactly one batch of a restarting step",
    )
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    p.set_defaults(func=run)


def parse_hosts(value: str | None) -> list[str] | None:
    """Split a ``--hosts`` value (``h1,h2,...``) into names; None when not given."""
    if value is None:
        return None
    return [h.strip() for h in value.split(",") if h.strip()]


def run(args: argparse.Namespace) -> int:
    """Validate ``args.plan``; return 0 when valid, 1 (with --json) when not."""
    from planner.errors import KairosError
    from planner.plan import load_plan

    hosts = parse_hosts(args.hosts)
    try:
        plan = load_plan(args.plan, known_hosts=hosts)
    except KairosError as exc:
        if not args.json:
            raise
        print(json.dumps({"valid": False, "plan": args.plan, "error": str(exc)}))
        return 1
    summary: dict[str, Any] = {
        "valid": True,
        "plan": args.plan,
        "engine": plan.engine,
        "cluster": plan.cluster,
        "steps": len(plan.steps),
        "restart_steps": sum(1 for s in plan.steps if s.restart),
        "hosts": sorted({h for s in plan.steps for b in s.batches for h in b}),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{args.plan}: valid {plan.engine} plan for {plan.cluster!r}: "
            f"{summary['steps']} step(s), {summary['restart_steps']} with restarts"
        )
    return 0
