"""What one engine's autopilot tick is given: one JSON document, read into :class:`TickInputs`.

``playbooks/autopilot.yml`` writes the role's settings for one engine as a JSON document
(``<autopilot dir>/ticks/<run>-<engine>.inputs.json``) and runs ``kairos autopilot tick
--inputs FILE``; :func:`load_tick_inputs` reads it. The playbook passes values as the
inventory holds them (numbers may be strings when given with ``-e key=value``, unset
settings are ``""``); every conversion and check is here, and a bad value is refused
naming the file, the field and the problem. The document (docs/autopilot.md, "The tick's
inputs")::

    {"state_dir": ..., "cluster": ..., "engine": "cassandra" | "redis",
     "run": ..., "started_at": ISO 8601 with an offset, "dry_run": bool,
     "hosts": [the engine's inventory hosts],
     "policy": {"stale_fraction", "stale_steps", "min_replan_seconds",
                "failed_backoff_seconds" ("": wait for a person), "max_attempts",
                "deviation_slack"},
     "history": {"trace" ("": export the store), "store", "age", "step_seconds",
                 "per_table", "source"},
     "learning": {"settle_seconds", "window_seconds" ("": 3 steps)},
     "forecast": {"horizon", "model"},
     "plan": {"restart_seconds", "restart_costs", "change_costs", "model", "current",
              "tables", "engine_options", "options"},
     "ring": {"live", "file", "read", "error"},
     "apply": {"state_dir", "vars"},
     "retired": {setting: value}}

``plan.engine_options`` then ``plan.options`` are plan options by their
:class:`planner.planning.pipeline.PlanRequest` names (and the optimiser's: ``method``, ``seed``,
...); the later wins. The options the tick sets itself (the forecast, the ring or hosts,
T_r, the tables, the model, ...) are refused there, naming the setting that gives them.
``retired`` holds settings that are no longer read (``kairos_autopilot_plan_args``): one
that is set is refused, naming what replaces it, rather than silently ignored.

``history.per_table`` (``kairos_autopilot_per_table``, Cassandra): the round is collected per
table too, and a re-plan forecasts each of ``plan.tables`` from its own history in the store
and plans with those forecasts (``kairos plan --table-forecast``). It needs the store's
history (no ``history.trace``), the built-in collector (``history.source``,
``kairos_workload_source``: Prometheus' series are per node) and the tables to plan; anything
else is refused. The playbook checks the document before it collects
(``kairos autopilot tick --check``), so a bad value stops the tick before any node is touched.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from planner import inputs
from planner.autopilot.decisions import Policy
from planner.errors import ValidationError

__all__ = ["PLAN_OPTIONS", "TickInputs", "load_tick_inputs", "read_tick_inputs"]

#: The tick's input document: a few kB; anything larger is not one.
TICK_INPUTS = inputs.FileKind("autopilot tick inputs", 1024 * 1024)


@dataclass(frozen=True)
class TickInputs:
    """What one engine's tick is given (the document :func:`load_tick_inputs` reads).

    ``ring`` is the live ring just read (Cassandra); ``ring_error`` says why it could not be
    read. ``restart_costs`` and ``change_costs`` are the measured cost files the plan charges.
    ``per_table``: collect per table too, and plan with each of ``tables``' own forecast.
    ``plan_options`` are further plan options by their
    :class:`planner.planning.pipeline.PlanRequest` names (checked: :data:`PLAN_OPTIONS`).
    ``apply_vars`` are extra variables for the executor (no secrets).
    """

    state_dir: str
    cluster: str
    engine: str
    run: str
    started_at: datetime
    policy: Policy
    hosts: tuple[str, ...]
    dry_run: bool = False
    trace: str | None = None
    store: str | None = None
    history: str = "7d"
    step_seconds: float = 300.0
    horizon: int = 48
    forecast_model: str = "auto"
    restart_seconds: float = 60.0
    restart_costs: str | None = None
    change_costs: str | None = None
    model: str | None = None
    current: str | None = None
    tables: tuple[str, ...] = ()
    plan_options: Mapping[str, Any] = field(default_factory=dict)
    live_ring: bool = False
    ring: str | None = None
    ring_error: str | None = None
    apply_state_dir: str | None = None
    apply_vars: Mapping[str, Any] = field(default_factory=dict)
    learn_settle_seconds: float = 60.0
    learn_window_seconds: float = 900.0
    per_table: bool = False


# ------------------------------------------------------------------ values
Convert = Callable[[Any, str], Any]


def _bounded(parse: Callable[[str], Any]) -> Convert:
    """A number checked by one of the CLI's bounded types (``inputs.bounded_*``): the
    same bounds as the option; a number given as text (``-e key=value``) is read too."""
    def convert(value: Any, where: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValidationError(f"{where}: expected a number, got {_kind(value)}")
        try:
            return parse(str(value))
        except argparse.ArgumentTypeError as exc:
            raise ValidationError(f"{where}: {exc}") from None
    return convert


def _optional(convert: Convert) -> Convert:
    """``""`` or null: not set (None); anything else as ``convert`` reads it."""
    def read(value: Any, where: str) -> Any:
        return None if value is None or value == "" else convert(value, where)
    return read


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValidationError(f"{where}: expected a string, got {_kind(value)}")
    return str(value)


def _name(value: Any, where: str) -> str:
    text = _text(value, where)
    if not text:
        raise ValidationError(f"{where}: expected a non-empty string")
    return text


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0", "")


def _flag(value: Any, where: str) -> bool:
    """true/false, or the words Ansible's ``bool`` filter reads (``-e kairos_dry_run=true``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValidationError(f"{where}: expected true or false, got {_kind(value)} {value!r}")


def _names(value: Any, where: str) -> tuple[str, ...]:
    items = inputs.sequence(value, where)
    return tuple(_name(item, f"{where}[{i}]") for i, item in enumerate(items))


def _choice(*allowed: str) -> Convert:
    def read(value: Any, where: str) -> str:
        text = _text(value, where)
        if text not in allowed:
            raise ValidationError(f"{where}: expected one of {', '.join(allowed)}, "
                                  f"got {text!r}")
        return text
    return read


def _when(value: Any, where: str) -> datetime:
    text = _name(value, where)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"{where}: not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise ValidationError(f"{where}: give a UTC offset, e.g. 2026-11-21T12:00:00+00:00")
    return when


def _kind(value: Any) -> str:
    names = {type(None): "null", bool: "true/false", dict: "a mapping", list: "a list",
             str: "a string", int: "an integer", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _unit(*, closed: bool) -> Convert:
    """A number in [0, 1] (``closed``) or [0, 1), as ``kairos plan``'s weights."""
    parse = _bounded(inputs.bounded_float(0.0, 1.0))

    def read(value: Any, where: str) -> float:
        x = float(parse(value, where))
        if not closed and x == 1.0:
            raise ValidationError(f"{where}: 1 is out of range: must be a number in [0, 1)")
        return x
    return read


def _plan_options() -> dict[str, Convert]:
    """The plan options an autopilot setting may give, each with ``kairos plan``'s bounds."""
    from planner.planning.costbenefit import SERVED_MODES
    from planner.planning.pipeline import MAX_SAMPLES
    from planner.planning.risk import RISK_MODES
    from planner.topology.ring import CONSISTENCY_LEVELS

    samples = _bounded(inputs.bounded_int(0, MAX_SAMPLES))
    return {
        "cl": lambda value, where: _choice(*CONSISTENCY_LEVELS)(_text(value, where).upper(),
                                                                where),
        "rf": _bounded(inputs.RF),
        "tolerate": _bounded(inputs.TOLERATE), "aggressive": _flag,
        "survivor_penalty": _bounded(inputs.SURVIVOR_PENALTY),
        "compaction_seconds": _bounded(inputs.DURATION), "served": _choice(*SERVED_MODES),
        "headroom_weight": _unit(closed=True), "latency_weight": _unit(closed=True),
        "confidence": _unit(closed=False), "scenarios": samples, "risk": _choice(*RISK_MODES),
        "season_length": _optional(_bounded(inputs.SEASON)), "samples": samples,
        "capacity_margin": _unit(closed=False),
        "scale_in_after_seconds": _bounded(inputs.bounded_float(0.0, 1e9, lo_open=True)),
        "method": _choice("ga", "dp"), "seed": _bounded(inputs.SEED),
        "population": _bounded(inputs.POPULATION),
        "generations": _bounded(inputs.GENERATIONS), "searches": _bounded(inputs.SEARCHES),
        "workers": _bounded(inputs.PROCESSES), "durability_floor": _floor,
        "memory_curve": _curve,
    }


def _curve(value: Any, where: str) -> str:
    """A measured memory curve file (planner.model.memory_curve), read and checked now."""
    from planner.model.memory_curve import load_curve

    path = _text(value, where)
    try:
        load_curve(path)
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from None
    return path


def _floor(value: Any, where: str) -> dict[str, Any] | None:
    """Redis' durability floor as the inventory declares it (checked now, planned on as
    given); an empty mapping: the running configuration's durability."""
    from planner.model.durability import parse_floor

    floor = dict(inputs.mapping(value, where))
    if floor:
        parse_floor(floor, where=where)
    return floor or None


#: The plan options the tick sets itself, and the setting that gives each.
TICK_OWNED = {
    "forecast": "the tick's own forecast", "trace": "kairos_autopilot_trace",
    "source": "the tick's own forecast", "engine": "the engine being ticked",
    "cluster": "kairos_cluster_name", "current": "kairos_autopilot_current",
    "model": "kairos_cassandra_model_file / kairos_redis_model_file",
    "ring": "the live ring", "hosts": "the engine's inventory group",
    "restart_seconds": "kairos_autopilot_restart_seconds",
    "restart_seconds_from": "the state directory", "restart_costs":
    "kairos_cassandra_restart_costs_file", "change_costs": "kairos_cassandra_change_costs_file",
    "horizon": "kairos_autopilot_horizon", "forecast_model": "kairos_autopilot_forecast_model",
    "tables": "kairos_tables", "hold_restarts": "the learning loop",
    "table_forecasts": "kairos_autopilot_per_table (the tick forecasts each table's history)",
}

#: The names :func:`_plan_options` checks (documented in docs/autopilot.md).
PLAN_OPTIONS = ("aggressive", "capacity_margin", "cl", "compaction_seconds", "confidence",
                "durability_floor", "generations", "headroom_weight", "latency_weight",
                "memory_curve", "method", "population", "rf", "risk", "samples",
                "scale_in_after_seconds", "scenarios", "season_length", "searches", "seed",
                "served", "survivor_penalty", "tolerate", "workers")


def _options(value: Any, where: str) -> dict[str, Any]:
    """Plan options, each checked; a tick-owned or unknown one is refused."""
    known = _plan_options()
    out: dict[str, Any] = {}
    for key, raw in inputs.mapping(value, where).items():
        at = f"{where}.{key}"
        if key in TICK_OWNED:
            raise ValidationError(f"{at}: set by the tick, not a plan option here "
                                  f"(give {TICK_OWNED[key]})")
        if key not in known:
            raise ValidationError(f"{at}: unknown plan option; expected one of "
                                  f"{', '.join(sorted(known))}")
        out[key] = known[key](raw, at)
    return out


# ----------------------------------------------------------------- the document
_SCHEMA: dict[str, tuple[str, ...]] = {
    "": ("state_dir", "cluster", "engine", "run", "started_at", "dry_run", "hosts", "policy",
         "history", "learning", "forecast", "plan", "ring", "apply", "retired"),
    "policy": ("stale_fraction", "stale_steps", "min_replan_seconds", "failed_backoff_seconds",
               "max_attempts", "deviation_slack"),
    "history": ("trace", "store", "age", "step_seconds", "per_table", "source"),
    "learning": ("settle_seconds", "window_seconds"),
    "forecast": ("horizon", "model"),
    "plan": ("restart_seconds", "restart_costs", "change_costs", "model", "current", "tables",
             "engine_options", "options"),
    "ring": ("live", "file", "read", "error"),
    "apply": ("state_dir", "vars"),
}
_REQUIRED = ("state_dir", "cluster", "engine", "run", "started_at", "hosts")
#: Settings no longer read, and what replaces each.
RETIRED = {
    "kairos_autopilot_plan_args": "kairos_autopilot_plan_options, a mapping of plan options "
    "such as {method: dp, served: capacity}",
    "kairos_autopilot_redis_plan_args": "kairos_autopilot_redis_plan_options, a mapping of "
    "plan options such as {method: dp}",
}


class _Doc:
    """The document's groups, with closed keys; ``get`` reads one value by its path."""

    def __init__(self, data: Any) -> None:
        self.groups: dict[str, Mapping[str, Any]] = {}
        top = inputs.mapping(data, "the document")
        inputs.closed_keys(top, "", allowed=_SCHEMA[""], required=_REQUIRED)
        self.groups[""] = top
        for name, keys in _SCHEMA.items():
            if name:
                group = inputs.mapping(top.get(name, {}), name)
                inputs.closed_keys(group, name, allowed=keys)
                self.groups[name] = group

    def get(self, path: str, convert: Convert, default: Any = None) -> Any:
        group, _, key = path.rpartition(".")
        values = self.groups[group]
        return convert(values[key], path) if key in values else default


def _retired(doc: _Doc) -> None:
    retired = inputs.mapping(doc.groups[""].get("retired") or {}, "retired")
    for name, value in retired.items():
        if value not in (None, "", [], {}):
            instead = RETIRED.get(name, "nothing: remove it")
            raise ValidationError(f"retired.{name}: no longer read; give {instead}")


def _policy(doc: _Doc) -> Policy:
    return Policy(
        stale_fraction=doc.get("policy.stale_fraction", _bounded(inputs.FRACTION), 0.25),
        stale_steps=doc.get("policy.stale_steps", _bounded(inputs.bounded_int(0, 10_000)), 2),
        min_replan_seconds=doc.get("policy.min_replan_seconds",
                                   _bounded(inputs.bounded_float(0.0, 30 * 86400.0)), 600.0),
        failed_backoff_seconds=doc.get(
            "policy.failed_backoff_seconds",
            _optional(_bounded(inputs.bounded_float(0.0, 30 * 86400.0)))),
        max_attempts=doc.get("policy.max_attempts", _bounded(inputs.bounded_int(1, 1000)), 3),
        deviation_slack=doc.get("policy.deviation_slack",
                                _bounded(inputs.bounded_float(0.0, 1e6)), 0.0),
    )


def _ring(doc: _Doc) -> dict[str, Any]:
    """Plan on the live ring (Cassandra): the file just read, or why it could not be."""
    live = doc.get("ring.live", _flag, False)
    if not live:
        return {"live_ring": False}
    ring_file = doc.get("ring.file", _optional(_text))
    if doc.get("ring.read", _flag, False) and ring_file:
        return {"live_ring": True, "ring": ring_file}
    return {"live_ring": True,
            "ring_error": doc.get("ring.error", _optional(_text)) or "no ring was read"}


def _trace_or_store(doc: _Doc) -> dict[str, Any]:
    """The trace file named, else the store to export the history from."""
    trace = doc.get("history.trace", _optional(_text))
    return {"trace": trace} if trace else {"store": doc.get("history.store", _optional(_text))}


def _per_table(doc: _Doc, *, engine: str, tables: tuple[str, ...]) -> bool:
    """Whether to collect and plan per table; refused where it cannot work."""
    from planner.engines import get_engine
    from planner.workload.collect import SOURCES

    per_table = bool(doc.get("history.per_table", _flag, False))
    source = doc.get("history.source", _optional(_choice(*SOURCES))) or "builtin"
    if not per_table:
        return False
    where = "history.per_table"
    if not get_engine(engine).tables:
        raise ValidationError(f"{where}: {engine} has no tables to plan per table")
    if doc.get("history.trace", _optional(_text)):
        raise ValidationError(f"{where}: plans each table from the store's history; "
                              "history.trace (kairos_autopilot_trace) names a trace file, "
                              "which holds the cluster's alone")
    if source != "builtin":
        raise ValidationError(f"{where}: needs the built-in collector; history.source "
                              f"(kairos_workload_source) is {source}, whose series are per "
                              "node")
    if not tables:
        raise ValidationError(f"{where}: no table to plan per table: plan.tables "
                              "(kairos_tables) names none")
    return True


def _plan(doc: _Doc) -> dict[str, Any]:
    options = doc.get("plan.engine_options", _optional(_options)) or {}
    options |= doc.get("plan.options", _optional(_options)) or {}
    return {
        "restart_seconds": doc.get("plan.restart_seconds", _bounded(inputs.DURATION), 60.0),
        "restart_costs": doc.get("plan.restart_costs", _optional(_text)),
        "change_costs": doc.get("plan.change_costs", _optional(_text)),
        "model": doc.get("plan.model", _optional(_text)),
        "current": doc.get("plan.current", _optional(_text)),
        "tables": doc.get("plan.tables", _optional(_names)) or (),
        "plan_options": options,
    }


def read_tick_inputs(data: Any) -> TickInputs:
    """:class:`TickInputs` from a parsed document; ValidationError names the field."""
    doc = _Doc(data)
    _retired(doc)
    step = doc.get("history.step_seconds", _bounded(inputs.DURATION), 300.0)
    window = doc.get("learning.window_seconds", _optional(_bounded(inputs.DURATION)))
    history = doc.get("history.age", _name, "7d")
    from planner.workload.store import parse_since

    parse_since(history, field="history.age")  # refused here, not when the store is read
    engine = doc.get("engine", _choice("cassandra", "redis"))
    plan = _plan(doc)
    return TickInputs(
        state_dir=doc.get("state_dir", _name), cluster=doc.get("cluster", _name),
        engine=engine, run=doc.get("run", _name),
        started_at=doc.get("started_at", _when), policy=_policy(doc),
        hosts=doc.get("hosts", _names), dry_run=doc.get("dry_run", _flag, False),
        history=history, step_seconds=step,
        horizon=doc.get("forecast.horizon", _bounded(inputs.bounded_int(2, inputs.MAX_HORIZON)),
                        48),
        forecast_model=doc.get("forecast.model", _name, "auto"),
        apply_state_dir=doc.get("apply.state_dir", _optional(_text)),
        apply_vars=dict(doc.get("apply.vars", _optional(inputs.mapping)) or {}),
        learn_settle_seconds=doc.get("learning.settle_seconds", _bounded(inputs.DURATION),
                                     60.0),
        learn_window_seconds=window if window is not None else 3 * step,
        per_table=_per_table(doc, engine=engine, tables=plan["tables"]),
        **_trace_or_store(doc), **plan, **_ring(doc),
    )


def load_tick_inputs(path: str | Path) -> TickInputs:
    """Read the tick's input document (``kairos autopilot tick --inputs FILE``).

    Raises
    ------
    ValidationError
        An unreadable file, or a field that is missing, unknown or wrong, the message
        naming the file, the field and the problem.
    """
    data = inputs.load_json(path, kind=TICK_INPUTS)
    with inputs.in_file(path):
        return read_tick_inputs(data)
