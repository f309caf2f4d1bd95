"""``kairos batches``: the safe restart batches of a ring for a consistency level."""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner import inputs


def register(subparsers: Any) -> None:
    """Add the ``batches`` sub-command."""
    p = subparsers.add_parser(
        "batches",
        help="compute the fewest safe restart batches of a ring",
        description="Partition the ring's nodes into the fewest batches such that taking any "
        "one batch down keeps every replica set at the consistency level (plus the tolerated "
        "failures). The ring comes from a ring description (--ring) or the --hosts/--rf "
        "shortcut (one token per node, one DC and rack).",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--ring", metavar="RING.yml", help="ring description (YAML)")
    src.add_argument("--hosts", help="comma-separated hosts in ring order (simple ring)")
    p.add_argument("--rf", type=inputs.RF, default=3,
                   help="replication factor with --hosts (default 3)")
    p.add_argument("--cl", required=True, help="consistency level, e.g. QUORUM, LOCAL_QUORUM, ONE")
    p.add_argument(
        "--tolerate", type=inputs.TOLERATE, default=0, metavar="N",
        help="extra failures to survive (default 0)",
    )
    p.add_argument(
        "--aggressive",
        action="store_true",
        help="when no safe batch exists (RF = CL), reconfigure all nodes at once",
    )
    p.add_argument(
        "--keyspace", action="append", help="only this keyspace's replica sets (repeatable)"
    )
    p.add_argument(
        "--search-seconds", type=inputs.POSITIVE_DURATION, default=None, metavar="S",
        help="wall-clock budget of the local search on rings too large for the exact "
        "search (default 15; a move budget normally ends it first)",
    )
    p.add_argument("--seed", type=inputs.SEED, default=0, help="seed of the local search")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def ring_from_args(args: argparse.Namespace) -> Any:
    """The Ring named by ``--ring`` or built from ``--hosts``/``--rf``."""
    from planner.commands.validate_plan import parse_hosts
    from planner.topology.ring import Ring, load_ring

    if args.ring:
        return load_ring(args.ring)
    return Ring.simple(parse_hosts(args.hosts) or [], rf=args.rf)


def run(args: argparse.Namespace) -> int:
    """Print the batches; errors (unsafe CL, bad ring) propagate as KairosError."""
    from planner.topology.batching import SEARCH_SECONDS, safe_batches

    ring = ring_from_args(args)
    plan = safe_batches(
        ring,
        consistency_level=args.cl,
        tolerated_failures=args.tolerate,
        aggressive=args.aggressive,
        keyspaces=args.keyspace,
        search_seconds=args.search_seconds or SEARCH_SECONDS,
        seed=args.seed,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "consistency_level": args.cl.upper(),
                    "tolerated_failures": args.tolerate,
                    "batches": [list(b) for b in plan.batches],
                    "lower_bound": plan.lower_bound,
                    "exact": plan.exact,
                    "aggressive": plan.aggressive,
                    "reasons": list(plan.reasons),
                }
            )
        )
        return 0
    proof = "minimal" if plan.exact else f"{len(plan) - plan.lower_bound} above the bound"
    print(
        f"{len(plan)} batch(es), lower bound {plan.lower_bound} ({proof}), for "
        f"{args.cl.upper()} with {args.tolerate} tolerated failure(s)"
        f"{', AGGRESSIVE: availability not kept' if plan.aggressive else ''}:"
    )
    for i, (batch, reason) in enumerate(zip(plan.batches, plan.reasons, strict=True), 1):
        print(f"  {i}: {' '.join(batch)}")
        print(f"     {'why' if plan.aggressive else 'safe'}: {reason}")
    return 0
