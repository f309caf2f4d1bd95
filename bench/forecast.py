"""Forecast benchmark: the ``auto`` ensemble against naive, seasonal naive and a peer.

Run from the repository root (takes a few minutes per trace on 2 cores without the peer; the
peer costs tens of seconds per forecast)::

    .venv/bin/python bench/forecast.py --no-peer  # every trace, markdown table on stdout
    .venv/bin/python bench/forecast.py --quick    # the peer too, on 8 origins per seasonal trace
    .venv/bin/python bench/forecast.py --json     # one JSON line per trace instead
    .venv/bin/python bench/forecast.py --seed-offset 100   # other draws of the same shapes

The peer is Nixtla's statsforecast (the `peer` extra, never the planner's): ``AutoETS``
(no season: see :func:`peer_forecast`), ``AutoTheta`` (season of a day), ``MSTL`` (daily
and weekly seasons, ``AutoETS`` trend without a season) and the equal-weight mean of the
three (its interval: the mean of their bounds), each fitted on the same 4-week history at
the same origins as Kairos.
Its seconds are wall time and CPU time of the three fits together (the mean needs all three).
Without statsforecast installed (or with ``--no-peer``) the peer columns are left out.

Traces (all generated, seeded, shipped as code; no data file, no licence beyond the
project's): 35 days at 5 minutes (10,080 points) of

* ``ops-web``, ``ops-saas``, ``ops-ingest`` -- :func:`planner.workload.traces.ops_like` (daily and
  weekly seasons, a holiday, trend changes, a level shift, bursts with their own mix, dips,
  AR(1) noise, a mix that moves with the load; the profiles are documented there);
* ``bus`` -- :func:`planner.workload.traces.bus_tracking_like` (SOPHIA's bus-tracking shape: a daily
  season only, rush-hour mix changes);
* ``mgrast`` -- :func:`planner.workload.traces.mgrast_like` (SOPHIA's MG-RAST shape: random regime
  switches, no season). A stress case: there is no season to exploit.

Protocol (as issue 19's measurement): rolling origins over the last 20 % of each trace
(every ``--stride`` steps), horizon 12 steps, each forecast made by
``planner.forecast.forecaster.forecast`` (model ``auto``, level 0.9, default time budget)
from at most the 4 weeks (8,064 points) before its origin, so nothing after the origin is seen.

Columns: load sMAPE of the ensemble, of naive (last value) and of seasonal naive (the value
one day, and one week, before); the gain is ``1 - ens / min(naive, snaive day, snaive week)``
(the issue's target is >= 10 %); MASE scales the MAE by the in-sample MAE of the one-day
seasonal naive over the first 4 weeks; mix TV is the total-variation distance of the mix
forecast and of the last observed mix (naive); coverage is the share of actual loads inside
the 90 % interval (mix: share of class fractions inside their intervals, over all classes,
and the worst class's share; every class's in the JSON); seconds per forecast is mean (max)
wall time, and CPU seconds (process time) are given beside it, as the machine may be shared.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from planner.forecast.ensemble import smape
from planner.forecast.forecaster import forecast
from planner.workload import traces
from planner.workload.series import WorkloadSeries

STEPS = 288 * 35
HISTORY = 288 * 28
HORIZON = 12
LEVEL = 0.9
PEER_MODELS = ("AutoETS", "AutoTheta", "MSTL")
#: traces with a daily or weekly season: the peer runs on these (the issue's comparison)
SEASONAL_TRACES = ("ops-web", "ops-saas", "ops-ingest", "bus")
QUICK_ORIGINS = 8
#: name -> generator of the trace from a seed offset (0: the documented traces)
TRACES: dict[str, Callable[[int], WorkloadSeries]] = {
    "ops-web": lambda k: traces.ops_like(profile="web", steps=STEPS, seed=11 + k),
    "ops-saas": lambda k: traces.ops_like(profile="saas", steps=STEPS, seed=12 + k),
    "ops-ingest": lambda k: traces.ops_like(profile="ingest", steps=STEPS, seed=13 + k),
    "bus": lambda k: traces.bus_tracking_like(steps=STEPS, seed=14 + k),
    "mgrast": lambda k: traces.mgrast_like(steps=STEPS, step_seconds=300.0, seed=15 + k),
}


def peer_version() -> str | None:
    """statsforecast's version, or None when it is not installed."""
    try:
        return importlib.metadata.version("statsforecast")
    except importlib.metadata.PackageNotFoundError:
        return None


def peer_forecast(y: np.ndarray, h: int, day: int, week: int
                  ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """statsforecast's three models and their mean: (mean, lower, upper) at LEVEL each."""
    from statsforecast.models import MSTL, AutoETS, AutoTheta

    models: dict[str, Any] = {
        # no season: statsforecast fits all 288 daily states of an ETS season (about 70 CPU
        # seconds a fit on 4 weeks here, R's ets refuses seasons over 24); the seasons are
        # AutoTheta's and MSTL's part of the mean
        "AutoETS": AutoETS(season_length=1),
        "AutoTheta": AutoTheta(season_length=day),
        "MSTL": MSTL(season_length=[day, week], trend_forecaster=AutoETS(model="ZZN")),
    }
    lv = round(100 * LEVEL)
    out = {}
    for name, model in models.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = model.forecast(y=y, h=h, level=[lv])
        out[name] = (np.asarray(r["mean"]), np.asarray(r[f"lo-{lv}"]),
                     np.asarray(r[f"hi-{lv}"]))
    out["mean3"] = tuple(np.mean([out[m][i] for m in PEER_MODELS], axis=0) for i in range(3))
    return out


def cached_version(path: Path) -> str | None:
    """The statsforecast version a --peer-cache file was written with (None: no file)."""
    if not path.exists():
        return None
    version = json.loads(path.read_text()).get("statsforecast")
    return str(version) if version else None


class PeerCache:
    """The peer's forecasts and seconds per (trace, seed offset, origin), kept in a JSON file.

    The peer costs tens of seconds per forecast and does not change with Kairos' code, so a
    rerun of the bench (``--peer-cache FILE``) reuses what was measured, seconds included.
    """

    def __init__(self, path: Path | None, version: str) -> None:
        self.path, self.version = path, version
        self.data: dict[str, Any] = {}
        if path is not None and path.exists():
            loaded = json.loads(path.read_text())
            if loaded.get("statsforecast") == version:
                self.data = loaded.get("forecasts", {})

    def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.data[key] = value
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"statsforecast": self.version, "forecasts": self.data}))
            tmp.replace(self.path)


def cached_peer(cache: PeerCache, key: str, y: np.ndarray, h: int, day: int, week: int
                ) -> tuple[dict[str, tuple[np.ndarray, ...]], float, float]:
    """The peer's forecasts at one origin, and its wall and CPU seconds (cached or measured)."""
    hit = cache.get(key)
    if hit is None:
        t0, c0 = time.perf_counter(), time.process_time()
        pf = peer_forecast(y, h, day, week)
        hit = {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
               "models": {m: [v.tolist() for v in bands] for m, bands in pf.items()}}
        cache.put(key, hit)
    models = {m: tuple(np.asarray(v) for v in bands) for m, bands in hit["models"].items()}
    return models, float(hit["seconds"]), float(hit["cpu"])


def pick_origins(n: int, stride: int, max_origins: int | None) -> np.ndarray:
    """Every ``stride`` steps over the last 20 %, thinned evenly to ``max_origins``."""
    origins = np.arange(n - n // 5, n - HORIZON + 1, stride)
    if max_origins and origins.size > max_origins:
        origins = origins[np.linspace(0, origins.size - 1, max_origins).round().astype(int)]
    return origins


def evaluate(series: WorkloadSeries, origins: np.ndarray, *, peer: PeerCache | None = None,
             key: str = "", kairos: bool = True) -> dict[str, Any]:
    """Rolling-origin evaluation of ``series`` at ``origins`` (Kairos, baselines, the peer)."""
    h = HORIZON
    load, mix = series.load, series.mix_matrix()
    day, week = 86400 // int(series.step_seconds or 300), 604800 // int(series.step_seconds or 300)
    keys = ["ens", "naive", "sday", "sweek", "act", "mix_e", "mix_n", "mix_a", "inside",
            "mix_inside"]
    if peer is not None:
        keys += [f"peer_{m}" for m in (*PEER_MODELS, "mean3")]
        keys += [f"peer_in_{m}" for m in (*PEER_MODELS, "mean3")]
    rows: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    seconds, cpu, peer_sec, peer_cpu = [], [], [], []
    for o in origins:
        hist = series.slice(max(0, o - HISTORY), o)
        actual = load[o : o + h]
        if peer is not None:
            pf, sec, cpu_s = cached_peer(peer, f"{key}:{o}", np.asarray(hist.load, dtype=float),
                                         h, day, week)
            peer_sec.append(sec)
            peer_cpu.append(cpu_s)
            for m, (mean, lo, hi) in pf.items():
                rows[f"peer_{m}"].append(mean)
                rows[f"peer_in_{m}"].append((actual >= lo) & (actual <= hi))
        if not kairos:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        fc = forecast(hist, horizon=h, level=LEVEL)
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        rows["act"].append(actual)
        rows["ens"].append(np.asarray(fc.load_mean))
        rows["naive"].append(np.full(h, load[o - 1]))
        rows["sday"].append(load[o - day : o - day + h])
        rows["sweek"].append(load[o - week : o - week + h])
        rows["mix_e"].append(np.column_stack([fc.mix_mean[c] for c in series.classes]))
        rows["mix_n"].append(np.repeat(mix[o - 1][None], h, axis=0))
        rows["mix_a"].append(mix[o : o + h])
        rows["inside"].append((actual >= fc.load_lower) & (actual <= fc.load_upper))
        lo_m = np.column_stack([fc.mix_lower[c] for c in series.classes])
        hi_m = np.column_stack([fc.mix_upper[c] for c in series.classes])
        rows["mix_inside"].append((mix[o : o + h] >= lo_m - 1e-9) & (mix[o : o + h] <= hi_m + 1e-9))
    r = {k: np.array(v) for k, v in rows.items()}
    if not kairos:
        return {}
    scale = float(np.mean(np.abs(load[day:HISTORY] - load[: HISTORY - day])))
    out: dict[str, Any] = {f"smape_{k}": float(np.mean(smape(r["act"], r[k])))
                           for k in ("ens", "naive", "sday", "sweek")}
    out.update({f"mase_{k}": float(np.mean(np.abs(r[k] - r["act"]))) / scale
                for k in ("ens", "naive", "sday")})
    out["gain"] = 1 - out["smape_ens"] / min(out["smape_naive"], out["smape_sday"],
                                               out["smape_sweek"])
    out["mix_tv_ens"] = float(np.mean(0.5 * np.abs(r["mix_e"] - r["mix_a"]).sum(axis=-1)))
    out["mix_tv_naive"] = float(np.mean(0.5 * np.abs(r["mix_n"] - r["mix_a"]).sum(axis=-1)))
    out["coverage"] = float(np.mean(r["inside"]))
    out["mix_coverage"] = float(np.mean(r["mix_inside"]))
    per_class = np.mean(r["mix_inside"], axis=(0, 1))
    out["mix_coverage_worst"] = float(np.min(per_class))
    out["mix_coverage_classes"] = {c: float(v) for c, v in zip(series.classes, per_class,
                                                               strict=True)}
    out["sec_mean"], out["sec_max"] = float(np.mean(seconds)), float(np.max(seconds))
    out["cpu_mean"], out["cpu_max"] = float(np.mean(cpu)), float(np.max(cpu))
    out["origins"] = int(origins.size)
    out["history_points"] = int(min(HISTORY, int(origins[0])))
    if peer is not None:
        for m in (*PEER_MODELS, "mean3"):
            out[f"smape_{m}"] = float(np.mean(smape(r["act"], r[f"peer_{m}"])))
            out[f"mase_{m}"] = float(np.mean(np.abs(r[f"peer_{m}"] - r["act"]))) / scale
            out[f"coverage_{m}"] = float(np.mean(r[f"peer_in_{m}"]))
        out["peer_sec_mean"] = float(np.mean(peer_sec))
        out["peer_cpu_mean"] = float(np.mean(peer_cpu))
    return out


def verdict(r: dict[str, float]) -> str:
    """Which of issue 19's (and, with the peer, issue 45's) targets this trace meets."""
    misses = []
    if "smape_mean3" in r:
        if r["smape_ens"] > min(r["smape_AutoTheta"], r["smape_MSTL"], r["smape_mean3"]):
            misses.append("sMAPE above the peer's best")
        if r["cpu_mean"] > r["peer_cpu_mean"] / 10:
            misses.append("CPU s > 1/10 of the peer's")
        if abs(r["coverage"] - LEVEL) > 0.03 or abs(r["mix_coverage"] - LEVEL) > 0.03:
            misses.append("coverage off by > 3 points")
    if r["gain"] < 0.10:
        misses.append("load gain < 10 %")
    if r["mix_tv_ens"] > r["mix_tv_naive"]:
        misses.append("mix worse than naive")
    if abs(r["coverage"] - LEVEL) > 0.05 and "smape_mean3" not in r:
        misses.append("coverage off by > 5 points")
    if r["cpu_max"] > 5.0:  # CPU: on a shared machine the wall clock measures the machine
        misses.append("> 5 CPU s per forecast")
    return "all met" if not misses else "NOT met: " + ", ".join(misses)


def _markdown(head: str, rows: Iterable[str]) -> str:
    """A Markdown table: ``head``, its rule (one column per cell of ``head``), ``rows``."""
    return "\n".join([head, "|" + "---|" * (head.count("|") - 1), *rows])


def table(results: dict[str, dict[str, float]]) -> str:
    head = ("| trace | origins | sMAPE ens | naive | snaive day | snaive week | gain | "
            "MASE ens | naive | snaive | mix TV ens | naive | coverage 90 % | mix coverage | "
            "worst class | s/forecast | CPU s | targets |")
    rows = (
        f"| {name} | {r['origins']} | {100 * r['smape_ens']:.2f} % | "
        f"{100 * r['smape_naive']:.2f} % | {100 * r['smape_sday']:.2f} % | "
        f"{100 * r['smape_sweek']:.2f} % | {100 * r['gain']:.1f} % | {r['mase_ens']:.3f} | "
        f"{r['mase_naive']:.3f} | {r['mase_sday']:.3f} | {r['mix_tv_ens']:.4f} | "
        f"{r['mix_tv_naive']:.4f} | {100 * r['coverage']:.1f} % | "
        f"{100 * r['mix_coverage']:.1f} % | {100 * r['mix_coverage_worst']:.1f} % | "
        f"{r['sec_mean']:.2f} ({r['sec_max']:.2f}) | "
        f"{r['cpu_mean']:.2f} ({r['cpu_max']:.2f}) | {verdict(r)} |"
        for name, r in results.items()
    )
    return _markdown(head, rows)


def peer_table(results: dict[str, dict[str, float]]) -> str:
    """Kairos against statsforecast, side by side (traces the peer ran on)."""
    head = ("| trace | origins | sMAPE Kairos | AutoETS | AutoTheta | MSTL | mean of 3 | "
            "MASE Kairos | mean of 3 | coverage Kairos load | mix | mean of 3 | "
            "s/forecast Kairos | mean of 3 | CPU s Kairos | mean of 3 | ratio |")
    rows = (
        f"| {name} | {r['origins']} | {100 * r['smape_ens']:.2f} % | "
        + " | ".join(f"{100 * r[f'smape_{m}']:.2f} %" for m in (*PEER_MODELS, "mean3"))
        + f" | {r['mase_ens']:.3f} | {r['mase_mean3']:.3f} | {100 * r['coverage']:.1f} % | "
        f"{100 * r['mix_coverage']:.1f} % | {100 * r['coverage_mean3']:.1f} % | "
        f"{r['sec_mean']:.2f} | {r['peer_sec_mean']:.1f} | {r['cpu_mean']:.2f} | "
        f"{r['peer_cpu_mean']:.1f} | 1/{r['peer_cpu_mean'] / max(r['cpu_mean'], 1e-9):.0f} |"
        for name, r in results.items() if "smape_mean3" in r
    )
    return _markdown(head, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", action="append", choices=sorted(TRACES),
                    help="run only this trace (repeatable; default all)")
    ap.add_argument("--stride", type=int, default=36,
                    help="steps between evaluation origins (default 36: every 3 hours)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="add this to every trace's seed: other draws of the same shapes")
    ap.add_argument("--max-origins", type=int, default=None,
                    help="at most this many origins per trace, evenly spread (default: all)")
    ap.add_argument("--quick", action="store_true",
                    help=f"the seasonal traces only, {QUICK_ORIGINS} origins each")
    ap.add_argument("--no-peer", action="store_true", help="leave statsforecast out")
    ap.add_argument("--peer-cache", type=Path, default=None,
                    help="JSON file of the peer's forecasts: reused when present, else written")
    ap.add_argument("--peer-cached-only", action="store_true",
                    help="on the peer's traces, only the origins --peer-cache already holds "
                         "(statsforecast need not be installed: the file names its version)")
    ap.add_argument("--peer-only", action="store_true",
                    help="only run the peer (to fill --peer-cache), no table")
    ap.add_argument("--json", action="store_true", help="print one JSON line per trace")
    args = ap.parse_args(argv)
    if args.stride < 1:
        ap.error("--stride: must be >= 1")
    if args.max_origins is not None and args.max_origins < 1:
        ap.error("--max-origins: must be >= 1")
    max_origins = args.max_origins or (QUICK_ORIGINS if args.quick else None)
    names = args.trace or list(SEASONAL_TRACES if args.quick else TRACES)
    version = None if args.no_peer else peer_version()
    if version is None and not args.no_peer and args.peer_cached_only and args.peer_cache:
        # the cached forecasts are enough for the table: no statsforecast needed to read them
        version = cached_version(args.peer_cache)
    if not args.no_peer and version is None:
        print("statsforecast is not installed: no peer columns "
              "(pip install -e '.[dev]')", file=sys.stderr)
    results = {}
    for name in names:
        t0 = time.perf_counter()
        series = TRACES[name](args.seed_offset)
        origins = pick_origins(len(series), args.stride, max_origins)
        cache = (PeerCache(args.peer_cache, version)
                 if version is not None and name in SEASONAL_TRACES else None)
        if cache is not None and args.peer_cached_only:
            origins = np.array([o for o in origins
                                if cache.get(f"{name}:{args.seed_offset}:{o}") is not None])
            if origins.size == 0:
                print(f"{name}: no cached peer forecast, skipped", file=sys.stderr)
                continue
        results[name] = evaluate(series, origins, peer=cache, kairos=not args.peer_only,
                                 key=f"{name}:{args.seed_offset}")
        print(f"{name}: done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps({"trace": name, **results[name]}), flush=True)
    if not args.json and not args.peer_only:
        print(table(results))
        if version is not None:
            print(f"\nPeer: statsforecast {version}, the same origins and 4-week histories\n")
            print(peer_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
