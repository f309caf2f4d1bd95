"""``kairos forecast``: forecast a workload trace, print the backtest table, write the forecast."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from planner import inputs

#: Interval coverage: 0 and 1 are degenerate intervals.
LEVEL = inputs.bounded_float(0.01, 0.99, why="interval coverage")
#: Backtest folds: each refits every model once.
FOLDS = inputs.bounded_int(1, 50, why="each fold refits every model")
#: The ensemble's time budget per forecast (the autopilot forecasts every tick).
BUDGET = inputs.bounded_float(0.01, 600.0, why="seconds the ensemble may spend")
#: Mirrors planner.forecast.ensemble.DEFAULT_BUDGET_SECONDS (not imported: keeps the CLI's
#: start-up free of numpy/scipy).
DEFAULT_BUDGET_SECONDS = 5.0


def register(subparsers: Any) -> None:
    """Add the ``forecast`` sub-command."""
    p = subparsers.add_parser(
        "forecast",
        help="forecast a workload trace (load and operation mix) with intervals",
        description="Forecast the load and operation mix of a trace (CSV or JSON) with "
        "prediction intervals. With --model auto (the default) cheap candidate models are "
        "backtested on rolling origins of the recent history and combined with weights learnt "
        "there (the ensemble); the mix is shrunk towards the last mix and the intervals are "
        "calibrated on the backtest residuals. The backtest table is printed (the chosen "
        "model marked with '*') and the weights go into the forecast file.",
    )
    p.add_argument("--trace", required=True, metavar="TRACE", help="trace file (.csv or .json)")
    p.add_argument(
        "--horizon", required=True, type=inputs.HORIZON, metavar="N", help="steps to forecast"
    )
    p.add_argument(
        "--step",
        type=inputs.STEP_SECONDS,
        metavar="SECONDS",
        help="resample the trace to this step first (required for irregular traces)",
    )
    p.add_argument(
        "--max-fill",
        type=inputs.bounded_int(0, 10_000, why="empty steps to interpolate"),
        default=0,
        metavar="N",
        help="when resampling, interpolate runs of up to N empty steps (default 0: gaps fail)",
    )
    p.add_argument(
        "--model",
        default="auto",
        help="auto (= ensemble), ensemble, naive, seasonal_naive, ets, stl, sarimax, markov1 "
        "or markov2 (default auto)",
    )
    p.add_argument(
        "--budget", type=BUDGET, default=DEFAULT_BUDGET_SECONDS, metavar="SECONDS",
        help="time budget of the ensemble: expensive candidates not started when most of it "
        f"is spent are skipped (default {DEFAULT_BUDGET_SECONDS:g})",
    )
    p.add_argument(
        "--season-length", type=inputs.SEASON, metavar="L",
        help="season in steps (default: detected)",
    )
    p.add_argument("--level", type=LEVEL, default=0.9, help="interval coverage (default 0.9)")
    p.add_argument("--folds", type=FOLDS, default=3, help="backtest folds (default 3)")
    p.add_argument("--scope", help="scope to use when the trace holds several")
    p.add_argument("--seed", type=inputs.SEED, default=0, help="seed of the Monte Carlo parts")
    p.add_argument(
        "--per-step", action="store_true", help="also print the chosen model's per-step errors"
    )
    p.add_argument("--out", required=True, metavar="FILE", help="forecast JSON to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load, optionally resample, forecast, print the table, write the JSON."""
    from planner.forecast.forecaster import backtest_table, forecast, per_step_table, save_forecast
    from planner.workload.series import load_trace, resample

    series = load_trace(args.trace, scope=args.scope)
    if args.step is not None:
        series = resample(series, args.step, max_fill=args.max_fill)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    print(
        f"forecasting {len(series)} points of {args.trace} ({series.engine}, "
        f"step {series.step_seconds or 'irregular'}s), horizon {args.horizon}, "
        f"model {args.model}",
        file=sys.stderr,
        flush=True,
    )
    fc = forecast(
        series,
        horizon=args.horizon,
        model=args.model,
        season_length=args.season_length,
        level=args.level,
        folds=args.folds,
        seed=args.seed,
        progress=progress,
        budget_seconds=args.budget,
    )
    season = f"{fc.season_length} steps" if fc.season_length else "none detected"
    print(f"season length: {season}; chosen model: {fc.model}")
    if fc.backtest:
        print(backtest_table(fc.backtest, chosen=fc.model))
        chosen = next((b for b in fc.backtest if b.model == fc.model and b.ok), None)
        if args.per_step and chosen is not None:
            print()
            print(per_step_table(chosen))
    for name, note in fc.info.get("notes", {}).items():
        if fc.model == name or fc.model == "ensemble":
            print(f"note: {name}: {note}")
    ens = fc.info.get("ensemble")
    if ens:
        load, mix = ens["load"], ens["mix"]
        weights = ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in load["weights"].items())
        print(f"ensemble: {load['scheme']} ({weights}); mix shrinkage {mix['shrinkage']}, "
              f"mix TV {mix['mix_tv']:.4f} vs naive {mix['naive_mix_tv']:.4f}; "
              f"interval coverage check {_pct(load['interval_coverage_check'])}; "
              f"{ens['seconds']:.2f}s")
    save_forecast(fc, args.out)
    print(f"wrote {args.out} ({fc.horizon} steps, {int(fc.level * 100)}% intervals)")
    return 0


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"
