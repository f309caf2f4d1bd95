"""What the Ansible executor needs from a plan, computed in Python.

The playbooks only carry out what this module decides: which step is due, what changes
live, on tables and with a restart, the batches in order, the settings each node must end
up with, and whether the plan's batches are still safe on the live ring.

A step's target is the composition of every step up to it (:func:`compose`), and what a
rollout changes is the difference between that composition and the configuration recorded
applied last (:func:`change_set`), classified by the configuration space. So two steps due
at once lose nothing, and a live-only step never writes an earlier restart-class value back
into a node's files.

Execution state lives in a JSON state file beside the plan, never in the plan itself
(docs/plan-file.md): per step its status (``applied``, ``failed``, ``superseded``), the
per-node timings, and the nodes verified so far (read back after their change), so an
interrupted rollout resumes from the first node not yet verified.

The JSON of a :class:`RolloutStep` (``kairos rollout prepare|adhoc``) is the contract the
playbooks read; it carries its version, :data:`ROLLOUT_CONTRACT`, and every field the
playbooks read is documented in docs/rollout-contract.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner import inputs
from planner.engines import get_engine
from planner.errors import KairosError, ValidationError
from planner.model.durability import (
    DurabilityFloor,
    change_violations,
    parse_floor,
    plan_violations,
)
from planner.model.spaces import change_kind, changes_tables, get_space, table_caching
from planner.plan import Plan, Step, check_tables, load_plan
from planner.topology.ring import Ring, check_batch, replica_neighbours

STATE_VERSION = 1
#: Version of the rollout JSON the playbooks read (docs/rollout-contract.md). Raise it when
#: a field the playbooks read changes name, type or meaning; adding a field keeps it.
ROLLOUT_CONTRACT = 1
#: What ``kairos rollout record --status`` takes (``verified`` is per node: ``--node``).
STATUSES = ("applied", "failed", "verified")
#: A step's status in the state file; a step with verified nodes and none of these was
#: interrupted.
STEP_STATUSES = ("applied", "failed", "superseded")
#: The files this module reads (size-bounded, UTF-8 JSON: planner.inputs).
STATE_FILE = inputs.FileKind(what="rollout state", max_bytes=inputs.STATE.max_bytes)
ROLLOUT_FILE = inputs.FileKind(what="rollout", max_bytes=inputs.STATE.max_bytes)


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
    """One rollout as the executor carries it out (``kairos rollout prepare|adhoc``).

    Attributes
    ----------
    status
        ``due`` (carry it out), ``applied`` (nothing to do), ``nothing-due`` or ``failed``.
    live, restart, table
        What differs from the configuration applied last, by how it takes effect
        (cluster-wide values); ``node_live`` has each host's live values. ``table`` holds
        the tables' options to set: ``compaction`` (a class) and ``caching`` (the CQL map,
        set when the row cache turns on or off, :func:`planner.model.spaces.table_caching`).
    batches
        Restart batches in order, without the hosts already verified (a resumed step).
    nodes
        Host -> the full composed file settings (everything applied, merged).
    tables
        ``keyspace.table`` names the ``table`` changes apply to.
    table_options
        ``keyspace.table`` -> the ``table`` values that differ for that table (a plan
        step's ``per_table``); each is one of ``tables``, which get ``table`` otherwise.
    superseded
        Earlier steps not applied whose changes this rollout carries; recording it
        applied records them ``superseded``.
    verified_hosts
        Hosts verified for this step by an earlier, interrupted or failed, attempt.
    fingerprint
        Digest of the composed target: ``record --status verified`` stores it so a
        changed plan never resumes from another target's verifications.
    applied_through
        The last step recorded applied (the configuration the change set starts from).
    """

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
    tables: tuple[str, ...] = ()
    node_live: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    table_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    superseded: tuple[str, ...] = ()
    verified_hosts: tuple[str, ...] = ()
    fingerprint: str = ""
    applied_through: str | None = None

    @property
    def batch_sizes(self) -> list[int]:
        return [len(b) for b in self.batches]

    @property
    def hosts_in_order(self) -> list[str]:
        return [h for b in self.batches for h in b]

    @property
    def live_hosts(self) -> list[str]:
        """Hosts the live play has work on: live values to set, the tables' options (set
        once, from any host), or the files of a step no host restarts for. The others skip
        it (rollout.yml): a restart-only step's live play would only skip task after task."""
        if self.table:
            return sorted(self.nodes)
        restarted = set(self.hosts_in_order)
        return sorted(
            h for h in self.nodes
            if (self.node_live.get(h, self.live) if self.node_live else self.live)
            or (not self.restart and h not in restarted)
        )

    def batch_problem(
        self, ring: Ring, batch: Iterable[str], *, down: Iterable[str]
    ) -> str | None:
        """Why taking ``batch`` down, with ``down`` already down, would break this step's
        consistency level (:func:`planner.topology.ring.check_batch`); None when it is safe."""
        try:
            check_batch(
                ring,
                batch,
                down=down,
                consistency_level=self.consistency_level,
                tolerated_failures=self.tolerated_failures,
            )
        except KairosError as exc:
            return str(exc)
        return None

    def batch_neighbours(self, ring: Ring, batch: Iterable[str]) -> list[str]:
        """The hosts outside ``batch`` whose replica sets it shares, at this step's consistency
        level (:func:`planner.topology.ring.replica_neighbours`)."""
        return replica_neighbours(ring, batch, consistency_level=self.consistency_level)

    def to_dict(self) -> dict[str, Any]:
        """The rollout JSON of docs/rollout-contract.md, with its ``contract`` version."""
        data = asdict(self)
        data["contract"] = ROLLOUT_CONTRACT
        data["batches"] = [list(b) for b in self.batches]
        for key in ("tables", "superseded", "verified_hosts"):
            data[key] = list(data[key])
        data["batch_sizes"] = self.batch_sizes
        data["hosts_in_order"] = self.hosts_in_order
        data["live_hosts"] = self.live_hosts
        return data


# ---------------------------------------------------------------- state file
def state_path_for(plan_path: str | Path) -> Path:
    """The state file beside a plan: ``<plan>.state.json``."""
    p = Path(plan_path)
    return p.with_name(p.name + ".state.json")


def load_state(path: str | Path) -> dict[str, Any]:
    """Read a state file; an absent file is an empty state.

    Raises
    ------
    ValidationError
        The file is unreadable or a field is malformed (the message names both).
    """
    p = Path(path)
    if not p.exists():
        return {"version": STATE_VERSION, "steps": {}}
    data = inputs.load_json(p, kind=STATE_FILE)
    if not isinstance(data, dict) or not isinstance(data.get("steps"), dict):
        raise ValidationError(f"{p}: rollout state must be an object with 'steps'")
    for step_id, entry in data["steps"].items():
        _check_entry(p, str(step_id), entry)
    return data


def _check_entry(path: Path, step_id: str, entry: Any) -> None:
    """Raise ValidationError naming the file and field unless ``entry`` is well formed."""
    where = f"{path}: steps.{step_id}"
    if not isinstance(entry, dict):
        raise ValidationError(f"{where}: expected an object, got {type(entry).__name__}")
    status = entry.get("status")
    if status is not None and status not in STEP_STATUSES:
        raise ValidationError(
            f"{where}.status: unknown status {status!r} (expected {', '.join(STEP_STATUSES)})"
        )
    attempts = entry.get("attempts", 0)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise ValidationError(f"{where}.attempts: expected a count, got {attempts!r}")
    for key in ("nodes", "verified"):
        value = entry.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise ValidationError(f"{where}.{key}: expected an object host -> object")
    if not isinstance(entry.get("fingerprint", ""), str):
        raise ValidationError(f"{where}.fingerprint: expected a string")


def _seconds(value: Any) -> float:
    """A duration as seconds: a number, Ansible's ``delta`` form ``H:MM:SS.ffffff``, or a
    list of these (the parts of one phase, summed)."""
    if isinstance(value, list | tuple):
        return sum(_seconds(part) for part in value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    try:
        if ":" in text:
            hours, minutes, seconds = text.split(":")
            return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        return float(text or 0)
    except ValueError:
        raise ValidationError(f"nodes: not a duration: {value!r}") from None


def normalise_timings(nodes: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per-node phase durations in seconds, with their total (the node's measured T_r)."""
    if not isinstance(nodes, Mapping):
        raise ValidationError("nodes: expected an object host -> {phase: duration}")
    out: dict[str, dict[str, float]] = {}
    for host, phases in nodes.items():
        if not phases:
            continue
        if not isinstance(phases, Mapping):
            raise ValidationError(f"nodes.{host}: expected phase -> duration")
        timings = {phase: round(_seconds(v), 2) for phase, v in phases.items() if phase != "total"}
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
    node: str | None = None,
    readback: Mapping[str, Any] | None = None,
    fingerprint: str | None = None,
    require_verified: Sequence[str] = (),
    superseded: Sequence[str] = (),
) -> dict[str, Any]:
    """Record a step's outcome, or one node verified, atomically (temp file, then rename).

    Parameters
    ----------
    path
        The state file.
    step_id
        The step.
    status
        ``verified`` (``node`` was read back after its change; needs ``node``),
        ``applied`` or ``failed`` (with ``error``).
    nodes
        Host -> phase -> duration (seconds or ``H:MM:SS.ffffff``). With ``applied`` they
        are merged over the timings of earlier attempts and of the verified nodes.
    readback
        ``verified``: the values read back from the node.
    fingerprint
        ``verified``: the rollout's fingerprint; only verifications recorded with the
        fingerprint of the target being carried out let ``prepare`` resume (without
        one, the node counts for ``require_verified`` but is done again on a resume).
    require_verified
        ``applied``: refuse unless each of these hosts was recorded verified (for
        ``fingerprint`` when given).
    superseded
        ``applied``: earlier steps this one carried; each is recorded ``superseded``.

    Raises
    ------
    ValidationError
        A malformed argument or state file.
    RolloutRefused
        ``applied`` while a required host is not verified.
    """
    if status not in STATUSES:
        raise ValidationError(f"status: must be one of {', '.join(STATUSES)}, got {status!r}")
    if not step_id:
        raise ValidationError("step: give the step id")
    if status != "verified" and (node or readback):
        raise ValidationError("node: --node and --readback go with --status verified")
    if status != "applied" and (require_verified or superseded):
        raise ValidationError("superseded: --superseded and --require-verified go with applied")
    p = Path(path)
    with _locked(p):
        state = load_state(p)
        _apply_record(
            state,
            step_id=step_id,
            status=status,
            nodes=nodes or {},
            error=error,
            stamp=(now or datetime.now(UTC)).isoformat(),
            node=node,
            readback=readback,
            fingerprint=fingerprint,
            require_verified=require_verified,
            superseded=superseded,
        )
        _write_state(p, state)
    return state


def _apply_record(
    state: dict[str, Any],
    *,
    step_id: str,
    status: str,
    nodes: Mapping[str, Any],
    error: str | None,
    stamp: str,
    node: str | None,
    readback: Mapping[str, Any] | None,
    fingerprint: str | None,
    require_verified: Sequence[str],
    superseded: Sequence[str],
) -> None:
    """Change ``state`` in memory as :func:`record_step` says (nothing is written on error)."""
    entry = state["steps"].setdefault(step_id, {})
    if status == "verified":
        _record_verified(
            entry,
            node=node,
            fingerprint=fingerprint,
            nodes=nodes,
            readback=readback if readback is not None else {},
            stamp=stamp,
        )
    else:
        if status == "applied":
            _check_verified(step_id, entry, require_verified, fingerprint)
            _supersede(state, step_id, superseded, stamp)
        timings = normalise_timings(nodes)
        entry["attempts"] = int(entry.get("attempts", 0)) + 1
        entry["status"] = status
        entry["finished_at"] = stamp
        entry["nodes"] = _merged_timings(entry, timings) if status == "applied" else timings
        if error:
            entry["error"] = error
        else:
            entry.pop("error", None)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the state file's directory while reading and writing it.

    The hosts of one batch record ``verified`` at the same time (Ansible forks), and a
    read-modify-write without a lock would lose all but one of them. The directory is
    locked, not the file, because the file is replaced by rename.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _record_verified(
    entry: dict[str, Any],
    *,
    node: str | None,
    fingerprint: str | None,
    nodes: Mapping[str, Any],
    readback: Any,
    stamp: str,
) -> None:
    if not node:
        raise ValidationError("node: --status verified names the node verified (--node HOST)")
    if not isinstance(readback, Mapping):
        raise ValidationError("readback: expected an object setting -> value read back")
    timings = normalise_timings(nodes)
    others = sorted(set(timings) - {node})
    if others:
        raise ValidationError(
            f"nodes: with --status verified give {node}'s timings only, not {', '.join(others)}"
        )
    digest = fingerprint or ""  # "": unknown target, never resumed from
    if entry.get("fingerprint", "") != digest:
        # Verifications of another target (the plan changed) say nothing about this one.
        entry["verified"] = {}
        entry["fingerprint"] = digest
    entry.setdefault("verified", {})[node] = {
        "verified_at": stamp,
        "readback": dict(readback),
        "timings": timings.get(node, {}),
    }


def _check_verified(
    step_id: str, entry: Mapping[str, Any], required: Sequence[str], fingerprint: str | None
) -> None:
    """Refuse ``applied`` unless every required host was read back after its change."""
    verified = entry.get("verified", {})
    if fingerprint is not None and entry.get("fingerprint") != fingerprint:
        verified = {}
    missing = [h for h in required if h not in verified]
    if missing:
        raise RolloutRefused(
            f"step {step_id}: not recorded applied: {', '.join(missing)} not verified "
            "(record each with --status verified --node HOST after its read-back)"
        )


def _supersede(state: dict[str, Any], step_id: str, ids: Sequence[str], stamp: str) -> None:
    for sid in ids:
        if sid == step_id:
            raise ValidationError(f"superseded: step {sid} cannot supersede itself")
        other = state["steps"].setdefault(sid, {})
        if other.get("status") == "applied":
            raise ValidationError(
                f"superseded: step {sid} was applied at {other.get('finished_at')}; "
                "an applied step is never superseded"
            )
        other.update(status="superseded", superseded_by=step_id, finished_at=stamp)


def _merged_timings(
    entry: Mapping[str, Any], latest: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """Timings over every attempt: earlier records, then the verified nodes, then ``latest``."""
    merged = {h: dict(t) for h, t in entry.get("nodes", {}).items()}
    for host, record in entry.get("verified", {}).items():
        if record.get("timings"):
            merged[host] = dict(record["timings"])
    merged.update({h: dict(t) for h, t in latest.items()})
    return merged


def _write_state(path: Path, state: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)


# ---------------------------------------------------------------- composition
@dataclass(frozen=True)
class Composition:
    """The configuration after the first steps of a plan (see :func:`compose`).

    Attributes
    ----------
    cluster
        ``current_config`` with the steps' targets merged in order.
    nodes
        Host -> ``cluster`` with the last composed step's ``per_node`` overrides for it.
    tables
        ``keyspace.table`` -> the last composed step's ``per_table`` overrides for it.
    """

    cluster: Mapping[str, Any]
    nodes: Mapping[str, Mapping[str, Any]]
    tables: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ChangeSet:
    """What differs between two compositions, by how it takes effect.

    ``live``, ``restart`` and ``table`` hold the cluster-wide values after the change
    (``table``: the tables' options, see :class:`RolloutStep`); ``node_live`` the live values
    of each host (per-node overrides included); ``table_options`` the values of the
    ``table`` keys that differ for a table (its ``per_table`` override).
    """

    live: Mapping[str, Any]
    restart: Mapping[str, Any]
    table: Mapping[str, Any]
    node_live: Mapping[str, Mapping[str, Any]]
    table_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def compose(plan: Plan, *, through: int, hosts: Iterable[str]) -> Composition:
    """The configuration after ``plan.steps[0..through]`` (``through=-1``: current_config).

    A step's ``per_node`` and ``per_table`` overrides hold for that step only (the validator
    reads them so: a host or table the next step does not override returns to the
    cluster-wide value), so only the last composed step's overrides apply.
    """
    cluster = dict(plan.current_config)
    for step in plan.steps[: through + 1]:
        cluster.update(step.target)
    last = plan.steps[through] if through >= 0 else None
    overrides = last.per_node if last else {}
    return Composition(
        cluster=cluster, nodes={h: {**cluster, **overrides.get(h, {})} for h in hosts},
        tables={t: dict(o) for t, o in (last.per_table if last else {}).items()},
    )


def applied_index(plan: Plan, state: Mapping[str, Any]) -> int:
    """Index of the last step recorded ``applied`` (-1: none)."""
    steps = state.get("steps", {})
    done = [i for i, s in enumerate(plan.steps) if steps.get(s.id, {}).get("status") == "applied"]
    return max(done, default=-1)


def applied_composition(
    plan: Plan, state: Mapping[str, Any], *, hosts: Iterable[str] = ()
) -> Composition:
    """What the cluster runs after the steps recorded applied (superseded ones included)."""
    return compose(plan, through=applied_index(plan, state), hosts=hosts)


def change_set(engine: str, before: Composition, after: Composition) -> ChangeSet:
    """Classify what differs from ``before`` to ``after`` by the engine's space.

    A key is ``table`` when the space keeps it in the tables' schema, else ``restart``
    when its change needs a restart on any node (:func:`planner.model.spaces.change_kind`, per
    transition), else ``live``. A row cache turned on or off on any node also sets the
    tables' ``caching`` (the tables hold no rows in the cache without it). A table with an
    override before or after is compared on its own values.
    """
    space = get_space(engine)
    defaults = space.defaults()
    pairs = [(before.cluster, after.cluster)] + [
        (before.nodes.get(h, before.cluster), config) for h, config in after.nodes.items()
    ] + [
        ({**before.cluster, **before.tables.get(t, {})},
         {**after.cluster, **after.tables.get(t, {})})
        for t in sorted(set(before.tables) | set(after.tables))
    ]
    kinds: dict[str, str] = {}
    caching = False
    for old, new in pairs:
        b, a = {**defaults, **old}, {**defaults, **new}
        for key in sorted(k for k in a if a[k] != b[k]):
            if space[key].location == "table":
                kind = "table"
            else:
                kind = change_kind(engine, key, b[key], a[key])
                caching = caching or changes_tables(engine, key, b[key], a[key])
            # One node that needs a restart for a key makes it a restart: batches cover all.
            if kinds.get(key) != "restart":
                kinds[key] = kind
    full = {**defaults, **after.cluster}
    by_kind = {
        kind: {k: full[k] for k in sorted(kinds) if kinds[k] == kind}
        for kind in ("live", "restart", "table")
    }
    if caching:
        configs = [{**defaults, **c} for c in (after.cluster, *after.nodes.values())]
        by_kind["table"]["caching"] = table_caching(configs)
    node_live = {
        h: {k: {**defaults, **config}[k] for k in by_kind["live"]}
        for h, config in after.nodes.items()
    }
    table_options = {
        t: {k: v for k, v in overrides.items() if k in by_kind["table"]}
        for t, overrides in sorted(after.tables.items())
    }
    return ChangeSet(
        live=by_kind["live"],
        restart=by_kind["restart"],
        table=by_kind["table"],
        node_live=node_live,
        table_options={t: o for t, o in table_options.items() if o},
    )


def fingerprint(engine: str, target: Composition, tables: Iterable[str] = ()) -> str:
    """A short digest of a composed target (hosts, values and tables)."""
    doc = {
        "engine": engine,
        "cluster": target.cluster,
        "nodes": target.nodes,
        "tables": sorted(tables),
        **({"table_options": target.tables} if target.tables else {}),
    }
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ------------------------------------------------------------- step choice
def _chosen_index(
    plan: Plan, step_id: str | None, now: datetime, plan_path: str | Path
) -> int | None:
    """The step asked for, else the latest that has come due (None: none yet)."""
    if step_id is not None:
        for i, s in enumerate(plan.steps):
            if s.id == step_id:
                return i
        known = ", ".join(s.id for s in plan.steps) or "none"
        raise ValidationError(f"step: no step {step_id!r} in {plan_path} (steps: {known})")
    due = [i for i, s in enumerate(plan.steps) if plan.horizon.has_come_due(s.due, now)]
    return due[-1] if due else None


def _inventory_floor(declared: Mapping[str, Any]) -> DurabilityFloor:
    """The floor the inventory declares now (``kairos_redis_durability_floor``), checked."""
    return parse_floor(declared, where="--durability-floor",
                       source="the inventory's kairos_redis_durability_floor")


def _check_floor(plan: Plan, declared: Mapping[str, Any], plan_path: str | Path) -> None:
    floor = _inventory_floor(declared)
    # Completed with the space's defaults, as the plan validator holds it (planner.plan).
    current = {**dict(get_space(plan.engine).defaults()), **plan.current_config}
    for field_path, problem in plan_violations(floor, current, plan.steps):
        raise ValidationError(f"{plan_path}: {field_path}: {problem}; make a new plan above "
                              "the floor (kairos plan --durability-floor)")


def _check_change_floor(config: Mapping[str, Any], declared: Mapping[str, Any]) -> None:
    for field_path, problem in change_violations(_inventory_floor(declared), config):
        raise ValidationError(f"{field_path}: {problem}; lower the floor in the inventory "
                              "first if this is meant")


def _check_engine(plan: Plan, engine: str | None, plan_path: str | Path) -> None:
    if engine is not None and plan.engine != engine:
        raise ValidationError(
            f"{plan_path}: engine: the plan is for {plan.engine}, this rollout applies "
            f"{engine}: use {get_engine(plan.engine).executor_playbook}")


def prepare(
    plan_path: str | Path,
    *,
    hosts: Iterable[str],
    state_path: str | Path | None = None,
    step_id: str | None = None,
    now: datetime | None = None,
    retry_failed: bool = False,
    durability_floor: Mapping[str, Any] | None = None,
    engine: str | None = None,
) -> RolloutStep:
    """Validate the plan against the inventory's hosts and decide the rollout.

    Parameters
    ----------
    plan_path
        The plan file.
    hosts
        The engine's inventory hosts: every batch host must be one of them.
    state_path
        The rollout state file (default ``<plan>.state.json``).
    step_id
        Carry out the plan up to this step rather than up to the due one.
    now
        The current time (default: now, UTC).
    retry_failed
        Carry out a step recorded as failed, or one composing an earlier failed step
        (a person decided to retry).
    durability_floor
        Redis: the floor the inventory declares now (``kairos_redis_durability_floor``).
        The plan is refused when its current configuration or any step's is below it,
        whatever floor the plan was searched above: the operator may have raised it since.
    engine
        The engine the calling playbook applies: a plan for another engine is refused,
        naming the playbook that applies it.

    Returns
    -------
    RolloutStep
        See :func:`decide`; ``nothing-due`` when no step has come due.

    Raises
    ------
    ValidationError
        A plan the executor must not carry out, naming the field and the problem.
    """
    host_list = list(hosts)
    plan = load_plan(plan_path, known_hosts=host_list)
    _check_engine(plan, engine, plan_path)
    if durability_floor and get_engine(plan.engine).durability_floor:
        _check_floor(plan, durability_floor, plan_path)
    state_file = Path(state_path) if state_path else state_path_for(plan_path)
    state = load_state(state_file)
    now = now or datetime.now(UTC)
    index = _chosen_index(plan, step_id, now, plan_path)
    if index is None:
        return RolloutStep(
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
            state=str(state_file),
        )
    return decide(
        plan,
        state,
        index=index,
        hosts=host_list,
        retry_failed=retry_failed,
        plan_path=str(plan_path),
        state_path=str(state_file),
    )


def decide(
    plan: Plan,
    state: Mapping[str, Any],
    *,
    index: int,
    hosts: Iterable[str],
    retry_failed: bool = False,
    plan_path: str = "",
    state_path: str = "",
) -> RolloutStep:
    """The rollout that takes the cluster from what was applied last to ``plan.steps[index]``.

    Returns
    -------
    RolloutStep
        ``due``, ``applied`` (the step, or a later one, was applied, or it was
        superseded) or ``failed`` (it, or an earlier step it composes, failed and
        ``retry_failed`` is false).

    Raises
    ------
    RolloutRefused
        A restart is needed and no composed step has restart batches.
    """
    host_list = list(hosts)
    records = state.get("steps", {})
    step = plan.steps[index]
    applied = applied_index(plan, state)
    before = compose(plan, through=applied, hosts=host_list)
    # A step at or before the last applied one is part of what runs already.
    after = compose(plan, through=index, hosts=host_list) if index > applied else before
    pending = plan.steps[applied + 1 : index]
    changes = change_set(plan.engine, before, after)
    tables = _tables((*pending, step)) if changes.table else ()
    status, reason = _status(plan, records, index=index, applied=applied, retry=retry_failed)
    batches = _restart_batches(plan, index, changes, strict=status == "due")
    digest = fingerprint(plan.engine, after, tables)
    verified: tuple[str, ...] = ()
    if status == "due":
        verified, batches, note = _resume(step.id, records.get(step.id, {}), digest, batches)
        reason = f"{note}; {reason}" if note else reason
        if not (changes.live or changes.restart or changes.table):
            reason += "; nothing differs from the configuration applied last"
    return RolloutStep(
        plan=plan_path,
        engine=plan.engine,
        step_id=step.id,
        status=status,
        reason=reason,
        live=changes.live,
        restart=changes.restart,
        table=changes.table,
        batches=batches,
        nodes={h: render_settings_for(plan.engine, after.nodes[h]) for h in host_list},
        consistency_level=plan.availability.consistency_level,
        tolerated_failures=plan.availability.tolerated_failures,
        aggressive=plan.availability.aggressive,
        state=state_path,
        tables=tables,
        node_live=changes.node_live,
        # A table with an override that this rollout does not name keeps its options.
        table_options={t: o for t, o in changes.table_options.items() if t in tables},
        superseded=tuple(s.id for s in pending) if index > applied else (),
        verified_hosts=verified,
        fingerprint=digest,
        applied_through=plan.steps[applied].id if applied >= 0 else None,
    )


def _status(
    plan: Plan, records: Mapping[str, Any], *, index: int, applied: int, retry: bool
) -> tuple[str, str]:
    """``(status, reason)`` of the step at ``index`` given what was applied last."""
    step = plan.steps[index]
    rec = records.get(step.id, {})
    if rec.get("status") == "applied":
        return "applied", f"step {step.id} was applied at {rec.get('finished_at')}"
    if rec.get("status") == "superseded":
        return "applied", (
            f"step {step.id} was superseded by {rec.get('superseded_by')} "
            f"at {rec.get('finished_at')}: its changes are applied"
        )
    if index < applied:
        last = plan.steps[applied]
        return "applied", (
            f"step {step.id} comes before {last.id}, applied at "
            f"{records[last.id].get('finished_at')}: its changes are applied"
        )
    pending = plan.steps[applied + 1 : index]
    if not retry:
        for s in (*pending, step):
            r = records.get(s.id, {})
            if r.get("status") == "failed":
                carried = "" if s is step else f" (step {step.id} would carry its changes)"
                return "failed", (
                    f"step {s.id} failed at {r.get('finished_at')}: "
                    f"{r.get('error', 'no detail')}{carried}; "
                    "a person must resume or roll it back"
                )
    reason = f"step {step.id} is due since {step.due.isoformat()}"
    if pending:
        ids = ", ".join(s.id for s in pending)
        reason += f"; it supersedes {ids} (not applied: their changes are part of it)"
    return "due", reason


def _restart_batches(
    plan: Plan, index: int, changes: ChangeSet, *, strict: bool
) -> tuple[tuple[str, ...], ...]:
    """The chosen step's batches, else the latest composed step's that has some."""
    if not changes.restart:
        return ()
    for s in reversed(plan.steps[: index + 1]):
        if s.batches:
            return s.batches
    if not strict:
        return ()
    ids = ", ".join(s.id for s in plan.steps[: index + 1])
    raise RolloutRefused(
        f"step {plan.steps[index].id}: {', '.join(changes.restart)} need a restart, but none "
        f"of the steps it composes ({ids}) has restart batches; re-plan"
    )


def _resume(
    step_id: str,
    record: Mapping[str, Any],
    digest: str,
    batches: tuple[tuple[str, ...], ...],
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]:
    """``(verified hosts, batches left, note)`` of a step an earlier attempt began."""
    verified = record.get("verified", {})
    if not verified:
        return (), batches, ""
    recorded = record.get("fingerprint", "")
    if recorded != digest:
        why = (
            "were verified for another target (the plan changed)"
            if recorded
            else "were recorded without the rollout's fingerprint"
        )
        note = f"not resuming step {step_id}: its {len(verified)} verified node(s) {why}"
        return (), batches, f"{note}; every node is done again"
    in_order = [h for b in batches for h in b]
    done = tuple([h for h in in_order if h in verified] + sorted(set(verified) - set(in_order)))
    remaining = (tuple(h for h in b if h not in verified) for b in batches)
    left = tuple(b for b in remaining if b)  # a batch all verified is dropped
    return done, left, f"resuming step {step_id}: {', '.join(done)} already verified"


def _tables(steps: Iterable[Step]) -> tuple[str, ...]:
    """The tables the steps name, in order, each once."""
    return tuple(dict.fromkeys(t for s in steps for t in s.tables))


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
    tables: Sequence[str] = (),
    now: datetime | None = None,
    durability_floor: Mapping[str, Any] | None = None,
) -> RolloutStep:
    """A one-step rollout without a plan: "change these settings safely" or a rolling restart.

    The settings are validated against the engine's space and split into live and restart
    parameters by it; the batches come from the live ring at the given consistency level
    (every host restarts when ``restart_all`` or any restart parameter is set). ``tables``
    (``keyspace.table``) are the tables a table-level change applies to.
    ``durability_floor`` (Redis: the inventory's ``kairos_redis_durability_floor``) refuses a
    setting below it, as a plan below it is refused
    (:func:`planner.model.durability.change_violations`).

    Raises
    ------
    ValidationError
        An unknown parameter or a value outside its range; a setting below the durability
        floor; a host not in the ring.
    KairosError
        No safe batching exists for the consistency level (e.g. RF = CL).
    """
    host_list = list(hosts)
    space = get_space(engine)
    config = space.normalize(settings)
    space.validate(config)
    if not config and not restart_all:
        raise ValidationError("settings: give at least one key=value, or ask for a rolling restart")
    if durability_floor and get_engine(engine).durability_floor:
        _check_change_floor(config, durability_floor)
    table_names = check_tables(list(tables), "tables")
    table = {k: v for k, v in config.items() if space.parameters[k].location == "table"}
    restart = {k: v for k, v in config.items() if space.parameters[k].change == "restart"}
    live = {k: v for k, v in config.items() if k not in table and k not in restart}
    if "row_cache_size" in config:
        # Cassandra's row cache: what ran before is unknown here, so the tables' caching is
        # set either way (idempotent).
        table["caching"] = table_caching([config])
    if table and not table_names:
        raise ValidationError(
            f"tables: none given: {', '.join(sorted(table))} sets the tables' options "
            "(a row_cache_size sets their caching); name them (--tables ks.t1,ks.t2)"
        )
    batches: tuple[tuple[str, ...], ...] = ()
    if restart or restart_all:
        batches = _adhoc_batches(engine, host_list, ring, consistency_level, tolerated_failures)
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    rendered = render_settings_for(engine, config)
    target = Composition(cluster=config, nodes={h: config for h in host_list})
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
        tables=table_names,
        node_live={h: dict(live) for h in host_list},
        fingerprint=fingerprint(engine, target, table_names),
    )


def _adhoc_batches(
    engine: str,
    hosts: list[str],
    ring: Ring | None,
    consistency_level: str,
    tolerated_failures: int,
) -> tuple[tuple[str, ...], ...]:
    from planner.topology.batching import safe_batches

    if not get_engine(engine).ring:
        return tuple((h,) for h in hosts)
    if ring is None:
        raise ValidationError("ring: a restart needs the live ring to batch safely")
    unknown = [h for h in hosts if h not in ring]
    if unknown:
        raise ValidationError(f"hosts: not in the live ring: {', '.join(unknown)}")
    return safe_batches(
        ring,
        consistency_level=consistency_level,
        tolerated_failures=tolerated_failures,
        hosts=hosts,
    ).batches


def render_settings_for(engine: str, config: Mapping[str, Any]) -> NodeSettings:
    """The file settings of one node for ``config`` (see :class:`NodeSettings`)."""
    from planner.model.spaces import render_settings

    rendered = render_settings(engine, config)
    spec = get_engine(engine)
    jvm = {"heap_size": config["heap_size"]} if spec.jvm and "heap_size" in config else {}
    return NodeSettings(settings=dict(rendered.get(spec.config_file, {})), jvm=jvm)


# ------------------------------------------------------------ rollout file
def load_rollout(path: str | Path) -> RolloutStep:
    """Read a RolloutStep written as JSON (``kairos rollout prepare|adhoc --out``).

    Raises
    ------
    ValidationError
        The file is unreadable or a field is missing or malformed (both named).
    """
    p = Path(path)
    data = inputs.load_json(p, kind=ROLLOUT_FILE)
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: a rollout is a JSON object, got {type(data).__name__}")
    spec = {f.name: f for f in fields(RolloutStep)}
    for name, f in spec.items():
        if f.default is MISSING and f.default_factory is MISSING and name not in data:
            raise ValidationError(f"{p}: {name}: missing")
    values = {k: v for k, v in data.items() if k in spec}
    for name in ("live", "restart", "table", "node_live"):
        if not isinstance(values.get(name, {}), dict):
            raise ValidationError(f"{p}: {name}: expected an object")
    values["batches"] = tuple(tuple(b) for b in _str_lists(p, "batches", data.get("batches")))
    for name in ("tables", "superseded", "verified_hosts"):
        values[name] = tuple(_strings(p, name, data.get(name, [])))
    values["nodes"] = _node_settings(p, data.get("nodes"))
    return RolloutStep(**values)


def _strings(path: Path, name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"{path}: {name}: expected a list of strings")
    return value


def _str_lists(path: Path, name: str, value: Any) -> list[list[str]]:
    if not isinstance(value, list):
        raise ValidationError(f"{path}: {name}: expected a list of host lists")
    return [_strings(path, f"{name}[{i}]", b) for i, b in enumerate(value)]


def _node_settings(path: Path, value: Any) -> dict[str, NodeSettings]:
    if not isinstance(value, dict):
        raise ValidationError(f"{path}: nodes: expected an object host -> settings")
    out: dict[str, NodeSettings] = {}
    for host, node in value.items():
        if (
            not isinstance(node, dict)
            or not isinstance(node.get("settings"), dict)
            or not isinstance(node.get("jvm", {}), dict)
            or set(node) - {"settings", "jvm"}
        ):
            raise ValidationError(f"{path}: nodes.{host}: expected {{settings: {{}}, jvm: {{}}}}")
        out[str(host)] = NodeSettings(settings=node["settings"], jvm=node.get("jvm", {}))
    return out


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
        problem = rollout.batch_problem(ring, batch, down=[h for h in down_hosts if h not in batch])
        if problem is not None:
            already = f" ({', '.join(down_hosts)} down now)" if down_hosts else ""
            raise RolloutRefused(f"pre-flight: batch {i + 1} {list(batch)}{already}: {problem}")
