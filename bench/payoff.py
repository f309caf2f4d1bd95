"""The payoff experiment on the lab: four policies under a shifting, saturating load.

SOPHIA's experiment (seeds/000) reproduced on real servers in minutes (docs/payoff.md). For
each workload shape (``--shapes``: SOPHIA's bus-tracking day, HPC job queue, MG-RAST portal,
or a reporting day of scans and ingestion batches; compressed into ``--minutes``,
planner/lab/payoff.py) and each policy, in mirrored order over ``--repetitions`` (A B C D D C B
A ...):

1. with ``--layout``, the default configuration and then the table's SSTables saved once
   with ``--save-layout`` are put back (planner/lab/sstable_layout.py), so that every policy
   starts from the same layout; the starting configuration is put in place through the
   executor (playbooks/change_settings.yml, as ``kairos calibrate`` applies settings): the
   default one, or static-best's; then, with no load, a wait until no node runs or queues a
   compaction (a strategy change rewrites every SSTable: the run before may have left
   minutes of it), and an unmeasured warm-up;
2. a closed-loop load whose mix follows the schedule runs (``--concurrency`` requests in
   flight per process, unthrottled; planner.loadgen), and the policy's changes are applied
   through the executor at their times while it runs;
3. the run's served operations, ops/s, p50/p99, failures, lost writes, changes and restarts
   and its time series (per ``--step-seconds``) are recorded, and the configuration is read
   back from the nodes and compared with what the policy should have left.

The policies' decisions are computed before the first run from the performance model
(``--model``): see planner/lab/payoff.py. ``kairos`` follows the plan ``make_plan`` makes on the
schedule (a perfect forecast, served work, the restart cost).

``--engine redis`` runs it on the lab's Redis Cluster: the Redis model
(inventories/local/calibration/redis-model.json), the hash day (``--shapes hashes``: big hashes
written much more than read, then read much more than written, the load shapes hash-write and
hash-read of planner/loadgen/shapes.py over the same 7,000 hashes), the Redis executor
(playbooks/change_settings_redis.yml: CONFIG SET, the conf files, read back), the load's keys
(``--prefix``) unlinked before every run so that each starts from an empty cache filled under
its starting configuration, every WAIT-acknowledged write verified after the run (a key the
primaries evicted is counted as evicted, not lost), and the configuration read back with
CONFIG GET on every node (``--hosts``: all six). The options of tables and consistency levels
(``--keyspace``, ``--layout``, ``--cl``, ...) are Cassandra's and refused there.

Writes ``--out``/results.json (after every run), series.csv, payoff.html (charts and the
table) and executor.log; prints progress to stderr and the table to stdout. ``--render DIR``
writes DIR/payoff.html again from DIR/results.json (the records in docs/payoff-records/ keep
only results.json and series.csv). Exit code 0 when every run completed, 1 when a run failed
(the executor, the load or the read-back; the run is recorded as failed), 2 for bad options.
The CQL login comes from KAIROS_CASSANDRA_USERNAME / KAIROS_CASSANDRA_PASSWORD in the
environment, the Redis one from KAIROS_REDIS_USERNAME / KAIROS_REDIS_PASSWORD (the loads': the
KAIROS_LOAD_* variables; bench/lab_env.sh sets them all on the lab), never argv. Run from the
repository root::

    nice -n 19 .venv/bin/python bench/payoff.py --plan-only        # the decisions, no lab
    nice -n 19 .venv/bin/python bench/payoff.py --engine redis --plan-only  # Redis' decisions
    nice -n 19 .venv/bin/python bench/payoff.py --out .kairos/payoff  # ~1.5 h: 8 runs of 8 min
    nice -n 19 .venv/bin/python bench/payoff.py --short --out /tmp/payoff  # CI plumbing, ~4 min
    .venv/bin/python bench/payoff.py --render docs/payoff-records/warehouse  # a record's page
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner.engines import ENGINES, Engine, get_engine
from planner.errors import KairosError, ValidationError, sigterm_as_interrupt
from planner.lab import payoff as po
from planner.model.spaces import get_space
from planner.planning.pipeline import DEFAULT_CHANGE_SECONDS
from planner.workload.series import classes_for

#: What ``--short`` sets (the CI plumbing run), unless the option is given (and the load's
#: size of :data:`ENGINE_SHORT`).
SHORT = {"minutes": 1.0, "repetitions": 1, "policies": "default,kairos", "warmup": 5.0,
         "restart_warmup": 30.0}
DEFAULTS = {"minutes": 8.0, "repetitions": 2, "policies": ",".join(po.POLICIES),
            "warmup": 60.0, "restart_warmup": 180.0}
#: The defaults that depend on ``--engine`` (an option left at None takes its engine's): the
#: model, the executor's entry point, the schedule, the nodes (Redis: every node, each read
#: back) and the load's data. Redis': the data of the lab's Redis calibration (7,000 hashes
#: of 256-768 fields of 40 bytes, read uniformly, 8 client threads; PROVENANCE.md there).
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {
    "cassandra": {"model": "inventories/local/calibration/cassandra-model.json",
                  "playbook": "playbooks/change_settings.yml", "shapes": "bus",
                  "hosts": "127.0.0.1,127.0.0.2,127.0.0.3", "port": 9042,
                  "distribution": "zipfian", "value_size": 100, "keys": 100_000,
                  "concurrency": 64},
    "redis": {"model": "inventories/local/calibration/redis-model.json",
              "playbook": "playbooks/change_settings_redis.yml", "shapes": "hashes",
              "hosts": ",".join(f"127.0.0.1:{port}" for port in range(7001, 7007)),
              "port": 6379, "distribution": "uniform", "value_size": 40, "keys": 7000,
              "concurrency": 8},
}
#: What ``--short`` sets per engine besides :data:`SHORT` (Redis keeps the calibration's
#: data: fewer hashes fit in memory whatever the listpack threshold).
ENGINE_SHORT: dict[str, dict[str, Any]] = {
    "cassandra": {"keys": 5000, "concurrency": 32},
    "redis": {},
}
#: Options of an engine with tables (planner.engines: ``tables``): the keyspace and table,
#: their SSTables and compactions, the history before a run. Their defaults; refused, naming
#: the option, for an engine without tables.
TABLE_OPTIONS: dict[str, Any] = {
    "keyspace": "kairos_payoff", "table": "usertable", "layout": None, "save_layout": False,
    "lab_dir": ".lab/cassandra", "settle_timeout": 1800.0, "preloaded": False,
    "precondition": 0.0, "precondition_mix": {"update": 0.9, "scan": 0.1},
    "compaction_seconds": DEFAULT_CHANGE_SECONDS["compaction"], "change_costs": None,
}
#: What those options are for an engine without the fact (none given): off; the rest None.
ABSENT: dict[str, Any] = {"settle_timeout": 0.0, "precondition": 0.0, "save_layout": False,
                          "preloaded": False}
#: Options of an engine whose requests carry a consistency level (``consistency_level``).
CL_OPTIONS: dict[str, Any] = {"cl": "QUORUM"}
#: Options of an engine without tables: the prefix of the load's keys (its data).
KEY_OPTIONS: dict[str, Any] = {"prefix": "kairos_payoff"}
#: Seconds the load may overrun its schedule before it is stopped.
LOAD_SLACK = 30.0
PROGRESS_EVERY = 30.0


def say(msg: str) -> None:
    print(f"payoff: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------- options
def _mix(text: str) -> dict[str, float]:
    """argparse type: ``update=0.9,scan=0.1`` as a validated Cassandra mix."""
    from planner.loadgen.workload import parse_mix

    try:
        return parse_mix(text, "cassandra")
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(f"--precondition-mix: {exc}") from None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/payoff.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    exp = p.add_argument_group("the experiment")
    exp.add_argument("--engine", default="cassandra",
                     help=f"the engine, of {', '.join(ENGINES)} (default cassandra)")
    exp.add_argument("--shapes",
                     help="workload shapes, comma-separated, of the engine's: " + "; ".join(
                         f"{e}: {', '.join(po.shapes_for(e))}" for e in ENGINES)
                     + " (default bus; Redis hashes)")
    exp.add_argument("--minutes", type=float, help="length of one run (default 8; --short 1)")
    exp.add_argument("--repetitions", type=int,
                     help="repetitions of every policy, mirrored order (default 2; --short 1)")
    exp.add_argument("--policies", help=f"comma-separated, of {', '.join(po.POLICIES)} "
                     "(default all; --short default,kairos)")
    exp.add_argument("--shift-seconds", type=float, default=po.DEFAULT_SHIFT_SECONDS,
                     help="target time between shifts of the mix (default 120)")
    exp.add_argument("--step-seconds", type=float, default=po.DEFAULT_STEP_SECONDS,
                     help="step of the schedule and of the time series (default 5)")
    exp.add_argument("--seed", type=int, default=0, help="seed of the traces and the planner")
    exp.add_argument("--peak-rate", type=float, metavar="OPS",
                     help="an open loop: the busiest segment offers OPS ops/s and every other "
                     "its share of the trace's load (quiet hours included); default: a closed "
                     "loop that saturates the cluster")
    exp.add_argument("--warmup", type=float, help="unmeasured load before each run, seconds "
                     "(default 60; --short 5)")
    exp.add_argument("--restart-warmup", type=float,
                     help="the warm-up when the starting configuration needed a restart "
                     "(default 180; --short 30)")
    exp.add_argument("--settle-timeout", type=float,
                     help="before each run, wait up to this many seconds for the nodes' "
                     "compactions to finish (0: do not wait; default 1800; Cassandra)")
    exp.add_argument("--short", action="store_true",
                     help="the CI plumbing run: " + ", ".join(
                         f"--{k.replace('_', '-')} {v}" for k, v in SHORT.items())
                     + "; Cassandra also --keys 5000 --concurrency 32")
    exp.add_argument("--precondition", type=float, metavar="SECONDS",
                     help="before every run, this long under --precondition-mix in the default "
                     "configuration: the same recent history for every policy (default 0: none; "
                     "Cassandra)")
    exp.add_argument("--precondition-mix", type=_mix, metavar="CLASS=SHARE,...",
                     help="the preconditioning load's mix (default update=0.9,scan=0.1; "
                     "Cassandra)")
    exp.add_argument("--layout", metavar="DIR",
                     help="before every run, truncate the table and put back the SSTables "
                     "saved in DIR (planner/lab/sstable_layout.py): every policy starts from the "
                     "same layout; lab only; Cassandra")
    exp.add_argument("--save-layout", action="store_true", default=None,
                     help="save the table's SSTables as they are now into --layout and exit")
    exp.add_argument("--lab-dir",
                     help="the lab's node directories, for --layout (default .lab/cassandra)")
    exp.add_argument("--plan-only", action="store_true",
                     help="print every policy's decisions and exit; touch no node")
    exp.add_argument("--resume", action="store_true",
                     help="go on with the experiment in --out: keep its completed runs and run "
                     "the rest of the order (a failed run again; its record is kept under "
                     "failed_runs); refused when --out's plans differ from this command's")
    exp.add_argument("--keep-going", action="store_true",
                     help="after a failed run, go on with the next (default: stop)")
    exp.add_argument("--out", default=".kairos/payoff", help="output directory")
    exp.add_argument("--render", metavar="DIR",
                     help="write DIR/payoff.html from DIR/results.json (a record of an earlier "
                     "experiment) and exit; touch no node")
    mod = p.add_argument_group("the model and the planner")
    mod.add_argument("--model", help="performance model (default: the lab's, of the engine: " +
                     "; ".join(f"{e} {d['model']}" for e, d in ENGINE_DEFAULTS.items()) + ")")
    mod.add_argument("--params", help="the parameters the policies may change, comma-separated "
                     "(default: those the model has features for)")
    mod.add_argument("--restart-seconds", type=float, default=60.0,
                     help="T_r per node the kairos policy assumes until measured (default 60)")
    mod.add_argument("--restart-seconds-from",
                     help="a state directory whose recorded rollouts give T_r (kairos plan's "
                     "option of that name)")
    mod.add_argument("--compaction-seconds", type=float,
                     help="seconds of full throughput the kairos policy charges a compaction "
                     "strategy change (kairos plan's option of that name; default "
                     f"{DEFAULT_CHANGE_SECONDS['compaction']:g}; Cassandra)")
    mod.add_argument("--change-costs",
                     help="measured compaction switches (bench/change_cost.py --out) the kairos "
                     "policy prices instead of --compaction-seconds (kairos plan's option; "
                     "Cassandra)")
    mod.add_argument("--confidence", type=float, default=0.9,
                     help="the kairos policy keeps a step only when P(gain > cost) is at "
                     "least this (kairos plan's option of that name; default 0.9)")
    ex = p.add_argument_group("the executor and the load")
    ex.add_argument("--inventory", default="inventories/local/hosts.yml")
    ex.add_argument("--playbook", help="the executor's entry point (default "
                    "playbooks/change_settings.yml; Redis playbooks/change_settings_redis.yml)")
    ex.add_argument("--cl", type=str.upper,
                    help="consistency level of the load, kept by every rolling restart and "
                    "planned for (default QUORUM; Cassandra)")
    ex.add_argument("--hosts",
                    help="CQL contact points, or the Redis nodes (host:port; every one is read "
                    "back) (default: the local lab's)")
    ex.add_argument("--port", type=int, help="default port of --hosts (9042; Redis 6379)")
    ex.add_argument("--keyspace", help="default kairos_payoff (Cassandra)")
    ex.add_argument("--table", help="default usertable (Cassandra)")
    ex.add_argument("--prefix", help="the prefix of the load's keys, unlinked before every "
                    "run (default kairos_payoff; Redis)")
    ex.add_argument("--keys", type=int, help="records (default 100000, --short 5000; Redis: "
                    "hashes, 7000)")
    ex.add_argument("--preloaded", action="store_true", default=None,
                    help="the table already holds the --keys records: do not write them first "
                    "(Cassandra)")
    ex.add_argument("--value-size", type=int, help="bytes (default 100; Redis 40 a field)")
    ex.add_argument("--distribution", choices=("uniform", "zipfian", "latest"),
                    help="key popularity (default zipfian; Redis uniform)")
    ex.add_argument("--concurrency", type=int,
                    help="requests in flight per process (default 64, --short 32; Redis: "
                    "client threads, 8)")
    ex.add_argument("--processes", type=int, default=1)
    args = p.parse_args(argv)
    for key, normal in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, SHORT[key] if args.short else normal)
    # An unknown --engine takes no defaults here; prepare() refuses it, naming the option.
    short = ENGINE_SHORT.get(args.engine, {}) if args.short else {}
    for key, normal in ENGINE_DEFAULTS.get(args.engine, {}).items():
        if getattr(args, key) is None:
            setattr(args, key, short.get(key, normal))
    return args


def engine_options(args: argparse.Namespace) -> None:
    """``--engine`` checked, then the options only some engines have: refused, naming the
    option, when given for another engine (a table's or a consistency level's with Redis, a
    key prefix with Cassandra); when not given, their defaults, or for another engine
    :data:`ABSENT`'s (off)."""
    try:
        engine = get_engine(args.engine)
    except ValidationError as exc:
        raise ValidationError(f"--{exc}") from None
    groups: tuple[tuple[dict[str, Any], Callable[[Engine], bool], str], ...] = (
        (TABLE_OPTIONS, lambda e: e.tables, "an engine with tables"),
        (CL_OPTIONS, lambda e: e.consistency_level, "an engine with consistency levels"),
        (KEY_OPTIONS, lambda e: not e.tables, "an engine without tables"))
    for options, has, what in groups:
        for name, default in options.items():
            if getattr(args, name) is None:
                setattr(args, name, default if has(engine) else ABSENT.get(name))
            elif not has(engine):
                which = ", ".join(e for e in ENGINES if has(get_engine(e)))
                raise ValidationError(f"--{name.replace('_', '-')}: an option of {what} "
                                      f"({which}), not of {engine.name}")


@dataclass
class Setup:
    """Everything decided before the first run (pure: no node touched)."""

    model_path: str
    model: Any
    default: dict[str, Any]
    candidates: list[dict[str, Any]]
    schedules: dict[str, po.Schedule]
    plans: dict[str, dict[str, po.PolicyPlan]]
    order: list[tuple[str, int, str]]
    tables: tuple[str, ...]
    engine: str = "cassandra"
    readable: list[str] = field(default_factory=list)


def check_options(args: argparse.Namespace) -> tuple[tuple[str, ...], list[str]]:
    """The options checked before the model is read (the engine's first, naming each
    option); the policies and the shapes."""
    engine_options(args)
    po.check_minutes(args.minutes)
    if args.save_layout and not args.layout:
        raise ValidationError("--save-layout: give the directory to save into with --layout")
    if args.layout and not args.save_layout:
        from planner.lab.sstable_layout import read_record

        read_record(args.layout, keyspace=args.keyspace, table=args.table)
    if not 0 <= args.precondition <= 3600:
        raise ValidationError(f"--precondition: must be in [0, 3600] seconds, got "
                              f"{args.precondition:g}")
    policies = po.parse_policies(args.policies)
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    known = po.shapes_for(args.engine)
    bad = [s for s in shapes if s not in known]
    if not shapes or bad:
        raise ValidationError(f"--shapes: unknown {bad[0]!r} for {args.engine}; known: "
                              f"{', '.join(known)}" if bad else "--shapes: give at least one")
    for name in ("warmup", "restart_warmup", "settle_timeout"):
        if not 0 <= getattr(args, name) <= 3600:
            raise ValidationError(f"--{name.replace('_', '-')}: must be in [0, 3600]")
    if args.cl not in ("ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "LOCAL_ONE",
                       None):
        raise ValidationError(f"--cl: unknown consistency level {args.cl!r}")
    for name in ("inventory", "playbook", "model"):
        if not Path(getattr(args, name)).exists():
            raise ValidationError(f"--{name}: {getattr(args, name)}: no such file")
    return policies, shapes


def prepare(args: argparse.Namespace) -> Setup:
    """Check the options, read the model, build the schedules and every policy's plan."""
    from planner.model.performance import load_model

    policies, shapes = check_options(args)
    order = [(shape, rep, pol) for shape in shapes
             for rep, pol in po.run_order(policies, args.repetitions)]
    model = load_model(args.model)
    if model.engine != args.engine:
        raise ValidationError(f"--model: {args.model} is a {model.engine} model, not for "
                              f"--engine {args.engine}")
    space = get_space(args.engine)
    params = ([k.strip() for k in args.params.split(",") if k.strip()] if args.params
              else po.model_params(model))
    for k in params:
        space[k]  # an unknown name is refused, with the close ones
    default = po.default_config(model, params)
    candidates = po.candidate_grid(model, default)
    tables = (f"{args.keyspace}.{args.table}",) if get_engine(args.engine).tables else ()
    options = {"restart_seconds": args.restart_seconds,
               "restart_seconds_from": args.restart_seconds_from, "tables": tables,
               "change_costs": args.change_costs,
               "confidence": args.confidence, "seed": args.seed,
               **{k: getattr(args, k) for k in ("cl", "compaction_seconds")
                  if getattr(args, k) is not None}}
    schedules: dict[str, po.Schedule] = {}
    plans: dict[str, dict[str, po.PolicyPlan]] = {}
    for shape in shapes:
        sched = po.make_schedule(shape, minutes=args.minutes, seed=args.seed,
                                 shift_seconds=args.shift_seconds,
                                 step_seconds=args.step_seconds, peak_rate=args.peak_rate)
        schedules[shape] = sched

        def progress(msg: str, shape: str = shape) -> None:
            say(f"{shape}: {msg}")

        plans[shape] = {pol: po.decide(pol, model=model, schedule=sched, candidates=candidates,
                                       kairos=options, progress=progress)
                        for pol in policies}
    touched = set(default)
    for by_policy in plans.values():
        for plan in by_policy.values():
            touched |= set(plan.start) | {k for c in plan.changes for k in c.settings}
    readable = sorted(k for k in touched if space[k].location != "jvm")
    return Setup(model_path=args.model, model=model, default=default, candidates=candidates,
                 schedules=schedules, plans=plans, order=order, tables=tables,
                 engine=args.engine, readable=readable)


def describe_plans(setup: Setup) -> list[str]:
    lines = [f"model {setup.model_path}: {setup.model.name} ({setup.model.model_type}); "
             f"{len(setup.candidates)} candidate configurations over "
             f"{', '.join(setup.default) or 'no parameter'}; default {setup.default}"]
    for shape, by_policy in setup.plans.items():
        sched = setup.schedules[shape]
        lines.append(f"{shape}: {sched.source}; shifts at {list(sched.shifts)} s")
        rates = sched.segment_rates()
        if rates is not None:
            lines.append(f"  offered ops/s per segment: {[round(float(r)) for r in rates]}")
        for pol, plan in by_policy.items():
            what = "; ".join(f"{c.at:g} s {dict(c.settings)}" + (" (restart)" if c.restart
                                                                 else "")
                             for c in plan.changes) or "no change"
            lines.append(f"  {pol}: start {dict(plan.start)}; {what}; predicted "
                         f"{plan.predicted_ops:,.0f} ops" + (f"; {plan.info['summary']}"
                                                             if "summary" in plan.info else ""))
    return lines


# ----------------------------------------------------------------- the lab
class Lab:
    """The executor, the load and the read-back, for one experiment."""

    def __init__(self, args: argparse.Namespace, setup: Setup, out: Path) -> None:
        from planner.calibrate.bench import ExecutorBench
        from planner.loadgen import LoadConfig

        self.args, self.setup = args, setup
        self.engine = get_engine(setup.engine)
        self.hosts = tuple(h.strip() for h in args.hosts.split(",") if h.strip())
        # Where the data is: a keyspace's table (and a CL), or keys under a prefix.
        where: dict[str, Any] = (
            {"keyspace": args.keyspace, "table": args.table} if self.engine.tables
            else {"prefix": args.prefix})
        if self.engine.consistency_level:
            where["cl"] = args.cl
        first = next(iter(setup.schedules.values()), None)
        self.load = LoadConfig(
            engine=setup.engine, contact_points=self.hosts, port=args.port, keys=args.keys,
            max_keys=max(args.keys, 1_000_000), distribution=args.distribution,
            value_size=args.value_size, concurrency=args.concurrency,
            processes=args.processes, seed=args.seed, verify=False,
            shape=None if first is None else po.load_shape(first), **where,
        )
        self.bench = ExecutorBench(
            load=self.load, warmup_seconds=0.0, measure_seconds=0.0, playbook=args.playbook,
            inventory=args.inventory, rollout_cl=args.cl or "ONE",
            log_path=out / "executor.log", log=say)
        self.running: dict[str, Any] = {}
        self.version = ""
        self.applied = False  # whether this experiment has changed anything yet

    def read(self) -> dict[str, Any]:
        """The running values of the parameters the policies touch, equal on every node
        (KairosError/ValidationError else): Cassandra's system_views.settings and the
        table's compaction, Redis' CONFIG GET on every node of ``--hosts``."""
        values, self.version = READERS[self.setup.engine](self)
        return dict(values)

    def load_for(self, schedule: po.Schedule) -> Any:
        """The load that replays ``schedule`` (its load shape, if it names one)."""
        return replace(self.load, shape=po.load_shape(schedule))

    def clear_keys(self, tag: str) -> int | None:
        """An engine without tables: UNLINK the load's keys (``--prefix``), so that the
        run starts from an empty cache, its data written under its starting configuration
        (the encoding of a hash written before stays what it was). None otherwise."""
        from redis.exceptions import RedisError

        from planner import loadgen

        if self.engine.tables:
            return None
        try:
            removed = loadgen.unlink_load_keys(self.load)
        except (RedisError, OSError) as exc:
            raise KairosError(f"the load's keys ({self.args.prefix}:*) could not be unlinked: "
                              f"{type(exc).__name__}: {exc}") from None
        say(f"{tag}: unlinked the {removed:,} key(s) of {self.args.prefix}:*")
        return removed

    def apply(self, settings: Mapping[str, Any]) -> float:
        """Apply through the executor (KairosError naming the log on failure); seconds. A
        change a plan applies with a restart restarts every node, a re-encoding threshold's
        included (CONFIG SET takes it, but only a reload re-encodes the data held)."""
        began = time.monotonic()
        self.applied = True
        restart = po.needs_restart(self.running, settings, engine=self.setup.engine)
        self.bench.apply(dict(settings), restart_all=restart)
        self.running.update(settings)
        return time.monotonic() - began

    def prepare_data(self, mix: Mapping[str, float]) -> None:
        """Create the keyspace and table and write the records (unless ``--preloaded``)
        before anything is applied: a compaction change needs the table. An engine without
        tables has nothing to create (each run clears its keys: :meth:`clear_keys`)."""
        from planner.loadgen import run_load

        if not self.engine.tables:
            return
        say("creating the table" + ("" if self.args.preloaded else
                                    f" and writing the {self.args.keys} records"))
        # Ctrl-C: raised by run_load once its workers stopped.
        run_load(replace(self.load, mix=dict(mix), seconds=1.0,
                         preload=not self.args.preloaded), startup_timeout=900.0)

    def settle(self) -> float:
        """Wait, with no load, until no node runs or queues a compaction; seconds waited."""
        from planner.calibrate.bench import wait_for_compactions

        if self.args.settle_timeout <= 0:
            return 0.0
        return wait_for_compactions(self.hosts, port=self.args.port,
                                    timeout=self.args.settle_timeout, log=say)

    def nodes(self) -> list[Any]:
        from planner.lab.sstable_layout import lab_nodes

        return lab_nodes(self.args.lab_dir, [h.split(":")[0] for h in self.hosts])

    def save_layout(self) -> dict[str, Any]:
        """Save the table's SSTables on every node into ``--layout`` (``--save-layout``)."""
        from planner.lab.sstable_layout import save

        return save(self.nodes(), keyspace=self.args.keyspace, table=self.args.table,
                    dest=self.args.layout, log=say)

    def restore_layout(self) -> dict[str, int]:
        """Put the SSTables saved in ``--layout`` back; each node's SSTable count, read back."""
        from planner.calibrate.bench import address_port, node_session
        from planner.lab.sstable_layout import restore

        def truncate(cql: str) -> None:
            from cassandra import ConsistencyLevel
            from cassandra.query import SimpleStatement

            # TRUNCATE is the application's to run: Kairos' role has no grant on its data.
            with node_session(*address_port(self.hosts[0], self.args.port),
                              timeout=120.0, application=True) as session:
                session.execute(SimpleStatement(cql, consistency_level=ConsistencyLevel.ALL))

        return restore(self.nodes(), keyspace=self.args.keyspace, table=self.args.table,
                       src=self.args.layout, truncate=truncate, log=say)

    def warm_up(self, mix: Mapping[str, float], seconds: float,
                rate: float | None = None, schedule: po.Schedule | None = None) -> None:
        """Unmeasured load of ``mix`` (at ``rate`` ops/s; None: as fast as it is served),
        with ``schedule``'s load shape when given."""
        from planner.loadgen import run_load

        if seconds <= 0:
            return
        say(f"warming up {seconds:g} s" + (f" at {rate:g} ops/s" if rate else ""))
        load = self.load if schedule is None else self.load_for(schedule)
        run_load(replace(load, mix=dict(mix), seconds=seconds, rate=rate))


def _read_cassandra(lab: Lab) -> tuple[Mapping[str, Any], str]:
    from planner.calibrate.bench import read_running_config

    return read_running_config(lab.setup.readable, hosts=lab.hosts, port=lab.args.port,
                               keyspace=lab.args.keyspace, table=lab.args.table)


def _read_redis(lab: Lab) -> tuple[Mapping[str, Any], str]:
    from planner.calibrate.redis_bench import read_running_redis

    return read_running_redis(lab.setup.readable, hosts=lab.hosts, port=lab.args.port)


#: How each engine's running configuration is read back (the parameters, the version).
READERS: dict[str, Callable[[Lab], tuple[Mapping[str, Any], str]]] = {
    "cassandra": _read_cassandra, "redis": _read_redis}


class _RunFailed(Exception):
    """A run cannot go on (its record says why)."""


def precondition(lab: Lab, tag: str, rec: dict[str, Any]) -> None:
    """The same state before every run: the default configuration, then the saved SSTables
    (``--layout``) and/or ``--precondition`` seconds under ``--precondition-mix``, as the
    cluster ran before the day began. A table's layout is state (docs/calibration.md):
    without this, a run in the default configuration after a leveled run scans the leveled
    SSTables it inherited."""
    args, default = lab.args, lab.setup.default
    if args.precondition <= 0 and not args.layout:
        return
    back = {k: v for k, v in default.items() if lab.running.get(k) != v}
    if back:
        say(f"{tag}: back to the default configuration {back}")
        try:
            lab.apply(back)
        except KairosError as exc:
            rec["error"] = f"the executor failed restoring the default to precondition: {exc}"
            raise _RunFailed from None
    rec["precondition"] = {"seconds": args.precondition, "mix": dict(args.precondition_mix),
                           "config": dict(default), "restored": back}
    if args.layout:
        say(f"{tag}: restoring the saved layout {args.layout}")
        try:
            rec["precondition"]["layout"] = lab.restore_layout()
        except (KairosError, ValidationError) as exc:
            rec["error"] = f"the saved layout could not be restored: {exc}"
            raise _RunFailed from None
    if args.precondition > 0:
        say(f"{tag}: preconditioning {args.precondition:g} s with {args.precondition_mix}")
        lab.warm_up(args.precondition_mix, args.precondition)


def run_one(lab: Lab, shape: str, rep: int, policy: str, index: int, total: int
            ) -> dict[str, Any]:
    """One run, recorded; its status is ``ok`` only when everything it did succeeded."""
    from planner.loadgen import BackgroundLoad, LoadError, TraceSchedule

    setup, args = lab.setup, lab.args
    sched, plan = setup.schedules[shape], setup.plans[shape][policy]
    tag = f"run {index}/{total} {shape} {policy} r{rep}"
    rec: dict[str, Any] = {
        "run_id": f"{index:02d}-{shape}-{policy}-r{rep}", "shape": shape, "policy": policy,
        "repetition": rep, "order": index, "status": "failed", "error": None,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "start_config": dict(plan.start), "planned_changes": [c.to_dict() for c in plan.changes],
        "changes": [], "changes_made": 0, "restarts": 0, "series": [],
    }
    try:
        precondition(lab, tag, rec)
        try:
            rec["unlinked_keys"] = lab.clear_keys(tag)
        except KairosError as exc:
            rec["error"] = str(exc)
            raise _RunFailed from None
        settings = {k: v for k, v in plan.start.items() if lab.running.get(k) != v}
        restarted = (po.needs_restart(lab.running, settings, engine=setup.engine) if settings
                     else False)
        if settings:
            say(f"{tag}: starting configuration {settings}" + (" (rolling restart)"
                                                              if restarted else ""))
            try:
                seconds = lab.apply(settings)
            except KairosError as exc:
                rec["error"] = f"the executor failed setting the starting configuration: {exc}"
                raise _RunFailed from None
            rec["setup"] = {"settings": settings, "restart": restarted,
                            "seconds": round(seconds, 1)}
        try:
            rec["settle_seconds"] = round(lab.settle(), 1)
        except KairosError as exc:
            rec["error"] = f"the nodes did not settle before the run: {exc}"
            raise _RunFailed from None
        lab.warm_up(sched.segments[0].mix, args.restart_warmup if restarted else args.warmup,
                    rate=None if sched.peak_rate is None else sched.step_rates()[0],
                    schedule=sched)
        trace = TraceSchedule(rates=sched.step_rates(), mixes=tuple(sched.step_mixes()),
                              step_seconds=sched.step_seconds)
        config = replace(lab.load_for(sched), trace=trace, seconds=sched.seconds, verify=True)
        last = [0.0, 0]

        def progress(elapsed: float, ops: int, fails: int) -> None:
            if elapsed - last[0] >= PROGRESS_EVERY:
                rate = (ops - last[1]) / max(elapsed - last[0], 1e-9)
                say(f"{tag}: {elapsed:.0f}/{sched.seconds:g} s, {rate:.0f} ops/s, "
                    f"{fails} failed so far")
                last[:] = [elapsed, ops]

        say(f"{tag}: load for {sched.seconds:g} s, {len(plan.changes)} change(s) planned")
        with BackgroundLoad(config, max_seconds=sched.seconds + LOAD_SLACK, max_requests=None,
                            on_progress=progress) as load:
            t0 = time.monotonic()
            failed = None
            for change in plan.changes:
                while time.monotonic() - t0 < change.at and load.running():
                    time.sleep(min(0.5, max(change.at - (time.monotonic() - t0), 0.01)))
                entry: dict[str, Any] = {**change.to_dict(), "started": None, "finished": None}
                rec["changes"].append(entry)
                if not load.running():
                    entry["skipped"] = "the load had ended"
                    continue
                entry["started"] = round(time.monotonic() - t0, 1)
                say(f"{tag}: at {entry['started']:g} s (due {change.at:g} s) applying "
                    f"{dict(change.settings)}" + (" (rolling restart)" if change.restart else ""))
                restart = po.needs_restart(lab.running, change.settings, engine=setup.engine)
                try:
                    lab.apply(change.settings)
                except KairosError as exc:
                    failed = (f"the executor failed at {entry['started']:g} s applying "
                              f"{dict(change.settings)}: {exc}")
                    entry["error"] = str(exc)
                    break
                finally:
                    entry["finished"] = round(time.monotonic() - t0, 1)
                entry["ok"] = True
                rec["changes_made"] += 1
                rec["restarts"] += int(restart)
            if failed is None:
                load.wait(max(sched.seconds - (time.monotonic() - t0), 0.0) + LOAD_SLACK)
            result = load.stop()
        rec.update(po.figures(result.to_dict(), sched.step_seconds))
        if failed is not None:
            rec["error"] = failed
            raise _RunFailed
        expected = {k: lab.running[k] for k in setup.readable if k in lab.running}
        read = lab.read()
        mismatches = po.readback_mismatches(expected, read)
        rec["readback"] = {"expected": expected, "read": read, "mismatches": mismatches}
        lab.running.update(read)
        if mismatches:
            rec["error"] = f"read back from the nodes: {mismatches}"
            raise _RunFailed
        rec["status"] = "ok"
    except _RunFailed:
        pass
    except (LoadError, KairosError, ValidationError) as exc:
        rec["error"] = rec["error"] or f"{type(exc).__name__}: {exc}"
    rec["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    if rec["status"] == "ok":
        say(f"{tag}: {rec['served_ops']:,} ops served ({rec['ops_per_s']:,.1f} ops/s), "
            f"p99 {rec['p99_ms']} ms, {rec['failed_ops']} failed, "
            f"{rec['lost_acknowledged_writes']} lost, {rec['changes_made']} change(s)")
    else:
        say(f"{tag}: FAILED: {rec['error']}")
    return rec


# ------------------------------------------------------------------ outputs
def write_outputs(out: Path, results: dict[str, Any]) -> None:
    runs = results["runs"]
    results["summary"] = po.summarise(runs)
    results["comparisons"] = po.comparisons(results["summary"])
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, sort_keys=False, default=str) + "\n")
    tmp.replace(out / "results.json")
    classes = classes_for(results.get("engine", "cassandra"))
    with (out / "series.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_id", "shape", "policy", "repetition", "order", "status", "t",
                    "ops_per_s", "failed", *(f"mix_{c}" for c in classes)])
        for r in runs:
            for p in r.get("series") or ():
                w.writerow([r["run_id"], r["shape"], r["policy"], r["repetition"], r["order"],
                            r["status"], p["t"], p["ops_per_s"], p["failed"],
                            *(p["mix"].get(c, 0.0) for c in classes)])
    (out / "payoff.html").write_text(po.render_html(results))


def render(record: Path) -> int:
    """``--render``: the page of an earlier experiment, from its results.json."""
    try:
        results = json.loads((record / "results.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"payoff: --render: cannot read {record / 'results.json'}: {exc}", file=sys.stderr)
        return 2
    (record / "payoff.html").write_text(po.render_html(results))
    say(f"wrote {record / 'payoff.html'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        return render(Path(args.render))
    try:
        setup = prepare(args)
    except (ValidationError, KairosError) as exc:
        print(f"payoff: {exc}", file=sys.stderr)
        return 2
    for line in describe_plans(setup):
        say(line)
    if args.plan_only:
        print(json.dumps({s: {p: plan.to_dict() for p, plan in by.items()}
                          for s, by in setup.plans.items()}, indent=1, default=str))
        return 0
    if args.save_layout:
        try:
            Lab(args, setup, Path(args.out)).save_layout()
        except (KairosError, ValidationError) as exc:
            print(f"payoff: {exc}", file=sys.stderr)
            return 1
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "kind": "kairos-payoff", "engine": setup.engine,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in
                            ["bench/payoff.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": {"path": setup.model_path, "name": setup.model.name,
                  "type": setup.model.model_type, "provenance": setup.model.provenance},
        "options": dict(vars(args)),
        "default": setup.default, "candidates": len(setup.candidates),
        "schedules": {s: sched.to_dict() for s, sched in setup.schedules.items()},
        "plans": {s: {p: plan.to_dict() for p, plan in by.items()}
                  for s, by in setup.plans.items()},
        "order": [{"shape": s, "repetition": r, "policy": p} for s, r, p in setup.order],
        "runs": [],
    }
    if args.resume:
        try:
            resumed(out, results)
        except ValidationError as exc:
            print(f"payoff: {exc}", file=sys.stderr)
            return 2
    per_run = args.minutes * 60 + args.warmup + args.precondition + 90 + (40 if args.layout else 0)
    todo = len(setup.order) - len(results["runs"])
    say(f"{todo} runs, about {todo * per_run / 60:.0f} min (+ rolling restarts); "
        f"results in {out}/")
    # SIGTERM unwinds like Ctrl-C: the load is stopped, the nodes' configuration restored.
    with sigterm_as_interrupt():
        return _experiment(args, setup, out, results)


def resumed(out: Path, results: dict[str, Any]) -> None:
    """Take the completed runs of ``out``'s experiment into ``results`` (its failed ones
    under ``failed_runs``), after checking that it made the same decisions."""
    path = out / "results.json"
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValidationError(f"--resume: cannot read {path}: {exc}") from None
    for key in ("schedules", "plans", "order"):
        if json.loads(json.dumps(results[key], default=str)) != before.get(key):
            raise ValidationError(f"--resume: {path} is another experiment: its {key} differ "
                                  "from this command's")
    runs = before.get("runs", [])
    results["runs"] = [r for r in runs if r.get("status") == "ok"]
    results["failed_runs"] = [*before.get("failed_runs", []),
                              *(r for r in runs if r.get("status") != "ok")]
    results["created_at"] = before.get("created_at", results["created_at"])
    results["resumed"] = [*before.get("resumed", []),
                          {"at": datetime.now(UTC).isoformat(timespec="seconds"),
                           "command": results["command"]}]
    results["command"] = before.get("command", results["command"])
    say(f"resuming {path}: {len(results['runs'])} completed run(s) kept, "
        f"{len(results['order']) - len(results['runs'])} to run")


def _experiment(args: argparse.Namespace, setup: Setup, out: Path,
                results: dict[str, Any]) -> int:
    """The runs in order; every exit path restores what the nodes ran before and writes the
    results."""
    rc = 0
    lab = Lab(args, setup, out)
    try:
        try:
            first = next(iter(setup.schedules.values())).segments[0].mix
            lab.prepare_data(first)
            lab.running = {**setup.default, **lab.read()}
        except (KairosError, ValidationError) as exc:
            say(f"cannot prepare the table or read the running configuration: {exc}")
            results["error"] = f"cannot prepare the table or read the configuration: {exc}"
            return 1
        from planner.calibrate.bench import describe_environment

        results["environment"] = describe_environment(lab.version)
        results["initial_config"] = dict(lab.running)
        done = {(r["shape"], r["repetition"], r["policy"]) for r in results["runs"]}
        for i, (shape, rep, policy) in enumerate(setup.order, start=1):
            if (shape, rep, policy) in done:
                continue
            rec = run_one(lab, shape, rep, policy, i, len(setup.order))
            results["runs"].append(rec)
            write_outputs(out, results)
            if rec["status"] != "ok":
                rc = 1
                if not args.keep_going:
                    say("stopping after a failed run (--keep-going goes on)")
                    break
    except KeyboardInterrupt:
        say("interrupted")
        rc = 130
    finally:
        if lab.applied:  # what the nodes run now, not what the runs believed
            with contextlib.suppress(KairosError, ValidationError, KeyboardInterrupt):
                lab.running.update(lab.read())
        # What the nodes ran before the bench (the lab's inventory, not the model's default).
        before = {k: results.get("initial_config", {}).get(k, v)
                  for k, v in setup.default.items()}
        back = {k: v for k, v in before.items() if lab.running.get(k) != v}
        if back and lab.applied:
            say(f"restoring what the nodes ran before the bench {back}")
            try:
                lab.apply(back)
                results["restored"] = back
            except (KairosError, KeyboardInterrupt) as exc:
                say(f"could NOT restore what the nodes ran before the bench: {exc}")
                results["restore_error"] = str(exc)
                rc = rc or 1
        # A cache's data is removed (an engine without tables): another load's keys are then
        # not evicted to make room for it.
        with contextlib.suppress(KairosError, KeyboardInterrupt):
            removed = lab.clear_keys("the end")
            if removed is not None:
                results["unlinked_at_end"] = removed
        with contextlib.suppress(OSError):
            write_outputs(out, results)
    print(po.summary_table(po.summarise(results["runs"])), end="")
    say(f"results: {out / 'results.json'}, {out / 'series.csv'}, {out / 'payoff.html'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
