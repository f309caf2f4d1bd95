"""Forecast benchmark: the ``auto`` ensemble against naive and seasonal naive.

Run from the repository root (takes a few minutes per trace on 2 cores)::

    .venv/bin/python bench/forecast.py            # every trace, markdown table on stdout
    .venv/bin/python bench/forecast.py --json     # one JSON line per trace instead
    .venv/bin/python bench/forecast.py --seed-offset 100   # other draws of the same shapes

Traces (all generated, seeded, shipped as code; no data file, no licence beyond the
project's): 35 days at 5 minutes (10,080 points) of

* ``ops-web``, ``ops-saas``, ``ops-ingest`` -- :func:`planner.traces.ops_like` (daily and
  weekly seasons, a holiday, trend changes, a level shift, bursts with their own mix, dips,
  AR(1) noise, a mix that moves with the load; the profiles are documented there);
* ``bus`` -- :func:`planner.traces.bus_tracking_like` (SOPHIA's bus-tracking shape: a daily
  season only, rush-hour mix changes);
* ``mgrast`` -- :func:`planner.traces.mgrast_like` (SOPHIA's MG-RAST shape: random regime
  switches, no season). A stress case: there is no season to exploit.

Protocol (as issue 19's measurement): rolling origins over the last 20 % of each trace
(every ``--stride`` steps), horizon 12 steps, each forecast made by
``planner.forecast.forecast`` (model ``auto``, level 0.9, default time budget) from at most
the 4 weeks (8,064 points) before its origin, so nothing after the origin is seen.

Columns: load sMAPE of the ensemble, of naive (last value) and of seasonal naive (the value
one day, and one week, before); the gain is ``1 - ens / min(naive, snaive day, snaive week)``
(the issue's target is >= 10 %); MASE scales the MAE by the in-sample MAE of the one-day
seasonal naive over the first 4 weeks; mix TV is the total-variation distance of the mix
forecast and of the last observed mix (naive); coverage is the share of actual loads inside
the 90 % interval; seconds per forecast is mean (max) wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

# keep bench/ off sys.path so `planner` is the package (see bench/planner.py)
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from planner import traces  # noqa: E402
from planner.forecast import forecast  # noqa: E402
from planner.forecast_ensemble import smape  # noqa: E402
from planner.workload import WorkloadSeries  # noqa: E402

STEPS = 288 * 35
HISTORY = 288 * 28
HORIZON = 12
LEVEL = 0.9
#: name -> generator of the trace from a seed offset (0: the documented traces)
TRACES: dict[str, Callable[[int], WorkloadSeries]] = {
    "ops-web": lambda k: traces.ops_like(profile="web", steps=STEPS, seed=11 + k),
    "ops-saas": lambda k: traces.ops_like(profile="saas", steps=STEPS, seed=12 + k),
    "ops-ingest": lambda k: traces.ops_like(profile="ingest", steps=STEPS, seed=13 + k),
    "bus": lambda k: traces.bus_tracking_like(steps=STEPS, seed=14 + k),
    "mgrast": lambda k: traces.mgrast_like(steps=STEPS, step_seconds=300.0, seed=15 + k),
}


def evaluate(series: WorkloadSeries, stride: int) -> dict[str, float]:
    """Rolling-origin evaluation over the last 20 % of ``series``."""
    n, h = len(series), HORIZON
    load, mix = series.load, series.mix_matrix()
    day, week = 86400 // int(series.step_seconds or 300), 604800 // int(series.step_seconds or 300)
    origins = np.arange(n - n // 5, n - h + 1, stride)
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("ens", "naive", "sday", "sweek", "act",
                                                          "mix_e", "mix_n", "mix_a", "inside")}
    seconds = []
    for o in origins:
        hist = series.slice(max(0, o - HISTORY), o)
        t0 = time.perf_counter()
        fc = forecast(hist, horizon=h, level=LEVEL)
        seconds.append(time.perf_counter() - t0)
        actual = load[o : o + h]
        rows["act"].append(actual)
        rows["ens"].append(np.asarray(fc.load_mean))
        rows["naive"].append(np.full(h, load[o - 1]))
        rows["sday"].append(load[o - day : o - day + h])
        rows["sweek"].append(load[o - week : o - week + h])
        rows["mix_e"].append(np.column_stack([fc.mix_mean[c] for c in series.classes]))
        rows["mix_n"].append(np.repeat(mix[o - 1][None], h, axis=0))
        rows["mix_a"].append(mix[o : o + h])
        rows["inside"].append((actual >= fc.load_lower) & (actual <= fc.load_upper))
    r = {k: np.array(v) for k, v in rows.items()}
    scale = float(np.mean(np.abs(load[day:HISTORY] - load[: HISTORY - day])))
    out = {f"smape_{k}": float(np.mean(smape(r["act"], r[k]))) for k in ("ens", "naive", "sday",
                                                                           "sweek")}
    out.update({f"mase_{k}": float(np.mean(np.abs(r[k] - r["act"]))) / scale
                for k in ("ens", "naive", "sday")})
    out["gain"] = 1 - out["smape_ens"] / min(out["smape_naive"], out["smape_sday"],
                                               out["smape_sweek"])
    out["mix_tv_ens"] = float(np.mean(0.5 * np.abs(r["mix_e"] - r["mix_a"]).sum(axis=-1)))
    out["mix_tv_naive"] = float(np.mean(0.5 * np.abs(r["mix_n"] - r["mix_a"]).sum(axis=-1)))
    out["coverage"] = float(np.mean(r["inside"]))
    out["sec_mean"], out["sec_max"] = float(np.mean(seconds)), float(np.max(seconds))
    out["origins"] = int(origins.size)
    return out


def verdict(r: dict[str, float]) -> str:
    """Which of issue 19's targets this trace meets."""
    misses = []
    if r["gain"] < 0.10:
        misses.append("load gain < 10 %")
    if r["mix_tv_ens"] > r["mix_tv_naive"]:
        misses.append("mix worse than naive")
    if abs(r["coverage"] - LEVEL) > 0.05:
        misses.append("coverage off by > 5 points")
    if r["sec_max"] > 5.0:
        misses.append("> 5 s per forecast")
    return "all met" if not misses else "NOT met: " + ", ".join(misses)


def table(results: dict[str, dict[str, float]]) -> str:
    head = ("| trace | origins | sMAPE ens | naive | snaive day | snaive week | gain | "
            "MASE ens | naive | snaive | mix TV ens | naive | coverage 90 % | s/forecast | "
            "targets |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['origins']} | {100 * r['smape_ens']:.2f} % | "
            f"{100 * r['smape_naive']:.2f} % | {100 * r['smape_sday']:.2f} % | "
            f"{100 * r['smape_sweek']:.2f} % | {100 * r['gain']:.1f} % | {r['mase_ens']:.3f} | "
            f"{r['mase_naive']:.3f} | {r['mase_sday']:.3f} | {r['mix_tv_ens']:.4f} | "
            f"{r['mix_tv_naive']:.4f} | {100 * r['coverage']:.1f} % | "
            f"{r['sec_mean']:.2f} ({r['sec_max']:.2f}) | {verdict(r)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", choices=sorted(TRACES),
                    help="run only this trace (repeatable; default all)")
    ap.add_argument("--stride", type=int, default=36,
                    help="steps between evaluation origins (default 36: every 3 hours)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="add this to every trace's seed: other draws of the same shapes")
    ap.add_argument("--json", action="store_true", help="print one JSON line per trace")
    args = ap.parse_args(argv)
    if args.stride < 1:
        ap.error("--stride: must be >= 1")
    results = {}
    for name in args.trace or list(TRACES):
        t0 = time.perf_counter()
        results[name] = evaluate(TRACES[name](args.seed_offset), args.stride)
        print(f"{name}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps({"trace": name, **results[name]}), flush=True)
    if not args.json:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
