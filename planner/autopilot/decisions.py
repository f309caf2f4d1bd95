"""The closed loop's decisions: re-plan or not, apply the due step or not (docs/autopilot.md).

``playbooks/autopilot.yml`` runs on a schedule: collect, then ask :func:`decide` (through
``kairos autopilot decide``) whether the plan must be remade and whether a step should be
carried out now. The decision is a pure function of plain inputs (the current plan's
horizon and steps, the rollout state, the forecast's intervals, the latest observed
workload, the autopilot's own state and a policy), so every rule is unit-tested:

- **re-plan** when there is no plan, when the plan is stale (the time left in its horizon
  is below ``stale_fraction`` of it or ``stale_steps`` steps), or when the latest observed
  workload left the forecast's interval — but never sooner than ``min_replan_seconds``
  after the previous re-plan (rate limit);
- **apply** the step that is due unless it was applied already; a step recorded as
  failed is *not* retried blindly: the autopilot holds (no re-plan, no apply) until a
  person resumes or rolls it back, or — when ``failed_backoff_seconds`` is set — until
  that back-off has passed since the failure, up to ``max_attempts`` attempts;
- nothing at all while the autopilot is paused (``kairos autopilot pause``);
- an apply that failed before the executor recorded the step (plan refused, pre-flight
  refusal) is recorded as a failed step too (:func:`judge_failed_apply`), so it holds like
  any failed step; only "another run holds the apply lock" leaves the step due.

Files under the state directory (``.kairos/`` by default), one set per cluster and engine:
``<cluster>-<engine>-autopilot.json`` (current plan, last re-plan, pause), and
``autopilot.log.jsonl`` (one JSON line per engine per run).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from planner.errors import ValidationError, at_least

STATE_VERSION = 1
LOG_NAME = "autopilot.log.jsonl"


# ------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class Policy:
    """When the autopilot re-plans and retries.

    Attributes
    ----------
    stale_fraction
        Re-plan when less than this fraction of the plan's horizon is left (0..1).
    stale_steps
        Re-plan when fewer than this many decision intervals are left.
    min_replan_seconds
        Never re-plan sooner than this after the previous re-plan (rate limit).
    failed_backoff_seconds
        Retry a failed step after this long; ``None``: wait for a person.
    max_attempts
        With a back-off, give up (wait for a person) after this many attempts.
    deviation_slack
        Tolerance added to the forecast interval before the observation counts as
        outside it: a fraction of the load bound, an absolute share for the mix.
    """

    stale_fraction: float = 0.25
    stale_steps: int = 2
    min_replan_seconds: float = 600.0
    failed_backoff_seconds: float | None = None
    max_attempts: int = 3
    deviation_slack: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.stale_fraction < 1.0:
            raise ValidationError(f"stale_fraction: must be in [0, 1), got {self.stale_fraction}")
        at_least(self, stale_steps=0, min_replan_seconds=0, failed_backoff_seconds=0,
                 max_attempts=1, deviation_slack=0)  # fmt: skip


@dataclass(frozen=True)
class PlanView:
    """What the decision needs from a plan: its horizon and its steps' due times."""

    path: str
    start: datetime
    step_seconds: float
    steps: int
    step_dues: tuple[tuple[str, datetime], ...]

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.step_seconds * self.steps)


@dataclass(frozen=True)
class Band:
    """The forecast's intervals: per future timestamp, load and mix bounds."""

    timestamps: tuple[float, ...]
    step_seconds: float
    load_lower: tuple[float, ...]
    load_upper: tuple[float, ...]
    mix_lower: Mapping[str, tuple[float, ...]]
    mix_upper: Mapping[str, tuple[float, ...]]

    def index_at(self, ts: float) -> int | None:
        """The forecast interval holding epoch time ``ts`` (None outside the forecast)."""
        if not self.timestamps:
            return None
        i = int((ts - self.timestamps[0]) // self.step_seconds)
        return i if 0 <= i < len(self.timestamps) else None


@dataclass(frozen=True)
class Observation:
    """The latest observed workload point (from the collected trace)."""

    timestamp: float
    load: float
    mix: Mapping[str, float]


# ------------------------------------------------------------------ result
@dataclass(frozen=True)
class Decision:
    """What this autopilot run does, and why (printed as JSON, logged)."""

    now: str
    paused: bool
    replan: bool
    replan_reasons: tuple[str, ...]
    replan_blocked: str | None
    apply: bool
    step: str | None
    retry_failed: bool
    hold: str | None
    plan: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["replan_reasons"] = list(self.replan_reasons)
        return data


# --------------------------------------------------------------- the rules
def staleness(plan: PlanView, now: datetime, policy: Policy) -> str | None:
    """Why ``plan`` is stale at ``now`` (its horizon ends soon), or None."""
    total = plan.step_seconds * plan.steps
    left = (plan.end - now).total_seconds()
    if left <= 0:
        return f"the plan's horizon ended at {plan.end.isoformat()}"
    steps_left = left / plan.step_seconds
    if left < policy.stale_fraction * total:
        return (
            f"the plan's horizon ends at {plan.end.isoformat()}: {left:.0f} s left, less than "
            f"{policy.stale_fraction:.0%} of it"
        )
    if steps_left < policy.stale_steps:
        return (
            f"the plan's horizon ends at {plan.end.isoformat()}: {steps_left:.1f} step(s) left, "
            f"fewer than {policy.stale_steps}"
        )
    return None


def deviation(band: Band, observed: Observation, policy: Policy) -> str | None:
    """Why the observation lies outside the forecast's interval, or None.

    An observation outside the forecast's time range is not judged here (staleness is).
    """
    i = band.index_at(observed.timestamp)
    if i is None:
        return None
    lo, hi = band.load_lower[i], band.load_upper[i]
    slack = policy.deviation_slack
    if observed.load < lo * (1 - slack) or observed.load > hi * (1 + slack):
        return (
            f"observed load {observed.load:.1f} ops/s at "
            f"{datetime.fromtimestamp(observed.timestamp, UTC).isoformat(timespec='seconds')} "
            f"is outside the forecast interval [{lo:.1f}, {hi:.1f}]"
        )
    for cls, share in sorted(observed.mix.items()):
        if cls not in band.mix_lower:
            continue
        mlo, mhi = band.mix_lower[cls][i], band.mix_upper[cls][i]
        if share < mlo - slack or share > mhi + slack:
            return (
                f"observed {cls} share {share:.0%} is outside the forecast interval "
                f"[{mlo:.0%}, {mhi:.0%}]"
            )
    return None


def due_step(plan: PlanView, now: datetime) -> str | None:
    """The latest step that has come due (:meth:`planner.plan.Horizon.has_come_due`; what
    ``kairos rollout prepare`` picks)."""
    from planner.plan import Horizon

    horizon = Horizon(plan.start, plan.step_seconds, plan.steps)
    due = [sid for sid, when in plan.step_dues if horizon.has_come_due(when, now)]
    return due[-1] if due else None


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def decide(
    *,
    now: datetime,
    policy: Policy,
    plan: PlanView | None,
    rollout_state: Mapping[str, Any],
    autopilot_state: Mapping[str, Any],
    band: Band | None = None,
    observed: Observation | None = None,
) -> Decision:
    """Decide whether to re-plan and whether to carry out the due step.

    Parameters
    ----------
    now
        The decision time (aware).
    policy
        Thresholds (see :class:`Policy`).
    plan
        The current plan, or None when there is none.
    rollout_state
        The plan's ``<plan>.state.json`` content (``{"steps": {id: {...}}}``).
    autopilot_state
        The autopilot's state (``last_replan_at``, ``paused``, ...).
    band, observed
        The current plan's forecast intervals and the latest observed point; either may
        be None (no deviation check).

    Returns
    -------
    Decision
    """
    if now.tzinfo is None:
        raise ValidationError("now: give an aware time (UTC offset)")
    stamp = now.isoformat(timespec="seconds")
    plan_path = plan.path if plan else None
    if autopilot_state.get("paused"):
        why = autopilot_state.get("paused_reason") or "no reason given"
        return _idle(stamp, plan_path, paused=True, hold=None,
                     message=f"autopilot paused since {autopilot_state.get('paused_at')} "
                     f"({why}); resume with: kairos autopilot resume")
    steps_state = rollout_state.get("steps", {}) if rollout_state else {}
    step = due_step(plan, now) if plan else None
    # A failed step holds everything: neither a new plan nor an apply may paper over it.
    hold, retry_step = _failed_step(plan, steps_state, now, policy)
    if hold is not None:
        return _idle(stamp, plan_path, paused=False, hold=hold, message=f"holding: {hold}")
    retry = retry_step is not None
    step = retry_step or step
    reasons = _replan_reasons(plan, now, policy, band, observed)
    blocked = None if retry or plan is None else _rate_limited(reasons, autopilot_state,
                                                                now, policy)
    replan = bool(reasons) and blocked is None and not retry
    apply = step is not None and (retry or steps_state.get(step, {}).get("status") != "applied")
    notes = []
    if replan:
        notes.append("re-plan: " + "; ".join(reasons))
    elif blocked:
        notes.append("re-plan wanted (" + "; ".join(reasons) + ") but rate-limited: " + blocked)
    if retry:
        notes.append(f"retry failed step {step} after the back-off")
    elif apply:
        notes.append(f"apply step {step}")
    elif plan is not None:
        notes.append(f"step {step} already applied" if step else "no step is due yet")
    return Decision(
        now=stamp, paused=False, replan=replan, replan_reasons=tuple(reasons),
        replan_blocked=blocked, apply=apply, step=step, retry_failed=retry, hold=None,
        plan=plan_path, message="; ".join(notes) or "nothing to do",
    )


def _idle(now: str, plan: str | None, *, paused: bool, hold: str | None,
          message: str) -> Decision:
    """A decision to do nothing (paused, or held by a failed step)."""
    return Decision(now=now, paused=paused, replan=False, replan_reasons=(), replan_blocked=None,
                    apply=False, step=None, retry_failed=False, hold=hold, plan=plan,
                    message=message)


def _failed_step(
    plan: PlanView | None, steps_state: Mapping[str, Any], now: datetime, policy: Policy
) -> tuple[str | None, str | None]:
    """``(hold, None)`` while the latest failed step holds the engine, ``(None, step)`` when
    its back-off has passed (retry it), ``(None, None)`` when no step failed."""
    failed = {sid: s for sid, s in steps_state.items() if s.get("status") == "failed"}
    if not plan or not failed:
        return None, None
    sid, rec = sorted(failed.items(), key=lambda kv: str(kv[1].get("finished_at")))[-1]
    attempts = int(rec.get("attempts", 1))
    failed_at = _parse_time(rec.get("finished_at"))
    detail = f"step {sid} failed at {rec.get('finished_at')}: {rec.get('error', 'no detail')}"
    if policy.failed_backoff_seconds is None:
        return (f"{detail}; waiting for a person "
                "(docs/runbooks/resume-or-roll-back-a-failed-step.md)"), None
    if attempts >= policy.max_attempts:
        return f"{detail}; {attempts} attempt(s), the limit: waiting for a person", None
    if failed_at is not None and (now - failed_at).total_seconds() < policy.failed_backoff_seconds:
        until = failed_at + timedelta(seconds=policy.failed_backoff_seconds)
        return f"{detail}; back-off until {until.isoformat(timespec='seconds')}", None
    return None, sid


def _replan_reasons(plan: PlanView | None, now: datetime, policy: Policy, band: Band | None,
                    observed: Observation | None) -> list[str]:
    """Why the plan must be remade: none, stale, or the workload left the forecast."""
    if plan is None:
        return ["there is no plan"]
    reasons = []
    stale = staleness(plan, now, policy)
    if stale:
        reasons.append(stale)
    if band is not None and observed is not None:
        dev = deviation(band, observed, policy)
        if dev:
            reasons.append(dev)
    return reasons


def _rate_limited(reasons: Sequence[str], autopilot_state: Mapping[str, Any], now: datetime,
                  policy: Policy) -> str | None:
    """Why a wanted re-plan must wait (the previous one was too recent), or None."""
    last = _parse_time(autopilot_state.get("last_replan_at"))
    if not reasons or last is None:
        return None
    since = (now - last).total_seconds()
    if since >= policy.min_replan_seconds:
        return None
    nxt = last + timedelta(seconds=policy.min_replan_seconds)
    return (f"last re-plan {since:.0f} s ago, minimum interval {policy.min_replan_seconds:g} s: "
            f"not before {nxt.isoformat(timespec='seconds')}")


# ------------------------------------------------------------- file inputs
def plan_view(path: str | Path) -> PlanView:
    """The :class:`PlanView` of a plan file (validated by planner.plan)."""
    from planner.plan import load_plan

    plan = load_plan(path)
    return PlanView(
        path=str(path),
        start=plan.horizon.start,
        step_seconds=float(plan.horizon.step_seconds),
        steps=int(plan.horizon.steps),
        step_dues=tuple((s.id, s.due) for s in plan.steps),
    )


def band_from_forecast(path: str | Path) -> Band:
    """The intervals of a forecast file (``kairos forecast --out``)."""
    from planner.forecast.forecaster import load_forecast

    fc = load_forecast(path)
    return Band(
        timestamps=tuple(float(t) for t in fc.timestamps),
        step_seconds=float(fc.step_seconds),
        load_lower=tuple(float(v) for v in fc.load_lower),
        load_upper=tuple(float(v) for v in fc.load_upper),
        mix_lower={c: tuple(float(v) for v in a) for c, a in fc.mix_lower.items()},
        mix_upper={c: tuple(float(v) for v in a) for c, a in fc.mix_upper.items()},
    )


def latest_observation(trace: str | Path) -> Observation | None:
    """The last point of a trace file, or None when the file is absent or empty."""
    from planner.workload.series import load_trace

    if not Path(trace).exists():
        return None
    series = load_trace(trace)
    if len(series) == 0:
        return None
    return Observation(
        timestamp=float(series.timestamps[-1]),
        load=float(series.load[-1]),
        mix={c: float(v[-1]) for c, v in series.mix.items()},
    )


def state_path(state_dir: str | Path, cluster: str, engine: str) -> Path:
    """The autopilot's state file for one cluster and engine."""
    return Path(state_dir) / f"{cluster}-{engine}-autopilot.json"


def load_autopilot_state(path: str | Path) -> dict[str, Any]:
    """Read the autopilot state; an absent file is an empty state."""
    from planner import inputs

    p = Path(path)
    if not p.exists():
        return {"version": STATE_VERSION}
    data = inputs.load_json(p, kind=inputs.FileKind("autopilot state", inputs.STATE.max_bytes))
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: autopilot state must be a JSON object")
    return data


def adopted_plan(state_dir: str | Path, cluster: str, engine: str) -> Path | None:
    """The plan in force for ``cluster``/``engine``: the one the autopilot's state file in
    ``state_dir`` names (``kairos autopilot adopt``, a tick's re-plan); None when none was
    adopted (no state file, or one naming no plan). A paused autopilot's plan is still in
    force (what was applied stays applied).

    Raises
    ------
    ValidationError
        ``state_dir`` is not a directory; the state file is unreadable or not an object;
        its ``plan`` is not a path, or names a file that does not exist (each message names
        the file).
    """
    directory = Path(state_dir)
    if not directory.is_dir():
        raise ValidationError(f"{directory}: no such directory (the autopilot's state "
                              "directory, where adopted plans are recorded)")
    path = state_path(directory, cluster, engine)
    plan = load_autopilot_state(path).get("plan")
    if plan is None or plan == "":
        return None
    if not isinstance(plan, str):
        raise ValidationError(f"{path}: 'plan' must be the plan file's path, "
                              f"got {type(plan).__name__}")
    if not Path(plan).is_file():
        raise ValidationError(f"{path}: the adopted plan {plan} does not exist")
    return Path(plan)


def save_autopilot_state(path: str | Path, state: Mapping[str, Any]) -> None:
    """Write the autopilot state atomically (temp file, then rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump({"version": STATE_VERSION, **state}, handle, indent=2, sort_keys=True)
    os.replace(tmp, p)


def adopt_plan(
    path: str | Path, *, plan: str, forecast: str | None, now: datetime, reasons: Sequence[str]
) -> dict[str, Any]:
    """Make ``plan`` the current plan and record the re-plan time (the rate limit's clock)."""
    state = load_autopilot_state(path)
    state.update(
        {
            "plan": str(plan),
            "forecast": str(forecast) if forecast else None,
            "last_replan_at": now.isoformat(timespec="seconds"),
            "last_replan_reasons": list(reasons),
        }
    )
    save_autopilot_state(path, state)
    return state


def set_paused(
    path: str | Path, *, paused: bool, reason: str | None, now: datetime
) -> dict[str, Any]:
    """Pause or resume the autopilot (collection goes on; no re-plan, no apply)."""
    state = load_autopilot_state(path)
    state["paused"] = paused
    if paused:
        state["paused_at"] = now.isoformat(timespec="seconds")
        state["paused_reason"] = reason or ""
    else:
        state.pop("paused_at", None)
        state.pop("paused_reason", None)
    save_autopilot_state(path, state)
    return state


def append_log(state_dir: str | Path, record: Mapping[str, Any]) -> Path:
    """Append one JSON line to ``<state_dir>/autopilot.log.jsonl``."""
    p = Path(state_dir) / LOG_NAME
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as handle:
        handle.write(json.dumps(dict(record), sort_keys=True, default=str) + "\n")
    return p


# ------------------------------------------------------------ a failed apply
#: What the apply playbooks say when another run holds the engine's apply lock.
LOCK_HELD = "another Kairos run holds"


@dataclass(frozen=True)
class ApplyFailure:
    """What a failed apply means for the step (``kairos autopilot apply-failed``).

    Attributes
    ----------
    outcome
        ``apply-busy``: another run held the engine's apply lock, nothing was attempted and
        the step stays due; ``apply-failed``: the step is recorded as failed, so the next
        ticks hold until a person acts (or the back-off).
    reason
        The apply playbook's own failure message.
    record
        True when the autopilot must record the failure itself: the executor stopped before
        recording it (a plan refused, a pre-flight refusal, a crash).
    """

    outcome: str
    reason: str
    record: bool


def failure_reason(output: str) -> str:
    """The failure message of an ``ansible-playbook`` run from its output.

    The last ``msg:`` of a failed task (YAML result format) or the last ``"msg": ...``
    (JSON), else the last non-empty line.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        for key in ("msg: ", '"msg": '):
            if line.startswith(key):
                return line[len(key):].strip().rstrip(",").strip("'\"")
    return lines[-1] if lines else "no output"


def judge_failed_apply(
    *, step: str, rollout_state: Mapping[str, Any], since: datetime, output: str
) -> ApplyFailure:
    """Classify an apply that exited non-zero (see :class:`ApplyFailure`).

    Parameters
    ----------
    step
        The step the autopilot asked the executor to carry out.
    rollout_state
        The plan's ``<plan>.state.json`` content, read after the apply.
    since
        When this autopilot run started: a record of the step at or after it was written by
        this apply (the executor's rescue), an older one is a previous attempt's.
    output
        The apply playbook's output (its end is enough).
    """
    reason = failure_reason(output)
    rec = rollout_state.get("steps", {}).get(step, {}) if rollout_state else {}
    finished = _parse_time(rec.get("finished_at"))
    recorded_now = finished is not None and finished >= since
    if LOCK_HELD in reason and not recorded_now:
        return ApplyFailure(outcome="apply-busy", reason=reason, record=False)
    return ApplyFailure(outcome="apply-failed", reason=reason, record=not recorded_now)
