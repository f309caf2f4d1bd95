#!/usr/bin/env python3
"""How much better than naive can *any* forecaster be on bench/forecast.py's mgrast trace?

mgrast (SOPHIA's MG-RAST shape, :func:`planner.workload.traces.mgrast_like`) jumps between regimes
whose lengths are geometric (mean 12 steps, a few 4x longer) and whose loads are fresh
lognormal draws, with 3 % noise per step: the last value is almost the best forecast there
is. This script scores, on bench/forecast.py's origins and sMAPE, forecasters that know
more than any real one can:

* ``level``: the current regime's noise-free level (naive without the step's noise);
* ``bayes``: that level *and* the generating process - for each lead time, the value with
  the least expected sMAPE under "the regime goes on" (probability from the trace's own
  switch rate) or "a new regime" (a fresh lognormal draw) - the best forecast possible;
* ``clairvoyant``: the level, plus the step at which the regime ends (not knowable).

    .venv/bin/python bench/forecast_oracle.py [--seed-offset K] [--stride 24]

Prints one line per trace draw: each forecaster's sMAPE and its gain over the best of
naive and seasonal naive (issue 19's measure).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from planner.forecast.ensemble import smape
from planner.workload.traces import mgrast_draws

STEPS, HORIZON = 288 * 35, 12  # bench/forecast.py's trace length and horizon
BASE_LOAD, LEVEL_SIGMA, NOISE = 40_000.0, 0.25, 0.03  # mgrast_like's generating values
DRAWS = 4000


def bayes_forecast(level: float, switch_rate: float, rng: np.random.Generator) -> np.ndarray:
    """Per lead time, the value with the least expected sMAPE under the generating process."""
    out = []
    grid = np.linspace(min(level, BASE_LOAD) * 0.8, max(level, BASE_LOAD) * 1.2, 121)
    for h in range(1, HORIZON + 1):
        stays = rng.random(DRAWS) < (1 - switch_rate) ** h
        fresh = BASE_LOAD * rng.lognormal(0.0, LEVEL_SIGMA, DRAWS)
        draws = np.where(stays, level, fresh) * (1 + rng.normal(0.0, NOISE, DRAWS))
        cost = [float(np.mean(smape(draws, np.full(DRAWS, g)))) for g in grid]
        out.append(grid[int(np.argmin(cost))])
    return np.array(out)


def score(seed: int, stride: int) -> dict[str, float]:
    load, _, level, regime_end = mgrast_draws(STEPS, seed)
    n, day, week = load.size, 288, 2016
    origins = np.arange(n - n // 5, n - HORIZON + 1, stride)
    lead = np.arange(HORIZON)
    actual = np.array([load[o : o + HORIZON] for o in origins])
    switch_rate = float(np.mean(np.diff(level) != 0))
    rng = np.random.default_rng(0)
    forecasts = {
        "naive": np.array([np.full(HORIZON, load[o - 1]) for o in origins]),
        "snaive day": np.array([load[o - day : o - day + HORIZON] for o in origins]),
        "snaive week": np.array([load[o - week : o - week + HORIZON] for o in origins]),
        "level": np.array([np.full(HORIZON, level[o - 1]) for o in origins]),
        "bayes": np.array([bayes_forecast(level[o - 1], switch_rate, rng) for o in origins]),
        "clairvoyant": np.array([np.where(o + lead < regime_end[o - 1], level[o - 1], BASE_LOAD)
                                 for o in origins]),
    }
    out = {k: float(np.mean(smape(actual, v))) for k, v in forecasts.items()}
    out["origins"] = float(origins.size)
    out["switch_rate"] = switch_rate
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-offset", type=int, action="append",
                    help="trace draws as bench/forecast.py --seed-offset (default 0 and 100)")
    ap.add_argument("--stride", type=int, default=24, help="steps between origins")
    args = ap.parse_args()
    if args.stride < 1:
        ap.error("--stride: must be >= 1")
    for offset in args.seed_offset or [0, 100]:
        r = score(15 + offset, args.stride)  # bench/forecast.py's mgrast seed is 15 + offset
        best = min(r["naive"], r["snaive day"], r["snaive week"])
        names = ("naive", "snaive day", "snaive week", "level", "bayes", "clairvoyant")
        print(f"mgrast --seed-offset {offset}: {int(r['origins'])} origins, "
              f"{r['switch_rate']:.3f} switches a step; sMAPE "
              + ", ".join(f"{k} {100 * r[k]:.2f} %" for k in names)
              + "; gain over the best baseline: "
              + ", ".join(f"{k} {100 * (1 - r[k] / best):.1f} %"
                          for k in ("level", "bayes", "clairvoyant")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
