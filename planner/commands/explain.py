"""``kairos explain PLAN``: validate a plan and print a readable summary.

Given a ring (the options of ``kairos validate-plan``), each step's batches are checked on it
at the plan's consistency level and tolerated failures; an unsafe batch is shown under its
step and the command then exits 2 naming it.
"""

from __future__ import annotations

import argparse
from typing import Any

from planner.commands.validate_plan import add_ring_arguments
from planner.planning.explain import explain_text

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``explain`` sub-command."""
    p = subparsers.add_parser(
        "explain",
        help="validate a plan file and summarise it",
        description="Validate a plan (as validate-plan does) and print what it will do: "
        "each step's time, parameter changes, live vs restart, batches and expected gain; with "
        "a ring (--ring, --hosts with --rf, or --inventory with --rf), each step's batch "
        "safety. Exits 2 when a batch is unsafe on that ring.",
    )
    p.add_argument("plan", metavar="PLAN")
    add_ring_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the summary; a plan that fails validation or has an unsafe batch raises (exit 2)."""
    from planner.commands.validate_plan import ring_from_args
    from planner.plan import load_plan
    from planner.topology.batch_safety import batch_safety, unsafe_message
    from planner.topology.ring import UnsafeBatchError

    choice = ring_from_args(args, engine=load_plan(args.plan).engine)
    plan = load_plan(args.plan, known_hosts=choice.known_hosts)
    safety = batch_safety(plan, choice.ring) if choice.ring is not None else None
    print(explain_text(plan, safety=safety, ring_source=choice.source), flush=True)
    unsafe = [v for v in safety or [] if v.problem]
    if unsafe:
        raise UnsafeBatchError(unsafe_message(args.plan, str(choice.source), unsafe))
    return 0
