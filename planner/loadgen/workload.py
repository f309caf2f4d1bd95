"""What load to generate: key distributions, the operation mix, trace replay and pacing.

The pure building blocks of the load generator (see :mod:`planner.loadgen`): which key an
operation touches (YCSB's uniform, scrambled Zipfian and latest distributions), which
operation class it is (a mix), how the target rate and mix change along a workload trace
replayed with time compression, and when the next operation may be issued. No I/O: each
piece is unit tested alone.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.engines import ENGINES, REGISTRY
from planner.errors import ValidationError
from planner.workload.series import WorkloadSeries

CLASSES: dict[str, tuple[str, ...]] = {e.name: e.classes for e in REGISTRY.values()}
DISTRIBUTIONS: tuple[str, ...] = ("uniform", "zipfian", "latest")
DEFAULT_MIX: dict[str, dict[str, float]] = {
    "cassandra": {"read": 0.5, "update": 0.5},
    "redis": {"read": 0.5, "write": 0.5},
}
#: YCSB's Zipfian constant.
ZIPFIAN_THETA = 0.99


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
        # With at most two items every draw ends in next()'s first two branches (zetan is
        # then at most zeta2); eta would divide by zero at two (a writer slot of two keys).
        self.eta = ((1 - (2.0 / items) ** (1 - self.theta)) / (1 - self.zeta2 / self.zetan)
                    if items > 2 else 0.0)

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
    classes = engine_classes(engine)
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


def engine_classes(engine: str) -> tuple[str, ...]:
    """The operation classes of ``engine`` (ValidationError naming the known engines)."""
    try:
        return CLASSES[engine]
    except KeyError:
        raise ValidationError(f"engine: unknown {engine!r}; known: {', '.join(ENGINES)}") from None


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

