"""Prediction intervals of the ensemble: split-conformal bands from backtest residuals.

The ensemble's backtest leaves, for every rolling origin, the residuals of its ``h``-step
forecast (log load; class fractions of the mix). This module turns them into bands:

* :func:`conformal_bands` -- finite-sample split-conformal quantiles per horizon step,
  pooled with the neighbouring steps and only widening with lead time;
* :func:`phase_scale` -- the residuals' spread per bin of the day (locally weighted
  conformal: a bursty night is less predictable than a busy afternoon): per hour and the
  band's level quantile, the load's from the hour and the one either side of it;
* :func:`load_bands`, :func:`mix_bands` -- the bands of one forecast and their coverage
  checked out of sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Interval calibration weighs each origin's residuals by its age: half the weight is lost
#: every this share of the origins (None: all origins alike, plain split-conformal).
CALIBRATION_HALF_LIFE: float | None = None


def _weighted_quantile(x: np.ndarray, w: np.ndarray, p: float, *, upper: bool) -> float:
    """The ``p`` quantile of ``x`` under weights ``w`` (the next value up or down)."""
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(w[order]) / w.sum()
    if upper:
        return float(x[order][min(int(np.searchsorted(cum, p - 1e-12)), x.size - 1)])
    return float(x[order][max(int(np.searchsorted(cum, p + 1e-12, side="right")) - 1, 0)])


def row_weights(rows: int, half_life: float | None = None) -> np.ndarray:
    """Recency weights of ``rows`` origins, oldest first (ones without a half-life)."""
    share = CALIBRATION_HALF_LIFE if half_life is None else half_life
    if not share:
        return np.ones(rows)
    return np.asarray(0.5 ** (np.arange(rows)[::-1] / max(share * rows, 1.0)))


def conformal_bands(resid: np.ndarray, level: float, weights: np.ndarray | None = None,
                    *, n_eff: float | None = None, expected: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper residual quantiles per horizon step (pooled with the neighbours).

    Finite-sample split-conformal levels ceil((n+1)(1-q))/n, with ``n`` the effective
    number of rows when the rows are ``weights``-ed (non-exchangeable conformal: recent
    origins count more, so a change of volatility shows in the band), and at most
    ``n_eff``: the number of independent samples the residuals hold (see
    :func:`independent_horizons`). Bands only widen with lead time.

    ``expected``: the level ceil((n+1)(1-q))/(n+1) instead, what the conformal order
    statistic of ``n`` independent samples covers on average (see :func:`conformal_level`).
    """
    h = resid.shape[1]
    q = (1 - level) / 2
    lo, hi = np.empty(h), np.empty(h)
    w_rows = np.ones(resid.shape[0]) if weights is None else weights
    for j in range(h):
        block = resid[:, max(0, j - 1) : j + 2]
        pool = block.ravel()
        w = np.repeat(w_rows, block.shape[1])
        n = float(w.sum() ** 2 / np.sum(w**2))
        if n_eff is not None:
            n = max(1.0, min(n, n_eff))
        k_hi = conformal_level(n, q, expected=expected)
        k_lo = max(0.0, 1.0 - k_hi)
        lo[j] = _weighted_quantile(pool, w, k_lo, upper=False)
        hi[j] = _weighted_quantile(pool, w, k_hi, upper=True)
    lo = np.minimum(np.minimum.accumulate(lo), 0.0)
    hi = np.maximum(np.maximum.accumulate(hi), 0.0)
    return lo, hi


def conformal_level(n: float, q: float, *, expected: bool = False) -> float:
    """The quantile level of a one-sided conformal bound missing at most ``q`` of the time.

    The ceil((n+1)(1-q))-th smallest of ``n`` exchangeable scores bounds a new one with
    probability ceil((n+1)(1-q))/(n+1), at least 1-q: as a quantile of those ``n``, level
    ceil((n+1)(1-q))/n. When the ``n`` independent samples stand behind a pool of many more
    dependent residuals (:func:`independent_horizons`), the pool's quantile at that level is
    about the population's, and covers ceil((n+1)(1-q))/n, more than the order statistic
    does (issue 45: 0.955 at each tail with 336 horizons, the mix classes 91.3 % on average
    at a nominal 90); ``expected`` takes the order statistic's own coverage,
    ceil((n+1)(1-q))/(n+1), still at least 1-q.
    """
    rank = math.ceil((n + 1) * (1 - q))
    return min(1.0, rank / (n + 1 if expected else n))


def independent_horizons(origins: np.ndarray, h: int) -> float:
    """How many non-overlapping horizons the backtest spans: its independent samples.

    Rolling origins a few steps apart forecast overlapping stretches, so their residuals
    move together: a burst or a bad afternoon shows in dozens of rows. Counting every row
    as a sample makes the conformal quantile's finite-sample correction vanish and the
    band too narrow for the next week (bench/forecast.py: 86.0-89.7 % at a nominal 90 on
    three of the four seasonal traces); one sample per horizon of the span is what the data
    can vouch for.
    """
    return max(1.0, float(origins[-1] + h - origins[0]) / h) if origins.size else 1.0


PHASE_BINS = 8  # 3-hour bins of the day: a mix class's with few residuals (hourly steps)
#: A mix class gets its own spread per bin of the day from this many residuals on (5-minute
#: steps: ~200 an hourly bin; hourly steps: few, where one spread fits better).
MIX_BIN_SAMPLES = 100
#: Hourly bins of the day: the load's (:func:`load_scaling`), and the mix's when each holds
#: :data:`MIX_BIN_SAMPLES` residuals on average (5-minute steps), else 3-hour bins (hourly
#: steps). A class fraction jumps at a given hour (a nightly batch window starts, a rush
#: hour's mix sets in); a 3-hour bin averaged that hour with two quiet ones and the band
#: missed it (issue 45: `ops-saas`' read share 85.1 % at a nominal 90).
HOUR_BINS = 24


@dataclass(frozen=True)
class Scaling:
    """How the residuals' spread is taken per bin of the day (locally weighted conformal)."""

    bins: int = PHASE_BINS  # bins of the day
    min_samples: int = 20  # residuals a bin needs for a spread of its own
    #: the spread: the median of the absolute residuals (None) or this quantile of them
    quantile: float | None = None
    #: a bin's spread also from this many bins either side of it (round the day)
    window: int = 0

    def spread(self, resid: np.ndarray, bins: np.ndarray) -> np.ndarray:
        """:func:`phase_scale` of ``resid`` in ``bins`` taken this way."""
        return phase_scale(resid, bins, self.min_samples, n_bins=self.bins,
                           quantile=self.quantile, window=self.window)


def load_scaling(level: float) -> Scaling:
    """The load: per hour of the day, from the residuals of that hour and the one either side
    of it, at the band's ``level`` quantile (issue 45, seventh session).

    A load that jumps at one hour (`ops-saas`' midnight) is hard to forecast there and easy
    two hours later: 3-hour bins from midnight and their median residual (before) gave
    the hour after midnight a third of the spread it had, and forecasts from 00:00 covered
    37 % at a nominal 90 while the quiet hours' covered 100 %. An hour's own spread rests on
    the week's seven days of it; the hours either side steady it, and centre the window
    on the hour, which a 3-hour bin does not.
    """
    return Scaling(bins=HOUR_BINS, min_samples=20, quantile=level, window=1)


def mix_scaling(level: float, residuals: int | None = None) -> Scaling:
    """A mix class: hourly bins, the spread at the band's own level (issue 45).

    With ``residuals`` (how many there are) too few for :data:`MIX_BIN_SAMPLES` an hour on
    average, 3-hour bins (:data:`PHASE_BINS`).

    The median absolute residual of a bin says how noisy its typical step is; a class
    fraction's band is set by its jumps (bursts, a batch window), which a median does not
    see when they touch a third of the bin. The ``level`` quantile of the absolute residuals
    is the spread the band is about.
    """
    bins = HOUR_BINS
    if residuals is not None and residuals < MIX_BIN_SAMPLES * HOUR_BINS:
        bins = PHASE_BINS
    return Scaling(bins=bins, min_samples=MIX_BIN_SAMPLES, quantile=level)


def phase_bins(times: np.ndarray, day: int | None, n_bins: int = PHASE_BINS) -> np.ndarray:
    """The bin of the day each time index falls in (all 0 without a daily season)."""
    if not day:
        return np.zeros(times.shape, dtype=int)
    return np.asarray((times % day) * n_bins // day, dtype=int)


def _spread(a: np.ndarray, quantile: float | None) -> float:
    return float(np.median(a) if quantile is None else np.quantile(a, quantile))


def phase_scale(resid: np.ndarray, bins: np.ndarray, min_samples: int = 20, *,
                n_bins: int = PHASE_BINS, quantile: float | None = None,
                window: int = 0) -> np.ndarray:
    """Spread of the residuals per bin relative to all of them (locally weighted conformal).

    Night-time residuals of a low, bursty load are larger in log terms than daytime ones;
    one width for every hour would over-cover the day and under-cover the night. A bin with
    fewer than ``min_samples`` residuals keeps the overall spread. The spread is the median
    absolute residual, or its ``quantile`` (see :func:`mix_scaling`), of the bin's residuals
    and those of the ``window`` bins either side of it.
    """
    magnitude = np.abs(resid)
    overall = _spread(magnitude, quantile) or 1.0
    scale = np.ones(n_bins)
    for b in range(n_bins):
        near = (b + np.arange(-window, window + 1)) % n_bins
        sel = magnitude[np.isin(bins, near)]
        if sel.size >= min_samples:
            # shrink towards 1 with few samples; never below a third of the overall spread
            w = sel.size / (sel.size + 50.0)
            scale[b] = max(1 / 3, w * _spread(sel, quantile) / overall + (1 - w))
    return scale


def checked_coverage(resid: np.ndarray, bins: np.ndarray, level: float,
                     n_eff: float | None = None, *, scaling: Scaling,
                     expected: bool = False) -> float:
    """Calibrate on the older half of the rows, return the coverage on the newer half.

    ``n_eff`` is the independent samples of all the rows; the older half holds half.
    ``scaling`` takes the spread per bin; ``expected`` as in :func:`conformal_bands`.
    """
    half = resid.shape[0] // 2
    if half < 4:
        return math.nan
    scale = scaling.spread(resid[:half], bins[:half])
    lo, hi = conformal_bands(resid[:half] / scale[bins[:half]], level, row_weights(half),
                             n_eff=None if n_eff is None else n_eff / 2, expected=expected)
    later = resid[half:] / scale[bins[half:]]
    return float(np.mean((later >= lo[None] - 1e-12) & (later <= hi[None] + 1e-12)))


def normalised(resid: np.ndarray, origins: np.ndarray, n: int, *, day: int | None,
               scaling: Scaling) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Residuals over their bin's spread, the bins, and the spread of the forecast's steps."""
    h = resid.shape[1]
    bins = phase_bins(_times(origins, h), day, scaling.bins)
    scale = scaling.spread(resid, bins)
    return resid / scale[bins], bins, scale[phase_bins(n + np.arange(h), day, scaling.bins)]


#: Count the residuals' independent samples as the non-overlapping horizons of the backtest
#: (:func:`independent_horizons`) in the conformal level, not as its rows.
DEPENDENCE_CORRECTION = True


@dataclass(frozen=True)
class Bands:
    """Offsets to add to a point forecast, per horizon step, and their checked coverage."""

    lower: np.ndarray  # (h,), <= 0
    upper: np.ndarray  # (h,), >= 0
    coverage_check: float  # calibrated on the older origins, counted on the newer (NaN: few)


def _times(origins: np.ndarray, h: int) -> np.ndarray:
    return origins[:, None] + np.arange(h)[None, :]


def load_bands(resid: np.ndarray, origins: np.ndarray, n: int, *, day: int | None,
               level: float) -> Bands:
    """The load's bands (log space) for a forecast from ``n``, from the residuals at ``origins``.

    ``resid`` is (origins, h): actual minus the cross-fitted ensemble forecast of log load.
    Scaled per hour of the day (:func:`load_scaling`); the conformal level is the order
    statistic's expected coverage (:func:`conformal_level`), as the mix's.
    """
    return _bands(resid, origins, n, day=day, level=level, scaling=load_scaling(level),
                  expected=True)


#: A class fraction's level is its mean over the day before (without a daily season: this
#: many horizons before).
MIX_LEVEL_HORIZONS = 24
#: ... and at least this far from 0 and 1 (a share under 1 % still moves by count noise).
MIX_LEVEL_FLOOR = 0.01


def share_scale(share: np.ndarray, at: np.ndarray, window: int) -> np.ndarray:
    """p(1-p) of a class fraction's mean ``p`` over the ``window`` steps before each of ``at``.

    The mix moves in log-ratio space (bursts and drifts change a class's odds by a factor),
    so a fraction's step is about p(1-p) times a log-odds step: a share that falls from 8 %
    to 6 % moves a quarter less (issue 45: `ops-ingest`' read share, whose band from the
    older, higher days covered 96.1 % of the next week at a nominal 90).
    """
    cum = np.concatenate([[0.0], np.cumsum(share, dtype=float)])
    at = np.asarray(at, dtype=int)
    start = np.maximum(at - window, 0)
    p = (cum[at] - cum[start]) / np.maximum(at - start, 1)
    p = np.clip(p, MIX_LEVEL_FLOOR, 1.0 - MIX_LEVEL_FLOOR)
    return np.asarray(p * (1.0 - p))


def mix_bands(resid: np.ndarray, origins: np.ndarray, n: int, *, day: int | None,
              level: float, share: np.ndarray | None = None) -> Bands:
    """One class's bands (fractions) for a forecast from ``n``, from its residuals at ``origins``.

    With ``share`` (the class's fraction over the history, ``n`` steps), each residual is taken
    relative to the class's level before its origin and the band scaled to the level before
    ``n`` (:func:`share_scale`). Then scaled per hour of the day by the residuals' ``level``
    quantile (:func:`mix_scaling`); a bin gets its own spread only from
    :data:`MIX_BIN_SAMPLES` residuals on. The conformal level is the order statistic's
    expected coverage (:func:`conformal_level`).
    """
    h = resid.shape[1]
    rows, final = np.ones(origins.size), 1.0
    if share is not None:
        window = day or MIX_LEVEL_HORIZONS * h
        rows = share_scale(share, origins, window)
        final = float(share_scale(share, np.array([n]), window)[0])
    bands = _bands(resid / rows[:, None], origins, n, day=day, level=level,
                   scaling=mix_scaling(level, resid.size), expected=True)
    return Bands(lower=bands.lower * final, upper=bands.upper * final,
                 coverage_check=bands.coverage_check)


def _bands(resid: np.ndarray, origins: np.ndarray, n: int, *, day: int | None, level: float,
           scaling: Scaling, expected: bool = False) -> Bands:
    h = resid.shape[1]
    normed, bins, final_scale = normalised(resid, origins, n, day=day, scaling=scaling)
    n_eff = independent_horizons(origins, h) if DEPENDENCE_CORRECTION else None
    lo, hi = conformal_bands(normed, level, row_weights(resid.shape[0]), n_eff=n_eff,
                             expected=expected)
    coverage = checked_coverage(resid, bins, level, n_eff=n_eff, scaling=scaling,
                                expected=expected)
    return Bands(lower=lo * final_scale, upper=hi * final_scale, coverage_check=coverage)
