"""Forecast the workload (load and operation mix) with prediction intervals.

``forecast(series, horizon=H)`` (``model="auto"``, the default) runs the backtest-driven
ensemble of :mod:`planner.forecast.ensemble`: cheap candidates (naive, seasonal naive, seasonal
profiles, ETS, Theta, Fourier regression, MSTL) are backtested on hundreds of rolling origins
of the recent history and combined with weights learnt on that backtest; the mix is forecast
in log-ratio space and shrunk towards the last mix; intervals are split-conformal from the
backtest residuals. The weights, the backtest errors and the interval coverage check are
written into the forecast's ``info["ensemble"]``.

The single models of :mod:`planner.forecast.models` (``naive``, ``seasonal_naive``, ``ets``,
``stl``, ``sarimax``, ``markov1``, ``markov2``) remain available by name, and
``model="auto"`` with explicit ``candidates`` still selects the single model with the lowest
*score* = 0.5 * mean load sMAPE / 2 + 0.5 * mean mix total-variation distance.

The values (:class:`Forecast`, :class:`BacktestResult`) and their file live in
:mod:`planner.forecast.results`; this module re-exports them. See docs/forecasting.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from planner.errors import ValidationError
from planner.forecast.ensemble import (
    DEFAULT_BUDGET_SECONDS,
    Part,
    ensemble_forecast,
    min_points,
    smape,
)
from planner.forecast.models import SINGLE_MODELS, Raw, raw_forecast
from planner.forecast.results import (
    FORECAST_KIND,
    BacktestResult,
    Forecast,
    ForecastError,
    check_forecast_units,
    kl_radius,
    load_forecast,
    mix_kl,
    save_forecast,
)
from planner.workload.series import WorkloadSeries

__all__ = [
    "AUTO_MODELS",
    "DEFAULT_BUDGET_SECONDS",
    "FORECAST_KIND",
    "MODELS",
    "BacktestResult",
    "Forecast",
    "ForecastError",
    "backtest",
    "backtest_table",
    "check_forecast_units",
    "forecast",
    "infer_season_length",
    "load_forecast",
    "per_step_table",
    "save_forecast",
]

#: Every model name ``--model`` accepts besides ``auto`` (which means ``ensemble``).
MODELS: tuple[str, ...] = (*SINGLE_MODELS, "ensemble")
#: The single models ``auto`` selects from when ``candidates`` are not given explicitly.
AUTO_MODELS: tuple[str, ...] = ("naive", "seasonal_naive", "ets", "stl", "markov1", "markov2")
SEASONAL_MODELS: frozenset[str] = frozenset({"seasonal_naive", "stl", "sarimax"})
Progress = Callable[[str], None]


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
    step = _check_regular(series)
    _check_args(horizon=horizon, level=level)
    if folds < 1:
        raise ValidationError(f"folds: must be >= 1, got {folds}")
    _check_model_applicable(model, season_length)
    n = len(series)
    min_train = _min_train(model, season_length, horizon)
    origins = [n - (folds - k) * horizon for k in range(folds)]
    if origins[0] < min_train:
        raise ValidationError(
            f"trace: {n} points are too few to backtest {model} over {folds} fold(s) of "
            f"{horizon} steps (needs at least {min_train + folds * horizon})"
        )
    start = time.perf_counter()
    load, mixm = series.load, series.mix_matrix()
    errs, sq, sm, mae, tv, kl, inside = [], [], [], [], [], [], []
    for k, o in enumerate(origins):
        raw = _raw(model, load[:o], mixm[:o], horizon, season_length, level, seed + k, step,
                   float(series.timestamps[0]))
        a_load, a_mix = load[o : o + horizon], mixm[o : o + horizon]
        diff = raw.load_mean - a_load
        errs.append(np.abs(diff))
        sq.append(diff**2)
        sm.append(smape(a_load, raw.load_mean))
        mae.append(np.abs(raw.mix_mean - a_mix).mean(axis=1))
        tv.append(0.5 * np.abs(raw.mix_mean - a_mix).sum(axis=1))
        kl.append(mix_kl(a_mix, raw.mix_mean))
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
        mix_kl_radius=kl_radius(np.asarray(kl), level),
    )


def _raw(
    model: str, load: np.ndarray, mix: np.ndarray, h: int, season: int | None, level: float,
    seed: int, step: float, start: float | None = None,
) -> Raw:
    """One forecast of a named model (the ensemble included) from the given history."""
    if model == "ensemble":
        return ensemble_forecast(
            load, mix, step_seconds=step, horizon=h, level=level, season=season, start=start
        )[0]
    return raw_forecast(model, load, mix, h, season, level, seed)


def _min_train(model: str, season: int | None, horizon: int = 1) -> int:
    if model == "ensemble":
        return min_points(horizon)
    if model in ("stl", "sarimax", "ets") and season:
        return 2 * season + 2
    if model == "seasonal_naive" and season:
        return season + 1
    return 10


def min_history(model: str, horizon: int) -> int:
    """The fewest points :func:`forecast` takes for ``model`` ("auto": the ensemble's), before
    any season is found: a seasonal model on a season found later may need more."""
    return _min_train("ensemble" if model == "auto" else model, None, horizon)


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
    budget_seconds: float = DEFAULT_BUDGET_SECONDS,
) -> Forecast:
    """Forecast ``horizon`` steps of ``series`` with intervals.

    Parameters
    ----------
    series : WorkloadSeries
        A regular series (``step_seconds`` set; resample irregular traces first).
    horizon : int
        Number of future steps.
    model : str, default "auto"
        ``"auto"`` or ``"ensemble"``: the backtest-weighted ensemble (see the module
        docstring); or one of the single models of :data:`MODELS`.
    season_length : int, optional
        Season in steps; detected with :func:`infer_season_length` when omitted. The
        ensemble also uses the day and the week whenever the step divides them.
    level : float, default 0.9
        Nominal coverage of the intervals.
    folds : int, default 3
        Backtest folds of the single models (each ``horizon`` steps long). The ensemble
        backtests on up to 400 rolling origins instead.
    candidates : sequence of str, optional
        With ``model="auto"``: select the best single model among these instead of the
        ensemble.
    seed : int
        Seeds the Monte Carlo parts of the single models (Markov paths, ETS simulation).
    progress : callable, optional
        Receives one line per model backtested (the CLI prints them on stderr).
    budget_seconds : float, default 5
        The ensemble's time budget in CPU seconds of this process: load candidates not
        started when 60 % of it is spent (mix candidates: 90 %) are skipped (and listed in
        ``info["ensemble"]["load"]["skipped"]``). CPU time, so a busy machine does not change
        the forecast.

    Returns
    -------
    Forecast
        ``backtest`` holds the chosen model's backtest first, then the other candidates.

    Raises
    ------
    ValidationError
        Irregular series, bad arguments, unknown model, or a series too short.
    ForecastError
        The requested model failed to fit, or every candidate failed.
    """
    step = _check_regular(series)
    _check_args(horizon=horizon, level=level)
    season = _season(series, season_length)
    info: dict[str, Any] = {"seed": seed}
    if model in ("auto", "ensemble") and candidates is None:
        raw, ens, parts, newer = ensemble_forecast(
            series.load, series.mix_matrix(), step_seconds=step, horizon=horizon, level=level,
            season=season, budget_seconds=budget_seconds, progress=progress,
            start=float(series.timestamps[0]),
        )
        chosen, results = "ensemble", _ensemble_backtests(series, parts, newer, horizon, ens,
                                                          level)
        info.update(selection="ensemble", ensemble=ens, notes=ens["load"]["skipped"])
    else:
        chosen, results, notes = _single_model(
            series, model=model, horizon=horizon, season=season, level=level, folds=folds,
            candidates=candidates, seed=seed, progress=progress,
        )
        raw = raw_forecast(chosen, series.load, series.mix_matrix(), horizon, season, level, seed)
        info.update(notes=notes, selection="auto" if model == "auto" else "fixed")
    return _wrap(series, raw, model=chosen, level=level, step=step, season=season,
                 results=results, info=info)


def _wrap(
    series: WorkloadSeries, raw: Raw, *, model: str, level: float, step: float,
    season: int | None, results: list[BacktestResult], info: dict[str, Any],
) -> Forecast:
    """The raw arrays as a Forecast for the steps after the series' last."""
    classes = series.classes
    horizon = raw.load_mean.size

    def cols(a: np.ndarray) -> dict[str, np.ndarray]:
        return {c: a[:, j] for j, c in enumerate(classes)}

    return Forecast(
        engine=series.engine,
        timestamps=series.timestamps[-1] + step * np.arange(1, horizon + 1),
        load_mean=raw.load_mean,
        load_lower=raw.load_lower,
        load_upper=raw.load_upper,
        mix_mean=cols(raw.mix_mean),
        mix_lower=cols(raw.mix_lower),
        mix_upper=cols(raw.mix_upper),
        level=level,
        model=model,
        step_seconds=step,
        backtest=tuple(results) if results else None,
        season_length=season,
        scope=series.scope,
        info=info,
    )


def _season(series: WorkloadSeries, season_length: int | None) -> int | None:
    if season_length is not None and (
        not isinstance(season_length, int) or season_length < 2 or season_length > len(series) // 2
    ):
        raise ValidationError(
            f"season_length: must be an integer in [2, {len(series) // 2}], got {season_length!r}"
        )
    return season_length if season_length is not None else infer_season_length(series)


def _single_model(
    series: WorkloadSeries, *, model: str, horizon: int, season: int | None, level: float,
    folds: int, candidates: Sequence[str] | None, seed: int, progress: Progress | None,
) -> tuple[str, list[BacktestResult], dict[str, str]]:
    """Backtest one named model, or select the lowest score among ``candidates``."""
    notes: dict[str, str] = {}
    results: list[BacktestResult] = []
    if model != "auto":
        _check_model_applicable(model, season)
    pool = list(candidates or AUTO_MODELS) if model == "auto" else [model]
    for name in pool:
        if name not in MODELS:
            raise ValidationError(f"candidates: unknown model {name!r}")
    for name in pool:
        if name in SEASONAL_MODELS and not season:
            notes[name] = "skipped: no season detected"
            results.append(_failed(name, horizon, notes[name]))
            continue
        try:
            res = backtest(series, model=name, horizon=horizon, folds=folds,
                           season_length=season, level=level, seed=seed)
        except (ForecastError, ValidationError) as exc:
            if model != "auto" and isinstance(exc, ForecastError):
                raise
            notes[name] = f"{'skipped' if model == 'auto' else 'not backtested'}: {exc}"
            if model == "auto":
                results.append(_failed(name, horizon, str(exc)))
            continue
        results.append(res)
        if progress:
            progress(_progress_line(res))
    chosen = model
    if model == "auto":
        usable = [r for r in results if r.ok]
        if not usable:
            raise ForecastError(
                "no model could be backtested: " + "; ".join(f"{k}: {v}" for k, v in notes.items())
            )
        chosen = min(usable, key=lambda r: r.score).model
        results.sort(key=lambda r: (r.model != chosen, not r.ok, r.score if r.ok else math.inf))
    if len(series) < _min_train(chosen, season, horizon):
        raise ValidationError(
            f"trace: {len(series)} points are too few for {chosen} "
            f"(needs at least {_min_train(chosen, season, horizon)})"
        )
    return chosen, results, notes


def _scored(
    name: str, horizon: int, origins: np.ndarray, a_load: np.ndarray, p_load: np.ndarray,
    a_mix: np.ndarray, p_mix: np.ndarray | None, coverage: float, seconds: float = 0.0,
    level: float = 0.9,
) -> BacktestResult:
    """A BacktestResult from forecasts at many origins (rows) against the actuals."""
    diff = p_load - a_load
    load_smape = np.mean(smape(a_load, p_load), axis=0)
    radius = math.nan
    if p_mix is None:  # a load-only candidate: the mix comes from the mix ensemble
        mix_mae = mix_tv = np.full(horizon, np.nan)
    else:
        mix_mae = np.mean(np.abs(p_mix - a_mix).mean(axis=-1), axis=0)
        mix_tv = np.mean(0.5 * np.abs(p_mix - a_mix).sum(axis=-1), axis=0)
        radius = kl_radius(mix_kl(a_mix, p_mix), level)
    return BacktestResult(
        model=name, horizon=horizon, origins=tuple(int(o) for o in origins),
        load_mae=np.mean(np.abs(diff), axis=0), load_rmse=np.sqrt(np.mean(diff**2, axis=0)),
        load_smape=load_smape, mix_mae=mix_mae, mix_tv=mix_tv, load_coverage=coverage,
        score=float(0.5 * np.mean(load_smape) / 2 + 0.5 * np.mean(mix_tv)), seconds=seconds,
        mix_kl_radius=radius,
    )


def _ensemble_backtests(
    series: WorkloadSeries, parts: dict[str, Part], newer: np.ndarray, horizon: int,
    info: dict[str, Any], level: float,
) -> list[BacktestResult]:
    """The ensemble's and each load candidate's errors on the newer half of the origins."""
    targets = newer[:, None] + np.arange(horizon)[None, :]
    a_load, a_mix = series.load[targets], series.mix_matrix()[targets]
    coverage = info["load"]["interval_coverage_check"]
    out = [_scored("ensemble", horizon, newer, a_load, parts["load"].eval_pred, a_mix,
                   parts["mix"].eval_pred, math.nan if coverage is None else coverage,
                   info["seconds"], level)]
    naive_mix = np.repeat(series.mix_matrix()[newer - 1][:, None, :], horizon, axis=1)
    for name, pred in parts["load"].candidate_preds.items():
        out.append(_scored(name, horizon, newer, a_load, pred, a_mix,
                           naive_mix if name == "naive" else None, math.nan, level=level))
    return out


def _progress_line(res: BacktestResult) -> str:
    if not res.ok:
        return f"backtest {res.model}: skipped ({res.error})"
    s = res.summary()
    return (
        f"backtest {res.model}: load sMAPE {100 * s['load_smape']:.1f}%, "
        f"mix TV {s['mix_tv']:.3f} ({res.seconds:.1f}s)"
    )


def _cell(v: float, width: int, fmt: str) -> str:
    return f"{v:>{width}{fmt}}" if math.isfinite(v) else f"{'-':>{width}}"


def backtest_table(results: Sequence[BacktestResult], *, chosen: str | None = None) -> str:
    """A plain-text table of backtest summaries; the chosen model is marked with ``*``.

    A dash marks what was not measured (a load-only ensemble candidate has no mix errors).
    """
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
            f"{100 * s['load_smape']:>9.2f}{_cell(s['mix_mae'], 9, '.4f')}"
            f"{_cell(s['mix_tv'], 8, '.4f')}{_cell(100 * s['load_coverage'], 9, '.1f')}"
            f"{_cell(s['score'], 8, '.4f')}{r.seconds:>6.1f}"
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
