"""Measured restart costs: T_r per node from the records of earlier rollouts.

The executor records, per node it restarted, how long each phase took (drain, stop,
start, sync; ``kairos rollout record --nodes``) in the plan's ``<plan>.state.json``
(planner/executor/rollout.py). A node's T_r is the sum of its phases. This module reads them
back for the cost model, from either

* a directory (the autopilot's state directory, or any folder of plans): every
  ``*.state.json`` under it whose plan file beside it is for the engine and cluster;
* one plan file or one state file (its plan beside it);
* the workload store (an SQLite file), whose ``rollout_events`` hold what
  :meth:`planner.workload.store.Store.record_rollout_state` copied in.

A node's T_r is the median of its last :data:`WINDOW` measured restarts (one slow
drain does not set the price); the cluster's T_r, for nodes never measured, is the
median over the measured nodes; with nothing measured it is the default, and the
source says so. Only *restart* records count: a record with a drain, stop or start
phase. Live changes take no node out of service and are charged ``live_seconds``
(default 0); the executor records no timings for them.

:func:`measured_restart_seconds` is what the autopilot calls;
``kairos plan --restart-seconds-from PATH`` uses :func:`measured_restarts`.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.errors import ValidationError

__all__ = [
    "RESTART_PHASES",
    "WINDOW",
    "MeasuredRestarts",
    "describe",
    "measured_restart_seconds",
    "measured_restarts",
    "restart_records",
]

#: Phases only a restart has: a record with one of them measured a restart.
RESTART_PHASES = ("drain", "stop", "start")
#: Restarts per node the median is taken over (the most recent ones).
WINDOW = 5
_SQLITE_MAGIC = b"SQLite format 3\x00"

#: (plan, step, node, epoch seconds, {phase: seconds}) of one measured node.
Record = tuple[str, str, str, float, dict[str, float]]


@dataclass(frozen=True)
class MeasuredRestarts:
    """What the cost model takes from earlier rollouts.

    Parameters
    ----------
    seconds
        T_r for a node never measured: the median of the measured nodes' T_r, or the
        default when none is measured.
    node_seconds
        Measured T_r per node (median of its last :data:`WINDOW` restarts).
    restarts
        Number of restart records used.
    source
        Where ``seconds`` comes from, as the plan's provenance records it.
    """

    seconds: float
    node_seconds: Mapping[str, float] = field(default_factory=dict)
    restarts: int = 0
    source: str = ""

    @property
    def measured(self) -> bool:
        """Whether any restart was measured (else ``seconds`` is the default)."""
        return bool(self.node_seconds)


def _is_sqlite(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC


def _plan_of(state_file: Path) -> Path:
    return state_file.with_name(state_file.name[: -len(".state.json")])


def _from_state_files(
    files: Iterable[Path], *, cluster: str, engine: str
) -> list[Record]:
    """Records of the state files whose plan beside them is ``engine``/``cluster``'s."""
    from planner.executor.rollout import load_state
    from planner.plan import load_plan
    from planner.workload.store import state_timings

    out: list[Record] = []
    for sf in files:
        plan_path = _plan_of(sf)
        if not plan_path.is_file():
            continue  # no plan beside it: whose timings they are is unknown
        plan = load_plan(plan_path)
        if plan.engine != engine or plan.cluster != cluster:
            continue
        for step, node, _status, at, phases in state_timings(load_state(sf)):
            out.append((str(plan_path), step, node, at, phases))
    return out


def _from_store(path: Path, *, cluster: str, engine: str) -> list[Record]:
    from planner.workload.store import Store

    with Store(path) as store:
        rows = store.rollout_timings(engine, cluster)
    return [(plan, step, node, float(i), phases)
            for i, (plan, step, node, _status, phases) in enumerate(rows)]


def restart_records(
    source: str | os.PathLike[str], *, cluster: str, engine: str
) -> list[Record]:
    """Every measured node restart of ``engine``/``cluster`` in ``source``, oldest first.

    Raises
    ------
    ValidationError
        ``--restart-seconds-from`` does not exist or is not a directory, plan, state file
        or store.
    """
    path = Path(source)
    if not path.exists():
        raise ValidationError(f"--restart-seconds-from: {path}: no such file or directory")
    if path.is_dir():
        records = _from_state_files(sorted(path.rglob("*.state.json")), cluster=cluster,
                                    engine=engine)
    elif path.name.endswith(".state.json"):
        records = _from_state_files([path], cluster=cluster, engine=engine)
    elif _is_sqlite(path):
        records = _from_store(path, cluster=cluster, engine=engine)
    elif path.suffix in (".yml", ".yaml"):
        records = _from_state_files([path.with_name(path.name + ".state.json")],
                                    cluster=cluster, engine=engine)
    else:
        raise ValidationError(
            f"--restart-seconds-from: {path}: expected a state directory, a plan, a "
            "<plan>.state.json or the workload store (SQLite)"
        )
    restarts = [r for r in records if any(r[4].get(p, 0.0) > 0 for p in RESTART_PHASES)]
    return sorted(restarts, key=lambda r: r[3])


def measured_restarts(
    source: str | os.PathLike[str], *, cluster: str, engine: str, default: float,
) -> MeasuredRestarts:
    """T_r per node and for the cluster from ``source`` (see the module docstring)."""
    records = restart_records(source, cluster=cluster, engine=engine)
    per_node: dict[str, list[float]] = {}
    for _plan, _step, node, _at, phases in records:
        per_node.setdefault(node, []).append(sum(phases.values()))
    if not per_node:
        return MeasuredRestarts(
            seconds=float(default),
            source=f"default {default:g} s: no restart of {engine} cluster {cluster!r} "
            f"measured in {os.fspath(source)}",
        )
    node_seconds = {n: round(float(statistics.median(v[-WINDOW:])), 2)
                    for n, v in sorted(per_node.items())}
    seconds = round(float(statistics.median(node_seconds.values())), 2)
    return MeasuredRestarts(
        seconds=seconds, node_seconds=node_seconds, restarts=len(records),
        source=f"measured: {len(records)} restart(s) of {len(node_seconds)} node(s) in "
        f"{os.fspath(source)} (median of each node's last {WINDOW}; "
        f"cluster T_r {seconds:g} s for nodes not measured)",
    )


def measured_restart_seconds(
    source: str | os.PathLike[str], *, cluster: str, engine: str, default: float = 60.0,
) -> tuple[float, str]:
    """``(T_r seconds, source)`` for the cost model: measured, or ``default`` until then.

    The autopilot's entry point: ``source`` is its state directory (the plans and their
    ``<plan>.state.json``) or the workload store. Per-node figures:
    :func:`measured_restarts`.
    """
    m = measured_restarts(source, cluster=cluster, engine=engine, default=default)
    return m.seconds, m.source


def describe(m: MeasuredRestarts) -> dict[str, Any]:
    """The provenance entry of a measurement (plain data)."""
    return {"seconds": m.seconds, "source": m.source, "restarts": m.restarts,
            "node_seconds": dict(m.node_seconds)}
