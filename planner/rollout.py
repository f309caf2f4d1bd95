"""What the Ansible executor needs from a plan, computed in Python.

The playbooks only carry out what this module decides: which step is due, which
parameters go live and which need a restart, the batches in order, the settings each
node must end up with, and whether the plan's batches are still safe on the live ring.
Execution state (applied / failed steps, per-node timings) lives in a JSON state file
beside the plan, never in the plan itself (docs/plan-file.md).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner.errors import KairosError, ValidationError
from planner.plan import Plan, Step, load_plan
from planner.spaces import get_space
from planner.topology import Ring, check_batch

STATE_VERSION = 1
STATUSES = ("applied", "failed")


class RolloutRefused(KairosError):
    """The rollout must not start; the message says why (step failed, batch unsafe...)."""


@dataclass(frozen=True)
class NodeSettings:
    """Everything a node's configuration files must say after a step.

    Attributes
    ----------
    settings
        Config-file keys (cassandra.yaml / redis.conf) and their formatted values.
    jvm
        JVM settings (Cassandra only), e.g. ``{"heap_size": "1G"}``.
    """

    settings: Mapping[str, Any]
    jvm: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RolloutStep:
    """One plan step as the executor carries it out."""

    plan: str
    engine: str
    step_id: str | None
    status: str  # due | applied | failed | nothing-due
    reason: str
    live: Mapping[str, Any]
    restart: Mapping[str, Any]
    table: Mapping[str, Any]
    batches: tuple[tuple[str, ...], ...]
    nodes: Mapping[str, NodeSettings]
    consistency_level: str
    tolerated_failures: int
    aggressive: bool = False
    state: str = ""

    @property
    def batch_sizes(self) -> list[int]:
        return [len(b) for b in self.batches]

    @property
    def hosts_in_order(self) -> list[str]:
        return [h for b in self.batches for h in b]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["batches"] = [list(b) for b in self.batches]
        data["batch_sizes"] = self.batch_sizes
        data["hosts_in_order"] = self.hosts_in_order
        return data


# ---------------------------------------------------------------- state file
def state_path_for(plan_path: str | Path) -> Path:
    """The state file beside a plan: ``<plan>.state.json``."""
    p = Path(plan_path)
    return p.with_name(p.name + ".state.json")


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a state file; an absent file is an empty state."""
    p = Path(path)
    if not p.exists():
        return {"version": STATE_VERSION, "steps": {}}
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{p}: unreadable rollout state: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), dict):
        raise ValidationError(f"{p}: rollout state must be an object with 'steps'")
    return data


def _seconds(value: Any) -> float:
    """A duration as seconds: a number, or Ansible's ``delta`` form ``H:MM:SS.ffffff``."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if ":" in text:
        hours, minutes, seconds = text.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    try:
        return float(text or 0)
    except ValueError:
        raise ValidationError(f"nodes: not a duration: {value!r}") from None


def normalise_timings(nodes: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per-node phase durations in seconds, with their total (the node's measured T_r)."""
    out: dict[str, dict[str, float]] = {}
    for host, phases in nodes.items():
        if not phases:
            continue
        if not isinstance(phases, Mapping):
            raise ValidationError(f"nodes.{host}: expected phase -> duration")
        timings = {phase: round(_seconds(v), 2) for phase, v in phases.items()}
        timings["total"] = round(sum(timings.values()), 2)
        out[str(host)] = timings
    return out


def record_step(
    path: str | Path,
    *,
    step_id: str,
    status: str,
    nodes: Mapping[str, Any] | None = None,
    error: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Record a step's outcome (atomically: write a temp file, then rename)."""
    if status not in STATUSES:
        raise ValidationError(f"status: must be one of {', '.join(STATUSES)}, got {status!r}")
    p = Path(path)
    state = load_state(p)
    entry = state["steps"].setdefault(step_id, {"attempts": 0})
    entry["attempts"] = int(entry.get("attempts", 0)) + 1
    entry["status"] = status
    entry["finished_at"] = (now or datetime.now(UTC)).isoformat()
    entry["nodes"] = normalise_timings(nodes or {})
    if error:
        entry["error"] = error
    else:
        entry.pop("error", None)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=p.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(tmp, p)
    return state


# ------------------------------------------------------------- step choice
def _due_step(plan: Plan, now: datetime) -> Step | None:
    """The latest step whose due time has come (targets are whole configurations)."""
    due = [s for s in plan.steps if s.due <= now]
    return due[-1] if due else None


def _node_settings(plan: Plan, step: Step, hosts: Iterable[str]) -> dict[str, NodeSettings]:
    """Per-node file settings after ``step``: current config, then the step's target."""
    return {
        host: render_settings_for(
            plan.engine, {**plan.current_config, **step.target, **step.per_node.get(host, {})}
        )
        for host in hosts
    }


def prepare(
    plan_path: str | Path,
    *,
    hosts: Iterable[str],
    state_path: str | Path | None = None,
    step_id: str | None = None,
    now: datetime | None = None,
    retry_failed: bool = False,
) -> RolloutStep:
    """Validate the plan against the inventory's hosts and pick the step to carry out.

    Parameters
    ----------
    plan_path
        The plan file.
    hosts
        The engine's inventory hosts: every batch host must be one of them.
    state_path
        The rollout state file (default ``<plan>.state.json``).
    step_id
        Carry out this step rather than the due one.
    now
        The current time (default: now, UTC).
    retry_failed
        Carry out a step recorded as failed (a person decided to retry it).

    Returns
    -------
    RolloutStep
        ``status`` is ``due`` (carry it out), ``applied`` (nothing to do),
        ``nothing-due`` (no step has come due) or ``failed`` (refused unless retried).
    """
    host_list = list(hosts)
    plan = load_plan(plan_path, known_hosts=host_list)
    state = load_state(state_path or state_path_for(plan_path))
    now = now or datetime.now(UTC)
    if step_id is not None:
        matches = [s for s in plan.steps if s.id == step_id]
        if not matches:
            known = ", ".join(s.id for s in plan.steps) or "none"
            raise ValidationError(f"step: no step {step_id!r} in {plan_path} (steps: {known})")
        step: Step | None = matches[0]
    else:
        step = _due_step(plan, now)
    empty = RolloutStep(
        plan=str(plan_path),
        engine=plan.engine,
        step_id=None,
        status="nothing-due",
        reason=f"no step is due at {now.isoformat()}",
        live={},
        restart={},
        table={},
        batches=(),
        nodes={},
        consistency_level=plan.availability.consistency_level,
        tolerated_failures=plan.availability.tolerated_failures,
    )
    if step is None:
        return empty
    recorded = state["steps"].get(step.id, {})
    status, reason = "due", f"step {step.id} is due since {step.due.isoformat()}"
    if recorded.get("status") == "applied":
        status, reason = "applied", f"step {step.id} was applied at {recorded.get('finished_at')}"
    elif recorded.get("status") == "failed" and not retry_failed:
        status = "failed"
        reason = (
            f"step {step.id} failed at {recorded.get('finished_at')}: "
            f"{recorded.get('error', 'no detail')}; a person must resume or roll it back"
        )
    space = get_space(plan.engine)
    table = {k: step.target[k] for k in step.live if space.parameters[k].location == "table"}
    return RolloutStep(
        plan=str(plan_path),
        engine=plan.engine,
        step_id=step.id,
        status=status,
        reason=reason,
        live={k: step.target[k] for k in step.live if k not in table},
        restart={k: step.target[k] for k in step.restart},
        table=table,
        batches=step.batches if step.restart else (),
        nodes=_node_settings(plan, step, host_list),
        consistency_level=plan.availability.consistency_level,
        tolerated_failures=plan.availability.tolerated_failures,
        aggressive=plan.availability.aggressive,
        state=str(state_path or state_path_for(plan_path)),
    )


def adhoc(
    *,
    engine: str,
    hosts: Iterable[str],
    settings: Mapping[str, Any],
    ring: Ring | None,
    consistency_level: str,
    state_path: str | Path,
    restart_all: bool = False,
    tolerated_failures: int = 0,
    now: datetime | None = None,
) -> RolloutStep:
    """A one-step rollout without a plan: "change these settings safely" or a rolling restart.

    The settings are validated against the engine's space and split into live and restart
    parameters by it; the batches come from the live ring at the given consistency level
    (every host restarts when ``restart_all`` or any restart parameter is set).

    Raises
    ------
    ValidationError
        An unknown parameter or a value outside its range; a host not in the ring.
    KairosError
        No safe batching exists for the consistency level (e.g. RF = CL).
    """
    from planner.topology import safe_batches

    host_list = list(hosts)
    space = get_space(engine)
    config = space.normalize(settings)
    space.validate(config)
    if not config and not restart_all:
        raise ValidationError("settings: give at least one key=value, or ask for a rolling restart")
    table = {k: v for k, v in config.items() if space.parameters[k].location == "table"}
    restart = {k: v for k, v in config.items() if space.parameters[k].change == "restart"}
    live = {k: v for k, v in config.items() if k not in table and k not in restart}
    batches: tuple[tuple[str, ...], ...] = ()
    if restart or restart_all:
        if engine != "cassandra":
            batches = tuple((h,) for h in host_list)
        else:
            if ring is None:
                raise ValidationError("ring: a restart needs the live ring to batch safely")
            unknown = [h for h in host_list if h not in ring]
            if unknown:
                raise ValidationError(f"hosts: not in the live ring: {', '.join(unknown)}")
            batches = safe_batches(
                ring,
                consistency_level=consistency_level,
                tolerated_failures=tolerated_failures,
                hosts=host_list,
            ).batches
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    rendered = render_settings_for(engine, config)
    return RolloutStep(
        plan="",
        engine=engine,
        step_id=f"adhoc-{stamp}",
        status="due",
        reason=("rolling restart" if restart_all and not config else "settings change")
        + f" of {len(host_list)} node(s) in {len(batches)} batch(es) at {consistency_level}",
        live=live,
        restart=restart,
        table=table,
        batches=batches,
        nodes={h: rendered for h in host_list},
        consistency_level=consistency_level,
        tolerated_failures=tolerated_failures,
        state=str(state_path),
    )


def render_settings_for(engine: str, config: Mapping[str, Any]) -> NodeSettings:
    """The file settings of one node for ``config`` (see :class:`NodeSettings`)."""
    from planner.spaces import render_settings

    rendered = render_settings(engine, config)
    if engine == "cassandra":
        jvm = {"heap_size": config["heap_size"]} if "heap_size" in config else {}
        return NodeSettings(settings=dict(rendered.get("cassandra.yaml", {})), jvm=jvm)
    return NodeSettings(settings=dict(rendered.get("redis.conf", {})))


def load_rollout(path: str | Path) -> RolloutStep:
    """Read a RolloutStep written as JSON (``kairos rollout prepare|adhoc --out``)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{path}: unreadable rollout: {exc}") from None
    fields = {f for f in RolloutStep.__dataclass_fields__}
    data = {k: v for k, v in data.items() if k in fields}
    data["batches"] = tuple(tuple(b) for b in data.get("batches", ()))
    data["nodes"] = {h: NodeSettings(**n) for h, n in data.get("nodes", {}).items()}
    return RolloutStep(**data)


def preflight(
    rollout: RolloutStep,
    ring: Ring,
    *,
    down: Iterable[str] = (),
    aggressive: bool = False,
) -> None:
    """Re-check every batch of ``rollout`` against the live ``ring``.

    Raises
    ------
    RolloutRefused
        A batch would leave a replica set below the consistency level, given the
        nodes already ``down``; the message names the nodes and the replica set.
    """
    down_hosts = list(down)
    if aggressive:
        return
    for i, batch in enumerate(rollout.batches):
        try:
            check_batch(
                ring,
                batch,
                down=[h for h in down_hosts if h not in batch],
                consistency_level=rollout.consistency_level,
                tolerated_failures=rollout.tolerated_failures,
            )
        except KairosError as exc:
            already = f" ({', '.join(down_hosts)} down now)" if down_hosts else ""
            raise RolloutRefused(
                f"pre-flight: batch {i + 1} {list(batch)}{already}: {exc}"
            ) from None
