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


def register(subparsers: Any) -> None:
    """Add the ``forecast`` sub-command."""
    p = subparsers.add_parser(
        "forecast",
        help="forecast a workload trace (load and operation mix) with intervals",
        description="Forecast the load and operation mix of a trace (CSV or JSON) with "
        "prediction intervals. With --model auto (the default) every applicable model is "
        "backtested on rolling origins and the lowest score wins; the backtest table is "
        "printed and the chosen model is marked with '*'.",
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
        help="auto, naive, seasonal_naive, ets, stl, sarimax, markov1 or markov2 (default auto)",
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
    from planner.forecast import backtest_table, forecast, per_step_table, save_forecast
    from planner.workload import load_trace, resample

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
        if fc.model == name:
            print(f"note: {name}: {note}")
    save_forecast(fc, args.out)
    print(f"wrote {args.out} ({fc.horizon} steps, {int(fc.level * 100)}% intervals)")
    return 0
