"""The memory split of a node as a decision (issue 43 part 1; seeds/004).

A node's memory budget, its envelope (on the lab 1536 MiB per Cassandra node, page cache
included, and 256 MiB per Redis node), is divided into *shares* on a grid of units
(16 MiB by default):

Cassandra
    ``heap_size`` (JVM, restart class); ``key_cache_size`` (live), which lives *on the
    heap*: it takes no memory of its own from the budget but must leave ``heap_headroom``
    of the heap free; ``row_cache_size`` (off-heap; resized live between two non-zero
    sizes, turned on or off by a restart, :func:`planner.model.spaces.change_kind`); a fixed
    non-heap ``overhead`` (metaspace, code cache, thread stacks, direct buffers); and the
    OS ``page_cache``: whatever is left.
Redis
    ``maxmemory`` (live), a fixed ``overhead`` (the process, client and replication
    buffers) and ``os``: whatever is left, the room a fork for BGSAVE or an AOF rewrite
    needs for its copy-on-write pages.

Each share has a small effect model with ``predict(size_bytes)`` (seconds an operation
spends because of the share at that size) and ``uncertainty(size_bytes)``:

- :class:`CacheEffect` wraps a :class:`MissRatioCurve` fitted to observed (cache size, hit
  ratio) points: ``miss_seconds x miss ratio(size)`` (key, row and page cache, maxmemory);
- :class:`PressureCost`, the time spent because a share is close to what it must hold:
  GC on the heap the key cache leaves (the live set), copy-on-write room for Redis's OS.

The objective is the predicted time per operation, a separable sum::

    T(split) = sum over shares s of  w_s * model_s.predict(size_s)
    w_s      = sum of the mix's fractions of the classes share s serves (:data:`AFFECTS`)

Separable is an approximation: a row-cache hit also spares the key and page caches, so
the curves are first-order, each measured (or fitted) with the other shares where they
run; the refinement below is how measured points correct them, as in seeds/004.

:func:`optimise_split` is exact over the grid: a dynamic programme over units
(:func:`allocate`, a min-plus convolution of the shares' cost tables, the remainder last).
The key cache is folded into the heap first: for each heap size, the best key cache that
fits its headroom. :func:`brute_force_split` enumerates every split (small budgets; the
tests hold the two equal).

:func:`refine` is seeds/004's error-driven sampling for one curve: measure next where the
model's estimated error is highest (the widest box a monotone curve can take between two
measured points), against :func:`uniform_sizes`.

Nothing here measures the lab or writes a plan; docs/memory-split.md says what is wired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.engines import get_engine
from planner.errors import ValidationError, finite_at_least
from planner.model.spaces import Change, change_kind, get_space
from planner.workload.series import classes_for

__all__ = [
    "AFFECTS",
    "DEFAULT_HEAP_HEADROOM",
    "DEFAULT_UNIT_BYTES",
    "MIB",
    "CacheEffect",
    "CassandraMemoryModels",
    "MemoryBudget",
    "MemorySplit",
    "MissCost",
    "MissRatioCurve",
    "PressureCost",
    "RedisMemoryModels",
    "Refinement",
    "allocate",
    "brute_force_split",
    "config_bytes",
    "evaluate_split",
    "fit_miss_cost",
    "gap_errors",
    "held_out_error",
    "optimise_split",
    "refine",
    "synthetic_hit_curve",
    "uniform_sizes",
]

MIB = 1024 * 1024
DEFAULT_UNIT_BYTES = 16 * MIB
#: The fraction of the heap on-heap caches (the key cache) must leave free.
DEFAULT_HEAP_HEADROOM = 0.5

#: The operation classes whose time each share's model adds. GC pauses every operation; the
#: key and row caches serve partition reads; the page cache serves reads and scans. Redis's
#: maxmemory serves reads; its OS remainder is needed by writes (copy-on-write on a fork).
AFFECTS: Mapping[str, Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "cassandra": MappingProxyType({
        "heap_size": ("read", "update", "insert", "scan"),
        "key_cache_size": ("read",),
        "row_cache_size": ("read",),
        "page_cache": ("read", "scan"),
    }),
    "redis": MappingProxyType({"maxmemory": ("read",), "os": ("write",)}),
})
#: The shares that are configuration parameters (planner/model/spaces.py names), per engine.
PARAMETERS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "cassandra": ("heap_size", "key_cache_size", "row_cache_size"),
    "redis": ("maxmemory",),
})
#: The share that takes what the parameters and the overhead leave.
REMAINDER: Mapping[str, str] = MappingProxyType({"cassandra": "page_cache", "redis": "os"})

SizeArray = npt.NDArray[np.float64]


def _sizes(size_bytes: npt.ArrayLike) -> SizeArray:
    return np.asarray(size_bytes, dtype=float)


# --------------------------------------------------------------------------- models
@dataclass(frozen=True)
class MissRatioCurve:
    """Hit ratio of a cache against its size: through (0, 0) and the fitted points.

    Built by :meth:`fit`. The hit ratio is linear between knots and flat beyond the last
    one, so the miss ratio never increases with the size. The rules when little is known:

    - no point: the hit ratio is 0 at every size (no benefit is assumed until measured),
      with uncertainty 1;
    - one point ``(s1, h1)``: ``h1 * min(s / s1, 1)``, the lowest curve that is concave,
      non-decreasing and passes through (0, 0) and the point.

    Parameters
    ----------
    knots_bytes : tuple of float
        Increasing sizes, the first 0.
    knots_hit : tuple of float
        The hit ratio at each knot, non-decreasing, in [0, 1], the first 0.
    """

    knots_bytes: tuple[float, ...] = (0.0,)
    knots_hit: tuple[float, ...] = (0.0,)

    @classmethod
    def fit(
        cls, *, sizes_bytes: Sequence[float], hit_ratios: Sequence[float],
        concave: bool = False,
    ) -> MissRatioCurve:
        """Fit the curve to observed (size, hit ratio) points.

        Points at the same size are averaged; the averages are made non-decreasing by
        isotonic regression (pool adjacent violators, weighted by the number of points), so
        noisy measurements never give a miss ratio that rises with the size.

        Parameters
        ----------
        sizes_bytes : sequence of float
            Cache sizes measured, each > 0 (the curve passes through (0, 0)).
        hit_ratios : sequence of float
            The hit ratio observed at each size, in [0, 1].
        concave : bool, default False
            Take the least concave majorant of the points instead: the curve is then concave
            (decreasing returns), what a cache partitioned as in Talus achieves. Off by
            default: a measured curve can have a cliff (a working set that fits or not).

        Raises
        ------
        ValidationError
            Naming ``sizes_bytes`` or ``hit_ratios``.
        """
        sizes = np.asarray(sizes_bytes, dtype=float).ravel()
        hits = np.asarray(hit_ratios, dtype=float).ravel()
        if sizes.shape != hits.shape:
            raise ValidationError(
                f"hit_ratios: {hits.size} values for {sizes.size} sizes_bytes; give one each"
            )
        if not np.all(np.isfinite(sizes)) or np.any(sizes <= 0):
            raise ValidationError("sizes_bytes: every size must be finite and > 0 "
                                  "(the curve passes through (0, 0))")
        if not np.all(np.isfinite(hits)) or np.any((hits < 0) | (hits > 1)):
            raise ValidationError("hit_ratios: every hit ratio must be in [0, 1]")
        if sizes.size == 0:
            return cls()
        xs, means, counts = _merge_equal_sizes(sizes, hits)
        ys = _isotonic(means, counts)
        knots_x = np.concatenate([[0.0], xs])
        knots_y = np.concatenate([[0.0], ys])
        if concave:
            knots_x, knots_y = _concave_majorant(knots_x, knots_y)
        return cls(tuple(float(x) for x in knots_x), tuple(float(y) for y in knots_y))

    def __post_init__(self) -> None:
        xs, ys = np.asarray(self.knots_bytes), np.asarray(self.knots_hit)
        if xs.size == 0 or xs.shape != ys.shape or xs[0] != 0.0 or ys[0] != 0.0:
            raise ValidationError("knots_bytes: the knots start at (0, 0), one hit ratio each")
        if np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) < 0) or ys[-1] > 1.0:
            raise ValidationError("knots_hit: sizes must increase, hit ratios must not "
                                  "decrease and stay <= 1")

    @property
    def measured_bytes(self) -> tuple[float, ...]:
        """The knots' sizes other than 0."""
        return self.knots_bytes[1:]

    def predict(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """The hit ratio at ``size_bytes`` (an array of the same shape)."""
        return np.interp(_sizes(size_bytes), self.knots_bytes, self.knots_hit)

    def miss_ratio(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """``1 - predict(size_bytes)``: never increases with the size."""
        return 1.0 - self.predict(size_bytes)

    def uncertainty(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """The largest error the prediction can have if the true curve is non-decreasing.

        Between two knots the truth lies between their hit ratios, so the bound is the
        larger distance from the line to either (a monotone curve may jump anywhere in
        between); 0 at a knot; beyond the last knot the truth may rise to 1.
        """
        s = _sizes(size_bytes)
        xs, ys = np.asarray(self.knots_bytes), np.asarray(self.knots_hit)
        line = np.interp(s, xs, ys)
        beyond = 1.0 - ys[-1]
        if xs.size == 1:
            return np.where(s > 0, beyond, 0.0)
        i = np.clip(np.searchsorted(xs, s, side="right") - 1, 0, xs.size - 2)
        inside = np.maximum(line - ys[i], ys[i + 1] - line)
        bound = np.where(s > xs[-1], beyond, inside)
        return np.where(np.isin(s, xs), 0.0, bound)  # a knot is what was measured


def _merge_equal_sizes(
    sizes: SizeArray, hits: SizeArray,
) -> tuple[SizeArray, SizeArray, SizeArray]:
    """Sorted distinct sizes, the mean hit ratio at each and how many points it averages."""
    xs, inverse, counts = np.unique(sizes, return_inverse=True, return_counts=True)
    sums = np.zeros(xs.size)
    np.add.at(sums, inverse, hits)
    return xs, sums / counts, counts.astype(float)


def _isotonic(values: SizeArray, weights: SizeArray) -> SizeArray:
    """The non-decreasing sequence closest to ``values`` in weighted least squares (PAV)."""
    blocks: list[tuple[float, float, int]] = []  # (mean, weight, how many values)
    for value, weight in zip(values, weights, strict=True):
        blocks.append((float(value), float(weight), 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append(((m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2))
    return np.repeat([b[0] for b in blocks], [b[2] for b in blocks]).astype(float)


def _concave_majorant(xs: SizeArray, ys: SizeArray) -> tuple[SizeArray, SizeArray]:
    """The upper convex hull's vertices (monotone chain): the least concave majorant."""
    hull: list[int] = []
    for i in range(xs.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            cross = (xs[b] - xs[a]) * (ys[i] - ys[a]) - (ys[b] - ys[a]) * (xs[i] - xs[a])
            if cross < 0:
                break
            hull.pop()
        hull.append(i)
    return xs[hull], ys[hull]


@dataclass(frozen=True)
class CacheEffect:
    """Time an operation spends because a cache misses: ``miss_seconds x miss ratio``.

    Parameters
    ----------
    curve : MissRatioCurve
        The cache's hit ratio against its size.
    miss_seconds : float
        What a miss costs an operation that reaches the cache (an index read from disk for
        the key cache, a read through the SSTables for the row cache, a disk read for the
        page cache, a fetch from the backing store for Redis), >= 0.
    """

    curve: MissRatioCurve
    miss_seconds: float

    def __post_init__(self) -> None:
        finite_at_least("miss_seconds", self.miss_seconds, 0.0)

    def predict(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """Seconds per operation reaching the cache, at ``size_bytes``."""
        return self.miss_seconds * self.curve.miss_ratio(size_bytes)

    def uncertainty(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """The curve's bound (:meth:`MissRatioCurve.uncertainty`) in seconds."""
        return self.miss_seconds * self.curve.uncertainty(size_bytes)


@dataclass(frozen=True)
class PressureCost:
    """Time an operation spends because a share is close to what it must hold.

    ``seconds_at_double x need / (size - need)``: each collection traces the live set
    (``need``) and collections come as often as the free room fills, so the cost halves
    each time the free room doubles and grows without bound near ``need``. At or below
    ``need`` it is infinite (an OutOfMemoryError, or the OOM killer): never chosen.

    Parameters
    ----------
    need_bytes : float
        What the share must hold: the heap's live set (memtables and the rest of what
        survives a collection), or Redis's copy-on-write pages during a fork; > 0.
    seconds_at_double : float
        The cost per operation when the size is twice ``need_bytes``, >= 0.
    relative_error : float, default 0.25
        The uncertainty as a fraction of the prediction.
    """

    need_bytes: float
    seconds_at_double: float
    relative_error: float = 0.25

    def __post_init__(self) -> None:
        finite_at_least("need_bytes", self.need_bytes, 0.0)
        if self.need_bytes <= 0:
            raise ValidationError(f"need_bytes: must be > 0, got {self.need_bytes!r}")
        finite_at_least("seconds_at_double", self.seconds_at_double, 0.0)
        finite_at_least("relative_error", self.relative_error, 0.0)

    def predict(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """Seconds per operation at ``size_bytes`` (``inf`` at or below the need)."""
        s = _sizes(size_bytes)
        free = s - self.need_bytes
        with np.errstate(divide="ignore"):
            cost = self.seconds_at_double * self.need_bytes / np.where(free > 0, free, 1.0)
        return np.where(free > 0, cost, np.inf)

    def uncertainty(self, size_bytes: npt.ArrayLike) -> SizeArray:
        """``relative_error x predict(size_bytes)``."""
        return self.relative_error * self.predict(size_bytes)


@dataclass(frozen=True)
class CassandraMemoryModels:
    """The effect models of a Cassandra node's shares.

    ``gc`` sees the heap the key cache leaves (``heap_size - key_cache_size``).
    """

    gc: PressureCost
    key_cache: CacheEffect
    row_cache: CacheEffect
    page_cache: CacheEffect

    def by_share(self) -> dict[str, CacheEffect | PressureCost]:
        return {"heap_size": self.gc, "key_cache_size": self.key_cache,
                "row_cache_size": self.row_cache, "page_cache": self.page_cache}


@dataclass(frozen=True)
class RedisMemoryModels:
    """The effect models of a Redis node's shares: ``maxmemory`` and the ``os`` remainder."""

    maxmemory: CacheEffect
    os: PressureCost

    def by_share(self) -> dict[str, CacheEffect | PressureCost]:
        return {"maxmemory": self.maxmemory, "os": self.os}


MemoryModels = CassandraMemoryModels | RedisMemoryModels


# --------------------------------------------------------------------------- budget
@dataclass(frozen=True)
class MemoryBudget:
    """A node's memory and the grid it is split on.

    Parameters
    ----------
    engine : {"cassandra", "redis"}
    total_bytes : int
        The node's memory envelope, page cache included (1536 MiB on the lab's Cassandra
        nodes, 256 MiB on its Redis nodes).
    overhead_bytes : int
        Memory the shares cannot use: the JVM's non-heap memory, Redis's own buffers.
    unit_bytes : int, default 16 MiB
        The grid: every parameter share is a whole number of units, a whole number of MiB.
    heap_headroom : float, default 0.5
        Cassandra: the fraction of the heap on-heap caches must leave free, in [0, 1).
    """

    engine: str
    total_bytes: int
    overhead_bytes: int
    unit_bytes: int = DEFAULT_UNIT_BYTES
    heap_headroom: float = DEFAULT_HEAP_HEADROOM

    def __post_init__(self) -> None:
        classes_for(self.engine)  # names the field on an unknown engine
        for name in ("total_bytes", "overhead_bytes", "unit_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(f"{name}: must be a whole number of bytes >= 0, "
                                      f"got {value!r}")
        if self.unit_bytes == 0 or self.unit_bytes % MIB:
            raise ValidationError(f"unit_bytes: must be a whole number of MiB > 0, got "
                                  f"{self.unit_bytes!r}")
        if self.overhead_bytes >= self.total_bytes:
            raise ValidationError(f"overhead_bytes: {self.overhead_bytes} leaves nothing of "
                                  f"total_bytes {self.total_bytes}")
        finite_at_least("heap_headroom", self.heap_headroom, 0.0)
        if self.heap_headroom >= 1:
            raise ValidationError(f"heap_headroom: must be in [0, 1), got {self.heap_headroom}")

    @property
    def available_bytes(self) -> int:
        """What the shares divide: the total less the overhead."""
        return self.total_bytes - self.overhead_bytes

    @property
    def units(self) -> int:
        """Whole units in :attr:`available_bytes`."""
        return self.available_bytes // self.unit_bytes


@dataclass(frozen=True)
class MemorySplit:
    """A split, its predicted figure, and how each parameter's change takes effect.

    Parameters
    ----------
    engine : str
    sizes_bytes : Mapping[str, int]
        Every share: the parameters, ``overhead`` and the remainder (``page_cache`` or
        ``os``). The key cache is inside the heap; the others sum to the budget's total.
    seconds_per_op : float
        The predicted time per operation the shares add (the objective; lower is better).
    share_seconds : Mapping[str, float]
        Each share's weighted term of ``seconds_per_op``.
    uncertainty_seconds : float
        The weighted sum of the models' uncertainties at the split.
    classes : Mapping[str, {"live", "restart"}]
        Per parameter: how a change to the split's value takes effect (per transition from
        the current value when it was given, :func:`planner.model.spaces.change_kind`).
    changed : tuple of str
        The parameters whose value differs from the current one (all of them when the
        current configuration was not given).
    """

    engine: str
    sizes_bytes: Mapping[str, int]
    seconds_per_op: float
    share_seconds: Mapping[str, float]
    uncertainty_seconds: float
    classes: Mapping[str, Change]
    changed: tuple[str, ...] = field(default=())

    @property
    def needs_rollout(self) -> bool:
        """Whether applying the split restarts the nodes (a changed restart-class share)."""
        return any(self.classes[key] == "restart" for key in self.changed)

    def config(self) -> dict[str, str]:
        """The parameter shares in the space's units (``{"heap_size": "512M", ...}``)."""
        space = get_space(self.engine)
        return {key: space[key].format_size(self.sizes_bytes[key] / MIB)
                for key in PARAMETERS[self.engine]}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for a plan's provenance or a report)."""
        return {
            "engine": self.engine,
            "config": self.config(),
            "sizes_mib": {k: v / MIB for k, v in self.sizes_bytes.items()},
            "seconds_per_op": self.seconds_per_op,
            "share_seconds": dict(self.share_seconds),
            "uncertainty_seconds": self.uncertainty_seconds,
            "classes": dict(self.classes),
            "changed": list(self.changed),
            "needs_rollout": self.needs_rollout,
        }


# --------------------------------------------------------------------------- the problem
@dataclass(frozen=True)
class _Problem:
    budget: MemoryBudget
    models: Mapping[str, CacheEffect | PressureCost]
    weights: Mapping[str, float]
    bounds: Mapping[str, tuple[int, int]]  # parameter share -> (lowest, highest) units

    def seconds(self, share: str, size_bytes: npt.ArrayLike) -> SizeArray:
        """The share's weighted term at ``size_bytes`` (the heap's: the heap left free)."""
        cost = self.models[share].predict(size_bytes)
        # a size the model rules out (inf) stays ruled out when no operation weighs on it
        with np.errstate(invalid="ignore"):  # 0 x inf, replaced by inf
            return np.where(np.isinf(cost), np.inf, self.weights[share] * cost)

    def remainder_bytes(self, used_units: npt.ArrayLike) -> SizeArray:
        return self.budget.available_bytes - _sizes(used_units) * self.budget.unit_bytes


def _weights(engine: str, mix: Mapping[str, float]) -> dict[str, float]:
    """Each share's weight: the mix's fractions of the classes it serves."""
    if not isinstance(mix, Mapping) or not mix:
        raise ValidationError("mix: must be a mapping of operation class -> fraction")
    known = classes_for(engine)
    for name, fraction in mix.items():
        if name not in known:
            raise ValidationError(f"mix: unknown {engine} class {name!r}; known: "
                                  f"{', '.join(known)}")
        finite_at_least(f"mix.{name}", fraction, 0.0)
    total = sum(mix.values())
    if abs(total - 1.0) > 1e-3:
        raise ValidationError(f"mix: fractions must sum to 1, got {total:g}")
    return {share: sum(float(mix.get(c, 0.0)) for c in classes)
            for share, classes in AFFECTS[engine].items()}


def _bounds(
    budget: MemoryBudget, limits: Mapping[str, tuple[int, int]] | None,
) -> dict[str, tuple[int, int]]:
    """Each parameter share's range in units: the space's bounds within ``limits``."""
    space = get_space(budget.engine)
    unknown = set(limits or {}) - set(PARAMETERS[budget.engine])
    if unknown:
        raise ValidationError(f"limits: {', '.join(sorted(unknown))} is not a share of "
                              f"{budget.engine}; shares: {', '.join(PARAMETERS[budget.engine])}")
    out: dict[str, tuple[int, int]] = {}
    for key in PARAMETERS[budget.engine]:
        param = space[key]
        low = (param.minimum or 0.0) * MIB
        high = (param.maximum if param.maximum is not None else math.inf) * MIB
        if key == "maxmemory":
            low = max(low, 1.0)  # Redis' 0 is "no limit", not an empty share
        if limits and key in limits:
            given_low, given_high = limits[key]
            if not 0 <= given_low <= given_high:
                raise ValidationError(f"limits.{key}: need 0 <= low <= high, got {limits[key]}")
            low, high = max(low, given_low), min(high, given_high)
        lo = math.ceil(low / budget.unit_bytes)
        hi = min(budget.units, int(high // budget.unit_bytes))
        if lo > hi:
            raise ValidationError(
                f"limits.{key}: no size on the {budget.unit_bytes // MIB} MiB grid between "
                f"{low / MIB:g} and {min(high, budget.available_bytes) / MIB:g} MiB"
            )
        out[key] = (lo, hi)
    return out


def _problem(
    budget: MemoryBudget, models: MemoryModels, mix: Mapping[str, float],
    limits: Mapping[str, tuple[int, int]] | None,
) -> _Problem:
    expected = get_engine(budget.engine).memory_models.get()
    if not isinstance(models, expected):
        raise ValidationError(f"models: a {budget.engine} budget needs {expected.__name__}, "
                              f"got {type(models).__name__}")
    return _Problem(budget, models.by_share(), _weights(budget.engine, mix),
                    _bounds(budget, limits))


def _key_fits(key_units: npt.ArrayLike, heap_units: npt.ArrayLike, headroom: float) -> Any:
    """Whether the on-heap key cache leaves ``headroom`` of the heap free."""
    return np.asarray(key_units) <= (1.0 - headroom) * np.asarray(heap_units) + 1e-9


# --------------------------------------------------------------------------- optimiser
def allocate(
    tables: Sequence[npt.ArrayLike], remainder: npt.ArrayLike,
) -> tuple[float, list[int]]:
    """Exact minimum of a separable cost over a grid of units (dynamic programme).

    Minimises ``sum_i tables[i][u_i] + remainder[sum_i u_i]`` over whole ``u_i >= 0`` with
    ``sum_i u_i < len(remainder)``: each share ``i`` costs ``tables[i][u]`` at ``u`` units
    (``inf`` where it may not be), and whatever the shares leave costs ``remainder[t]``
    when they take ``t`` units. A min-plus convolution per share, ``O(n U^2)``.

    Returns
    -------
    (float, list of int)
        The minimum (``inf`` when nothing is feasible) and each share's units (the first
        minimum in the order the shares and their units are listed).
    """
    rest = np.asarray(remainder, dtype=float)
    size = rest.size
    best = np.full(size, np.inf)
    best[0] = 0.0
    t = np.arange(size)
    picks: list[npt.NDArray[np.int64]] = []
    for table in tables:
        cost = np.full(size, np.inf)
        given = np.asarray(table, dtype=float)[:size]
        cost[: given.size] = given
        before = t[:, None] - t[None, :]  # units taken by the earlier shares
        total = np.where(before >= 0, best[np.clip(before, 0, None)], np.inf) + cost[None, :]
        pick = np.argmin(total, axis=1)
        best = total[t, pick]
        picks.append(pick)
    final = best + rest
    used = int(np.argmin(final))
    units: list[int] = []
    for pick in reversed(picks):
        units.append(int(pick[used]))
        used -= units[-1]
    return float(final.min()), units[::-1]


def _table(problem: _Problem, share: str) -> SizeArray:
    """The share's weighted cost at each unit count, ``inf`` outside its bounds."""
    lo, hi = problem.bounds[share]
    units = np.arange(problem.budget.units + 1)
    cost = np.full(units.size, np.inf)
    cost[lo: hi + 1] = problem.seconds(share, units[lo: hi + 1] * problem.budget.unit_bytes)
    return cost


def _heap_table(problem: _Problem) -> tuple[SizeArray, npt.NDArray[np.int64]]:
    """Per heap size: GC plus the best key cache that fits its headroom, and that cache."""
    unit = problem.budget.unit_bytes
    heap = np.arange(problem.budget.units + 1)[:, None]
    k_lo, k_hi = problem.bounds["key_cache_size"]
    key = np.arange(k_lo, k_hi + 1)[None, :]
    cost = problem.seconds("heap_size", (heap - key) * unit) \
        + problem.seconds("key_cache_size", key * unit)
    cost = np.where(_key_fits(key, heap, problem.budget.heap_headroom), cost, np.inf)
    h_lo, h_hi = problem.bounds["heap_size"]
    outside = (heap[:, 0] < h_lo) | (heap[:, 0] > h_hi)
    cost[outside, :] = np.inf
    pick = np.argmin(cost, axis=1)
    return cost[np.arange(heap.shape[0]), pick], pick + k_lo


def _remainder_table(problem: _Problem) -> SizeArray:
    share = REMAINDER[problem.budget.engine]
    return problem.seconds(share, problem.remainder_bytes(np.arange(problem.budget.units + 1)))


def optimise_split(
    *,
    budget: MemoryBudget,
    models: MemoryModels,
    mix: Mapping[str, float],
    current: Mapping[str, Any] | None = None,
    limits: Mapping[str, tuple[int, int]] | None = None,
) -> MemorySplit:
    """The split of ``budget`` with the least predicted time per operation (exact on the grid).

    Parameters
    ----------
    budget : MemoryBudget
    models : CassandraMemoryModels or RedisMemoryModels
        The engine's effect models.
    mix : Mapping[str, float]
        The workload's operation mix (the engine's classes, summing to 1).
    current : Mapping[str, Any], optional
        The running configuration (space values, e.g. ``{"heap_size": "512M"}``): the
        split's classes are then per transition and ``changed`` lists what differs.
    limits : Mapping[str, (int, int)], optional
        Bytes each parameter share may take, within the space's bounds; e.g. the heap held
        at its running size keeps the split live.

    Raises
    ------
    ValidationError
        Bad input, naming the field; or no split with every model finite (``budget``).
    """
    problem = _problem(budget, models, mix, limits)
    rest = _remainder_table(problem)
    if get_engine(budget.engine).jvm:
        heap_cost, key_for_heap = _heap_table(problem)
        figure, (heap, row) = allocate([heap_cost, _table(problem, "row_cache_size")], rest)
        units = {"heap_size": heap, "key_cache_size": int(key_for_heap[heap]),
                 "row_cache_size": row}
    else:
        figure, (maxmemory,) = allocate([_table(problem, "maxmemory")], rest)
        units = {"maxmemory": maxmemory}
    _check_feasible(figure, budget)
    return _split(problem, {k: u * budget.unit_bytes for k, u in units.items()}, current)


def _check_feasible(figure: float, budget: MemoryBudget) -> None:
    if not math.isfinite(figure):
        raise ValidationError(
            f"budget: no split of {budget.available_bytes / MIB:g} MiB (total less overhead) "
            "leaves every share more than its model needs (the heap above the live set, the "
            "OS above its copy-on-write room)"
        )


def brute_force_split(
    *,
    budget: MemoryBudget,
    models: MemoryModels,
    mix: Mapping[str, float],
    current: Mapping[str, Any] | None = None,
    limits: Mapping[str, tuple[int, int]] | None = None,
    max_splits: int = 2_000_000,
) -> MemorySplit:
    """:func:`optimise_split` by enumerating every split on the grid (small budgets).

    Every combination of the parameter shares' unit counts is scored at once; the ones that
    break a rule (over the budget, the key cache over the heap's headroom) are dropped.

    Raises
    ------
    ValidationError
        As :func:`optimise_split`; ``max_splits`` when the grid has more combinations.
    """
    problem = _problem(budget, models, mix, limits)
    keys = PARAMETERS[budget.engine]
    jvm = get_engine(budget.engine).jvm
    bounds = dict(problem.bounds)
    if jvm:  # no key cache beyond the headroom of the largest heap
        lo, hi = bounds["key_cache_size"]
        most = math.floor((1 - budget.heap_headroom) * bounds["heap_size"][1] + 1e-9)
        bounds["key_cache_size"] = (lo, max(lo, min(hi, most)))
    axes = [np.arange(lo, hi + 1) for lo, hi in (bounds[k] for k in keys)]
    count = math.prod(a.size for a in axes)
    if count > max_splits:
        raise ValidationError(f"max_splits: the grid has {count} splits, more than {max_splits}")
    grids = dict(zip(keys, (g.ravel() for g in np.meshgrid(*axes, indexing="ij")), strict=True))
    used = grids["heap_size"] + grids["row_cache_size"] if jvm else grids["maxmemory"]
    ok = used <= budget.units
    if jvm:
        ok &= _key_fits(grids["key_cache_size"], grids["heap_size"], budget.heap_headroom)
    sizes = {k: v[ok] * budget.unit_bytes for k, v in grids.items()}
    total = sum(_terms(problem, sizes).values())
    if np.size(total) == 0:
        _check_feasible(math.inf, budget)
    best = int(np.argmin(total))
    _check_feasible(float(np.asarray(total)[best]), budget)
    return _split(problem, {k: int(v[best]) for k, v in sizes.items()}, current)


def _terms(problem: _Problem, sizes: Mapping[str, Any]) -> dict[str, SizeArray]:
    """Every share's weighted term for parameter sizes in bytes (scalars or arrays)."""
    engine = problem.budget.engine
    if get_engine(engine).jvm:
        heap, key, row = (_sizes(sizes[k]) for k in PARAMETERS[engine])
        return {
            "heap_size": problem.seconds("heap_size", heap - key),
            "key_cache_size": problem.seconds("key_cache_size", key),
            "row_cache_size": problem.seconds("row_cache_size", row),
            "page_cache": problem.seconds("page_cache",
                                          problem.budget.available_bytes - heap - row),
        }
    maxmemory = _sizes(sizes["maxmemory"])
    return {"maxmemory": problem.seconds("maxmemory", maxmemory),
            "os": problem.seconds("os", problem.budget.available_bytes - maxmemory)}


def _uncertainty(problem: _Problem, sizes: Mapping[str, int]) -> float:
    """The weighted sum of each share's model uncertainty at the split."""
    inputs: dict[str, float] = dict(sizes)
    budget = problem.budget
    if get_engine(budget.engine).jvm:
        inputs["heap_size"] = sizes["heap_size"] - sizes["key_cache_size"]
        inputs["page_cache"] = budget.available_bytes - sizes["heap_size"] - sizes["row_cache_size"]
    else:
        inputs["os"] = budget.available_bytes - sizes["maxmemory"]
    return float(sum(problem.weights[s] * float(problem.models[s].uncertainty(inputs[s]))
                     for s in problem.models if problem.weights[s] > 0))


def _split(
    problem: _Problem, sizes: Mapping[str, int], current: Mapping[str, Any] | None,
) -> MemorySplit:
    """The split's record: sizes of every share, figure, classes and changes."""
    budget = problem.budget
    engine = budget.engine
    space = get_space(engine)
    terms = {k: float(v) for k, v in _terms(problem, sizes).items()}
    used = sum(sizes[k] for k in PARAMETERS[engine] if k != "key_cache_size")
    all_sizes = {**sizes, "overhead": budget.overhead_bytes,
                 REMAINDER[engine]: budget.available_bytes - used}
    new = {k: space[k].format_size(sizes[k] / MIB) for k in PARAMETERS[engine]}
    now = space.normalize(current) if current is not None else {}
    classes: dict[str, Change] = {
        k: change_kind(engine, k, now[k], new[k]) if k in now else space[k].change
        for k in PARAMETERS[engine]
    }
    changed = tuple(k for k in PARAMETERS[engine] if k not in now or now[k] != new[k])
    return MemorySplit(
        engine=engine,
        sizes_bytes=MappingProxyType({k: int(v) for k, v in all_sizes.items()}),
        seconds_per_op=sum(terms.values()),
        share_seconds=MappingProxyType(terms),
        uncertainty_seconds=_uncertainty(problem, sizes),
        classes=MappingProxyType(classes),
        changed=changed,
    )


def config_bytes(engine: str, config: Mapping[str, Any]) -> dict[str, int]:
    """The parameter shares of a configuration in bytes (a missing one: the default)."""
    space = get_space(engine)
    full = space.complete(config)
    return {k: round(space[k].size_mib(full[k]) * MIB) for k in PARAMETERS[engine]}


def evaluate_split(
    *,
    budget: MemoryBudget,
    models: MemoryModels,
    mix: Mapping[str, float],
    sizes_bytes: Mapping[str, int],
) -> MemorySplit:
    """The predicted figure of a given split (e.g. the running one, :func:`config_bytes`).

    Raises
    ------
    ValidationError
        ``sizes_bytes`` missing a share, over the budget, or a key cache over the heap's
        headroom.
    """
    problem = _problem(budget, models, mix, None)
    engine = budget.engine
    missing = [k for k in PARAMETERS[engine] if k not in sizes_bytes]
    if missing:
        raise ValidationError(f"sizes_bytes: missing {', '.join(missing)}")
    sizes = {k: int(sizes_bytes[k]) for k in PARAMETERS[engine]}
    used = sum(v for k, v in sizes.items() if k != "key_cache_size")
    if any(v < 0 for v in sizes.values()) or used > budget.available_bytes:
        raise ValidationError(f"sizes_bytes: {used / MIB:g} MiB of shares, more than the "
                              f"{budget.available_bytes / MIB:g} MiB the budget leaves")
    if get_engine(engine).jvm and not _key_fits(
            sizes["key_cache_size"], sizes["heap_size"], budget.heap_headroom):
        raise ValidationError("sizes_bytes: key_cache_size must leave heap_headroom "
                              f"({budget.heap_headroom:g}) of heap_size free")
    return _split(problem, sizes, None)


# --------------------------------------------------------------------------- refinement
Measure = Callable[[float], float]


@dataclass(frozen=True)
class Refinement:
    """The measurements a refinement took, in order, and the curve they fit.

    ``strategy`` is ``"error"`` (each next size where the estimated error is highest) or
    ``"uniform"`` (sizes evenly spread over the grid, chosen up front).
    """

    strategy: str
    sizes_bytes: tuple[float, ...]
    hit_ratios: tuple[float, ...]
    concave: bool = False

    @property
    def curve(self) -> MissRatioCurve:
        return self.curve_after(len(self.sizes_bytes))

    def curve_after(self, n: int) -> MissRatioCurve:
        """The curve fitted to the first ``n`` measurements."""
        return MissRatioCurve.fit(sizes_bytes=self.sizes_bytes[:n],
                                  hit_ratios=self.hit_ratios[:n], concave=self.concave)


def gap_errors(
    curve: MissRatioCurve, grid_bytes: npt.ArrayLike, measured: npt.ArrayLike,
) -> tuple[SizeArray, SizeArray]:
    """Where to measure next in each gap between measured sizes, and the gap's estimated error.

    A non-decreasing curve lies, between two measured sizes ``a < b``, in the box of width
    ``b - a`` (as a fraction of the grid's range) and height ``h(b) - h(a)``: the box's area
    bounds the interpolation's integrated error there. The candidate is the unmeasured grid
    size nearest the gap's middle; a gap with no grid size inside is left out.

    Returns
    -------
    (ndarray, ndarray)
        The candidate sizes and their gaps' estimated errors.
    """
    grid = np.unique(np.asarray(grid_bytes, dtype=float))
    done = np.unique(np.asarray(measured, dtype=float))
    span = float(grid[-1] - grid[0]) or 1.0
    hits = curve.predict(done)
    candidates: list[float] = []
    errors: list[float] = []
    for a, b, ha, hb in zip(done[:-1], done[1:], hits[:-1], hits[1:], strict=True):
        inside = grid[(grid > a) & (grid < b)]
        if inside.size:
            candidates.append(float(inside[np.argmin(np.abs(inside - (a + b) / 2))]))
            errors.append(float((b - a) / span * (hb - ha)))
    return np.asarray(candidates), np.asarray(errors)


def uniform_sizes(grid_bytes: npt.ArrayLike, n: int) -> SizeArray:
    """``n`` grid sizes spread evenly from the smallest to the largest."""
    grid = np.unique(np.asarray(grid_bytes, dtype=float))
    if not 1 <= n <= grid.size:
        raise ValidationError(f"budget: must be in [1, {grid.size}] (the grid's sizes), got {n}")
    return grid[np.unique(np.round(np.linspace(0, grid.size - 1, n)).astype(int))]


def refine(
    measure: Measure,
    *,
    grid_bytes: npt.ArrayLike,
    budget: int,
    strategy: str = "error",
    concave: bool = False,
) -> Refinement:
    """Measure a cache's hit ratio ``budget`` times and fit its curve (seeds/004).

    ``strategy="error"`` measures the grid's two ends, then, one at a time, the candidate of
    the gap with the highest estimated error (:func:`gap_errors`, first on a tie), refitting
    after each measurement. ``strategy="uniform"`` measures :func:`uniform_sizes`.

    Parameters
    ----------
    measure : callable
        Size in bytes -> the hit ratio observed there (a measurement on the cluster, or a
        synthetic truth with noise).
    grid_bytes : sequence of float
        The sizes that may be measured (> 0).
    budget : int
        How many measurements, >= 2 and at most the grid's sizes.

    Raises
    ------
    ValidationError
        Naming ``strategy``, ``budget`` or ``grid_bytes``.
    """
    grid = np.unique(np.asarray(grid_bytes, dtype=float))
    if grid.size < 2 or grid[0] <= 0:
        raise ValidationError("grid_bytes: need at least two sizes, all > 0")
    if isinstance(budget, bool) or not isinstance(budget, int) or not 2 <= budget <= grid.size:
        raise ValidationError(f"budget: must be a whole number in [2, {grid.size}], got "
                              f"{budget!r}")
    if strategy == "uniform":
        sizes = [float(s) for s in uniform_sizes(grid, budget)]
        return _measured(strategy, sizes, measure, concave)
    if strategy != "error":
        raise ValidationError(f"strategy: {strategy!r} is not 'error' or 'uniform'")
    sizes = [float(grid[0]), float(grid[-1])]
    hits = [float(measure(s)) for s in sizes]
    while len(sizes) < budget:
        curve = MissRatioCurve.fit(sizes_bytes=sizes, hit_ratios=hits, concave=concave)
        candidates, errors = gap_errors(curve, grid, sizes)
        if candidates.size == 0:
            break  # every grid size is measured
        sizes.append(float(candidates[int(np.argmax(errors))]))
        hits.append(float(measure(sizes[-1])))
    return Refinement(strategy, tuple(sizes), tuple(hits), concave)


def _measured(strategy: str, sizes: list[float], measure: Measure, concave: bool) -> Refinement:
    return Refinement(strategy, tuple(sizes), tuple(float(measure(s)) for s in sizes), concave)


def held_out_error(
    curve: MissRatioCurve, truth: Callable[[SizeArray], SizeArray], sizes_bytes: npt.ArrayLike,
) -> float:
    """Mean absolute error of the curve's hit ratio against ``truth`` at ``sizes_bytes``."""
    s = np.asarray(sizes_bytes, dtype=float)
    return float(np.mean(np.abs(curve.predict(s) - truth(s))))


@dataclass(frozen=True)
class MissCost:
    """What a cache miss costs, fitted to measured windows: ``1 / ops = base + slope x miss``.

    Under a closed loop, the cluster's seconds per operation (``1 / ops``) are what the
    operations spend; a miss ratio that rises by ``d`` adds ``slope x d``. ``miss_seconds``
    is the slope per operation *reaching the cache* (divided by the share of the mix the
    cache serves): the :class:`CacheEffect` the split weighs by that share again.
    """

    base_seconds: float
    slope_seconds: float
    share: float
    windows: int
    r_squared: float | None

    @property
    def miss_seconds(self) -> float:
        return self.slope_seconds / self.share

    def ops_per_second(self, hit_ratio: float) -> float:
        """The throughput the fit predicts at ``hit_ratio``."""
        return 1.0 / (self.base_seconds + self.slope_seconds * (1.0 - hit_ratio))


def fit_miss_cost(*, hit_ratios: Sequence[float], ops_per_second: Sequence[float],
                  share: float) -> MissCost:
    """Least squares of ``1 / ops`` on the miss ratio over measured windows (at least two,
    at different hit ratios). A slope below zero (more misses, more served: noise, or a
    miss that costs nothing) is clipped to 0, so the split buys no cache for it; a base at or
    below zero (a read that costs nothing) is refused.

    Raises
    ------
    ValidationError
        Naming ``hit_ratios``, ``ops_per_second`` or ``share``.
    """
    hits = np.asarray(hit_ratios, dtype=float)
    ops = np.asarray(ops_per_second, dtype=float)
    if hits.shape != ops.shape or hits.ndim != 1:
        raise ValidationError(f"ops_per_second: {ops.size} value(s) for {hits.size} hit "
                              "ratio(s)")
    if not (np.isfinite(hits).all() and ((hits >= 0) & (hits <= 1)).all()):
        raise ValidationError("hit_ratios: every value must be in [0, 1]")
    if not (np.isfinite(ops).all() and (ops > 0).all()):
        raise ValidationError("ops_per_second: every value must be a finite number > 0")
    finite_at_least("share", share, 0.0)
    if not 0 < share <= 1:
        raise ValidationError(f"share: must be in (0, 1], got {share!r}")
    miss, y = 1.0 - hits, 1.0 / ops
    if np.unique(miss).size < 2:
        raise ValidationError("hit_ratios: need windows at two different hit ratios at least")
    slope, base = np.polyfit(miss, y, 1)
    if slope < 0:
        slope, base = 0.0, float(y.mean())
    if base <= 0:
        # No read is free: the windows are not on one line (a hit ratio measured before it
        # settled, or a load bound elsewhere), and the split would rest on a cost it invented.
        raise ValidationError(
            f"ops_per_second: the windows fit 1/ops = base + slope x miss ratio with a base "
            f"of {base * 1e6:.0f} us, not above 0 (windows at hit ratios "
            f"{', '.join(f'{h:.3f}' for h in hits)}: {', '.join(f'{o:.0f}' for o in ops)} "
            "ops/s); measure again once each window's hit ratio has settled")
    residual = y - (base + slope * miss)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual ** 2).sum()) / total if total > 0 else None
    return MissCost(float(base), float(slope), float(share), int(hits.size), r2)


def synthetic_hit_curve(*, seed: int, max_bytes: float) -> Callable[[SizeArray], SizeArray]:
    """A hidden "true" hit-ratio curve for the synthetic bench (seeded).

    A concave part (a skewed key popularity, ``1 - exp(-s / tau)``) plus a cliff where a
    working set starts to fit (a steep logistic step), scaled to a ceiling below 1: the
    shapes measured cache curves take. 0 at size 0, non-decreasing.
    """
    rng = np.random.default_rng(seed)
    weight = rng.uniform(0.2, 0.6)
    tau = rng.uniform(0.03, 0.15) * max_bytes
    knee = rng.uniform(0.25, 0.75) * max_bytes
    width = rng.uniform(0.01, 0.03) * max_bytes
    ceiling = rng.uniform(0.7, 0.98)
    at_zero = 1.0 / (1.0 + math.exp(knee / width))

    def truth(size_bytes: SizeArray) -> SizeArray:
        s = np.asarray(size_bytes, dtype=float)
        step = (1.0 / (1.0 + np.exp(-(s - knee) / width)) - at_zero) / (1.0 - at_zero)
        return ceiling * (weight * (1.0 - np.exp(-s / tau)) + (1.0 - weight) * step)

    return truth
