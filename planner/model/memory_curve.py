"""A measured memory curve and the split it advises (issue 43; docs/memory-split.md).

A *memory curve file* records what a measurement of one cache share found on a cluster:
the sizes it ran, the read hit ratio and the reads served at each, what a miss cost (the
fit of :func:`planner.model.memory_split.fit_miss_cost`) and the node's budget (its
envelope, the overhead beside the data, and per engine what bounds the share: a fork's
copy-on-write room on Redis, the heap and its collector's measured cost on Cassandra).
bench/memory_split_redis.py writes one for Redis's ``maxmemory``,
bench/memory_split_cassandra.py one for Cassandra's ``key_cache_size`` (``--curve-out``);
``kairos plan --memory-curve FILE`` reads it and the plan carries the split it advises
(``provenance.memory_split``), shown by ``kairos explain``, the report and the exported
metrics; when the split is a live change the plan also carries it as a step
(:mod:`planner.planning.split_step`).

Format (JSON)::

    {"kind": "kairos-memory-curve", "schema_version": 1, "engine": "redis",
     "parameter": "maxmemory", "measured_at": "...", "command": "...",
     "points": [{"size_mib": 4, "hit_ratio": 0.499, "reads_per_s": 4004.0}, ...],
     "miss_cost": {"base_seconds": 1.2e-4, "slope_seconds": 2.6e-4, "share": 0.9},
     "budget": {"envelope_mib": 256, "overhead_mib": 26, "fork_room_mib": 15, "unit_mib": 2}}

A Cassandra file's budget has, instead of ``fork_room_mib``, the heap the key cache lives
on (held: a heap change is a restart) and the collector's cost measured beside it (a
:class:`planner.model.memory_split.PressureCost`: the live set and the seconds per
operation when the heap's free room is twice the live set)::

     "budget": {"envelope_mib": 1536, "overhead_mib": 320, "unit_mib": 1, "heap_mib": 512,
                "gc": {"live_mib": 150, "seconds_at_double": 2e-5}}
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.engines import get_engine
from planner.errors import ValidationError
from planner.model import memory_split as ms

__all__ = ["CURVE_KIND", "MeasuredCurve", "advice_line", "advise", "curve_document",
           "load_curve", "parse_curve"]

CURVE_KIND = "kairos-memory-curve"
#: The shares a curve file may measure, per engine (the split's cache parameters).
MEASURED = {"redis": ("maxmemory",), "cassandra": ("key_cache_size",)}
#: The budget fields that bound the measured share, by whether the engine runs a JVM: a
#: fork's copy-on-write room (Redis), or the heap and its collector's cost (Cassandra).
BOUND_FIELDS = {False: ("fork_room_mib",),
                True: ("heap_mib", "gc_live_mib", "gc_seconds_at_double")}
#: What the OS room costs beyond a fork's need is not measured: this fraction of a read's
#: base time at twice the need, which only keeps the room.
OS_ROOM_COST = 0.01


@dataclass(frozen=True)
class MeasuredCurve:
    """A memory curve file, checked (see the module's docstring)."""

    engine: str
    parameter: str
    sizes_mib: tuple[float, ...]
    hit_ratios: tuple[float, ...]
    reads_per_s: tuple[float, ...]
    cost: ms.MissCost
    envelope_mib: int
    overhead_mib: int
    unit_mib: int
    source: str
    measured_at: str = ""
    #: Redis: a fork's copy-on-write room.
    fork_room_mib: float = 0.0
    #: Cassandra: the heap (held) and its collector's cost (``PressureCost``).
    heap_mib: int = 0
    gc_live_mib: float = 0.0
    gc_seconds_at_double: float = 0.0

    @property
    def curve(self) -> ms.MissRatioCurve:
        return ms.MissRatioCurve.fit(sizes_bytes=[s * ms.MIB for s in self.sizes_mib],
                                     hit_ratios=list(self.hit_ratios))


def curve_document(*, engine: str, parameter: str, points: list[Mapping[str, float]],
                   cost: ms.MissCost, envelope_mib: int, overhead_mib: int, unit_mib: int,
                   measured_at: str, command: str, fork_room_mib: float | None = None,
                   heap_mib: int | None = None, gc_live_mib: float | None = None,
                   gc_seconds_at_double: float | None = None) -> dict[str, Any]:
    """The JSON document of a memory curve file (Redis: give ``fork_room_mib``; Cassandra:
    ``heap_mib`` and the ``gc_*`` figures)."""
    budget: dict[str, Any] = {"envelope_mib": envelope_mib, "overhead_mib": overhead_mib,
                              "unit_mib": unit_mib}
    if fork_room_mib is not None:
        budget["fork_room_mib"] = fork_room_mib
    if heap_mib is not None:
        budget["heap_mib"] = heap_mib
        budget["gc"] = {"live_mib": gc_live_mib, "seconds_at_double": gc_seconds_at_double}
    return {
        "kind": CURVE_KIND, "schema_version": 1, "engine": engine, "parameter": parameter,
        "measured_at": measured_at, "command": command,
        "points": [{"size_mib": float(p["size_mib"]), "hit_ratio": float(p["hit_ratio"]),
                    "reads_per_s": float(p["reads_per_s"])} for p in points],
        "miss_cost": {"base_seconds": cost.base_seconds, "slope_seconds": cost.slope_seconds,
                      "share": cost.share},
        "budget": budget,
    }


def _number(doc: Mapping[str, Any], key: str, where: str, *, low: float = 0.0,
            high: float = math.inf, whole: bool = False) -> float:
    value = doc.get(key)
    ok = (isinstance(value, int | float) and not isinstance(value, bool)
          and math.isfinite(value) and low <= value <= high
          and (not whole or float(value).is_integer()))
    if not ok:
        kind = "a whole number" if whole else "a number"
        raise ValidationError(f"{where}.{key}: expected {kind} in [{low:g}, {high:g}], got "
                              f"{value!r}")
    return float(value)  # type: ignore[arg-type]  # checked above


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if not isinstance(value, Mapping):
        raise ValidationError(f"{where}.{key}: expected a mapping, got {value!r}")
    return value


def load_curve(path: str | os.PathLike[str]) -> MeasuredCurve:
    """Read and check a memory curve file.

    Raises
    ------
    ValidationError
        ``<file>: <field>: <problem>``, before anything is planned.
    """
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValidationError(f"{where}: cannot read the memory curve ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{where}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return parse_curve(doc, where)


def parse_curve(doc: Any, where: str) -> MeasuredCurve:
    """Check a memory curve document (``where`` names it in errors: its file)."""
    if not isinstance(doc, Mapping) or doc.get("kind") != CURVE_KIND:
        raise ValidationError(f"{where}: kind: not a {CURVE_KIND} file")
    if doc.get("schema_version") != 1:
        raise ValidationError(f"{where}: schema_version: {doc.get('schema_version')!r} is not 1")
    engine, parameter = doc.get("engine"), doc.get("parameter")
    if parameter not in MEASURED.get(str(engine), ()):
        raise ValidationError(f"{where}: parameter: {engine}/{parameter} is not a measured "
                              f"share (known: {MEASURED})")
    points = doc.get("points")
    if not isinstance(points, list) or len(points) < 2:
        raise ValidationError(f"{where}: points: need two measured sizes at least")
    rows = []
    for i, p in enumerate(points):
        if not isinstance(p, Mapping):
            raise ValidationError(f"{where}: points[{i}]: expected a mapping, got {p!r}")
        at = f"{where}: points[{i}]"
        rows.append((_number(p, "size_mib", at, low=1e-9), _number(p, "hit_ratio", at, high=1),
                     _number(p, "reads_per_s", at, low=1e-9)))
    cost = _mapping(doc, "miss_cost", f"{where}: ")
    budget = _mapping(doc, "budget", f"{where}: ")
    miss = ms.MissCost(
        base_seconds=_number(cost, "base_seconds", f"{where}: miss_cost", low=1e-12),
        slope_seconds=_number(cost, "slope_seconds", f"{where}: miss_cost"),
        share=_number(cost, "share", f"{where}: miss_cost", low=1e-9, high=1),
        windows=len(rows), r_squared=None)
    at = f"{where}: budget"
    envelope = int(_number(budget, "envelope_mib", at, low=1, whole=True))
    overhead = int(_number(budget, "overhead_mib", at, whole=True, high=envelope - 1))
    return MeasuredCurve(
        engine=str(engine), parameter=str(parameter),
        sizes_mib=tuple(r[0] for r in rows), hit_ratios=tuple(r[1] for r in rows),
        reads_per_s=tuple(r[2] for r in rows), cost=miss, envelope_mib=envelope,
        overhead_mib=overhead, unit_mib=int(_number(budget, "unit_mib", at, low=1, whole=True)),
        source=where, measured_at=str(doc.get("measured_at", "")),
        **_engine_budget(str(engine), budget, at, room=envelope - overhead))


def _engine_budget(engine: str, budget: Mapping[str, Any], at: str, *, room: int
                   ) -> dict[str, Any]:
    """What bounds the measured share, per engine (the module's docstring)."""
    if not get_engine(engine).jvm:
        return {"fork_room_mib": _number(budget, "fork_room_mib", at)}
    heap = int(_number(budget, "heap_mib", at, low=1, whole=True, high=room))
    gc = _mapping(budget, "gc", at)
    return {"heap_mib": heap,
            "gc_live_mib": _number(gc, "live_mib", f"{at}.gc", low=1e-9, high=heap - 1e-9),
            "gc_seconds_at_double": _number(gc, "seconds_at_double", f"{at}.gc")}


def advise(curve: MeasuredCurve, *, current: Mapping[str, Any], mix: Mapping[str, float],
           ) -> dict[str, Any]:
    """The split the curve advises from ``current`` (the running configuration) under
    ``mix``, with the predictions and the figures it rests on (plain data: a plan's
    ``provenance.memory_split``)."""
    budget = ms.MemoryBudget(curve.engine, total_bytes=curve.envelope_mib * ms.MIB,
                             overhead_bytes=curve.overhead_mib * ms.MIB,
                             unit_bytes=curve.unit_mib * ms.MIB)
    fitted = curve.curve
    now_value = current.get(curve.parameter)
    models, limits = _models(curve, fitted, current)
    split = ms.optimise_split(budget=budget, models=models, mix=mix, limits=limits,
                              current={curve.parameter: now_value} if now_value else None)
    now_bytes = ms.config_bytes(curve.engine, {curve.parameter: now_value})[curve.parameter] \
        if now_value is not None else 0
    advised_bytes = split.sizes_bytes[curve.parameter]
    hit_now = float(fitted.predict(now_bytes)) if now_bytes else None
    hit = float(fitted.predict(advised_bytes))
    return {
        "engine": curve.engine,
        "parameter": curve.parameter,
        "now": None if now_value is None else str(now_value),
        "advised": split.config()[curve.parameter],
        "change": split.classes[curve.parameter],
        "changed": curve.parameter in split.changed,
        "predicted": {
            "hit_ratio_now": hit_now, "hit_ratio": hit,
            "reads_per_s_now": None if hit_now is None else curve.cost.ops_per_second(hit_now),
            "reads_per_s": curve.cost.ops_per_second(hit),
        },
        "split_mib": {k: v / ms.MIB for k, v in split.sizes_bytes.items()},
        "figures": {
            "measured_sizes_mib": list(curve.sizes_mib),
            "measured_hit_ratios": list(curve.hit_ratios),
            "miss_seconds": curve.cost.miss_seconds,
            "envelope_mib": curve.envelope_mib, "overhead_mib": curve.overhead_mib,
            "read_share": float(mix.get("read", 0.0)),
            **{k: getattr(curve, k) for k in BOUND_FIELDS[get_engine(curve.engine).jvm]},
        },
        "source": curve.source,
        "measured_at": curve.measured_at,
    }


def _models(curve: MeasuredCurve, fitted: ms.MissRatioCurve, current: Mapping[str, Any]
            ) -> tuple[ms.MemoryModels, dict[str, tuple[int, int]] | None]:
    """The engine's share models from the curve, and the shares held where they run."""
    if not get_engine(curve.engine).jvm:
        return ms.RedisMemoryModels(
            maxmemory=ms.CacheEffect(fitted, curve.cost.miss_seconds),
            os=ms.PressureCost(need_bytes=max(curve.fork_room_mib, 1.0) * ms.MIB,
                               seconds_at_double=OS_ROOM_COST * curve.cost.base_seconds),
        ), None
    # A JVM (Cassandra): the key cache is decided inside the heap it was measured on. The heap (a
    # restart) and the row cache are held, so the page cache's share does not move either:
    # neither needs a curve here.
    unmeasured = ms.CacheEffect(ms.MissRatioCurve(), 0.0)
    models = ms.CassandraMemoryModels(
        gc=ms.PressureCost(need_bytes=curve.gc_live_mib * ms.MIB,
                           seconds_at_double=curve.gc_seconds_at_double),
        key_cache=ms.CacheEffect(fitted, curve.cost.miss_seconds),
        row_cache=unmeasured, page_cache=unmeasured)
    heap = curve.heap_mib * ms.MIB
    row = ms.config_bytes("cassandra", {"row_cache_size": current.get("row_cache_size",
                                                                      "0MiB")})["row_cache_size"]
    return models, {"heap_size": (heap, heap), "row_cache_size": (row, row)}


def advice_line(advice: Mapping[str, Any]) -> str:
    """One line for ``kairos plan`` and ``kairos explain``."""
    p, f = advice.get("predicted") or {}, advice.get("figures") or {}
    now = advice.get("now") or "no limit"
    what = (f"{advice['parameter']} {now} -> {advice['advised']} [{advice.get('change')}]"
            if advice.get("changed") else f"keep {advice['parameter']} {now}")
    hit_now = p.get("hit_ratio_now")
    hits = (f"{hit_now:.1%} -> {p['hit_ratio']:.1%}" if hit_now is not None
            else f"{p.get('hit_ratio', 0.0):.1%}")
    sizes = f.get("measured_sizes_mib") or []
    bound = (f"heap {f.get('heap_mib')} MiB (live set {f.get('gc_live_mib', 0):.0f} MiB)"
             if "heap_mib" in f else f"fork room {f.get('fork_room_mib', 0):.0f} MiB")
    return (f"memory split (advice; docs/memory-split.md): {what}; predicted read hit ratio "
            f"{hits}; rests on {len(sizes)} measured size(s) "
            f"({min(sizes, default=0):g}-{max(sizes, default=0):g} MiB), envelope "
            f"{f.get('envelope_mib')} MiB, overhead {f.get('overhead_mib')} MiB, {bound} "
            f"({advice.get('source')})")
