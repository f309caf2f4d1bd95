"""``kairos autopilot decide|adopt|apply-failed|log|pause|resume|status``: the loop's bookkeeping.

``playbooks/autopilot.yml`` calls these on the control host (docs/autopilot.md).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import inputs


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", default=".kairos", help="autopilot files (default .kairos)")
    p.add_argument("--cluster", default="lab", help="cluster name (default lab)")
    p.add_argument("--engine", choices=("cassandra", "redis"), default="cassandra")


def register(subparsers: Any) -> None:
    """Add the ``autopilot`` sub-command and its actions."""
    p = subparsers.add_parser(
        "autopilot",
        help="the closed loop: decide whether to re-plan and apply; pause, resume, status",
        description="Used by playbooks/autopilot.yml; decide and adopt print one JSON object.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    d = actions.add_parser("decide", help="re-plan? apply the due step? (prints JSON)")
    _common(d)
    d.add_argument("--trace", help="the collected trace (its last point is the observation)")
    d.add_argument("--plan", help="judge this plan instead of the autopilot's current one")
    d.add_argument("--forecast", help="the plan's forecast (default: the one adopted with it)")
    d.add_argument("--now", help="ISO 8601 decision time (default: now)")
    d.add_argument("--stale-fraction", type=inputs.FRACTION, default=0.25,
                   help="re-plan when less than this share of the horizon is left (0.25)")
    d.add_argument("--stale-steps", type=inputs.bounded_int(0, 10_000), default=2,
                   help="re-plan when fewer than N intervals are left (2)")
    d.add_argument("--min-replan-seconds", type=inputs.bounded_float(0.0, 30 * 86400.0),
                   default=600.0,
                   help="minimum time between re-plans (600)")
    d.add_argument("--failed-backoff-seconds", type=inputs.bounded_float(0.0, 30 * 86400.0),
                   help="retry a failed step after this back-off (default: wait for a person)")
    d.add_argument("--max-attempts", type=inputs.bounded_int(1, 1000), default=3,
                   help="with a back-off, attempts before waiting for a person (3)")
    d.add_argument("--deviation-slack", type=inputs.bounded_float(0.0, 1e6), default=0.0,
                   help="tolerance around the forecast interval (0)")
    d.add_argument("--out", help="also write the decision (JSON) to this file")
    d.set_defaults(func=run_decide)

    a = actions.add_parser("adopt", help="make a new plan the current one; start the rate limit")
    _common(a)
    a.add_argument("--plan", required=True)
    a.add_argument("--forecast")
    a.add_argument("--reason", action="append", default=[], help="why (repeatable)")
    a.set_defaults(func=run_adopt)

    af = actions.add_parser(
        "apply-failed",
        help="after a failed apply: record the step as failed unless the executor did (JSON)",
    )
    _common(af)
    af.add_argument("--plan", required=True)
    af.add_argument("--step", required=True)
    af.add_argument("--since", required=True,
                    help="ISO 8601 start of this run (an older record is not this apply's)")
    af.add_argument("--output", default="", help="the end of the apply playbook's output")
    af.set_defaults(func=run_apply_failed)

    lg = actions.add_parser("log", help="append one JSON line to <state-dir>/autopilot.log.jsonl")
    _common(lg)
    lg.add_argument("--record", required=True, help="JSON object describing the run")
    lg.set_defaults(func=run_log)

    pa = actions.add_parser("pause", help="stop re-planning and applying (collection goes on)")
    _common(pa)
    pa.add_argument("--reason", help="why (shown by status and in every held run)")
    pa.set_defaults(func=run_pause)

    re = actions.add_parser("resume", help="undo pause")
    _common(re)
    re.set_defaults(func=run_resume)

    st = actions.add_parser("status", help="current plan, its steps' state, pause, last runs")
    _common(st)
    st.add_argument("--runs", type=inputs.COUNT, default=5, help="last log lines to show (5)")
    st.set_defaults(func=run_status)


def _now(text: str | None) -> datetime:
    from planner.errors import ValidationError

    if not text:
        return datetime.now(UTC)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"--now: not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise ValidationError("--now: give a UTC offset, e.g. 2026-11-21T12:00:00+00:00")
    return when


def _state_file(args: argparse.Namespace) -> Path:
    from planner.autopilot import state_path

    return state_path(args.state_dir, args.cluster, args.engine)


def run_decide(args: argparse.Namespace) -> int:
    from planner import autopilot as ap
    from planner.rollout import load_state, state_path_for

    now = _now(args.now)
    policy = ap.Policy(
        stale_fraction=args.stale_fraction,
        stale_steps=args.stale_steps,
        min_replan_seconds=args.min_replan_seconds,
        failed_backoff_seconds=args.failed_backoff_seconds,
        max_attempts=args.max_attempts,
        deviation_slack=args.deviation_slack,
    )
    state = ap.load_autopilot_state(_state_file(args))
    plan_path = args.plan or state.get("plan")
    plan = ap.plan_view(plan_path) if plan_path and Path(plan_path).exists() else None
    forecast = args.forecast or (state.get("forecast") if not args.plan else None)
    band = ap.band_from_forecast(forecast) if forecast and Path(forecast).exists() else None
    observed = ap.latest_observation(args.trace) if args.trace else None
    decision = ap.decide(
        now=now,
        policy=policy,
        plan=plan,
        rollout_state=load_state(state_path_for(plan.path)) if plan else {},
        autopilot_state=state,
        band=band,
        observed=observed,
    )
    out = decision.to_dict()
    out["current_config"] = _write_running_config(args, plan.path) if plan else None
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path(args.state_dir) / "plans" / f"{args.cluster}-{args.engine}-{stamp}"
    base.parent.mkdir(parents=True, exist_ok=True)
    # Where a re-plan writes (absolute: the playbook runs commands from elsewhere).
    out["new_plan"] = str(base.with_suffix(".yml").resolve())
    out["new_forecast"] = str(Path(f"{base}.forecast.json").resolve())
    # The live ring the new plan is made on (Cassandra; cassandra_cluster_facts writes it).
    out["new_ring"] = str(Path(f"{base}.ring.json").resolve())
    out["state_file"] = str(_state_file(args).resolve())
    text = json.dumps(out, sort_keys=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def _write_running_config(args: argparse.Namespace, plan_path: str) -> str:
    """Write what the cluster runs after the plan's applied (and superseded) steps."""
    import yaml

    from planner.plan import load_plan
    from planner.rollout import applied_composition, load_state, state_path_for

    plan = load_plan(plan_path)
    config = applied_composition(plan, load_state(state_path_for(plan_path))).cluster
    path = (Path(args.state_dir) / f"{args.cluster}-{args.engine}-running.yml").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(config), sort_keys=True))
    return str(path)


def run_adopt(args: argparse.Namespace) -> int:
    from planner.autopilot import adopt_plan, plan_view

    plan_view(args.plan)  # refuse an invalid plan before it becomes the current one
    state = adopt_plan(
        _state_file(args), plan=str(Path(args.plan).resolve()),
        forecast=str(Path(args.forecast).resolve()) if args.forecast else None,
        now=datetime.now(UTC), reasons=args.reason,
    )
    print(json.dumps(state, sort_keys=True))
    return 0


def run_apply_failed(args: argparse.Namespace) -> int:
    from planner.autopilot import judge_failed_apply
    from planner.rollout import load_state, record_step, state_path_for

    state_file = state_path_for(args.plan)
    failure = judge_failed_apply(
        step=args.step, rollout_state=load_state(state_file), since=_now(args.since),
        output=args.output,
    )
    if failure.record:
        record_step(state_file, step_id=args.step, status="failed",
                    error=f"the apply stopped before recording the step: {failure.reason}")
    print(json.dumps({"outcome": failure.outcome, "reason": failure.reason,
                      "recorded_by": "autopilot" if failure.record else None,
                      "state": str(state_file)}, sort_keys=True))
    return 0


def run_log(args: argparse.Namespace) -> int:
    from planner.autopilot import append_log
    from planner.errors import ValidationError

    try:
        record = json.loads(args.record)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--record: not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ValidationError("--record: expected a JSON object")
    record = {
        "logged_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cluster": args.cluster,
        "engine": args.engine,
        **record,
    }
    path = append_log(args.state_dir, record)
    print(f"logged to {path}")
    return 0


def run_pause(args: argparse.Namespace) -> int:
    from planner.autopilot import set_paused

    set_paused(_state_file(args), paused=True, reason=args.reason, now=datetime.now(UTC))
    print(f"autopilot of {args.cluster}/{args.engine} paused (collection goes on); "
          f"undo with: kairos autopilot resume --cluster {args.cluster} --engine {args.engine}")
    return 0


def run_resume(args: argparse.Namespace) -> int:
    from planner.autopilot import set_paused

    set_paused(_state_file(args), paused=False, reason=None, now=datetime.now(UTC))
    print(f"autopilot of {args.cluster}/{args.engine} resumed")
    return 0


#: The run lock holds one line naming its holder; the log grows a line per run (a run
#: every few minutes for years stays well under the limit).
_LOCK = inputs.FileKind("autopilot run lock", 64 * 1024)
_LOG = inputs.FileKind("autopilot log", 256 * 1024 * 1024)


def run_status(args: argparse.Namespace) -> int:
    from planner.autopilot import LOG_NAME, load_autopilot_state
    from planner.rollout import load_state, state_path_for

    state = load_autopilot_state(_state_file(args))
    print(f"autopilot {args.cluster}/{args.engine}: "
          + (f"PAUSED since {state.get('paused_at')} ({state.get('paused_reason')})"
             if state.get("paused") else "active"))
    lock = Path(args.state_dir) / f"{args.cluster}-autopilot.lock"
    holder = inputs.read_text(lock, kind=_LOCK).strip() if lock.exists() else "free"
    print(f"run lock: {holder}")
    plan = state.get("plan")
    print(f"current plan: {plan or 'none'} (re-planned {state.get('last_replan_at', 'never')})")
    if plan:
        for sid, rec in sorted(load_state(state_path_for(plan)).get("steps", {}).items()):
            print(f"  step {sid}: {rec.get('status')} at {rec.get('finished_at')}"
                  f" ({rec.get('attempts')} attempt(s))"
                  + (f": {rec['error']}" if rec.get("error") else ""))
    log = Path(args.state_dir) / LOG_NAME
    if log.exists():
        lines = inputs.read_text(log, kind=_LOG).splitlines()[-args.runs:]
        print(f"last {len(lines)} run(s) from {log}:")
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut short by a crash: show it, do not fail
                rec = {"message": f"(not JSON) {line[:200]}"}
            if not isinstance(rec, dict):
                rec = {"message": f"(not an object) {line[:200]}"}
            print(f"  {rec.get('logged_at')} {rec.get('engine', '?')} {rec.get('outcome', '?')}: "
                  f"{rec.get('message', '')}")
    return 0
