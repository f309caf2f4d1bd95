"""``kairos validate-plan PLAN``: check a plan file before anything touches a node.

The Ansible executor runs it first; a non-zero exit carries the failing field and why.

Given a ring (``--ring FILE``, ``--hosts H1,H2,... --rf N`` or ``--inventory DIR --rf N``),
every batch of every step of a Cassandra plan is also checked statically for safety at the
plan's consistency level and tolerated failures (:func:`planner.topology.ring.check_batch`, the
check the executor's live pre-flight runs): an unsafe batch is refused here, naming the
step, the batch, the nodes it takes down and the replica set it leaves short.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from planner.engines import get_engine

# The inventory reader and the batch check live in their own layers; their names are
# re-exported here for the CLI's callers.
from planner.topology.batch_safety import NO_RING, BatchVerdict, batch_safety, unsafe_message
from planner.topology.inventory import inventory_nodes, inventory_ring

__all__ = ["RingChoice", "add_ring_arguments", "parse_hosts", "register", "ring_from_args", "run"]


def register(subparsers: Any) -> None:
    """Add the ``validate-plan`` sub-command."""
    p = subparsers.add_parser(
        "validate-plan",
        help="check a plan file against the plan-file contract (and its batches against a ring)",
        description="Validate a plan file (docs/plan-file.md). With a ring (--ring, --hosts with "
        "--rf, or --inventory with --rf) also check that every batch of every step is safe at "
        "the plan's consistency level and tolerated failures. Exit 0 when valid; otherwise "
        "print the failing field path (or the step, batch and replica set) and exit 2 (1 with "
        "--json).",
    )
    p.add_argument("plan", metavar="PLAN", help="the plan file (YAML)")
    add_ring_arguments(p)
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    p.set_defaults(func=run)


def add_ring_arguments(p: argparse.ArgumentParser) -> None:
    """The host and ring options shared by ``validate-plan`` and ``explain``."""
    p.add_argument(
        "--hosts",
        help="comma-separated inventory hosts of the engine: every batch host must be one of "
        "them and each must appear in exactly one batch of a restarting step; with --rf, also "
        "the ring (ring order, one DC, one token per node) the batches are checked on",
    )
    p.add_argument(
        "--rf", type=int,
        help="replication factor (per datacenter) of the ring built from --hosts or --inventory",
    )
    p.add_argument(
        "--ring",
        help="ring description (YAML or JSON, e.g. the live ring cassandra_cluster_facts "
        "writes) to check every batch on",
    )
    p.add_argument(
        "--inventory", metavar="DIR",
        help="Ansible inventory (directory or YAML file): the cassandra group's hosts with "
        "their cassandra_dc / cassandra_rack (one token per node); with --rf, the ring the "
        "batches are checked on",
    )


def parse_hosts(value: str | None) -> list[str] | None:
    """Split a ``--hosts`` value (``h1,h2,...``) into names; None when not given."""
    if value is None:
        return None
    return [h.strip() for h in value.split(",") if h.strip()]


# ------------------------------------------------------------------ the ring
@dataclass(frozen=True)
class RingChoice:
    """The ring the batches are checked on (None: not checked) and the known hosts."""

    ring: Any  # planner.topology.ring.Ring | None
    source: str | None
    known_hosts: list[str] | None


def ring_from_args(args: argparse.Namespace, *, engine: str) -> RingChoice:
    """The ring and inventory hosts the ring options describe.

    Raises
    ------
    ValidationError
        Contradictory options (``--rf`` with ``--ring``, ``--rf`` alone, a ring for a
        Redis plan) or an unreadable ring or inventory.
    """
    from planner.errors import ValidationError
    from planner.topology.ring import Ring, load_ring

    hosts = parse_hosts(args.hosts)
    ring_file = getattr(args, "ring", None)
    inventory = getattr(args, "inventory", None)
    rf = getattr(args, "rf", None)
    if rf is not None and rf < 1:
        raise ValidationError(f"--rf: must be at least 1, got {rf}")
    if ring_file and rf is not None:
        raise ValidationError("--rf: the ring file gives the replication; drop --rf or --ring")
    if rf is not None and hosts is None and not inventory:
        raise ValidationError("--rf: give the hosts it replicates over (--hosts or --inventory)")
    if not get_engine(engine).ring and (ring_file or rf is not None or inventory):
        raise ValidationError(
            f"--ring/--rf/--inventory: batch safety is checked for Cassandra plans, "
            f"this is a {engine} plan"
        )
    inv_nodes = inventory_nodes(inventory) if inventory else None
    known = hosts if hosts is not None else (
        [n["host"] for n in inv_nodes] if inv_nodes is not None else None
    )
    if ring_file:
        ring = load_ring(ring_file)
        return RingChoice(ring, f"the ring {ring_file}",
                          known if known is not None else list(ring.hosts))
    if inv_nodes is not None and rf is not None:
        ring = inventory_ring(inv_nodes, rf=rf)
        dcs = sorted({n.dc for n in ring.nodes})
        return RingChoice(
            ring, f"the ring of the inventory {inventory} (RF {rf} in {', '.join(dcs)}, "
            "one token per node)", known,
        )
    if hosts is not None and rf is not None:
        if not hosts:
            raise ValidationError("--hosts: expected at least one host")
        return RingChoice(
            Ring.simple(hosts, rf=rf),
            f"the ring {','.join(hosts)} (RF {rf}, one token per node)", known,
        )
    return RingChoice(None, None, known)


# ------------------------------------------------------------------ command
def run(args: argparse.Namespace) -> int:
    """Validate ``args.plan``; return 0 when valid; raise (exit 2) or, with --json, return 1."""
    from planner.errors import KairosError
    from planner.plan import load_plan
    from planner.topology.ring import UnsafeBatchError

    verdicts: list[BatchVerdict] = []
    try:
        engine = load_plan(args.plan).engine
        choice = ring_from_args(args, engine=engine)
        plan = load_plan(args.plan, known_hosts=choice.known_hosts)
        if choice.ring is not None:
            verdicts = batch_safety(plan, choice.ring)
            unsafe = [v for v in verdicts if v.problem]
            if unsafe:
                raise UnsafeBatchError(unsafe_message(args.plan, str(choice.source), unsafe))
    except KairosError as exc:
        if not args.json:
            raise
        out: dict[str, Any] = {"valid": False, "plan": args.plan, "error": str(exc)}
        if verdicts:
            out["unsafe_batches"] = [
                {"step": v.step, "batch": v.index, "hosts": list(v.hosts), "reason": v.problem}
                for v in verdicts if v.problem
            ]
        print(json.dumps(out))
        return 1
    if choice.ring is None:
        safety = NO_RING if get_engine(plan.engine).ring else None
    elif plan.availability.aggressive:
        safety = "batch safety not checked: the plan is AGGRESSIVE (availability may drop)"
    else:
        safety = (f"{len(verdicts)} batch(es) safe for {plan.availability.consistency_level} "
                  f"on {choice.source}")
    summary: dict[str, Any] = {
        "valid": True,
        "plan": args.plan,
        "engine": plan.engine,
        "cluster": plan.cluster,
        "steps": len(plan.steps),
        "restart_steps": sum(1 for s in plan.steps if s.restart),
        "hosts": sorted({h for s in plan.steps for b in s.batches for h in b}),
        "batch_safety": safety,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{args.plan}: valid {plan.engine} plan for {plan.cluster!r}: "
            f"{summary['steps']} step(s), {summary['restart_steps']} with restarts"
            + (f"; {safety}" if safety else "")
        )
    return 0
