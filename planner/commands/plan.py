"""``kairos plan``: forecast -> performance model -> batches -> optimiser -> plan file."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from planner import inputs

#: T_r used when none is given: SOPHIA's order of magnitude for drain+restart+sync.
DEFAULT_RESTART_SECONDS = 60.0
#: Forecast sample paths: each one adds a (horizon x candidates) capacity matrix.
MAX_SAMPLES = 1000
SAMPLES_WHY = "each sample path adds a capacity matrix; 1000 already averages well"
#: Bound on samples x horizon: the stacked capacity matrices stay below ~1 GiB.
MAX_SAMPLE_STEPS = 5_000_000
#: A plan needs at least 2 intervals (a switch and a stay); the upper bound is shared.
PLAN_HORIZON = inputs.bounded_int(2, inputs.MAX_HORIZON, why=inputs.HORIZON_WHY)


def register(subparsers: Any) -> None:
    """Add the ``plan`` sub-command."""
    p = subparsers.add_parser(
        "plan",
        help="write a reconfiguration plan for the forecast workload",
        description="Forecast the workload (or read a forecast), predict each candidate "
        "configuration's throughput, compute safe restart batches, search the plan with the "
        "best benefit minus cost over the horizon, and write the plan file.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="workload trace (CSV/JSON) to forecast from")
    src.add_argument("--forecast", help="forecast file written by `kairos forecast`")
    p.add_argument("--engine", choices=("cassandra", "redis"), default="cassandra")
    p.add_argument("--cluster", default="lab", help="cluster name written into the plan")
    p.add_argument("--current", help="current configuration (YAML mapping); default: defaults")
    p.add_argument("--model", help="performance model JSON (default: the shipped prior)")
    ring = p.add_mutually_exclusive_group()
    ring.add_argument("--ring", help="ring description YAML (Cassandra)")
    ring.add_argument("--hosts", default="cass1,cass2,cass3", help="hosts, ring order")
    p.add_argument("--rf", type=inputs.RF, default=3, help="replication factor with --hosts")
    p.add_argument("--cl", default="QUORUM", help="consistency level to keep (default QUORUM)")
    p.add_argument("--tolerate", type=inputs.TOLERATE, default=0,
                   help="extra failures to survive")
    p.add_argument("--aggressive", action="store_true", help="allow all-at-once if RF = CL")
    p.add_argument(
        "--restart-seconds", type=inputs.DURATION, default=DEFAULT_RESTART_SECONDS,
        metavar="T_R",
        help="seconds one node is out for a restart (measured by the executor; "
        f"default {DEFAULT_RESTART_SECONDS:g})",
    )
    p.add_argument("--survivor-penalty", type=inputs.SURVIVOR_PENALTY, default=0.05,
                   help="capacity the up nodes lose to extra load while a batch is down")
    p.add_argument("--compaction-seconds", type=inputs.DURATION, default=120.0,
                   help="seconds of full throughput a compaction strategy change costs "
                   "(SSTable rewrite; default 120)")
    p.add_argument("--served", choices=("capacity", "offered"), default="capacity",
                   help="credit capacity (SOPHIA, saturated clients) or min(load, capacity)")
    p.add_argument("--horizon", type=PLAN_HORIZON, default=48,
                   help="decision intervals (default 48)")
    p.add_argument("--forecast-model", default="auto", help="forecast model (default auto)")
    p.add_argument("--season-length", type=inputs.SEASON,
                   help="season in steps (default: detected)")
    p.add_argument("--samples", type=inputs.bounded_int(0, MAX_SAMPLES, why=SAMPLES_WHY),
                   default=0,
                   help="optimise the expected value over N forecast sample paths (0: mean)")
    p.add_argument("--method", choices=("ga", "dp"), default="ga")
    p.add_argument("--seed", type=inputs.SEED, default=0)
    p.add_argument("--population", type=inputs.POPULATION, default=48)
    p.add_argument("--generations", type=inputs.GENERATIONS, default=60)
    p.add_argument("--searches", type=inputs.SEARCHES, default=2,
                   help="independent GA searches")
    p.add_argument("--workers", type=inputs.PROCESSES, default=1,
                   help="processes for the searches")
    p.add_argument(
        "--tables", default="", metavar="KS.TABLE,...",
        help="tables a table-level change (compaction) applies to; needed when the plan "
        "changes one",
    )
    p.add_argument("-o", "--output", required=True, help="plan file to write")
    p.set_defaults(func=run)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_current(path: str | None, engine: str = "cassandra") -> dict[str, Any]:
    """The --current file, read and checked through planner.inputs ({} without one)."""
    if path is None:
        return {}
    return inputs.load_config(path, engine=engine)


def steps_from_evaluation(
    *,
    engine: str,
    evaluation: Any,
    candidates: Sequence[Mapping[str, Any]],
    batches: Sequence[Sequence[str]],
    start: datetime,
    step_seconds: float,
    n_steps: int,
    tables: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Plan-file steps (plain data) from an optimiser evaluation.

    ``tables`` (``keyspace.table``) go into every step that changes a table-level
    parameter; such a step without them is refused (the executor would not know which
    tables to alter).
    """
    from planner.errors import ValidationError
    from planner.spaces import change_kind, get_space

    space = get_space(engine)
    out: list[dict[str, Any]] = []
    sw = list(evaluation.switches)
    for j, s in enumerate(sw):
        before, after = space.complete(candidates[s.source]), space.complete(candidates[s.target])
        keys = space.changed_keys(before, after)
        restart = [k for k in keys if change_kind(engine, k, before[k], after[k]) == "restart"]
        live = [k for k in keys if k not in restart]
        table_keys = [k for k in keys if space[k].location == "table"]
        if table_keys and not tables:
            raise ValidationError(
                f"--tables: step s{j + 1} changes {', '.join(table_keys)}, a table setting; "
                "name the tables it applies to, e.g. --tables ks.t1,ks.t2"
            )
        until_t = sw[j + 1].t if j + 1 < len(sw) else n_steps
        out.append(
            {
                "id": f"s{j + 1}",
                "due": (start + timedelta(seconds=s.t * step_seconds)).isoformat(),
                "until": (start + timedelta(seconds=until_t * step_seconds)).isoformat(),
                "target": {k: after[k] for k in keys},
                "per_node": {},
                **({"tables": list(tables)} if table_keys else {}),
                "live": live,
                "restart": restart,
                "batches": [list(b) for b in batches] if restart else [],
                "expected": {
                    "benefit_ops": float(s.benefit_ops),
                    "cost_ops": float(s.cost_ops),
                    "net_ops": float(s.benefit_ops) - float(s.cost_ops),
                },
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    """Make the plan and write it; progress goes to stderr."""
    from planner import costbenefit as cb
    from planner import optimiser as op
    from planner.commands.validate_plan import parse_hosts
    from planner.errors import ValidationError
    from planner.forecast import forecast, load_forecast
    from planner.perfmodel import load_default_model, load_model
    from planner.plan import check_tables, plan_from_dict, save_plan
    from planner.simulator import (
        capacity_matrix,
        change_seconds_matrix,
        make_problem,
        restart_matrix,
    )
    from planner.spaces import get_space
    from planner.topology import Ring, load_ring, safe_batches
    from planner.workload import load_trace

    t0 = time.perf_counter()
    if args.horizon < 2:
        raise ValidationError(f"--horizon: must be >= 2, got {args.horizon}")
    space = get_space(args.engine)
    tables = check_tables([t.strip() for t in args.tables.split(",") if t.strip()], "--tables")
    if args.samples * args.horizon > MAX_SAMPLE_STEPS:
        raise ValidationError(
            f"--samples: {args.samples} sample paths x --horizon {args.horizon} steps is over "
            f"{MAX_SAMPLE_STEPS:,} (the capacity matrices would not fit in memory)"
        )
    current = space.complete(_load_current(args.current, args.engine))
    candidates = space.candidates(base=current)
    if args.forecast:
        fc = load_forecast(args.forecast)
        source = args.forecast
    else:
        series = load_trace(args.trace)
        if series.step_seconds is None:
            raise ValidationError(f"{args.trace}: irregular trace; resample it first")
        _log(f"plan: forecasting {args.horizon} steps of {args.trace} ({len(series)} points)")
        fc = forecast(
            series, horizon=args.horizon, model=args.forecast_model,
            season_length=args.season_length, seed=args.seed, progress=_log,
        )
        source = args.trace
    if fc.engine != args.engine:
        raise ValidationError(f"forecast: is for {fc.engine}, not {args.engine}")
    horizon = min(args.horizon, len(fc.load_mean))
    step = float(fc.step_seconds)
    perf = load_model(args.model) if args.model else load_default_model(args.engine)
    if perf.engine != args.engine:
        raise ValidationError(f"--model: {args.model} is a {perf.engine} model, not {args.engine}")
    classes = perf.classes
    mix = np.stack([np.asarray(fc.mix_mean[c], dtype=float) for c in classes], axis=1)[:horizon]
    load = np.asarray(fc.load_mean, dtype=float)[:horizon]
    if args.samples > 0:
        paths = fc.sample_paths(args.samples, np.random.default_rng(args.seed))
        cap = np.stack(
            [capacity_matrix(perf, p.mix_matrix()[:horizon], candidates) for p in paths]
        )
        loads = np.stack([p.load[:horizon] for p in paths])
    else:
        cap = capacity_matrix(perf, mix, candidates)
        loads = load

    if args.engine == "cassandra":
        ring = load_ring(args.ring) if args.ring else Ring.simple(
            parse_hosts(args.hosts) or [], rf=args.rf
        )
        bp = safe_batches(
            ring, consistency_level=args.cl, tolerated_failures=args.tolerate,
            aggressive=args.aggressive,
        )
        batches, hosts = bp.batches, list(ring.hosts)
        _log(f"plan: {len(batches)} restart batch(es) for {args.cl.upper()}"
             + ("" if bp.exact else f" (lower bound {bp.lower_bound})"))
    else:
        hosts = parse_hosts(args.hosts) or []
        batches = tuple((h,) for h in hosts)  # Redis: one node at a time
    reconfig = cb.ReconfigModel.from_batches(
        batches, restart_seconds=args.restart_seconds, survivor_penalty=args.survivor_penalty
    )
    restart = restart_matrix(args.engine, candidates)
    problem = make_problem(
        cap, restart=restart, reconfig=reconfig, step_seconds=step,
        load=loads if args.served == "offered" else None, served=args.served, initial=0,
        change_seconds=change_seconds_matrix(
            args.engine, candidates, {"compaction": args.compaction_seconds}
        ) if args.engine == "cassandra" else None,
    )
    dp = op.solve_dp(problem)
    if args.method == "dp":
        ev, opt_info = dp, {"method": "dp", "seed": args.seed}
    else:
        options = op.GAOptions(
            seed=args.seed, population=args.population, generations=args.generations,
            searches=args.searches, workers=args.workers,
        )
        last = [0.0]

        def progress(search: int, gen: int, best: float) -> None:
            now = time.perf_counter()
            if now - last[0] > 1.0 or gen == options.generations:
                last[0] = now
                _log(f"plan: GA search {search + 1}/{options.searches} generation "
                     f"{gen}/{options.generations} best {best:.4g} ops")

        res = op.solve_ga(problem, options=options, progress=progress)
        ev = res.evaluation
        gap = (dp.total_ops - ev.total_ops) / dp.total_ops if dp.total_ops else 0.0
        opt_info = {
            "method": "ga", "seed": args.seed, "population": args.population,
            "generations": args.generations, "searches": args.searches,
            "gap_to_dp": round(float(gap), 6),
        }
    start = datetime.fromtimestamp(float(fc.timestamps[0]), tz=UTC)
    doc = {
        "schema_version": 1,
        "kind": "kairos-plan",
        "cluster": args.cluster,
        "engine": args.engine,
        "created_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "horizon": {"start": start.isoformat(), "step_seconds": step, "steps": horizon},
        "provenance": {
            "forecast": {"model": fc.model, "source": source, "samples": args.samples},
            "performance_model": {"name": perf.name, "version": perf.version,
                                  "file": args.model or f"{args.engine}-prior (shipped)"},
            "optimiser": opt_info,
            "cost_model": {"restart_seconds": args.restart_seconds,
                           "compaction_seconds": args.compaction_seconds,
                           "survivor_penalty": args.survivor_penalty, "served": args.served,
                           "batches": len(batches)},
            "expected": {"total_ops": ev.total_ops, "stay_ops": ev.baseline_ops,
                         "dp_optimum_ops": dp.total_ops},
        },
        "availability": {"consistency_level": args.cl.upper(),
                         "tolerated_failures": args.tolerate, "aggressive": args.aggressive},
        "current_config": dict(current),
        "steps": steps_from_evaluation(
            engine=args.engine, evaluation=ev, candidates=candidates, batches=batches,
            start=start, step_seconds=step, n_steps=horizon, tables=tables,
        ),
    }
    plan = plan_from_dict(doc, known_hosts=hosts)
    path = save_plan(plan, args.output, known_hosts=hosts)
    print(
        f"wrote {path}: {len(plan.steps)} step(s), expected net gain {ev.net_ops:.4g} ops "
        f"({ev.net_ops / ev.baseline_ops:+.2%} vs staying put) in "
        f"{time.perf_counter() - t0:.1f}s"
    )
    return 0
