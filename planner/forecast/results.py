"""Forecast results: the :class:`Forecast` and :class:`BacktestResult` values and their file.

These are the values that cross module boundaries (the planner, the autopilot and the report
read forecast files), kept apart from the models that produce them, as statsmodels keeps
model and results apart. The file format (``kind: kairos-forecast``, schema 1) only grows:
fields read elsewhere are never removed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy import stats

from planner import inputs
from planner.errors import KairosError, ValidationError
from planner.workload.series import EngineClasses, WorkloadSeries, classes_for, document_head

FORECAST_KIND = "kairos-forecast"


class ForecastError(KairosError):
    """A model could not be fitted or cannot be used on this series."""


@dataclass(frozen=True, eq=False)
class BacktestResult:
    """Rolling-origin backtest of one model.

    Per-step arrays have length ``horizon`` (index 0 = one step ahead), averaged over folds.

    Parameters
    ----------
    model : str
    horizon : int
    origins : tuple of int
        Index of the first forecast point of each fold (training uses rows before it).
    load_mae, load_rmse, load_smape : numpy.ndarray
        Load errors per horizon step (sMAPE as a fraction in [0, 2]).
    mix_mae : numpy.ndarray
        Mean absolute error of the class fractions per step (averaged over classes).
    mix_tv : numpy.ndarray
        Total-variation distance between forecast and actual mix per step, in [0, 1].
    load_coverage : float
        Share of actual loads inside the forecast interval.
    mix_kl_radius : float
        The backtest's ``level`` quantile of KL(actual mix || forecast mix) over every origin
        and step (:func:`mix_kl`): the radius of the workload neighbourhood the forecast's
        mix errors stayed in (ENDURE's rho, learnt from the history). NaN for a load-only
        candidate.
    score : float
        Selection score (lower is better), see the module docstring.
    seconds : float
        Wall time of the backtest.
    error : str or None
        Why the model could not be backtested (then the metrics are NaN).
    """

    model: str
    horizon: int
    origins: tuple[int, ...]
    load_mae: np.ndarray
    load_rmse: np.ndarray
    load_smape: np.ndarray
    mix_mae: np.ndarray
    mix_tv: np.ndarray
    load_coverage: float
    score: float
    seconds: float = 0.0
    error: str | None = None
    mix_kl_radius: float = math.nan

    @property
    def ok(self) -> bool:
        return self.error is None

    def summary(self) -> dict[str, float]:
        """Means over the horizon."""
        return {
            "load_mae": float(np.mean(self.load_mae)),
            "load_rmse": float(np.sqrt(np.mean(self.load_rmse**2))),
            "load_smape": float(np.mean(self.load_smape)),
            "mix_mae": float(np.mean(self.mix_mae)),
            "mix_tv": float(np.mean(self.mix_tv)),
            "load_coverage": self.load_coverage,
            "score": self.score,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "horizon": self.horizon,
            "origins": list(self.origins),
            "load_mae": _tolist(self.load_mae),
            "load_rmse": _tolist(self.load_rmse),
            "load_smape": _tolist(self.load_smape),
            "mix_mae": _tolist(self.mix_mae),
            "mix_tv": _tolist(self.mix_tv),
            "load_coverage": _nan_to_none(self.load_coverage),
            "mix_kl_radius": _nan_to_none(self.mix_kl_radius),
            "score": _nan_to_none(self.score),
            "seconds": self.seconds,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BacktestResult:
        return cls(
            model=str(data["model"]),
            horizon=int(data["horizon"]),
            origins=tuple(int(o) for o in data["origins"]),
            load_mae=_fromlist(data["load_mae"]),
            load_rmse=_fromlist(data["load_rmse"]),
            load_smape=_fromlist(data["load_smape"]),
            mix_mae=_fromlist(data["mix_mae"]),
            mix_tv=_fromlist(data["mix_tv"]),
            load_coverage=_none_to_nan(data.get("load_coverage")),
            mix_kl_radius=_none_to_nan(data.get("mix_kl_radius")),
            score=_none_to_nan(data.get("score")),
            seconds=float(data.get("seconds", 0.0)),
            error=data.get("error"),
        )


#: Mass every class keeps in a forecast mix before a KL divergence is taken: a class the
#: forecast puts at 0 (a naive forecast after a quiet step) would make any actual use of it
#: infinitely far; smoothed, it is merely far. The worst case over the ball uses the same.
MIX_KL_SMOOTHING = 1e-3


def smoothed_mix(mix: np.ndarray) -> np.ndarray:
    """Class fractions (last axis) with :data:`MIX_KL_SMOOTHING` added, summing to 1."""
    m = np.clip(np.asarray(mix, dtype=float), 0.0, None) + MIX_KL_SMOOTHING
    return m / m.sum(axis=-1, keepdims=True)


def mix_kl(actual: np.ndarray, forecast: np.ndarray) -> np.ndarray:
    """KL(actual || forecast) over the classes (last axis), in nats: ENDURE's distance from
    the expected workload to the one that came (seeds/003)."""
    a = np.clip(np.asarray(actual, dtype=float), 0.0, None)
    a = a / np.maximum(a.sum(axis=-1, keepdims=True), 1e-12)
    ratio = np.where(a > 0, a / smoothed_mix(forecast), 1.0)
    return np.maximum(np.sum(a * np.log(ratio), axis=-1), 0.0)


def kl_radius(kl: np.ndarray, level: float) -> float:
    """The ``level`` quantile of backtest KL divergences (NaN without any)."""
    values = np.asarray(kl, dtype=float).ravel()
    values = values[np.isfinite(values)]
    return float(np.quantile(values, level)) if values.size else math.nan


def _tolist(a: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(a, dtype=float)]


def _fromlist(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _nan_to_none(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def _none_to_nan(v: Any) -> float:
    return math.nan if v is None else float(v)


@dataclass(frozen=True, eq=False)
class Forecast(EngineClasses):
    """A workload forecast with intervals.

    Parameters
    ----------
    engine : str
    timestamps : numpy.ndarray
        Epoch seconds of the forecast steps (the step after the trace's last, onwards).
    load_mean, load_lower, load_upper : numpy.ndarray
        Load point forecast and interval bounds (ops/s, >= 0).
    mix_mean, mix_lower, mix_upper : Mapping[str, numpy.ndarray]
        Per class: point forecast (rows sum to 1) and marginal interval bounds in [0, 1].
    level : float
        Nominal coverage of the intervals (e.g. 0.9).
    model : str
        The model that produced it.
    step_seconds : float
    backtest : tuple of BacktestResult or None
        The backtests that chose the model (``auto``) or validated it.
    season_length : int or None
    scope : str
    info : Mapping
        Notes (e.g. models skipped and why).
    """

    engine: str
    timestamps: np.ndarray
    load_mean: np.ndarray
    load_lower: np.ndarray
    load_upper: np.ndarray
    mix_mean: Mapping[str, np.ndarray]
    mix_lower: Mapping[str, np.ndarray]
    mix_upper: Mapping[str, np.ndarray]
    level: float
    model: str
    step_seconds: float
    backtest: tuple[BacktestResult, ...] | None = None
    season_length: int | None = None
    scope: str = "cluster"
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        classes = classes_for(self.engine)
        h = len(self.timestamps)
        arrays = {
            "timestamps": self.timestamps,
            "load_mean": self.load_mean,
            "load_lower": self.load_lower,
            "load_upper": self.load_upper,
        }
        for name, arr in arrays.items():
            a = np.asarray(arr, dtype=float)
            if a.shape != (h,) or not np.all(np.isfinite(a)):
                raise ValidationError(f"{name}: must be {h} finite numbers")
            a.setflags(write=False)
            object.__setattr__(self, name, a)
        if not np.all(self.load_lower <= self.load_mean + 1e-9) or not np.all(
            self.load_mean <= self.load_upper + 1e-9
        ):
            raise ValidationError("load: lower <= mean <= upper is violated")
        for name in ("mix_mean", "mix_lower", "mix_upper"):
            mix = getattr(self, name)
            if set(mix) != set(classes):
                raise ValidationError(f"{name}: classes must be {list(classes)}")
            fixed = {}
            for c in classes:
                a = np.asarray(mix[c], dtype=float)
                if a.shape != (h,) or not np.all(np.isfinite(a)):
                    raise ValidationError(f"{name}[{c}]: must be {h} finite numbers")
                if np.any(a < -1e-9) or np.any(a > 1 + 1e-9):
                    raise ValidationError(f"{name}[{c}]: fractions outside [0, 1]")
                a = np.clip(a, 0.0, 1.0)
                a.setflags(write=False)
                fixed[c] = a
            object.__setattr__(self, name, MappingProxyType(fixed))
        sums = np.sum([self.mix_mean[c] for c in classes], axis=0)
        if np.any(np.abs(sums - 1) > 1e-6):
            raise ValidationError("mix_mean: rows must sum to 1")
        if not 0 < self.level < 1:
            raise ValidationError(f"level: must be in (0, 1), got {self.level}")
        if self.backtest is not None:
            object.__setattr__(self, "backtest", tuple(self.backtest))

    @property
    def horizon(self) -> int:
        return int(self.timestamps.size)

    def mix_at(self, i: int) -> dict[str, float]:
        """The point-forecast mix of step ``i``."""
        return {c: float(self.mix_mean[c][i]) for c in self.classes}

    def mean_series(self) -> WorkloadSeries:
        """The point forecast as a WorkloadSeries."""
        if self.horizon < 2:
            raise ValidationError("mean_series: needs a horizon of at least 2 steps")
        return WorkloadSeries(
            engine=self.engine,
            timestamps=np.asarray(self.timestamps),
            load=np.asarray(self.load_mean),
            mix=dict(self.mix_mean),
            step_seconds=self.step_seconds,
            scope=self.scope,
        )

    def sample_paths(
        self, n: int, rng: np.random.Generator, *, rho: float = 0.8
    ) -> list[WorkloadSeries]:
        """Draw ``n`` plausible future workloads consistent with the intervals.

        Each path draws, per series (load, and each class fraction), a standard normal AR(1)
        sequence over the horizon with lag-one correlation ``rho`` (errors persist from one
        step to the next) and maps it through the step's interval: ``z`` at the interval's
        nominal quantile lands on the bound, asymmetric intervals are followed on each side.
        Fractions are clipped to [0, 1] and renormalised. An approximation of the joint
        forecast distribution, meant for robust optimisation over scenarios.
        """
        if n < 1:
            raise ValidationError(f"n: must be >= 1, got {n}")
        if not -1 < rho < 1:
            raise ValidationError(f"rho: must be in (-1, 1), got {rho}")
        if self.horizon < 2:
            raise ValidationError("sample_paths: needs a horizon of at least 2 steps")
        zq = float(stats.norm.ppf(0.5 + self.level / 2))
        classes = self.classes

        def ar1(k: int) -> np.ndarray:
            e = rng.standard_normal((n, k, self.horizon))
            z = np.empty_like(e)
            z[..., 0] = e[..., 0]
            s = math.sqrt(1 - rho**2)
            for t in range(1, self.horizon):
                z[..., t] = rho * z[..., t - 1] + s * e[..., t]
            return z

        def through(z: np.ndarray, mean: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            up = mean + z / zq * (hi - mean)
            down = mean + z / zq * (mean - lo)
            return np.where(z >= 0, up, down)

        zl = ar1(1)[:, 0, :]
        loads = np.maximum(through(zl, self.load_mean, self.load_lower, self.load_upper), 0.0)
        zm = ar1(len(classes))
        fr = np.stack(
            [
                through(zm[:, j, :], self.mix_mean[c], self.mix_lower[c], self.mix_upper[c])
                for j, c in enumerate(classes)
            ],
            axis=1,
        )
        fr = np.clip(fr, 0.0, 1.0)
        total = fr.sum(axis=1, keepdims=True)
        fallback = np.stack([self.mix_mean[c] for c in classes])[None, :, :]
        fr = np.where(total > 0, fr / np.where(total > 0, total, 1.0), fallback)
        return [
            WorkloadSeries(
                engine=self.engine,
                timestamps=np.asarray(self.timestamps),
                load=loads[i],
                mix={c: fr[i, j] for j, c in enumerate(classes)},
                step_seconds=self.step_seconds,
                scope=self.scope,
            )
            for i in range(n)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            **document_head(FORECAST_KIND, self.engine),
            "scope": self.scope,
            "model": self.model,
            "level": self.level,
            "step_seconds": self.step_seconds,
            "season_length": self.season_length,
            "timestamps": self.timestamps.tolist(),
            "load": {
                "mean": self.load_mean.tolist(),
                "lower": self.load_lower.tolist(),
                "upper": self.load_upper.tolist(),
            },
            "mix": {
                c: {
                    "mean": self.mix_mean[c].tolist(),
                    "lower": self.mix_lower[c].tolist(),
                    "upper": self.mix_upper[c].tolist(),
                }
                for c in self.classes
            },
            "backtest": None if self.backtest is None else [b.to_dict() for b in self.backtest],
            "info": dict(self.info),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Forecast:
        """Inverse of :meth:`to_dict`; every field is checked (closed schema)."""
        if not isinstance(data, Mapping) or data.get("kind") != FORECAST_KIND:
            raise ValidationError(f"kind: not a {FORECAST_KIND} document")
        if data.get("schema_version") != 1:
            raise ValidationError(f"schema_version: unsupported {data.get('schema_version')!r}")
        inputs.closed_keys(data, "", allowed=_FORECAST_KEYS, required=_FORECAST_REQUIRED)
        engine = inputs.string(data["engine"], "engine")
        load = inputs.mapping(data["load"], "load")
        inputs.closed_keys(load, "load", allowed=_BANDS, required=_BANDS)
        mix = inputs.mapping(data["mix"], "mix")
        bands: dict[str, dict[str, np.ndarray]] = {b: {} for b in _BANDS}
        for c, v in mix.items():
            inputs.closed_keys(inputs.mapping(v, f"mix.{c}"), f"mix.{c}", allowed=_BANDS,
                               required=_BANDS)
            for b in _BANDS:
                bands[b][str(c)] = inputs.number_array(v[b], f"mix.{c}.{b}")
        bt = data.get("backtest")
        season = data.get("season_length")
        return cls(
            engine=engine,
            timestamps=inputs.number_array(data["timestamps"], "timestamps"),
            load_mean=inputs.number_array(load["mean"], "load.mean"),
            load_lower=inputs.number_array(load["lower"], "load.lower"),
            load_upper=inputs.number_array(load["upper"], "load.upper"),
            mix_mean=bands["mean"],
            mix_lower=bands["lower"],
            mix_upper=bands["upper"],
            level=inputs.number(data["level"], "level"),
            model=inputs.string(data["model"], "model"),
            step_seconds=inputs.number(data["step_seconds"], "step_seconds", lo=0.0),
            backtest=None if bt is None else tuple(
                _backtest_from_dict(b, f"backtest[{i}]")
                for i, b in enumerate(inputs.sequence(bt, "backtest"))
            ),
            season_length=None if season is None else inputs.integer(
                season, "season_length", lo=1
            ),
            scope=inputs.string(data.get("scope", "cluster"), "scope"),
            info=dict(inputs.mapping(data.get("info", {}), "info")),
        )


_FORECAST_REQUIRED = ("kind", "schema_version", "engine", "model", "level", "step_seconds",
                      "timestamps", "load", "mix")
_FORECAST_KEYS = (*_FORECAST_REQUIRED, "scope", "season_length", "backtest", "info")
_BANDS = ("mean", "lower", "upper")


def _backtest_from_dict(data: Any, field: str) -> BacktestResult:
    """A backtest entry of a forecast file; malformed entries name their index."""
    try:
        return BacktestResult.from_dict(inputs.mapping(data, field))
    except ValidationError as exc:
        raise ValidationError(f"{field}: {exc}") from None
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ValidationError(f"{field}: malformed backtest entry ({exc!r})") from None


def check_forecast_units(fc: Forecast) -> Forecast:
    """Refuse millisecond timestamps and absurd loads (see :mod:`planner.inputs`)."""
    inputs.check_epoch_seconds(fc.timestamps, "timestamps")
    for name in ("load_mean", "load_lower", "load_upper"):
        inputs.check_loads(getattr(fc, name), name.replace("_", "."))
    if fc.step_seconds <= 0 or fc.step_seconds > inputs.MAX_STEP_SECONDS:
        raise ValidationError(
            f"step_seconds: {fc.step_seconds:g} is out of range: must be in "
            f"(0, {inputs.MAX_STEP_SECONDS:g}]"
        )
    return fc


def save_forecast(fc: Forecast, path: str | Path) -> None:
    """Write a forecast as JSON."""
    Path(path).write_text(json.dumps(fc.to_dict(), indent=1) + "\n")


def load_forecast(path: str | Path) -> Forecast:
    """Read a forecast written by :func:`save_forecast` (through :mod:`planner.inputs`)."""
    data = inputs.load_json(path, kind=inputs.FORECAST)
    with inputs.in_file(path):
        return check_forecast_units(Forecast.from_dict(data))
