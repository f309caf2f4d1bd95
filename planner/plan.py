"""The plan file: frozen values, YAML load/save, and the validator.

The contract is docs/plan-file.md. :func:`validate_plan` checks a parsed document and
raises :class:`planner.errors.ValidationError` naming the field path and the reason,
e.g. ``steps[1].batches[0][2]: unknown host 'cass9'``; :func:`load_plan` reads, validates
and returns a :class:`Plan`; :func:`save_plan` writes one (validating it first).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from planner.engines import ENGINES, get_engine
from planner.errors import KairosError, ValidationError
from planner.topology.ring import CONSISTENCY_LEVELS

__all__ = [
    "ENGINES",
    "GAINS",
    "KIND",
    "SCHEMA_VERSION",
    "TABLE_NAME",
    "Availability",
    "Expected",
    "Horizon",
    "Plan",
    "SpaceLike",
    "Step",
    "check_tables",
    "load_plan",
    "plan_from_dict",
    "save_plan",
    "validate_plan",
]

SCHEMA_VERSION = 1
KIND = "kairos-plan"
#: Relative tolerance for ``net_ops == benefit_ops - cost_ops``.
NET_TOLERANCE = 1e-6
#: ``keyspace.table`` with Cassandra's unquoted identifiers (letters, digits, underscores).
TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")


class SpaceLike(Protocol):
    """What the validator needs of a configuration space (planner.model.spaces.ConfigSpace)."""

    def validate(self, config: Mapping[str, Any]) -> Any: ...

    def defaults(self) -> Mapping[str, Any]: ...

    def restart_params(self, keys: Iterable[str]) -> Iterable[str]: ...

    def live_params(self, keys: Iterable[str]) -> Iterable[str]: ...


@dataclass(frozen=True)
class Horizon:
    """The planning window: ``steps`` intervals of ``step_seconds`` from ``start``."""

    start: datetime
    step_seconds: float
    steps: int

    @property
    def end(self) -> datetime:
        """When the horizon ends."""
        return self.start + timedelta(seconds=self.step_seconds * self.steps)

    def has_come_due(self, due: datetime, now: datetime) -> bool:
        """Whether a step of this horizon due at ``due`` is due at ``now``.

        A plan starts at the end of the bin its trace ended in, the bin in which it was made:
        a step due at the start is the plan's "change now", due from the start of that bin.
        Waiting for the boundary would leave it to the next tick, a whole tick period late.
        Any later step is due when its time has come.
        """
        lead = timedelta(seconds=self.step_seconds) if due == self.start else timedelta(0)
        return due <= now + lead


@dataclass(frozen=True)
class Availability:
    """The availability requirement the batches respect."""

    consistency_level: str
    tolerated_failures: int = 0
    aggressive: bool = False


#: What a step gains: served work at saturation, or latency/headroom below it.
GAINS = ("throughput", "headroom")


@dataclass(frozen=True)
class Expected:
    """Expected operations gained and lost by one step.

    The optional fields (absent from older plans: None) say what the step gains
    (``gains``: ``throughput`` when the configuration before it is saturated by the
    offered load, else ``headroom``), the served work it adds (``served_ops``), the
    utilisation at the offered load before and after it, and P(gain > cost) over the
    planner's scenarios (``p_gain``).
    """

    benefit_ops: float
    cost_ops: float
    net_ops: float
    p_gain: float | None = None
    gains: str | None = None
    served_ops: float | None = None
    utilisation_before: float | None = None
    utilisation_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data; optional fields only when set."""
        out: dict[str, Any] = {"benefit_ops": float(self.benefit_ops),
                               "cost_ops": float(self.cost_ops),
                               "net_ops": float(self.net_ops)}
        if self.gains is not None:
            out["gains"] = self.gains
        if self.served_ops is not None:
            out["served_ops"] = float(self.served_ops)
        if self.utilisation_before is not None and self.utilisation_after is not None:
            out["utilisation"] = {"before": float(self.utilisation_before),
                                  "after": float(self.utilisation_after)}
        if self.p_gain is not None:
            out["p_gain"] = float(self.p_gain)
        return out


@dataclass(frozen=True)
class Step:
    """One reconfiguration step of a plan."""

    id: str
    due: datetime
    until: datetime
    target: Mapping[str, Any]
    live: tuple[str, ...]
    restart: tuple[str, ...]
    batches: tuple[tuple[str, ...], ...]
    expected: Expected
    per_node: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``keyspace.table`` names a table-level change (``compaction``) applies to.
    tables: tuple[str, ...] = ()
    #: ``keyspace.table`` -> table-level values that differ from ``target`` for that table
    #: (issue 42: a table's own compaction); each table is one of ``tables``.
    per_table: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """A validated reconfiguration plan (see docs/plan-file.md)."""

    cluster: str
    engine: str
    created_at: datetime
    horizon: Horizon
    provenance: Mapping[str, Any]
    availability: Availability
    current_config: Mapping[str, Any]
    steps: tuple[Step, ...]
    schema_version: int = SCHEMA_VERSION
    kind: str = KIND

    @property
    def expected_net_ops(self) -> float:
        """Sum of the steps' expected net gains."""
        return float(sum(s.expected.net_ops for s in self.steps))

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain YAML-ready data (times as ISO 8601 strings)."""
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "cluster": self.cluster,
            "engine": self.engine,
            "created_at": self.created_at.isoformat(),
            "horizon": {
                "start": self.horizon.start.isoformat(),
                "step_seconds": _plain(self.horizon.step_seconds),
                "steps": self.horizon.steps,
            },
            "provenance": _plain(dict(self.provenance)),
            "availability": {
                "consistency_level": self.availability.consistency_level,
                "tolerated_failures": self.availability.tolerated_failures,
                "aggressive": self.availability.aggressive,
            },
            "current_config": _plain(dict(self.current_config)),
            "steps": [
                {
                    "id": s.id,
                    "due": s.due.isoformat(),
                    "until": s.until.isoformat(),
                    "target": _plain(dict(s.target)),
                    "per_node": _plain({h: dict(v) for h, v in s.per_node.items()}),
                    **({"tables": list(s.tables)} if s.tables else {}),
                    **({"per_table": _plain({t: dict(v) for t, v in s.per_table.items()})}
                       if s.per_table else {}),
                    "live": list(s.live),
                    "restart": list(s.restart),
                    "batches": [list(b) for b in s.batches],
                    "expected": s.expected.to_dict(),
                }
                for s in self.steps
            ],
        }


def _plain(value: Any) -> Any:
    """Convert numpy scalars and tuples to plain YAML-safe Python values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return value.item()
    return value


# ------------------------------------------------------------------ validation
def _fail(path: str, reason: str) -> ValidationError:
    return ValidationError(f"{path}: {reason}")


def _mapping(data: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise _fail(path, f"expected a mapping, got {type(data).__name__}")
    return data


def _require(data: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in data:
        raise _fail(f"{path}.{key}" if path else key, "missing")
    return data[key]


def _time(value: Any, path: str) -> datetime:
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise _fail(path, f"not an ISO 8601 time: {value!r}") from None
    else:
        raise _fail(path, f"expected an ISO 8601 time string, got {type(value).__name__}")
    if when.tzinfo is None:
        raise _fail(path, f"time {value!r} has no UTC offset")
    return when


def _number(value: Any, path: str, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, f"expected a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise _fail(path, f"expected a finite number, got {value!r}")
    if minimum is not None and x < minimum:
        raise _fail(path, f"must be >= {minimum:g}, got {value!r}")
    return x


def _int(value: Any, path: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {value!r}")
    if value < minimum:
        raise _fail(path, f"must be >= {minimum}, got {value}")
    return value


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _fail(path, f"expected a list, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise _fail(f"{path}[{i}]", f"expected a non-empty string, got {item!r}")
    if len(set(value)) != len(value):
        dup = next(v for v in value if value.count(v) > 1)
        raise _fail(path, f"{dup!r} listed twice")
    return tuple(value)


def _space_for(engine: str) -> SpaceLike:
    try:
        from planner.model.spaces import get_space
    except ImportError as exc:  # pragma: no cover - only while part 1 is missing
        raise KairosError(
            f"cannot check configurations: planner.model.spaces is unavailable ({exc})"
        ) from None
    return get_space(engine)


def _check_config(space: SpaceLike, config: Mapping[str, Any], path: str) -> dict[str, Any]:
    """Validate ``config`` and return it in canonical form (when the space normalises)."""
    try:
        space.validate(config)
        normalize = getattr(space, "normalize", None)
        return dict(normalize(config)) if callable(normalize) else dict(config)
    except ValidationError as exc:
        raise _fail(path, str(exc)) from None


def _restart_keys(
    space: SpaceLike, keys: Sequence[str], before: Mapping[str, Any], after: Mapping[str, Any]
) -> set[str]:
    """Keys whose change from ``before`` to ``after`` needs a restart.

    Uses ``planner.model.spaces.change_kind`` (per-transition rules such as a live row-cache
    resize) when ``space`` is one of planner.model.spaces' spaces, else ``space.restart_params``.
    """
    engine = getattr(space, "engine", None)
    try:
        from planner.model.spaces import ConfigSpace, change_kind
    except ImportError:  # pragma: no cover - only while part 1 is missing
        return set(space.restart_params(keys))
    if isinstance(space, ConfigSpace) and engine is not None:
        return {
            k for k in keys if change_kind(engine, k, before.get(k), after.get(k)) == "restart"
        }
    return set(space.restart_params(keys))


def _table_changing_keys(
    space: SpaceLike, keys: Sequence[str], before: Mapping[str, Any], after: Mapping[str, Any]
) -> set[str]:
    """Keys whose change from ``before`` to ``after`` changes the tables' schema.

    Table options, and (``planner.model.spaces.changes_tables``) Cassandra's row cache turned on
    or off, which sets the tables' ``caching``.
    """
    engine = getattr(space, "engine", None)
    from planner.model.spaces import ConfigSpace, changes_tables

    if isinstance(space, ConfigSpace) and engine is not None:
        return {k for k in keys if changes_tables(engine, k, before.get(k), after.get(k))}
    return set(_table_keys(space, keys))


def plan_from_dict(
    data: Any,
    *,
    known_hosts: Iterable[str] | None = None,
    space: SpaceLike | None = None,
) -> Plan:
    """Validate a parsed plan document and return it as a :class:`Plan`.

    Parameters
    ----------
    data
        The parsed YAML document.
    known_hosts
        The inventory's hosts of the engine. When given, every batch host must be one
        of them and every one of them must appear in exactly one batch of a step that
        restarts anything.
    space
        The engine's configuration space; default ``planner.model.spaces.get_space(engine)``.

    Raises
    ------
    ValidationError
        Naming the first failing field path and why.
    """
    doc = _mapping(data, "plan")
    engine, cluster, created_at = _header(doc)
    horizon = _horizon(doc)
    provenance = _provenance(doc)
    availability = _availability(doc)
    if space is None:
        space = _space_for(engine)
    current = dict(_mapping(_require(doc, "current_config", ""), "current_config"))
    prev = _check_config(space, {**dict(space.defaults()), **current}, "current_config")
    prev0 = prev
    hosts = {str(h) for h in known_hosts} if known_hosts is not None else None

    raw_steps = _require(doc, "steps", "")
    if not isinstance(raw_steps, list):
        raise _fail("steps", f"expected a list, got {type(raw_steps).__name__}")
    steps: list[Step] = []
    ids: set[str] = set()
    for i, raw in enumerate(raw_steps):
        step, prev = _parse_step(
            raw,
            f"steps[{i}]",
            space=space,
            hosts=hosts,
            horizon=horizon,
            ids=ids,
            prev=prev,
            prev_nodes=steps[-1].per_node if steps else {},
            prev_tables=steps[-1].per_table if steps else {},
            last_due=steps[-1].due if steps else None,
        )
        ids.add(step.id)
        steps.append(step)
    _check_durability(engine, provenance, prev0, steps)
    for i, s in enumerate(steps):
        nxt = steps[i + 1].due if i + 1 < len(steps) else horizon.end
        if s.until != nxt:
            what = "the next step's due time" if i + 1 < len(steps) else "the end of the horizon"
            raise _fail(
                f"steps[{i}].until", f"{s.until.isoformat()} must equal {what} ({nxt.isoformat()})"
            )
    return Plan(
        cluster=cluster,
        engine=engine,
        created_at=created_at,
        horizon=horizon,
        provenance=provenance,
        availability=availability,
        current_config={k: prev0[k] for k in current},
        steps=tuple(steps),
    )


def _check_durability(
    engine: str, provenance: Mapping[str, Any], current: Mapping[str, Any],
    steps: Sequence[Step],
) -> None:
    """Redis: no step (nor a node's override) runs below the durability floor.

    The floor is the plan's ``provenance.durability_floor.floor`` (what ``kairos plan``
    searched above), else the durability of ``current_config`` (planner.model.durability.floor_of:
    what the nodes run). ``current`` is complete (defaults filled in).
    """
    if not get_engine(engine).durability_floor:
        return
    from planner.model.durability import floor_of, parse_floor, plan_violations

    rec = provenance.get("durability_floor")
    if rec is None:
        floor = floor_of(current, source="the durability of current_config")
    else:
        where = "provenance.durability_floor"
        rec = _mapping(rec, where)
        floor = parse_floor(_require(rec, "floor", where), where=f"{where}.floor",
                            source=f"{where}: {rec.get('source', 'declared')}")
    for field_path, problem in plan_violations(floor, current, steps):
        raise _fail(field_path, problem)


def _header(doc: Mapping[str, Any]) -> tuple[str, str, datetime]:
    """``schema_version``, ``kind``, ``engine``, ``cluster`` and ``created_at``."""
    version = _require(doc, "schema_version", "")
    if version != SCHEMA_VERSION:
        raise _fail(
            "schema_version", f"unsupported version {version!r} (expected {SCHEMA_VERSION})"
        )
    kind = _require(doc, "kind", "")
    if kind != KIND:
        raise _fail("kind", f"expected {KIND!r}, got {kind!r}")
    engine = _require(doc, "engine", "")
    if engine not in ENGINES:
        raise _fail("engine", f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    cluster = _require(doc, "cluster", "")
    if not isinstance(cluster, str) or not cluster:
        raise _fail("cluster", "expected a non-empty string")
    return str(engine), cluster, _time(_require(doc, "created_at", ""), "created_at")


def _horizon(doc: Mapping[str, Any]) -> Horizon:
    hz = _mapping(_require(doc, "horizon", ""), "horizon")
    horizon = Horizon(
        start=_time(_require(hz, "start", "horizon"), "horizon.start"),
        step_seconds=_number(_require(hz, "step_seconds", "horizon"), "horizon.step_seconds"),
        steps=_int(_require(hz, "steps", "horizon"), "horizon.steps", minimum=1),
    )
    if horizon.step_seconds <= 0:
        raise _fail("horizon.step_seconds", f"must be > 0, got {horizon.step_seconds:g}")
    # Bounds of `kairos plan` (planner.inputs): beyond them the horizon's end overflows
    # datetime (a traceback, not a message).
    from planner import inputs

    if horizon.step_seconds > inputs.MAX_STEP_SECONDS:
        raise _fail("horizon.step_seconds",
                    f"{horizon.step_seconds:g} is over {inputs.MAX_STEP_SECONDS:g} (a week)")
    if horizon.steps > inputs.MAX_HORIZON:
        raise _fail("horizon.steps", f"{horizon.steps} is over {inputs.MAX_HORIZON}")
    return horizon


def _provenance(doc: Mapping[str, Any]) -> dict[str, Any]:
    provenance = _mapping(doc.get("provenance", {}), "provenance")
    opt = provenance.get("optimiser")
    if opt is not None:
        opt = _mapping(opt, "provenance.optimiser")
        if "seed" in opt and opt["seed"] is not None:
            _int(opt["seed"], "provenance.optimiser.seed", minimum=0)
    return dict(provenance)


def _availability(doc: Mapping[str, Any]) -> Availability:
    av = _mapping(_require(doc, "availability", ""), "availability")
    cl = _require(av, "consistency_level", "availability")
    if not isinstance(cl, str) or cl.upper() not in CONSISTENCY_LEVELS:
        raise _fail(
            "availability.consistency_level",
            f"unknown consistency level {cl!r}; expected one of {', '.join(CONSISTENCY_LEVELS)}",
        )
    aggressive = av.get("aggressive", False)
    if not isinstance(aggressive, bool):
        raise _fail("availability.aggressive", f"expected true or false, got {aggressive!r}")
    return Availability(
        consistency_level=cl.upper(),
        tolerated_failures=_int(
            av.get("tolerated_failures", 0), "availability.tolerated_failures", minimum=0
        ),
        aggressive=aggressive,
    )


def _parse_step(
    raw: Any,
    p: str,
    *,
    space: SpaceLike,
    hosts: set[str] | None,
    horizon: Horizon,
    ids: set[str],
    prev: Mapping[str, Any],
    prev_nodes: Mapping[str, Mapping[str, Any]],
    last_due: datetime | None,
    prev_tables: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[Step, dict[str, Any]]:
    """One step at path ``p``, checked against the configuration before it.

    Returns the step and the cluster-wide configuration after it (the next step's ``prev``).
    """
    st = _mapping(raw, p)
    sid = _require(st, "id", p)
    if not isinstance(sid, str) or not sid:
        raise _fail(f"{p}.id", f"expected a non-empty string, got {sid!r}")
    if sid in ids:
        raise _fail(f"{p}.id", f"duplicate step id {sid!r}")
    due, until = _step_times(st, p, horizon, last_due)
    target_raw = dict(_mapping(_require(st, "target", p), f"{p}.target"))
    config = _check_config(space, {**prev, **target_raw}, f"{p}.target")
    per_node = _per_node(st, p, space=space, config=config, hosts=hosts)
    per_table = _per_table(st, p, space=space, config=config)
    changed, needs_restart, table_changes, table_changing = _changes(
        space, prev, config, (prev_nodes, per_node), (prev_tables or {}, per_table))
    live, restart = _live_restart(st, p, changed, needs_restart,
                                  _reencode_keys(space, changed))
    batches = _batches(st.get("batches", []), f"{p}.batches", hosts)
    if restart and not batches:
        raise _fail(f"{p}.batches", "empty, but the step restarts parameters")
    if batches and not restart:
        raise _fail(f"{p}.batches", "must be empty when nothing needs a restart")
    if batches and hosts is not None:
        absent = sorted(hosts - {h for b in batches for h in b})
        if absent:
            raise _fail(f"{p}.batches", f"host {absent[0]!r} is in no batch")
    step = Step(
        id=sid,
        due=due,
        until=until,
        target={k: config[k] for k in target_raw},
        per_node=per_node,
        live=live,
        restart=restart,
        batches=batches,
        expected=_expected(st, p),
        tables=_step_tables(st, p, table_changes),
        per_table=per_table,
    )
    _check_per_table_listed(step, p, table_changing)
    return step, config


def _step_times(
    st: Mapping[str, Any], p: str, horizon: Horizon, last_due: datetime | None
) -> tuple[datetime, datetime]:
    due = _time(_require(st, "due", p), f"{p}.due")
    until = _time(_require(st, "until", p), f"{p}.until")
    if due < horizon.start or due >= horizon.end:
        raise _fail(
            f"{p}.due",
            f"{due.isoformat()} is outside the horizon "
            f"[{horizon.start.isoformat()}, {horizon.end.isoformat()})",
        )
    if last_due is not None and due <= last_due:
        raise _fail(f"{p}.due", f"{due.isoformat()} is not after the previous step's due time")
    if until <= due:
        raise _fail(f"{p}.until", "must be after due")
    if until > horizon.end:
        raise _fail(f"{p}.until", "is after the end of the horizon")
    return due, until


def _per_node(
    st: Mapping[str, Any],
    p: str,
    *,
    space: SpaceLike,
    config: Mapping[str, Any],
    hosts: set[str] | None,
) -> dict[str, dict[str, Any]]:
    """The step's per-host overrides, each checked on top of the step's configuration."""
    per_node_raw = _mapping(st.get("per_node", {}) or {}, f"{p}.per_node")
    per_node: dict[str, dict[str, Any]] = {}
    for host, overrides in per_node_raw.items():
        hp = f"{p}.per_node.{host}"
        if hosts is not None and host not in hosts:
            raise _fail(hp, f"unknown host {host!r}")
        node_cfg = _check_config(space, {**config, **dict(_mapping(overrides, hp))}, hp)
        # A table option lives in the schema, which every node shares: one value per table.
        table = _table_keys(space, overrides)
        if table:
            raise _fail(
                f"{hp}.{table[0]}",
                "a table setting is cluster-wide (the nodes share the tables' schema); "
                "set it in target (or per_table, for one table), not per node",
            )
        per_node[str(host)] = {k: node_cfg[k] for k in overrides}
    return per_node


def _per_table(
    st: Mapping[str, Any], p: str, *, space: SpaceLike, config: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The step's per-table overrides: table settings only, each checked on top of the
    step's configuration."""
    raw = _mapping(st.get("per_table", {}) or {}, f"{p}.per_table")
    check_tables(list(raw), f"{p}.per_table")
    per_table: dict[str, dict[str, Any]] = {}
    for table, overrides in raw.items():
        tp = f"{p}.per_table.{table}"
        overrides = dict(_mapping(overrides, tp))
        if not overrides:
            raise _fail(tp, "empty: give the table settings that differ, or leave the table out")
        node_level = sorted(set(overrides) - set(_table_keys(space, overrides)))
        if node_level:
            raise _fail(f"{tp}.{node_level[0]}", (
                "not a table setting: a table can override only what lives in its schema "
                f"({', '.join(_table_keys(space, getattr(space, 'parameters', {}))) or 'none'})"))
        table_cfg = _check_config(space, {**config, **overrides}, tp)
        per_table[str(table)] = {k: table_cfg[k] for k in overrides}
    return per_table


def _check_per_table_listed(step: Step, p: str, changing: Iterable[str]) -> None:
    """Every table whose own settings change is one the step names: the executor ALTERs
    the tables named, and a table returning to the cluster-wide value changes too."""
    for table in sorted(set(step.per_table) | set(changing)):
        if step.tables and table not in step.tables:
            where = "per_table" if table in step.per_table else "the previous step's per_table"
            raise _fail(f"{p}.tables",
                        f"{table!r} is in {where} but not in tables; name it there too")


def _overridden(
    prev: Mapping[str, Any], config: Mapping[str, Any],
    prev_over: Mapping[str, Mapping[str, Any]], over: Mapping[str, Mapping[str, Any]],
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(name, before, after)`` for each host or table overridden now or in the previous
    step: an override holds for its step only, so one the step drops returns to
    ``config``, which is a change."""
    return [(name, {**prev, **prev_over.get(name, {})}, {**config, **over.get(name, {})})
            for name in sorted(set(over) | set(prev_over))]


def _changes(
    space: SpaceLike,
    prev: Mapping[str, Any],
    config: Mapping[str, Any],
    nodes: tuple[Mapping[str, Mapping[str, Any]], Mapping[str, Mapping[str, Any]]],
    tables: tuple[Mapping[str, Mapping[str, Any]], Mapping[str, Mapping[str, Any]]],
) -> tuple[set[str], set[str], set[str], dict[str, set[str]]]:
    """The keys that change in a step, those of them that need a restart, those that
    change the tables' schema, and per table with an override (now or in the previous
    step) the table settings that change for it. ``nodes`` and ``tables`` are the
    previous step's overrides and this step's (``per_node``, ``per_table``)."""
    pairs = [(prev, config)] + [(b, a) for _, b, a in _overridden(prev, config, *nodes)]
    changed: set[str] = set()
    needs_restart: set[str] = set()
    table_changes: set[str] = set()
    for before, after in pairs:
        diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        changed |= set(diff)
        needs_restart |= _restart_keys(space, diff, before, after)
        table_changes |= _table_changing_keys(space, diff, before, after)
    by_table: dict[str, set[str]] = {}
    for table, before, after in _overridden(prev, config, *tables):
        keys = {k for k in _table_keys(space, set(before) | set(after))
                if before.get(k) != after.get(k)}
        if keys:
            by_table[table] = keys
            changed |= keys
            table_changes |= keys
    return changed, needs_restart, table_changes, by_table


def _reencode_keys(space: SpaceLike, keys: Iterable[str]) -> frozenset[str]:
    """Those of ``keys`` that re-encode the data only at a reload
    (``ConfigSpace.reencode_params``; none for a space without them)."""
    reencode_params = getattr(space, "reencode_params", None)
    return frozenset(reencode_params(keys)) if callable(reencode_params) else frozenset()


def _live_restart(
    st: Mapping[str, Any], p: str, changed: set[str], needs_restart: set[str],
    reencode: frozenset[str] = frozenset(),
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``live`` and ``restart``: together exactly the changed keys, each in its right list."""
    live = _str_list(st.get("live", []), f"{p}.live")
    restart = _str_list(st.get("restart", []), f"{p}.restart")
    both = set(live) & set(restart)
    if both:
        raise _fail(f"{p}.live", f"{sorted(both)[0]!r} is listed as both live and restart")
    if not changed:
        raise _fail(f"{p}.target", "changes nothing relative to the previous configuration")
    missing = sorted(changed - set(live) - set(restart))
    if missing:
        raise _fail(f"{p}", f"changed parameter {missing[0]!r} is in neither live nor restart")
    for name, keys in (("live", live), ("restart", restart)):
        for j, key in enumerate(keys):
            if key not in changed:
                raise _fail(f"{p}.{name}[{j}]", f"{key!r} does not change in this step")
    for j, key in enumerate(live):
        if key in reencode:
            raise _fail(f"{p}.live[{j}]", (
                f"{key!r} re-encodes the data only at a restart (set live, the keys written "
                "before keep their encoding): list it under restart, with batches; "
                "playbooks/change_settings_redis.yml sets it live by hand"))
        if key in needs_restart:
            raise _fail(f"{p}.live[{j}]", f"{key!r} needs a restart and cannot change live")
    for j, key in enumerate(restart):
        if key not in needs_restart:
            raise _fail(f"{p}.restart[{j}]", f"{key!r} changes live; list it under live")
    return live, restart


def _expected(st: Mapping[str, Any], p: str) -> Expected:
    ex = _mapping(_require(st, "expected", p), f"{p}.expected")
    benefit = _number(_require(ex, "benefit_ops", f"{p}.expected"), f"{p}.expected.benefit_ops")
    cost = _number(
        _require(ex, "cost_ops", f"{p}.expected"), f"{p}.expected.cost_ops", minimum=0.0
    )
    net = _number(_require(ex, "net_ops", f"{p}.expected"), f"{p}.expected.net_ops")
    if abs(net - (benefit - cost)) > NET_TOLERANCE * max(1.0, abs(benefit), abs(cost)):
        raise _fail(
            f"{p}.expected.net_ops",
            f"{net:g} is not benefit_ops - cost_ops = {benefit - cost:g}",
        )
    return Expected(benefit_ops=benefit, cost_ops=cost, net_ops=net, **_expected_extra(ex, p))


def _expected_extra(ex: Mapping[str, Any], p: str) -> dict[str, Any]:
    """The optional ``expected`` fields (docs/plan-file.md), checked; absent ones omitted."""
    out: dict[str, Any] = {}
    if ex.get("p_gain") is not None:
        pg = _number(ex["p_gain"], f"{p}.expected.p_gain", minimum=0.0)
        if pg > 1.0:
            raise _fail(f"{p}.expected.p_gain", f"a probability is at most 1, got {pg:g}")
        out["p_gain"] = pg
    if ex.get("gains") is not None:
        if ex["gains"] not in GAINS:
            raise _fail(f"{p}.expected.gains",
                        f"expected one of {', '.join(GAINS)}, got {ex['gains']!r}")
        out["gains"] = ex["gains"]
    if ex.get("served_ops") is not None:
        out["served_ops"] = _number(ex["served_ops"], f"{p}.expected.served_ops")
    if ex.get("utilisation") is not None:
        util = _mapping(ex["utilisation"], f"{p}.expected.utilisation")
        for key in ("before", "after"):
            out[f"utilisation_{key}"] = _number(
                _require(util, key, f"{p}.expected.utilisation"),
                f"{p}.expected.utilisation.{key}", minimum=0.0,
            )
    return out


def _table_keys(space: SpaceLike, keys: Iterable[str]) -> list[str]:
    """The ``keys`` that are table options (``location: table``), sorted."""
    params = getattr(space, "parameters", None)
    if not isinstance(params, Mapping):
        return []
    return sorted(k for k in keys if getattr(params.get(k), "location", None) == "table")


def check_tables(value: Any, path: str) -> tuple[str, ...]:
    """Validate a list of ``keyspace.table`` names (no duplicates) and return it.

    Raises
    ------
    ValidationError
        Naming ``path`` (or the item) and why.
    """
    names = _str_list(value, path)
    for j, name in enumerate(names):
        if not TABLE_NAME.match(name):
            raise _fail(
                f"{path}[{j}]", f"{name!r} is not keyspace.table (letters, digits and _ only)"
            )
    return names


def _step_tables(st: Mapping[str, Any], p: str, table_changes: set[str]) -> tuple[str, ...]:
    """The tables a step's table-level change applies to; required iff there is one."""
    raw = st.get("tables")
    tables = () if raw is None else check_tables(raw, f"{p}.tables")
    # A table option has no cluster-wide home: without names the executor cannot know
    # which tables to ALTER, so the plan must say.
    if table_changes and not tables:
        raise _fail(
            f"{p}.tables",
            f"none given: {', '.join(sorted(table_changes))} changes a table setting"
            + ("" if "row_cache_size" not in table_changes
               else " (turning the row cache on or off sets the tables' caching)")
            + "; name the tables (keyspace.table)",
        )
    if tables and not table_changes:
        raise _fail(f"{p}.tables", "the step changes no table setting; leave tables out")
    return tables


def _batches(value: Any, path: str, hosts: set[str] | None) -> tuple[tuple[str, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(path, f"expected a list of host lists, got {type(value).__name__}")
    seen: dict[str, str] = {}
    out: list[tuple[str, ...]] = []
    for b, batch in enumerate(value):
        bp = f"{path}[{b}]"
        if not isinstance(batch, list) or not batch:
            raise _fail(bp, "expected a non-empty list of hosts")
        for h, host in enumerate(batch):
            hp = f"{bp}[{h}]"
            if not isinstance(host, str) or not host:
                raise _fail(hp, f"expected a host name, got {host!r}")
            if hosts is not None and host not in hosts:
                raise _fail(hp, f"unknown host {host!r}")
            if host in seen:
                raise _fail(hp, f"host {host!r} already appears at {seen[host]}")
            seen[host] = hp
        out.append(tuple(batch))
    return tuple(out)


def validate_plan(
    data: Any,
    *,
    known_hosts: Iterable[str] | None = None,
    space: SpaceLike | None = None,
) -> None:
    """Raise :class:`ValidationError` (field path and reason) unless ``data`` is a valid plan.

    See :func:`plan_from_dict` for the parameters.
    """
    plan_from_dict(data, known_hosts=known_hosts, space=space)


def load_plan(
    path: str | Path,
    *,
    known_hosts: Iterable[str] | None = None,
    space: SpaceLike | None = None,
) -> Plan:
    """Read, validate and return the plan at ``path``.

    Raises
    ------
    ValidationError
        The file is unreadable, too large, not UTF-8 text, not YAML, or breaks a rule
        (the message names the file and the field).
    """
    from planner import inputs

    data = inputs.load_yaml(path, kind=inputs.PLAN)
    with inputs.in_file(path):
        return plan_from_dict(data, known_hosts=known_hosts, space=space)


def save_plan(
    plan: Plan,
    path: str | Path,
    *,
    known_hosts: Sequence[str] | None = None,
    space: SpaceLike | None = None,
) -> Path:
    """Validate ``plan`` and write it as YAML to ``path``; return the path."""
    import yaml

    data = plan.to_dict()
    plan_from_dict(data, known_hosts=known_hosts, space=space)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(
        "# Kairos reconfiguration plan (docs/plan-file.md). Written by `kairos plan`.\n"
        + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    )
    return p
