"""The single forecasting models behind ``kairos forecast --model NAME``.

Each model forecasts the load as is and the mix in additive log-ratio (ALR) space, or (the
Markov models) over quantised mix states; :func:`raw_forecast` returns the arrays before
they are wrapped in a :class:`planner.forecast.results.Forecast`. The backtest-driven
ensemble (``auto``) lives in :mod:`planner.forecast.ensemble`; these models stay for explicit
use and for comparison.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from planner.errors import ValidationError
from planner.forecast.results import ForecastError

#: The single models, in the order the CLI lists them.
SINGLE_MODELS: tuple[str, ...] = (
    "naive",
    "seasonal_naive",
    "ets",
    "stl",
    "sarimax",
    "markov1",
    "markov2",
)
MIX_EPS = 1e-3
MARKOV_QUANTUM = 10  # states are multiples of 1/10 per class, as in SOPHIA
MARKOV_PATHS = 400
ETS_PATHS = 300


# ========================================================== transformations
def alr_ref(mix: np.ndarray) -> int:
    return int(np.argmax(mix.mean(axis=0)))


def to_alr(mix: np.ndarray, ref: int) -> np.ndarray:
    c = mix.shape[1]
    x = (mix + MIX_EPS) / (1 + c * MIX_EPS)
    logs = np.log(x)
    return np.delete(logs - logs[:, [ref]], ref, axis=1)


def from_alr(z: np.ndarray, ref: int) -> np.ndarray:
    """Inverse of :func:`to_alr` for arrays whose last axis is the ALR coordinates."""
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
def fit_warnings() -> Iterator[None]:
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
        with fit_warnings():
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
        with fit_warnings():
            res = STLForecast(
                y, ARIMA, model_kwargs={"order": (1, 0, 0), "trend": "c"}, period=m
            ).fit()
            pred = res.get_prediction(start=y.size, end=y.size + h - 1)
    except (ValueError, np.linalg.LinAlgError) as exc:
        raise ForecastError(f"stl fit failed: {exc}") from None
    return _mean_and_std(pred, "stl")


def _mean_and_std(pred: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A statsmodels prediction's mean and standard error, refused unless finite."""
    mean = np.asarray(pred.predicted_mean, dtype=float)
    std = np.asarray(pred.se_mean, dtype=float)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std))):
        raise ForecastError(f"{name} produced non-finite forecasts")
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
        with fit_warnings():
            res = SARIMAX(y, exog=_fourier(t, m, k), order=(1, 0, 0), trend="c").fit(
                disp=False, maxiter=50
            )
            future = np.arange(y.size, y.size + h)
            pred = res.get_prediction(start=y.size, end=y.size + h - 1, exog=_fourier(future, m, k))
    except (ValueError, np.linalg.LinAlgError) as exc:
        raise ForecastError(f"sarimax fit failed: {exc}") from None
    return _mean_and_std(pred, "sarimax")


_UNI: dict[str, UniModel] = {
    "naive": _uni_naive,
    "seasonal_naive": _uni_seasonal_naive,
    "ets": _uni_ets,
    "stl": _uni_stl,
    "sarimax": _uni_sarimax,
}


# ============================================================ point forecasts
@dataclass(frozen=True)
class Raw:
    """Forecast arrays before they are wrapped in a Forecast."""

    load_mean: np.ndarray
    load_lower: np.ndarray
    load_upper: np.ndarray
    mix_mean: np.ndarray  # (h, C)
    mix_lower: np.ndarray
    mix_upper: np.ndarray


def _continuous(
    name: str, load: np.ndarray, mix: np.ndarray, h: int, m: int | None, level: float, seed: int
) -> Raw:
    fn = _UNI[name]
    zq = float(stats.norm.ppf(0.5 + level / 2))
    lm, ls = fn(load, h, m, seed)
    ref = alr_ref(mix)
    alr = to_alr(mix, ref)
    means, stds = [], []
    for j in range(alr.shape[1]):
        mu, sd = fn(alr[:, j], h, m, seed + 1 + j)
        means.append(mu)
        stds.append(sd)
    zm, zs = np.column_stack(means), np.column_stack(stds)
    rng = np.random.default_rng(seed)
    draws = zm[None] + zs[None] * rng.standard_normal((MARKOV_PATHS, *zm.shape))
    samples = from_alr(draws, ref)
    q = (1 - level) / 2
    return Raw(
        load_mean=np.maximum(lm, 0.0),
        load_lower=np.maximum(lm - zq * ls, 0.0),
        load_upper=np.maximum(lm + zq * ls, 0.0),
        mix_mean=from_alr(zm, ref),
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


def _markov(order: int, load: np.ndarray, mix: np.ndarray, h: int, level: float, seed: int) -> Raw:
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
    return Raw(
        load_mean=path_loads.mean(axis=0),
        load_lower=np.quantile(path_loads, q, axis=0),
        load_upper=np.quantile(path_loads, 1 - q, axis=0),
        mix_mean=mean_mix,
        mix_lower=np.quantile(mixes, q, axis=0),
        mix_upper=np.quantile(mixes, 1 - q, axis=0),
    )


def raw_forecast(
    name: str, load: np.ndarray, mix: np.ndarray, h: int, m: int | None, level: float, seed: int
) -> Raw:
    if name == "markov1":
        raw = _markov(1, load, mix, h, level, seed)
    elif name == "markov2":
        raw = _markov(2, load, mix, h, level, seed)
    elif name in _UNI:
        raw = _continuous(name, load, mix, h, m, level, seed)
    else:
        known = ", ".join(("auto", "ensemble", *SINGLE_MODELS))
        raise ValidationError(f"model: unknown model {name!r}; known: {known}")
    # Interval bounds must bracket the point forecast (Monte-Carlo means can fall outside
    # narrow quantile intervals by sampling noise).
    return Raw(
        load_mean=raw.load_mean,
        load_lower=np.minimum(raw.load_lower, raw.load_mean),
        load_upper=np.maximum(raw.load_upper, raw.load_mean),
        mix_mean=raw.mix_mean,
        mix_lower=np.minimum(raw.mix_lower, raw.mix_mean),
        mix_upper=np.maximum(raw.mix_upper, raw.mix_mean),
    )
