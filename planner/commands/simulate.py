"""``kairos simulate``: replay workload traces under Kairos plans and SOPHIA's baselines."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from planner import inputs

#: Per shape: generator arguments, replay start, look-ahead, replanning period, forecaster.
SHAPES: dict[str, dict[str, Any]] = {
    "mgrast": {"trace": {"steps": 1440, "step_seconds": 30.0}, "start": 360, "horizon": 30,
               "replan_every": 10, "forecast_model": "markov1"},
    "bus": {"trace": {"steps": 288 * 7, "step_seconds": 300.0}, "start": 288 * 4,
            "horizon": 48, "replan_every": 12, "forecast_model": "seasonal_naive",
            "season_length": 288},
    "hpc": {"trace": {"steps": 1440, "step_seconds": 60.0}, "start": 360, "horizon": 180,
            "replan_every": 30, "forecast_model": "markov1"},
}
STRATEGIES = ("kairos", "oracle", "default", "static_optimal", "naive", "theoretical_best")


def register(subparsers: Any) -> None:
    """Add the ``simulate`` sub-command."""
    p = subparsers.add_parser(
        "simulate",
        help="replay traces under Kairos and the baselines, print the comparison table",
        description="For each workload shape (SOPHIA's MG-RAST-like, bus-tracking-like and "
        "HPC-queue-like synthetic traces, or a trace file), replay the trace: Kairos "
        "forecasts, plans and replans as it goes; the realised throughput is valued on the "
        "true workload and compared with default, static-optimal, naive and theoretical best.",
    )
    p.add_argument("--shape", action="append", choices=tuple(SHAPES),
                   help="workload shape (repeatable; default all three)")
    p.add_argument("--trace", help="replay this trace file instead of a synthetic shape")
    p.add_argument("--trace-seed", type=inputs.SEED, default=1, help="seed of the synthetic traces")
    p.add_argument("--forecaster", choices=("model", "persistence", "oracle"), default="model",
                   help="part 1's forecaster (default), last value, or the truth")
    p.add_argument("--forecast-model", help="override the forecast model of every shape")
    p.add_argument("--hosts", default="cass1,cass2,cass3")
    p.add_argument("--rf", type=inputs.RF, default=3)
    p.add_argument("--cl", default="QUORUM")
    p.add_argument("--restart-seconds", type=inputs.DURATION, default=60.0, metavar="T_R")
    p.add_argument("--survivor-penalty", type=inputs.SURVIVOR_PENALTY, default=0.05)
    p.add_argument("--compaction-seconds", type=inputs.DURATION, default=120.0,
                   help="seconds of full throughput a compaction strategy change costs")
    p.add_argument("--served", choices=("capacity", "offered"), default="capacity")
    p.add_argument("--method", choices=("ga", "dp"), default="ga")
    p.add_argument("--seed", type=inputs.SEED, default=0, help="GA seed")
    p.add_argument("--searches", type=inputs.SEARCHES, default=1,
                   help="independent GA searches per plan")
    p.add_argument("--min-gain", type=inputs.FRACTION, default=0.0,
                   help="follow a plan only if its expected net gain exceeds this fraction")
    p.add_argument("--deviation", type=inputs.FRACTION, default=0.2,
                   help="replan early when the observed mix departs from the forecast by more "
                   "than this total-variation distance (0: never)")
    p.add_argument("--steps", action="store_true", help="also print Kairos's per-step gains")
    p.add_argument("--json", action="store_true", help="one JSON line per shape")
    p.set_defaults(func=run)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_shape(name: str, series: Any, settings: dict[str, Any], args: argparse.Namespace) -> Any:
    """Simulate one trace; returns the SimulationResult."""
    from planner.commands.validate_plan import parse_hosts
    from planner.engines import get_engine
    from planner.lab import simulator as sm
    from planner.model.performance import load_default_model
    from planner.model.spaces import get_space
    from planner.planning.costbenefit import ReconfigModel
    from planner.planning.optimiser import GAOptions
    from planner.topology.batching import safe_batches
    from planner.topology.ring import Ring

    engine = series.engine
    spec = get_engine(engine)
    perf = load_default_model(engine)
    candidates = get_space(engine).candidates()
    restart = sm.restart_matrix(engine, candidates)
    hosts = parse_hosts(args.hosts) or []
    if spec.ring:
        batches = safe_batches(Ring.simple(hosts, rf=args.rf), consistency_level=args.cl).batches
    else:
        batches = tuple((h,) for h in hosts)
    reconfig = ReconfigModel.from_batches(
        batches, restart_seconds=args.restart_seconds, survivor_penalty=args.survivor_penalty
    )
    mix = series.mix_matrix()
    step = float(series.step_seconds)
    if args.forecaster == "oracle":
        fc = sm.oracle_forecaster(series.load, mix)
    elif args.forecaster == "persistence":
        fc = sm.persistence_forecaster()
    else:
        fc = sm.model_forecaster(
            engine=engine, step_seconds=step,
            model=args.forecast_model or settings["forecast_model"],
            season_length=settings.get("season_length"),
            history=settings.get("history", 4 * settings["horizon"] + 576),
        )
    return sm.simulate(
        load=series.load, mix=mix, timestamps=series.timestamps, step_seconds=step,
        capacity_fn=lambda m: sm.capacity_matrix(perf, m, candidates),
        restart=restart, reconfig=reconfig, forecaster=fc, start=settings["start"],
        horizon=settings["horizon"], replan_every=settings["replan_every"], served=args.served,
        change_seconds=sm.change_seconds_matrix(
            engine, candidates, {"compaction": args.compaction_seconds}
        ) if spec.tables else None,
        method=args.method, ga=GAOptions(seed=args.seed, searches=args.searches),
        min_gain=args.min_gain, deviation=None if args.deviation <= 0 else args.deviation,
        oracle=True,
        progress=lambda m: _log(f"{name}: {m}") if args.progress else None,
    )


def table(rows: list[tuple[str, Any]]) -> str:
    """The comparison table (Markdown): total ops and gain of Kairos over each baseline."""
    head = ("| shape | Kairos | oracle | default | static-opt | naive | theor. best "
            "| vs default | vs static-opt | vs naive | switches |")
    out = [head, "|" + "---|" * 11]
    for name, r in rows:
        s = r.strategies
        cells = [f"{s[k].total_ops / 1e9:.3f}G" for k in STRATEGIES]
        gains = [f"{r.gain('kairos', b):+.1%}" for b in ("default", "static_optimal", "naive")]
        out.append(
            f"| {name} | " + " | ".join(cells) + " | " + " | ".join(gains)
            + f" | {s['kairos'].switches} |"
        )
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Run every requested shape and print the table (or JSON lines)."""
    from planner.workload.series import load_trace
    from planner.workload.traces import GENERATORS

    args.progress = not args.json
    rows: list[tuple[str, Any]] = []
    if args.trace:
        series = load_trace(args.trace)
        n = len(series)
        settings: dict[str, Any] = {"start": n // 4, "horizon": 48, "replan_every": 12,
                    "forecast_model": "auto"}
        jobs = [(args.trace, series, settings)]
    else:
        jobs = []
        for name in args.shape or list(SHAPES):
            settings = SHAPES[name]
            trace_kw: dict[str, Any] = settings["trace"]
            series = GENERATORS[name](seed=args.trace_seed, **trace_kw)
            jobs.append((name, series, settings))
    for name, series, settings in jobs:
        t0 = time.perf_counter()
        res = run_shape(name, series, settings, args)
        secs = time.perf_counter() - t0
        rows.append((name, res))
        if args.json:
            print(json.dumps({
                "shape": name, "seconds": round(secs, 2),
                "intervals": res.steps, "step_seconds": res.step_seconds,
                "replans": res.replans,
                "totals": {k: v.total_ops for k, v in res.strategies.items()},
                "switches": {k: v.switches for k, v in res.strategies.items()},
                "kairos_vs": {b: res.gain("kairos", b)
                              for b in ("default", "static_optimal", "naive")},
            }))
        else:
            _log(f"{name}: done in {secs:.1f}s, {res.replans} plan(s)")
        if args.steps and not args.json:
            print(f"Kairos steps on {name}:")
            for st in res.kairos_steps:
                print(f"  t={st['t']} {st['from']}->{st['to']} benefit {st['benefit_ops']:.4g} "
                      f"cost {st['cost_ops']:.4g} net {st['net_ops']:.4g}")
    if not args.json:
        print(table(rows))
    return 0
