"""The backtest-driven ensemble behind ``kairos forecast --model auto``.

1. Rolling-origin backtest: every candidate of :mod:`planner.forecast.candidates` forecasts
   ``h`` steps from each of up to :data:`MAX_ORIGINS` origins spread over the recent history
   (its last half, at most a week and a horizon).
2. Combination: the origins are split in time; on the older half each *scheme* -- every single
   candidate, inverse-MSE weights, inverse squared-MSE weights, the mean of the best three,
   simplex-constrained stacking -- learns weights per horizon bucket; on the newer half the
   scheme with the lowest load sMAPE wins (with a detected season, the mean of its sMAPE on
   both halves, each forecast with the weights learnt on the other: :data:`NEWER_HALF_SHARE`).
   Single candidates are schemes too, so the ensemble is never worse than the best single
   candidate on that error. The winner's weights are then refitted on all origins for the
   forecast.
3. The mix: every class's additive log-ratio is combined the same way (inverse squared-MSE),
   then shrunk towards the last observed mix by a factor per horizon bucket chosen on the
   newer half from 0 (the naive forecast) to 1, so it is never worse than naive there (a
   factor that gains under 1 % over naive there is taken as noise and set to 0).
4. Intervals: split-conformal, per horizon step, widening monotonically. The load's come
   from cross-fitted residuals of log load at every origin (each half forecast with the
   weights learnt on the other half), scaled per hour of the day with the hour either side
   (locally weighted conformal: a bursty night is less predictable than a busy afternoon,
   the hour after a jump less than the one before it); their coverage is
   checked by calibrating on the older half and counting on the newer. The mix's come from
   its cross-fitted residuals per class the same way. The conformal level counts one sample
   per non-overlapping horizon (:mod:`planner.forecast.intervals`).

The load is modelled as ``log(load + c)`` with ``c`` 1 % of the median load, so seasonality
and bursts act multiplicatively and zero loads stay finite.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls

from planner.errors import ValidationError
from planner.forecast import candidates as fcand
from planner.forecast import intervals as fint
from planner.forecast.models import Raw, alr_ref, from_alr, to_alr
from planner.forecast.results import ForecastError

MAX_ORIGINS = 400
DEFAULT_BUDGET_SECONDS = 5.0
SHRINK_GRID = tuple(np.round(np.linspace(0.0, 1.0, 11), 2))
#: profile_daytype looks back at least two weeks (four weekend days)
MIN_DAYTYPE_LAG = 14
#: On a seasonal series the combination scheme is chosen by its error on the newer half
#: (weights from the older) and on the older half (weights from the newer), the newer
#: counting this share (0.5: every origin alike; 1: the newer half alone, as before issue
#: 45's third session and still without a detected season, where regimes change and the
#: older half is only older).
NEWER_HALF_SHARE = 0.5
MIX_CANDIDATES = ("naive", "ses", "profile_day", "profile_week", "ets")
Progress = Callable[[str], None]


def _buckets(h: int) -> list[tuple[int, int]]:
    """Horizon steps grouped 1, 2-3, 4-6, 7-12, 13-24, ...: weights differ by lead time."""
    edges = [0, 1, 3, 6]
    while edges[-1] < h:
        edges.append(edges[-1] * 2)
    edges = [e for e in edges if e < h] + [h]
    return list(itertools.pairwise(edges))


def min_points(h: int) -> int:
    """The shortest history the ensemble backtests (training, then 8 origins)."""
    return max(h, 30) + h + 8


def backtest_origins(n: int, h: int, seasons: fcand.Seasons) -> np.ndarray:
    """Origins over the last half of the history (at most a week and a horizon)."""
    if n < min_points(h):
        raise ValidationError(
            f"trace: {n} points are too few for the ensemble with horizon {h} "
            f"(needs at least {min_points(h)})"
        )
    window = n // 2
    if seasons.week:
        window = min(window, seasons.week + h)
    window = min(window, n - max(h, 30))
    first, last = n - window, n - h
    count = min(MAX_ORIGINS, last - first + 1)
    return np.unique(np.linspace(first, last, count).round().astype(int))


# ------------------------------------------------------------------ candidates
def load_candidates(
    seasons: fcand.Seasons, n_fit: int, h: int, *, mix: bool = False,
    weekday_of: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[dict[str, fcand.Candidate], dict[str, str]]:
    """The applicable candidates, cheapest first, and why the others are left out.

    ``weekday_of`` maps an index of the series to its day of the week (None: the series'
    start is unknown, no day-type candidate).
    """
    out: dict[str, fcand.Candidate] = {"naive": fcand.naive, "ses": fcand.ses}
    skipped: dict[str, str] = {}
    main, k_main = None, 0
    for name, m, k_max in (("day", seasons.day or seasons.other, 7), ("week", seasons.week, 3)):
        k = fcand.profile_seasons(n_fit, m, h, k_max) if m else 0
        if not m or k < 1:
            skipped[f"profile_{name}"] = f"needs {name} seasons of history before the backtest"
            continue
        if not mix:
            out[f"snaive_{name}"] = fcand.seasonal_naive(m)
        out[f"profile_{name}"] = fcand.seasonal_profile(m, k)
        # seasonal indices need one season more than the profile (the trend's moving average)
        if n_fit >= 2 * m + 2:
            main, k_main = m, min(k_max, (n_fit - m) // m)
    if "profile_day" in out and "profile_week" in out:
        out["profile_switch"] = fcand.profile_switch(out["profile_day"], out["profile_week"])
    if not mix and seasons.day and seasons.week and weekday_of is not None:
        lag = fcand.daytype_days(n_fit, seasons.day, h)
        if lag >= MIN_DAYTYPE_LAG:
            out["profile_daytype"] = fcand.daytype_profile(seasons.day, lag, weekday_of)
        else:
            skipped["profile_daytype"] = (f"needs {MIN_DAYTYPE_LAG} days of history before "
                                          "the backtest")
    out["ets"] = fcand.ets_adjusted(main, k_main)
    if mix:
        return {k: v for k, v in out.items() if k in MIX_CANDIDATES}, skipped
    window = 3 * (seasons.day or seasons.other or max(h, 24))
    out["theta"] = fcand.theta_adjusted(main, k_main, window)
    # statsmodels' Theta with the daily season (and the weekly one), as the peer's AutoTheta:
    # the decomposition needs two whole cycles before the first origin
    for name, m in (("day", seasons.day or seasons.other), ("week", seasons.week)):
        if m and n_fit >= 2 * m + 2:
            out[f"sm_theta_{name}"] = fcand.statsmodels_theta(m)
        else:
            skipped[f"sm_theta_{name}"] = f"needs two {name} cycles before the backtest"
    # Fourier terms only for seasons seen twice: fewer cycles extrapolate wildly
    seen = fcand.Seasons(*(m if m and n_fit >= 2 * m else None
                           for m in (seasons.day, seasons.week, seasons.other)))
    if seen.periods():
        out["fourier_ar"] = fcand.fourier_ar(seen, 3 * max(seen.periods()))
    else:
        skipped["fourier_ar"] = "needs two cycles of a season before the backtest"
    if fcand.mstl_usable(seasons, n_fit):
        out["mstl"] = fcand.mstl(seasons)
    else:
        skipped["mstl"] = "needs a daily season and two cycles of history"
    return out, skipped


def _run_candidates(
    cands: dict[str, fcand.Candidate],
    z: np.ndarray,
    origins: np.ndarray,
    h: int,
    deadline: float,
    skipped: dict[str, str],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Backtest and final forecasts of each candidate, until the time budget runs out."""
    back: dict[str, np.ndarray] = {}
    final: dict[str, np.ndarray] = {}
    final_origin = np.array([z.size])
    for name, fn in cands.items():
        if len(back) >= 2 and time.process_time() > deadline:
            skipped[name] = "skipped: time budget spent"
            continue
        try:
            b = fn(z, origins, h)
            f = fn(z, final_origin, h)
        except (ValueError, np.linalg.LinAlgError, StopIteration) as exc:
            skipped[name] = f"failed: {exc}"
            continue
        if _plausible(b, z) and _plausible(f, z):
            back[name], final[name] = b, f[0]
        else:
            skipped[name] = "failed: forecasts non-finite or far outside the observed range"
    if not back:
        raise ForecastError("ensemble: no candidate could forecast this series")
    return back, final


def _plausible(f: np.ndarray, z: np.ndarray) -> bool:
    """Finite and within the observed range widened by its own span (plus e**1 in logs)."""
    lo, hi = float(np.min(z)), float(np.max(z))
    pad = hi - lo + 1.0
    return bool(np.all(np.isfinite(f)) and np.all((f > lo - pad) & (f < hi + pad)))


# ------------------------------------------------------------------ combination
Scheme = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _inverse_mse(power: float) -> Scheme:
    def fit(f: np.ndarray, a: np.ndarray) -> np.ndarray:
        mse = np.mean((f - a[None]) ** 2, axis=(1, 2)) + 1e-12
        w = mse**-power
        return np.asarray(w / w.sum())

    return fit


def _recent_inverse_mse(power: float) -> Scheme:
    """Inverse-MSE weights from errors discounted by age (half-life: an eighth of the origins).

    A candidate that has been right lately counts more than one that was right a week ago:
    what the peer's fixed equal-weight mean cannot do.
    """

    def fit(f: np.ndarray, a: np.ndarray) -> np.ndarray:
        n = a.shape[0]
        age = np.arange(n)[::-1]
        decay = 0.5 ** (age / max(n / 8, 1.0))
        mse = np.einsum("o,coh->c", decay, (f - a[None]) ** 2) / decay.sum() + 1e-12
        w = mse**-power
        return np.asarray(w / w.sum())

    return fit


def _top3(f: np.ndarray, a: np.ndarray) -> np.ndarray:
    mse = np.mean((f - a[None]) ** 2, axis=(1, 2))
    w = np.zeros(f.shape[0])
    w[np.argsort(mse)[:3]] = 1.0
    return w / w.sum()


def _stacked(f: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Least squares on the simplex: NNLS with a heavily weighted sum-to-one row."""
    x = f.reshape(f.shape[0], -1).T
    y = a.ravel()
    scale = 1e3 * max(float(np.abs(x).max()), 1.0)
    w, _ = nnls(np.vstack([x, scale * np.ones(f.shape[0])]), np.append(y, scale))
    return w / w.sum() if w.sum() > 0 else _inverse_mse(1.0)(f, a)


def _single(i: int) -> Scheme:
    def fit(f: np.ndarray, a: np.ndarray) -> np.ndarray:
        w = np.zeros(f.shape[0])
        w[i] = 1.0
        return w

    return fit


def _schemes(names: Sequence[str]) -> dict[str, Scheme]:
    out: dict[str, Scheme] = {f"single:{n}": _single(i) for i, n in enumerate(names)}
    if len(names) > 1:
        out.update(
            inverse_mse=_inverse_mse(1.0), inverse_mse2=_inverse_mse(2.0), stacked=_stacked,
            recent_inverse_mse2=_recent_inverse_mse(2.0),
        )
    if len(names) > 3:
        out["top3"] = _top3
    return out


def _fit_weights(scheme: Scheme, f: np.ndarray, a: np.ndarray, buckets: list[tuple[int, int]]
                 ) -> np.ndarray:
    """Weights per horizon bucket, shape (buckets, candidates)."""
    return np.stack([scheme(f[:, :, lo:hi], a[:, lo:hi]) for lo, hi in buckets])


def _apply(w: np.ndarray, f: np.ndarray, buckets: list[tuple[int, int]]) -> np.ndarray:
    """Combine candidate forecasts ``f`` (C, ..., h) with bucket weights ``w`` (B, C)."""
    out = np.empty(f.shape[1:])
    for b, (lo, hi) in enumerate(buckets):
        out[..., lo:hi] = np.tensordot(w[b], f[..., lo:hi], axes=1)
    return out


def smape(actual: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Symmetric absolute percentage error, elementwise, in [0, 2]."""
    denom = np.abs(actual) + np.abs(pred)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 2 * np.abs(pred - actual) / denom, 0.0)


@dataclass(frozen=True)
class Combination:
    """The chosen scheme, its weights on all origins, and its errors on the newer half."""

    scheme: str
    weights: np.ndarray  # (buckets, candidates), refitted on all origins
    eval_forecast: np.ndarray  # (eval origins, h) in z space, weights from the older half
    cross_forecast: np.ndarray  # (all origins, h): each half with weights from the other
    eval_smape: dict[str, float]  # per scheme, on the newer half


def combine(
    names: Sequence[str], f: np.ndarray, a: np.ndarray, split: int,
    buckets: list[tuple[int, int]], to_load: Callable[[np.ndarray], np.ndarray],
    newer_share: float = 1.0,
) -> Combination:
    """Fit every scheme on origins ``[:split]``, pick the best sMAPE on ``[split:]``, refit.

    With ``newer_share`` < 1 the older half is scored too (with weights fitted on the newer)
    and a scheme's error is ``newer_share`` * newer + (1 - ``newer_share``) * older. Single
    candidates are scored the same way, so the chosen scheme is never worse than the best
    one on that error.
    """
    actual_load = to_load(a[split:])
    actual_all = to_load(a)
    best, best_err, best_fc, best_older = "", math.inf, np.empty(0), np.empty(0)
    errors: dict[str, float] = {}
    for name, scheme in _schemes(names).items():
        w = _fit_weights(scheme, f[:, :split], a[:split], buckets)
        fc = _apply(w, f[:, split:], buckets)
        err = float(np.mean(smape(actual_load, to_load(fc))))
        older = np.empty(0)
        if newer_share < 1:
            # and the older half with the newer half's weights: every origin out of sample
            older = _apply(_fit_weights(scheme, f[:, split:], a[split:], buckets),
                           f[:, :split], buckets)
            err_older = float(np.mean(smape(actual_all[:split], to_load(older))))
            err = newer_share * err + (1 - newer_share) * err_older
        errors[name] = err
        if err < best_err - 1e-12:
            best, best_err, best_fc, best_older = name, err, fc, older
    scheme = _schemes(names)[best]
    weights = _fit_weights(scheme, f, a, buckets)
    # cross-fitted forecasts of the older half, so every residual is out of sample
    if newer_share >= 1:
        best_older = _apply(_fit_weights(scheme, f[:, split:], a[split:], buckets),
                            f[:, :split], buckets)
    return Combination(scheme=best, weights=weights, eval_forecast=best_fc,
                       cross_forecast=np.concatenate([best_older, best_fc]), eval_smape=errors)


def json_float(v: float) -> float | None:
    """A float for the forecast file (JSON has no NaN)."""
    return float(v) if math.isfinite(v) else None


def weights_info(names: Sequence[str], w: np.ndarray) -> dict[str, Any]:
    """Weights per candidate per horizon bucket, dropping candidates weighted 0 throughout."""
    return {n: [round(float(x), 4) for x in w[:, i]] for i, n in enumerate(names)
            if np.any(w[:, i] > 1e-6)}


# ------------------------------------------------------------------ the load
@dataclass(frozen=True)
class Part:
    """One half of the ensemble's output (the load, or the mix) and its backtest."""

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    eval_pred: np.ndarray  # forecasts at the newer half's origins (load, or mix (O, h, C))
    info: dict[str, Any]
    candidate_preds: dict[str, np.ndarray]  # load only: each candidate at the newer origins


def _log_transform(load: np.ndarray) -> tuple[float, Callable[[np.ndarray], np.ndarray]]:
    med = float(np.median(load))
    c = 0.01 * med if med > 0 else max(float(np.mean(load)) * 0.01, 1e-6)
    return c, lambda z: np.maximum(np.exp(z) - c, 0.0)


def load_part(
    load: np.ndarray, origins: np.ndarray, h: int, seasons: fcand.Seasons, level: float,
    *, deadline: float, progress: Progress | None = None,
    weekday_of: Callable[[np.ndarray], np.ndarray] | None = None, newer_share: float = 1.0,
) -> Part:
    """Backtest the load candidates, combine them, and calibrate the intervals.

    ``newer_share``: the newer half's share in the error a scheme is chosen by (see
    :data:`NEWER_HALF_SHARE`).
    """
    c, to_load = _log_transform(load)
    z = np.log(load + c)
    cands, skipped = load_candidates(seasons, int(origins[0]), h, weekday_of=weekday_of)
    back, final = _run_candidates(cands, z, origins, h, deadline, skipped)
    names = list(back)
    f = np.stack([back[n] for n in names])
    a = z[origins[:, None] + np.arange(h)[None, :]]
    split = origins.size // 2
    buckets = _buckets(h)
    comb = combine(names, f, a, split, buckets, to_load, newer_share=newer_share)
    zf = _apply(comb.weights, np.stack([final[n] for n in names]), buckets)
    bands = fint.load_bands(a - comb.cross_forecast, origins, load.size,
                            day=seasons.day or seasons.other, level=level)
    lo, hi, coverage = bands.lower, bands.upper, bands.coverage_check
    singles = {n: comb.eval_smape[f"single:{n}"] for n in names}
    if progress:
        for n in names:
            progress(f"backtest {n}: load sMAPE {100 * singles[n]:.1f}%")
        progress(f"ensemble: {comb.scheme}, load sMAPE {100 * comb.eval_smape[comb.scheme]:.1f}%")
    info = {
        "scheme": comb.scheme,
        "weights": weights_info(names, comb.weights),
        "buckets": [[lo_, hi_] for lo_, hi_ in buckets],
        "load_smape": round(comb.eval_smape[comb.scheme], 6),
        "best_single": min(singles, key=lambda n: singles[n]),
        "candidates_load_smape": {n: round(v, 6) for n, v in singles.items()},
        "schemes_load_smape": {n: round(v, 6) for n, v in comb.eval_smape.items()
                               if not n.startswith("single:")},
        "interval_coverage_check": json_float(coverage),
        "skipped": skipped,
        "log_offset": c,
    }
    return Part(
        mean=to_load(zf), lower=to_load(zf + lo), upper=to_load(zf + hi),
        eval_pred=to_load(comb.eval_forecast), info=info,
        candidate_preds={n: to_load(back[n][split:]) for n in names},
    )


# ------------------------------------------------------------------ the mix
def _tv(pred: np.ndarray, actual: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(pred - actual).sum(axis=-1)


def _mix_coordinates(
    zm: np.ndarray, origins: np.ndarray, h: int, seasons: fcand.Seasons, split: int,
    deadline: float,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Combined log-ratio forecasts: at every origin (O, h, K), cross-fitted, and final (h, K).

    The newer half's forecasts use weights learnt on the older half and the older half's
    weights learnt on the newer, so every one is out of sample (the intervals use them all).
    """
    buckets = _buckets(h)
    evals, finals, used = [], [], {}
    cands, _ = load_candidates(seasons, int(origins[0]), h, mix=True)
    for k in range(zm.shape[1]):
        z = zm[:, k]
        back, final = _run_candidates(cands, z, origins, h, deadline, {})
        names = list(back)
        f = np.stack([back[n] for n in names])
        a = z[origins[:, None] + np.arange(h)[None, :]]
        scheme = _schemes(names).get("inverse_mse2", _single(0))
        w_old = _fit_weights(scheme, f[:, :split], a[:split], buckets)
        w_new = _fit_weights(scheme, f[:, split:], a[split:], buckets)
        w_all = _fit_weights(scheme, f, a, buckets)
        evals.append(np.concatenate([_apply(w_new, f[:, :split], buckets),
                                     _apply(w_old, f[:, split:], buckets)]))
        finals.append(_apply(w_all, np.stack([final[n] for n in names]), buckets))
        used[str(k)] = names
    return np.stack(evals, axis=-1), np.stack(finals, axis=-1), used


def mix_part(
    mix: np.ndarray, origins: np.ndarray, h: int, seasons: fcand.Seasons, level: float,
    *, deadline: float,
) -> Part:
    """Log-ratio forecasts of the mix, shrunk towards the last mix, with conformal bands."""
    ref = alr_ref(mix)
    zm = to_alr(mix, ref)
    split = origins.size // 2
    z_cross, z_final, used = _mix_coordinates(zm, origins, h, seasons, split, deadline)
    z_eval = z_cross[split:]
    newer = origins[split:]
    last_eval = zm[newer - 1][:, None, :]
    actual = mix[newer[:, None] + np.arange(h)[None, :]]
    lam = np.zeros(h)
    shrink = []
    for lo, hi in _buckets(h):
        errs = [
            float(np.mean(_tv(from_alr(last_eval + s * (z_eval[:, lo:hi] - last_eval), ref),
                              actual[:, lo:hi])))
            for s in SHRINK_GRID
        ]
        k = int(np.argmin(errs))  # ties go to the smaller factor
        # a gain under 1 % on the backtest is noise: keep the last mix (factor 0) then
        best = float(SHRINK_GRID[k]) if errs[k] < 0.99 * errs[0] else 0.0
        lam[lo:hi] = best
        shrink.append(best)
    pred = from_alr(last_eval + lam[None, :, None] * (z_eval - last_eval), ref)
    last = zm[-1][None, :]
    mean = from_alr(last + lam[:, None] * (z_final - last), ref)
    lower, upper = np.empty_like(mean), np.empty_like(mean)
    # the intervals from every origin: the shrinkage chosen on the newer half applied to the
    # older half's cross-fitted forecasts too (the newer half alone is three and a half days,
    # which may miss the weekend)
    last_all = zm[origins - 1][:, None, :]
    pred_all = from_alr(last_all + lam[None, :, None] * (z_cross - last_all), ref)
    actual_all = mix[origins[:, None] + np.arange(h)[None, :]]
    checks = []
    for c in range(mix.shape[1]):
        bands = fint.mix_bands(actual_all[:, :, c] - pred_all[:, :, c], origins, mix.shape[0],
                               day=seasons.day or seasons.other, level=level,
                               share=mix[:, c])
        lower[:, c] = np.clip(mean[:, c] + bands.lower, 0.0, 1.0)
        upper[:, c] = np.clip(mean[:, c] + bands.upper, 0.0, 1.0)
        if np.ptp(mix[:, c]) > 0:
            checks.append(bands.coverage_check)
    naive_tv = float(np.mean(_tv(mix[newer - 1][:, None, :], actual)))
    coverage = float(np.mean(checks)) if checks else math.nan
    info = {
        "shrinkage": shrink,
        "mix_tv": round(float(np.mean(_tv(pred, actual))), 6),
        "naive_mix_tv": round(naive_tv, 6),
        "interval_coverage_check": json_float(coverage),
        "candidates": sorted({n for names in used.values() for n in names}),
    }
    return Part(mean=mean, lower=np.minimum(lower, mean), upper=np.maximum(upper, mean),
                eval_pred=pred, info=info, candidate_preds={})


# ------------------------------------------------------------------ together
def ensemble_forecast(
    load: np.ndarray, mix: np.ndarray, *, step_seconds: float, horizon: int, level: float,
    season: int | None = None, budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    progress: Progress | None = None, start: float | None = None,
) -> tuple[Raw, dict[str, Any], dict[str, Part], np.ndarray]:
    """Forecast load and mix with the backtest-weighted ensemble.

    ``start`` is the first point's epoch seconds (the day of the week of every step; None:
    unknown, no day-type candidate). Returns the raw arrays, the ``info["ensemble"]`` record
    for the forecast file, the two parts (for the backtest table) and the newer half's
    origins they were judged on.
    """
    if not budget_seconds > 0:
        raise ValidationError(f"budget_seconds: must be > 0, got {budget_seconds!r}")
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    seasons = fcand.calendar_seasons(step_seconds, season)
    origins = backtest_origins(load.size, horizon, seasons)
    # No load candidate starts after 60 % of the budget, no mix candidate after 90 %;
    # naive and ses always run. The budget is CPU time: on a busy machine the same history
    # gets the same candidates (and the same forecast) whatever the wall clock says.
    weekday_of = (fcand.weekdays(start, step_seconds, seasons.day)
                  if start is not None and seasons.day else None)
    lp = load_part(load, origins, horizon, seasons, level,
                   deadline=cpu_start + 0.6 * budget_seconds, progress=progress,
                   weekday_of=weekday_of,
                   newer_share=NEWER_HALF_SHARE if season else 1.0)
    mp = mix_part(mix, origins, horizon, seasons, level,
                  deadline=cpu_start + 0.9 * budget_seconds)
    seconds = time.perf_counter() - wall_start
    info = {
        "load": lp.info,
        "mix": mp.info,
        "seasons": {"day": seasons.day, "week": seasons.week, "other": seasons.other},
        "backtest": {"origins": int(origins.size), "first": int(origins[0]),
                     "last": int(origins[-1]), "judged_on": int(origins.size - origins.size // 2)},
        "intervals": "split-conformal on backtest residuals (log load; class fractions)",
        "seconds": round(seconds, 3),
        "cpu_seconds": round(time.process_time() - cpu_start, 3),
        "budget_seconds": budget_seconds,
    }
    raw = Raw(load_mean=lp.mean, load_lower=np.minimum(lp.lower, lp.mean),
              load_upper=np.maximum(lp.upper, lp.mean), mix_mean=mp.mean,
              mix_lower=mp.lower, mix_upper=mp.upper)
    return raw, info, {"load": lp, "mix": mp}, origins[origins.size // 2:]
