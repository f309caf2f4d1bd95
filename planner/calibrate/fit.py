"""Turning measurements into the performance model, and scoring what it claims.

:func:`fit_observations` fits the partially pooled model (:data:`planner.model.performance.POOLED`:
every parameter's and every measured configuration's effect per class, shrunk towards zero
by as much as the runs' own spread says) on every row with
:func:`planner.model.performance.fit_design`, and reports each configuration's effect per mix with
its 95 % interval. An effect consistent across runs and sweeps and larger than their
spread survives; noise is shrunk to nothing. It scores the model by
leave-one-configuration-out MAPE (every configuration predicted by a model that never saw
it: the error a plan meets when it moves to a configuration), beside the unpooled designs
and the mix-only baseline (no configuration terms), which used to be chosen between, all
or nothing. :func:`best_by_mix` and :func:`sweep_drift` read the gains and the cluster's
drift straight from the measurements.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from planner.calibrate.importance import parameter_importance
from planner.calibrate.space import config_key
from planner.calibrate.state import CalibrationState, sweep_of
from planner.errors import ValidationError
from planner.model.performance import (
    LATENCY_COLUMN,
    LATENCY_TARGET,
    MEASURED_COLUMNS,
    POOLED,
    TARGET,
    PerformanceModel,
    configuration_effects,
    fit_design,
)
from planner.workload.series import classes_for

#: The design without configuration terms (the mix alone), scored beside the others.
MIX_ONLY = "mix-only"


def _mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - actual) / actual))


def _predict_rows(model: PerformanceModel, df: pd.DataFrame, params: Sequence[str]) -> np.ndarray:
    classes = model.classes
    out = np.empty(len(df))
    for i, row in enumerate(df.to_dict("records")):
        mix = {c: float(row[c]) for c in classes}
        config = {p: _plain(row[p]) for p in params}
        out[i] = model.predict(mix, config).ops_per_s
    return out


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _row_keys(df: pd.DataFrame, params: Sequence[str]) -> list[str]:
    return [config_key({p: _plain(r[p]) for p in params}) for r in df.to_dict("records")]


def config_means(df: pd.DataFrame, *, engine: str, params: Sequence[str]) -> pd.DataFrame:
    """One row per (configuration, mix): the geometric mean of its measurements.

    Geometric, because the model is fitted on log throughput. This is what a configuration
    delivers under a mix as far as repeated runs can tell, and what the errors of
    :func:`fit_observations` are measured against; with one run per pair it is the row.
    """
    cols = [*classes_for(engine), *params]
    logged = df.assign(**{TARGET: np.log(df[TARGET].astype(float))})
    means = logged.groupby(cols, sort=False, dropna=False)[TARGET].mean().reset_index()
    return means.assign(**{TARGET: np.exp(means[TARGET])})


def repeat_spread(df: pd.DataFrame, *, engine: str, params: Sequence[str]) -> float | None:
    """Run-to-run noise: mean ``|run / its (configuration, mix) geometric mean - 1|`` over the
    pairs measured more than once (None when none was). No model can predict a single run
    better than this."""
    cols = [*classes_for(engine), *params]
    logged = np.log(df[TARGET].astype(float))
    groups = logged.groupby([df[c] for c in cols], sort=False, dropna=False)
    dev = [np.abs(np.exp(g - g.mean()) - 1) for _, g in groups if len(g) > 1]
    return float(np.mean(np.concatenate(dev))) if dev else None


def _folds(df: pd.DataFrame, keys: Sequence[str], *, engine: str, design: str,
           skipped: list[str]) -> Iterator[tuple[str, PerformanceModel]]:
    """Leave-one-configuration-out: each configuration key with the model fitted on the
    other configurations' rows. A fold whose rows cannot fit the design, or with no other
    configuration, is left out and said in ``skipped``."""
    for key in dict.fromkeys(keys):
        held = np.array([k == key for k in keys])
        if held.all():  # one configuration only: nothing to fit the fold on
            skipped.append(f"{key}: no other configuration")
            continue
        try:
            model = fit_design(df[~held], engine=engine, design=design)
        except ValidationError as exc:
            skipped.append(f"{key}: {exc}")
            continue
        yield key, model


def leave_one_config_out(
    df: pd.DataFrame, *, engine: str, design: str, params: Sequence[str],
    mix_only: bool = False,
) -> dict[str, Any]:
    """Predict each configuration from a model fitted on the other configurations' runs.

    ``params`` are the configuration columns (they define the groups). ``mix_only`` fits
    without them: the baseline that says how much the configuration terms explain. The
    prediction is scored against the configuration's measured throughput per mix (the
    geometric mean of its runs, :func:`config_means`). Returns ``{"mape": pooled MAPE over
    the predicted (configuration, mix) pairs or None, "per_config": [...], "skipped":
    [reasons]}``; a fold is skipped when its training rows cannot fit the design (too few
    rows, or parameters that never vary independently there).
    """
    keys = _row_keys(df, params)
    means = config_means(df, engine=engine, params=params)
    mean_keys = _row_keys(means, params)
    fit_df = df.drop(columns=list(params)) if mix_only else df
    actual: list[float] = []
    predicted: list[float] = []
    per_config: list[dict[str, Any]] = []
    skipped: list[str] = []
    for key, model in _folds(fit_df, keys, engine=engine, design=design, skipped=skipped):
        test = means[np.array([k == key for k in mean_keys])]
        pred = _predict_rows(model, test, [] if mix_only else params)
        y = test[TARGET].to_numpy(dtype=float)
        actual.extend(y)
        predicted.extend(pred)
        per_config.append({"config": json.loads(key), "mape": _mape(y, pred)})
    mape = _mape(np.array(actual), np.array(predicted)) if actual else None
    return {"mape": mape, "per_config": per_config, "skipped": skipped}


def _heldout_candidates(
    df: pd.DataFrame, *, engine: str, params: list[str]
) -> dict[str, dict[str, Any]]:
    """Each design's leave-one-configuration-out score, and the mix-only baseline's
    (``MIX_ONLY``); a design that cannot be fitted on every row is ``{"mape": None,
    "error": ...}``."""
    candidates: dict[str, dict[str, Any]] = {}
    for design in ("interaction", "additive", POOLED):
        try:
            if design != POOLED:
                fit_design(df, engine=engine, design=design)
        except ValidationError as exc:
            candidates[design] = {"mape": None, "error": str(exc)}
            continue
        candidates[design] = leave_one_config_out(df, engine=engine, design=design,
                                                  params=params)
    candidates[MIX_ONLY] = leave_one_config_out(df, engine=engine, design="interaction",
                                                params=params, mix_only=True)
    return candidates


def fit_observations(
    df: pd.DataFrame, *, engine: str, name: str | None = None
) -> tuple[PerformanceModel | None, dict[str, Any]]:
    """Fit the partially pooled model on every row; score it by leave-one-configuration-out.

    Returns ``(model or None, report)``; the model is None (and ``report["error"]`` says why)
    when the rows cannot fit it. The report holds the held-out MAPE of the pooled model
    (None when no fold could be fitted) and of the unpooled designs and the mix-only
    baseline (``candidates``; ``selected_by_heldout``: the one the former all-or-nothing
    selection kept), the in-sample MAPE of the model and of the baseline, all against the
    (configuration, mix) geometric means of the runs; the runs' own spread
    (``repeat_spread``); and every configuration's effect per mix against the first
    configuration of the rows (the original), with its 95 % interval (``effects``); and the
    parameters ranked by importance, each said kept or not (``importance``,
    ``importance_interactions``: :func:`planner.calibrate.importance.parameter_importance`).
    With the runs' ``p99_ms`` the model predicts p99 latency too, scored in ``latency``
    (:func:`latency_report`).
    """
    classes = classes_for(engine)
    p99 = df[LATENCY_COLUMN] if LATENCY_COLUMN in df.columns else None
    df = df.drop(columns=[c for c in MEASURED_COLUMNS if c in df.columns])
    params = [c for c in df.columns if c not in (*classes, TARGET)]
    report: dict[str, Any] = {
        "n_observations": len(df),
        "n_configurations": len(set(_row_keys(df, params))),
        "params": [p for p in params if df[p].astype(str).nunique() > 1],
        "validation": "leave-one-configuration-out",
    }
    model_name = name or f"{engine}-calibrated"
    try:
        model = fit_design(df if p99 is None else df.assign(**{LATENCY_COLUMN: p99}),
                           engine=engine, design=POOLED, name=model_name)
    except ValidationError as exc:
        report.update({"candidates": {}, "error": str(exc), "heldout_mape": None})
        return None, report
    candidates = _heldout_candidates(df, engine=engine, params=params)
    baseline = candidates[MIX_ONLY]
    report["candidates"] = {d: c.get("mape") for d, c in candidates.items()}
    # The former rule, all or nothing: the lowest held-out error among the unpooled designs
    # and the mix alone. Kept for comparison only.
    scored = [d for d in ("interaction", "additive", MIX_ONLY)
              if candidates[d].get("mape") is not None]
    report["selected_by_heldout"] = min(
        scored, key=lambda d: (candidates[d]["mape"], d == MIX_ONLY)) if scored else None
    means = config_means(df, engine=engine, params=params)
    y = means[TARGET].to_numpy(dtype=float)
    baseline_in_sample: float | None = None
    with contextlib.suppress(ValidationError):
        mix_model = fit_design(df, engine=engine, design="interaction", params=[])
        baseline_in_sample = _mape(y, _predict_rows(mix_model, means, []))
    fit = model.info["fit"]
    effects = _effects(model, df, params, classes)
    importance, interactions = parameter_importance(model, df, params=params)
    report.update({
        "design": POOLED,
        "heldout_mape": candidates[POOLED].get("mape"),
        "heldout_per_config": candidates[POOLED].get("per_config", []),
        "heldout_skipped": candidates[POOLED].get("skipped", []),
        "in_sample_mape": _mape(y, _predict_rows(model, means, params)),
        "repeat_spread": repeat_spread(df, engine=engine, params=params),
        "baseline_heldout_mape": baseline["mape"],
        "baseline_in_sample_mape": baseline_in_sample,
        "r_squared": fit["r_squared"],
        "sigma": model.sigma,
        "tau": fit.get("tau", {}),
        "tau_interval": fit.get("tau_interval", {}),
        "effects": effects,
        "effects_excluding_zero": sum(e["excludes_zero"] for e in effects),
        "importance": importance,
        "importance_interactions": interactions,
        "notes": fit["notes"],
    })
    if p99 is not None:
        report["latency"] = latency_report(df.assign(**{LATENCY_COLUMN: p99}), model,
                                           engine=engine, params=params)
    return model, report


def _p99_means(df: pd.DataFrame, *, engine: str, params: Sequence[str]) -> pd.DataFrame:
    """One row per (configuration, mix): the geometric mean of its runs' p99 (ms)."""
    cols = [*classes_for(engine), *params]
    logged = df.assign(**{LATENCY_COLUMN: np.log(df[LATENCY_COLUMN].astype(float))})
    means = logged.groupby(cols, sort=False, dropna=False)[LATENCY_COLUMN].mean().reset_index()
    return means.assign(**{LATENCY_COLUMN: np.exp(means[LATENCY_COLUMN])})


def _predict_p99_rows(model: PerformanceModel, df: pd.DataFrame,
                      params: Sequence[str]) -> np.ndarray:
    classes = model.classes
    return np.array([
        model.predict_p99_matrix([{c: float(row[c]) for c in classes}],
                                 [{p: _plain(row[p]) for p in params}])[0, 0]
        for row in df.to_dict("records")])


def latency_report(df: pd.DataFrame, model: PerformanceModel, *, engine: str,
                   params: Sequence[str]) -> dict[str, Any]:
    """How well the model's p99 (:class:`planner.model.performance.LatencyTerms`) meets the runs'.

    ``df`` holds ``p99_ms`` beside the rows ``model`` was fitted on. Errors are against each
    (configuration, mix)'s geometric mean p99, in sample and leave-one-configuration-out
    (every fold refitted with its p99): the latter includes the throughput's own error,
    since the predicted p99 is the tail over the predicted throughput. ``fitted`` False
    (and ``why``) when the model has no latency terms (a p99 missing in some row).
    """
    if model.latency is None:
        why = model.info.get("fit", {}).get("latency") or f"no {LATENCY_COLUMN}"
        return {"fitted": False, "why": why}
    means = _p99_means(df, engine=engine, params=params)
    y = means[LATENCY_COLUMN].to_numpy(dtype=float)
    keys, mean_keys = _row_keys(df, params), _row_keys(means, params)
    actual: list[float] = []
    predicted: list[float] = []
    skipped: list[str] = []
    for key, fold in _folds(df, keys, engine=engine, design=POOLED, skipped=skipped):
        if fold.latency is None:
            skipped.append(f"{key}: {fold.info['fit'].get('latency')}")
            continue
        test = means[np.array([k == key for k in mean_keys])]
        actual.extend(test[LATENCY_COLUMN].to_numpy(dtype=float))
        predicted.extend(_predict_p99_rows(fold, test, params))
    info = model.latency.info
    return {
        "fitted": True,
        "target": LATENCY_TARGET,
        "in_sample_mape": _mape(y, _predict_p99_rows(model, means, params)),
        "heldout_mape": _mape(np.array(actual), np.array(predicted)) if actual else None,
        "heldout_skipped": skipped,
        "r_squared": info.get("r_squared"),
        "sigma": model.latency.sigma,
        "tau": info.get("tau", {}),
    }


def _effects(model: PerformanceModel, df: pd.DataFrame, params: Sequence[str],
             classes: Sequence[str]) -> list[dict[str, Any]]:
    """Every measured configuration's effect per measured mix against the first row's
    configuration (:func:`planner.model.performance.configuration_effects`); mixes are named by
    their fractions."""
    if not params:
        return []
    mixes: dict[str, dict[str, float]] = {}
    for row in df[list(classes)].drop_duplicates().to_dict("records"):
        label = ", ".join(f"{c}={float(v):g}" for c, v in row.items() if v)
        mixes[label] = {c: float(v) for c, v in row.items()}
    configs = [json.loads(k) for k in dict.fromkeys(_row_keys(df, params))]
    return configuration_effects(model, mixes, configs, configs[0])


def _geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def best_by_mix(state: CalibrationState) -> dict[str, dict[str, Any]]:
    """Per mix: the best measured configuration against the original.

    Each configuration counts with the geometric mean of its runs (every sweep; the final
    re-measurement excluded). With one sweep, the original's runs are those taken first (the
    start of the calibration); after :func:`recheck_original`, its re-measured figure and
    its drift are given too: a gain smaller than that drift is not one to stand behind. With
    several sweeps the original's runs span the calibration like every other
    configuration's, so the gain is free of a linear drift; its drift is then its last sweep
    against its first (``original_first_sweep_ops_per_s``, ``original_last_sweep_ops_per_s``).
    """
    out: dict[str, dict[str, Any]] = {}
    original = config_key(state.original)
    last = state.sweeps
    for mix in state.mixes:
        runs: dict[str, list[float]] = {}
        recheck: list[float] = []
        by_sweep: dict[int, list[float]] = {}
        for m in state.measurements:
            if m["mix"] != mix or not m.get("ops_per_s", 0) > 0:
                continue
            sweep = sweep_of(m)
            if sweep is None:
                recheck.append(m["ops_per_s"])
                continue
            key = config_key(m["config"])
            runs.setdefault(key, []).append(m["ops_per_s"])
            if key == original:
                by_sweep.setdefault(sweep, []).append(m["ops_per_s"])
        if not runs:
            continue
        means = {key: _geomean(v) for key, v in runs.items()}
        best = max(means, key=lambda key: means[key])
        base = means.get(original)
        entry: dict[str, Any] = {
            "best_config": json.loads(best),
            "best_ops_per_s": round(means[best], 1),
            "best_runs": len(runs[best]),
            "original_ops_per_s": round(base, 1) if base else None,
            "gain": means[best] / base - 1 if base else None,
        }
        again = _geomean(recheck) if recheck else None
        entry.update({
            "original_recheck_ops_per_s": round(again, 1) if again else None,
            "gain_over_recheck": means[best] / again - 1 if again else None,
        })
        if last > 1:
            first_s = _geomean(by_sweep[1]) if by_sweep.get(1) else None
            last_s = _geomean(by_sweep[last]) if by_sweep.get(last) else None
            entry.update({
                "original_first_sweep_ops_per_s": round(first_s, 1) if first_s else None,
                "original_last_sweep_ops_per_s": round(last_s, 1) if last_s else None,
                "original_drift": last_s / first_s - 1 if first_s and last_s else None,
            })
        else:
            entry["original_drift"] = again / base - 1 if again and base else None
        out[mix] = entry
    return out


def sweep_drift(state: CalibrationState) -> dict[str, Any] | None:
    """How far the whole cluster moved between the first and the last sweep: the geometric
    mean over every (configuration, mix) measured in both of last / first (None with one
    sweep, or before the last sweep measured anything)."""
    if state.sweeps < 2:
        return None
    runs: dict[tuple[str, str, int], list[float]] = {}
    for m in state.measurements:
        sweep = sweep_of(m)
        if sweep in (1, state.sweeps) and m.get("ops_per_s", 0) > 0:
            runs.setdefault((config_key(m["config"]), m["mix"], sweep), []).append(
                m["ops_per_s"])
    ratios = [_geomean(runs[(c, mix, state.sweeps)]) / _geomean(v)
              for (c, mix, sweep), v in runs.items()
              if sweep == 1 and (c, mix, state.sweeps) in runs]
    if not ratios:
        return None
    return {"first_to_last": _geomean(ratios) - 1, "pairs": len(ratios),
            "per_pair_range": [min(ratios) - 1, max(ratios) - 1]}

