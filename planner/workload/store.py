"""The workload store: an embedded SQLite database on the control host.

Collectors (:mod:`planner.workload.collect`) append raw, monotonically increasing counters per node;
:meth:`Store.cluster_series` turns them into a :class:`planner.workload.series.WorkloadSeries` of
cluster-wide operations per second and operation mix, which the forecaster reads.

Where the database lives: the ``path`` given, else ``$KAIROS_STORE``, else
``.kairos/kairos.db`` under the current directory (the repository when run from it).

Tables
------
``counter_samples``
    One row per (engine, cluster, node, scope, time): the raw counters read from the node
    (JSON ``{name: count}``), the node's start time and instance id (restart detection) and,
    for Redis, its role. Counter names are the engine's *raw* counters (see
    :data:`RAW_COUNTERS`); they are mapped to the workload classes when a series is derived,
    so a mapping choice (e.g. Cassandra's update/insert split) never rewrites history.
``cluster_samples``
    Derived cluster series cached by :meth:`Store.refresh_cluster_samples` (time, step,
    ops/s, mix per class): what ``kairos report`` plots without recomputing.
``plans`` and ``rollout_events``
    Optional history: plans seen by the report/executor and per-node rollout phases
    (:meth:`Store.record_rollout_state` copies a plan's state file in; the planner reads
    measured restart times back with :meth:`Store.rollout_timings`).

Scopes
------
A node's sample of a round has scope ``node`` (its own counters, gauges and resources);
``kairos collect --per-table`` (Cassandra) keeps one sample per table beside it, scope
``table:<ks>.<table>``, whose counters the node's sample sums. The cluster's (and a node's) series
counts scope ``node`` alone wherever both ends of an interval have it, so nothing is counted
twice; a store whose rounds hold the tables alone (``--per-table`` before it kept the node's
sample too) counts the sum of the tables, as it did then; an interval from a round with the
node's sample alone to one with the tables alone shares no counters and is **dropped**
(:func:`counted_scopes`). ``table=`` derives one table's series from its scope alone. The
gauges (:meth:`Store.node_gauges`, :meth:`Store.gauge_rounds`) are read from scope ``node``
only.

Deriving rates (:meth:`Store.cluster_series`)
---------------------------------------------
For every node, consecutive samples ``a`` (earlier) and ``b`` of the scopes counted give an
interval ``[a.ts, b.ts]`` whose operations are the counter deltas ``b - a``, except:

* **restart** — the node's instance id changed (Redis ``run_id``; Cassandra host id +
  gossip generation) or, without ids, its start time moved forward by more than
  :data:`RESTART_TOLERANCE` seconds. If the new start time is known and lies inside the
  interval, the counters restarted from zero then, so the interval's operations are
  ``b``'s values (what the node served since it came back; operations it served between
  ``a`` and its shutdown are unknown and not counted). If the start time is unknown or
  outside the interval, the interval is **dropped** for that node.
* **reset without a restart** — any counter went *down* while the instance stayed the same
  (Redis ``CONFIG RESETSTAT``, a Cassandra table dropped and re-created): the interval is
  **dropped** for that node. A reset never yields a negative or spiked rate.
* **new scope** — where the tables are counted, a scope (Cassandra table) present in ``b``
  but not in ``a`` was created during the interval; its whole value counts.
* **Redis roles** — replicas execute every write their master replicates and also count
  it, so a replica contributes only its ``read`` counter (client reads sent with
  READONLY); a master contributes everything. An interval in which the node changed role
  (failover) is dropped for that node.

Intervals are then spread uniformly over the output bins: the collection rounds (``step_seconds``
None: bin ``i`` is ``[round_i, round_i+1)``) or a regular grid of ``step_seconds``. In each
bin a node's rate is its operations over the time its valid intervals cover, when they
cover at least :data:`MIN_COVERAGE` of the bin. A bin is kept only when every node whose
samples span it has such a rate: a node with a dropped interval leaves its bins out
(the series then has gaps — ``step_seconds`` is None — and ``resample(..., max_fill=)``
may fill them) rather than showing a dip. A bin with no operations at all takes the mix of
the previous bin (or a uniform mix). Bins are stamped with their start, as in
:func:`planner.workload.series.resample`.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, Unpack

import numpy as np

from planner.engines import get_engine
from planner.errors import KairosError, ValidationError
from planner.workload.series import WorkloadSeries, classes_for, infer_step

if TYPE_CHECKING:  # the store keeps plans but sits below the plan file's layer
    from planner.plan import Plan

SCHEMA_VERSION = 2  # 2: counter_samples.gauges (a version-1 store is upgraded in place)
DEFAULT_PATH = Path(".kairos") / "kairos.db"
STORE_ENV = "KAIROS_STORE"
#: Seconds by which a start time may wobble (Redis's is ``now - uptime``) without a restart.
RESTART_TOLERANCE = 2.0
#: Share of a bin a node's valid intervals must cover for the bin to use that node.
MIN_COVERAGE = 0.5

#: The raw counters each collector stores, per engine.
RAW_COUNTERS: dict[str, tuple[str, ...]] = {
    # Coordinator-level request counts (each client request is coordinated by one node).
    "cassandra": ("read", "write", "scan"),
    # INFO commandstats calls summed per class; "ignored" = connection/introspection plumbing.
    "redis": ("read", "write", "other", "ignored"),
}
#: Every engine's per-node resource use, read from the node's envelope where it runs
#: (``kairos collect --resources``; docs/envelopes.md): CPU seconds (the node's processes)
#: and throttled seconds (its cgroup), memory in use and the page cache within it, read
#: I/Os (cumulative except the two memory readings), and the envelope's limits.
RESOURCE_GAUGES: tuple[str, ...] = (
    "cpu_seconds", "cpu_throttled_seconds", "memory_bytes", "page_cache_bytes", "read_ios",
    "cpu_limit_cores", "memory_limit_bytes", "read_iops_limit",
)
#: The gauges each collector stores beside its counters (readings, not counts): the p99
#: latency per class in ms, a saturation signal (docs/collect-and-report.md), and the
#: node's resource use (:data:`RESOURCE_GAUGES`).
GAUGES: dict[str, tuple[str, ...]] = {
    # p99th_ms of system_views.coordinator_*_latency (a decaying reservoir: the last minutes),
    # the worst of the application's tables; the request stages' pending and blocked tasks.
    "cassandra": ("p99_ms_read", "p99_ms_write", "p99_ms_scan", "pending_tasks", "blocked_tasks",
                  "active_requests", *RESOURCE_GAUGES),
    # INFO latencystats (since the start or CONFIG RESETSTAT), the worst command of the
    # class; the main thread's CPU seconds (cumulative: its rate is the thread's utilisation);
    # the configuration signals (planner.workload.collect.REDIS_SIGNALS, issue 41) and the
    # encodings of a sample of keys.
    "redis": ("p99_ms_read", "p99_ms_write", "p99_ms_other", "cpu_main_seconds",
              "keyspace_hits", "keyspace_misses", "evicted_keys", "expired_keys",
              "total_commands_processed", "total_reads_processed", "used_memory", "maxmemory",
              "mem_fragmentation_ratio", "connected_clients", "keys", "sampled_aggregates",
              "sampled_compact", *RESOURCE_GAUGES),
}
#: Cumulative gauges -> the rate per second a node's consecutive samples give
#: (:meth:`Store.node_gauges`): cores used, throttled seconds per second, read IOPS, and
#: Redis's main-thread utilisation.
GAUGE_RATES: dict[str, str] = {
    "cpu_seconds": "cpu_cores",
    "cpu_throttled_seconds": "cpu_throttled_share",
    "read_ios": "read_iops",
    "cpu_main_seconds": "cpu_main_utilisation",
    "keyspace_hits": "hits_per_second",
    "keyspace_misses": "misses_per_second",
    "evicted_keys": "evictions_per_second",
    "expired_keys": "expirations_per_second",
    "total_commands_processed": "commands_per_second",
    "total_reads_processed": "reads_per_second",
}
#: Per-node values :meth:`Store.gauge_rounds` sums over the cluster (the others of Redis's
#: signals are the worst node's).
SUMMED_GAUGES: frozenset[str] = frozenset({
    "pending_tasks", "blocked_tasks", "hits_per_second", "misses_per_second",
    "evictions_per_second", "expirations_per_second", "commands_per_second", "reads_per_second",
    "connected_clients", "keys", "sampled_aggregates", "sampled_compact",
})
#: The worst node's (highest) value per round.
WORST_GAUGES: frozenset[str] = frozenset({
    "active_requests", "cpu_main_utilisation", "mem_fragmentation_ratio",
})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counter_samples (
    id INTEGER PRIMARY KEY,
    engine TEXT NOT NULL,
    cluster TEXT NOT NULL,
    node TEXT NOT NULL,
    scope TEXT NOT NULL,
    ts REAL NOT NULL,
    round_ts REAL NOT NULL,
    started_at REAL,
    instance TEXT,
    role TEXT,
    counters TEXT NOT NULL,
    gauges TEXT,
    UNIQUE (engine, cluster, node, scope, ts)
);
CREATE INDEX IF NOT EXISTS counter_samples_by_time
    ON counter_samples (engine, cluster, round_ts);
CREATE TABLE IF NOT EXISTS cluster_samples (
    engine TEXT NOT NULL,
    cluster TEXT NOT NULL,
    step_seconds REAL NOT NULL,
    ts REAL NOT NULL,
    load REAL NOT NULL,
    mix TEXT NOT NULL,
    PRIMARY KEY (engine, cluster, step_seconds, ts)
);
CREATE TABLE IF NOT EXISTS plans (
    id INTEGER PRIMARY KEY,
    engine TEXT NOT NULL,
    cluster TEXT NOT NULL,
    path TEXT,
    created_at TEXT,
    recorded_at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rollout_events (
    id INTEGER PRIMARY KEY,
    plan TEXT NOT NULL,
    step_id TEXT NOT NULL,
    node TEXT NOT NULL,
    phase TEXT NOT NULL,
    seconds REAL,
    status TEXT,
    at REAL NOT NULL
);
"""

#: The units of an age such as ``6h`` (``parse_since``).
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str | None, *, now: float | None = None,
                field: str = "--since") -> float | None:
    """Epoch seconds from ``text``: a number, ISO 8601 (naive = UTC) or an age (``6h``).

    ``field`` names the option or setting in the error (``--since`` by default).
    """
    if text is None:
        return None
    value = text.strip()
    now = time.time() if now is None else now
    if value and value[-1] in _AGE_UNITS:
        try:
            return now - float(value[:-1]) * _AGE_UNITS[value[-1]]
        except ValueError:
            pass
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(
            f"{field}: {text!r} is not epoch seconds, ISO 8601 or an age like 6h"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


class StoreError(KairosError):
    """The store cannot be opened or holds something unexpected."""


def _check_gauges(engine: str, sample: CounterSample) -> None:
    """Refuse a gauge the engine does not collect, or a reading that is not a finite
    non-negative number."""
    for k, v in sample.gauges.items():
        if k not in GAUGES[engine]:
            raise ValidationError(
                f"sample {sample.node}/{sample.scope}: unknown {engine} gauge {k!r}; "
                f"known: {sorted(GAUGES[engine])}"
            )
        if isinstance(v, bool) or not isinstance(v, int | float | np.number) \
                or not math.isfinite(float(v)) or float(v) < 0:
            raise ValidationError(
                f"sample {sample.node}/{sample.scope}: gauge {k} must be a finite "
                f"non-negative number, got {v!r}"
            )


class GaugeRound(NamedTuple):
    """The cluster's gauges at one collection round (:meth:`Store.gauge_rounds`)."""

    ts: float
    values: Mapping[str, float]


class NodeGauges(NamedTuple):
    """One node's gauges at one collection round (:meth:`Store.node_gauges`): its readings,
    and the rates of its cumulative gauges (:data:`GAUGE_RATES`) where it has them."""

    ts: float
    node: str
    values: Mapping[str, float]


@dataclass(frozen=True)
class CounterSample:
    """One node's raw counters for one scope at one time.

    Attributes
    ----------
    node
        The node's name (inventory host or ``address:port``).
    scope
        ``"node"`` for whole-node counters, ``"table:<ks>.<table>"`` for a Cassandra table
        (see the module docstring, "Scopes", for which the series count).
    ts
        When the counters were read (epoch seconds, control-host clock).
    counters
        Raw counter name -> cumulative count (non-negative integers).
    started_at
        When the node (its counters) started, epoch seconds; None if unknown.
    instance
        An id that changes whenever the node restarts (Redis run_id, Cassandra
        host id + gossip generation); None if unknown.
    role
        Redis ``master``/``replica``; None for Cassandra.
    gauges
        Gauge name (:data:`GAUGES`) -> reading (non-negative); only those the node gave.
    """

    node: str
    scope: str
    ts: float
    counters: Mapping[str, int]
    started_at: float | None = None
    instance: str | None = None
    role: str | None = None
    gauges: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInterval:
    """Operations one node served between two consecutive samples (per workload class)."""

    node: str
    start: float
    end: float
    ops: Mapping[str, float]
    kind: str  # "delta" | "restart"


@dataclass(frozen=True)
class DroppedInterval:
    """An interval left out for one node, and why."""

    node: str
    start: float
    end: float
    reason: str


class SeriesOptions(TypedDict, total=False):
    """What :meth:`Store.derive` and :meth:`Store.cluster_series` derive, besides the cluster.

    since
        Epoch seconds: only bins starting at or after it (the round before it is read
        too, so the first bin has a rate). Default None: every round.
    step_seconds
        A regular grid; None (the default) bins by collection round.
    table
        ``"<keyspace>.<table>"``: that Cassandra table only (scope ``table:...``); None
        (the default): the cluster, each node's own sample or, in a store without one, its
        tables' sum (the module docstring, "Scopes").
    insert_fraction
        Cassandra: the share of writes counted as ``insert`` (default 0: all ``update``).
    node
        One node's own operations only (scope ``node:<node>``; with ``table``,
        ``table:<keyspace>.<table>@node:<node>``): what that node coordinates (Cassandra)
        or serves (Redis), the load ``kairos plan --node-forecast`` plans each node on.
        None (the default): every node's.
    """

    since: float | None
    step_seconds: float | None
    table: str | None
    insert_fraction: float
    node: str | None


@dataclass
class Derivation:
    """Everything :meth:`Store.derive` worked out (the series and what it left out)."""

    intervals: list[NodeInterval] = field(default_factory=list)
    dropped: list[DroppedInterval] = field(default_factory=list)
    dropped_bins: list[tuple[float, float, str]] = field(default_factory=list)
    series: WorkloadSeries | None = None


def default_path() -> Path:
    """``$KAIROS_STORE`` if set, else ``.kairos/kairos.db`` under the current directory."""
    env = os.environ.get(STORE_ENV)
    return Path(env) if env else DEFAULT_PATH


# ------------------------------------------------------------------- class mapping
def to_classes(
    engine: str,
    ops: Mapping[str, float],
    *,
    role: str | None = None,
    insert_fraction: float = 0.0,
) -> dict[str, float]:
    """Map raw counter deltas to the engine's workload classes.

    Cassandra: ``read`` -> read, ``scan`` -> scan, ``write`` -> update and insert split by
    ``insert_fraction`` (Cassandra counts mutations without telling an insert from an
    update; the default 0 puts every write in ``update``). Redis: ``read``/``write``/``other``
    as they are (``ignored`` is dropped); a replica contributes only ``read``.
    """
    out: dict[str, float] = get_engine(engine).counters.get()(
        ops, role=role, insert_fraction=insert_fraction)
    return out


def cassandra_classes(
    ops: Mapping[str, float], *, role: str | None, insert_fraction: float,
) -> dict[str, float]:
    """:func:`to_classes` for Cassandra (the registry's ``counters``, planner.engines); every
    node serves reads and writes, whatever ``role``."""
    if not 0.0 <= insert_fraction <= 1.0:
        raise ValidationError(f"insert_fraction: must be in [0, 1], got {insert_fraction}")
    out = dict.fromkeys(classes_for("cassandra"), 0.0)
    writes = float(ops.get("write", 0.0))
    out["read"] = float(ops.get("read", 0.0))
    out["scan"] = float(ops.get("scan", 0.0))
    out["insert"] = writes * insert_fraction
    out["update"] = writes - out["insert"]
    return out


def redis_classes(
    ops: Mapping[str, float], *, role: str | None, insert_fraction: float,
) -> dict[str, float]:
    """:func:`to_classes` for Redis (the registry's ``counters``, planner.engines): the
    classes as counted (``insert_fraction`` is Cassandra's)."""
    classes = classes_for("redis")
    out = dict.fromkeys(classes, 0.0)
    if role == "replica":
        out["read"] = float(ops.get("read", 0.0))
    else:
        for c in classes:
            out[c] = float(ops.get(c, 0.0))
    return out


# ------------------------------------------------------------------ the pure maths
def _restarted(a: CounterSample, b: CounterSample) -> bool:
    if a.instance is not None and b.instance is not None:
        return a.instance != b.instance
    if a.started_at is not None and b.started_at is not None:
        return b.started_at > a.started_at + RESTART_TOLERANCE
    return False


def counted_scopes(
    before: Mapping[str, CounterSample] | None, after: Mapping[str, CounterSample]
) -> list[str] | None:
    """The scopes whose counters give a node's operations over one interval, from its
    samples at the interval's start (``before``, scope -> sample; None after a restart,
    whose counters start from zero) and end (``after``).

    A round of ``collect --per-table`` keeps the node's own sample (scope ``node``, the sum
    of its tables) beside one per table: the node's alone is counted, else every request
    would count twice. Older stores hold the tables alone (``collect --per-table`` before
    it kept the node's sample too): their sum is counted, as it was. So: ``node`` when both
    ends have it (one end, after a restart); else the tables, when both ends have some;
    None when the ends share no counters (one end has the node's sample alone, the other
    its tables alone): the interval cannot be counted.
    """
    ends = [after] if before is None else [before, after]
    if all("node" in end for end in ends):
        return ["node"]
    if all(any(scope != "node" for scope in end) for end in ends):
        return sorted(scope for scope in after if scope != "node")
    return None


def node_intervals(
    engine: str,
    samples: Sequence[CounterSample],
    *,
    insert_fraction: float = 0.0,
) -> tuple[list[NodeInterval], list[DroppedInterval]]:
    """Per-interval operations of one node from its samples (all scopes, any order).

    Samples are grouped by time (one collection of a node gives one sample per scope at
    the same ``ts``); consecutive groups give one interval each, counted from the scopes
    :func:`counted_scopes` picks (the node's own sample where both rounds have it, else its
    tables'). See the module docstring for the restart/reset rules.
    """
    replica_roles = get_engine(engine).replica_roles
    by_ts: dict[float, dict[str, CounterSample]] = defaultdict(dict)
    for s in samples:
        by_ts[s.ts][s.scope] = s
    times = sorted(by_ts)
    good: list[NodeInterval] = []
    dropped: list[DroppedInterval] = []
    for t0, t1 in pairwise(times):
        before, after = by_ts[t0], by_ts[t1]
        any_a, any_b = next(iter(before.values())), next(iter(after.values()))
        node = any_b.node
        if replica_roles and (any_a.role or "master") != (any_b.role or "master"):
            dropped.append(
                DroppedInterval(node, t0, t1, f"role changed ({any_a.role} -> {any_b.role})")
            )
            continue
        raw: dict[str, float] = defaultdict(float)
        kind = "delta"
        restarted = _restarted(any_a, any_b)
        scopes = counted_scopes(None if restarted else before, after)
        if scopes is None:
            dropped.append(DroppedInterval(
                node, t0, t1, f"no counters in common: scopes {_scopes_text(before)} -> "
                f"{_scopes_text(after)}"))
            continue
        if restarted:
            started = any_b.started_at
            if started is None or not (t0 - RESTART_TOLERANCE <= started <= t1):
                where = "unknown" if started is None else f"{started:.0f}, outside the interval"
                dropped.append(
                    DroppedInterval(node, t0, t1, f"restarted (start time {where})")
                )
                continue
            kind = "restart"
            for scope in scopes:
                for k, v in after[scope].counters.items():
                    raw[k] += v
        else:
            reset = None
            for scope in scopes:
                s, prev = after[scope], before.get(scope)
                for k, v in s.counters.items():
                    old = 0 if prev is None else prev.counters.get(k, 0)
                    if v < old:
                        reset = f"counter {scope}/{k} went down ({old} -> {v}) without a restart"
                        break
                    raw[k] += v - old
                if reset:
                    break
            if reset:
                dropped.append(DroppedInterval(node, t0, t1, reset))
                continue
        ops = to_classes(engine, raw, role=any_b.role, insert_fraction=insert_fraction)
        good.append(NodeInterval(node, t0, t1, ops, kind))
    return good, dropped


def _scopes_text(samples: Mapping[str, CounterSample]) -> str:
    """``node``, ``3 table(s)`` or ``node + 3 table(s)``: what a node's round kept."""
    tables = sum(scope != "node" for scope in samples)
    parts = (["node"] if "node" in samples else []) + ([f"{tables} table(s)"] if tables else [])
    return " + ".join(parts)


def round_spans(
    by_node: Mapping[str, Sequence[CounterSample]], rounds: Sequence[float]
) -> dict[str, tuple[float, float]]:
    """Each node's first and last sample time, widened to the first and last read of the
    rounds they belong to: a node read in a round counts as collected for the whole round.

    A round reads the nodes one after the other, a few tenths of a second apart; on a bin
    edge those tenths decided which nodes :func:`aggregate` expected in a bin, so a bin
    that ended past the last round could hold the nodes read last alone (a cluster's
    replicas, which count no writes): a load of 0 ops/s, which a naive forecast carried
    over the whole horizon. Widened, every node of the round is expected there or none is,
    and a bin the round does not cover is dropped rather than half counted.
    """
    order = sorted(rounds)

    def round_of(ts: float) -> int:
        return max(0, bisect.bisect_right(order, ts) - 1)

    first_read: dict[int, float] = {}
    last_read: dict[int, float] = {}
    for samples in by_node.values():
        for smp in samples:
            r = round_of(smp.ts)
            first_read[r] = min(first_read.get(r, smp.ts), smp.ts)
            last_read[r] = max(last_read.get(r, smp.ts), smp.ts)
    spans: dict[str, tuple[float, float]] = {}
    for node, samples in by_node.items():
        first, last = min(x.ts for x in samples), max(x.ts for x in samples)
        spans[node] = (first_read[round_of(first)], last_read[round_of(last)])
    return spans


def _bin_edges(rounds: Sequence[float], step: float | None, since: float | None) -> np.ndarray:
    if step is None:
        edges = np.asarray(sorted(set(rounds)), dtype=float)
    else:
        first, last = min(rounds), max(rounds)
        start = math.floor(first / step) * step
        n = max(0, math.ceil((last - start) / step - 1e-9))
        edges = start + step * np.arange(n + 1)
    if since is not None:
        keep = edges >= since - 1e-9
        idx = int(np.argmax(keep)) if keep.any() else edges.size
        edges = edges[idx:]
    return edges


def aggregate(
    engine: str,
    intervals: Sequence[NodeInterval],
    spans: Mapping[str, tuple[float, float]],
    edges: np.ndarray,
    *,
    min_coverage: float = MIN_COVERAGE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[float, float, str]]]:
    """Spread node intervals over bins; return (bin starts, load, mix matrix, dropped bins).

    ``spans`` gives each node's first and last sample time: a node is expected in every bin
    its span covers at least ``min_coverage`` of.
    """
    classes = classes_for(engine)
    nb = max(0, edges.size - 1)
    nodes = sorted(spans)
    ops = np.zeros((len(nodes), nb, len(classes)))
    covered = np.zeros((len(nodes), nb))
    index = {n: i for i, n in enumerate(nodes)}
    lo, hi = edges[:-1], edges[1:]
    widths = hi - lo
    for iv in intervals:
        if iv.end <= iv.start or iv.node not in index:
            continue
        overlap = np.clip(np.minimum(hi, iv.end) - np.maximum(lo, iv.start), 0.0, None)
        if not overlap.any():
            continue
        share = overlap / (iv.end - iv.start)
        vec = np.array([iv.ops[c] for c in classes])
        i = index[iv.node]
        ops[i] += share[:, None] * vec[None, :]
        covered[i] += overlap
    starts: list[float] = []
    loads: list[float] = []
    mixes: list[np.ndarray] = []
    dropped: list[tuple[float, float, str]] = []
    previous_mix = np.full(len(classes), 1.0 / len(classes))
    for k in range(nb):
        total = np.zeros(len(classes))
        missing = []
        expected = 0
        for n in nodes:
            i = index[n]
            first, last = spans[n]
            span = max(0.0, min(hi[k], last) - max(lo[k], first))
            if span < min_coverage * widths[k]:
                continue  # the node was not being collected then
            expected += 1
            if covered[i, k] < min_coverage * widths[k]:
                missing.append(n)
                continue
            total += ops[i, k] / covered[i, k] * widths[k]
        if missing or not expected:
            why = "no valid interval for " + ", ".join(missing) if missing else "no samples"
            dropped.append((float(lo[k]), float(hi[k]), why))
            continue
        load = float(total.sum() / widths[k])
        if total.sum() > 0:
            previous_mix = total / total.sum()
        starts.append(float(lo[k]))
        loads.append(load)
        mixes.append(previous_mix.copy())
    mix = np.array(mixes) if mixes else np.zeros((0, len(classes)))
    return np.array(starts), np.array(loads), mix, dropped


# ------------------------------------------------------------------------ the store
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_sqlite_file(path: Path) -> None:
    """Refuse an existing path that is not a SQLite database, before SQLite opens it.

    SQLite's own error ("file is not a database") does not say what the file is; an
    empty file is fine (SQLite makes it a new database).
    """
    if not path.exists():
        return
    if not path.is_file():
        raise StoreError(f"store: {path}: not a regular file (a directory?)")
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"store: {path}: cannot read it ({exc.strerror or exc})") from None
    if head and head != _SQLITE_MAGIC:
        raise StoreError(
            f"store: {path}: not a usable SQLite database (the file does not start with the "
            "SQLite header; is it a trace or another file?)"
        )


class Store:
    """The workload store (SQLite). Open with ``Store(path)``; ``path=None`` is the default.

    Examples
    --------
    >>> store = Store(":memory:")
    >>> store.append_counters("redis", "lab", [CounterSample("r1", "node", 0.0,
    ...     {"read": 0, "write": 0, "other": 0}, instance="x", role="master")])
    1
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        if str(self.path) != ":memory:":
            _check_sqlite_file(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30.0)
            self._db.executescript(_SCHEMA)
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            version = self._db.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'"
            ).fetchone()[0]
            if int(version) == 1:  # add the gauges column; every older row has none
                self._db.execute("ALTER TABLE counter_samples ADD COLUMN gauges TEXT")
                self._db.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
                )
                version = SCHEMA_VERSION
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"store: {self.path}: not a usable SQLite database ({exc})") from None
        if int(version) != SCHEMA_VERSION:
            raise StoreError(
                f"store: {self.path}: schema version {version}, this Kairos reads {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._db:
            yield self._db

    # ------------------------------------------------------------------- writing
    def append_counters(
        self,
        engine: str,
        cluster: str,
        samples: Iterable[CounterSample],
        *,
        round_ts: float | None = None,
    ) -> int:
        """Append raw counter samples (one collection round); return how many were new.

        ``round_ts`` is the round's time (default: the earliest sample time); a sample
        already stored for the same node, scope and time is ignored (re-runs are harmless).
        """
        classes_for(engine)
        if not cluster:
            raise ValidationError("cluster: must be a non-empty name")
        rows = []
        items = list(samples)
        if not items:
            return 0
        rts = float(round_ts) if round_ts is not None else min(float(s.ts) for s in items)
        known = set(RAW_COUNTERS[engine])
        for s in items:
            if not s.node or not s.scope:
                raise ValidationError("sample: node and scope must be non-empty")
            if not math.isfinite(float(s.ts)):
                raise ValidationError(f"sample {s.node}: time is not finite")
            _check_gauges(engine, s)
            for k, v in s.counters.items():
                if k not in known:
                    raise ValidationError(
                        f"sample {s.node}/{s.scope}: unknown {engine} counter {k!r}; "
                        f"known: {sorted(known)}"
                    )
                if not isinstance(v, int | np.integer) or v < 0:
                    raise ValidationError(
                        f"sample {s.node}/{s.scope}: counter {k} must be a non-negative "
                        f"integer, got {v!r}"
                    )
            rows.append(
                (
                    engine,
                    cluster,
                    s.node,
                    s.scope,
                    float(s.ts),
                    rts,
                    None if s.started_at is None else float(s.started_at),
                    s.instance,
                    s.role,
                    json.dumps({k: int(v) for k, v in sorted(s.counters.items())}),
                    json.dumps({k: float(v) for k, v in sorted(s.gauges.items())})
                    if s.gauges else None,
                )
            )
        with self._tx() as db:
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO counter_samples (engine, cluster, node, scope, ts, "
                "round_ts, started_at, instance, role, counters, gauges) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            return db.total_changes - before

    def record_plan(self, plan_path: str | Path, plan: Plan) -> None:
        """Remember a plan (its validated content, as loaded from ``plan_path``) in the
        ``plans`` table."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO plans (engine, cluster, path, created_at, recorded_at, body) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (plan.engine, plan.cluster, str(plan_path), plan.created_at.isoformat(),
                 time.time(), json.dumps(plan.to_dict())),
            )

    def record_rollout(self, plan: str, step_id: str, nodes: Mapping[str, Mapping[str, Any]],
                       *, status: str, at: float | None = None) -> None:
        """Remember a step's per-node phase timings (``{host: {phase: seconds}}``)."""
        when = time.time() if at is None else at
        rows = [
            (plan, step_id, host, phase, float(sec), status, when)
            for host, phases in nodes.items()
            for phase, sec in phases.items()
        ]
        with self._tx() as db:
            db.executemany(
                "INSERT INTO rollout_events (plan, step_id, node, phase, seconds, status, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def record_rollout_state(self, plan_path: str | Path, plan: Plan,
                             state: Mapping[str, Any]) -> int:
        """Copy a plan's rollout state (``<plan>.state.json`` content, as
        :func:`planner.executor.rollout.load_state` reads it) per-node timings into
        ``rollout_events``.

        The plan is recorded too (``plans``: its engine and cluster name the timings).
        Idempotent: the plan's earlier rows are replaced. Kept per (step, node): see
        :func:`state_timings`. Returns the number of (step, node) records written.
        """
        path = str(Path(plan_path).resolve())
        records = state_timings(state)
        known = self._db.execute("SELECT 1 FROM plans WHERE path = ?", (path,)).fetchone()
        if known is None:
            self.record_plan(path, plan)
        with self._tx() as db:
            db.execute("DELETE FROM rollout_events WHERE plan = ?", (path,))
            db.executemany(
                "INSERT INTO rollout_events (plan, step_id, node, phase, seconds, status, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(path, step, node, phase, sec, status, at)
                 for step, node, status, at, phases in records
                 for phase, sec in phases.items()],
            )
        return len(records)

    # ------------------------------------------------------------------- reading
    def rollout_timings(
        self, engine: str, cluster: str
    ) -> list[tuple[str, str, str, str, dict[str, float]]]:
        """Recorded per-node phase timings of ``engine``/``cluster``'s rollouts.

        ``(plan, step_id, node, status, {phase: seconds})`` for events whose plan is in
        ``plans`` under that engine and cluster, oldest first.
        """
        rows = self._db.execute(
            "SELECT e.plan, e.step_id, e.node, e.status, e.phase, e.seconds, e.at "
            "FROM rollout_events e WHERE e.plan IN (SELECT path FROM plans "
            "WHERE engine = ? AND cluster = ?) ORDER BY e.at, e.id",
            (engine, cluster),
        ).fetchall()
        out: dict[tuple[str, str, str], tuple[str, float, dict[str, float]]] = {}
        for plan, step, node, status, phase, sec, at in rows:
            entry = out.setdefault((plan, step, node), (status or "", float(at), {}))
            if sec is not None:
                entry[2][phase] = float(sec)
        return [(k[0], k[1], k[2], v[0], v[2])
                for k, v in sorted(out.items(), key=lambda kv: kv[1][1])]

    def clusters(self) -> list[tuple[str, str]]:
        """The (engine, cluster) pairs with samples."""
        rows = self._db.execute(
            "SELECT DISTINCT engine, cluster FROM counter_samples ORDER BY engine, cluster"
        )
        return [(e, c) for e, c in rows]

    def samples(
        self,
        engine: str,
        cluster: str,
        *,
        since: float | None = None,
        table: str | None = None,
        node: str | None = None,
    ) -> list[CounterSample]:
        """Raw samples, oldest first; with ``since``, from the last round before it onwards;
        with ``table`` or ``node``, that table's or node's only."""
        sql = (
            "SELECT node, scope, ts, counters, started_at, instance, role, gauges "
            "FROM counter_samples WHERE engine = ? AND cluster = ? AND round_ts >= ?"
        )
        args: list[Any] = [engine, cluster, self._lower_bound(engine, cluster, since)]
        if table is not None:
            sql += " AND scope = ?"
            args.append(f"table:{table}")
        if node is not None:
            sql += " AND node = ?"
            args.append(node)
        sql += " ORDER BY ts, node, scope"
        return [
            CounterSample(
                node=node,
                scope=scope,
                ts=ts,
                counters=json.loads(counters),
                started_at=started,
                instance=instance,
                role=role,
                gauges=json.loads(gauges) if gauges else {},
            )
            for node, scope, ts, counters, started, instance, role, gauges
            in self._db.execute(sql, args)
        ]

    def gauge_rounds(
        self, engine: str, cluster: str, *, since: float | None = None
    ) -> list[GaugeRound]:
        """The cluster's gauges per collection round, oldest first (rounds without any are
        left out). Each class's p99 is the worst node's; Cassandra's pending and blocked
        tasks are summed over the nodes, its requests in flight are the busiest node's;
        Redis's ``cpu_main_utilisation`` is the busiest node's main-thread CPU seconds over
        the seconds since its previous sample (same instance: a restart starts the count
        again); ``cpu_limit_share`` is the busiest node's cores used over its envelope's
        limit, in the rounds that read its resources: the per-node readings and rates are
        :meth:`node_gauges`'s. Redis's signals: the rates of hits, misses, evictions,
        expirations, commands and read events, the clients, keys and sampled keys are summed
        (:data:`SUMMED_GAUGES`); ``memory_share`` is the fullest node's ``used_memory`` over
        its ``maxmemory`` (where one is set), the fragmentation ratio the worst node's; and
        from the sums, ``hit_ratio``, ``commands_per_read`` and ``compact_share``
        (:func:`redis_ratios`)."""
        rounds: dict[float, dict[str, float]] = {}
        for g in self.node_gauges(engine, cluster, since=since):
            values = rounds.setdefault(g.ts, {})
            cores, limit = g.values.get("cpu_cores"), g.values.get("cpu_limit_cores")
            if cores is not None and limit:
                values["cpu_limit_share"] = max(values.get("cpu_limit_share", 0.0), cores / limit)
            used, maxmemory = g.values.get("used_memory"), g.values.get("maxmemory")
            if used is not None and maxmemory:
                values["memory_share"] = max(values.get("memory_share", 0.0), used / maxmemory)
            for k, v in g.values.items():
                if k.startswith("p99_ms_") or k in WORST_GAUGES:
                    values[k] = max(values.get(k, 0.0), v)
                elif k in SUMMED_GAUGES:
                    values[k] = values.get(k, 0.0) + v
        return [GaugeRound(ts=t, values={**v, **redis_ratios(v)})
                for t, v in sorted(rounds.items())]

    def node_gauges(
        self, engine: str, cluster: str, *, since: float | None = None
    ) -> list[NodeGauges]:
        """Each node's gauges per collection round, oldest first, then by node (rounds in
        which a node gave none are left out).

        Readings are as stored; each cumulative gauge (:data:`GAUGE_RATES`) also gives its
        rate per second since the node's previous sample that had it: ``cpu_seconds`` ->
        ``cpu_cores``, ``cpu_throttled_seconds`` -> ``cpu_throttled_share``, ``read_ios`` ->
        ``read_iops``, ``cpu_main_seconds`` -> ``cpu_main_utilisation``. A rate needs the
        same instance (a restart starts the process's CPU count again), a later time and a
        count that did not go down; otherwise the round has the reading and no rate, never
        a zero. With ``since``, from the round before it (so its first round has rates).
        """
        rows = self._db.execute(
            "SELECT round_ts, node, ts, instance, gauges FROM counter_samples "
            "WHERE engine = ? AND cluster = ? AND scope = 'node' AND gauges IS NOT NULL "
            "AND round_ts >= ? ORDER BY round_ts, node",
            (engine, cluster, self._lower_bound(engine, cluster, since)),
        )
        out: list[NodeGauges] = []
        previous: dict[tuple[str, str], tuple[float, str | None, float]] = {}
        for round_ts, node, ts, instance, text in rows:
            values = {k: float(v) for k, v in json.loads(text).items()}
            for counter, rate in GAUGE_RATES.items():
                if counter not in values:
                    continue
                before = previous.get((node, counter))
                now = (float(ts), instance, values[counter])
                if before is not None and before[1] == instance and now[0] > before[0] \
                        and now[2] >= before[2]:
                    values[rate] = (now[2] - before[2]) / (now[0] - before[0])
                previous[(node, counter)] = now
            out.append(NodeGauges(ts=float(round_ts), node=node, values=values))
        return out

    def _lower_bound(self, engine: str, cluster: str, since: float | None) -> float:
        """The first round to read for ``since``: the last round before it (or -inf)."""
        if since is None:
            return -math.inf
        prev = self._db.execute(
            "SELECT MAX(round_ts) FROM counter_samples WHERE engine = ? AND cluster = ? "
            "AND round_ts < ?",
            (engine, cluster, since),
        ).fetchone()[0]
        return float(prev) if prev is not None else float(since)

    def rounds(self, engine: str, cluster: str, *, since: float | None = None) -> list[float]:
        """The collection rounds' times, oldest first (from the round before ``since``)."""
        rows = self._db.execute(
            "SELECT DISTINCT round_ts FROM counter_samples WHERE engine = ? AND cluster = ? "
            "AND round_ts >= ? ORDER BY round_ts",
            (engine, cluster, self._lower_bound(engine, cluster, since)),
        )
        return [r for (r,) in rows]

    def nodes(self, engine: str, cluster: str) -> list[str]:
        """The nodes with samples in the store, sorted."""
        rows = self._db.execute(
            "SELECT DISTINCT node FROM counter_samples WHERE engine = ? AND cluster = ? "
            "ORDER BY node",
            (engine, cluster),
        )
        return [n for (n,) in rows]

    def derive(
        self,
        engine: str,
        cluster: str,
        *,
        min_coverage: float = MIN_COVERAGE,
        **options: Unpack[SeriesOptions],
    ) -> Derivation:
        """Like :meth:`cluster_series`, also returning the intervals used and dropped."""
        since, table, node = options.get("since"), options.get("table"), options.get("node")
        step_seconds = options.get("step_seconds")
        insert_fraction = options.get("insert_fraction", 0.0)
        classes_for(engine)
        if step_seconds is not None and not (math.isfinite(step_seconds) and step_seconds > 0):
            raise ValidationError(f"step_seconds: must be positive, got {step_seconds!r}")
        if node is not None:
            known = self.nodes(engine, cluster)
            if known and node not in known:
                raise ValidationError(f"node: {engine}/{cluster} holds no samples of node "
                                      f"{node!r} (nodes: {', '.join(known)})")
        samples = self.samples(engine, cluster, since=since, table=table, node=node)
        out = Derivation()
        if not samples:
            return out
        by_node: dict[str, list[CounterSample]] = defaultdict(list)
        for s in samples:
            by_node[s.node].append(s)
        rounds = self.rounds(engine, cluster, since=since)
        spans = round_spans(by_node, rounds)
        for ss in by_node.values():
            good, dropped = node_intervals(engine, ss, insert_fraction=insert_fraction)
            out.intervals.extend(good)
            out.dropped.extend(dropped)
        edges = _bin_edges(rounds, step_seconds, since)
        starts, load, mix, dropped_bins = aggregate(
            engine, out.intervals, spans, edges, min_coverage=min_coverage
        )
        out.dropped_bins = dropped_bins
        if starts.size >= 2:
            if step_seconds is None:
                step = infer_step(starts)
            else:  # a dropped bin inside the series leaves a gap: irregular
                regular = np.allclose(np.diff(starts), step_seconds, rtol=1e-6)
                step = step_seconds if regular else None
            classes = classes_for(engine)
            out.series = WorkloadSeries(
                engine=engine,
                timestamps=starts,
                load=load,
                mix={c: mix[:, j] for j, c in enumerate(classes)},
                step_seconds=step,
                scope=_scope(table, node),
            )
        return out

    def cluster_series(
        self, engine: str, cluster: str, **options: Unpack[SeriesOptions]
    ) -> WorkloadSeries:
        """The cluster's operations per second and mix, derived from the raw counters.

        Parameters
        ----------
        engine, cluster
            Which samples.
        **options
            ``since``, ``step_seconds``, ``table``, ``insert_fraction``: see
            :class:`SeriesOptions`.

        Raises
        ------
        ValidationError
            Fewer than two usable bins (collect at least three rounds, or widen ``since``).
        """
        result = self.derive(engine, cluster, **options)
        if result.series is None:
            n = len(self.rounds(engine, cluster))
            why = "; ".join(f"{r[2]} at {r[0]:.0f}" for r in result.dropped_bins[:3])
            raise ValidationError(
                f"store: {engine}/{cluster}: fewer than 2 usable intervals "
                f"({n} collection round(s) stored{'; dropped: ' + why if why else ''})"
            )
        return result.series

    def refresh_cluster_samples(
        self, engine: str, cluster: str, *, step_seconds: float | None = None
    ) -> int:
        """Recompute the derived series and cache it in ``cluster_samples``; return its length."""
        result = self.derive(engine, cluster, step_seconds=step_seconds)
        key = 0.0 if step_seconds is None else float(step_seconds)
        with self._tx() as db:
            db.execute(
                "DELETE FROM cluster_samples WHERE engine = ? AND cluster = ? AND step_seconds = ?",
                (engine, cluster, key),
            )
            if result.series is None:
                return 0
            s = result.series
            db.executemany(
                "INSERT INTO cluster_samples (engine, cluster, step_seconds, ts, load, mix) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (engine, cluster, key, float(t), float(v), json.dumps(s.mix_at(i)))
                    for i, (t, v) in enumerate(zip(s.timestamps, s.load, strict=True))
                ],
            )
            return len(s)

    def cached_cluster_samples(
        self, engine: str, cluster: str, *, step_seconds: float | None = None
    ) -> list[tuple[float, float, dict[str, float]]]:
        """The cached derived rows ``(ts, ops/s, mix)``, oldest first."""
        key = 0.0 if step_seconds is None else float(step_seconds)
        rows = self._db.execute(
            "SELECT ts, load, mix FROM cluster_samples WHERE engine = ? AND cluster = ? "
            "AND step_seconds = ? ORDER BY ts",
            (engine, cluster, key),
        )
        return [(t, v, json.loads(m)) for t, v, m in rows]


def _scope(table: str | None, node: str | None) -> str:
    """A derived series' scope: ``cluster``, ``table:...``, ``node:...`` or both."""
    parts = ([f"table:{table}"] if table else []) + ([f"node:{node}"] if node else [])
    return "@".join(parts) or "cluster"


def _iso_seconds(text: Any) -> float:
    """Epoch seconds of an ISO 8601 time (0 when absent or unreadable: sorts first)."""
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return 0.0


def redis_ratios(values: Mapping[str, float]) -> dict[str, float]:
    """From a round's summed Redis signals: ``hit_ratio`` (hits over lookups),
    ``commands_per_read`` (commands over read events: how many commands a client's write
    to the socket carries, a pipelining depth) and ``compact_share`` (sampled hashes, sets,
    sorted sets and lists in their compact encoding); each only where its denominator is
    positive."""
    out: dict[str, float] = {}
    pairs = (("hit_ratio", "hits_per_second", ("hits_per_second", "misses_per_second")),
             ("commands_per_read", "commands_per_second", ("reads_per_second",)),
             ("compact_share", "sampled_compact", ("sampled_aggregates",)))
    for name, top, bottom in pairs:
        if top in values and all(b in values for b in bottom):
            total = sum(values[b] for b in bottom)
            if total > 0:
                out[name] = values[top] / total
    return out


#: How :func:`redis_signals_text` words each of a round's Redis signals, in order.
_SIGNAL_WORDS: tuple[tuple[str, str], ...] = (
    ("hit_ratio", "hit ratio {:.2f}"),
    ("evictions_per_second", "evictions {:.1f}/s"),
    ("memory_share", "fullest node at {:.0%} of maxmemory"),
    ("mem_fragmentation_ratio", "fragmentation {:.2f}"),
    ("connected_clients", "{:.0f} clients"),
    ("commands_per_read", "{:.1f} commands per read"),
)


def redis_signals_text(values: Mapping[str, float]) -> str:
    """A round's Redis signals (:meth:`Store.gauge_rounds`) in words; "" when it has none."""
    parts = [words.format(values[key]) for key, words in _SIGNAL_WORDS if key in values]
    if "compact_share" in values:
        parts.append(f"{values['compact_share']:.0%} of {values['sampled_aggregates']:.0f} "
                     "sampled aggregates compact")
    return ", ".join(parts)


def state_timings(
    state: Mapping[str, Any],
) -> list[tuple[str, str, str, float, dict[str, float]]]:
    """``(step, node, status, at, phases)`` from a rollout state (``{"steps": {...}}``).

    Per (step, node): the timings of the node verified after its change (it finished
    every phase, in any attempt), else those an applied step recorded for it. ``at`` is
    the epoch time of the verification or of the step's end.
    """
    out = []
    for step, entry in state.get("steps", {}).items():
        seen = set()
        for node, rec in entry.get("verified", {}).items():
            if rec.get("timings"):
                seen.add(node)
                out.append((str(step), str(node), "verified",
                            _iso_seconds(rec.get("verified_at")), _phases(rec["timings"])))
        if entry.get("status") == "applied":
            for node, phases in entry.get("nodes", {}).items():
                if node not in seen and phases:
                    out.append((str(step), str(node), "applied",
                                _iso_seconds(entry.get("finished_at")), _phases(phases)))
    return out


def _phases(timings: Mapping[str, Any]) -> dict[str, float]:
    """Phase seconds without the derived ``total`` (the reader sums them)."""
    return {str(k): float(v) for k, v in timings.items()
            if k != "total" and isinstance(v, int | float) and not isinstance(v, bool)}
