"""Forecast the workload (load and operation mix) with prediction intervals.

Models
------
``naive``
    The last value; random-walk intervals (sigma * sqrt(h)).
``seasonal_naive``
    The value one season earlier; intervals from the seasonal differences.
``ets``
    Holt-Winters exponential smoothing (additive seasonality when a season is known, simple
    exponential smoothing otherwise), statsmodels ``ExponentialSmoothing``; intervals from
    simulated future paths of the fitted model.
``stl``
    STL decomposition + ARIMA(1,0,0) with constant on the seasonally adjusted series
    (statsmodels ``STLForecast``); analytic ARIMA intervals. Needs a season.
``sarimax``
    Dynamic harmonic regression: SARIMAX(1,0,0) with a constant and Fourier terms of the
    season as regressors. Slower; not tried by ``auto``.
``markov1``, ``markov2``
    SOPHIA's Markov chain over quantised mix states (10% steps per class), first or second
    order (the second order backs off to the first for rare state pairs); the load of a
    future step is drawn from the loads observed in its state. Forecasts are Monte Carlo
    over simulated paths (seeded).

Load is forecast as is (clipped at 0). The mix is forecast in additive log-ratio space
(zero fractions are replaced by a small epsilon first) and mapped back, so every forecast
mix is a valid composition; intervals per class come from sampling the log-ratio forecast
distribution. The Markov models forecast mix states directly.

Model selection (``model="auto"``) runs a rolling-origin backtest of every applicable model
and keeps the lowest *score* = 0.5 * mean load sMAPE / 2 + 0.5 * mean mix total-variation
distance (both in [0, 1]). See docs/forecasting.md.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy import stats

from planner import inputs
from planner.errors import KairosError, ValidationError
from planner.workload import WorkloadSeries, classes_for

MODELS: tuple[str, ...] = (
    "naive",
    "seasonal_naive",
    "ets",
    "stl",
    "sarimax",
    "markov1",
    "markov2",
)
AUTO_MODELS: tuple[str, ...] = ("naive", "seasonal_naive", "ets", "stl", "markov1", "markov2")
SEASONAL_MODELS: frozenset[str] = frozenset({"seasonal_naive", "stl", "sarimax"})
FORECAST_KIND = "kairos-forecast"
MIX_EPS = 1e-3
MARKOV_QUANTUM = 10  # states are multiples of 1/10 per class, as in SOPHIA
MARKOV_PATHS = 400
ETS_PATHS = 300
Progress = Callable[[str], None]


class ForecastError(KairosError):
    """A model could not be fitted or cannot be used on this series."""


# =================================================================== results
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
            score=_none_to_nan(data.get("score")),
            seconds=float(data.get("seconds", 0.0)),
            error=data.get("error"),
        )


def _tolist(a: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(a, dtype=float)]


def _fromlist(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _nan_to_none(v: float) -> float | None:
    return None if not math.isfinite(v) else float(v)


def _none_to_nan(v: Any) -> float:
    return math.nan if v is None else float(v)


@dataclass(frozen=True, eq=False)
class Forecast:
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
    def classes(self) -> tuple[str, ...]:
        return classes_for(self.engine)

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
            "kind": FORECAST_KIND,
            "schema_version": 1,
            "engine": self.engine,
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


# ========================================================== transformations
def _alr_ref(mix: np.ndarray) -> int:
    return int(np.argmax(mix.mean(axis=0)))


def _to_alr(mix: np.ndarray, ref: int) -> np.ndarray:
    c = mix.shape[1]
    x = (mix + MIX_EPS) / (1 + c * MIX_EPS)
    logs = np.log(x)
    return np.delete(logs - logs[:, [ref]], ref, axis=1)


def _from_alr(z: np.ndarray, ref: int) -> np.ndarray:
    """Inverse of :func:`_to_alr` for arrays whose last axis is the ALR coordinates."""
    full = np.insert(z, ref, 0.0, axis=-1)
    full = full - full.max(axis=-1, keepdims=True)
    x = np.exp(full)
    x /= x.sum(axis=-1, keepdims=True)
    c = x.shape[-1]
    m = np.clip(x * (1 + c * MIX_EPS) - MIX_EPS, 0.0, None)
    return m / m.sum(axis=-1, keepdims=True)


# ====================================================== univariate models
# Each returns (mean, std) arrays of length h: a Gaussian forecast per step.
UniModel = Callable[[np.ndarray, int, int | None, int], tuple[np.ndarray, np.ndarray]]


@contextmanager
def _fit_warnings() -> Iterator[None]:
    """Silence the warnings statsmodels emits while fitting short or easy series.

    Convergence and estimation warnings are expected when models are refitted on many
    backtest folds; the backtest, not the optimiser's message, judges the fit.
    """
    from statsmodels.tools.sm_exceptions import (
        ConvergenceWarning,
        EstimationWarning,
        ValueWarning,
    )

    with warnings.catch_warnings():
        for cat in (ConvergenceWarning, ValueWarning, EstimationWarning, RuntimeWarning):
            warnings.simplefilter("ignore", cat)
        yield


def _constant(y: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray] | None:
    if np.ptp(y) < 1e-12:
        return np.full(h, y[-1]), np.zeros(h)
    return None


def _uni_naive(y: np.ndarray, h: int, m: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    d = np.diff(y)
    sigma = float(np.sqrt(np.mean(d**2))) if d.size else 0.0
    return np.full(h, y[-1]), sigma * np.sqrt(np.arange(1, h + 1))


def _uni_seasonal_naive(
    y: np.ndarray, h: int, m: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    if not m or y.size < m + 1:
        raise ForecastError("seasonal_naive needs a season and more than one season of data")
    idx = y.size - m + (np.arange(h) % m)
    mean = y[idx]
    d = y[m:] - y[:-m]
    sigma = float(np.sqrt(np.mean(d**2)))
    k = np.arange(h) // m + 1
    return mean, sigma * np.sqrt(k)


def _uni_ets(y: np.ndarray, h: int, m: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    const = _constant(y, h)
    if const is not None:
        return const
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    seasonal = m is not None and y.size >= 2 * m + 2
    try:
        with _fit_warnings():
            model = ExponentialSmoothing(
                y,
                trend=None,
                seasonal="add" if seasonal else None,
                seasonal_periods=m if seasonal else None,
                initialization_method="estimated",
            )
            res = model.fit()
            mean = np.asarray(res.forecast(h), dtype=float)
            sims = np.asarray(
                res.simulate(
                    h,
                    repetitions=ETS_PATHS,
                    error="add",
                    anchor="end",
                    rng=np.random.default_rng(seed),
                ),
                dtype=float,
            ).reshape(h, -1)
    except (ValueError, np.linalg.LinAlgError) as exc:
        raise ForecastError(f"ets fit failed: {exc}") from None
    std = sims.std(axis=1)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise ForecastError("ets produced non-finite forecasts")
    return mean, std


def _uni_stl(y: np.ndarray, h: int, m: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if not m or y.size < 2 * m + 2:
        raise ForecastError("stl needs a season and at least two seasons of data")
    const = _constant(y, h)
    if const is not None:
        return const
    from statsmodels.tsa.arima.model import ARIMA
    from statsmodels.tsa.forecasting.stl import STLForecast

    try:
        with _fit_warnings():
            res = STLForecast(
                y, ARIMA, model_kwargs={"order": (1, 0, 0), "trend": "c"}, period=m
            ).fit()
            pred = res.get_prediction(start=y.size, end=y.size + h - 1)
            mean = np.asarray(pred.predicted_mean, dtype=float)
            std = np.asarray(pred.se_mean, dtype=float)
    except (ValueError, np.linalg.LinAlgError) as exc:
        raise ForecastError(f"stl fit failed: {exc}") from None
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise ForecastError("stl produced non-finite forecasts")
    return mean, std


def _fourier(t: np.ndarray, m: int, k: int) -> np.ndarray:
    return np.column_stack(
        [f(2 * np.pi * j * t / m) for j in range(1, k + 1) for f in (np.sin, np.cos)]
    )


def _uni_sarimax(y: np.ndarray, h: int, m: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if not m or y.size < 2 * m:
        raise ForecastError("sarimax needs a season and at least two seasons of data")
    const = _constant(y, h)
    if const is not None:
        return const
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    k = max(1, min(4, m // 2 - 1)) if m >= 4 else 1
    t = np.arange(y.size)
    try:
        with _fit_warnings():
            res = SARIMAX(y, exog=_fourier(t, m, k), order=(1, 0, 0), trend="c").fit(
                disp=False, maxiter=50
            )
            future = np.arange(y.size, y.size + h)
            pred = res.get_prediction(start=y.size, end=y.size + h - 1, exog=_fourier(future, m, k))
            mean = np.asarray(pred.predicted_mean, dtype=float)
            std = np.asarray(pred.se_mean, dtype=float)
    except (ValueError, np.linalg.LinAlgError) as exc:
        raise ForecastError(f"sarimax fit failed: {exc}") from None
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise ForecastError("sarimax produced non-finite forecasts")
    return mean, std


_UNI: dict[str, UniModel] = {
    "naive": _uni_naive,
    "seasonal_naive": _uni_seasonal_naive,
    "ets": _uni_ets,
    "stl": _uni_stl,
    "sarimax": _uni_sarimax,
}


# ============================================================ point forecasts
@dataclass(frozen=True)
class _Raw:
    """Forecast arrays before they are wrapped in a Forecast."""

    load_mean: np.ndarray
    load_lower: np.ndarray
    load_upper: np.ndarray
    mix_mean: np.ndarray  # (h, C)
    mix_lower: np.ndarray
    mix_upper: np.ndarray


def _continuous(
    name: str, load: np.ndarray, mix: np.ndarray, h: int, m: int | None, level: float, seed: int
) -> _Raw:
    fn = _UNI[name]
    zq = float(stats.norm.ppf(0.5 + level / 2))
    lm, ls = fn(load, h, m, seed)
    ref = _alr_ref(mix)
    alr = _to_alr(mix, ref)
    means, stds = [], []
    for j in range(alr.shape[1]):
        mu, sd = fn(alr[:, j], h, m, seed + 1 + j)
        means.append(mu)
        stds.append(sd)
    zm, zs = np.column_stack(means), np.column_stack(stds)
    rng = np.random.default_rng(seed)
    draws = zm[None] + zs[None] * rng.standard_normal((MARKOV_PATHS, *zm.shape))
    samples = _from_alr(draws, ref)
    q = (1 - level) / 2
    return _Raw(
        load_mean=np.maximum(lm, 0.0),
        load_lower=np.maximum(lm - zq * ls, 0.0),
        load_upper=np.maximum(lm + zq * ls, 0.0),
        mix_mean=_from_alr(zm, ref),
        mix_lower=np.quantile(samples, q, axis=0),
        mix_upper=np.quantile(samples, 1 - q, axis=0),
    )


def _quantise(mix: np.ndarray, q: int = MARKOV_QUANTUM) -> np.ndarray:
    """Largest-remainder rounding of each row to multiples of 1/q (integer counts)."""
    scaled = mix * q
    base = np.floor(scaled).astype(int)
    short = q - base.sum(axis=1)
    order = np.argsort(-(scaled - base), axis=1, kind="stable")
    for i in np.flatnonzero(short > 0):
        base[i, order[i, : short[i]]] += 1
    return base


def _markov(order: int, load: np.ndarray, mix: np.ndarray, h: int, level: float, seed: int) -> _Raw:
    counts = _quantise(mix)
    codes, states = np.unique(counts, axis=0, return_inverse=True)
    states = states.ravel()
    s_n = codes.shape[0]
    centroid = np.vstack([mix[states == s].mean(axis=0) for s in range(s_n)])
    freq = np.bincount(states, minlength=s_n).astype(float)
    marginal = freq / freq.sum()
    t1 = np.zeros((s_n, s_n))
    np.add.at(t1, (states[:-1], states[1:]), 1.0)
    alpha = 0.5
    p1 = (t1 + alpha * marginal) / (t1.sum(axis=1, keepdims=True) + alpha)
    pair_rows: dict[int, np.ndarray] = {}
    if order == 2 and states.size >= 3:
        pairs = states[:-2] * s_n + states[1:-1]
        for code in np.unique(pairs):
            nxt = states[2:][pairs == code]
            cnt = np.bincount(nxt, minlength=s_n).astype(float)
            k = 2.0  # back-off weight towards the first-order row
            pair_rows[int(code)] = (cnt + k * p1[int(code) % s_n]) / (cnt.sum() + k)
    pools = [load[states == s] for s in range(s_n)]
    sizes = np.array([p.size for p in pools])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(pools)
    rng = np.random.default_rng(seed)
    n = MARKOV_PATHS
    prev = np.full(n, states[-2] if states.size >= 2 else states[-1])
    cur = np.full(n, states[-1])
    path_states = np.empty((n, h), dtype=int)
    path_loads = np.empty((n, h))
    for t in range(h):
        if order == 2:
            probs = np.vstack(
                [
                    pair_rows.get(int(a) * s_n + int(b), p1[b])
                    for a, b in zip(prev, cur, strict=True)
                ]
            )
        else:
            probs = p1[cur]
        cum = np.cumsum(probs, axis=1)
        u = rng.random(n)[:, None] * cum[:, -1:]
        nxt = np.minimum((cum < u).sum(axis=1), s_n - 1)
        prev, cur = cur, nxt
        path_states[:, t] = nxt
        pick = offsets[nxt] + np.floor(rng.random(n) * sizes[nxt]).astype(int)
        path_loads[:, t] = flat[pick]
    mixes = centroid[path_states]  # (n, h, C)
    q = (1 - level) / 2
    mean_mix = mixes.mean(axis=0)
    mean_mix /= mean_mix.sum(axis=1, keepdims=True)
    return _Raw(
        load_mean=path_loads.mean(axis=0),
        load_lower=np.quantile(path_loads, q, axis=0),
        load_upper=np.quantile(path_loads, 1 - q, axis=0),
        mix_mean=mean_mix,
        mix_lower=np.quantile(mixes, q, axis=0),
        mix_upper=np.quantile(mixes, 1 - q, axis=0),
    )


def _raw_forecast(
    name: str, load: np.ndarray, mix: np.ndarray, h: int, m: int | None, level: float, seed: int
) -> _Raw:
    if name == "markov1":
        raw = _markov(1, load, mix, h, level, seed)
    elif name == "markov2":
        raw = _markov(2, load, mix, h, level, seed)
    elif name in _UNI:
        raw = _continuous(name, load, mix, h, m, level, seed)
    else:
        raise ValidationError(f"model: unknown model {name!r}; known: auto, {', '.join(MODELS)}")
    # Interval bounds must bracket the point forecast (Monte-Carlo means can fall outside
    # narrow quantile intervals by sampling noise).
    return _Raw(
        load_mean=raw.load_mean,
        load_lower=np.minimum(raw.load_lower, raw.load_mean),
        load_upper=np.maximum(raw.load_upper, raw.load_mean),
        mix_mean=raw.mix_mean,
        mix_lower=np.minimum(raw.mix_lower, raw.mix_mean),
        mix_upper=np.maximum(raw.mix_upper, raw.mix_mean),
    )


# ================================================================ seasonality
def _acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    x = x - x.mean()
    denom = float(np.dot(x, x))
    if denom <= 0:
        return np.zeros(max_lag + 1)
    return np.array([1.0] + [float(np.dot(x[:-k], x[k:])) / denom for k in range(1, max_lag + 1)])


def infer_season_length(
    series: WorkloadSeries, *, min_acf: float = 0.3, min_prominence: float = 0.3
) -> int | None:
    """Detect the season (in steps) of a regular series, or ``None`` if there is none.

    Works on the mean autocorrelation (ACF) of the load and of the most variable class
    fraction. Calendar periods (a day, a week, an hour) of at least 4 steps that fit three
    times in the series are tried first: a period qualifies when its ACF exceeds ``min_acf``
    and exceeds the ACF at half the period by ``min_prominence``; the most prominent wins.
    Otherwise the most prominent local ACF maximum above 0.5 is taken, if any.
    """
    step = series.step_seconds
    n = len(series)
    if step is None or n < 8:
        return None
    mixm = series.mix_matrix()
    dom = mixm[:, int(np.argmax(mixm.var(axis=0)))]
    max_lag = n // 3
    if max_lag < 2:
        return None
    acf = (_acf(series.load, max_lag) + _acf(dom, max_lag)) / 2

    def prominence(m: int) -> float:
        # A season shows as a high ACF at m and a low one half a season earlier; a smooth
        # non-seasonal series has a high ACF at every short lag and no such contrast.
        return float(acf[m] - acf[max(m // 2, 1)])

    calendar = []
    for period in (86400.0, 604800.0, 3600.0):
        m = period / step
        if abs(m - round(m)) < 1e-6 and 4 <= round(m) <= max_lag:
            calendar.append(round(m))
    good = [m for m in calendar if acf[m] > min_acf and prominence(m) > min_prominence]
    if good:
        return int(max(good, key=prominence))
    peaks = [
        k
        for k in range(4, max_lag)
        if acf[k] > acf[k - 1]
        and acf[k] >= acf[k + 1]
        and acf[k] > 0.5
        and prominence(k) > min_prominence
    ]
    if peaks:
        return int(max(peaks, key=prominence))
    return None


# ================================================================== backtest
def _smape(actual: np.ndarray, pred: np.ndarray) -> np.ndarray:
    denom = np.abs(actual) + np.abs(pred)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(denom > 0, 2 * np.abs(pred - actual) / denom, 0.0)
    return out


def _check_regular(series: WorkloadSeries) -> float:
    if series.step_seconds is None:
        raise ValidationError(
            "step_seconds: the trace is irregular (or has gaps); resample it to a step first "
            "(kairos forecast --step SECONDS)"
        )
    return float(series.step_seconds)


def _check_model_applicable(name: str, season: int | None) -> None:
    if name not in MODELS:
        raise ValidationError(f"model: unknown model {name!r}; known: auto, {', '.join(MODELS)}")
    if name in SEASONAL_MODELS and not season:
        raise ValidationError(
            f"model: {name} needs a season; none was detected, pass season_length"
        )


def backtest(
    series: WorkloadSeries,
    *,
    model: str,
    horizon: int,
    folds: int = 3,
    season_length: int | None = None,
    level: float = 0.9,
    seed: int = 0,
) -> BacktestResult:
    """Rolling-origin backtest of ``model`` on the last ``folds`` windows of ``horizon`` steps.

    Fold ``k`` trains on every row before origin ``n - (folds - k) * horizon`` and forecasts
    the next ``horizon`` rows. Errors are averaged per horizon step over the folds.

    Raises
    ------
    ValidationError
        Unknown model, bad arguments, or a series too short for the folds.
    ForecastError
        If the model fails on a fold.
    """
    _check_regular(series)
    _check_args(horizon=horizon, level=level)
    if folds < 1:
        raise ValidationError(f"folds: must be >= 1, got {folds}")
    _check_model_applicable(model, season_length)
    n = len(series)
    min_train = _min_train(model, season_length)
    origins = [n - (folds - k) * horizon for k in range(folds)]
    if origins[0] < min_train:
        raise ValidationError(
            f"trace: {n} points are too few to backtest {model} over {folds} fold(s) of "
            f"{horizon} steps (needs at least {min_train + folds * horizon})"
        )
    start = time.perf_counter()
    load, mixm = series.load, series.mix_matrix()
    errs, sq, sm, mae, tv, inside = [], [], [], [], [], []
    for k, o in enumerate(origins):
        raw = _raw_forecast(model, load[:o], mixm[:o], horizon, season_length, level, seed + k)
        a_load, a_mix = load[o : o + horizon], mixm[o : o + horizon]
        diff = raw.load_mean - a_load
        errs.append(np.abs(diff))
        sq.append(diff**2)
        sm.append(_smape(a_load, raw.load_mean))
        mae.append(np.abs(raw.mix_mean - a_mix).mean(axis=1))
        tv.append(0.5 * np.abs(raw.mix_mean - a_mix).sum(axis=1))
        inside.append((a_load >= raw.load_lower - 1e-9) & (a_load <= raw.load_upper + 1e-9))
    load_smape = np.mean(sm, axis=0)
    mix_tv = np.mean(tv, axis=0)
    return BacktestResult(
        model=model,
        horizon=horizon,
        origins=tuple(origins),
        load_mae=np.mean(errs, axis=0),
        load_rmse=np.sqrt(np.mean(sq, axis=0)),
        load_smape=load_smape,
        mix_mae=np.mean(mae, axis=0),
        mix_tv=mix_tv,
        load_coverage=float(np.mean(inside)),
        score=float(0.5 * np.mean(load_smape) / 2 + 0.5 * np.mean(mix_tv)),
        seconds=time.perf_counter() - start,
    )


def _min_train(model: str, season: int | None) -> int:
    if model in ("stl", "sarimax", "ets") and season:
        return 2 * season + 2
    if model == "seasonal_naive" and season:
        return season + 1
    return 10


def _check_args(*, horizon: int, level: float) -> None:
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise ValidationError(f"horizon: must be a positive integer, got {horizon!r}")
    if not 0 < level < 1:
        raise ValidationError(f"level: must be in (0, 1), got {level!r}")


def _failed(model: str, horizon: int, reason: str) -> BacktestResult:
    nan = np.full(horizon, np.nan)
    return BacktestResult(
        model=model,
        horizon=horizon,
        origins=(),
        load_mae=nan,
        load_rmse=nan,
        load_smape=nan,
        mix_mae=nan,
        mix_tv=nan,
        load_coverage=math.nan,
        score=math.nan,
        error=reason,
    )


# ================================================================== forecast
def forecast(
    series: WorkloadSeries,
    *,
    horizon: int,
    model: str = "auto",
    season_length: int | None = None,
    level: float = 0.9,
    folds: int = 3,
    candidates: Sequence[str] | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> Forecast:
    """Forecast ``horizon`` steps of ``series`` with intervals.

    Parameters
    ----------
    series : WorkloadSeries
        A regular series (``step_seconds`` set; resample irregular traces first).
    horizon : int
        Number of future steps.
    model : str, default "auto"
        One of :data:`MODELS`, or ``"auto"`` to backtest :data:`AUTO_MODELS` (or
        ``candidates``) and keep the lowest score.
    season_length : int, optional
        Season in steps; detected with :func:`infer_season_length` when omitted.
    level : float, default 0.9
        Nominal coverage of the intervals.
    folds : int, default 3
        Backtest folds (each ``horizon`` steps long).
    candidates : sequence of str, optional
        Models ``auto`` tries.
    seed : int
        Seeds the Monte Carlo parts (Markov paths, ETS simulation, interval sampling).
    progress : callable, optional
        Receives one line per model backtested (the CLI prints them on stderr).

    Returns
    -------
    Forecast
        With ``backtest`` holding every backtested model (the chosen one first for ``auto``).

    Raises
    ------
    ValidationError
        Irregular series, bad arguments, unknown model, or a series too short.
    ForecastError
        The requested model failed to fit, or every ``auto`` candidate failed.
    """
    step = _check_regular(series)
    _check_args(horizon=horizon, level=level)
    if season_length is not None and (
        not isinstance(season_length, int) or season_length < 2 or season_length > len(series) // 2
    ):
        raise ValidationError(
            f"season_length: must be an integer in [2, {len(series) // 2}], got {season_length!r}"
        )
    season = season_length if season_length is not None else infer_season_length(series)
    notes: dict[str, str] = {}
    results: list[BacktestResult] = []
    if model == "auto":
        pool = list(candidates or AUTO_MODELS)
        for name in pool:
            if name not in MODELS:
                raise ValidationError(f"candidates: unknown model {name!r}")
        for name in pool:
            if name in SEASONAL_MODELS and not season:
                notes[name] = "skipped: no season detected"
                results.append(_failed(name, horizon, notes[name]))
                continue
            try:
                res = backtest(
                    series,
                    model=name,
                    horizon=horizon,
                    folds=folds,
                    season_length=season,
                    level=level,
                    seed=seed,
                )
            except (ForecastError, ValidationError) as exc:
                notes[name] = f"skipped: {exc}"
                res = _failed(name, horizon, str(exc))
            results.append(res)
            if progress:
                progress(_progress_line(res))
        usable = [r for r in results if r.ok]
        if not usable:
            raise ForecastError(
                "no model could be backtested: " + "; ".join(f"{k}: {v}" for k, v in notes.items())
            )
        chosen = min(usable, key=lambda r: r.score).model
        results.sort(key=lambda r: (r.model != chosen, not r.ok, r.score if r.ok else math.inf))
    else:
        _check_model_applicable(model, season)
        chosen = model
        try:
            res = backtest(
                series,
                model=model,
                horizon=horizon,
                folds=folds,
                season_length=season,
                level=level,
                seed=seed,
            )
            results.append(res)
            if progress:
                progress(_progress_line(res))
        except ValidationError as exc:
            notes[model] = f"not backtested: {exc}"
    if len(series) < _min_train(chosen, season):
        raise ValidationError(
            f"trace: {len(series)} points are too few for {chosen} "
            f"(needs at least {_min_train(chosen, season)})"
        )
    raw = _raw_forecast(chosen, series.load, series.mix_matrix(), horizon, season, level, seed)
    classes = series.classes
    ts = series.timestamps[-1] + step * np.arange(1, horizon + 1)

    def cols(a: np.ndarray) -> dict[str, np.ndarray]:
        return {c: a[:, j] for j, c in enumerate(classes)}

    return Forecast(
        engine=series.engine,
        timestamps=ts,
        load_mean=raw.load_mean,
        load_lower=raw.load_lower,
        load_upper=raw.load_upper,
        mix_mean=cols(raw.mix_mean),
        mix_lower=cols(raw.mix_lower),
        mix_upper=cols(raw.mix_upper),
        level=level,
        model=chosen,
        step_seconds=step,
        backtest=tuple(results) if results else None,
        season_length=season,
        scope=series.scope,
        info={"notes": notes, "selection": "auto" if model == "auto" else "fixed", "seed": seed},
    )


def _progress_line(res: BacktestResult) -> str:
    if not res.ok:
        return f"backtest {res.model}: skipped ({res.error})"
    s = res.summary()
    return (
        f"backtest {res.model}: load sMAPE {100 * s['load_smape']:.1f}%, "
        f"mix TV {s['mix_tv']:.3f} ({res.seconds:.1f}s)"
    )


def backtest_table(results: Sequence[BacktestResult], *, chosen: str | None = None) -> str:
    """A plain-text table of backtest summaries; the chosen model is marked with ``*``."""
    header = (
        f"{'':2}{'model':<15}{'load MAE':>11}{'load RMSE':>11}{'sMAPE %':>9}"
        f"{'mix MAE':>9}{'mix TV':>8}{'cover %':>9}{'score':>8}{'sec':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        mark = "* " if r.model == chosen else "  "
        if not r.ok:
            lines.append(f"{mark}{r.model:<15}  {r.error}")
            continue
        s = r.summary()
        lines.append(
            f"{mark}{r.model:<15}{s['load_mae']:>11.1f}{s['load_rmse']:>11.1f}"
            f"{100 * s['load_smape']:>9.2f}{s['mix_mae']:>9.4f}{s['mix_tv']:>8.4f}"
            f"{100 * s['load_coverage']:>9.1f}{s['score']:>8.4f}{r.seconds:>6.1f}"
        )
    return "\n".join(lines)


def per_step_table(result: BacktestResult) -> str:
    """MAE / RMSE / sMAPE of the load and mix MAE for each horizon step of one backtest."""
    lines = [f"{'step':>5}{'load MAE':>11}{'load RMSE':>11}{'sMAPE %':>9}{'mix MAE':>9}"]
    for i in range(result.horizon):
        lines.append(
            f"{i + 1:>5}{result.load_mae[i]:>11.1f}{result.load_rmse[i]:>11.1f}"
            f"{100 * result.load_smape[i]:>9.2f}{result.mix_mae[i]:>9.4f}"
        )
    return "\n".join(lines)
