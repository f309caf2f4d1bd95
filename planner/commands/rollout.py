"""``kairos rollout prepare|preflight|record``: the executor's questions, answered in Python.

The apply playbooks call these on the control host; each prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from planner.engines import ENGINES


def register(subparsers: Any) -> None:
    """Add the ``rollout`` sub-command and its actions."""
    p = subparsers.add_parser(
        "rollout",
        help="what the executor carries out: due step, pre-flight check, outcome record",
        description="Used by playbooks/apply_plan.yml; each action prints one JSON object.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    # One function per action, in the order `kairos rollout --help` lists them.
    for add_action in (
        _register_prepare,
        _register_adhoc,
        _register_preflight,
        _register_guard,
        _register_rescue,
        _register_record,
    ):
        add_action(actions)


def _register_prepare(actions: Any) -> None:
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
    prep.add_argument("--durability-floor", metavar="MAPPING|FILE",
                      help="Redis: refuse the plan when it runs below this floor (the "
                      "inventory's kairos_redis_durability_floor; as kairos plan's option; "
                      "an engine without a durability floor has nothing to check)")
    prep.add_argument("--engine", choices=ENGINES,
                      help="the engine the calling playbook applies: a plan for another engine "
                      "is refused, naming the playbook that applies it")
    prep.set_defaults(func=run_prepare)


def _register_adhoc(actions: Any) -> None:
    adhoc = actions.add_parser(
        "adhoc", help="a one-step rollout without a plan: change settings safely, or restart"
    )
    adhoc.add_argument("--engine", required=True, choices=ENGINES)
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
    adhoc.add_argument(
        "--tables", default="", help="comma-separated keyspace.table a table setting applies to"
    )
    adhoc.add_argument("--durability-floor", metavar="MAPPING|FILE",
                       help="Redis: refuse a setting below this floor (the inventory's "
                       "kairos_redis_durability_floor; as rollout prepare's option)")
    adhoc.add_argument("--out", help="also write the rollout (JSON) to this file")
    adhoc.set_defaults(func=run_adhoc)


def _register_preflight(actions: Any) -> None:
    pre = actions.add_parser("preflight", help="re-check a rollout's batches on the live ring")
    pre.add_argument("--rollout", required=True, help="the rollout JSON (prepare/adhoc --out)")
    pre.add_argument("--ring", required=True, help="live ring description (JSON or YAML)")
    pre.add_argument("--down", default="", help="comma-separated hosts that are down now")
    pre.set_defaults(func=run_preflight)


def _register_guard(actions: Any) -> None:
    guard = actions.add_parser(
        "guard", help="refuse to take a batch down when the nodes down now break the CL"
    )
    guard.add_argument("--rollout", required=True, help="the rollout JSON (prepare/adhoc --out)")
    guard.add_argument("--ring", required=True, help="live ring description (JSON or YAML)")
    guard.add_argument("--down", default="", help="comma-separated hosts that are down now")
    guard.add_argument("--batch", required=True, help="comma-separated hosts of the batch")
    guard.set_defaults(func=run_guard)


def _register_rescue(actions: Any) -> None:
    rescue = actions.add_parser(
        "rescue", help="what the rescue of a failed batch may do to a node, given who is down"
    )
    rescue.add_argument("--rollout", required=True, help="the rollout JSON (prepare/adhoc --out)")
    rescue.add_argument("--ring", help="live ring description; absent when it could not be read")
    rescue.add_argument(
        "--down", help="comma-separated hosts down now; omit when they could not be read"
    )
    rescue.add_argument("--node", required=True, help="the failed node")
    rescue.add_argument("--batch", required=True, help="comma-separated hosts of the batch")
    rescue.add_argument(
        "--serving", required=True, choices=["true", "false"], help="does the node serve now"
    )
    rescue.add_argument(
        "--files",
        choices=["new", "previous"],
        default="new",
        help="does the node's configuration already hold the new settings",
    )
    rescue.set_defaults(func=run_rescue)


def _register_record(actions: Any) -> None:
    rec = actions.add_parser(
        "record", help="record a step's outcome, or one node verified, in the state file"
    )
    rec.add_argument(
        "plan", metavar="PLAN", nargs="?", help="the plan (for its default state file)"
    )
    rec.add_argument("--state", help="rollout state file (default: <PLAN>.state.json)")
    rec.add_argument("--step", required=True)
    rec.add_argument("--status", required=True, choices=["applied", "failed", "verified"])
    rec.add_argument("--nodes", default="{}", help="JSON: host -> per-node timings")
    rec.add_argument("--error", help="why the step failed")
    rec.add_argument("--node", help="verified: the host read back after its change")
    rec.add_argument("--readback", help="verified: JSON object of the values read back")
    rec.add_argument(
        "--fingerprint",
        help="the rollout's fingerprint (verified: what lets prepare resume after this "
        "node; applied: the required nodes must be verified for it)",
    )
    rec.add_argument(
        "--require-verified",
        default="",
        metavar="HOST,HOST",
        help="applied: refuse unless each of these hosts was recorded verified",
    )
    rec.add_argument(
        "--superseded",
        default="",
        metavar="STEP,STEP",
        help="applied: the rollout's superseded steps, recorded as superseded by this one",
    )
    rec.set_defaults(func=run_record)


def _hosts(value: str) -> list[str]:
    return [h.strip() for h in value.split(",") if h.strip()]


def run_prepare(args: argparse.Namespace) -> int:
    from planner.commands.plan import durability_floor_arg
    from planner.errors import ValidationError
    from planner.executor.rollout import prepare

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
        durability_floor=durability_floor_arg(args.durability_floor),
        engine=args.engine,
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

    from planner.commands.plan import durability_floor_arg
    from planner.errors import ValidationError
    from planner.executor.rollout import adhoc
    from planner.topology.ring import load_ring

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
        tables=_hosts(args.tables),
        durability_floor=durability_floor_arg(args.durability_floor),
    )
    return _emit(step, args.out)


def run_preflight(args: argparse.Namespace) -> int:
    from planner.executor.rollout import load_rollout, preflight
    from planner.topology.ring import load_ring

    step = load_rollout(args.rollout)
    preflight(step, load_ring(args.ring), down=_hosts(args.down), aggressive=step.aggressive)
    print(
        json.dumps({"safe": True, "step": step.step_id, "batches": [list(b) for b in step.batches]})
    )
    return 0


def _json_object(flag: str, text: str | None) -> dict[str, Any] | None:
    from planner import inputs

    return None if text is None else inputs.json_argument(flag, text, dict)


def run_record(args: argparse.Namespace) -> int:
    from planner.errors import ValidationError
    from planner.executor.rollout import record_step, state_path_for

    nodes = _json_object("--nodes", args.nodes)
    readback = _json_object("--readback", args.readback)
    if not (args.state or args.plan):
        raise ValidationError("give the plan or --state")
    path = args.state or state_path_for(args.plan)
    state = record_step(
        path,
        step_id=args.step,
        status=args.status,
        nodes=nodes,
        error=args.error,
        node=args.node,
        readback=readback,
        fingerprint=args.fingerprint,
        require_verified=_hosts(args.require_verified),
        superseded=_hosts(args.superseded),
    )
    print(json.dumps({"state": str(path), "step": args.step, **state["steps"][args.step]}))
    return 0


def run_guard(args: argparse.Namespace) -> int:
    from planner.executor.faults import guard_batch
    from planner.executor.rollout import load_rollout
    from planner.topology.ring import load_ring

    step = load_rollout(args.rollout)
    ring = load_ring(args.ring)
    batch, down = _hosts(args.batch), _hosts(args.down)
    guard_batch(step, ring, batch=batch, down=down)
    # The peers the batch's drain watches: the up ones whose death would cut its replica sets.
    watch = [h for h in step.batch_neighbours(ring, batch) if h not in down]
    print(json.dumps({"safe": True, "batch": batch, "down": down, "watch": watch}))
    return 0


def run_rescue(args: argparse.Namespace) -> int:
    from planner.executor.faults import decide_rescue
    from planner.executor.rollout import load_rollout
    from planner.topology.ring import load_ring

    step = load_rollout(args.rollout)
    known = args.ring is not None and args.down is not None
    decision = decide_rescue(
        step,
        load_ring(args.ring) if known else None,
        node=args.node,
        batch=_hosts(args.batch),
        down=_hosts(args.down) if known else None,
        serving=args.serving == "true",
        files_changed=args.files == "new",
    )
    print(json.dumps(decision.to_dict()))
    return 0
