"""``kairos autopilot tick|record|decide|adopt|pause|resume|status``: the closed loop.

``playbooks/autopilot.yml`` calls ``tick --check`` (before it collects), ``tick`` and
``record`` once per engine on the control host (planner/autopilot/tick.py); the others are
for people (docs/autopilot.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import inputs
from planner.engines import ENGINES


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", default=".kairos", help="autopilot files (default .kairos)")
    p.add_argument("--cluster", default="lab", help="cluster name (default lab)")
    p.add_argument("--engine", choices=ENGINES, default="cassandra")


def register(subparsers: Any) -> None:
    """Add the ``autopilot`` sub-command and its actions."""
    p = subparsers.add_parser(
        "autopilot",
        help="the closed loop: one tick, its record; decide, adopt, pause, resume, status",
        description="playbooks/autopilot.yml runs `tick` then the executor then `record` per "
        "engine; the other actions are for people.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for add in (_register_tick, _register_record, _register_decide, _register_adopt,
                _register_pause, _register_resume, _register_status):
        add(actions)


def _optional(convert: Any) -> Any:
    """An argument type where an empty value means "not set" (the playbook passes every one)."""
    def parse(text: str) -> Any:
        return None if text == "" else convert(text)

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def _policy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stale-fraction", type=inputs.FRACTION, default=0.25,
                   help="re-plan when less than this share of the horizon is left (0.25)")
    p.add_argument("--stale-steps", type=inputs.bounded_int(0, 10_000), default=2,
                   help="re-plan when fewer than N intervals are left (2)")
    p.add_argument("--min-replan-seconds", type=inputs.bounded_float(0.0, 30 * 86400.0),
                   default=600.0, help="minimum time between re-plans (600)")
    backoff = _optional(inputs.bounded_float(0.0, 30 * 86400.0))
    p.add_argument("--failed-backoff-seconds", type=backoff,
                   help="retry a failed step after this back-off (default or empty: wait for a "
                   "person)")
    p.add_argument("--max-attempts", type=inputs.bounded_int(1, 1000), default=3,
                   help="with a back-off, attempts before waiting for a person (3)")
    p.add_argument("--deviation-slack", type=inputs.bounded_float(0.0, 1e6), default=0.0,
                   help="tolerance around the forecast interval (0)")


def _policy(args: argparse.Namespace) -> Any:
    from planner.autopilot.decisions import Policy

    return Policy(
        stale_fraction=args.stale_fraction, stale_steps=args.stale_steps,
        min_replan_seconds=args.min_replan_seconds,
        failed_backoff_seconds=args.failed_backoff_seconds,
        max_attempts=args.max_attempts, deviation_slack=args.deviation_slack,
    )


def _register_tick(actions: Any) -> None:
    t = actions.add_parser(
        "tick", help="one engine's tick: decide, re-plan when due, adopt (prints JSON)",
        description="Export the history, decide; when a re-plan is due forecast, plan on the "
        "live ring (Cassandra) or the engine's hosts (Redis), check it as `kairos explain` "
        "does, adopt it (not in a dry run) and decide again. Writes the tick file that "
        "`record` reads. Everything the tick is given is one JSON document (docs/autopilot.md, "
        "\"The tick's inputs\"), which playbooks/autopilot.yml writes from the role's settings.",
    )
    t.add_argument("--inputs", required=True, metavar="FILE",
                   help="the tick's input document (JSON)")
    t.add_argument("--check", action="store_true",
                   help="only read and check the document, before the playbook collects: "
                   "write the tick file at stage collect and print what the collection needs "
                   "(JSON: collect.per_table)")
    t.set_defaults(func=run_tick)


def _register_record(actions: Any) -> None:
    r = actions.add_parser(
        "record", help="after the executor or a failed stage: judge, record, log (prints JSON)",
        description="Reads the run's tick file; records a failed apply as a failed step unless "
        "the executor did; appends one line to <state-dir>/autopilot.log.jsonl.",
    )
    _common(r)
    r.add_argument("--run", required=True)
    r.add_argument("--started-at", required=True)
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--apply-rc", type=int, help="the executor's exit code")
    r.add_argument("--apply-output", default="", help="the end of the executor's output")
    r.add_argument("--failed-task", help="the task that failed this engine's tick")
    r.add_argument("--error", default="", help="its error message")
    r.set_defaults(func=run_record)


def _register_decide(actions: Any) -> None:
    d = actions.add_parser("decide", help="what would a tick do now? (JSON; changes nothing)")
    _common(d)
    _policy_arguments(d)
    d.add_argument("--trace", help="the collected trace (its last point is the observation)")
    d.add_argument("--plan", help="judge this plan instead of the autopilot's current one")
    d.add_argument("--forecast", help="the plan's forecast (default: the one adopted with it)")
    d.add_argument("--now", help="ISO 8601 decision time (default: now)")
    d.set_defaults(func=run_decide)


def _register_adopt(actions: Any) -> None:
    a = actions.add_parser("adopt", help="make a new plan the current one; start the rate limit")
    _common(a)
    a.add_argument("--plan", required=True)
    a.add_argument("--forecast")
    a.add_argument("--reason", action="append", default=[], help="why (repeatable)")
    a.set_defaults(func=run_adopt)


def _register_pause(actions: Any) -> None:
    pa = actions.add_parser("pause", help="stop re-planning and applying (collection goes on)")
    _common(pa)
    pa.add_argument("--reason", help="why (shown by status and in every held run)")
    pa.set_defaults(func=run_pause)


def _register_resume(actions: Any) -> None:
    re = actions.add_parser("resume", help="undo pause")
    _common(re)
    re.set_defaults(func=run_resume)


def _register_status(actions: Any) -> None:
    st = actions.add_parser("status", help="current plan, its steps' state, pause, last runs")
    _common(st)
    st.add_argument("--runs", type=inputs.COUNT, default=5, help="last log lines to show (5)")
    st.set_defaults(func=run_status)


def run_tick(args: argparse.Namespace) -> int:
    from planner.autopilot.tick import check_tick, refused_inputs, run_tick, tick_path
    from planner.autopilot.tick_inputs import load_tick_inputs
    from planner.errors import ValidationError

    try:
        inp = load_tick_inputs(args.inputs)
    except ValidationError:
        refused_inputs(args.inputs)  # the record then says decide-failed, not collect-failed
        raise
    out = tick_path(inp.state_dir, inp.run, inp.engine)
    if args.check:
        print(json.dumps(check_tick(inp, out), sort_keys=True))
        return 0
    result = run_tick(inp, out)
    for line in result.plan_text:  # the forecast, the plan's progress and its explanation
        print(line, file=sys.stderr)
    print(out.read_text().strip())
    return 0


def run_record(args: argparse.Namespace) -> int:
    from planner.autopilot.tick import load_tick, record_run, tick_path

    tick = load_tick(tick_path(args.state_dir, args.run, args.engine))
    line = record_run(
        tick, state_dir=args.state_dir, cluster=args.cluster, engine=args.engine, run=args.run,
        started_at=args.started_at, dry_run=args.dry_run, apply_rc=args.apply_rc,
        apply_output=args.apply_output, failed_task=args.failed_task, error=args.error,
    )
    print(json.dumps(line, sort_keys=True, default=str))
    return 0


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
    from planner.autopilot.decisions import state_path

    return state_path(args.state_dir, args.cluster, args.engine)


def run_decide(args: argparse.Namespace) -> int:
    from planner.autopilot.tick import decide_on_files

    decision = decide_on_files(
        state_dir=args.state_dir, cluster=args.cluster, engine=args.engine,
        policy=_policy(args), now=_now(args.now), trace=args.trace, plan=args.plan,
        forecast=args.forecast,
    )
    print(json.dumps(decision, sort_keys=True))
    return 0


def run_adopt(args: argparse.Namespace) -> int:
    from planner.autopilot.decisions import adopt_plan, plan_view

    plan_view(args.plan)  # refuse an invalid plan before it becomes the current one
    state = adopt_plan(
        _state_file(args), plan=str(Path(args.plan).resolve()),
        forecast=str(Path(args.forecast).resolve()) if args.forecast else None,
        now=datetime.now(UTC), reasons=args.reason,
    )
    print(json.dumps(state, sort_keys=True))
    return 0


def run_pause(args: argparse.Namespace) -> int:
    from planner.autopilot.decisions import set_paused

    set_paused(_state_file(args), paused=True, reason=args.reason, now=datetime.now(UTC))
    print(f"autopilot of {args.cluster}/{args.engine} paused (collection goes on); "
          f"undo with: kairos autopilot resume --cluster {args.cluster} --engine {args.engine}")
    return 0


def run_resume(args: argparse.Namespace) -> int:
    from planner.autopilot.decisions import set_paused

    set_paused(_state_file(args), paused=False, reason=None, now=datetime.now(UTC))
    print(f"autopilot of {args.cluster}/{args.engine} resumed")
    return 0


#: The run lock holds one line naming its holder; the log grows a line per run (a run
#: every few minutes for years stays well under the limit).
_LOCK = inputs.FileKind("autopilot run lock", 64 * 1024)
_LOG = inputs.FileKind("autopilot log", 256 * 1024 * 1024)


def run_status(args: argparse.Namespace) -> int:
    from planner.autopilot.decisions import LOG_NAME, load_autopilot_state
    from planner.executor.rollout import load_state, state_path_for

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
