"""The payoff experiment (SOPHIA's, on the lab in minutes): schedules, policies, summary.

Pure logic for ``bench/payoff.py`` (docs/payoff.md), which runs it on real servers:

* :func:`make_schedule` -- a workload shape of one engine (:func:`shapes_for`) compressed in
  time into a few minutes. Cassandra: one of SOPHIA's three workload shapes
  (:mod:`planner.workload.traces`: the bus-tracking day, the HPC analytics queue, the MG-RAST
  portal) or the lab's reporting days; the source trace is cut where a piecewise-constant
  operation mix fits it best into segments of ~1-3 minutes, each replayed with its mean mix
  (:class:`Schedule`). Redis: the hash day (:data:`HASH_PHASES`), write-heavy and read-heavy
  big hashes in turn, each segment naming the load shape that sends it
  (:mod:`planner.loadgen.shapes`). A closed loop that saturates the cluster, or, with a peak
  rate, an open loop that offers each segment its share of the trace's load (quiet hours
  included).
* :func:`decide` -- what each policy does over a schedule, computed beforehand from the
  performance model (whose engine is the schedule's: the engine is the model's, never this
  module's): ``default`` never changes; ``static-best`` puts in place, before the
  load starts, the one candidate predicted to serve the most over the whole schedule;
  ``naive`` switches at every shift to the candidate predicted best for the new mix,
  whatever the change costs; ``kairos`` follows the plan :func:`planner.planning.pipeline.make_plan`
  makes on the schedule (a perfect forecast, served work, the restart cost) -- a change only
  when its gain over the time the new mix lasts beats its cost (:class:`PolicyPlan`).
* :func:`run_order` -- the mirrored order of the runs (A B C D D C B A ...), so a drift of
  the cluster over the hours of the experiment cancels between the policies.
* :func:`summarise`, :func:`comparisons`, :func:`summary_table` -- the table across
  repetitions (mean and spread = half the range) from the runs' result dicts;
  :func:`figures` and :func:`readback_mismatches` make one run's record,
  :func:`render_html` the page (inline SVG drawn with planner/report/charts.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.engines import ENGINES, get_engine
from planner.errors import ValidationError
from planner.model.spaces import change_kind, get_space
from planner.report import charts

if TYPE_CHECKING:
    from planner.forecast.results import Forecast
    from planner.model.performance import PerformanceModel
    from planner.workload.series import WorkloadSeries

__all__ = [
    "DEFAULT_SHIFT_SECONDS",
    "DEFAULT_STEP_SECONDS",
    "ENGINE_SHAPES",
    "HASH_PHASES",
    "PLAN_HOSTS",
    "POLICIES",
    "SHAPES",
    "UNTHROTTLED_RATE",
    "Change",
    "PolicyPlan",
    "Schedule",
    "Segment",
    "candidate_grid",
    "check_minutes",
    "check_peak_rate",
    "comparisons",
    "decide",
    "default_config",
    "expected_final",
    "figures",
    "load_shape",
    "make_schedule",
    "model_params",
    "needs_restart",
    "parse_policies",
    "predicted_ops",
    "readback_mismatches",
    "render_html",
    "run_order",
    "schedule_forecast",
    "series_chart",
    "shape_engine",
    "shapes_for",
    "summarise",
    "summary_table",
]

POLICIES: tuple[str, ...] = ("default", "static-best", "naive", "kairos")
#: The workload shapes of each engine, keyed by its name (a table only this module reads: a
#: new engine of planner.engines adds its row). Cassandra: SOPHIA's traces and the lab's
#: reporting days (:func:`_source_series`); Redis: the hash day (:data:`HASH_PHASES`).
ENGINE_SHAPES: dict[str, tuple[str, ...]] = {
    "cassandra": ("bus", "hpc", "mgrast", "reporting", "warehouse"),
    "redis": ("hashes",),
}
#: Every shape, each engine's in turn.
SHAPES: tuple[str, ...] = tuple(s for e in ENGINES for s in ENGINE_SHAPES[e])
#: The hash day's phases, in turn from the first segment: (the load shape of
#: planner.loadgen.shapes that sends it, its mix). Big hashes (256-768 fields) written much
#: more than read, then read much more than written: the two mixes the lab's Redis model was
#: calibrated on (inventories/local/calibration/PROVENANCE.md, ``redis-*``; no HGETALL, the
#: ``other`` class it never measured), so it predicts them without extrapolating.
HASH_PHASES: tuple[tuple[str, Mapping[str, float]], ...] = (
    ("hash-write", {"read": 0.2, "write": 0.8, "other": 0.0}),
    ("hash-read", {"read": 0.9, "write": 0.1, "other": 0.0}),
)
#: The shapes made of phases in turn (:func:`_phased_schedule`), not cut from a trace.
PHASED: dict[str, tuple[tuple[str, Mapping[str, float]], ...]] = {"hashes": HASH_PHASES}
#: The hosts the kairos policy's plan is made for when none are given: the lab's inventory
#: names (Cassandra: a one-DC ring of three; Redis: its six nodes, one at a time).
PLAN_HOSTS: dict[str, tuple[str, ...]] = {
    "cassandra": ("cass1", "cass2", "cass3"),
    "redis": tuple(f"redis{i}" for i in range(1, 7)),
}
#: Length of one step of the replayed schedule and of the recorded time series.
DEFAULT_STEP_SECONDS = 5.0
#: The target time between two shifts of the mix (SOPHIA's shifts, compressed: 1-3 min).
DEFAULT_SHIFT_SECONDS = 120.0
#: The schedule's rate per step: at one slot per nanosecond the load generator's pacer never
#: waits, so the requests in flight (``--concurrency``) alone bound the load -- a closed loop
#: that saturates the cluster (tests/unit/test_payoff.py pins this on the pacer).
UNTHROTTLED_RATE = 1e9
#: The offered load the planner is told, relative to the highest predicted capacity: above
#: every candidate's capacity, as a closed loop that saturates the cluster is.
SATURATION = 2.0
#: Bounds of ``--minutes``: at least two segments of a minute; at most two hours a run.
MIN_MINUTES, MAX_MINUTES = 0.5, 120.0
#: The most candidate configurations the baselines compare.
MAX_CANDIDATES = 128

Config = dict[str, Any]
Progress = Callable[[str], None]


# ================================================================== schedules
@dataclass(frozen=True)
class Segment:
    """From ``start`` seconds into the run, the load has the operation ``mix`` and offers
    ``load`` times the schedule's peak rate (when it has one). ``shape``: the load shape
    (planner.loadgen.shapes) whose commands the mix's classes are, or None for the engine's
    plain load."""

    start: float
    mix: Mapping[str, float]
    load: float = 1.0
    shape: str | None = None


@dataclass(frozen=True)
class Schedule:
    """A compressed workload: segments of constant mix over ``seconds``, in ``step_seconds``.

    Every segment starts on a step; the first at 0. ``peak_rate`` None: a closed loop that
    saturates the cluster (:data:`UNTHROTTLED_RATE`); else the ops/s the busiest segment
    offers, each segment offering its ``load`` share of it (an open loop). ``engine``: whose
    operation classes the mixes are over.
    """

    shape: str
    seconds: float
    step_seconds: float
    segments: tuple[Segment, ...]
    source: str = ""
    peak_rate: float | None = None
    engine: str = "cassandra"

    def __post_init__(self) -> None:
        if not self.segments or self.segments[0].start != 0:
            raise ValidationError("schedule: needs segments, the first starting at 0")
        self._check_engine()
        if self.step_seconds <= 0 or self.seconds < self.step_seconds:
            raise ValidationError("schedule: bad seconds or step_seconds")
        starts = [s.start for s in self.segments]
        if starts != sorted(set(starts)) or starts[-1] >= self.seconds:
            raise ValidationError("schedule: segment starts must increase within the run")
        for s in self.segments:
            if abs(s.start / self.step_seconds - round(s.start / self.step_seconds)) > 1e-9:
                raise ValidationError(f"schedule: segment at {s.start} s is not on a step")
            if not (math.isfinite(s.load) and s.load >= 0):
                raise ValidationError(f"schedule: segment at {s.start} s: load must be >= 0")
        if self.peak_rate is not None:
            check_peak_rate(self.peak_rate)

    def _check_engine(self) -> None:
        """Every mix over the engine's classes; every load shape one of the engine's."""
        from planner.loadgen.shapes import SHAPES as LOAD_SHAPES

        classes = get_engine(self.engine).classes
        for s in self.segments:
            extra = sorted(set(s.mix) - set(classes))
            if extra:
                raise ValidationError(f"schedule: segment at {s.start} s: {extra[0]!r} is no "
                                      f"{self.engine} class ({', '.join(classes)})")
            if s.shape is not None and (s.shape not in LOAD_SHAPES
                                        or LOAD_SHAPES[s.shape].engine != self.engine):
                raise ValidationError(f"schedule: segment at {s.start} s: {s.shape!r} is no "
                                      f"{self.engine} load shape")

    @property
    def steps(self) -> int:
        return round(self.seconds / self.step_seconds)

    @property
    def shifts(self) -> tuple[float, ...]:
        """When the mix shifts (every segment's start but the first)."""
        return tuple(s.start for s in self.segments[1:])

    def durations(self) -> list[float]:
        ends = [s.start for s in self.segments[1:]] + [self.seconds]
        return [e - s.start for s, e in zip(self.segments, ends, strict=True)]

    def segment_at(self, t: float) -> int:
        """Index of the segment in force ``t`` seconds into the run."""
        i = 0
        for j, s in enumerate(self.segments):
            if s.start <= t:
                i = j
        return i

    def step_mixes(self) -> list[Mapping[str, float]]:
        """The mix of every step (what the load generator replays)."""
        return [self.segments[self.segment_at(i * self.step_seconds)].mix
                for i in range(self.steps)]

    def segment_rates(self) -> np.ndarray | None:
        """Ops/s each segment offers (None: a closed loop, as much as the cluster serves)."""
        if self.peak_rate is None:
            return None
        return np.array([self.peak_rate * s.load for s in self.segments])

    def step_rates(self) -> tuple[float, ...]:
        """The load generator's rate per step: each segment's offered ops/s, or
        :data:`UNTHROTTLED_RATE` throughout in a closed loop."""
        rates = self.segment_rates()
        return tuple(UNTHROTTLED_RATE if rates is None
                     else float(rates[self.segment_at(i * self.step_seconds)])
                     for i in range(self.steps))

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "seconds": self.seconds, "step_seconds": self.step_seconds,
                "source": self.source, "peak_rate": self.peak_rate,
                "segments": [{"start": s.start, "seconds": d, "mix": dict(s.mix),
                              "load": s.load, **({"shape": s.shape} if s.shape else {})}
                             for s, d in zip(self.segments, self.durations(), strict=True)]}


def check_peak_rate(rate: float) -> float:
    """``--peak-rate``: finite ops/s > 0."""
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) \
            or rate <= 0:
        raise ValidationError(f"--peak-rate: must be ops/s > 0, got {rate!r}")
    return float(rate)


def check_minutes(minutes: float) -> float:
    """``--minutes``, checked: a run of at least two one-step segments, at most two hours."""
    if not (isinstance(minutes, int | float) and math.isfinite(minutes)
            and MIN_MINUTES <= minutes <= MAX_MINUTES):
        raise ValidationError(f"--minutes: must be in [{MIN_MINUTES:g}, {MAX_MINUTES:g}], "
                              f"got {minutes!r}")
    return float(minutes)


def parse_policies(text: str | Sequence[str]) -> tuple[str, ...]:
    """``--policies`` (comma-separated or a list), checked: known names, no repeats."""
    names = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    names = [p for p in names if p]
    if not names:
        raise ValidationError(f"--policies: give at least one of {', '.join(POLICIES)}")
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        raise ValidationError(f"--policies: unknown policy {unknown[0]!r}; known: "
                              f"{', '.join(POLICIES)}")
    if len(set(names)) != len(names):
        raise ValidationError(f"--policies: a policy is named twice in {','.join(names)}")
    return tuple(names)


def _source_series(shape: str, seed: int, segments: int) -> WorkloadSeries:
    """The uncompressed trace of a shape (planner.workload.traces), with about ``segments``
    regimes."""
    from planner.workload import traces

    if shape == "bus":  # one day: night scans, rush-hour updates, daytime in between
        return traces.bus_tracking_like(steps=288, step_seconds=300.0, seed=seed)
    if shape == "hpc":  # a queue of write-read-write jobs (phases ~20 min), one at a time
        return traces.hpc_queue_like(steps=20 * segments, step_seconds=60.0, seed=seed,
                                     concurrency=1)
    if shape == "mgrast":  # read-heavy/write-heavy regimes of random length (~12 steps)
        return traces.mgrast_like(steps=12 * segments, step_seconds=60.0, seed=seed)
    if shape == "reporting":  # one day: report scans, ingestion batches at 00-02 and 12-14
        return traces.reporting_like(steps=288, step_seconds=300.0, seed=seed)
    if shape == "warehouse":  # the reporting day with its load: quiet night and evening
        return traces.warehouse_like(steps=288, step_seconds=300.0, seed=seed)
    raise ValidationError(f"--shape: unknown {shape!r}; known: {', '.join(SHAPES)}")


def _segmentation(mix: np.ndarray, n: int, min_len: int) -> list[int]:
    """Cut points of the best piecewise-constant fit of a ``(T, C)`` mix with at most ``n``
    pieces of at least ``min_len`` steps (least squares, exact dynamic programme)."""
    t_len = len(mix)
    n = max(1, min(n, t_len // max(1, min_len)))
    csum = np.concatenate([np.zeros((1, mix.shape[1])), np.cumsum(mix, axis=0)])
    csq = np.concatenate([[0.0], np.cumsum((mix**2).sum(axis=1))])

    def cost(a: np.ndarray, b: int) -> np.ndarray:  # squared error of rows [a, b)
        length = b - a
        s = csum[b] - csum[a]
        return csq[b] - csq[a] - (s**2).sum(axis=1) / np.maximum(length, 1)

    best = np.full((n + 1, t_len + 1), np.inf)
    back = np.zeros((n + 1, t_len + 1), dtype=int)
    best[0, 0] = 0.0
    for k in range(1, n + 1):
        for b in range(k * min_len, t_len + 1):
            a = np.arange(0, b - min_len + 1)
            total = best[k - 1, a] + cost(a, b)
            j = int(np.argmin(total))
            best[k, b], back[k, b] = total[j], int(a[j])
    k = int(np.argmin(best[1:, t_len])) + 1  # fewer pieces when more do not fit better
    cuts = [t_len]
    while k > 0:
        cuts.append(int(back[k, cuts[-1]]))
        k -= 1
    return sorted(cuts)


#: Two neighbouring segments whose mean mixes differ by less than this (L1) are one: a cut
#: there would be a shift of nothing.
MERGE_L1 = 0.2


def _merged(parts: list[tuple[int, int]], mix: np.ndarray) -> list[tuple[int, int]]:
    """Neighbouring parts with (almost) the same mean mix joined into one."""
    out = [parts[0]]
    for a, b in parts[1:]:
        pa, pb = out[-1]
        if np.abs(mix[pa:pb].mean(axis=0) - mix[a:b].mean(axis=0)).sum() < MERGE_L1:
            out[-1] = (pa, b)
        else:
            out.append((a, b))
    return out


def _rounded_mix(row: np.ndarray, classes: Sequence[str]) -> dict[str, float]:
    """A mix of 4-decimal fractions that sum to exactly 1."""
    r = np.clip(row, 0.0, None)
    r = np.round(r / r.sum(), 4)
    r[int(np.argmax(r))] += round(1.0 - float(r.sum()), 4)
    return {c: float(round(v, 4)) for c, v in zip(classes, r, strict=True)}


def shapes_for(engine: str) -> tuple[str, ...]:
    """The workload shapes of ``engine`` (ValidationError for an unknown engine)."""
    return ENGINE_SHAPES[get_engine(engine).name]


def shape_engine(shape: str) -> str:
    """The engine whose shape ``shape`` is (ValidationError naming ``--shape`` if none)."""
    for engine in ENGINES:
        if shape in ENGINE_SHAPES[engine]:
            return engine
    raise ValidationError(f"--shape: unknown {shape!r}; known: {', '.join(SHAPES)}")


def load_shape(schedule: Schedule) -> str | None:
    """The load shape (planner.loadgen.shapes) one load replays the whole schedule with:
    None when no segment names one; the first segment's when every segment's sends the same
    commands for each class over the same data -- the hash shapes (hash-read, hash-write)
    differ only in their default mix, which the schedule sets step by step. ValidationError
    when the segments' shapes would need loads of their own."""
    from planner.loadgen.shapes import SHAPES as LOAD_SHAPES

    named = [s.shape for s in schedule.segments]
    if all(n is None for n in named):
        return None
    kinds = {None if n is None else (LOAD_SHAPES[n].hashes or n, LOAD_SHAPES[n].keys,
                                     LOAD_SHAPES[n].value_size) for n in named}
    if len(kinds) > 1:
        raise ValidationError(f"schedule {schedule.shape}: its segments' load shapes "
                              f"{', '.join(sorted({str(n) for n in named}))} are not one load")
    return named[0]


def _run_steps(minutes: float, shift_seconds: float, step_seconds: float
               ) -> tuple[float, int]:
    """``--minutes``, ``--step-seconds`` and ``--shift-seconds`` checked: the run's seconds
    (whole steps) and the segments aimed at (at least 2)."""
    seconds = check_minutes(minutes) * 60.0
    if not (math.isfinite(step_seconds) and 0 < step_seconds <= seconds / 2):
        raise ValidationError(f"--step-seconds: must be in (0, {seconds / 2:g}], "
                              f"got {step_seconds!r}")
    if not (math.isfinite(shift_seconds) and shift_seconds >= step_seconds):
        raise ValidationError(f"--shift-seconds: must be >= the step ({step_seconds:g} s), "
                              f"got {shift_seconds!r}")
    steps = int(seconds // step_seconds)
    seconds = steps * step_seconds
    return seconds, max(2, min(round(seconds / shift_seconds), steps))


def make_schedule(
    shape: str,
    *,
    minutes: float,
    seed: int = 0,
    shift_seconds: float = DEFAULT_SHIFT_SECONDS,
    step_seconds: float = DEFAULT_STEP_SECONDS,
    peak_rate: float | None = None,
) -> Schedule:
    """``shape`` (any engine's, :data:`SHAPES`) compressed into a run of ``minutes``, with
    about ``minutes * 60 / shift_seconds`` segments (at least 2).

    A trace shape (Cassandra's): the source trace (:func:`_source_series`) is cut where a
    piecewise-constant mix fits it best (:func:`_segmentation`), neighbours with the same mix
    joined. Each keeps the mean mix of its part of the trace and a share of the run
    proportional to that part's length, but at least ``min(60 s, run / (2 x segments))``.
    Segment starts are rounded to steps. With ``peak_rate`` (an open loop) the trace's load,
    relative to its peak, is cut on as the mix is, and each segment offers its part's mean
    load relative to the busiest part's, times ``peak_rate``.

    The hash day (Redis'): :data:`HASH_PHASES` in turn, in segments of equal length (to the
    step), each offering ``peak_rate`` in an open loop; ``seed`` does not change it.
    """
    engine = shape_engine(shape)
    seconds, n = _run_steps(minutes, shift_seconds, step_seconds)
    if peak_rate is not None:
        check_peak_rate(peak_rate)
    if shape in PHASED:
        return _phased_schedule(shape, PHASED[shape], engine=engine, seconds=seconds,
                                step_seconds=step_seconds, segments=n, peak_rate=peak_rate)
    return _trace_schedule(shape, seed=seed, seconds=seconds, step_seconds=step_seconds,
                           segments=n, peak_rate=peak_rate)


def _phased_schedule(
    shape: str, phases: Sequence[tuple[str, Mapping[str, float]]], *, engine: str,
    seconds: float, step_seconds: float, segments: int, peak_rate: float | None,
) -> Schedule:
    """``segments`` segments of equal length (to the step), the ``phases`` in turn."""
    steps = round(seconds / step_seconds)
    starts = sorted({round(i * steps / segments) for i in range(segments)})
    out = tuple(Segment(start=k * step_seconds, mix=dict(phases[i % len(phases)][1]),
                        shape=phases[i % len(phases)][0])
                for i, k in enumerate(starts))
    loop = ("a closed loop" if peak_rate is None
            else f"an open loop at {peak_rate:g} ops/s throughout")
    names = " and ".join(
        f"{name} ({', '.join(f'{c} {v:g}' for c, v in mix.items() if v)})"
        for name, mix in phases)
    return Schedule(shape=shape, seconds=seconds, step_seconds=step_seconds, segments=out,
                    peak_rate=peak_rate, engine=engine,
                    source=f"{names} in turn, {len(out)} segments of "
                    f"{seconds / len(out):.0f} s in {seconds / 60:g} min, {loop}")


def _trace_schedule(shape: str, *, seed: int, seconds: float, step_seconds: float,
                    segments: int, peak_rate: float | None) -> Schedule:
    """A trace shape's schedule (:func:`make_schedule`)."""
    n, steps = segments, round(seconds / step_seconds)
    series = _source_series(shape, seed, n)
    classes = series.classes
    mix = series.mix_matrix()
    load = np.asarray(series.load, dtype=float)
    features = mix if peak_rate is None else np.column_stack(
        [mix, load / max(float(load.max()), 1e-12)])
    parts = _merged(list(itertools.pairwise(
        _segmentation(features, n, max(1, len(mix) // (3 * n))))), features)
    levels = np.array([load[a:b].mean() for a, b in parts])
    levels = levels / max(float(levels.max()), 1e-12)
    share = np.array([b - a for a, b in parts], dtype=float) / len(mix)
    floor = min(60.0, seconds / (2 * len(parts)))
    durations = floor + (seconds - floor * len(parts)) * share
    starts_raw = np.concatenate([[0.0], np.cumsum(durations)[:-1]])
    starts = [round(float(s) / step_seconds) for s in starts_raw]
    out: list[Segment] = []
    for (a, b), start, level in zip(parts, starts, levels, strict=True):
        if out and start <= out[-1].start / step_seconds:
            start = round(out[-1].start / step_seconds) + 1
        if start >= steps:
            break
        out.append(Segment(start=start * step_seconds,
                           mix=_rounded_mix(mix[a:b].mean(axis=0), classes),
                           load=1.0 if peak_rate is None else round(float(level), 4)))
    hours = len(mix) * float(series.step_seconds or 0.0) / 3600.0
    loop = ("a closed loop" if peak_rate is None
            else f"an open loop, its busiest segment at {peak_rate:g} ops/s")
    return Schedule(shape=shape, seconds=seconds, step_seconds=step_seconds,
                    segments=tuple(out), peak_rate=peak_rate, engine=series.engine,
                    source=f"planner.workload.traces {shape} (seed {seed}): {hours:.3g} h "
                    f"of trace in {len(out)} segments of constant "
                    f"{'mix' if peak_rate is None else 'mix and load'}, compressed into "
                    f"{seconds / 60:g} min, {loop}")


# ================================================================ candidates
def model_params(model: PerformanceModel) -> list[str]:
    """The parameters the model has configuration features for (in their order); without
    any, the parameters its calibration varied (``info.calibration.levels``)."""
    seen: list[str] = []
    for feat in model.features:
        keys = [k for k, _ in feat.match] if feat.kind == "config" else [feat.param]
        seen += [k for k in keys if k not in seen]
    if not seen:
        levels = _calibration(model).get("levels") or {}
        seen = [str(k) for k in levels]
    return seen


def _calibration(model: PerformanceModel) -> Mapping[str, Any]:
    cal = (model.info or {}).get("calibration")
    return cal if isinstance(cal, Mapping) else {}


def default_config(model: PerformanceModel, params: Sequence[str]) -> Config:
    """The starting configuration of ``params``: what the nodes ran when the model was
    calibrated (``info.calibration.original``), else the space's defaults (the model's
    engine's)."""
    space = get_space(model.engine)
    original = _calibration(model).get("original") or {}
    return {k: space[k].coerce(original[k]) if k in original else space[k].default
            for k in params}


def _values(model: PerformanceModel, key: str, default: Any) -> list[Any]:
    """The values a baseline may choose for ``key``: the running one and what the Kairos
    planner searches with this model (:func:`planner.planning.pipeline.measured_values`, the levels
    a calibrated model measured), else the levels its calibration names and the space's
    candidate values. The baselines and Kairos then choose among the same configurations."""
    from planner.planning.pipeline import measured_values

    space = get_space(model.engine)
    found = [default]
    measured = measured_values(model).get(key)
    if measured:
        found += list(measured)
    else:
        found += list((_calibration(model).get("levels") or {}).get(key, ()))
        found += list(space[key].candidate_values or ())
    out: list[Any] = []
    for v in found:
        c = space[key].coerce(v)
        if c not in out:
            out.append(c)
    return out


def candidate_grid(model: PerformanceModel, default: Mapping[str, Any]) -> list[Config]:
    """Every combination of the values of ``default``'s parameters (:func:`_values`); the
    default first. Refuses more than :data:`MAX_CANDIDATES` naming ``--params``."""
    keys = list(default)
    axes = [_values(model, k, default[k]) for k in keys]
    size = math.prod(len(a) for a in axes)
    if size > MAX_CANDIDATES:
        raise ValidationError(
            f"--params: {size} candidate configurations over {', '.join(keys)}, more than "
            f"{MAX_CANDIDATES}; name fewer parameters")
    out = [dict(default)]
    for combo in itertools.product(*axes):
        c = dict(zip(keys, combo, strict=True))
        if c not in out:
            out.append(c)
    return out


# =================================================================== policies
@dataclass(frozen=True)
class Change:
    """Settings a policy changes ``at`` seconds into the run (through the executor)."""

    at: float
    settings: Mapping[str, Any]
    restart: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "settings": dict(self.settings), "restart": self.restart,
                "reason": self.reason}


@dataclass(frozen=True)
class PolicyPlan:
    """What a policy does: the configuration before the load starts, then its changes."""

    policy: str
    start: Mapping[str, Any]
    changes: tuple[Change, ...] = ()
    predicted_ops: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "start": dict(self.start),
                "changes": [c.to_dict() for c in self.changes],
                "predicted_ops": round(self.predicted_ops, 1), "info": dict(self.info)}


def needs_restart(before: Mapping[str, Any], settings: Mapping[str, Any], *,
                  engine: str) -> bool:
    """Whether applying ``settings`` to ``before`` (missing keys at their defaults) takes a
    rolling restart of ``engine``'s nodes (planner.model.spaces.change_kind, per
    transition)."""
    space = get_space(engine)
    return any(change_kind(engine, k, before.get(k, space[k].default), v) == "restart"
               for k, v in settings.items())


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> Config:
    return {k: v for k, v in after.items() if before.get(k) != v}


def _capacity(model: PerformanceModel, schedule: Schedule,
              candidates: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """``(segments, K)`` predicted saturated ops/s of every candidate for every segment."""
    mean, _std = model.predict_matrix([s.mix for s in schedule.segments], list(candidates))
    return np.asarray(mean, dtype=float)


def expected_final(start: Mapping[str, Any], changes: Sequence[Change]) -> Config:
    """The configuration after every change (what a read-back should find)."""
    out = dict(start)
    for c in changes:
        out.update(c.settings)
    return out


def predicted_ops(model: PerformanceModel, schedule: Schedule, plan: PolicyPlan) -> float:
    """Operations the model predicts the policy serves over the schedule (per step, at most
    what the step offers, changes taking effect at their time, their cost not counted)."""
    space = get_space(model.engine)
    base = space.complete(plan.start)
    configs, cuts = [dict(base)], [0.0]
    for c in sorted(plan.changes, key=lambda c: c.at):
        configs.append({**configs[-1], **space.normalize(dict(c.settings))})
        cuts.append(c.at)
    mixes = schedule.step_mixes()
    index = [max(i for i, at in enumerate(cuts) if at <= k * schedule.step_seconds)
             for k in range(schedule.steps)]
    mean, _ = model.predict_matrix(mixes, configs)
    rates = schedule.step_rates()
    return float(sum(min(mean[k, index[k]], rates[k]) for k in range(schedule.steps))
                 * schedule.step_seconds)


def _static_best(model: PerformanceModel, schedule: Schedule,
                 candidates: Sequence[Config]) -> PolicyPlan:
    cap = _capacity(model, schedule, candidates)
    rates = schedule.segment_rates()
    if rates is not None:  # an open loop: nothing is served beyond what is offered
        cap = np.minimum(cap, rates[:, None])
    served = np.asarray(schedule.durations()) @ cap
    k = int(np.argmax(served))  # the first maximum: the default on a tie
    gain = served[k] / served[0] - 1.0 if served[0] > 0 else 0.0
    return PolicyPlan("static-best", start=dict(candidates[k]),
                      info={"predicted_gain_over_default": round(float(gain), 4)})


def _naive(model: PerformanceModel, schedule: Schedule,
           candidates: Sequence[Config]) -> PolicyPlan:
    cap = _capacity(model, schedule, candidates)
    current = 0
    changes: list[Change] = []
    for i, seg in enumerate(schedule.segments):
        best = int(np.argmax(cap[i]))
        if cap[i, best] > cap[i, current] * (1 + 1e-9):
            settings = _diff(candidates[current], candidates[best])
            changes.append(Change(
                at=seg.start, settings=settings,
                restart=needs_restart(candidates[current], settings, engine=model.engine),
                reason=f"segment {i + 1}: predicted {cap[i, best]:.0f} vs "
                f"{cap[i, current]:.0f} ops/s"))
            current = best
    return PolicyPlan("naive", start=dict(candidates[0]), changes=tuple(changes))


def schedule_forecast(
    schedule: Schedule, model: PerformanceModel, *, start: float,
    load: float | Sequence[float],
) -> Forecast:
    """The schedule as a perfect forecast (SOPHIA's oracle f_pred): one step per schedule
    step from ``start`` (epoch seconds), the offered ``load`` (ops/s: one value, or one per
    step), zero-width bands."""
    from planner.forecast.results import Forecast

    mixes = schedule.step_mixes()
    classes = model.classes
    mix = {c: np.array([float(m.get(c, 0.0)) for m in mixes]) for c in classes}
    total = sum(mix.values())
    mix = {c: v / total for c, v in mix.items()}
    ts = start + schedule.step_seconds * np.arange(schedule.steps, dtype=float)
    ld = np.broadcast_to(np.asarray(load, dtype=float), (schedule.steps,)).copy()
    return Forecast(
        engine=model.engine, timestamps=ts, load_mean=ld, load_lower=ld, load_upper=ld,
        mix_mean=mix, mix_lower=mix, mix_upper=mix, level=0.9,
        model="oracle (the payoff schedule)", step_seconds=schedule.step_seconds,
        scope=f"payoff:{schedule.shape}",
    )


def _kairos(model: PerformanceModel, schedule: Schedule, candidates: Sequence[Config], *,
            options: Mapping[str, Any], progress: Progress) -> PolicyPlan:
    """The plan :func:`planner.planning.pipeline.make_plan` makes on the schedule, as changes."""
    from planner.planning.pipeline import (
        DEFAULT_CHANGE_SECONDS,
        OptimiserOptions,
        PlanRequest,
        make_plan,
    )
    from planner.planning.risk import DEFAULT_CONFIDENCE

    start = datetime(2026, 1, 5, tzinfo=UTC)  # any start: the steps are kept as offsets
    saturated = schedule.peak_rate is None
    load: float | tuple[float, ...] = (
        SATURATION * float(_capacity(model, schedule, candidates).max()) if saturated
        else schedule.step_rates())
    fc = schedule_forecast(schedule, model, start=start.timestamp(), load=load)
    request = PlanRequest(
        forecast=fc, source=f"payoff schedule {schedule.shape} (perfect forecast)",
        engine=model.engine, cluster=str(options.get("cluster", "lab")),
        current=dict(candidates[0]), model=model,
        hosts=tuple(options.get("hosts") or PLAN_HOSTS[get_engine(model.engine).name]),
        rf=int(options.get("rf", 3)), cl=str(options.get("cl", "QUORUM")),
        restart_seconds=float(options.get("restart_seconds", 60.0)),
        restart_seconds_from=options.get("restart_seconds_from"),
        change_costs=options.get("change_costs"),
        compaction_seconds=float(options.get("compaction_seconds",
                                             DEFAULT_CHANGE_SECONDS["compaction"])),
        confidence=float(options.get("confidence", DEFAULT_CONFIDENCE)),
        served="work", horizon=schedule.steps,
        tables=tuple(options.get("tables", ())),
        optimiser=OptimiserOptions(method="dp", seed=int(options.get("seed", 0))),
    )
    result = make_plan(request, progress=progress)
    plan = result.plan
    changes = tuple(
        Change(at=(s.due - plan.horizon.start).total_seconds(), settings=dict(s.target),
               restart=bool(s.restart),
               reason=f"plan step {s.id}: expected net {s.expected.net_ops:.4g} ops")
        for s in plan.steps)
    cost = plan.provenance.get("cost_model", {})
    info = {"summary": result.summary(), "steps": len(plan.steps),
            "dropped_below_confidence": len(result.dropped),
            "restart_seconds": cost.get("restart_seconds"),
            "restart_seconds_source": cost.get("restart_seconds_source"),
            "compaction_seconds": cost.get("compaction_seconds"),
            "compaction_seconds_source": cost.get("compaction_seconds_source"),
            "confidence": plan.provenance.get("uncertainty", {}).get("confidence"),
            "offered_load_told": round(load, 1) if isinstance(load, float)
            else "the schedule's rates"}
    return PolicyPlan("kairos", start=dict(candidates[0]), changes=changes, info=info)


def decide(
    policy: str,
    *,
    model: PerformanceModel,
    schedule: Schedule,
    candidates: Sequence[Config],
    kairos: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> PolicyPlan:
    """What ``policy`` does over ``schedule``; ``candidates[0]`` is the default (the state
    every run starts from). ``kairos``: the planner's options (``cl``, ``hosts``, ``rf``,
    ``restart_seconds``, ``restart_seconds_from``, ``compaction_seconds``, ``change_costs``,
    ``confidence``, ``tables``, ``seed``, ``cluster``). The engine is the model's: the
    schedule must be over its classes (ValidationError naming ``--model`` otherwise)."""
    parse_policies([policy])
    if not candidates:
        raise ValidationError("candidates: at least the default configuration")
    if schedule.engine != model.engine:
        raise ValidationError(f"--model: {model.name} is a {model.engine} model; the schedule "
                              f"{schedule.shape} is a {schedule.engine} workload")
    say = progress or (lambda _msg: None)
    if policy == "default":
        plan = PolicyPlan("default", start=dict(candidates[0]))
    elif policy == "static-best":
        plan = _static_best(model, schedule, candidates)
    elif policy == "naive":
        plan = _naive(model, schedule, candidates)
    else:
        plan = _kairos(model, schedule, candidates, options=kairos or {}, progress=say)
    return PolicyPlan(plan.policy, plan.start, plan.changes,
                      predicted_ops(model, schedule, plan), plan.info)


# ================================================================ run order
def run_order(policies: Sequence[str], repetitions: int) -> list[tuple[int, str]]:
    """``(repetition, policy)`` in mirrored order: A B C D, D C B A, A B C D, ..."""
    if not isinstance(repetitions, int) or repetitions < 1:
        raise ValidationError(f"--repetitions: must be a positive integer, got {repetitions!r}")
    names = parse_policies(policies)
    out: list[tuple[int, str]] = []
    for r in range(repetitions):
        out += [(r + 1, p) for p in (names if r % 2 == 0 else tuple(reversed(names)))]
    return out


# =================================================================== summary
#: The figures of a run the summary keeps, in the table's order.
FIGURES = ("served_ops", "ops_per_s", "p99_ms", "failed_ops", "lost_acknowledged_writes",
           "changes_made", "restarts")


def _stat(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean and spread (half the range) of the values that are known."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "spread": None, "n": 0}
    return {"mean": sum(vals) / len(vals), "spread": (max(vals) - min(vals)) / 2.0,
            "n": len(vals)}


def summarise(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per shape and policy: every figure's mean and spread over the runs that completed,
    and how many runs failed. A failed run (``status`` other than ``ok``) is never
    averaged in."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        shape, policy = str(run["shape"]), str(run["policy"])
        entry = out.setdefault(shape, {}).setdefault(policy, {"ok": [], "failed": 0})
        if run.get("status") == "ok":
            entry["ok"].append(run)
        else:
            entry["failed"] += 1
    for shape, policies in out.items():
        for policy, entry in policies.items():
            ok = entry.pop("ok")
            entry["runs"] = len(ok)
            for name in FIGURES:
                entry[name] = _stat([r.get(name) for r in ok])
            policies[policy] = entry
        out[shape] = {p: policies[p] for p in POLICIES if p in policies}
    return out


def comparisons(summary: Mapping[str, Mapping[str, Mapping[str, Any]]],
                of: str = "kairos") -> dict[str, dict[str, dict[str, float]]]:
    """Per shape: ``of`` against every other policy on served operations, in %:
    ``{"diff": 100 (mean_of / mean_other - 1), "spread": 100 (spread_of + spread_other) /
    mean_other}`` (the runs' spread: the half-ranges of both, added)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for shape, policies in summary.items():
        mine = policies.get(of, {}).get("served_ops", {})
        if not mine or mine.get("mean") is None:
            continue
        for other, entry in policies.items():
            theirs = entry.get("served_ops", {})
            if other == of or theirs.get("mean") in (None, 0):
                continue
            out.setdefault(shape, {})[other] = {
                "diff": 100.0 * (mine["mean"] / theirs["mean"] - 1.0),
                "spread": 100.0 * (mine["spread"] + theirs["spread"]) / theirs["mean"],
            }
    return out


def _cell(stat: Mapping[str, Any], fmt: str) -> str:
    if stat.get("mean") is None:
        return "-"
    text = format(stat["mean"], fmt)
    return text + (f" ± {format(stat['spread'], fmt)}" if stat.get("n", 0) > 1 else "")


def summary_table(summary: Mapping[str, Mapping[str, Mapping[str, Any]]],
                  of: str = "kairos") -> str:
    """The table (Markdown) per shape and the comparison line(s) of ``of``."""
    lines: list[str] = []
    comp = comparisons(summary, of)
    for shape, policies in summary.items():
        lines += [f"shape {shape}:", "",
                  "| policy | runs | served ops | ops/s | p99 ms | failed ops | lost writes | "
                  "changes (restarts) |", "|---|---|---|---|---|---|---|---|"]
        for policy, e in policies.items():
            runs = f"{e['runs']}" + (f" (+{e['failed']} failed)" if e["failed"] else "")
            lines.append(
                f"| {policy} | {runs} | {_cell(e['served_ops'], ',.0f')} | "
                f"{_cell(e['ops_per_s'], ',.1f')} | {_cell(e['p99_ms'], '.1f')} | "
                f"{_cell(e['failed_ops'], '.0f')} | "
                f"{_cell(e['lost_acknowledged_writes'], '.0f')} | "
                f"{_cell(e['changes_made'], '.1f')} "
                f"({_cell(e['restarts'], '.1f')}) |")
        if shape in comp:
            parts = [f"{other} {c['diff']:+.1f} % (runs' spread ±{c['spread']:.1f} %)"
                     for other, c in comp[shape].items()]
            lines += ["", f"{of} vs " + " / ".join(comp[shape]) + ": " + "; ".join(parts)]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ============================================================== one run's record
def figures(load: Mapping[str, Any], step_seconds: float) -> dict[str, Any]:
    """A run's figures from its load result (``LoadResult.to_dict()``): served operations
    (successful ones), their rate, p50/p99, failures, lost writes, and the time series per
    step (successful ops/s and failures). A shaped Redis load's (``shape`` set) also: its
    read hit ratio, the keys the primaries evicted, and the missing acknowledged keys those
    evictions cover (not counted lost)."""
    ops, failed = int(load["ops"]), int(load["failed"])
    seconds = float(load["seconds"])
    latency = load.get("latency_ms") or {}
    series = []
    for s in load.get("steps") or ():
        done = float(s["ops_per_s"]) * step_seconds
        series.append({"t": int(s["step"]) * step_seconds,
                       "ops_per_s": round(max(done - int(s["failed"]), 0.0) / step_seconds, 1),
                       "failed": int(s["failed"]), "mix": dict(s.get("mix") or {})})
    return {
        "served_ops": ops - failed, "ops": ops, "failed_ops": failed, "seconds": seconds,
        "ops_per_s": round((ops - failed) / seconds, 1) if seconds > 0 else 0.0,
        "p50_ms": latency.get("p50"), "p99_ms": latency.get("p99"),
        "failures": dict(load.get("failures") or {}),
        "lost_acknowledged_writes": int(load.get("lost_acknowledged_writes", 0)),
        "verified": bool(load.get("verified", False)),
        "series": series,
        **({"hit_ratio": load.get("hit_ratio"), "evicted_keys": load.get("evicted_keys"),
            "missing_evicted": int(load.get("missing_evicted") or 0)}
           if load.get("shape") else {}),
    }


def readback_mismatches(expected: Mapping[str, Any], read: Mapping[str, Any]
                        ) -> dict[str, dict[str, Any]]:
    """The parameters whose value read back from the nodes is not the expected one
    (numbers compared to 1e-6 relative; a parameter not read is not compared)."""
    out: dict[str, dict[str, Any]] = {}
    for key, want in expected.items():
        if key not in read:
            continue
        got = read[key]
        same = (math.isclose(float(got), float(want), rel_tol=1e-6)
                if isinstance(got, int | float) and isinstance(want, int | float)
                and not isinstance(got, bool) else got == want)
        if not same:
            out[key] = {"expected": want, "read": got}
    return out


# ================================================================== the page
POLICY_COLOURS: dict[str, str] = {"default": "#8C8C8C", "static-best": "#0072B2",
                                  "naive": "#E69F00", "kairos": "#009E73"}


def series_chart(runs: Sequence[Mapping[str, Any]], shape: str, seconds: float) -> str:
    """Inline SVG: served ops/s per step of every completed run of ``shape`` (one line per
    run, coloured by policy, dashed from the second repetition on), the changes as ticks."""
    mine = [r for r in runs if r.get("shape") == shape and r.get("series")]
    top = max([float(p["ops_per_s"]) for r in mine for p in r["series"]] + [1.0])
    frame = charts.Frame(0.0, max(seconds, 1.0), 0.0, top * 1.1)
    n = sum(len(r["series"]) for r in mine)
    parts = [charts.svg_open(f"payoff-{shape}", frame, f"Served ops/s per run, shape {shape}", n),
             charts.axes(frame, time_axis=True, y_label="served ops/s (time: elapsed h:mm)")]
    for r in mine:
        colour = POLICY_COLOURS.get(str(r["policy"]), "#1D2733")
        dash = ' stroke-dasharray="5 3"' if int(r.get("repetition", 1)) > 1 else ""
        xs = [float(p["t"]) for p in r["series"]]
        ys = [float(p["ops_per_s"]) for p in r["series"]]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} '
                     f'data-run="{charts.esc(r.get("run_id", ""))}" '
                     f'points="{charts.points(frame, xs, ys)}"/>')
        for c in r.get("changes") or ():
            if c.get("started") is None:
                continue
            x = frame.x(min(float(c["started"]), seconds))
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.plot_bottom}" '
                         f'y2="{frame.plot_bottom - 10}" stroke="{colour}" stroke-width="2"/>')
    present = [p for p in POLICIES if any(r["policy"] == p for r in mine)]
    parts.append(charts.legend(frame, [("line", POLICY_COLOURS[p], p) for p in present]))
    parts.append("</svg>")
    return "".join(parts)


def render_html(results: Mapping[str, Any]) -> str:
    """A self-contained page: per shape the chart of the series and the table."""
    runs = list(results.get("runs") or ())
    summary = results.get("summary") or {}
    sections = []
    for shape, sched in (results.get("schedules") or {}).items():
        table = summary_table({shape: summary[shape]}) if shape in summary else "no run\n"
        sections.append(
            f'<section id="{charts.esc(shape)}"><h2>Shape {charts.esc(shape)}</h2>'
            f'<p class="lead">{charts.esc(sched.get("source", ""))}; a tick on the time axis is '
            "a change starting (executor).</p>"
            f"{series_chart(runs, shape, float(sched['seconds']))}"
            f"<pre>{charts.esc(table)}</pre></section>")
    title = "Kairos payoff experiment"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{charts.CSS}</style></head><body>"
            f"<header><h1>{title}</h1><p>{charts.esc(results.get('created_at', ''))} — "
            f"model {charts.esc((results.get('model') or {}).get('path', ''))}</p></header>"
            f"<main>{''.join(sections)}<footer><p>Made by bench/payoff.py "
            "(docs/payoff.md).</p></footer></main></body></html>\n")
