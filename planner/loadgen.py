"""A load generator for live Cassandra and Redis clusters that checks acknowledged writes.

It proves availability during rolling restarts (every operation counted, every failure
counted by exception type, every write the cluster acknowledged read back after the run)
and drives calibration runs (fixed rate, unthrottled, or a workload trace replayed with
time compression).

Structure
---------
The pure parts (key distributions, operation mix, latency histogram, trace schedule,
acknowledged-write log, aggregation into :class:`LoadResult`) have no I/O and are unit
tested. The engines (:class:`_CassandraWorker`, :class:`_RedisWorker`) run inside worker
processes started with the ``spawn`` method, so the caller's event loop and GIL never
share a process with the drivers. :class:`BackgroundLoad` runs load while the caller does
something else (a rolling playbook); :func:`run_load` runs it to the end.

Acknowledged writes
-------------------
Each write carries a value that names its run, its writer and a per-writer sequence
number. Every key has exactly one writer (keys are partitioned by ``key % writers``), so
the writer knows the order of its own writes; it keeps, per key, only the sequence number
of the latest acknowledged write (memory bounded by the key space). After the run each key
is read back: a missing row, a foreign value or a sequence number below the acknowledged
one is a lost acknowledged write. A value with a *higher* sequence number is fine: a
later write (acknowledged or not) legitimately superseded it.

Cassandra acknowledges a write when the coordinator answers at the requested consistency
level. Redis acknowledges a write here only when ``WAIT <replicas> <timeout>`` sent on the
same connection right after the ``SET`` reports at least ``replicas`` replicas.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import queue
import random
import secrets
import signal
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from planner.errors import KairosError, ValidationError
from planner.workload import CASSANDRA_CLASSES, REDIS_CLASSES, WorkloadSeries

ENGINES: tuple[str, ...] = ("cassandra", "redis")
CLASSES: dict[str, tuple[str, ...]] = {"cassandra": CASSANDRA_CLASSES, "redis": REDIS_CLASSES}
DISTRIBUTIONS: tuple[str, ...] = ("uniform", "zipfian", "latest")
CONSISTENCY_LEVELS: tuple[str, ...] = (
    "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE",
)
DEFAULT_MIX: dict[str, dict[str, float]] = {
    "cassandra": {"read": 0.5, "update": 0.5},
    "redis": {"read": 0.5, "write": 0.5},
}
DEFAULT_HOSTS: dict[str, tuple[str, ...]] = {
    "cassandra": ("127.0.0.1", "127.0.0.2", "127.0.0.3"),
    "redis": ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"),
}
#: Environment variables read (in this order) for the Redis password; never argv.
REDIS_PASSWORD_ENV: tuple[str, ...] = ("KAIROS_REDIS_PASSWORD", "REDISCLI_AUTH")
#: Environment variables for Cassandra password authentication (optional).
CASSANDRA_USER_ENV = "KAIROS_CASSANDRA_USERNAME"
CASSANDRA_PASSWORD_ENV = "KAIROS_CASSANDRA_PASSWORD"
#: Hard upper bound on any run, whatever the caller asks.
MAX_RUN_SECONDS = 24 * 3600.0
#: YCSB's Zipfian constant.
ZIPFIAN_THETA = 0.99

_WRITE_CLASSES = frozenset({"update", "insert", "write"})


# ----------------------------------------------------------------- key distributions
def _zeta(start: int, stop: int, theta: float) -> float:
    """``sum(1 / i**theta for i in range(start + 1, stop + 1))`` (vectorised)."""
    total = 0.0
    chunk = 1 << 20
    for lo in range(start + 1, stop + 1, chunk):
        hi = min(stop, lo + chunk - 1)
        total += float(np.sum(np.arange(lo, hi + 1, dtype=float) ** -theta))
    return total


class ZipfianGenerator:
    """YCSB's Zipfian generator (Gray et al.): item 0 is the most popular.

    Draws integers in ``[0, n)`` with ``P(i) ∝ 1 / (i + 1)**theta``. The item count may grow
    between draws (inserts); zeta is then extended incrementally, never recomputed.

    Parameters
    ----------
    items : int
        Initial item count (>= 1).
    theta : float, default 0.99
        Skew, in (0, 1).
    """

    def __init__(self, items: int, *, theta: float = ZIPFIAN_THETA) -> None:
        if items < 1:
            raise ValidationError(f"items: must be >= 1, got {items}")
        if not 0 < theta < 1:
            raise ValidationError(f"theta: must be in (0, 1), got {theta}")
        self.theta = theta
        self.alpha = 1.0 / (1.0 - theta)
        self.zeta2 = _zeta(0, 2, theta)
        self.items = 0
        self.zetan = 0.0
        self._grow(items)

    def _grow(self, items: int) -> None:
        self.zetan += _zeta(self.items, items, self.theta)
        self.items = items
        self.eta = (1 - (2.0 / items) ** (1 - self.theta)) / (1 - self.zeta2 / self.zetan)

    def next(self, rng: random.Random, items: int | None = None) -> int:
        """One draw in ``[0, items)`` (``items`` defaults to the current count; may grow)."""
        if items is not None and items > self.items:
            self._grow(items)
        n = self.items if items is None else items
        u = rng.random()
        uz = u * self.zetan
        if uz < 1.0:
            return 0
        if uz < 1.0 + 0.5**self.theta:
            return min(1, n - 1)
        return min(n - 1, int(n * (self.eta * u - self.eta + 1) ** self.alpha))


def fnv1a64(value: int) -> int:
    """FNV-1a 64-bit hash of an integer's 8 little-endian bytes (YCSB scrambles with FNV)."""
    h = 0xCBF29CE484222325
    for _ in range(8):
        h ^= value & 0xFF
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        value >>= 8
    return h


class KeyChooser:
    """Draws keys from ``[0, items)`` following a YCSB-style distribution.

    ``uniform``: every key equally likely. ``zipfian``: YCSB's scrambled Zipfian, a few hot
    keys scattered over the key space (rank hashed with FNV-1a). ``latest``: YCSB's skewed
    latest, the most recently inserted keys (the highest numbers) are the hottest.
    """

    def __init__(self, distribution: str, items: int, *, theta: float = ZIPFIAN_THETA) -> None:
        if distribution not in DISTRIBUTIONS:
            raise ValidationError(
                f"distribution: unknown {distribution!r}; known: {', '.join(DISTRIBUTIONS)}"
            )
        self.distribution = distribution
        self._zipf = None if distribution == "uniform" else ZipfianGenerator(items, theta=theta)

    def next(self, rng: random.Random, items: int) -> int:
        """A key in ``[0, items)``."""
        if self._zipf is None:
            return rng.randrange(items)
        rank = self._zipf.next(rng, items)
        if self.distribution == "zipfian":
            return fnv1a64(rank) % items
        return items - 1 - rank


# ----------------------------------------------------------------------- operation mix
def parse_mix(text: str | Mapping[str, float], engine: str) -> dict[str, float]:
    """A validated, normalised mix from ``"read=0.5,update=0.5"`` or a mapping.

    Classes left out get 0. Raises ValidationError naming the class and the problem.
    """
    classes = _classes(engine)
    if isinstance(text, str):
        raw: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValidationError(f"mix: {part!r} is not class=fraction")
            try:
                raw[name.strip().lower()] = float(value)
            except ValueError:
                raise ValidationError(f"mix[{name.strip()}]: {value!r} is not a number") from None
    else:
        raw = {str(k).lower(): float(v) for k, v in text.items()}
    unknown = sorted(set(raw) - set(classes))
    if unknown:
        raise ValidationError(f"mix: unknown {engine} class(es) {unknown}; known: {list(classes)}")
    for name, fraction in raw.items():
        if not math.isfinite(fraction) or fraction < 0:
            raise ValidationError(f"mix[{name}]: must be a non-negative number, got {fraction}")
    total = sum(raw.values())
    if total <= 0:
        raise ValidationError("mix: the fractions sum to 0; give at least one positive class")
    return {c: raw.get(c, 0.0) / total for c in classes}


class OpMix:
    """Chooses an operation class with the probabilities of a mix."""

    def __init__(self, mix: Mapping[str, float]) -> None:
        self.classes = tuple(c for c, f in mix.items() if f > 0)
        if not self.classes:
            raise ValidationError("mix: no class has a positive fraction")
        total = sum(mix[c] for c in self.classes)
        acc = 0.0
        cumulative = []
        for c in self.classes:
            acc += mix[c] / total
            cumulative.append(acc)
        cumulative[-1] = 1.0
        self._cumulative = tuple(cumulative)

    def choose(self, rng: random.Random) -> str:
        u = rng.random()
        for cls, bound in zip(self.classes, self._cumulative, strict=True):
            if u < bound:
                return cls
        return self.classes[-1]


# -------------------------------------------------------------------- latency histogram
_HIST_RATIO = 1.02
_HIST_LOG = math.log(_HIST_RATIO)
#: Buckets cover 1 µs .. ~1000 s with 2 % resolution.
HIST_BUCKETS = int(math.log(1e9) / _HIST_LOG) + 2


class LatencyHistogram:
    """Log-bucketed latency histogram (2 % resolution, fixed memory, mergeable).

    Bucket ``b > 0`` holds latencies in ``(1.02**(b-1), 1.02**b]`` microseconds; a
    percentile is reported as its bucket's upper bound (never under-reported).
    """

    def __init__(self, counts: Sequence[int] | None = None, max_us: float = 0.0) -> None:
        self.counts = list(counts) if counts is not None else [0] * HIST_BUCKETS
        if len(self.counts) != HIST_BUCKETS:
            raise ValidationError(f"counts: expected {HIST_BUCKETS} buckets")
        self.max_us = max_us

    @property
    def total(self) -> int:
        return sum(self.counts)

    def record(self, seconds: float) -> None:
        us = seconds * 1e6
        b = 0 if us <= 1.0 else min(HIST_BUCKETS - 1, math.ceil(math.log(us) / _HIST_LOG))
        self.counts[b] += 1
        if us > self.max_us:
            self.max_us = us

    def merge(self, other: LatencyHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.max_us = max(self.max_us, other.max_us)

    def percentile_ms(self, q: float) -> float | None:
        """The ``q``-th percentile (0 < q <= 100) in milliseconds, or None when empty."""
        total = self.total
        if total == 0:
            return None
        rank = max(1, math.ceil(q / 100.0 * total))
        seen = 0
        for b, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return min(_HIST_RATIO**b, self.max_us) / 1000.0
        return self.max_us / 1000.0

    def summary_ms(self) -> dict[str, float | None]:
        return {
            "p50": _round(self.percentile_ms(50)),
            "p95": _round(self.percentile_ms(95)),
            "p99": _round(self.percentile_ms(99)),
            "max": _round(self.max_us / 1000.0) if self.total else None,
        }

    def state(self) -> dict[str, Any]:
        """Sparse picklable form (non-empty buckets only)."""
        return {"buckets": {b: n for b, n in enumerate(self.counts) if n}, "max_us": self.max_us}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> LatencyHistogram:
        h = cls(max_us=float(state.get("max_us", 0.0)))
        for b, n in state.get("buckets", {}).items():
            h.counts[int(b)] += int(n)
        return h


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


# ---------------------------------------------------------------------- trace schedule
@dataclass(frozen=True)
class TraceSchedule:
    """Target rate and mix per step of a trace, one step lasting ``step_seconds`` of real time.

    ``rates[i]`` is in operations per second (already scaled); a rate of 0 idles that step.
    """

    rates: tuple[float, ...]
    mixes: tuple[Mapping[str, float], ...]
    step_seconds: float

    def __post_init__(self) -> None:
        if not self.rates or len(self.rates) != len(self.mixes):
            raise ValidationError("trace: needs one mix per rate and at least one step")
        if not math.isfinite(self.step_seconds) or self.step_seconds <= 0:
            raise ValidationError(f"step_seconds: must be positive, got {self.step_seconds}")
        for i, r in enumerate(self.rates):
            if not math.isfinite(r) or r < 0:
                raise ValidationError(f"trace: step {i}: rate must be >= 0, got {r}")

    @classmethod
    def from_series(
        cls, series: WorkloadSeries, *, step_seconds: float, scale: float = 1.0
    ) -> TraceSchedule:
        """Replay ``series`` with each of its rows lasting ``step_seconds`` (time compression).

        The target rate of a step is the row's load times ``scale``.
        """
        if not math.isfinite(scale) or scale <= 0:
            raise ValidationError(f"trace_scale: must be positive, got {scale}")
        return cls(
            rates=tuple(float(x) * scale for x in series.load),
            mixes=tuple(series.mix_at(i) for i in range(len(series))),
            step_seconds=float(step_seconds),
        )

    @property
    def steps(self) -> int:
        return len(self.rates)

    @property
    def duration(self) -> float:
        return self.steps * self.step_seconds

    def step_at(self, elapsed: float) -> int | None:
        """The step index at ``elapsed`` seconds into the run, or None after the last."""
        if elapsed < 0:
            return 0
        i = int(elapsed // self.step_seconds)
        return i if i < self.steps else None


# --------------------------------------------------------------- acknowledged writes
class AckLog:
    """Per owned key, the sequence number of the latest acknowledged write (bounded memory).

    Keys owned by writer ``slot`` of ``writers`` are those with ``key % writers == slot``;
    they are stored at index ``key // writers`` of a growable int64 array (-1 = none).
    """

    def __init__(self, slot: int, writers: int, capacity: int = 1024) -> None:
        self.slot = slot
        self.writers = writers
        self._seq = np.full(max(1, capacity), -1, dtype=np.int64)
        self.acknowledged = 0

    def record(self, key: int, seq: int) -> None:
        if key % self.writers != self.slot:
            raise ValueError(f"key {key} is not owned by writer {self.slot}/{self.writers}")
        i = key // self.writers
        if i >= self._seq.size:
            grown = np.full(max(i + 1, 2 * self._seq.size), -1, dtype=np.int64)
            grown[: self._seq.size] = self._seq
            self._seq = grown
        if seq > self._seq[i]:
            self._seq[i] = seq
        self.acknowledged += 1

    def latest(self, key: int) -> int:
        i = key // self.writers
        return int(self._seq[i]) if i < self._seq.size else -1

    def items(self) -> Iterator[tuple[int, int]]:
        """``(key, latest acknowledged seq)`` for every key with an acknowledged write."""
        for i in np.flatnonzero(self._seq >= 0):
            yield int(i) * self.writers + self.slot, int(self._seq[i])

    def __len__(self) -> int:
        return int(np.count_nonzero(self._seq >= 0))


def make_value(tag: str, slot: int, seq: int, size: int) -> str:
    """The value of write ``seq`` of writer ``slot`` in run ``tag``, padded to ``size``."""
    head = f"{tag}.{slot}.{seq}."
    return head + "x" * max(0, size - len(head))


def check_value(value: str | bytes | None, *, tag: str, slot: int, acked_seq: int) -> str:
    """Classify a read-back value: ``"ok"``, ``"missing"``, ``"stale"`` or ``"foreign"``."""
    if value is None:
        return "missing"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    parts = value.split(".", 3)
    if len(parts) < 4 or parts[0] != tag or parts[1] != str(slot):
        return "foreign"
    try:
        seq = int(parts[2])
    except ValueError:
        return "foreign"
    return "ok" if seq >= acked_seq else "stale"


def owned_key(key: int, slot: int, writers: int) -> int:
    """The largest key ``<= key`` owned by ``slot`` (or ``slot`` itself when there is none)."""
    k = key - ((key - slot) % writers)
    return k if k >= 0 else slot


# ------------------------------------------------------------------------ configuration
@dataclass(frozen=True)
class LoadConfig:
    """Everything a load run needs; validated on creation (see ``docs/load-generator.md``).

    Parameters
    ----------
    engine : {"cassandra", "redis"}
    contact_points : sequence of str
        Cassandra hosts (``host`` or ``host:port``), or Redis Cluster nodes (``host:port``).
    cl : str
        Cassandra consistency level of every operation.
    verify_cl : str or None
        Consistency level of the read-back; None picks QUORUM for QUORUM-or-stronger writes
        (R + W > RF) and ALL for weaker ones.
    seconds : float
        Run length (always bounded; at most ``MAX_RUN_SECONDS``). With a trace, at most the
        trace's replay length.
    rate : float or None
        Target operations per second over all processes; None = unthrottled.
    max_requests : int or None
        Stop after this many requests (over all processes).
    keys : int
        Record count: keys ``0 .. keys-1`` exist conceptually from the start.
    max_keys : int
        Upper bound of the key space including inserts; inserts wrap around below it.
    concurrency : int
        Cassandra: requests in flight per process. Redis: client threads per process.
    processes : int
        Worker processes.
    trace : TraceSchedule or None
        Replay per-step rates and mixes instead of ``rate``/``mix``.
    password : str or None
        Redis password; None reads ``KAIROS_REDIS_PASSWORD`` then ``REDISCLI_AUTH`` in the
        workers. Never shown in ``repr``.
    """

    engine: str
    contact_points: tuple[str, ...] = ()
    port: int | None = None
    cl: str = "QUORUM"
    verify_cl: str | None = None
    keyspace: str = "kairos_load"
    table: str = "usertable"
    replication_factor: int = 3
    replication_class: str = "SimpleStrategy"
    create_schema: bool = True
    local_dc: str | None = None
    prefix: str = "kairos_load"
    mix: Mapping[str, float] | None = None
    distribution: str = "zipfian"
    keys: int = 10_000
    max_keys: int = 1_000_000
    value_size: int = 100
    scan_length: int = 10
    rate: float | None = None
    seconds: float = 30.0
    max_requests: int | None = None
    concurrency: int = 64
    processes: int = 1
    trace: TraceSchedule | None = None
    request_timeout: float = 10.0
    verify: bool = True
    preload: bool = False
    wait_replicas: int = 1
    wait_timeout_ms: int = 1000
    seed: int | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValidationError(f"engine: unknown {self.engine!r}; known: {', '.join(ENGINES)}")
        points = tuple(self.contact_points) or DEFAULT_HOSTS[self.engine]
        object.__setattr__(self, "contact_points", points)
        for p in points:
            host, _port = split_host_port(p, self.port or (9042 if self.engine == "cassandra"
                                                          else 6379))
            if not host:
                raise ValidationError(f"contact_points: empty host in {p!r}")
        mix = parse_mix(self.mix if self.mix is not None else DEFAULT_MIX[self.engine],
                        self.engine)
        object.__setattr__(self, "mix", mix)
        cl = self.cl.upper()
        if cl not in CONSISTENCY_LEVELS:
            raise ValidationError(
                f"cl: unknown {self.cl!r}; known: {', '.join(CONSISTENCY_LEVELS)}"
            )
        object.__setattr__(self, "cl", cl)
        vcl = (self.verify_cl or default_verify_cl(cl)).upper()
        if vcl not in CONSISTENCY_LEVELS:
            raise ValidationError(f"verify_cl: unknown {self.verify_cl!r}")
        object.__setattr__(self, "verify_cl", vcl)
        if self.distribution not in DISTRIBUTIONS:
            raise ValidationError(
                f"distribution: unknown {self.distribution!r}; known: {', '.join(DISTRIBUTIONS)}"
            )
        positive_ints = {
            "concurrency": self.concurrency, "processes": self.processes,
            "replication_factor": self.replication_factor, "value_size": self.value_size,
            "scan_length": self.scan_length,
        }
        for name, value in positive_ints.items():
            if int(value) != value or value < 1:
                raise ValidationError(f"{name}: must be a positive integer, got {value!r}")
        if self.value_size < 32:
            raise ValidationError(f"value_size: must be >= 32 (the value carries an id), got "
                                  f"{self.value_size}")
        writers = self.writers
        if self.keys < writers:
            raise ValidationError(f"keys: must be >= the number of writers ({writers}), got "
                                  f"{self.keys}")
        if self.max_keys < self.keys:
            raise ValidationError(f"max_keys: must be >= keys ({self.keys}), got {self.max_keys}")
        if not math.isfinite(self.seconds) or not 0 < self.seconds <= MAX_RUN_SECONDS:
            raise ValidationError(
                f"seconds: must be in (0, {MAX_RUN_SECONDS:g}], got {self.seconds!r}"
            )
        if self.rate is not None and (not math.isfinite(self.rate) or self.rate <= 0):
            raise ValidationError(f"rate: must be positive (or None for unthrottled), got "
                                  f"{self.rate!r}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValidationError(f"max_requests: must be >= 1, got {self.max_requests}")
        if not math.isfinite(self.request_timeout) or self.request_timeout <= 0:
            raise ValidationError(f"request_timeout: must be positive, got {self.request_timeout}")
        if self.wait_replicas < 0 or self.wait_timeout_ms < 0:
            raise ValidationError("wait_replicas, wait_timeout_ms: must be >= 0")
        if self.trace is not None:
            for i, m in enumerate(self.trace.mixes):
                if sum(m.values()) <= 0:
                    continue
                try:
                    parse_mix(m, self.engine)
                except ValidationError as exc:
                    raise ValidationError(f"trace: step {i}: {exc}") from None
            object.__setattr__(self, "seconds", min(self.seconds, self.trace.duration))

    @property
    def writers(self) -> int:
        """Independent writers: one per process (Cassandra) or per client thread (Redis)."""
        return self.processes * (self.concurrency if self.engine == "redis" else 1)

    @property
    def classes(self) -> tuple[str, ...]:
        return _classes(self.engine)


def default_verify_cl(cl: str) -> str:
    """QUORUM-family writes are read back at the same CL; weaker writes at ALL."""
    cl = cl.upper()
    if cl in ("QUORUM", "LOCAL_QUORUM", "EACH_QUORUM"):
        return cl
    if cl == "ALL":
        return "QUORUM"
    return "ALL"


def split_host_port(text: str, default_port: int) -> tuple[str, int]:
    """``"h:p"`` -> (h, p); ``"h"`` -> (h, default_port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        return text.strip(), default_port
    try:
        return host, int(port)
    except ValueError:
        raise ValidationError(f"contact_points: bad port in {text!r}") from None


def _classes(engine: str) -> tuple[str, ...]:
    try:
        return CLASSES[engine]
    except KeyError:
        raise ValidationError(f"engine: unknown {engine!r}; known: {', '.join(ENGINES)}") from None


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class LoadResult:
    """What a load run measured.

    ``ops`` counts finished operations (successful or failed); ``failures`` counts the
    failed ones by exception type name. Latency percentiles are over successful operations.
    ``acknowledged_writes`` counts writes the cluster acknowledged; ``lost_acknowledged_writes``
    counts keys whose latest acknowledged value was missing, stale or foreign on read-back.
    ``verified`` is True only if every acknowledged key was read back without error.
    """

    engine: str
    seconds: float
    ops: int
    ops_by_class: Mapping[str, int]
    ops_per_s: float
    failures: Mapping[str, int]
    latency_ms: Mapping[str, float | None]
    acknowledged_writes: int
    lost_acknowledged_writes: int
    verified: bool
    latency_ms_by_class: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    unacknowledged_writes: int = 0
    verified_keys: int = 0
    verify_errors: Mapping[str, int] = field(default_factory=dict)
    lost_by_kind: Mapping[str, int] = field(default_factory=dict)
    consistency_level: str | None = None
    target_rate: float | None = None
    processes: int = 1
    concurrency: int = 1
    stopped_by: str = "duration"
    steps: tuple[Mapping[str, Any], ...] = ()

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def ok(self) -> bool:
        """No failed operation and no lost acknowledged write (and verification ran fully)."""
        return self.failed == 0 and self.lost_acknowledged_writes == 0 and self.verified

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "consistency_level": self.consistency_level,
            "seconds": round(self.seconds, 3),
            "ops": self.ops,
            "ops_by_class": dict(self.ops_by_class),
            "ops_per_s": round(self.ops_per_s, 1),
            "failed": self.failed,
            "failures": dict(self.failures),
            "latency_ms": dict(self.latency_ms),
            "latency_ms_by_class": {k: dict(v) for k, v in self.latency_ms_by_class.items()},
            "acknowledged_writes": self.acknowledged_writes,
            "unacknowledged_writes": self.unacknowledged_writes,
            "lost_acknowledged_writes": self.lost_acknowledged_writes,
            "lost_by_kind": dict(self.lost_by_kind),
            "verified": self.verified,
            "verified_keys": self.verified_keys,
            "verify_errors": dict(self.verify_errors),
            "target_rate": self.target_rate,
            "processes": self.processes,
            "concurrency": self.concurrency,
            "stopped_by": self.stopped_by,
            "steps": [dict(s) for s in self.steps],
        }


class WorkerStats:
    """Counters of one writer/worker; turned into a picklable dict by :meth:`payload`."""

    def __init__(self, classes: Sequence[str], steps: int = 0) -> None:
        self.classes = tuple(classes)
        self.ops: dict[str, int] = dict.fromkeys(self.classes, 0)
        self.failures: Counter[str] = Counter()
        self.hist: dict[str, LatencyHistogram] = {c: LatencyHistogram() for c in self.classes}
        self.step_ops = [0] * steps
        self.step_failures = [0] * steps
        self.unacknowledged = 0
        self.lock = threading.Lock()

    def success(self, cls: str, seconds: float, step: int | None = None) -> None:
        with self.lock:
            self.ops[cls] += 1
            self.hist[cls].record(seconds)
            if step is not None and step < len(self.step_ops):
                self.step_ops[step] += 1

    def failure(self, cls: str, exc: BaseException, step: int | None = None) -> None:
        with self.lock:
            self.ops[cls] += 1
            self.failures[type(exc).__name__] += 1
            if step is not None and step < len(self.step_ops):
                self.step_ops[step] += 1
                self.step_failures[step] += 1

    def snapshot(self) -> tuple[int, int]:
        """(finished ops, failures) so far."""
        return sum(self.ops.values()), sum(self.failures.values())

    def payload(self) -> dict[str, Any]:
        return {
            "ops": dict(self.ops),
            "failures": dict(self.failures),
            "hist": {c: h.state() for c, h in self.hist.items()},
            "step_ops": list(self.step_ops),
            "step_failures": list(self.step_failures),
            "unacknowledged": self.unacknowledged,
        }


def aggregate(
    config: LoadConfig,
    payloads: Sequence[Mapping[str, Any]],
    *,
    seconds: float,
    stopped_by: str = "duration",
) -> LoadResult:
    """Merge the payloads of every worker into one :class:`LoadResult`.

    A payload holds ``ops`` (per class), ``failures`` (per exception name), ``hist`` (per
    class histogram state), ``acknowledged``, ``unacknowledged``, ``lost`` (per kind),
    ``verified_keys``, ``verify_errors`` (per exception name), ``verified`` (bool),
    ``step_ops`` and ``step_failures``; missing entries count as zero.
    """
    classes = config.classes
    ops = dict.fromkeys(classes, 0)
    failures: Counter[str] = Counter()
    verify_errors: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    hists = {c: LatencyHistogram() for c in classes}
    n_steps = config.trace.steps if config.trace else 0
    step_ops = [0] * n_steps
    step_failures = [0] * n_steps
    acked = unacked = verified_keys = 0
    verified = bool(payloads) and config.verify
    for p in payloads:
        for c, n in p.get("ops", {}).items():
            ops[c] = ops.get(c, 0) + int(n)
        failures.update(p.get("failures", {}))
        verify_errors.update(p.get("verify_errors", {}))
        lost.update(p.get("lost", {}))
        for c, state in p.get("hist", {}).items():
            hists.setdefault(c, LatencyHistogram()).merge(LatencyHistogram.from_state(state))
        for i, n in enumerate(p.get("step_ops", [])[:n_steps]):
            step_ops[i] += n
        for i, n in enumerate(p.get("step_failures", [])[:n_steps]):
            step_failures[i] += n
        acked += int(p.get("acknowledged", 0))
        unacked += int(p.get("unacknowledged", 0))
        verified_keys += int(p.get("verified_keys", 0))
        verified = verified and bool(p.get("verified", False))
    total_hist = LatencyHistogram()
    for h in hists.values():
        total_hist.merge(h)
    total = sum(ops.values())
    steps: list[dict[str, Any]] = []
    if config.trace is not None:
        for i in range(n_steps):
            steps.append({
                "step": i,
                "target_rate": round(config.trace.rates[i], 3),
                "ops_per_s": round(step_ops[i] / config.trace.step_seconds, 1),
                "failed": step_failures[i],
                "mix": {c: round(f, 4) for c, f in config.trace.mixes[i].items()},
            })
    return LoadResult(
        engine=config.engine,
        seconds=seconds,
        ops=total,
        ops_by_class=ops,
        ops_per_s=total / seconds if seconds > 0 else 0.0,
        failures=dict(sorted(failures.items())),
        latency_ms=total_hist.summary_ms(),
        latency_ms_by_class={c: h.summary_ms() for c, h in hists.items() if h.total},
        acknowledged_writes=acked,
        unacknowledged_writes=unacked,
        lost_acknowledged_writes=sum(lost.values()),
        lost_by_kind=dict(sorted(lost.items())),
        verified=verified and not verify_errors,
        verified_keys=verified_keys,
        verify_errors=dict(sorted(verify_errors.items())),
        consistency_level=config.cl if config.engine == "cassandra" else None,
        target_rate=config.rate if config.trace is None else None,
        processes=config.processes,
        concurrency=config.concurrency,
        stopped_by=stopped_by,
        steps=tuple(steps),
    )


# ------------------------------------------------------------------- pacing (per process)
class Pacer:
    """Paces issue times to a target rate (None = unthrottled).

    A client that fell behind catches up at most ``max_backlog`` seconds' worth of
    operations; a change of rate (a new trace step) starts a fresh schedule.
    Thread-safe: several client threads may share one pacer.
    """

    def __init__(self, max_backlog: float = 0.2) -> None:
        self._next = time.monotonic()
        self._rate: float | None = None
        self._lock = threading.Lock()
        self.max_backlog = max_backlog

    def delay(self, rate: float | None, now: float) -> float:
        """Seconds to wait before the next issue (0 = go now, and the slot is taken)."""
        if rate is None:
            return 0.0
        if rate <= 0:
            return 0.1
        with self._lock:
            if rate != self._rate:
                self._rate = rate
                self._next = now
            if self._next < now - self.max_backlog:
                self._next = now - self.max_backlog
            if self._next > now:
                return min(self._next - now, 0.1)
            self._next += 1.0 / rate
            return 0.0


class _Plan:
    """The issue-side state shared by both engines: clock, bounds, schedule, key choice."""

    def __init__(self, config: LoadConfig, index: int, stop: Any) -> None:
        self.config = config
        self.index = index
        self.stop = stop
        self.start = time.monotonic()
        self.end = self.start + config.seconds
        share = config.processes
        self.rate = config.rate / share if config.rate is not None else None
        self.max_requests = (
            None if config.max_requests is None
            else max(1, config.max_requests // share + (index < config.max_requests % share))
        )
        self.issued = 0
        self.stopped_by = "duration"
        self.pacer = Pacer()
        self._mixes: dict[int, OpMix | None] = {}
        self.default_mix = OpMix(config.mix or {})
        self.lock = threading.Lock()

    def step(self, now: float) -> int | None:
        if self.config.trace is None:
            return None
        return self.config.trace.step_at(now - self.start)

    def target(self, step: int | None) -> tuple[float | None, OpMix | None]:
        """The per-process rate and the mix of ``step`` (mix None = idle step)."""
        trace = self.config.trace
        if trace is None or step is None:
            return self.rate, self.default_mix
        rate = trace.rates[step] / self.config.processes
        if step not in self._mixes:
            mix = trace.mixes[step]
            idle = rate <= 0 or sum(mix.values()) <= 0
            self._mixes[step] = None if idle else OpMix(parse_mix(mix, self.config.engine))
        return rate, self._mixes[step]

    def should_stop(self, now: float) -> bool:
        if self.stop.is_set():
            self.stopped_by = "stopped"
            return True
        if now >= self.end:
            return True
        if self.max_requests is not None and self.issued >= self.max_requests:
            self.stopped_by = "max_requests"
            return True
        return False

    def next_slot(self) -> tuple[int | None, OpMix | None] | None:
        """Block until an operation may be issued; return (step, mix), or None to stop."""
        while True:
            now = time.monotonic()
            if self.should_stop(now):
                return None
            step = self.step(now)
            rate, mix = self.target(step)
            if mix is None:
                time.sleep(0.05)
                continue
            wait = self.pacer.delay(rate, now)
            if wait > 0:
                time.sleep(wait)
                continue
            with self.lock:
                if self.max_requests is not None and self.issued >= self.max_requests:
                    continue
                self.issued += 1
            return step, mix


class _Writer:
    """Key choice and acknowledged-write bookkeeping of one writer slot."""

    def __init__(self, config: LoadConfig, slot: int, tag: str, rng: random.Random) -> None:
        self.config = config
        self.slot = slot
        self.tag = tag
        self.rng = rng
        self.writers = config.writers
        self.chooser = KeyChooser(config.distribution, config.keys)
        self.acks = AckLog(slot, self.writers, capacity=config.keys // self.writers + 1)
        self.seq = 0
        self.inserted = 0
        first = config.keys + ((slot - config.keys) % self.writers)
        self._first_insert = first
        self._insert_capacity = max(1, (config.max_keys - first + self.writers - 1)
                                    // self.writers) if first < config.max_keys else 0

    def items(self) -> int:
        """Estimated keys in the table now (records + everyone's inserts, bounded)."""
        return min(self.config.max_keys, self.config.keys + self.inserted * self.writers)

    def read_key(self) -> int:
        return self.chooser.next(self.rng, self.items())

    def update_key(self) -> int:
        return owned_key(self.chooser.next(self.rng, self.items()), self.slot, self.writers)

    def insert_key(self) -> int:
        if self._insert_capacity == 0:
            return self.update_key()
        i = self.inserted % self._insert_capacity
        self.inserted += 1
        return self._first_insert + i * self.writers

    def next_value(self) -> tuple[int, str]:
        self.seq += 1
        return self.seq, make_value(self.tag, self.slot, self.seq, self.config.value_size)


# -------------------------------------------------------------------------- Cassandra
_CL_NAMES = {
    "ONE": "ONE", "TWO": "TWO", "THREE": "THREE", "QUORUM": "QUORUM", "ALL": "ALL",
    "LOCAL_QUORUM": "LOCAL_QUORUM", "EACH_QUORUM": "EACH_QUORUM", "LOCAL_ONE": "LOCAL_ONE",
}


class _CassandraWorker:
    """One worker process's Cassandra client: async requests, bounded in flight."""

    def __init__(self, config: LoadConfig, index: int, tag: str, stop: Any) -> None:
        self.config = config
        self.index = index
        self.stop = stop
        self.rng = random.Random(None if config.seed is None else config.seed * 1000 + index)
        self.writer = _Writer(config, index, tag, self.rng)
        self.stats = WorkerStats(config.classes, config.trace.steps if config.trace else 0)
        self.inflight = threading.BoundedSemaphore(config.concurrency)
        self.cluster: Any = None
        self.session: Any = None

    # -- connection and schema
    def connect(self) -> None:
        from cassandra import ConsistencyLevel
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import DCAwareRoundRobinPolicy, RetryPolicy, TokenAwarePolicy

        cfg = self.config
        hosts = [split_host_port(p, cfg.port or 9042) for p in cfg.contact_points]
        ports = {p for _, p in hosts}
        if len(ports) != 1:
            raise ValidationError("contact_points: Cassandra nodes must share one CQL port")
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=cfg.local_dc)),
            retry_policy=RetryPolicy(),
            consistency_level=getattr(ConsistencyLevel, _CL_NAMES[cfg.cl]),
            request_timeout=cfg.request_timeout,
        )
        auth = None
        user = os.environ.get(CASSANDRA_USER_ENV)
        if user:
            auth = PlainTextAuthProvider(username=user,
                                         password=os.environ.get(CASSANDRA_PASSWORD_ENV, ""))
        self.cluster = Cluster(
            contact_points=[h for h, _ in hosts],
            # Cassandra 5.0 speaks v5: negotiating down from the driver's newest version
            # defuncts connections, and with authentication a host could be marked down.
            protocol_version=5,
            port=ports.pop(),
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            auth_provider=auth,
            connect_timeout=cfg.request_timeout,
        )
        self.session = self.cluster.connect()
        self._cl = ConsistencyLevel

    def create_schema(self) -> None:
        cfg = self.config
        self.session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {cfg.keyspace} WITH replication = "
            f"{{'class': '{cfg.replication_class}', "
            f"'replication_factor': {cfg.replication_factor}}}",
            timeout=60,
        )
        self.session.execute(
            f"CREATE TABLE IF NOT EXISTS {cfg.keyspace}.{cfg.table} "
            "(key bigint PRIMARY KEY, field0 text)",
            timeout=60,
        )

    def prepare(self) -> None:
        cfg = self.config
        t = f"{cfg.keyspace}.{cfg.table}"
        s = self.session
        self.cluster.refresh_schema_metadata(max_schema_agreement_wait=30)
        self.q_read = s.prepare(f"SELECT field0 FROM {t} WHERE key = ?")
        self.q_update = s.prepare(f"UPDATE {t} SET field0 = ? WHERE key = ?")
        self.q_insert = s.prepare(f"INSERT INTO {t} (key, field0) VALUES (?, ?)")
        self.q_scan = s.prepare(f"SELECT key, field0 FROM {t} WHERE token(key) > token(?) LIMIT ?")
        self.q_verify = s.prepare(f"SELECT field0 FROM {t} WHERE key = ?")
        self.q_verify.consistency_level = getattr(self._cl, _CL_NAMES[cfg.verify_cl or "ALL"])
        for q in (self.q_read, self.q_update, self.q_insert, self.q_scan, self.q_verify):
            # Plain reads and writes of a fixed value: safe to retry on another coordinator.
            q.is_idempotent = True

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()

    # -- one operation
    def _statement(self, cls: str) -> tuple[Any, tuple[Any, ...], int | None, int | None]:
        w = self.writer
        if cls == "read":
            return self.q_read, (w.read_key(),), None, None
        if cls == "scan":
            return self.q_scan, (w.read_key(), self.config.scan_length), None, None
        key = w.insert_key() if cls == "insert" else w.update_key()
        seq, value = w.next_value()
        if cls == "insert":
            return self.q_insert, (key, value), key, seq
        return self.q_update, (value, key), key, seq

    def _issue(self, cls: str, step: int | None, record: bool = True) -> None:
        stmt, params, key, seq = self._statement(cls)
        began = time.perf_counter()
        try:
            future = self.session.execute_async(stmt, params)
        except Exception as exc:
            self.inflight.release()
            if record:
                self.stats.failure(cls, exc, step)
            return
        future.add_callbacks(
            self._on_success, self._on_error,
            callback_args=(cls, began, key, seq, step, record),
            errback_args=(cls, key, seq, step, record),
        )

    def _on_success(self, _rows: Any, cls: str, began: float, key: int | None,
                    seq: int | None, step: int | None, record: bool) -> None:
        try:
            if key is not None and seq is not None:
                with self.stats.lock:
                    self.writer.acks.record(key, seq)
            if record:
                self.stats.success(cls, time.perf_counter() - began, step)
        finally:
            self.inflight.release()

    def _on_error(self, exc: BaseException, cls: str, _key: int | None, _seq: int | None,
                  step: int | None, record: bool) -> None:
        try:
            if record:
                self.stats.failure(cls, exc, step)
            else:  # a preload write: not an operation of the run, but still a failure
                with self.stats.lock:
                    self.stats.failures[f"preload:{type(exc).__name__}"] += 1
        finally:
            self.inflight.release()

    def _drain(self) -> None:
        deadline = time.monotonic() + 2 * self.config.request_timeout + 5
        taken = 0
        while taken < self.config.concurrency and time.monotonic() < deadline:
            if self.inflight.acquire(timeout=0.1):
                taken += 1
        for _ in range(taken):
            self.inflight.release()

    # -- phases
    def preload(self) -> None:
        """Write every owned record once (acknowledged writes, not counted as operations)."""
        w = self.writer
        for key in range(w.slot, self.config.keys, w.writers):
            if self.stop.is_set():
                break
            self.inflight.acquire()
            seq, value = w.next_value()
            began = time.perf_counter()
            future = self.session.execute_async(self.q_insert, (key, value))
            future.add_callbacks(
                self._on_success, self._on_error,
                callback_args=("insert", began, key, seq, None, False),
                errback_args=("insert", key, seq, None, False),
            )
        self._drain()

    def run(self, plan: _Plan) -> None:
        while True:
            slot = plan.next_slot()
            if slot is None:
                break
            step, mix = slot
            assert mix is not None
            while not self.inflight.acquire(timeout=0.1):
                if plan.should_stop(time.monotonic()):
                    self._drain()
                    return
            self._issue(mix.choose(self.rng), step)
        self._drain()

    def verify(self) -> dict[str, Any]:
        lost: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        lock = threading.Lock()
        checked = 0
        w = self.writer

        def done(rows: Any, acked_seq: int) -> None:
            try:
                row = rows[0] if rows else None
                kind = check_value(row.field0 if row else None, tag=w.tag, slot=w.slot,
                                   acked_seq=acked_seq)
                if kind != "ok":
                    with lock:
                        lost[kind] += 1
            finally:
                self.inflight.release()

        def failed(exc: BaseException) -> None:
            with lock:
                errors[type(exc).__name__] += 1
            self.inflight.release()

        for key, seq in w.acks.items():
            self.inflight.acquire()
            checked += 1
            try:
                future = self.session.execute_async(self.q_verify, (key,))
            except Exception as exc:
                failed(exc)
                continue
            future.add_callbacks(done, failed, callback_args=(seq,))
        self._drain()
        return {"lost": dict(lost), "verify_errors": dict(errors), "verified_keys": checked,
                "verified": not errors}


# ------------------------------------------------------------------------------ Redis
def redis_password(config: LoadConfig) -> str | None:
    if config.password is not None:
        return config.password
    for name in REDIS_PASSWORD_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


#: The "other" operation: a Lua script (Redis's "other" class) touching one key.
_OTHER_SCRIPT = "return redis.call('EXISTS', KEYS[1])"


class _RedisWorker:
    """One worker process's Redis Cluster client: ``concurrency`` threads, one writer each."""

    def __init__(self, config: LoadConfig, index: int, tag: str, stop: Any) -> None:
        self.config = config
        self.index = index
        self.tag = tag
        self.stop = stop
        steps = config.trace.steps if config.trace else 0
        self.threads = config.concurrency
        self.rngs = [random.Random(None if config.seed is None
                                   else config.seed * 1000 + index * self.threads + t)
                     for t in range(self.threads)]
        self.writers = [_Writer(config, index * self.threads + t, tag, self.rngs[t])
                        for t in range(self.threads)]
        self.stats = [WorkerStats(config.classes, steps) for _ in range(self.threads)]
        self.rc: Any = None

    def connect(self) -> None:
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.cluster import ClusterNode, RedisCluster
        from redis.retry import Retry

        cfg = self.config
        nodes = [ClusterNode(*split_host_port(p, cfg.port or 6379)) for p in cfg.contact_points]
        self.rc = RedisCluster(
            startup_nodes=nodes,
            password=redis_password(cfg),
            decode_responses=True,
            socket_timeout=cfg.request_timeout,
            socket_connect_timeout=min(2.0, cfg.request_timeout),
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0),
                        retries=max(3, int(cfg.request_timeout))),
        )
        self.rc.ping(target_nodes=RedisCluster.PRIMARIES)

    def close(self) -> None:
        if self.rc is not None:
            self.rc.close()

    def key_name(self, key: int) -> str:
        return f"{self.config.prefix}:{key}"

    def write(self, key: int, value: str) -> bool:
        """SET then WAIT on the same connection of the key's primary; True if acknowledged.

        Follows MOVED (slot map refreshed) and ASK, and retries connection errors and
        CLUSTERDOWN/TRYAGAIN with bounded exponential backoff until ``request_timeout``.
        """
        from redis.exceptions import (
            AskError,
            ClusterDownError,
            ConnectionError,
            MovedError,
            TimeoutError,
            TryAgainError,
        )

        cfg = self.config
        name = self.key_name(key)
        deadline = time.monotonic() + cfg.request_timeout
        attempt = 0
        ask: Any = None
        while True:
            node = ask or self.rc.get_node_from_key(name)
            try:
                pipe = self.rc.get_redis_connection(node).pipeline(transaction=False)
                if ask is not None:
                    pipe.execute_command("ASKING")
                pipe.set(name, value)
                pipe.execute_command("WAIT", cfg.wait_replicas, cfg.wait_timeout_ms)
                replies = pipe.execute()
                return int(replies[-1]) >= cfg.wait_replicas
            except AskError as exc:
                ask = self.rc.nodes_manager.get_node(host=exc.host, port=exc.port) or None
                if ask is None:
                    self.rc.nodes_manager.initialize()
            except MovedError as exc:
                ask = None
                self.rc.nodes_manager.move_slot(exc)
            except (ConnectionError, TimeoutError, ClusterDownError, TryAgainError):
                ask = None
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(1.0, 0.05 * 2**attempt) * (0.5 + random.random() / 2))
                # The next attempt reports the error if it persists.
                with contextlib.suppress(Exception):
                    self.rc.nodes_manager.initialize()
            attempt += 1
            if time.monotonic() >= deadline or attempt > 64:
                raise TimeoutError(f"write of {name} not done within {cfg.request_timeout}s")

    def _one(self, t: int, cls: str, step: int | None) -> None:
        w, stats = self.writers[t], self.stats[t]
        began = time.perf_counter()
        try:
            if cls == "read":
                self.rc.get(self.key_name(w.read_key()))
            elif cls == "write":
                key = w.update_key()
                seq, value = w.next_value()
                if self.write(key, value):
                    w.acks.record(key, seq)
                else:
                    stats.unacknowledged += 1
            else:  # "other": a script (keyed, so routed and retried like any command)
                self.rc.eval(_OTHER_SCRIPT, 1, self.key_name(w.read_key()))
        except Exception as exc:
            stats.failure(cls, exc, step)
            return
        stats.success(cls, time.perf_counter() - began, step)

    def _thread(self, t: int, plan: _Plan, errors: list[str]) -> None:
        try:
            while True:
                slot = plan.next_slot()
                if slot is None:
                    return
                step, mix = slot
                assert mix is not None
                self._one(t, mix.choose(self.rngs[t]), step)
        except BaseException:
            errors.append(traceback.format_exc())

    def preload(self) -> None:
        for t, w in enumerate(self.writers):
            for key in range(w.slot, self.config.keys, w.writers):
                if self.stop.is_set():
                    return
                seq, value = w.next_value()
                try:
                    if self.write(key, value):
                        w.acks.record(key, seq)
                    else:
                        self.stats[t].unacknowledged += 1
                except Exception as exc:
                    self.stats[t].failures[f"preload:{type(exc).__name__}"] += 1

    def run(self, plan: _Plan) -> None:
        errors: list[str] = []
        threads = [threading.Thread(target=self._thread, args=(t, plan, errors), daemon=True,
                                    name=f"kairos-load-{t}") for t in range(self.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise RuntimeError(errors[0])

    def verify(self) -> dict[str, Any]:
        lost: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        checked = 0
        for w in self.writers:
            items = list(w.acks.items())
            for i in range(0, len(items), 500):
                chunk = items[i : i + 500]
                names = [self.key_name(k) for k, _ in chunk]
                try:
                    values = self.rc.mget_nonatomic(names)
                except Exception as exc:
                    errors[type(exc).__name__] += len(chunk)
                    continue
                checked += len(chunk)
                for (_key, seq), value in zip(chunk, values, strict=True):
                    kind = check_value(value, tag=w.tag, slot=w.slot, acked_seq=seq)
                    if kind != "ok":
                        lost[kind] += 1
        return {"lost": dict(lost), "verify_errors": dict(errors), "verified_keys": checked,
                "verified": not errors}

    def progress(self) -> tuple[int, int]:
        ops = fails = 0
        for s in self.stats:
            o, f = s.snapshot()
            ops += o
            fails += f
        return ops, fails

    def payload(self) -> dict[str, Any]:
        merged = WorkerStats(self.config.classes, len(self.stats[0].step_ops))
        hists = {c: LatencyHistogram() for c in self.config.classes}
        for s in self.stats:
            for c, n in s.ops.items():
                merged.ops[c] += n
            merged.failures.update(s.failures)
            for c, h in s.hist.items():
                hists[c].merge(h)
            merged.step_ops = [a + b for a, b in zip(merged.step_ops, s.step_ops, strict=True)]
            merged.step_failures = [a + b for a, b in
                                    zip(merged.step_failures, s.step_failures, strict=True)]
            merged.unacknowledged += s.unacknowledged
        merged.hist = hists
        out = merged.payload()
        out["acknowledged"] = sum(w.acks.acknowledged for w in self.writers)
        return out


# -------------------------------------------------------------------- worker process
def _worker_main(config: LoadConfig, index: int, tag: str, stop: Any, schema_ready: Any,
                 messages: Any) -> None:
    """Entry point of a spawned worker: connect, (schema), preload, run, verify, report."""
    # Ctrl-C reaches the whole process group: the parent stops the workers cleanly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker: _CassandraWorker | _RedisWorker | None = None
    try:
        if config.engine == "cassandra":
            worker = _CassandraWorker(config, index, tag, stop)
        else:
            worker = _RedisWorker(config, index, tag, stop)
        worker.connect()
        if isinstance(worker, _CassandraWorker):
            if index == 0:
                if config.create_schema:
                    worker.create_schema()
                schema_ready.set()
            elif not schema_ready.wait(timeout=120):
                raise KairosError("the schema was not ready within 120 s")
            worker.prepare()
        if config.preload:
            worker.preload()
        messages.put(("started", index, None))
        plan = _Plan(config, index, stop)
        reporter_stop = threading.Event()

        def report() -> None:
            while not reporter_stop.wait(1.0):
                snap = (worker.progress() if isinstance(worker, _RedisWorker)
                        else worker.stats.snapshot())
                messages.put(("progress", index, snap))

        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        worker.run(plan)
        seconds = time.monotonic() - plan.start
        reporter_stop.set()
        reporter.join()
        if isinstance(worker, _RedisWorker):
            payload = worker.payload()
        else:
            payload = worker.stats.payload()
            payload["acknowledged"] = worker.writer.acks.acknowledged
        messages.put(("progress", index, (sum(payload["ops"].values()),
                                          sum(payload["failures"].values()))))
        if config.verify:
            messages.put(("verifying", index, None))
            payload.update(worker.verify())
        payload["seconds"] = seconds
        payload["stopped_by"] = plan.stopped_by
        messages.put(("result", index, payload))
    except BaseException as exc:
        messages.put(("error", index, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        schema_ready.set()
    finally:
        if worker is not None:
            with contextlib.suppress(Exception):
                worker.close()


# ------------------------------------------------------------------------ orchestration
class LoadError(KairosError):
    """A worker failed to start or crashed (not an operation failure: those are counted)."""


class BackgroundLoad:
    """Run load in spawned worker processes while the caller does something else.

    Examples
    --------
    >>> with BackgroundLoad(engine="cassandra", cl="QUORUM", rate=500,
    ...                     max_seconds=600) as load:          # doctest: +SKIP
    ...     run_playbook("playbooks/rolling_restart.yml")
    >>> result = load.result()                                   # doctest: +SKIP
    >>> assert result.failed == 0 and result.lost_acknowledged_writes == 0

    Parameters
    ----------
    config : LoadConfig, optional
        The run; or give its fields as keyword arguments.
    max_seconds : float, default 600
        Safety limit: the workers stop on their own after this long (overrides
        ``config.seconds``).
    max_requests : int, default 2_000_000
        Safety limit on the request count (unless the config sets one).
    startup_timeout : float, default 120
        How long :meth:`start` waits for every worker to connect and begin.
    on_progress : callable, optional
        Called with ``(elapsed_s, ops, failures)`` about every second from a helper thread.
    """

    def __init__(
        self,
        config: LoadConfig | None = None,
        *,
        max_seconds: float = 600.0,
        max_requests: int | None = 2_000_000,
        startup_timeout: float = 120.0,
        on_progress: Any = None,
        **options: Any,
    ) -> None:
        if config is None:
            options.setdefault("seconds", max_seconds)
            config = LoadConfig(**options)
        elif options:
            config = replace(config, **options)
        config = replace(
            config,
            seconds=min(config.seconds, max_seconds),
            max_requests=config.max_requests if config.max_requests is not None
            else max_requests,
        )
        self.config = config
        self.startup_timeout = startup_timeout
        self.on_progress = on_progress
        self.tag = secrets.token_hex(4)
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        self._schema_ready = self._ctx.Event()
        self._messages: Any = self._ctx.Queue()
        self._procs: list[Any] = []
        self._progress: dict[int, tuple[int, int]] = {}
        self._started: set[int] = set()
        self._payloads: dict[int, dict[str, Any]] = {}
        self._errors: dict[int, str] = {}
        self._collector: threading.Thread | None = None
        self._done = threading.Event()
        self._began = 0.0
        self._result: LoadResult | None = None
        self._cond = threading.Condition()

    # -- lifecycle
    def start(self) -> BackgroundLoad:
        """Start the workers and wait until each one is connected and issuing operations."""
        if self._procs:
            raise LoadError("this load has already been started")
        self._began = time.monotonic()
        for i in range(self.config.processes):
            p = self._ctx.Process(
                target=_worker_main,
                args=(self.config, i, self.tag, self._stop, self._schema_ready, self._messages),
                name=f"kairos-load-{i}",
                daemon=True,
            )
            p.start()
            self._procs.append(p)
        self._collector = threading.Thread(target=self._collect, daemon=True,
                                           name="kairos-load-collector")
        self._collector.start()
        deadline = time.monotonic() + self.startup_timeout
        with self._cond:
            while len(self._started) + len(self._errors) < len(self._procs):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not self._cond.wait(timeout=min(left, 0.5)) and not any(
                    p.is_alive() for p in self._procs
                ):
                    break
        if self._errors or len(self._started) < len(self._procs):
            exits = [f"worker {i} exited with code {p.exitcode}"
                     for i, p in enumerate(self._procs) if p.exitcode is not None]
            detail = next(iter(self._errors.values()), None) or "; ".join(exits) or (
                f"no answer within the startup timeout ({self.startup_timeout:g} s)")
            self._abort()
            raise LoadError(f"load workers did not start: {detail.strip().splitlines()[0]}\n"
                            f"{detail}")
        return self

    def _collect(self) -> None:
        pending = set(range(len(self._procs)))
        last_report = 0.0
        while pending:
            try:
                kind, index, data = self._messages.get(timeout=0.5)
            except queue.Empty:
                dead = {i for i in pending if not self._procs[i].is_alive()}
                if dead:
                    # A worker that died without a result message: give the queue a moment.
                    try:
                        kind, index, data = self._messages.get(timeout=2.0)
                    except queue.Empty:
                        with self._cond:
                            for i in dead:
                                self._errors.setdefault(
                                    i, f"worker {i} exited with code {self._procs[i].exitcode}")
                            pending -= dead
                            self._cond.notify_all()
                        continue
                else:
                    continue
            with self._cond:
                if kind == "started":
                    self._started.add(index)
                elif kind == "progress":
                    self._progress[index] = data
                elif kind == "result":
                    self._payloads[index] = data
                    pending.discard(index)
                elif kind == "error":
                    self._errors[index] = data
                    pending.discard(index)
                self._cond.notify_all()
            now = time.monotonic()
            if self.on_progress is not None and kind == "progress" and now - last_report >= 0.9:
                last_report = now
                ops, fails = self.progress()
                with contextlib.suppress(Exception):
                    self.on_progress(now - self._began, ops, fails)
        self._done.set()

    def progress(self) -> tuple[int, int]:
        """(finished operations, failures) reported so far over all workers."""
        with self._cond:
            return (sum(p[0] for p in self._progress.values()),
                    sum(p[1] for p in self._progress.values()))

    def running(self) -> bool:
        return bool(self._procs) and not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the workers have finished on their own (duration/max_requests)."""
        return self._done.wait(timeout)

    def stop(self, timeout: float | None = None) -> LoadResult:
        """Stop issuing, let in-flight requests finish, verify, and return the result."""
        if self._result is not None:
            return self._result
        if not self._procs:
            raise LoadError("this load was never started")
        self._stop.set()
        if timeout is None:
            timeout = 2 * self.config.request_timeout + 30 + self.config.max_keys / 2000
        if not self._done.wait(timeout):
            self._abort()
            raise LoadError(f"load workers did not finish within {timeout:.0f} s after stop")
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        if self._errors:
            detail = next(iter(self._errors.values()))
            raise LoadError(f"load worker failed: {detail}")
        payloads = [self._payloads[i] for i in sorted(self._payloads)]
        seconds = max(p.get("seconds", 0.0) for p in payloads)
        reasons = {p.get("stopped_by", "duration") for p in payloads}
        stopped_by = next((r for r in ("stopped", "max_requests") if r in reasons), "duration")
        self._result = aggregate(self.config, payloads, seconds=seconds, stopped_by=stopped_by)
        return self._result

    def result(self) -> LoadResult:
        """The result (stops the load first if it is still running)."""
        return self._result if self._result is not None else self.stop()

    def _abort(self) -> None:
        self._stop.set()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._result is None and self._procs:
            if exc_type is not None:
                self._abort()
                return
            self.stop()


def run_load(config: LoadConfig, *, on_progress: Any = None,
             startup_timeout: float = 120.0) -> LoadResult:
    """Run ``config`` to its end (duration, request bound or Ctrl-C) and return the result."""
    load = BackgroundLoad(config, max_seconds=config.seconds, max_requests=config.max_requests,
                          startup_timeout=startup_timeout, on_progress=on_progress)
    load.start()
    try:
        while not load.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    return load.stop()
