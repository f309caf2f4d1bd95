"""Cheap candidate forecasters for the ensemble, vectorised over rolling origins.

A candidate maps a 1-D series ``z`` (the log load, or one log-ratio coordinate of the mix),
an array of origins and a horizon ``h`` to a ``(len(origins), h)`` matrix whose row ``i``
forecasts ``z[o_i : o_i + h]`` from ``z[:o_i]`` only. Parameters (smoothing and damping
constants, seasonal indices, regression coefficients, an MSTL decomposition) are fitted once
on ``z[:origins[0]]``; states (levels, deviations, lags) then roll forward with the data, so
one call backtests hundreds of origins and the same call with ``origins=[n]`` is the final
forecast. That is what makes a 4-week, 5-minute history (8,064 points, a weekly season of
2,016 steps) cost well under a second instead of refitting statsmodels models per origin.

Candidates (see docs/forecasting.md):

``naive``            the last value.
``ses``              simple exponential smoothing, damped towards the mean (ETS(A,Ad,N)).
``snaive_day/week``  the value one day (week) before.
``profile_day/week`` the median of the same phase over the last k days (weeks), plus the
                     current deviation from that profile, exponentially smoothed and damped.
``profile_switch``   the daily profile, or the weekly one where the two disagree by > 50 %.
``profile_daytype``  the median of the same phase over the last days of the same type
                     (weekdays, weekend), plus the smoothed and damped deviation.
``ets``              classical seasonal indices + damped exponential smoothing of the
                     seasonally adjusted series (ETS with a fixed season).
``theta``            the Theta method (SES with half the local linear drift) on the same
                     seasonally adjusted series.
``sm_theta_day/week`` statsmodels' ``ThetaModel`` (additive season of a day, or a week), fitted
                     once before the first origin, its level rolled forward.
``fourier_ar``       dynamic harmonic regression: Fourier terms of the day and week by least
                     squares, the residual smoothed and damped (a two-step, cheap SARIMAX).
``mstl``             statsmodels ``MSTL`` with the daily and weekly seasons, fitted on a series
                     down-sampled to at most 24 points a day and interpolated back, plus the
                     damped level of the remainder.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

#: A candidate: (z, origins, h) -> (len(origins), h) forecasts.
Candidate = Callable[[np.ndarray, np.ndarray, int], np.ndarray]
#: profile(padded series, targets, first period back, phase shifts) -> the profile there.
Profile = Callable[[np.ndarray, np.ndarray, int, tuple[int, ...]], np.ndarray]

ALPHAS = (0.03, 0.1, 0.2, 0.35, 0.55, 0.8, 1.0)
PHIS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 1.0)
MAX_FIT_ORIGINS = 300  # origins used to fit smoothing constants (more adds time, not accuracy)
SWITCH_LOG_GAP = 0.4  # profile_switch: the weekly profile wins where it is 50 % off the daily
THETA_FIT_POINTS = 2016  # statsmodels_theta: the points its SES constant and drift are fitted on
MSTL_POINTS_PER_DAY = 24  # MSTL with a weekly season: ~20 s at 5 minutes, ~0.2 s hourly


@dataclass(frozen=True)
class Seasons:
    """Season lengths in steps: a day, a week, and another detected or given season."""

    day: int | None = None
    week: int | None = None
    other: int | None = None

    def periods(self) -> tuple[int, ...]:
        return tuple(sorted({m for m in (self.day, self.week, self.other) if m}))


def calendar_seasons(step_seconds: float, other: int | None = None) -> Seasons:
    """The day and week in steps when the step divides them (and a day is >= 4 steps)."""

    def steps(period: float) -> int | None:
        m = period / step_seconds
        return round(m) if abs(m - round(m)) < 1e-6 and round(m) >= 4 else None

    day, week = steps(86400.0), steps(604800.0)
    if other in (day, week):
        other = None
    return Seasons(day=day, week=week, other=other)


# ------------------------------------------------------------------ level model
@dataclass(frozen=True)
class Level:
    """Exponential smoothing of a series, forecast as ``mu + phi**j * (level - mu)``."""

    alpha: float = 0.3
    phi: float = 1.0
    mu: float = 0.0

    def smooth(self, d: np.ndarray) -> np.ndarray:
        a = self.alpha
        return np.asarray(lfilter([a], [1.0, a - 1.0], d, zi=[(1.0 - a) * d[0]])[0])

    def forecast(self, d: np.ndarray, start: int, origins: np.ndarray, h: int) -> np.ndarray:
        """Forecasts at ``origins`` of a series valid from ``start`` on (origins > start)."""
        last = self.smooth(d[start:])[origins - 1 - start]
        damp = self.phi ** np.arange(1, h + 1)
        return self.mu + damp[None, :] * (last - self.mu)[:, None]


def fit_level(d: np.ndarray, h: int, *, phis: tuple[float, ...] = PHIS) -> Level:
    """Pick the smoothing and damping constants with the lowest 1..h-step absolute error.

    Absolute, not squared: the forecasts are judged by sMAPE/MAE, whose optimum is the
    median; on a series that jumps between regimes the mean-optimal damping loses to it.
    """
    if d.size < h + 30 or not np.all(np.isfinite(d)):
        return Level(mu=float(np.mean(d)) if d.size and np.all(np.isfinite(d)) else 0.0)
    mu = float(np.mean(d))
    origins = np.arange(20, d.size - h + 1)
    if origins.size > MAX_FIT_ORIGINS:
        origins = origins[np.linspace(0, origins.size - 1, MAX_FIT_ORIGINS).astype(int)]
    actual = d[origins[:, None] + np.arange(h)[None, :]]
    powers = np.array(phis)[:, None] ** np.arange(1, h + 1)[None, :]  # (P, h)
    best, best_err = Level(mu=mu), math.inf
    for a in ALPHAS:
        last = Level(alpha=a).smooth(d)[origins - 1] - mu  # (O,)
        pred = mu + powers[:, None, :] * last[None, :, None]  # (P, O, h)
        err = np.mean(np.abs(pred - actual[None]), axis=(1, 2))
        k = int(np.argmin(err))
        if err[k] < best_err:
            best, best_err = Level(alpha=a, phi=phis[k], mu=mu), float(err[k])
    return best


# ------------------------------------------------------------- helpers
def _targets(origins: np.ndarray, h: int) -> np.ndarray:
    return origins[:, None] + np.arange(h)[None, :]


def _padded(z: np.ndarray, h: int) -> np.ndarray:
    """``z`` with ``h`` NaNs appended, so the final forecast's targets index safely."""
    return np.concatenate([z, np.full(h, np.nan)])


def naive(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
    """The last value."""
    return np.repeat(z[origins - 1][:, None], h, axis=1)


def ses(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
    """Damped simple exponential smoothing (constants fitted before the first origin)."""
    model = fit_level(z[: origins[0]], h)
    return model.forecast(z, 0, origins, h)


def seasonal_naive(m: int) -> Candidate:
    """The value ``m`` steps before (``2m`` for targets beyond one season, and so on)."""

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        back = m * (np.arange(h) // m + 1)
        return z[_targets(origins, h) - back[None, :]]

    return fc


# ------------------------------------------------------------- profiles
def _profile(z: np.ndarray, t: np.ndarray, m: int, k: int, first: int, shifts: tuple[int, ...]
             ) -> np.ndarray:
    """Median of ``z[t - i*m + s]`` over ``i = first .. first+k-1`` and the shifts ``s``."""
    stack = [z[t - i * m + s] for i in range(first, first + k) for s in shifts]
    return np.asarray(np.median(np.stack(stack), axis=0))


def profile_seasons(n_fit: int, m: int, h: int, k_max: int) -> int:
    """How many past seasons a profile can use when fitted on ``n_fit`` points (0: none)."""
    first_max = (h - 1) // m + 1
    return max(0, min(k_max, (n_fit - 2 - 2 * h - 30) // m - (first_max - 1)))


def seasonal_profile(m: int, k: int) -> Candidate:
    """Median of the same phase over ``k`` past seasons plus the damped current deviation.

    The neighbouring phases (+-1 step) join the median when the horizon allows it, which
    halves the noise of a weekly profile built from 2-3 weeks without blurring its shape.
    """

    def profile(zp: np.ndarray, t: np.ndarray, first: int, shifts: tuple[int, ...]
                ) -> np.ndarray:
        return _profile(zp, t, m, k, first, shifts)

    return _profile_forecast(profile, m, k * m + 1)



def _profile_forecast(profile: Profile, period: int, start: int) -> Candidate:
    """A profile candidate: ``profile(zp, t, first, shifts)`` at each target, plus the
    damped deviation of the series from its own profile since ``start`` (the fitted level).
    A target ``first`` periods ahead or more reads the profile from ``first`` periods back;
    the neighbouring phases join the median only where the horizon allows it."""

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        zp = _padded(z, h)
        shifts = (-1, 0, 1) if h <= period - 1 else (0,)
        t_in = np.arange(start, z.size)
        dev = np.full(z.size, np.nan)
        dev[t_in] = z[t_in] - profile(zp, t_in, 1, shifts)
        level = fit_level(dev[start : origins[0]], h)
        targets = _targets(origins, h)
        out = np.empty(targets.shape)
        first = np.arange(h) // period + 1
        for f in np.unique(first):
            cols = first == f
            out[:, cols] = profile(zp, targets[:, cols], int(f), shifts if f == 1 else (0,))
        return out + level.forecast(dev, start, origins, h)

    return fc


def profile_switch(day: Candidate, week: Candidate, threshold: float = SWITCH_LOG_GAP
                   ) -> Candidate:
    """The daily profile, except where the weekly one disagrees with it by more than
    ``threshold`` (log): a Monday after a quiet weekend, a weekday-only batch window.

    The daily profile is the better estimate on ordinary days (seven days of medians against
    three weeks); the weekly one knows which day it is. Each forecast step takes the weekly
    profile only where the two part by more than noise.
    """

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        d, w = day(z, origins, h), week(z, origins, h)
        return np.where(np.abs(w - d) > threshold, w, d)

    return fc


def weekdays(start: float, step_seconds: float, day: int) -> Callable[[np.ndarray], np.ndarray]:
    """Index -> day of the week (0 Monday .. 6 Sunday, UTC) of a series starting at ``start``."""
    phase = round(((start / 86400.0 + 3.0) % 7.0) * day)  # 1970-01-01 was a Thursday

    def of(t: np.ndarray) -> np.ndarray:
        return np.asarray(((phase + t) // day) % 7)

    return of


DAYTYPE_DAYS = 4  # profile_daytype: the median over this many past days of the same type


def daytype_days(n_fit: int, day: int, h: int, max_lag: int = 14) -> int:
    """How many days back ``profile_daytype`` may look when fitted on ``n_fit`` points."""
    return profile_seasons(n_fit, day, h, max_lag)


def daytype_profile(day: int, max_lag: int, weekday_of: Callable[[np.ndarray], np.ndarray],
                    k: int = DAYTYPE_DAYS) -> Candidate:
    """Median of the same phase over the last ``k`` days of the same type, plus the damped
    current deviation (as :func:`seasonal_profile`).

    The types are weekdays and the weekend: a Saturday is forecast from the last weekend days
    (four of them within two weeks, where the weekly profile has two Saturdays), a Monday
    from the last weekdays, not from the Sunday before it (the daily profile's mistake).
    Looks back at most ``max_lag`` days.
    """

    def same_type_profile(zp: np.ndarray, t: np.ndarray, first: int,
                          shifts: tuple[int, ...]) -> np.ndarray:
        kind = weekday_of(t) >= 5
        lags = np.arange(first, first + max_lag)
        back = t[None, :] - lags[:, None] * day  # (lags, targets)
        ok = (weekday_of(back) >= 5) == kind[None, :]
        ok &= np.cumsum(ok, axis=0) <= k
        # every target has k same-type days within max_lag >= 14 days
        vals = [np.where(ok, zp[np.clip(back + s, 0, zp.size - 1)], np.nan) for s in shifts]
        return np.asarray(np.nanmedian(np.concatenate(vals), axis=0))

    def profile(zp: np.ndarray, t: np.ndarray, first: int, shifts: tuple[int, ...]
                ) -> np.ndarray:
        return same_type_profile(zp, t.ravel(), first, shifts).reshape(t.shape)

    return _profile_forecast(profile, day, max_lag * day + 1)


# ------------------------------------------------------ seasonal adjustment
def seasonal_index(z: np.ndarray, m: int, k: int) -> np.ndarray:
    """Classical seasonal indices (length ``m``, mean 0) of the last ``k`` seasons of ``z``.

    Detrended by a centred moving average of one season; the median per phase is smoothed
    over neighbouring phases (circularly) so a weekly index from few weeks is not all noise.
    """
    c = np.concatenate([[0.0], np.cumsum(z)])
    half = m // 2
    t = np.arange(half, z.size - (m - half))
    trend = (c[t + m - half] - c[t - half]) / m
    resid = z[t] - trend
    keep = min(resid.size // m, k) * m
    if keep == 0:
        return np.zeros(m)
    # the last `keep` points are whole seasons: one row per season, one column per phase
    rows = resid[-keep:].reshape(-1, m)
    idx = np.zeros(m)
    idx[(t[-keep] + np.arange(m)) % m] = np.median(rows, axis=0)
    idx = (np.roll(idx, 1) + idx + np.roll(idx, -1)) / 3
    return idx - idx.mean()


def _adjusted(z: np.ndarray, n_fit: int, m: int | None, k: int, h: int) -> np.ndarray:
    """Seasonal component over ``[0, len(z) + h)`` (zeros without a season)."""
    if not m or k < 1:
        return np.zeros(z.size + h)
    idx = seasonal_index(z[:n_fit], m, k)
    return idx[np.arange(z.size + h) % m]


def ets_adjusted(m: int | None, k: int) -> Candidate:
    """Damped exponential smoothing of the seasonally adjusted series, reseasonalised."""

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        season = _adjusted(z, int(origins[0]), m, k, h)
        a = z - season[: z.size]
        level = fit_level(a[: origins[0]], h)
        return season[_targets(origins, h)] + level.forecast(a, 0, origins, h)

    return fc


def _rolling_slope(a: np.ndarray, ends: np.ndarray, w: int) -> np.ndarray:
    """OLS slope of ``a`` over the ``w`` points before each of ``ends``."""
    t = np.arange(a.size, dtype=float)
    c1 = np.concatenate([[0.0], np.cumsum(a)])
    ct = np.concatenate([[0.0], np.cumsum(t * a)])
    lo = np.maximum(ends - w, 0)
    n = (ends - lo).astype(float)
    st = (ends - 1 + lo) * n / 2
    stt = _sum_sq(lo, ends)
    sa, sta = c1[ends] - c1[lo], ct[ends] - ct[lo]
    den = n * stt - st**2
    return np.where(den > 0, (n * sta - st * sa) / np.where(den > 0, den, 1.0), 0.0)


def _sum_sq(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sum of t**2 for t in [lo, hi) (closed form)."""

    def s(x: np.ndarray) -> np.ndarray:
        x = x.astype(float) - 1
        return x * (x + 1) * (2 * x + 1) / 6

    return s(hi) - s(lo)


def theta_adjusted(m: int | None, k: int, window: int) -> Candidate:
    """Theta method: SES plus half the local linear drift, on the adjusted series."""

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        season = _adjusted(z, int(origins[0]), m, k, h)
        a = z - season[: z.size]
        level = fit_level(a[: origins[0]], h, phis=(1.0,))
        slope = _rolling_slope(a, origins, window)
        steps = np.arange(h)[None, :] + 1.0 / level.alpha
        return season[_targets(origins, h)] + level.forecast(a, 0, origins, h) + (
            slope[:, None] / 2 * steps
        )

    return fc


def statsmodels_theta(m: int) -> Candidate:
    """statsmodels' ``ThetaModel`` (theta 2, additive season of ``m`` steps) fitted once on the
    history before the first origin; its SES level then rolls forward with the data.

    The season is the classical decomposition's mean per phase over *all* the history (28 days
    at most here, where the profiles take medians of 7), so a stable daily shape is estimated
    from four times the days; the drift ``b0`` is the history's own (AutoTheta's recipe, without
    refitting per origin); the constant and the drift come from the last
    :data:`THETA_FIT_POINTS` points.
    """

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        from statsmodels.tsa.forecasting.theta import ThetaModel
        from statsmodels.tsa.seasonal import seasonal_decompose

        from planner.forecast.models import fit_warnings

        o0 = int(origins[0])
        with fit_warnings():
            # the decomposition ThetaModel(deseasonalize=True, method="additive") makes, once
            phase = np.asarray(seasonal_decompose(z[:o0], model="additive", period=m).seasonal)
            season = phase[np.arange(z.size + h) % m]
            a = z - season[: z.size]
            # the SES constant and drift from the last THETA_FIT_POINTS (a week at 5 minutes):
            # the state-space fit costs ~0.07 CPU s on 4 weeks, ~0.02 s on one
            res = ThetaModel(a[max(0, o0 - THETA_FIT_POINTS) : o0], deseasonalize=False).fit()
        b0, alpha = float(res.params["b0"]), float(res.params["alpha"])
        alpha = min(max(alpha, 1e-3), 1.0)
        level = Level(alpha=alpha).smooth(a)[origins - 1]
        drift = 0.5 * b0 * (np.arange(h)[None, :] + 1.0 / alpha)
        return season[_targets(origins, h)] + level[:, None] + drift

    return fc


# ------------------------------------------------------------ regressions
def _fourier(t: np.ndarray, terms: tuple[tuple[int, int], ...]) -> np.ndarray:
    cols = [np.ones(t.size)]
    for m, k in terms:
        for j in range(1, k + 1):
            w = 2 * np.pi * j * t / m
            cols += [np.sin(w), np.cos(w)]
    return np.column_stack(cols)


def fourier_ar(seasons: Seasons, window: int) -> Candidate:
    """Least-squares Fourier terms of each season on the last ``window`` points + damped level."""
    terms = tuple((m, min(k, m // 2 - 1)) for m, k in ((seasons.day, 10), (seasons.week, 12),
                                                       (seasons.other, 6)) if m and m >= 4)

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        o0 = int(origins[0])
        lo = max(0, o0 - window)
        x = _fourier(np.arange(z.size + h, dtype=float), terms)
        xt = x[lo:o0]
        # normal equations: a few ms where lstsq's SVD takes most of a second at 6k x 45
        beta = np.linalg.solve(xt.T @ xt + 1e-8 * np.eye(xt.shape[1]), xt.T @ z[lo:o0])
        fit = x @ beta
        resid = z - fit[: z.size]
        level = fit_level(resid[lo:o0], h)
        return fit[_targets(origins, h)] + level.forecast(resid, lo, origins, h)

    return fc


def _mstl_seasonal(z: np.ndarray, n_fit: int, total: int, seasons: Seasons) -> np.ndarray:
    """Sum of MSTL's seasonal components, down-sampled, extended periodically, upsampled."""
    from statsmodels.tsa.seasonal import MSTL

    from planner.forecast.models import fit_warnings

    day = seasons.day or seasons.other or 0
    f = next(d for d in range(1, day + 1) if day % d == 0 and day // d <= MSTL_POINTS_PER_DAY)
    nb = n_fit // f
    blocks = z[: nb * f].reshape(nb, f).mean(axis=1)
    periods = [m // f for m in seasons.periods() if m % f == 0 and nb >= 2 * (m // f) + 1]
    with fit_warnings():
        res = MSTL(blocks, periods=periods, iterate=1).fit()
    comp = np.asarray(res.seasonal, dtype=float).reshape(nb, -1)
    n_blocks = -(-total // f) + 1
    out = np.zeros(n_blocks)
    b = np.arange(n_blocks)
    for c, p in enumerate(periods):
        back = np.where(b < nb, 0, p * ((b - nb) // p + 1))
        out += comp[b - back, c]
    centres = b * f + (f - 1) / 2
    return np.asarray(np.interp(np.arange(total, dtype=float), centres, out))


def mstl(seasons: Seasons) -> Candidate:
    """statsmodels MSTL (daily and weekly seasons) + damped level of the adjusted series."""

    def fc(z: np.ndarray, origins: np.ndarray, h: int) -> np.ndarray:
        season = _mstl_seasonal(z, int(origins[0]), z.size + h, seasons)
        a = z - season[: z.size]
        level = fit_level(a[: origins[0]], h)
        return season[_targets(origins, h)] + level.forecast(a, 0, origins, h)

    return fc


def mstl_usable(seasons: Seasons, n_fit: int) -> bool:
    """MSTL needs a day-like season and two of its cycles (down-sampled) to fit."""
    day = seasons.day or seasons.other
    return bool(day) and n_fit >= 2 * (day or 0) + 2
