#!/usr/bin/env python3
"""Interval calibration variants on bench/forecast.py's origins (issue 45).

Every forecast at bench/forecast.py's origins (the last 20 % of each trace, each from the
4 weeks before it) is made once; the residuals its ensemble calibrated its bands on are
kept, and each variant below builds its own bands from them, scored against what came
next (the load: inside the band in log space; the mix: each class fraction inside its band):

* ``plain``       split-conformal, every backtest row one sample (Kairos before issue 45's
                  calibration step; its mix residuals now from every origin, cross-fitted);
* ``dependence``  one sample per non-overlapping horizon of the backtest (what ships:
                  :func:`planner.forecast.intervals.independent_horizons`; the mix's bands
                  are :func:`planner.forecast.intervals.mix_bands`);
* ``recent``      ``plain`` with the residuals scaled by the recent error level: an
                  exponentially weighted mean of the absolute residuals of the origins whose
                  horizon had ended, half-life a day (the band follows a harder stretch);
* ``aci``         ``plain`` with an adaptive conformal multiplier (quantile tracking over
                  the origins in time order, step 0.05 on the log multiplier).
* ``mix_3h``      ``dependence`` with the mix scaled as the load was, per 3-hour bin by the
                  median absolute residual (the mix's bands before issue 45's fourth session);
* ``hourly``      ``dependence`` without the mix's level scale and with the conformal level
                  ceil((n+1)(1-q))/n (the mix's bands before issue 45's fifth session);
* ``class_factor`` ``dependence`` with each mix class's band times the square root of the
                  factor that, calibrated on the older half of the origins, covers the newer
                  half at its finite-sample conformal level (a per-class correction from the
                  held-out check; the square root makes the band about the newer half's);
* ``load_hourly`` ``dependence`` with the load scaled as the mix is (hourly bins, the
                  residuals' level quantile), at the level ceil((n+1)(1-q))/n;
* ``load_3h``     ``dependence`` with the load's bands before issue 45's seventh session:
                  3-hour bins, the median absolute residual, ceil((n+1)(1-q))/n (what
                  ships now: hourly bins each with the hour either side, the level
                  quantile, ceil((n+1)(1-q))/(n+1); :func:`planner.forecast.intervals.load_bands`).

    .venv/bin/python bench/forecast_intervals.py [--trace T] [--seed-offset K] [--max-origins N]

Prints, per trace and variant, the load's coverage over all origins (with its standard error
over the origins: the measurement's own noise) and over the later half (the last three and a
half days, furthest from every forecast's calibration), the mix's over all classes, its
worst class and its best.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from planner.forecast import intervals as fint
from planner.forecast.forecaster import forecast

_spec = importlib.util.spec_from_file_location(
    "bench_forecast", Path(__file__).resolve().parent / "forecast.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

#: (kind, residuals, origins, n, {day, level}) -> (lower, upper) offsets
Variant = Callable[[str, np.ndarray, np.ndarray, int, dict[str, Any]], tuple[np.ndarray, ...]]


def _normalised(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Residuals over their spread per bin of the day, and the final steps' spreads."""
    scaling = (fint.load_scaling(kw["level"]) if kind == "load"
               else fint.mix_scaling(kw["level"], resid.size))
    r, _, final = fint.normalised(resid, origins, n, day=kw["day"], scaling=scaling)
    return r, final


def plain(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
          ) -> tuple[np.ndarray, ...]:
    r, final = _normalised(kind, resid, origins, n, kw)
    lo, hi = fint.conformal_bands(r, kw["level"])
    return lo * final, hi * final


def dependence(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
               ) -> tuple[np.ndarray, ...]:
    b = (fint.mix_bands if kind == "mix" else fint.load_bands)(resid, origins, n, **kw)
    return b.lower, b.upper


def hourly(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
           ) -> tuple[np.ndarray, ...]:
    r, final = _normalised(kind, resid, origins, n, kw)
    lo, hi = fint.conformal_bands(r, kw["level"],
                                  n_eff=fint.independent_horizons(origins, resid.shape[1]))
    return lo * final, hi * final


def recent(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any],
           half_life: float = 288.0, warm: int = 20) -> tuple[np.ndarray, ...]:
    h = resid.shape[1]
    r, final = _normalised(kind, resid, origins, n, kw)
    size, done = np.mean(np.abs(r), axis=1), origins + h

    def level_at(t: float) -> float:
        ok = done <= t
        if ok.sum() < warm:
            return math.nan
        w = 0.5 ** ((t - done[ok]) / half_life)
        return float(np.sum(w * size[ok]) / np.sum(w))

    sig = np.array([level_at(t) for t in origins])
    ok = np.isfinite(sig) & (sig > 0)
    now = level_at(n)
    if ok.sum() < 20 or not now > 0:
        return plain(kind, resid, origins, n, kw)
    ref = float(np.median(sig[ok]))
    lo, hi = fint.conformal_bands(r[ok] / (sig[ok, None] / ref), kw["level"])
    return lo * final * now / ref, hi * final * now / ref


def aci(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any],
        eta: float = 0.05) -> tuple[np.ndarray, ...]:
    h = resid.shape[1]
    r, final = _normalised(kind, resid, origins, n, kw)
    lo, hi = fint.conformal_bands(r, kw["level"])
    alpha, log_m = 1 - kw["level"], 0.0
    done = origins + h
    issued = np.zeros(origins.size)
    order = list(np.argsort(done, kind="stable"))
    for t in range(origins.size + 1):
        now = origins[t] if t < origins.size else math.inf
        while order and done[order[0]] <= now:
            j = order.pop(0)
            m = math.exp(issued[j])
            log_m += eta * (float(np.mean((r[j] < lo * m) | (r[j] > hi * m))) - alpha)
        if t < origins.size:
            issued[t] = log_m
    return lo * final * math.exp(log_m), hi * final * math.exp(log_m)


def mix_3h(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
           ) -> tuple[np.ndarray, ...]:
    if kind == "load":
        return dependence(kind, resid, origins, n, kw)
    r, _, final = fint.normalised(resid, origins, n, day=kw["day"],
                                  scaling=fint.Scaling(min_samples=fint.MIX_BIN_SAMPLES))
    lo, hi = fint.conformal_bands(r, kw["level"],
                                  n_eff=fint.independent_horizons(origins, resid.shape[1]))
    return lo * final, hi * final


FACTORS = np.exp(np.linspace(math.log(0.5), math.log(2.0), 81))


def class_factor(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
                 ) -> tuple[np.ndarray, ...]:
    lo, hi = dependence(kind, resid, origins, n, kw)
    if kind == "load":
        return lo, hi
    h, half = resid.shape[1], resid.shape[0] // 2
    scaling = fint.mix_scaling(kw["level"], resid[:half].size)
    old, _, _ = fint.normalised(resid[:half], origins[:half], n, day=kw["day"], scaling=scaling)
    bins = fint.phase_bins(origins[:, None] + np.arange(h)[None, :], kw["day"], scaling.bins)
    scale = scaling.spread(resid[:half], bins[:half])
    l0, h0 = fint.conformal_bands(old, kw["level"],
                                  n_eff=fint.independent_horizons(origins[:half], h))
    later = resid[half:] / scale[bins[half:]]
    n_new = fint.independent_horizons(origins[half:], h)
    target = 2 * min(1.0, math.ceil((n_new + 1) * (1 + kw["level"]) / 2) / n_new) - 1
    covered = [np.mean((later >= l0 * f - 1e-12) & (later <= h0 * f + 1e-12)) for f in FACTORS]
    ok = np.nonzero(np.asarray(covered) >= target - 1e-12)[0]
    factor = math.sqrt(FACTORS[ok[0]] if ok.size else FACTORS[-1])
    return lo * factor, hi * factor


def _load_scaled(scaling: Callable[[float], fint.Scaling], *, expected: bool) -> Variant:
    """``dependence`` with the load's bands scaled by ``scaling(level)`` at the conformal
    level ceil((n+1)(1-q))/(n+1) (``expected``) or ceil((n+1)(1-q))/n."""
    def variant(kind: str, resid: np.ndarray, origins: np.ndarray, n: int, kw: dict[str, Any]
                ) -> tuple[np.ndarray, ...]:
        if kind != "load":
            return dependence(kind, resid, origins, n, kw)
        r, _, final = fint.normalised(resid, origins, n, day=kw["day"],
                                      scaling=scaling(kw["level"]))
        lo, hi = fint.conformal_bands(r, kw["level"], n_eff=fint.independent_horizons(
            origins, resid.shape[1]), expected=expected)
        return lo * final, hi * final
    return variant


VARIANTS: dict[str, Variant] = {
    "plain": plain, "dependence": dependence, "recent": recent, "aci": aci, "mix_3h": mix_3h,
    "hourly": hourly, "class_factor": class_factor,
    # the load's bands before issue 45's seventh session: 3-hour bins, the median residual
    "load_3h": _load_scaled(lambda level: fint.Scaling(), expected=False),
    # the fourth session's try: hourly bins, the band's level quantile, no hour either side
    "load_hourly": _load_scaled(
        lambda level: fint.Scaling(bins=fint.HOUR_BINS, quantile=level), expected=False),
}


def record(name: str, seed_offset: int, stride: int, max_origins: int | None
           ) -> list[dict[str, Any]]:
    """Forecast at the bench's origins, keeping each forecast's calibration residuals."""
    calls: list[tuple[str, np.ndarray, np.ndarray, int, dict[str, Any]]] = []
    real_load, real_mix = fint.load_bands, fint.mix_bands

    def load_spy(resid: np.ndarray, origins: np.ndarray, n: int, **kw: Any) -> fint.Bands:
        calls.append(("load", resid, origins, n, kw))
        return real_load(resid, origins, n, **kw)

    def mix_spy(resid: np.ndarray, origins: np.ndarray, n: int, **kw: Any) -> fint.Bands:
        calls.append(("mix", resid, origins, n, kw))
        return real_mix(resid, origins, n, **kw)

    series = bench.TRACES[name](seed_offset)
    mix = series.mix_matrix()
    rows = []
    fint.load_bands, fint.mix_bands = load_spy, mix_spy  # type: ignore[assignment]
    try:
        for o in bench.pick_origins(len(series), stride, max_origins):
            calls.clear()
            hist = series.slice(max(0, o - bench.HISTORY), o)
            fc = forecast(hist, horizon=bench.HORIZON, level=bench.LEVEL)
            rows.append({
                "calls": list(calls), "c": fc.info["ensemble"]["load"]["log_offset"],
                "load_mean": np.asarray(fc.load_mean),
                "load_actual": series.load[o : o + bench.HORIZON],
                "mix_mean": np.column_stack([fc.mix_mean[k] for k in series.classes]),
                "mix_actual": mix[o : o + bench.HORIZON],
            })
    finally:
        fint.load_bands, fint.mix_bands = real_load, real_mix  # type: ignore[assignment]
    return rows


def score(rows: list[dict[str, Any]], variant: Variant) -> dict[str, float]:
    """Coverage of the variant's bands: load (all, later half), mix (all, worst class)."""
    load_in, mix_in = [], []
    for row in rows:
        c = row["c"]
        zf, za = np.log(row["load_mean"] + c), np.log(row["load_actual"] + c)
        (_, resid, origins, n, kw), *mix_calls = row["calls"]
        lo, hi = variant("load", resid, origins, n, kw)
        load_in.append((za >= zf + lo - 1e-9) & (za <= zf + hi + 1e-9))
        per_class = []
        for k, (_, resid, origins, n, kw) in enumerate(mix_calls):
            lo, hi = variant("mix", resid, origins, n, kw)
            m, a = row["mix_mean"][:, k], row["mix_actual"][:, k]
            low = np.minimum(np.clip(m + lo, 0.0, 1.0), m)
            up = np.maximum(np.clip(m + hi, 0.0, 1.0), m)
            per_class.append((a >= low - 1e-9) & (a <= up + 1e-9))
        mix_in.append(np.stack(per_class, axis=-1))
    load, mixes = np.array(load_in), np.array(mix_in)
    moving = np.ptp(np.concatenate([r["mix_actual"] for r in rows]), axis=0) > 0
    per_origin = load.mean(axis=1)
    return {"load": float(load.mean()), "load_later": float(load[load.shape[0] // 2 :].mean()),
            # the origins' spread: horizons of one origin miss together, origins rarely do
            "load_se": float(per_origin.std(ddof=1) / np.sqrt(per_origin.size)),
            "mix": float(mixes.mean()),
            "mix_worst": float(np.mean(mixes, axis=(0, 1))[moving].min()),
            "mix_best": float(np.mean(mixes, axis=(0, 1))[moving].max())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", choices=sorted(bench.TRACES),
                    help="run only this trace (repeatable; default all)")
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--stride", type=int, default=36)
    ap.add_argument("--max-origins", type=int, default=None)
    args = ap.parse_args(argv)
    print("| trace | origins | variant | load coverage (± s.e.) | later half | mix coverage | "
          "worst class | best class |\n|---|---|---|---|---|---|---|---|")
    for name in args.trace or list(bench.TRACES):
        t0 = time.perf_counter()
        rows = record(name, args.seed_offset, args.stride, args.max_origins)
        for label, variant in VARIANTS.items():
            r = score(rows, variant)
            print(f"| {name} | {len(rows)} | {label} | {100 * r['load']:.1f} % "
                  f"(± {100 * r['load_se']:.1f}) | "
                  f"{100 * r['load_later']:.1f} % | {100 * r['mix']:.1f} % | "
                  f"{100 * r['mix_worst']:.1f} % | {100 * r['mix_best']:.1f} % |", flush=True)
        print(f"{name}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
