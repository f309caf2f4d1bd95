"""``kairos plan``: the command line of :func:`planner.planning.pipeline.make_plan`; writes the
plan file."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

from planner import inputs
from planner.engines import ENGINES
from planner.planning.capacity import DEFAULT_MARGIN, DEFAULT_SCALE_IN_AFTER_SECONDS
from planner.planning.costbenefit import SERVED_MODES
from planner.planning.pipeline import (
    DEFAULT_HEADROOM_WEIGHT,
    DEFAULT_LATENCY_WEIGHT,
    DEFAULT_RESTART_SECONDS,
    MAX_SAMPLES,
    steps_from_evaluation,  # re-exported: callers and tests import it from here
)
from planner.planning.risk import DEFAULT_CONFIDENCE, DEFAULT_SCENARIOS, RISK_MODES

__all__ = ["register", "run", "steps_from_evaluation"]

SAMPLES_WHY = "each sample path adds a capacity matrix; 1000 already averages well"
SCENARIOS_WHY = "each scenario adds a matrix of switch costs; 1000 gives P to +-0.01"


def _unit_interval(name: str, *, closed: bool) -> Any:
    """argparse type: a number in [0, 1] (``closed``) or [0, 1)."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: not a number: {text!r}") from None
        if not (0.0 <= x <= 1.0 if closed else 0.0 <= x < 1.0):
            raise argparse.ArgumentTypeError(
                f"{name}: must be in [0, 1{']' if closed else ')'}, got {text}"
            )
        return x
    return parse


def _add_share(p: Any, flag: str, default: float, *, closed: bool, help: str,
               note: str = "") -> None:
    """An option taking a share in [0, 1] (``closed``) or [0, 1), its errors naming
    ``flag``; its help ends with the default and ``note``."""
    p.add_argument(flag, type=_unit_interval(flag, closed=closed), default=default,
                   help=f"{help} (default {default:g}{note})")


def _positive_hours(text: str) -> float:
    """argparse type: hours > 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--scale-in-after: not a number: {text!r}") from None
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"--scale-in-after: must be > 0 hours, got {text}")
    return x


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
    p.add_argument("--engine", choices=ENGINES, default="cassandra")
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
                   help="capacity the up nodes lose to extra load while a batch is down "
                   "(assumed; --restart-costs replaces it with a measured one)")
    p.add_argument("--restart-costs", metavar="FILE",
                   help="measured restart impact (bench/restart_cost.py --out): its survivor "
                   "penalty, and its warm-up seconds charged to every restart")
    p.add_argument("--compaction-seconds", type=inputs.DURATION, default=120.0,
                   help="seconds of full throughput a compaction strategy change costs "
                   "(SSTable rewrite; assumed, default 120; --change-costs replaces it for "
                   "the switches it measured)")
    p.add_argument("--change-costs", metavar="FILE",
                   help="measured compaction strategy switches under load "
                   "(bench/change_cost.py --out): each direction's seconds")
    _add_decision_arguments(p)
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
    _add_part_arguments(p)
    p.add_argument("-o", "--output", required=True, help="plan file to write")
    p.set_defaults(func=run)


def _add_part_arguments(p: Any) -> None:
    """The tables' and the nodes' own forecasts, and whom a Redis replica follows (issue 42)."""
    p.add_argument(
        "--table-forecast", action="append", default=[], metavar="KS.TABLE=FILE",
        help="a table's own forecast (kairos forecast of its trace, same start and step as "
        "the plan's); repeat per table: each table then gets its own compaction strategy "
        "where that pays (per_table overrides)",
    )
    p.add_argument(
        "--node-forecast", action="append", default=[], metavar="HOST=FILE",
        help="a node's own forecast (kairos forecast of the load it coordinates, same start "
        "and step as the plan's); repeat per host of --hosts or the ring: each node then gets "
        "its own values of the live node-level settings where that pays (per_node overrides)",
    )
    p.add_argument(
        "--replica-of", action="append", default=[], metavar="REPLICA=PRIMARY",
        help="Redis, with --node-forecast: this replica runs its primary's per-node values "
        "(it holds the same data and serves the primary's load once promoted); repeat per "
        "replica",
    )


def _add_decision_arguments(p: Any) -> None:
    """Measured T_r, the credit, the confidence rule and the risk objective (issue 15)."""
    p.add_argument("--restart-seconds-from", metavar="PATH",
                   help="measure T_r per node from earlier rollouts: a state directory, a "
                   "plan or <plan>.state.json, or the workload store; --restart-seconds is "
                   "the fallback until a restart is measured")
    p.add_argument("--served", choices=SERVED_MODES, default="work",
                   help="credit served work plus weighted headroom below saturation "
                   "(work, default), min(load, capacity) (offered), or the predicted "
                   "capacity whatever the load (capacity: SOPHIA's saturated clients)")
    _add_share(p, "--headroom-weight", DEFAULT_HEADROOM_WEIGHT, closed=True,
               help="with --served work: weight of the headroom term load x "
               "(1 - utilisation)")
    _add_share(p, "--latency-weight", DEFAULT_LATENCY_WEIGHT, closed=True, note=": off",
               help="with --served work and a model that predicts p99: weight of the "
               "latency term load x ln(p99 running / p99 candidate), credited where the "
               "candidate is below saturation")
    _add_share(p, "--confidence", DEFAULT_CONFIDENCE, closed=False,
               note="; 0 keeps every step",
               help="keep a step only when P(gain > cost) reaches this")
    p.add_argument("--scenarios", type=inputs.bounded_int(0, MAX_SAMPLES, why=SCENARIOS_WHY),
                   default=DEFAULT_SCENARIOS,
                   help="joint scenarios (forecast path x model draw) for P(gain > cost) "
                   f"(default {DEFAULT_SCENARIOS})")
    p.add_argument("--risk", choices=RISK_MODES, default="mean",
                   help="what the optimiser maximises: the expected value (mean, default), "
                   "the 1 - confidence quantile of each candidate's gain (quantile), the "
                   "worst mix in the forecast's interval (endure), or the worst mix within "
                   "the KL radius the forecast's backtest errors stayed in (endure-kl)")
    _add_share(p, "--capacity-margin", DEFAULT_MARGIN, closed=False,
               note="; docs/capacity-advice.md",
               help="capacity advice: the share of capacity kept free at the forecast's "
               "upper band")
    p.add_argument("--scale-in-after", type=_positive_hours, metavar="HOURS",
                   default=DEFAULT_SCALE_IN_AFTER_SECONDS / 3600,
                   help="capacity advice: the shortest horizon a scale-in advice rests on "
                   f"(default {DEFAULT_SCALE_IN_AFTER_SECONDS / 3600:g} h)")
    p.add_argument("--memory-curve", metavar="FILE",
                   help="a measured memory curve (bench/memory_split_redis.py or "
                   "bench/memory_split_cassandra.py --curve-out): the plan carries the memory "
                   "split it advises, as a step when it is a live change (docs/memory-split.md)")
    p.add_argument("--hold-restarts", metavar="WHY",
                   help="propose no restart step, for this reason (the autopilot's hold while "
                   "the performance model's recent error is high): only live changes")
    p.add_argument("--durability-floor", metavar="MAPPING|FILE",
                   help="Redis: the least durable configuration a plan may run, a YAML/JSON "
                   "mapping of appendonly, appendfsync and save (e.g. '{appendonly: yes, "
                   "appendfsync: everysec}') or a file holding one; candidates below it are "
                   "not searched (default, and with '{}': what the nodes run now)")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def request_from_args(args: argparse.Namespace) -> Any:
    """The :class:`planner.planning.pipeline.PlanRequest` the options describe."""
    from planner.commands.validate_plan import parse_hosts
    from planner.planning.pipeline import OPTIMISER_FIELDS, plan_request

    fields = ("forecast", "trace", "engine", "cluster", "current", "model", "ring", "rf", "cl",
              "tolerate", "aggressive", "restart_seconds", "survivor_penalty",
              "compaction_seconds", "served", "restart_seconds_from", "restart_costs",
              "change_costs", "headroom_weight", "latency_weight", "confidence", "scenarios",
              "risk", "horizon", "forecast_model", "season_length", "samples",
              "hold_restarts", "capacity_margin", "memory_curve", *OPTIMISER_FIELDS)
    return plan_request(
        **{name: getattr(args, name) for name in fields},
        hosts=tuple(parse_hosts(args.hosts) or ()),
        tables=[t.strip() for t in args.tables.split(",") if t.strip()],
        scale_in_after_seconds=args.scale_in_after * 3600,
        durability_floor=durability_floor_arg(getattr(args, "durability_floor", None)),
        table_forecasts=named_pairs_arg(getattr(args, "table_forecast", None) or []),
        node_forecasts=named_pairs_arg(getattr(args, "node_forecast", None) or [],
                                           flag="--node-forecast", name="HOST",
                                           example="cass1=cass1-forecast.json"),
        replicas=named_pairs_arg(getattr(args, "replica_of", None) or [], flag="--replica-of",
                                 name="REPLICA", value="PRIMARY", example="redis4=redis1"),
    )


def named_pairs_arg(items: list[str], *, flag: str = "--table-forecast",
                    name: str = "KS.TABLE", value: str = "FILE",
                    example: str = "shop.events=events-forecast.json",
                    ) -> dict[str, str] | None:
    """The ``--table-forecast KS.TABLE=FILE`` (or ``flag`` ``NAME=VALUE``) options as a
    mapping (None: none given).

    Raises
    ------
    ValidationError
        ``<flag> ...`` for an item that is not ``name=value`` or a name given twice (the
        names themselves are checked by the plan: :func:`planner.plan.check_tables` for
        tables, the plan's hosts for nodes and replicas).
    """
    from planner.errors import ValidationError

    out: dict[str, str] = {}
    for item in items:
        key, sep, path = item.partition("=")
        key, path = key.strip(), path.strip()
        if not sep or not key or not path:
            raise ValidationError(
                f"{flag}: {item!r} is not {name}={value}, e.g. {flag} {example}")
        if key in out:
            raise ValidationError(f"{flag} {key}: given twice ({out[key]}, {path})")
        out[key] = path
    return out or None


def durability_floor_arg(text: str | None) -> dict[str, Any] | None:
    """The ``--durability-floor`` mapping: inline YAML/JSON, or a file holding it; None for
    none given or an empty mapping (the running configuration's durability).

    Raises
    ------
    ValidationError
        ``--durability-floor: ...`` when it is neither a mapping nor a file holding one.
    """
    import yaml

    from planner.errors import ValidationError

    if text is None or not text.strip():
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, str) and Path(text).is_file():
        with inputs.in_file(text):
            data = inputs.load_yaml(text, kind=inputs.CONFIG, allow_empty=True) or {}
    if not isinstance(data, dict):
        raise ValidationError(
            f"--durability-floor: {text!r} is neither a mapping such as "
            "'{appendonly: yes, appendfsync: everysec}' nor a file holding one"
        )
    return data or None


def run(args: argparse.Namespace) -> int:
    """Make the plan and write it; progress goes to stderr."""
    from planner.plan import save_plan
    from planner.planning.capacity import advice_line
    from planner.planning.pipeline import make_plan

    t0 = time.perf_counter()
    result = make_plan(request_from_args(args), progress=_log)
    path = save_plan(result.plan, args.output, known_hosts=result.hosts)
    print(f"wrote {path}: {result.summary()} in {time.perf_counter() - t0:.1f}s")
    print(advice_line(result.plan.provenance["capacity_advice"]))
    if "memory_split" in result.plan.provenance:
        from planner.model.memory_curve import advice_line as split_line

        print(split_line(result.plan.provenance["memory_split"]))
    return 0
