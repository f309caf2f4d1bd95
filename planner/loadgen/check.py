"""Checking a run: acknowledged writes read back, failures and latencies counted, the verdict.

Each write carries a value that names its run, its writer and a per-writer sequence
number (:func:`make_value`). Every key has exactly one writer (keys are partitioned by
``key % writers``, :func:`owned_key`), so the writer knows the order of its own writes; it
keeps, per key, only the sequence number of the latest acknowledged write (:class:`AckLog`,
memory bounded by the key space). After the run each key is read back
(:func:`check_value`): a missing row, a foreign value or a sequence number below the
acknowledged one is a lost acknowledged write. A value with a *higher* sequence number is
fine: a later write (acknowledged or not) legitimately superseded it.

Every operation is counted, every failure by exception type (:class:`WorkerStats`), and
latencies go into a mergeable histogram; :func:`aggregate` merges the workers' counts into
the :class:`LoadResult` a caller judges. No I/O here: the engine clients do the reading.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.engines import get_engine
from planner.errors import ValidationError
from planner.loadgen.config import LoadConfig


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


# Padding drawn from a fixed pseudo-random text: a value of repeated characters compresses
# about 100-fold in an SSTable (200,000 1-KB rows took 8.6 MB on disk), so a data set meant to
# be larger than the memtables and the caches would stay tiny on disk. Slices of a 1-MiB pool
# at pseudo-random offsets compress like random text (base-64 letters: 6 bits a byte).
_PAD_ALPHABET = np.frombuffer(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-", dtype=np.uint8)
_PAD = _PAD_ALPHABET[np.random.default_rng(20261124).integers(
    0, 64, size=1 << 20)].tobytes().decode("ascii")


def make_value(tag: str, slot: int, seq: int, size: int) -> str:
    """The value of write ``seq`` of writer ``slot`` in run ``tag``, padded to ``size``
    with incompressible text (the same for the same arguments)."""
    head = f"{tag}.{slot}.{seq}."
    n = max(0, size - len(head))
    if n > len(_PAD):
        return head + (_PAD * (n // len(_PAD) + 1))[:n]
    start = (seq * 7919 + slot * 104729) % (len(_PAD) - n + 1)
    return head + _PAD[start:start + n]


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


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class LoadResult:
    """What a load run measured.

    ``ops`` counts finished operations (successful or failed); ``failures`` counts the
    failed ones by exception type name. Latency percentiles are over successful operations.
    ``acknowledged_writes`` counts writes the cluster acknowledged; ``lost_acknowledged_writes``
    counts keys whose latest acknowledged value was missing, stale or foreign on read-back.
    ``verified`` is True only if every acknowledged key was read back without error.
    A shaped Redis run (``shape``) also counts hits and misses per class, and reports the
    keys the primaries evicted while it ran (``evicted_keys``, None if unread) and how many
    missing acknowledged keys that count covers (``missing_evicted``, not in the lost).
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
    shape: str | None = None
    hits_by_class: Mapping[str, int] = field(default_factory=dict)
    misses_by_class: Mapping[str, int] = field(default_factory=dict)
    evicted_keys: int | None = None
    missing_evicted: int = 0
    failure_messages: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def hit_ratio(self, cls: str | None = None) -> float | None:
        """Hits / (hits + misses) of class ``cls`` (None: every class); None if no lookup."""
        classes = [cls] if cls is not None else sorted(set(self.hits_by_class)
                                                       | set(self.misses_by_class))
        hits = sum(self.hits_by_class.get(c, 0) for c in classes)
        total = hits + sum(self.misses_by_class.get(c, 0) for c in classes)
        return hits / total if total else None

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
            "shape": self.shape,
            "hits": dict(self.hits_by_class),
            "misses": dict(self.misses_by_class),
            "hit_ratio": _round(self.hit_ratio(), 4),
            "hit_ratio_by_class": {c: _round(self.hit_ratio(c), 4)
                                   for c in sorted(set(self.hits_by_class)
                                                   | set(self.misses_by_class))},
            "evicted_keys": self.evicted_keys,
            "missing_evicted": self.missing_evicted,
            "failure_messages": {k: list(v) for k, v in self.failure_messages.items()},
        }


def merge_failure_messages(into: dict[str, list[str]], more: Mapping[str, Sequence[str]]) -> None:
    """Add ``more``'s messages to ``into``'s: three distinct ones a kind at most."""
    for kind, messages in more.items():
        said = into.setdefault(kind, [])
        for message in messages:
            if len(said) < 3 and message not in said:
                said.append(message)


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
        self.hits: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()
        self.failure_messages: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def lookups(self, cls: str, hits: int, misses: int) -> None:
        """Count ``hits`` and ``misses`` of a shaped read of class ``cls``."""
        with self.lock:
            self.hits[cls] += hits
            self.misses[cls] += misses

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
            # The first messages of each kind, to tell what failed (one reply can stand for
            # several causes: a ResponseError is any error reply).
            merge_failure_messages(self.failure_messages, {type(exc).__name__: [str(exc)[:200]]})
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
            "failure_messages": {k: list(v) for k, v in self.failure_messages.items()},
            "hist": {c: h.state() for c, h in self.hist.items()},
            "step_ops": list(self.step_ops),
            "step_failures": list(self.step_failures),
            "unacknowledged": self.unacknowledged,
            "hits": dict(self.hits),
            "misses": dict(self.misses),
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
    messages: dict[str, list[str]] = {}
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
        merge_failure_messages(messages, p.get("failure_messages", {}))
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
    hits, misses, evicted, excused = _lookups_and_evictions(config, payloads, lost)
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
        consistency_level=config.cl if get_engine(config.engine).consistency_level else None,
        target_rate=config.rate if config.trace is None else None,
        processes=config.processes,
        concurrency=config.concurrency,
        stopped_by=stopped_by,
        steps=_steps(config, step_ops, step_failures),
        shape=config.shape,
        hits_by_class=hits,
        misses_by_class=misses,
        evicted_keys=evicted,
        missing_evicted=excused,
        failure_messages=messages,
    )


def _steps(config: LoadConfig, step_ops: Sequence[int],
           step_failures: Sequence[int]) -> tuple[dict[str, Any], ...]:
    """Trace mode: per step the target and achieved rates, the failures and the mix."""
    trace = config.trace
    if trace is None:
        return ()
    return tuple({
        "step": i,
        "target_rate": round(trace.rates[i], 3),
        "ops_per_s": round(step_ops[i] / trace.step_seconds, 1),
        "failed": step_failures[i],
        "mix": {c: round(f, 4) for c, f in trace.mixes[i].items()},
    } for i in range(trace.steps))


def _lookups_and_evictions(
    config: LoadConfig, payloads: Sequence[Mapping[str, Any]], lost: Counter[str]
) -> tuple[dict[str, int], dict[str, int], int | None, int]:
    """Merged hits and misses, the evictions measured, and the missing keys they cover.

    A shaped run's workers each report ``evicted_keys``: how many keys the primaries
    evicted (INFO stats) from before the worker's first write to after its read-back, or
    None when it could not be read. The largest window's count bounds the evictions of the
    whole run from below, so at most that many ``missing`` acknowledged keys are put down
    to eviction (removed from ``lost`` and returned as the last item); any excess stays
    lost. Nothing is excused when a count is missing or the run has no shape.
    """
    hits: Counter[str] = Counter()
    misses: Counter[str] = Counter()
    for p in payloads:
        hits.update(p.get("hits", {}))
        misses.update(p.get("misses", {}))
    counts = [p.get("evicted_keys") for p in payloads]
    evicted = (max(int(c) for c in counts if c is not None)
               if config.shape and counts and None not in counts else None)
    excused = min(lost.get("missing", 0), evicted) if evicted is not None else 0
    if excused:
        lost["missing"] -= excused
        if not lost["missing"]:
            del lost["missing"]
    return dict(hits), dict(misses), evicted, excused

