"""Workload series: time-stamped load and operation mix, validated where they enter.

A :class:`WorkloadSeries` holds, for one engine and one scope (the whole cluster, one node or
one table), strictly increasing timestamps, the load in operations per second and the
operation mix as fractions per class (each row sums to 1).

Operation classes
-----------------
Cassandra: ``read``, ``update``, ``insert``, ``scan`` (the YCSB/SOPHIA classes).
Redis: ``read`` (GET, MGET, HGET, HGETALL, EXISTS, ZRANGE, LRANGE, SMEMBERS ... : commands that
only read data), ``write`` (SET, HSET, DEL, INCR, LPUSH, ZADD, EXPIRE ... : commands that modify
data) and ``other`` (everything else: SCAN/KEYS, admin, pub/sub, scripting, transactions).

File formats
------------
CSV: a header with ``timestamp`` (epoch seconds or ISO 8601; naive times are read as UTC),
``load``, one column per class, and optionally ``engine`` (one value) and ``scope`` (several
scopes may share a file; pick one with ``scope=`` or use :func:`load_traces`). The engine is
inferred from the class columns when there is no ``engine`` column.

JSON: ``{"kind": "kairos-trace", "schema_version": 1, "engine": ..., "scope": ...,
"step_seconds": ... | null, "timestamps": [...], "load": [...], "mix": {class: [...]}}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from planner import inputs
from planner.engines import REGISTRY, get_engine
from planner.errors import ValidationError

CASSANDRA_CLASSES: tuple[str, ...] = get_engine("cassandra").classes
REDIS_CLASSES: tuple[str, ...] = get_engine("redis").classes
_CLASSES: dict[str, tuple[str, ...]] = {e.name: e.classes for e in REGISTRY.values()}

#: How far a mix row may sum away from 1 before it is an error (rows are then renormalised).
MIX_SUM_TOLERANCE = 1e-3
#: Relative tolerance on the spacing of a regular series.
STEP_TOLERANCE = 0.01
TRACE_KIND = "kairos-trace"


def classes_for(engine: str) -> tuple[str, ...]:
    """The operation classes of ``engine`` (``"cassandra"`` or ``"redis"``).

    Raises
    ------
    ValidationError
        An unknown engine (:func:`planner.engines.get_engine`).
    """
    return get_engine(engine).classes


def document_head(kind: str, engine: str) -> dict[str, Any]:
    """The fields every engine document (trace, forecast, performance model) opens with."""
    return {"kind": kind, "schema_version": 1, "engine": engine}


class EngineClasses:
    """Mixin of the records of one engine: ``classes``, that engine's operation classes."""

    engine: str

    @property
    def classes(self) -> tuple[str, ...]:
        """The engine's operation classes, in order."""
        return classes_for(self.engine)


def infer_engine(columns: set[str] | list[str] | tuple[str, ...]) -> str:
    """The engine whose classes are exactly the class-like columns given."""
    cols = set(columns)
    matches = [e for e, classes in _CLASSES.items() if set(classes) <= cols]
    exact = [e for e in matches if not (set().union(*_CLASSES.values()) - set(_CLASSES[e])) & cols]
    if len(exact) == 1:
        return exact[0]
    if len(matches) == 1:
        return matches[0]
    raise ValidationError(
        "engine: cannot tell the engine from the columns "
        f"{sorted(cols)}; expected {list(CASSANDRA_CLASSES)} (cassandra) or "
        f"{list(REDIS_CLASSES)} (redis), or add an 'engine' column"
    )


@dataclass(frozen=True, eq=False)
class WorkloadSeries:
    """Load and operation mix over time for one engine and scope.

    Parameters
    ----------
    engine : str
        ``"cassandra"`` or ``"redis"``.
    timestamps : numpy.ndarray
        Epoch seconds (float), strictly increasing.
    load : numpy.ndarray
        Operations per second, finite and non-negative.
    mix : Mapping[str, numpy.ndarray]
        Fraction of operations per class (exactly the engine's classes); every fraction in
        [0, 1] and every row summing to 1 within ``MIX_SUM_TOLERANCE`` (rows are renormalised).
    step_seconds : float or None
        The regular spacing of the timestamps, or ``None`` for an irregular series (which
        must be resampled before forecasting). When given, every gap must equal it.
    scope : str
        ``"cluster"``, ``"node:<host>"``, ``"table:<keyspace>.<table>"`` or other free text.

    Raises
    ------
    ValidationError
        Naming the field, the row index and the reason for the first problem found.
    """

    engine: str
    timestamps: np.ndarray
    load: np.ndarray
    mix: Mapping[str, np.ndarray]
    step_seconds: float | None = None
    scope: str = "cluster"
    _classes: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        classes = classes_for(self.engine)
        object.__setattr__(self, "_classes", classes)
        ts = _as_vector(self.timestamps, "timestamps")
        n = ts.size
        if n < 2:
            raise ValidationError(f"timestamps: a series needs at least 2 samples, got {n}")
        _check_finite(ts, "timestamps")
        diffs = np.diff(ts)
        bad = np.flatnonzero(diffs <= 0)
        if bad.size:
            i = int(bad[0]) + 1
            what = "repeats" if diffs[bad[0]] == 0 else "goes backwards"
            raise ValidationError(
                f"timestamps: row {i}: time {what} ({ts[i]:.3f} after {ts[i - 1]:.3f})"
            )
        load = _as_vector(self.load, "load")
        if load.size != n:
            raise ValidationError(f"load: has {load.size} values for {n} timestamps")
        _check_finite(load, "load")
        neg = np.flatnonzero(load < 0)
        if neg.size:
            raise ValidationError(f"load: row {int(neg[0])}: negative load {load[neg[0]]:g}")
        if not isinstance(self.mix, Mapping):
            raise ValidationError("mix: must be a mapping of class -> fractions")
        unknown = sorted(set(self.mix) - set(classes))
        missing = [c for c in classes if c not in self.mix]
        if unknown or missing:
            raise ValidationError(
                f"mix: {self.engine} classes are {list(classes)}"
                + (f"; unknown {unknown}" if unknown else "")
                + (f"; missing {missing}" if missing else "")
            )
        matrix = np.empty((n, len(classes)))
        for j, cls in enumerate(classes):
            col = _as_vector(self.mix[cls], f"mix[{cls}]")
            if col.size != n:
                raise ValidationError(f"mix[{cls}]: has {col.size} values for {n} timestamps")
            _check_finite(col, f"mix[{cls}]")
            out = np.flatnonzero((col < -1e-12) | (col > 1 + 1e-12))
            if out.size:
                raise ValidationError(
                    f"mix[{cls}]: row {int(out[0])}: fraction {col[out[0]]:g} is outside [0, 1]"
                )
            matrix[:, j] = np.clip(col, 0.0, 1.0)
        sums = matrix.sum(axis=1)
        off = np.flatnonzero(np.abs(sums - 1.0) > MIX_SUM_TOLERANCE)
        if off.size:
            i = int(off[0])
            raise ValidationError(
                f"mix: row {i}: fractions sum to {sums[i]:.6g}, not 1 "
                f"(tolerance {MIX_SUM_TOLERANCE:g})"
            )
        matrix /= sums[:, None]
        if self.step_seconds is not None:
            step = float(self.step_seconds)
            if not math.isfinite(step) or step <= 0:
                raise ValidationError(f"step_seconds: must be positive, got {self.step_seconds!r}")
            gaps = np.flatnonzero(np.abs(diffs - step) > STEP_TOLERANCE * step)
            if gaps.size:
                i = int(gaps[0]) + 1
                kind = "gap" if diffs[gaps[0]] > step else "irregular spacing"
                raise ValidationError(
                    f"timestamps: row {i}: {kind} of {diffs[gaps[0]]:g}s where the step is "
                    f"{step:g}s (resample, or fill the gap)"
                )
            object.__setattr__(self, "step_seconds", step)
        if not isinstance(self.scope, str) or not self.scope:
            raise ValidationError("scope: must be a non-empty string")
        for arr in (ts, load, matrix):
            arr.setflags(write=False)
        object.__setattr__(self, "timestamps", ts)
        object.__setattr__(self, "load", load)
        object.__setattr__(
            self,
            "mix",
            MappingProxyType({cls: matrix[:, j] for j, cls in enumerate(classes)}),
        )

    # ----------------------------------------------------------------- views
    @property
    def classes(self) -> tuple[str, ...]:
        """The engine's operation classes, in order."""
        return self._classes

    def __len__(self) -> int:
        return int(self.timestamps.size)

    def mix_matrix(self) -> np.ndarray:
        """The mix as an ``(n, n_classes)`` array, columns in :attr:`classes` order."""
        return np.column_stack([self.mix[c] for c in self.classes])

    def mix_at(self, i: int) -> dict[str, float]:
        """The mix of row ``i`` as ``{class: fraction}``."""
        return {c: float(self.mix[c][i]) for c in self.classes}

    def slice(self, start: int | None = None, stop: int | None = None) -> WorkloadSeries:
        """Rows ``start:stop`` as a new series (same engine, scope and step)."""
        sl = slice(start, stop)
        return WorkloadSeries(
            engine=self.engine,
            timestamps=self.timestamps[sl].copy(),
            load=self.load[sl].copy(),
            mix={c: self.mix[c][sl].copy() for c in self.classes},
            step_seconds=self.step_seconds,
            scope=self.scope,
        )

    def to_frame(self) -> pd.DataFrame:
        """A DataFrame with ``timestamp``, ``load`` and one column per class."""
        data: dict[str, Any] = {"timestamp": self.timestamps, "load": self.load}
        data.update({c: self.mix[c] for c in self.classes})
        return pd.DataFrame(data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready representation (see the module docstring)."""
        return {
            **document_head(TRACE_KIND, self.engine),
            "scope": self.scope,
            "step_seconds": self.step_seconds,
            "timestamps": self.timestamps.tolist(),
            "load": self.load.tolist(),
            "mix": {c: self.mix[c].tolist() for c in self.classes},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkloadSeries:
        """Inverse of :meth:`to_dict`; raises ValidationError on a malformed document."""
        if not isinstance(data, Mapping):
            raise ValidationError("trace: a JSON trace must be an object")
        if data.get("kind", TRACE_KIND) != TRACE_KIND:
            raise ValidationError(f"kind: expected {TRACE_KIND!r}, got {data.get('kind')!r}")
        if data.get("schema_version", 1) != 1:
            raise ValidationError(
                f"schema_version: unsupported version {data.get('schema_version')!r}"
            )
        for key in ("engine", "timestamps", "load", "mix"):
            if key not in data:
                raise ValidationError(f"{key}: missing from the trace")
        inputs.closed_keys(data, "", allowed=_TRACE_KEYS)
        mix = data["mix"]
        if not isinstance(mix, Mapping):
            raise ValidationError("mix: must be an object of class -> list of fractions")
        step = data.get("step_seconds")
        return cls(
            engine=inputs.string(data["engine"], "engine"),
            timestamps=_to_array(data["timestamps"], "timestamps"),
            load=_to_array(data["load"], "load"),
            mix={str(k): _to_array(v, f"mix[{k}]") for k, v in mix.items()},
            step_seconds=None if step is None else inputs.number(step, "step_seconds"),
            scope=inputs.string(data.get("scope", "cluster"), "scope"),
        )


_TRACE_KEYS = ("kind", "schema_version", "engine", "scope", "step_seconds", "timestamps",
               "load", "mix")


def _to_array(values: Any, name: str) -> np.ndarray:
    if not isinstance(values, list | tuple | np.ndarray):
        raise ValidationError(f"{name}: must be a list of numbers")
    out = np.empty(len(values))
    for i, v in enumerate(values):
        if v is None:
            out[i] = np.nan  # missing: the series' checks report it by row
        elif isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            # a string float() would accept ("1.5") is still not a JSON number
            raise ValidationError(f"{name}: row {i}: {v!r} is not a number")
        else:
            try:
                out[i] = float(v)
            except OverflowError:
                raise ValidationError(f"{name}: row {i}: {v} is too large") from None
    return out


def _as_vector(values: Any, name: str) -> np.ndarray:
    try:
        arr = np.array(values, dtype=float)
    except (TypeError, ValueError):
        raise ValidationError(f"{name}: must be numbers") from None
    if arr.ndim != 1:
        raise ValidationError(f"{name}: must be one-dimensional, got shape {arr.shape}")
    return arr


def _check_finite(arr: np.ndarray, name: str) -> None:
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        i = int(bad[0])
        raise ValidationError(f"{name}: row {i}: value is {arr[i]} (missing or not finite)")


def infer_step(timestamps: np.ndarray) -> float | None:
    """The common spacing of ``timestamps``, or ``None`` if they are not regular."""
    diffs = np.diff(np.asarray(timestamps, dtype=float))
    if diffs.size == 0:
        return None
    step = float(np.median(diffs))
    if step > 0 and np.all(np.abs(diffs - step) <= STEP_TOLERANCE * step):
        return step
    return None


# -------------------------------------------------------------------- loading
def _parse_timestamps(col: pd.Series) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy(dtype=float)
    numeric = pd.to_numeric(col, errors="coerce")
    if numeric.notna().all():
        return numeric.to_numpy(dtype=float)
    out = np.empty(len(col))
    for i, raw in enumerate(col):
        if isinstance(raw, float) and math.isnan(raw):
            raise ValidationError(f"timestamp: row {i}: missing")
        try:
            out[i] = float(raw)
            continue
        except (TypeError, ValueError):
            pass
        try:
            ts = pd.Timestamp(str(raw))
        except (ValueError, TypeError):
            raise ValidationError(
                f"timestamp: row {i}: {raw!r} is neither epoch seconds nor ISO 8601"
            ) from None
        if ts.tzinfo is None:
            ts = ts.tz_localize("UTC")
        out[i] = ts.timestamp()
    return out


def _series_from_frame(df: pd.DataFrame, *, source: str, scope: str) -> WorkloadSeries:
    engines = df["engine"].dropna().unique().tolist() if "engine" in df.columns else []
    if len(engines) > 1:
        raise ValidationError(f"engine: {source} mixes engines {engines}")
    engine = str(engines[0]) if engines else infer_engine(list(df.columns))
    classes = classes_for(engine)
    for col in ("timestamp", "load", *classes):
        if col not in df.columns:
            raise ValidationError(f"{col}: column missing from {source}")
    for col in ("load", *classes):
        numeric = pd.to_numeric(df[col], errors="coerce")
        bad = np.flatnonzero(numeric.isna().to_numpy() & df[col].notna().to_numpy())
        if bad.size:
            i = int(bad[0])
            raise ValidationError(f"{col}: row {i}: {df[col].iloc[i]!r} is not a number")
        df[col] = numeric
    ts = _parse_timestamps(df["timestamp"])
    return WorkloadSeries(
        engine=engine,
        timestamps=ts,
        load=df["load"].to_numpy(dtype=float),
        mix={c: df[c].to_numpy(dtype=float) for c in classes},
        step_seconds=infer_step(ts) if ts.size >= 2 else None,
        scope=scope,
    )


def _read_csv(path: Path) -> pd.DataFrame:
    df = inputs.load_csv(path, kind=inputs.TRACE)
    df.columns = [str(c).strip().lower() for c in df.columns]
    return df


def _check_units(series: WorkloadSeries) -> WorkloadSeries:
    """Refuse what the series itself cannot know is wrong: units (ms, absurd loads)."""
    inputs.check_epoch_seconds(series.timestamps, "timestamp")
    inputs.check_loads(series.load, "load")
    return series


def _json_traces(path: Path) -> dict[str, WorkloadSeries]:
    data = inputs.load_json(path, kind=inputs.TRACE)
    docs = data if isinstance(data, list) else [data]
    if not docs:
        raise ValidationError("trace: an empty list holds no series")
    out: dict[str, WorkloadSeries] = {}
    for i, doc in enumerate(docs):
        where = f"[{i}]: " if isinstance(data, list) else ""
        try:
            series = _check_units(WorkloadSeries.from_dict(doc))
        except ValidationError as exc:
            raise ValidationError(f"{where}{exc}") from None
        if series.scope in out:
            raise ValidationError(f"scope: {path} holds scope {series.scope!r} twice")
        out[series.scope] = series
    return out


def load_traces(path: str | Path) -> dict[str, WorkloadSeries]:
    """Every scope in a CSV or JSON trace, as ``{scope: WorkloadSeries}``.

    The file is read through :mod:`planner.inputs` (size, UTF-8, parse); timestamps must
    be epoch seconds or ISO 8601 (millisecond epochs are refused, see
    :func:`planner.inputs.check_epoch_seconds`) and loads at most
    :data:`planner.inputs.MAX_LOAD_OPS`. Every message names the file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv"):
        raise ValidationError(f"trace: {path}: unknown format {suffix!r} (use .csv or .json)")
    if suffix == ".json":
        with inputs.in_file(path):
            return _json_traces(path)
    df = _read_csv(path)
    with inputs.in_file(path):
        if df.empty:
            raise ValidationError("trace: no rows")
        if "scope" not in df.columns:
            return {"cluster": _check_units(_series_from_frame(df, source=str(path),
                                                               scope="cluster"))}
        if df["scope"].isna().any():
            i = int(np.flatnonzero(df["scope"].isna().to_numpy())[0])
            raise ValidationError(f"scope: row {i}: missing")
        return {
            str(scope): _check_units(_series_from_frame(
                group.reset_index(drop=True), source=f"{path} (scope {scope})",
                scope=str(scope),
            ))
            for scope, group in df.groupby("scope", sort=False)
        }


def load_trace(path: str | Path, *, scope: str | None = None) -> WorkloadSeries:
    """Load one workload series from a ``.csv`` or ``.json`` file.

    Parameters
    ----------
    path : str or Path
        The trace file; the format follows the suffix.
    scope : str, optional
        Which scope to return when the file holds several.

    Raises
    ------
    ValidationError
        If the file is missing or malformed, or any row breaks a rule of
        :class:`WorkloadSeries` (the message names the column, row and reason).
    """
    traces = load_traces(path)
    if scope is not None:
        if scope not in traces:
            raise ValidationError(f"scope: {scope!r} not in {path}; it has {sorted(traces)}")
        return traces[scope]
    if len(traces) > 1:
        raise ValidationError(f"scope: {path} holds scopes {sorted(traces)}; choose one")
    return next(iter(traces.values()))


def save_trace(series: WorkloadSeries, path: str | Path) -> None:
    """Write ``series`` to ``path`` as CSV or JSON (by suffix)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        path.write_text(json.dumps(series.to_dict(), indent=1) + "\n")
    elif suffix == ".csv":
        df = series.to_frame()
        df.insert(0, "engine", series.engine)
        if series.scope != "cluster":
            df.insert(1, "scope", series.scope)
        df.to_csv(path, index=False, float_format="%.10g")
    else:
        raise ValidationError(f"trace: {path}: unknown format {suffix!r} (use .csv or .json)")


# ------------------------------------------------------------------ resampling
def resample(series: WorkloadSeries, step_seconds: float, *, max_fill: int = 0) -> WorkloadSeries:
    """Aggregate ``series`` onto a regular grid of ``step_seconds``.

    Each output point covers ``[t0 + k*step, t0 + (k+1)*step)`` and is stamped with its start:
    the load is the mean of the samples in the bin and the mix their load-weighted mean (the
    plain mean when the bin's load is zero).

    Parameters
    ----------
    series : WorkloadSeries
    step_seconds : float
        The new step; must be positive.
    max_fill : int, default 0
        Runs of up to this many empty bins are filled by linear interpolation; a longer run
        is an error. The default fills nothing: a gap in the trace is reported, not invented.

    Raises
    ------
    ValidationError
        For a non-positive step, a gap longer than ``max_fill`` bins, or fewer than 2 bins.
    """
    step = float(step_seconds)
    if not math.isfinite(step) or step <= 0:
        raise ValidationError(f"step_seconds: must be positive, got {step_seconds!r}")
    if max_fill < 0:
        raise ValidationError(f"max_fill: must be >= 0, got {max_fill}")
    t0 = float(series.timestamps[0])
    bins = np.floor((series.timestamps - t0) / step + 1e-9).astype(np.int64)
    n_bins = int(bins[-1]) + 1
    if n_bins < 2:
        raise ValidationError(
            f"step_seconds: {step:g}s leaves fewer than 2 points for a trace of "
            f"{series.timestamps[-1] - t0:g}s"
        )
    counts = np.bincount(bins, minlength=n_bins).astype(float)
    load_sum = np.bincount(bins, weights=series.load, minlength=n_bins)
    mixm = series.mix_matrix()
    weighted = np.column_stack(
        [
            np.bincount(bins, weights=series.load * mixm[:, j], minlength=n_bins)
            for j in range(mixm.shape[1])
        ]
    )
    plain = np.column_stack(
        [np.bincount(bins, weights=mixm[:, j], minlength=n_bins) for j in range(mixm.shape[1])]
    )
    filled = counts > 0
    load = np.full(n_bins, np.nan)
    load[filled] = load_sum[filled] / counts[filled]
    mix = np.full((n_bins, mixm.shape[1]), np.nan)
    pos = filled & (load_sum > 0)
    mix[pos] = weighted[pos] / load_sum[pos, None]
    zero = filled & ~(load_sum > 0)
    mix[zero] = plain[zero] / counts[zero, None]
    empty = np.flatnonzero(~filled)
    if empty.size:
        runs = np.split(empty, np.flatnonzero(np.diff(empty) > 1) + 1)
        longest = max(runs, key=len)
        if len(longest) > max_fill:
            start = t0 + longest[0] * step
            raise ValidationError(
                f"timestamps: gap of {len(longest)} empty {step:g}s step(s) starting at "
                f"{start:.0f} (bin {int(longest[0])}); at most {max_fill} may be filled "
                "(raise max_fill to interpolate)"
            )
        idx = np.arange(n_bins)
        load[~filled] = np.interp(idx[~filled], idx[filled], load[filled])
        for j in range(mix.shape[1]):
            mix[~filled, j] = np.interp(idx[~filled], idx[filled], mix[filled, j])
    mix /= mix.sum(axis=1, keepdims=True)
    return WorkloadSeries(
        engine=series.engine,
        timestamps=t0 + step * np.arange(n_bins),
        load=load,
        mix={c: mix[:, j] for j, c in enumerate(series.classes)},
        step_seconds=step,
        scope=series.scope,
    )
