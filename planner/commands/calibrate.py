"""``kairos calibrate``: measure configurations on the live cluster, fit the performance model."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner import inputs
from planner.commands.load import CLS
from planner.errors import sigterm_as_interrupt

if TYPE_CHECKING:  # the modules themselves load only when the command runs
    from planner.calibrate import Budget, CalibrationState
    from planner.loadgen import LoadConfig

#: Why the run budget stops at 10,000: at a minute or more a run, that is a week of
#: restarts, and the design search is quadratic in the runs.
RUNS_WHY = "configurations; each takes minutes"
#: Wall time of one invocation: up to a week.
MINUTES = inputs.bounded_float(0.0, 7 * 24 * 60.0, lo_open=True, why="at most a week")
#: Repeats and sweeps: 0 passes the type so that run_command gives its own message
#: ("--repeats: must be >= 1"); above 100 the calibration would take weeks.
REPEATS = inputs.bounded_int(0, 100, why="each multiplies the measurements")
#: The designs (planner.calibrate.state.DESIGNS) and the default of a new calibration
#: (planner.calibrate.design.DEFAULT_DESIGN), spelled here so that the parser needs neither
#: module; tests/unit/test_calibrate_bo.py checks that they agree.
DESIGNS = ("bo", "maximin")
DEFAULT_DESIGN = "maximin"
#: planner.calibrate.state.MIX_ORDERS, likewise (the first is the default).
MIX_ORDERS = ("mirrored", "fixed")
#: Defaults that depend on the engine (an argument left at None takes the engine's):
#: the executor playbook, the port, the warm-up after a restart (a JVM runs cold for
#: minutes, a Redis node reloads and is warm once its cache is) and the requests in flight
#: (Cassandra: per process, asynchronous; Redis: client threads per process).
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "cassandra": {"playbook": "playbooks/change_settings.yml", "port": 9042,
                  "restart_warmup": 240.0, "concurrency": 64},
    "redis": {"playbook": "playbooks/change_settings_redis.yml", "port": 6379,
              "restart_warmup": 30.0, "concurrency": 8},
}
#: The lab's Redis nodes: a Redis calibration reads the running values on each.
LAB_REDIS_HOSTS = ",".join(f"127.0.0.1:{port}" for port in range(7001, 7007))
#: The default --hosts per engine where the load's own default is not every node (a
#: Redis calibration reads the running values on each node it is given).
LAB_HOSTS = {"redis": LAB_REDIS_HOSTS}
#: The engines whose calibrations measure workload shapes (--shape), not mixes, and read
#: the running values with CONFIG GET.
SHAPED_ENGINES = frozenset({"redis"})


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` sub-command."""
    p = subparsers.add_parser(
        "calibrate",
        help="measure configurations on the live cluster and fit the performance model",
        description="Choose configurations to measure (the running one first, then a "
        "space-filling design, then by --design: where the fitted model is least sure, or "
        "where a Gaussian process expects the largest improvement), apply each through "
        "the executor (playbooks/change_settings.yml: live where possible, rolling restart "
        "otherwise), warm up, measure every workload mix with the load generator, save each "
        "observation at once (an interrupted calibration resumes where it stopped), refit "
        "the model and report its leave-one-configuration-out error. At the end the "
        "configuration that ran before is restored unless --keep-last. A Redis calibration "
        "measures workload shapes (--shape) instead of mixes. Credentials come from "
        "KAIROS_CASSANDRA_USERNAME / KAIROS_CASSANDRA_PASSWORD and the loads' from "
        "KAIROS_LOAD_* (Redis: KAIROS_REDIS_*), never from the command line. See "
        "docs/calibration.md.",
    )
    p.add_argument("--engine", choices=tuple(ENGINE_DEFAULTS), default="cassandra")
    p.add_argument("--dir", default=None,
                   help="calibration directory: state.json, observations.csv, model.json, "
                   "report.json, executor.log (default .kairos/calibration/ENGINE); the "
                   "same directory resumes")
    _add_space_arguments(p.add_argument_group("what to measure"))
    _add_budget_arguments(p.add_argument_group("budget (give one or both)"))
    _add_run_arguments(p.add_argument_group("each run"))
    _add_executor_arguments(p.add_argument_group("executor"))
    _add_load_arguments(p.add_argument_group("load (see kairos load)"))
    p.set_defaults(func=run_command)


def _add_space_arguments(space: Any) -> None:
    """The grid, the mixes, the running values, the design's start."""
    space.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2,...",
                       help="a parameter and its levels (repeatable); the running value is "
                       "always added. Default: the space's grid keys over their candidate "
                       "values")
    space.add_argument("--mix", action="append", default=[], metavar="NAME:CLASS=F,...",
                       help="a workload mix to measure (repeatable), e.g. "
                       "read-heavy:read=0.9,update=0.1. Default: read-heavy (read 0.9, update "
                       "0.1) and write-heavy (read 0.1, update 0.9). Cassandra only")
    space.add_argument("--shape", action="append", default=[], metavar="NAME[:keys=N,...]",
                       help="Redis: a workload shape to measure (repeatable; kairos load "
                       "--shape), with its keys, value size and class fractions if not the "
                       "shape's own, e.g. cache-scan:keys=120000,value-size=1000 or "
                       "hash-read:read=0.9,write=0.1. Default: cache-scan and hash-read")
    space.add_argument("--current", metavar="FILE",
                       help="YAML mapping of the running values (default: read over CQL; "
                       "needed for heap_size)")
    space.add_argument("--design", choices=DESIGNS, default=None,
                       help="how the configurations after the space-filling start are "
                       "chosen: bo (Bayesian optimisation: the largest expected improvement "
                       "under a Gaussian process per mix, aiming at the best configuration) "
                       "or maximin (where the fitted model is least sure, aiming at the "
                       f"model). Default {DEFAULT_DESIGN} (docs/calibration.md); a resumed "
                       "calibration keeps the design it began with")
    space.add_argument("--initial", type=inputs.bounded_int(0, 10_000), default=0,
                       help="configurations of the space-filling design before the model "
                       "chooses, the running one included (default: parameters + 1 with "
                       "maximin, at most 3 with bo)")
    space.add_argument("--seed", type=inputs.SEED, default=0,
                       help="seed of the design's tie-breaks")


def _add_budget_arguments(bud: Any) -> None:
    """How many configurations, how much wall time."""
    bud.add_argument("--runs", type=inputs.bounded_int(1, 10_000, why=RUNS_WHY),
                     help="configurations in the whole calibration, "
                     "resumed ones included")
    bud.add_argument("--minutes", type=MINUTES, help="wall time of this invocation: no "
                     "configuration starts that is not expected to finish in it")


def _add_run_arguments(run: Any) -> None:
    """Warm-up, measurement, repeats and sweeps, the end of a calibration."""
    run.add_argument("--warmup", type=inputs.DURATION, default=30.0,
                     help="seconds of unmeasured load after each change, in one window "
                     "(default 30)")
    run.add_argument("--warmup-max", type=inputs.DURATION, default=None,
                     help="after the first window, keep warming up window after window while "
                     "the throughput still rises by more than --warmup-tolerance, up to this "
                     "many seconds more (default 3 x --warmup; 0: the first window only)")
    run.add_argument("--restart-warmup", type=inputs.DURATION, default=None,
                     help="the first warm-up window after a rolling restart, and of the "
                     "calibration, lasts at least this long: restarted JVMs run cold for "
                     "minutes (default 240; Redis 30)")
    run.add_argument("--settle-timeout", type=inputs.DURATION, default=1800.0,
                     help="after a compaction-strategy change, wait up to this long (no load) "
                     "until no node runs or queues a compaction, before the warm-up: every "
                     "node rewrites its SSTables (default 1800; 0: do not wait)")
    run.add_argument("--warmup-tolerance", type=inputs.bounded_float(0.0, 0.99),
                     default=0.05,
                     help="a warm-up window this much faster than the one before counts as "
                     "still rising (default 0.05)")
    run.add_argument("--seconds", type=inputs.DURATION, default=60.0,
                     help="seconds measured per mix (default 60)")
    run.add_argument("--repeats", type=REPEATS, default=1,
                     help="runs per (configuration, mix), taken in rounds over the mixes; the "
                     "errors are scored against their geometric mean (default 1). Raising it "
                     "on a resume tops up every configuration already measured")
    run.add_argument("--sweeps", type=REPEATS, default=1,
                     help="measure the whole design this many times, in mirrored order "
                     "(forward, backward, ...), so every configuration's runs are centred on "
                     "the same moment and a linear drift of the cluster favours none; with 2 "
                     "or more the original's last sweep is its re-measurement (no separate "
                     "recheck). Default 1")
    run.add_argument("--mix-order", choices=MIX_ORDERS, default=None,
                     help="mirrored: even sweeps take the mixes in reverse (a drift within a "
                     "run favours no mix); fixed: every run takes them in the --mix order, "
                     "for a mix whose speed depends on the one before (scans after the "
                     "updates that fragment the rows). Default mirrored; a resumed "
                     "calibration keeps the order it began with")
    run.add_argument("--keep-last", action="store_true",
                     help="leave the last measured configuration running (default: restore)")
    run.add_argument("--no-recheck", action="store_true",
                     help="after restoring, do not measure the original configuration again "
                     "(default: measure it, to report the cluster's drift beside the gains)")
    run.add_argument("--fit-only", action="store_true",
                     help="refit from the directory's observations; touch no node")


def _add_executor_arguments(ex: Any) -> None:
    """How each configuration is applied."""
    ex.add_argument("--inventory", default="inventories/local/hosts.yml")
    ex.add_argument("--playbook", default=None,
                    help="the executor's entry point (default playbooks/change_settings.yml; "
                    "Redis: playbooks/change_settings_redis.yml)")
    ex.add_argument("--rollout-cl", type=str.upper, choices=CLS, default="QUORUM",
                    help="consistency level the rolling restarts keep (default QUORUM)")


def _add_load_arguments(ld: Any) -> None:
    """The measured load (a subset of ``kairos load``)."""
    ld.add_argument("--hosts", help="comma-separated contact points (default: the local lab); "
                    "Redis: every node as address:port (each one's running values are read)")
    ld.add_argument("--port", type=inputs.PORT, default=None,
                    help="default port of --hosts (default 9042; Redis 6379)")
    ld.add_argument("--cl", type=str.upper, choices=CLS, default="QUORUM",
                    help="consistency level of the measured operations (default QUORUM)")
    ld.add_argument("--keyspace", default="kairos_load")
    ld.add_argument("--table", default="usertable")
    ld.add_argument("--keys", type=inputs.bounded_int(1, 10**9), default=100_000,
                    help="records, written once before the first measurement (default 100000)")
    ld.add_argument("--preloaded", action="store_true",
                    help="the table already holds the --keys records (written by `kairos load "
                    "--preload` with the same --keys and --value-size): the first warm-up "
                    "does not write them again")
    ld.add_argument("--distribution", choices=("uniform", "zipfian", "latest"),
                    default="zipfian")
    ld.add_argument("--value-size", type=inputs.bounded_int(32, 16 * 1024 * 1024), default=100)
    ld.add_argument("--concurrency", type=inputs.bounded_int(1, 4096), default=None,
                    help="requests in flight per process (default 64; Redis: client "
                    "threads per process, default 8)")
    ld.add_argument("--processes", type=inputs.PROCESSES, default=1)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _read_current(path: str, engine: str) -> dict[str, Any]:
    # An empty file would mean "defaults": not what a calibration of the running
    # cluster should assume, so it is refused here.
    from planner.errors import ValidationError
    from planner.model.spaces import load_config

    data = load_config(path, engine=engine)
    if not data:
        raise ValidationError(f"--current: {path}: expected a mapping parameter -> value")
    return data


def _fit_and_write(state: Any, paths: dict[str, Path], stopped: str) -> dict[str, Any]:
    from planner.calibrate import (
        best_by_mix,
        fit_observations,
        observations_frame,
        sweep_drift,
    )
    from planner.model.performance import save_model

    df = observations_frame(state)
    model, fit = fit_observations(df, engine=state.engine) if len(df) else (
        None, {"error": "no observations", "heldout_mape": None})
    report = {
        "kind": "kairos-calibration-report",
        "engine": state.engine,
        "stopped": stopped,
        "configurations": len(state.design),
        "measurements": len(state.measurements),
        "failed_operations": sum(int(m.get("failed", 0)) for m in state.measurements),
        "fit": fit,
        "best_by_mix": best_by_mix(state),
        "sweeps": state.sweeps,
        "sweep_drift": sweep_drift(state),
        "original": state.original,
        "levels": state.levels,
        "mixes": state.mixes,
        "environment": state.environment,
        "command": state.command,
        "files": {k: str(v) for k, v in paths.items()},
    }
    if model is not None:
        env = state.environment
        model = dataclasses.replace(
            model,
            provenance=f"kairos calibrate: {len(df)} observations ({paths['observations']}) "
            f"on {env.get('cpus')} CPU(s) {env.get('cpu', '')}, "
            f"{state.engine.capitalize()} {env.get('cluster_version', '?')}, from "
            f"{state.created_at}",
            info={"calibration": {k: v for k, v in report.items() if k != "files"}},
        )
        save_model(model, paths["model"])
    paths["report"].write_text(json.dumps(report, indent=1) + "\n")
    return report


def _effect_lines(fit: dict[str, Any]) -> list[str]:
    """What the pooled model keeps of each configuration's effect: those whose 95 % interval
    excludes zero, or that none does (plans made with it then gain little from a change)."""
    effects = fit.get("effects") or []
    if not effects:
        return []
    kept = [e for e in effects if e["excludes_zero"]]
    if not kept:
        largest = max(effects, key=lambda e: abs(e["effect"]))
        low, high = largest["interval"]
        return [f"no configuration effect's 95 % interval excludes zero ({len(effects)} "
                f"effect(s); the largest {largest['effect']:+.1%} [{low:+.1%}, {high:+.1%}] "
                f"for {largest['config']} under {largest['mix']}): the model shrinks them "
                "towards zero"]
    return [f"effect {e['effect']:+.1%} [{e['interval'][0]:+.1%}, {e['interval'][1]:+.1%}] "
            f"for {e['config']} under {e['mix']} (95 % interval excludes zero)" for e in kept]


def _summary(report: dict[str, Any]) -> str:
    from planner.calibrate.importance import importance_lines

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    fit = report["fit"]
    lines = [f"calibration: {report['configurations']} configuration(s), "
             f"{report['measurements']} measurement(s), {report['failed_operations']} failed "
             f"operation(s); {report['stopped']}"]
    if fit.get("error"):
        lines.append(f"no model: {fit['error']}")
    else:
        lines.append(
            f"model ({fit['design']}, {fit['n_observations']} observations): held-out MAPE "
            f"{pct(fit['heldout_mape'])} (leave-one-configuration-out), in-sample "
            f"{pct(fit['in_sample_mape'])}; mix-only baseline held-out "
            f"{pct(fit['baseline_heldout_mape'])}"
        )
        lines.extend(_effect_lines(fit))
        lines.extend(importance_lines(fit))
        if fit.get("repeat_spread") is not None:
            lines.append(f"run-to-run spread of repeated runs: {pct(fit['repeat_spread'])}")
        latency = fit.get("latency")
        if isinstance(latency, dict):
            lines.append(
                f"p99 latency model: held-out MAPE {pct(latency['heldout_mape'])}, in-sample "
                f"{pct(latency['in_sample_mape'])} (a saturated window's p99)"
                if latency.get("fitted") else f"no p99 latency model: {latency.get('why')}")
    drift_all = report.get("sweep_drift")
    if drift_all:
        lines.append(f"the cluster moved {drift_all['first_to_last']:+.1%} from the first sweep "
                     f"to the last ({drift_all['pairs']} configuration-mix pairs); every "
                     "configuration's runs are centred on the same moment")
    for mix, best in report["best_by_mix"].items():
        gain = "" if best["gain"] is None else f" ({best['gain']:+.1%} over the original)"
        drift = ""
        if best.get("gain_over_recheck") is not None:
            drift = (f"; {best['gain_over_recheck']:+.1%} over the original measured again "
                     f"at the end, which drifted {best['original_drift']:+.1%}")
        elif best.get("original_drift") is not None:
            drift = (f"; the original itself moved {best['original_drift']:+.1%} from its "
                     "first sweep to its last")
        lines.append(f"{mix}: best {best['best_ops_per_s']:.0f} ops/s with "
                     f"{best['best_config']}{gain}{drift}")
    lines.extend(f"wrote {report['files'][k]}" for k in ("observations", "model", "report")
                 if k != "model" or not fit.get("error"))
    return "\n".join(lines)


def run_command(args: argparse.Namespace) -> int:
    """Validate everything, then calibrate (or only refit with --fit-only)."""
    from planner.calibrate import CalibrationState, write_observations

    _fill_engine_defaults(args)
    root = Path(args.dir)
    paths = {"state": root / "state.json", "observations": root / "observations.csv",
             "model": root / "model.json", "report": root / "report.json",
             "executor_log": root / "executor.log"}
    if args.fit_only:
        state = CalibrationState.load(paths["state"])
        write_observations(state, paths["observations"])
        print(_summary(_fit_and_write(state, paths, "refit only")))
        return 0
    # Everything is checked here, before any node is touched.
    run = _checked_run(args)
    state = _open_state(args, run, paths)
    # `kill` stops it as Ctrl-C does: the load stopped, everything measured kept.
    with sigterm_as_interrupt():
        return _calibrate(args, run, state, paths)


def _fill_engine_defaults(args: argparse.Namespace) -> None:
    """The arguments left at None take the engine's defaults (:data:`ENGINE_DEFAULTS`)."""
    for name, value in ENGINE_DEFAULTS[args.engine].items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.dir is None:
        args.dir = f".kairos/calibration/{args.engine}"


@dataclasses.dataclass(frozen=True)
class _Run:
    """What the arguments ask of a calibration, validated."""

    levels: dict[str, tuple[Any, ...]]
    mixes: dict[str, dict[str, float]]
    budget: Budget
    initial: int  # 0: the design's default (planner.calibrate.design.default_initial)
    warmup_max: float
    load: LoadConfig
    ansible_playbook: str
    # Redis: the load of each shape (the mixes are the shapes) and the options given for
    # each; None for Cassandra
    loads: dict[str, LoadConfig] | None = None
    shapes: dict[str, dict[str, Any]] | None = None


def _checked_run(args: argparse.Namespace) -> _Run:
    """Every argument checked, in the order the messages are given."""
    from planner.calibrate import (
        DEFAULT_MIXES,
        Budget,
        default_levels,
        find_ansible_playbook,
        parse_levels,
        parse_mixes,
    )
    from planner.calibrate.redis_bench import shape_loads
    from planner.errors import ValidationError
    from planner.loadgen import LoadConfig, parse_mix
    from planner.loadgen.shapes import SHAPES

    _fill_engine_defaults(args)
    engine = args.engine
    levels = parse_levels(args.param, engine) if args.param else default_levels(engine)
    shapes = _checked_shapes(args)
    if shapes is not None:
        mixes = {name: parse_mix(options.get("mix") or dict(SHAPES[name].mix), engine)
                 for name, options in shapes.items()}
    else:
        mixes = (parse_mixes(args.mix, engine) if args.mix
                 else {k: parse_mix(v, engine) for k, v in DEFAULT_MIXES.items()})
    budget = Budget(runs=args.runs, minutes=args.minutes)
    if not args.seconds > 0 or not args.warmup >= 0:
        raise ValidationError("--seconds must be > 0 and --warmup >= 0")
    warmup_max = 3 * args.warmup if args.warmup_max is None else args.warmup_max
    if not warmup_max >= 0 or not args.restart_warmup >= 0 or \
            not 0 <= args.warmup_tolerance < 1:
        raise ValidationError("--warmup-max and --restart-warmup must be >= 0, "
                              "--warmup-tolerance in [0, 1)")
    if args.repeats < 1:
        raise ValidationError(f"--repeats: must be >= 1, got {args.repeats}")
    if args.sweeps < 1:
        raise ValidationError(f"--sweeps: must be >= 1, got {args.sweeps}")
    text = args.hosts or LAB_HOSTS.get(engine, "")
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    load = LoadConfig(
        engine=engine, contact_points=hosts, port=args.port, cl=args.cl,
        keyspace=args.keyspace, table=args.table, keys=args.keys,
        max_keys=max(args.keys, 1_000_000), distribution=args.distribution,
        value_size=args.value_size, concurrency=args.concurrency, processes=args.processes,
        seconds=args.seconds, mix=next(iter(mixes.values())), verify=False,
    )
    for name, path in (("--inventory", args.inventory), ("--playbook", args.playbook)):
        if not Path(path).exists():
            raise ValidationError(f"{name}: {path}: no such file")
    loads = shape_loads(shapes, load) if shapes is not None else None
    return _Run(levels=levels, mixes=mixes, budget=budget, initial=args.initial,
                warmup_max=warmup_max, load=load, ansible_playbook=find_ansible_playbook(),
                loads=loads, shapes=shapes)


def _checked_shapes(args: argparse.Namespace) -> dict[str, dict[str, Any]] | None:
    """Redis: the shapes to measure (the mixes); None for Cassandra, which has no shapes."""
    from planner.calibrate.redis_bench import parse_shapes
    from planner.errors import ValidationError

    if args.engine not in SHAPED_ENGINES:
        if args.shape:
            raise ValidationError(f"--shape: {args.engine} calibrations measure mixes "
                                  "(--mix); shapes are Redis loads")
        return None
    if args.mix:
        raise ValidationError("--mix: a Redis calibration measures workload shapes: give "
                              "--shape NAME (kairos load --shape)")
    return parse_shapes(args.shape)


def _open_state(args: argparse.Namespace, run: _Run, paths: dict[str, Path]
                ) -> CalibrationState:
    """The state of the directory (resumed, topped up to --repeats and --sweeps), or a new
    one that starts from the configuration the cluster runs now."""
    from planner.calibrate import CalibrationState

    if not paths["state"].exists():
        return _new_state(args, run, paths)
    state = CalibrationState.load(paths["state"])
    state.compatible(engine=args.engine, levels=run.levels, mixes=run.mixes,
                     repeats=args.repeats, sweeps=args.sweeps, design=args.design,
                     mix_order=args.mix_order, shapes=run.shapes)
    if args.repeats > state.repeats:
        _log(f"calibrate: --repeats {state.repeats} -> {args.repeats}: every configuration "
             "measured so far gets the missing runs")
        state.repeats = args.repeats
        state.save(paths["state"])
    if args.sweeps > state.sweeps:
        _log(f"calibrate: --sweeps {state.sweeps} -> {args.sweeps}: the design is measured "
             "again in mirrored order")
        state.sweeps = args.sweeps
        state.save(paths["state"])
    _log(f"calibrate: resuming {paths['state']}: {len(state.design)} configuration(s), "
         f"{len(state.measurements)} measurement(s) so far, {state.design_strategy} design")
    return state


def _new_state(args: argparse.Namespace, run: _Run, paths: dict[str, Path]
               ) -> CalibrationState:
    """A new calibration: the running values (from --current, else read over CQL), saved."""
    from datetime import UTC, datetime

    from planner.calibrate import (
        CalibrationState,
        describe_environment,
        make_space,
        read_running_config,
    )
    from planner.calibrate.redis_bench import read_running_redis

    engine = args.engine
    running = _read_current(args.current, engine) if args.current else {}
    unknown = [k for k in run.levels if k not in running]
    version = ""
    if unknown and engine in SHAPED_ENGINES:
        read, version = read_running_redis(unknown, hosts=run.load.contact_points,
                                           port=args.port)
        running.update(read)
    elif unknown:
        read, version = read_running_config(
            unknown, hosts=run.load.contact_points, port=args.port or 9042,
            keyspace=args.keyspace, table=args.table)
        running.update(read)
    space = make_space(engine, run.levels, running)
    original = {k: running[k] for k in space.params}
    state = CalibrationState(
        engine=engine, levels=space.to_dict(), mixes=run.mixes, seed=args.seed,
        original=original, applied=dict(original), repeats=args.repeats,
        sweeps=args.sweeps, design_strategy=args.design or DEFAULT_DESIGN,
        mix_order=args.mix_order or MIX_ORDERS[0],
        created_at=datetime.now(UTC).replace(microsecond=0).isoformat(),
        command=shlex.join(["kairos", *sys.argv[1:]]) if sys.argv else "kairos calibrate",
        environment=describe_environment(version), preloaded=args.preloaded,
        shapes=run.shapes or {},
    )
    state.save(paths["state"])
    grid = len(space.grid())
    _log(f"calibrate: {grid} configuration(s) in the grid over {list(space.params)}; "
         f"running now: {original}; {state.design_strategy} design")
    return state


def _calibrate(args: argparse.Namespace, run: _Run, state: CalibrationState,
               paths: dict[str, Path]) -> int:
    """Measure, fit, restore (and re-measure the original); 130 when interrupted."""
    from planner.calibrate import (
        ExecutorBench,
        read_caches,
        recheck_original,
        restore,
        run_calibration,
        write_observations,
    )
    from planner.calibrate.design import default_initial
    from planner.calibrate.redis_bench import RedisShapeBench
    from planner.model.spaces import get_space

    common: dict[str, Any] = dict(
        warmup_seconds=args.warmup, measure_seconds=args.seconds,
        warmup_max_seconds=run.warmup_max, warmup_tolerance=args.warmup_tolerance,
        restart_warmup_seconds=args.restart_warmup,
        playbook=args.playbook, inventory=args.inventory, rollout_cl=args.rollout_cl,
        log_path=paths["executor_log"], ansible_playbook=run.ansible_playbook, log=_log)
    bench: ExecutorBench
    if run.loads is not None:
        bench = RedisShapeBench(loads=run.loads, **common)
    else:
        bench = ExecutorBench(
            load=run.load, settle_timeout=args.settle_timeout, **common,
            read_caches=functools.partial(read_caches, run.load.contact_points,
                                          port=run.load.port or 9042))
    # Split-plot order (restart-class values changed as rarely as possible) when the budget
    # covers the whole grid: the order then changes nothing of what is measured.
    group = run.budget.runs is not None and run.budget.runs >= len(state.space.grid())
    if group:
        _log("calibrate: the budget covers the grid: configurations that need no restart "
             "or compaction change from where the cluster is come first")
    try:
        initial = run.initial or default_initial(len(state.levels), state.design_strategy)
        stopped = run_calibration(state, bench=bench, budget=run.budget, initial=initial,
                                  state_path=paths["state"],
                                  observations_path=paths["observations"], log=_log,
                                  group_restarts=group)
        _log(f"calibrate: stopped: {stopped}")
        write_observations(state, paths["observations"])
        report = _fit_and_write(state, paths, stopped)
        if args.keep_last:
            _log(f"calibrate: --keep-last: the cluster keeps {state.applied}")
        else:
            restored = restore(state, bench=bench, state_path=paths["state"], log=_log)
            # With sweeps the original's last sweep already re-measured it.
            if not args.no_recheck and state.sweeps == 1 and recheck_original(
                    state, bench=bench, state_path=paths["state"],
                    observations_path=paths["observations"], log=_log,
                    restarted=bool(get_space(args.engine).restart_params(restored))):
                report = _fit_and_write(state, paths, stopped)
    except KeyboardInterrupt:
        _log(f"calibrate: interrupted; everything measured is in {paths['state']}. The "
             f"cluster runs {state.applied}. Rerun the same command to resume.")
        return 130
    print(_summary(report))
    return 0
