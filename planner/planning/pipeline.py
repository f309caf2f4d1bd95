"""The planning pipeline: forecast -> performance model -> cost/benefit -> optimiser -> plan.

:func:`make_plan` is the one place a plan is made: ``kairos plan`` calls it, and so does
any in-process caller (the autopilot). It reads or takes the forecast (or forecasts a
trace), predicts every candidate configuration's capacity with the performance model,
prices each switch with the safe restart batches of the ring, searches the schedule with
the optimiser and returns the validated :class:`planner.plan.Plan` with what the CLI
prints. The stages it is made of are public because the simulator replays many plans on
arrays (no files, a capacity function, a starting candidate and lockout) and shares them:
:class:`SwitchCosts` (-> :class:`planner.planning.costbenefit.PlanningProblem`) and
:func:`optimise`.

Layering: this module sits above forecast, perfmodel, costbenefit, optimiser, topology and
plan, and below ``planner.commands``, the simulator and the autopilot. The heavy modules
(forecast, perfmodel, workload: pandas, scipy) are imported where used, so the CLI starts
fast.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from planner.engines import get_engine
from planner.errors import ValidationError
from planner.model import memory_curve as memory_advice
from planner.model.change_cost import ChangeCosts, load_change_costs
from planner.model.durability import DurabilityFloor, floor_of, parse_floor
from planner.model.restart_impact import RestartImpact, load_restart_impact
from planner.model.spaces import (
    change_kind,
    changes_tables,
    get_space,
    load_config,
    row_cache_enabled,
)
from planner.plan import Plan, check_tables, plan_from_dict
from planner.planning import capacity as cap_advice
from planner.planning import optimiser as op
from planner.planning import risk as rk
from planner.planning.costbenefit import (
    SERVED_MODES,
    Evaluation,
    PlanningProblem,
    ReconfigModel,
    Served,
    SwitchCostTensor,
    evaluate,
    lockout_matrix,
    served_matrix,
)
from planner.planning.per_node import (
    NodeWorkload,
    PerNodeChoices,
    capacity_rule,
    choose_per_node,
    node_keys,
    with_per_node,
    with_replicas,
)
from planner.planning.per_table import (
    PerTableChoices,
    TableWorkload,
    choose_per_table,
    table_keys,
    with_per_table,
)
from planner.planning.split_step import with_split_step
from planner.topology.batching import safe_batches
from planner.topology.ring import Ring, load_ring

if TYPE_CHECKING:
    from planner.executor.restart_costs import MeasuredRestarts
    from planner.forecast.forecaster import Forecast
    from planner.model.performance import PerformanceModel
    from planner.workload.series import WorkloadSeries

__all__ = [
    "DEFAULT_CHANGE_SECONDS",
    "DEFAULT_HEADROOM_WEIGHT",
    "DEFAULT_HOSTS",
    "DEFAULT_LATENCY_WEIGHT",
    "DEFAULT_RESTART_SECONDS",
    "MAX_SAMPLES",
    "MAX_SAMPLE_STEPS",
    "OPTIMISER_FIELDS",
    "OptimiserOptions",
    "PlanRequest",
    "PlanResult",
    "Solution",
    "SwitchCosts",
    "capacity_matrix",
    "change_seconds_matrix",
    "change_span_matrix",
    "make_plan",
    "make_problem",
    "optimise",
    "p99_matrix",
    "plan_request",
    "restart_matrix",
    "steps_from_evaluation",
]

#: T_r used when none is given: SOPHIA's order of magnitude for drain+restart+sync.
DEFAULT_RESTART_SECONDS = 60.0
#: The lab's nodes, ring order: the hosts planned for when neither a ring nor hosts are given.
DEFAULT_HOSTS = ("cass1", "cass2", "cass3")
#: Forecast sample paths: each one adds a (horizon x candidates) capacity matrix.
MAX_SAMPLES = 1000
#: Bound on samples x horizon: the stacked capacity matrices stay below ~1 GiB.
MAX_SAMPLE_STEPS = 5_000_000
#: Seconds of full throughput a change of these parameters costs on top of any restart:
#: switching the compaction strategy makes every node rewrite all its SSTables (SOPHIA:
#: the most expensive change). An assumption until the executor measures it.
DEFAULT_CHANGE_SECONDS: dict[str, float] = {"compaction": 120.0}
#: ``--served work``: weight of the headroom term load x (1 - utilisation) (a judgement:
#: halving utilisation from 90% to 45% is then worth serving 22% more load).
DEFAULT_HEADROOM_WEIGHT = 0.5
#: ``--served work``: weight of the latency term (opt-in: 0 leaves every plan as before).
DEFAULT_LATENCY_WEIGHT = 0.0
#: What a plan says when the performance model predicts no latency.
HEADROOM_BY_UTILISATION = (
    "utilisation (offered load / predicted capacity): the performance model has no "
    "latency data"
)
#: ... and when it does: the headroom term is still utilisation; the p99 has its own term.
HEADROOM_BESIDE_LATENCY = (
    "utilisation (offered load / predicted capacity); the model's predicted p99 is "
    "credited by its own term when latency_weight > 0"
)
#: What the latency term compares (``provenance.objective.latency_measure``).
LATENCY_MEASURE = (
    "predicted p99 of a saturated window at the calibration's concurrency, as a ratio to "
    "the running configuration's, credited where the candidate is below saturation"
)

Progress = Callable[[str], None]
PathLike = str | os.PathLike[str]


# ------------------------------------------------------------ candidate matrices
def _per_parameter(
    engine: str, candidates: Sequence[Mapping[str, Any]], value: Callable[[str, Any, Any], Any],
    dtype: Any,
) -> list[np.ndarray]:
    """Per parameter whose value differs between candidates: the ``(K, K)`` matrix of
    ``value(key, a[key], b[key])`` where ``a[key] != b[key]``, else 0 (completed candidates).

    ``value`` is called once per pair of distinct values of a parameter, not per pair of
    candidates: 512 candidates are 262,144 pairs but a handful of values.
    """
    space = get_space(engine)
    full = [space.complete(c) for c in candidates]
    out = []
    for key in space.parameters:
        distinct: list[Any] = []
        codes = np.empty(len(full), dtype=np.int64)
        for i, config in enumerate(full):
            for j, seen in enumerate(distinct):
                if seen == config[key]:
                    codes[i] = j
                    break
            else:
                codes[i] = len(distinct)
                distinct.append(config[key])
        if len(distinct) < 2:
            continue
        table = np.zeros((len(distinct), len(distinct)), dtype=dtype)
        for a, old in enumerate(distinct):
            for b, new in enumerate(distinct):
                if a != b:
                    table[a, b] = value(key, old, new)
        out.append(table[codes[:, None], codes[None, :]])
    return out


def restart_matrix(engine: str, candidates: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """``(K, K)`` bool: does going from candidate ``a`` to ``b`` need a restart?

    Uses ``planner.model.spaces.change_kind`` per changed parameter (per-transition rules
    such as a live row-cache resize included).
    """

    def needs_restart(key: str, old: Any, new: Any) -> bool:
        return change_kind(engine, key, old, new) == "restart"

    out = np.zeros((len(candidates), len(candidates)), dtype=bool)
    for per_key in _per_parameter(engine, candidates, needs_restart, bool):
        out |= per_key
    return out


def change_seconds_matrix(
    engine: str,
    candidates: Sequence[Mapping[str, Any]],
    seconds: Mapping[str, float] | None = None,
    measured: ChangeCosts | None = None,
) -> np.ndarray:
    """``(K, K)`` extra cost (seconds of full throughput) of each candidate switch.

    The sum over changed parameters of ``seconds[param]`` (default
    :data:`DEFAULT_CHANGE_SECONDS`), except where ``measured`` holds the switch to the new
    value (:meth:`planner.model.change_cost.ChangeCosts.seconds_for`: direction-dependent).
    """
    per = DEFAULT_CHANGE_SECONDS if seconds is None else dict(seconds)

    def change_seconds(key: str, old: Any, new: Any) -> float:
        found = measured.seconds_for(key, old, new) if measured is not None else None
        return float(per.get(key, 0.0)) if found is None else found

    out = np.zeros((len(candidates), len(candidates)))
    for per_key in _per_parameter(engine, candidates, change_seconds, float):
        out += per_key
    return out


def change_span_matrix(
    engine: str, candidates: Sequence[Mapping[str, Any]], measured: ChangeCosts | None,
) -> np.ndarray | None:
    """``(K, K)`` seconds each switch's cost is spread over: the longest measured rewrite
    among its changed parameters (:meth:`planner.model.change_cost.ChangeCosts.span_for`), 0
    where none was measured (the cost then takes the whole capacity); None without
    measurements."""
    if measured is None:
        return None

    def span(key: str, old: Any, new: Any) -> float:
        return measured.span_for(key, old, new) or 0.0

    out = np.zeros((len(candidates), len(candidates)))
    for per_key in _per_parameter(engine, candidates, span, float):
        np.maximum(out, per_key, out=out)
    return out


def _mix_rows(model: Any, mixes: np.ndarray) -> list[dict[str, float]]:
    m = np.asarray(mixes, dtype=float)
    return [dict(zip(model.classes, r.tolist(), strict=True))
            for r in m / m.sum(axis=1, keepdims=True)]


def capacity_matrix(
    model: Any, mixes: np.ndarray, candidates: Sequence[Mapping[str, Any]]
) -> np.ndarray:
    """``(T, K)`` predicted cluster capacity for mix rows (engine class order)."""
    mean, _std = model.predict_matrix(_mix_rows(model, mixes), list(candidates))
    return np.asarray(mean, dtype=float)


def p99_matrix(
    model: PerformanceModel, mixes: np.ndarray, candidates: Sequence[Mapping[str, Any]]
) -> np.ndarray:
    """``(T, K)`` predicted p99 (ms) for mix rows: a saturated window's, used as a ratio
    between candidates (:class:`planner.model.performance.LatencyTerms`)."""
    return np.asarray(model.predict_p99_matrix(_mix_rows(model, mixes), list(candidates)),
                      dtype=float)


# --------------------------------------------------------------- cost/benefit
def make_problem(
    capacity: np.ndarray,
    *,
    restart: np.ndarray,
    reconfig: ReconfigModel,
    step_seconds: float,
    load: np.ndarray | None = None,
    served: Served = "capacity",
    initial: int = 0,
    initial_lockout: int = 0,
    change_seconds: np.ndarray | None = None,
    headroom_weight: float = 0.0,
    p99: np.ndarray | None = None,
    latency_weight: float = 0.0,
    change_span: np.ndarray | None = None,
) -> PlanningProblem:
    """A planning problem from capacities (or ``(S, T, K)`` sample capacities).

    With samples (and optionally ``(S, T)`` loads) the served throughput and the costs
    are averaged over them: the plan then maximises the expected total. ``p99`` ``(T, K)``
    and ``latency_weight``: the latency term of ``"work"`` against candidate ``initial``
    (:func:`planner.planning.costbenefit.latency_credit`), the same p99 for every sample.
    """
    cap = np.asarray(capacity, dtype=float)
    if cap.ndim == 2:
        cap = cap[None]
    ld = None if load is None else np.asarray(load, dtype=float)
    if ld is not None and ld.ndim == 1:
        ld = np.broadcast_to(ld, cap.shape[:2])
    srv = np.zeros(cap.shape[1:])
    for s in range(cap.shape[0]):
        ls = None if ld is None else ld[s]
        srv += served_matrix(cap[s], load=ls, served=served, headroom_weight=headroom_weight,
                             p99=p99, latency_weight=latency_weight, reference=initial)
    n = cap.shape[0]
    # The (T, K, K) costs are computed when the optimiser reads them, from the capacities
    # (averaged over the samples): memory grows as T x K (x samples), never as T x K^2.
    costs = SwitchCostTensor(
        cap[0] if n == 1 else cap, restart=restart, model=reconfig,
        step_seconds=step_seconds, load=None if ld is None else ld[0] if n == 1 else ld,
        served=served, change_seconds=change_seconds, headroom_weight=headroom_weight,
        change_span=change_span,
    )
    return PlanningProblem(
        served=srv / n,
        costs=costs,
        lockout=lockout_matrix(restart, model=reconfig, step_seconds=step_seconds),
        step_seconds=step_seconds,
        initial=initial,
        initial_lockout=initial_lockout,
    )


@dataclass(frozen=True)
class SwitchCosts:
    """What switching between the candidates costs, whatever the workload.

    Parameters
    ----------
    restart
        ``(K, K)`` bool: the switch needs a rolling restart (:func:`restart_matrix`).
    reconfig
        T_r, the restart batches' capacity shares and the survivors' penalty.
    step_seconds
        Length of one decision interval.
    served
        ``"capacity"`` (SOPHIA: saturated clients), ``"offered"`` (min(load, capacity)) or
        ``"work"`` (min(load, capacity) + ``headroom_weight`` x load x (1 - utilisation)).
    change_seconds
        ``(K, K)`` extra seconds of full throughput a change costs however it is applied.
    change_span
        ``(K, K)`` seconds that cost is spread over (a measured rewrite's length); None:
        the whole capacity for ``change_seconds``
        (:func:`planner.planning.costbenefit.transition_costs`).
    headroom_weight
        With ``"work"``: the weight of the headroom term.
    latency_weight, p99
        With ``"work"``: the weight of the latency term and the ``(T, K)`` predicted p99 it
        compares (:func:`planner.planning.costbenefit.latency_credit`); weight 0 (the
        default): none.
    """

    restart: np.ndarray
    reconfig: ReconfigModel
    step_seconds: float
    served: Served = "capacity"
    change_seconds: np.ndarray | None = None
    headroom_weight: float = 0.0
    latency_weight: float = 0.0
    p99: np.ndarray | None = None
    change_span: np.ndarray | None = None

    def problem(
        self,
        capacity: np.ndarray,
        *,
        load: np.ndarray | None = None,
        initial: int = 0,
        initial_lockout: int = 0,
        p99: np.ndarray | None = None,
    ) -> PlanningProblem:
        """The planning problem for these capacities (the load counts unless ``capacity``;
        ``p99``: the latency term's, instead of :attr:`p99`, e.g. a scenario's draw)."""
        return make_problem(
            capacity, restart=self.restart, reconfig=self.reconfig,
            step_seconds=self.step_seconds, served=self.served,
            load=load if self.served != "capacity" else None,
            initial=initial, initial_lockout=initial_lockout,
            change_seconds=self.change_seconds, change_span=self.change_span,
            headroom_weight=self.headroom_weight if self.served == "work" else 0.0,
            p99=self.p99 if p99 is None else p99,
            latency_weight=self.latency_weight if self.served == "work" else 0.0,
        )


# ------------------------------------------------------------------ optimiser
@dataclass(frozen=True)
class OptimiserOptions:
    """How the schedule is searched: the GA (seeded) or the exact DP."""

    method: Literal["ga", "dp"] = "ga"
    seed: int = 0
    population: int = 48
    generations: int = 60
    searches: int = 2
    workers: int = 1

    def ga(self) -> op.GAOptions:
        """The GA settings (validated there)."""
        return op.GAOptions(
            seed=self.seed, population=self.population, generations=self.generations,
            searches=self.searches, workers=self.workers,
        )


@dataclass(frozen=True)
class Solution:
    """The optimiser's schedule, the DP optimum it is measured against, and the provenance."""

    evaluation: Evaluation
    dp: Evaluation | None
    info: dict[str, Any]


def _ga_progress(progress: Progress, options: op.GAOptions) -> Callable[[int, int, float], None]:
    """A GA progress callback that reports at most once a second (and the last generation)."""
    last = [0.0]

    def report(search: int, gen: int, best: float) -> None:
        now = time.perf_counter()
        if now - last[0] > 1.0 or gen == options.generations:
            last[0] = now
            progress(f"plan: GA search {search + 1}/{options.searches} generation "
                     f"{gen}/{options.generations} best {best:.4g} ops")

    return report


def optimise(
    problem: PlanningProblem,
    *,
    method: Literal["ga", "dp"] = "ga",
    ga: op.GAOptions | None = None,
    compare_dp: bool = True,
    progress: Progress | None = None,
) -> Solution:
    """Search the schedule; with ``compare_dp`` also solve the DP and record the GA's gap.

    The plan file records the gap to the DP optimum; the simulator, which replans many
    times, does not pay for the DP when it runs the GA.
    """
    ga = ga or op.GAOptions()
    dp = op.solve_dp(problem) if compare_dp or method == "dp" else None
    if method == "dp":
        assert dp is not None
        return Solution(dp, dp, {"method": "dp", "seed": ga.seed})
    report = None if progress is None else _ga_progress(progress, ga)
    ev = op.solve_ga(problem, options=ga, progress=report).evaluation
    info: dict[str, Any] = {
        "method": "ga", "seed": ga.seed, "population": ga.population,
        "generations": ga.generations, "searches": ga.searches,
    }
    if dp is not None:
        gap = (dp.total_ops - ev.total_ops) / dp.total_ops if dp.total_ops else 0.0
        info["gap_to_dp"] = round(float(gap), 6)
    return Solution(ev, dp, info)


# ------------------------------------------------------------------- plan file
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
    details: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Plan-file steps (plain data) from an optimiser evaluation.

    ``tables`` (``keyspace.table``) go into every step that changes a table-level
    parameter; such a step without them is refused (the executor would not know which
    tables to alter). ``details[j]`` (optional: ``p_gain``, ``gains``, ``served_ops``,
    ``utilisation``) is added to step ``j``'s ``expected``.
    """
    space = get_space(engine)
    out: list[dict[str, Any]] = []
    sw = list(evaluation.switches)
    for j, s in enumerate(sw):
        before, after = space.complete(candidates[s.source]), space.complete(candidates[s.target])
        keys = space.changed_keys(before, after)
        restart = [k for k in keys if change_kind(engine, k, before[k], after[k]) == "restart"]
        table_keys = [k for k in keys if changes_tables(engine, k, before[k], after[k])]
        if table_keys and not tables:
            raise ValidationError(
                f"--tables: step s{j + 1} changes {', '.join(table_keys)}, which sets the "
                "tables' options; name the tables it applies to, e.g. --tables ks.t1,ks.t2"
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
                "live": [k for k in keys if k not in restart],
                "restart": restart,
                "batches": [list(b) for b in batches] if restart else [],
                "expected": {
                    "benefit_ops": float(s.benefit_ops),
                    "cost_ops": float(s.cost_ops),
                    "net_ops": float(s.benefit_ops) - float(s.cost_ops),
                    **(dict(details[j]) if details is not None else {}),
                },
            }
        )
    return out


# ------------------------------------------------------------------ make_plan
@dataclass(frozen=True)
class PlanRequest:
    """What to plan for, and how (the ``kairos plan`` options, in-process).

    Exactly one of ``forecast`` and ``trace`` is given. Files may be given by path or
    already loaded; paths are read and checked as the CLI reads them.

    Parameters
    ----------
    forecast
        A :class:`planner.forecast.forecaster.Forecast` or the path of a forecast file.
    trace
        A :class:`planner.workload.series.WorkloadSeries` or the path of a trace, to forecast
        ``horizon`` steps from (``forecast_model``, ``season_length``, ``seed``).
    source
        What the plan's provenance names as the forecast's source (default: the path
        given, or ``"in-process"`` for a loaded forecast or series).
    engine, cluster
        ``"cassandra"`` or ``"redis"``; the cluster name written into the plan.
    current
        The configuration running now: a mapping, the path of a YAML mapping, or None
        for the engine's defaults. Candidates are built around it; it is candidate 0.
    model
        A :class:`planner.model.performance.PerformanceModel`, the path of one, or None for the
        engine's shipped prior.
    ring
        Cassandra: a :class:`planner.topology.ring.Ring` or the path of a ring description; None
        plans on ``hosts`` as a one-DC ring with ``rf`` replicas.
    hosts
        The nodes in ring order (Redis: the nodes, restarted one at a time).
    rf, cl, tolerate, aggressive
        Replication factor (with ``hosts``), consistency level to keep, extra failures to
        survive, all-at-once allowed when RF = CL.
    restart_seconds, survivor_penalty, compaction_seconds, served
        The cost model: T_r per node, capacity the up nodes lose while a batch is down,
        seconds of full throughput a compaction strategy change costs, and what a plan is
        credited with (``"capacity"``, ``"offered"`` or ``"work"``).
    restart_seconds_from
        A state directory, plan, state file or store whose recorded rollouts give T_r
        per node (:mod:`planner.executor.restart_costs`); ``restart_seconds`` is then the fallback
        until a restart is measured.
    restart_costs
        A file bench/restart_cost.py wrote (:mod:`planner.model.restart_impact`): its measured
        survivor penalty replaces ``survivor_penalty``, and its warm-up seconds are charged
        to every restart (none without it).
    change_costs
        A file bench/change_cost.py wrote (:mod:`planner.model.change_cost`): the measured seconds
        of each compaction strategy switch it holds replace ``compaction_seconds`` for that
        switch's direction, spread over the rewrite's measured length and priced at the
        load it meets (a rewrite in a quiet hour loses only what spare capacity cannot
        absorb).
    headroom_weight
        With ``served="work"``: the weight of the headroom term ``load x (1 - utilisation)``
        below saturation (0: served work only).
    latency_weight
        With ``served="work"`` and a model that predicts p99: the weight of the latency term
        ``load x ln(p99_running / p99_candidate)`` where the candidate is below saturation
        (:func:`planner.planning.costbenefit.latency_credit`; 0, the default: no latency term).
    confidence
        A step is kept only when P(gain > cost) over the scenarios reaches it (0: every
        step the optimiser finds is kept).
    scenarios
        Joint scenarios (forecast sample path x performance-model draw) P(gain > cost) and
        the ``quantile`` objective are computed on (0: none; then confidence must be 0).
    risk
        What the optimiser maximises: ``"mean"`` (the expected/point value), ``"quantile"``
        (each candidate at the ``1 - confidence`` quantile of its capacity relative to the
        running one, under the model's uncertainty), ``"endure"`` (the worst mix in the
        forecast's interval box) or ``"endure-kl"`` (the worst mix within the KL radius the
        forecast's backtest errors stayed in, ENDURE's neighbourhood).
    horizon
        Decision intervals (>= 2); a shorter forecast shortens it.
    samples
        Optimise the expected value over this many forecast sample paths (0: the mean).
    tables
        ``keyspace.table`` names a table-level change (compaction) applies to.
    optimiser
        GA or DP and the GA's settings; its seed also seeds forecasting and sampling.
    capacity_margin, scale_in_after_seconds
        The capacity advice's safety margin and the shortest horizon a scale-in advice
        rests on (:func:`planner.planning.capacity.advise`; the plan's
        ``provenance.capacity_advice``).
    hold_restarts
        Why no restart step may be proposed now (the autopilot's hold while the model's
        recent error is high, :func:`planner.autopilot.learning.restart_hold`): only configurations
        the running one reaches live are searched, and the plan's provenance says why.
    durability_floor
        Redis: the least durable configuration a plan may run (``appendonly``,
        ``appendfsync``, ``save``; :mod:`planner.model.durability`), a mapping as the inventory's
        ``kairos_redis_durability_floor`` declares it or a
        :class:`planner.model.durability.DurabilityFloor`; None (or an empty mapping): the
        running configuration's durability. Candidates below it are not searched, and the
        plan's ``provenance.durability_floor`` records it and how many it excluded.
    memory_curve
        A memory curve file (:mod:`planner.model.memory_curve`, measured by
        bench/memory_split_redis.py): the plan's ``provenance.memory_split`` carries the split
        it advises from the running configuration under the forecast's mean mix.
    table_forecasts
        Per ``keyspace.table``: a forecast of that table's own load and mix (a
        :class:`planner.forecast.forecaster.Forecast` or its file, sharing the forecast's
        start and step). Each table then gets its own table-level values where they pay
        (:mod:`planner.planning.per_table`): the steps carry ``per_table`` overrides and the
        plan's ``provenance.per_table`` says what each table was given and why. None or
        empty: every table runs the cluster-wide values.
    node_forecasts
        Per host (one of the plan's: ``hosts`` or the ring's): a forecast of the load and mix
        that node coordinates, sharing the forecast's start and step. Each node then gets its
        own values of the node-level live parameters the model has an effect for, where they
        pay (:mod:`planner.planning.per_node`): the steps carry ``per_node`` overrides and the
        plan's ``provenance.per_node`` says what each node was given, why, and the node
        groups. A host without a forecast takes an even part of the load the others leave
        and runs the cluster-wide values. None or empty: every node runs them.
    replicas
        Redis, with ``node_forecasts``: replica -> its primary (both among the plan's
        hosts). A replica takes no part in the per-node choice (it serves no client) and
        runs its primary's values (:func:`planner.planning.per_node.with_replicas`).
    """

    forecast: Forecast | PathLike | None = None
    trace: WorkloadSeries | PathLike | None = None
    source: str | None = None
    engine: str = "cassandra"
    cluster: str = "lab"
    current: Mapping[str, Any] | PathLike | None = None
    model: PerformanceModel | PathLike | None = None
    ring: Ring | PathLike | None = None
    hosts: Sequence[str] = DEFAULT_HOSTS
    rf: int = 3
    cl: str = "QUORUM"
    tolerate: int = 0
    aggressive: bool = False
    restart_seconds: float = DEFAULT_RESTART_SECONDS
    survivor_penalty: float = 0.05
    compaction_seconds: float = DEFAULT_CHANGE_SECONDS["compaction"]
    served: Served = "work"
    restart_seconds_from: PathLike | None = None
    restart_costs: PathLike | None = None
    change_costs: PathLike | None = None
    headroom_weight: float = DEFAULT_HEADROOM_WEIGHT
    latency_weight: float = DEFAULT_LATENCY_WEIGHT
    confidence: float = rk.DEFAULT_CONFIDENCE
    scenarios: int = rk.DEFAULT_SCENARIOS
    risk: rk.Risk = "mean"
    horizon: int = 48
    forecast_model: str = "auto"
    season_length: int | None = None
    samples: int = 0
    tables: Sequence[str] = ()
    optimiser: OptimiserOptions = field(default_factory=OptimiserOptions)
    hold_restarts: str | None = None
    capacity_margin: float = cap_advice.DEFAULT_MARGIN
    scale_in_after_seconds: float = cap_advice.DEFAULT_SCALE_IN_AFTER_SECONDS
    durability_floor: Mapping[str, Any] | DurabilityFloor | None = None
    memory_curve: PathLike | None = None
    table_forecasts: Mapping[str, Forecast | PathLike] | None = None
    node_forecasts: Mapping[str, Forecast | PathLike] | None = None
    replicas: Mapping[str, str] | None = None


#: The plan options that are the optimiser's (:class:`OptimiserOptions`), flat beside the
#: request's own fields in ``kairos plan``'s options and the autopilot's ``plan_options``.
OPTIMISER_FIELDS = ("method", "seed", "population", "generations", "searches", "workers")


def plan_request(**options: Any) -> PlanRequest:
    """The :class:`PlanRequest` that flat plan options describe.

    ``options`` are :class:`PlanRequest` fields and the optimiser's (:data:`OPTIMISER_FIELDS`,
    gathered into ``optimiser``); what is not given keeps the request's default, which is
    ``kairos plan``'s. An unknown name is a TypeError (a caller's bug, not an input).
    """
    optimiser = {k: options.pop(k) for k in OPTIMISER_FIELDS if k in options}
    return PlanRequest(**options, optimiser=OptimiserOptions(**optimiser))


@dataclass(frozen=True)
class PlanResult:
    """The plan and what it was made from; :meth:`summary` is what ``kairos plan`` prints."""

    plan: Plan
    evaluation: Evaluation
    dp: Evaluation | None
    forecast: Forecast
    hosts: tuple[str, ...]
    batches: tuple[tuple[str, ...], ...]
    p_gain: tuple[float, ...] = ()
    dropped: tuple[rk.Dropped, ...] = ()
    per_table: PerTableChoices | None = None
    per_node: PerNodeChoices | None = None

    def summary(self) -> str:
        """Steps and expected net gain, e.g. ``2 step(s), expected net gain 3.1e+06 ops (...)``.

        Steps the confidence rule dropped are counted at the end.
        """
        ev = self.evaluation
        base = ev.baseline_ops
        text = (
            f"{len(self.plan.steps)} step(s), expected net gain {ev.net_ops:.4g} ops "
            f"({ev.net_ops / base:+.2%} vs staying put)" if base else
            f"{len(self.plan.steps)} step(s), expected net gain {ev.net_ops:.4g} ops"
        )
        if self.dropped:
            conf = self.plan.provenance.get("uncertainty", {}).get("confidence")
            text += f"; {len(self.dropped)} step(s) dropped below confidence {conf}"
        if self.per_table is not None:
            taken = [n for n, c in self.per_table.tables.items() if c.override]
            text += (f"; per-table overrides for {len(taken)} of {len(self.per_table.tables)} "
                     f"table(s): gain {self.per_table.gain_ops:.4g} ops, cost "
                     f"{self.per_table.cost_ops:.4g} ops")
        if self.per_node is not None:
            taken = [n for n, c in self.per_node.nodes.items() if c.override]
            groups = "; ".join(f"{g.name}: {', '.join(g.hosts)}" for g in self.per_node.groups)
            text += (f"; per-node overrides for {len(taken)} of {len(self.per_node.nodes)} "
                     f"node(s): gain {self.per_node.gain_ops:.4g} ops (groups {groups})")
        return text


def _check_request(req: PlanRequest) -> tuple[str, ...]:
    """Refuse what cannot be planned before any work; returns the checked tables."""
    if req.horizon < 2:
        raise ValidationError(f"--horizon: must be >= 2, got {req.horizon}")
    get_space(req.engine)  # an unknown engine is refused here
    tables = check_tables(list(req.tables), "--tables")
    if req.table_forecasts:
        if not get_engine(req.engine).tables:
            raise ValidationError(f"--table-forecast: {req.engine} has no table-level settings")
        check_tables(list(req.table_forecasts), "--table-forecast")
    if (req.forecast is None) == (req.trace is None):
        raise ValidationError("forecast, trace: give exactly one")
    if not 0 <= req.samples <= MAX_SAMPLES:
        raise ValidationError(f"--samples: must be in [0, {MAX_SAMPLES}], got {req.samples}")
    if req.samples * req.horizon > MAX_SAMPLE_STEPS:
        raise ValidationError(
            f"--samples: {req.samples} sample paths x --horizon {req.horizon} steps is over "
            f"{MAX_SAMPLE_STEPS:,} (the capacity matrices would not fit in memory)"
        )
    _check_objective(req)
    return tables


def _check_objective(req: PlanRequest) -> None:
    """The credit, risk and confidence options, checked before any work."""
    if req.served not in SERVED_MODES:
        raise ValidationError(
            f"--served: expected one of {', '.join(SERVED_MODES)}, got {req.served!r}"
        )
    if not 0.0 <= req.headroom_weight <= 1.0:
        raise ValidationError(f"--headroom-weight: must be in [0, 1], got {req.headroom_weight}")
    if not 0.0 <= req.latency_weight <= 1.0:
        raise ValidationError(f"--latency-weight: must be in [0, 1], got {req.latency_weight}")
    if req.latency_weight > 0 and req.served != "work":
        raise ValidationError(
            f"--latency-weight: credits latency below saturation, which only --served work "
            f"does (got --served {req.served})")
    if not 0.0 <= req.confidence < 1.0:
        raise ValidationError(f"--confidence: must be in [0, 1), got {req.confidence}")
    if req.risk not in rk.RISK_MODES:
        raise ValidationError(
            f"--risk: expected one of {', '.join(rk.RISK_MODES)}, got {req.risk!r}"
        )
    if not 0 <= req.scenarios <= MAX_SAMPLES:
        raise ValidationError(f"--scenarios: must be in [0, {MAX_SAMPLES}], got {req.scenarios}")
    if req.scenarios == 0 and req.confidence > 0:
        raise ValidationError(
            "--scenarios: 0 scenarios cannot estimate P(gain > cost); give --scenarios N "
            "or --confidence 0"
        )


def _current(req: PlanRequest) -> dict[str, Any]:
    """The running configuration, complete (read and checked through planner.inputs)."""

    space = get_space(req.engine)
    if req.current is None:
        return space.complete({})
    if isinstance(req.current, Mapping):
        return space.complete(space.normalize(dict(req.current)))
    return space.complete(load_config(os.fspath(req.current), engine=req.engine))


#: The most candidate configurations a plan searches (a calibrated model's levels: 3
#: compaction strategies x 2 levels of each of 4 parameters is 48).
MAX_CANDIDATES = 64


def _candidates(engine: str, current: Mapping[str, Any], tables: Sequence[str],
                progress: Progress, *, hold: str | None = None,
                model: PerformanceModel | None = None) -> list[dict[str, Any]]:
    """The configurations to search; without tables, the table settings stay as they run;
    with a restart ``hold`` (why), only those the running one reaches live.

    The grid is the space's ``grid_keys`` over their candidate values; with a calibrated
    ``model`` that has configuration terms, it is what that model measured instead
    (:func:`measured_values`): its parameters and levels, which the defaults may not hold
    (UnifiedCompactionStrategy, a compaction throughput). Such a model predicts no effect
    for a parameter it was not calibrated on, so a change of one could only cost.
    A table-level change (compaction) needs the tables it applies to; a plan made without
    them searches the rest rather than proposing a step the executor could not carry out.
    """
    space = get_space(engine)
    measured = measured_values(model) if model is not None else {}
    keys = list(measured or space.grid_keys)
    # a linear term records no values: the space's candidate values and the running one
    values = {k: found or tuple(dict.fromkeys([*(space[k].candidate_values or ()), current[k]]))
              for k, found in measured.items()}
    table_keys = [k for k in keys if space[k].location == "table"]
    if table_keys and not tables:
        progress(f"plan: no --tables given: {', '.join(table_keys)} stay(s) as the nodes run "
                 "(a table setting needs the tables it applies to)")
        keys = [k for k in keys if k not in table_keys]
    if "row_cache_size" in keys and not tables:
        # Cassandra's row cache: turning it on or off sets the tables' caching, so only
        # resizes remain.
        axis = values.get("row_cache_size") or space["row_cache_size"].candidate_values or ()
        on = row_cache_enabled(current["row_cache_size"])
        values["row_cache_size"] = tuple(v for v in axis if row_cache_enabled(v) == on) or (
            current["row_cache_size"],)
        progress("plan: no --tables given: the row cache stays "
                 f"{'on' if on else 'off'} (turning it on or off sets the tables' caching)")
    found = space.candidates(keys=keys, base=current, values=values,
                             max_configs=MAX_CANDIDATES)
    return _live_reachable(engine, found, hold, progress) if hold else found


def _search_space(
    req: PlanRequest, current: Mapping[str, Any], tables: Sequence[str],
    perf: PerformanceModel, progress: Progress,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The candidates the optimiser searches (:func:`_candidates`, then Redis' durability
    floor, :func:`_durability_floor`) and the floor's provenance (None for Cassandra)."""
    found = _candidates(req.engine, current, tables, progress, hold=req.hold_restarts,
                        model=perf)
    return _durability_floor(req, current, found, progress)


#: The floor's source when none is declared (planner.model.durability.floor_of).
DEFAULT_FLOOR_SOURCE = "the running configuration (no floor declared)"


def _durability_floor(
    req: PlanRequest, current: Mapping[str, Any], candidates: list[dict[str, Any]],
    progress: Progress,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Redis: the candidates at or above the durability floor, and what the plan's
    provenance records of it (the floor, where it comes from, how many candidates it
    excluded and for which fields); Cassandra: the candidates as they are, None.

    Raises
    ------
    ValidationError
        ``--durability-floor...`` for a bad floor, a floor for Cassandra, or a running
        configuration already below the floor (candidate 0 is staying put: there would be
        no search space).
    """
    given = req.durability_floor
    if not get_engine(req.engine).durability_floor:
        if given:
            raise ValidationError(
                f"--durability-floor: names Redis settings (appendonly, appendfsync, save); "
                f"this is a {req.engine} plan"
            )
        return candidates, None
    if isinstance(given, DurabilityFloor):
        floor = given
    elif given:
        floor = parse_floor(given, where="--durability-floor",
                            source="declared (--durability-floor)")
    else:
        floor = floor_of(current, source=DEFAULT_FLOOR_SOURCE)
    below = floor.violations(current)
    if below:
        raise ValidationError(
            f"--durability-floor: the running configuration is below the floor: "
            f"{below[0].field}: {below[0].problem}; raise it on the nodes first, or lower the "
            "floor"
        )
    kept: list[dict[str, Any]] = []
    fields: dict[str, int] = {}
    for c in candidates:
        found = floor.violations(c)
        if not found:
            kept.append(c)
        for v in found:
            fields[v.field] = fields.get(v.field, 0) + 1
    progress(f"plan: durability floor {floor.describe()} ({floor.source}): "
             f"{len(candidates) - len(kept)} of {len(candidates)} candidate configuration(s) "
             "below it excluded")
    return kept, {"floor": floor.to_dict(), "source": floor.source,
                  "candidates": len(candidates), "excluded": len(candidates) - len(kept),
                  "excluded_by": fields}


def measured_values(model: PerformanceModel) -> dict[str, tuple[Any, ...]]:
    """What a calibrated (fitted) model measured: per parameter, the values its features
    name (an enum's levels, the configurations of a pooled fit); none for the prior,
    whose terms come from papers, not from this cluster. A linear term's values are not
    recorded in the model: such a parameter is varied over the space's candidate values."""
    if model.model_type != "fitted":
        return {}
    space = get_space(model.engine)
    seen: dict[str, list[Any]] = {}
    for feat in model.features:
        if feat.kind == "config":
            pairs = feat.match
        elif feat.kind == "level":
            pairs = ((feat.param, feat.level),)
        else:  # linear: the parameter, no value
            pairs = ((feat.param, None),)
        for key, value in pairs:
            known = seen.setdefault(key, [])
            value = None if value is None else space[key].coerce(value)
            if value is not None and value not in known:
                known.append(value)
    return {k: tuple(v) for k, v in seen.items()}


def _live_reachable(engine: str, candidates: list[dict[str, Any]], why: str,
                    progress: Progress) -> list[dict[str, Any]]:
    """The candidates the running one (candidate 0) reaches without a restart."""
    restart = restart_matrix(engine, candidates)[0]
    kept = [c for c, needs in zip(candidates, restart, strict=True) if not needs]
    progress(f"plan: restart steps held ({why}): {len(kept)} of {len(candidates)} "
             "configurations reachable live")
    return kept


def _forecast(req: PlanRequest, progress: Progress) -> tuple[Forecast, str]:
    """The forecast (loaded, given, or made from the trace) and its provenance source."""
    from planner.forecast.forecaster import forecast, load_forecast
    from planner.workload.series import load_trace

    if req.forecast is not None:
        if isinstance(req.forecast, str | os.PathLike):
            source = os.fspath(req.forecast)
            fc = load_forecast(source)
        else:
            fc, source = req.forecast, "in-process"
    else:
        assert req.trace is not None
        if isinstance(req.trace, str | os.PathLike):
            source = os.fspath(req.trace)
            series = load_trace(source)
        else:
            series, source = req.trace, "in-process"
        if series.step_seconds is None:
            raise ValidationError(f"{source}: irregular trace; resample it first")
        progress(f"plan: forecasting {req.horizon} steps of {source} ({len(series)} points)")
        fc = forecast(
            series, horizon=req.horizon, model=req.forecast_model,
            season_length=req.season_length, seed=req.optimiser.seed, progress=progress,
        )
    if fc.engine != req.engine:
        raise ValidationError(f"forecast: is for {fc.engine}, not {req.engine}")
    return fc, req.source or source


def _model(req: PlanRequest) -> tuple[PerformanceModel, str]:
    """The performance model and the name the provenance gives its file."""
    from planner.model.performance import load_default_model, load_model

    if req.model is None:
        perf, where = load_default_model(req.engine), f"{req.engine}-prior (shipped)"
    elif isinstance(req.model, str | os.PathLike):
        where = os.fspath(req.model)
        perf = load_model(where)
    else:
        perf, where = req.model, "in-process"
    if perf.engine != req.engine:
        raise ValidationError(f"--model: {where} is a {perf.engine} model, not {req.engine}")
    if req.latency_weight > 0 and not perf.predicts_latency:
        raise ValidationError(
            f"--latency-weight: the performance model {perf.name} ({where}) predicts no "
            "latency; fit one from observations with p99_ms (kairos calibrate --fit-only), "
            "or leave the weight at 0")
    return perf, where


def _p99(req: PlanRequest, fc: Forecast, perf: PerformanceModel,
         candidates: Sequence[Mapping[str, Any]], horizon: int) -> np.ndarray | None:
    """``(T, K)`` predicted p99 under the expected mix when the latency term is on, else
    None (nothing is predicted, so a weight of 0 leaves the plan as it was)."""
    if req.latency_weight == 0:
        return None
    mix = np.stack([np.asarray(fc.mix_mean[c], dtype=float) for c in perf.classes], axis=1)
    return p99_matrix(perf, mix[:horizon], candidates)


def _capacities(
    req: PlanRequest, fc: Forecast, perf: Any, candidates: Sequence[Mapping[str, Any]]
) -> tuple[np.ndarray, np.ndarray, int]:
    """Capacities ``(T, K)`` (or ``(S, T, K)`` over sample paths), the loads, the horizon."""
    horizon = min(req.horizon, len(fc.load_mean))
    if req.samples > 0:
        paths = fc.sample_paths(req.samples, np.random.default_rng(req.optimiser.seed))
        cap = np.stack(
            [capacity_matrix(perf, p.mix_matrix()[:horizon], candidates) for p in paths]
        )
        return cap, np.stack([p.load[:horizon] for p in paths]), horizon
    mix = np.stack([np.asarray(fc.mix_mean[c], dtype=float) for c in perf.classes], axis=1)
    cap = capacity_matrix(perf, mix[:horizon], candidates)
    return cap, np.asarray(fc.load_mean, dtype=float)[:horizon], horizon


def _batches(
    req: PlanRequest, progress: Progress
) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...], dict[str, Any] | None]:
    """Restart batches safe at ``cl`` on the ring (Redis: one node at a time), the hosts,
    and for Cassandra the provenance's ``batching`` (count, bound, why each is safe)."""
    if not get_engine(req.engine).ring:
        hosts = tuple(req.hosts)
        return tuple((h,) for h in hosts), hosts, None
    if req.ring is None:
        ring = Ring.simple(list(req.hosts), rf=req.rf)
    else:
        ring = req.ring if isinstance(req.ring, Ring) else load_ring(os.fspath(req.ring))
    bp = safe_batches(
        ring, consistency_level=req.cl, tolerated_failures=req.tolerate,
        aggressive=req.aggressive,
    )
    progress(f"plan: {len(bp.batches)} restart batch(es) for {req.cl.upper()}"
             + ("" if bp.exact else f" (lower bound {bp.lower_bound})"))
    batching = {"batches": len(bp.batches), "lower_bound": bp.lower_bound,
                "exact": bp.exact, "reasons": list(bp.reasons)}
    return bp.batches, tuple(ring.hosts), batching


def _restarts(req: PlanRequest) -> MeasuredRestarts:
    """T_r: measured from ``restart_seconds_from``, else the ``restart_seconds`` given."""
    from planner.executor.restart_costs import MeasuredRestarts, measured_restarts

    if req.restart_seconds_from is None:
        return MeasuredRestarts(seconds=req.restart_seconds,
                                source=f"given: --restart-seconds {req.restart_seconds:g}")
    return measured_restarts(req.restart_seconds_from, cluster=req.cluster,
                             engine=req.engine, default=req.restart_seconds)


def _change_costs(req: PlanRequest) -> ChangeCosts | None:
    """The measured change costs of ``req.change_costs`` (None when not given)."""
    return load_change_costs(req.change_costs) if req.change_costs is not None else None


def _impact(req: PlanRequest) -> RestartImpact | None:
    """The measured restart impact of ``req.restart_costs`` (None when not given)."""
    return load_restart_impact(req.restart_costs) if req.restart_costs is not None else None


def _compaction_source(req: PlanRequest, costs: ChangeCosts | None) -> str:
    """Where a compaction switch's price comes from (``costs``: the request's measured
    change costs, read once), for the plan's provenance."""
    given = f"given: --compaction-seconds {req.compaction_seconds:g}"
    if costs is None:
        return given
    return f"{costs.describe()}; {given} for a switch not measured"


def _impact_provenance(req: PlanRequest, impact: RestartImpact | None) -> dict[str, Any]:
    """The cost model's survivor penalty and warm-up, and where they come from."""
    if impact is None:
        return {"survivor_penalty": req.survivor_penalty,
                "survivor_penalty_source": "given (--survivor-penalty, default 0.05)",
                "warmup_seconds": 0.0,
                "warmup_seconds_source": "not measured: no --restart-costs"}
    where = (f"measured: {req.restart_costs} ({impact.environment.get('command', 'bench')}"
             f", {impact.environment.get('measured_at', 'undated')})")
    return {"survivor_penalty": impact.survivor_penalty, "survivor_penalty_source": where,
            "warmup_seconds": impact.warmup_seconds, "warmup_seconds_source": where}


def _switch_costs(
    req: PlanRequest,
    candidates: Sequence[Mapping[str, Any]],
    batches: Sequence[Sequence[str]],
    step_seconds: float,
    restarts: MeasuredRestarts | None = None,
    impact: RestartImpact | None = None,
    p99: np.ndarray | None = None,
    change_costs: ChangeCosts | None = None,
) -> SwitchCosts:
    """The cost model of the request over the candidates (T_r per node when measured; the
    survivor penalty and warm-up of ``impact``, the request's ``restart_costs`` read once;
    the latency term's ``p99`` when it is on; the measured switches of ``change_costs``,
    the request's ``change_costs`` read once)."""
    tr = restarts or _restarts(req)
    impact = impact or _impact(req)
    change_costs = change_costs or _change_costs(req)
    reconfig = ReconfigModel.from_batches(
        batches, restart_seconds=tr.seconds,
        survivor_penalty=impact.survivor_penalty if impact else req.survivor_penalty,
        node_seconds=tr.node_seconds or None,
        warmup_seconds=impact.warmup_seconds if impact else 0.0,
    )
    tables = get_engine(req.engine).tables  # a change of a table option rewrites the tables
    change = change_seconds_matrix(
        req.engine, candidates, {"compaction": req.compaction_seconds},
        measured=change_costs,
    ) if tables else None
    return SwitchCosts(
        restart=restart_matrix(req.engine, candidates), reconfig=reconfig,
        step_seconds=step_seconds, served=req.served, change_seconds=change,
        change_span=change_span_matrix(req.engine, candidates, change_costs)
        if tables else None,
        headroom_weight=req.headroom_weight if req.served == "work" else 0.0,
        latency_weight=req.latency_weight if p99 is not None else 0.0, p99=p99,
    )


@dataclass(frozen=True)
class _Decision:
    """The optimiser's search, and the plan after the confidence rule, valued as expected."""

    solution: Solution
    evaluation: Evaluation
    p_gain: tuple[float, ...]
    dropped: tuple[rk.Dropped, ...]
    quantile: float | None


def _risk_quantile(confidence: float) -> float:
    """The ``quantile`` objective's level: 1 - confidence (at most the median)."""
    return min(0.5, round(1.0 - confidence, 6))


def _target_problem(
    req: PlanRequest, base: PlanningProblem, *, cap: np.ndarray,
    fc: Forecast, perf: Any, candidates: Sequence[Mapping[str, Any]], horizon: int,
    latency: Mapping[str, Any],
) -> PlanningProblem:
    """The problem the optimiser maximises: the expected one, or risk-adjusted (with the
    latency term's ``latency`` keywords: the point p99 under any risk objective)."""
    lower = np.asarray(fc.load_lower, dtype=float)[:horizon]
    if req.risk == "quantile":
        mix = np.stack([np.asarray(fc.mix_mean[c], dtype=float)[:horizon] for c in perf.classes],
                       axis=1)
        point = cap.mean(axis=0) if cap.ndim == 3 else cap
        load = np.asarray(fc.load_mean, dtype=float)[:horizon]
        return rk.quantile_problem(
            base, model=perf, mixes=mix, capacity=point, candidates=candidates,
            quantile=_risk_quantile(req.confidence),
            load=None if req.served == "capacity" else load, served=req.served,
            headroom_weight=req.headroom_weight, **latency,
        )
    if req.risk in ("endure", "endure-kl"):
        worst = (rk.worst_case_capacity(perf, fc, candidates, horizon) if req.risk == "endure"
                 else rk.kl_worst_case_capacity(perf, fc, candidates, horizon,
                                                rk.forecast_kl_radius(fc)))
        return rk.endure_problem(
            base, capacity=worst, load_lower=None if req.served == "capacity" else lower,
            served=req.served, headroom_weight=req.headroom_weight, **latency,
        )
    return base


def _decide(
    req: PlanRequest, *, fc: Forecast, perf: Any, candidates: Sequence[Mapping[str, Any]],
    costs: SwitchCosts, cap: np.ndarray, loads: np.ndarray, horizon: int, say: Progress,
) -> _Decision:
    """Search the risk-adjusted problem, then keep the steps that pay with confidence.

    The steps' expected figures are always valued on the expected problem (``base``);
    the scenarios (their own random stream, seeded by the optimiser's seed) give each
    step's P(gain > cost).
    """
    base = costs.problem(cap, load=loads)
    scenarios = None
    if req.scenarios > 0:
        rng = np.random.default_rng((req.optimiser.seed, 15))
        world = dict(forecast=fc, model=perf, candidates=candidates, horizon=horizon,
                     n=req.scenarios, rng=rng)
        wp99 = None
        if costs.p99 is None:
            wcap, wload = rk.sample_world(**world)
        else:  # the latency term: each scenario's own p99 draw
            wcap, wload, wp99 = rk.sample_world_p99(**world)
        scenarios = rk.make_scenarios(wcap, wload, costs, p99=wp99)
    latency = ({"p99": costs.p99, "latency_weight": costs.latency_weight}
               if costs.p99 is not None else {})
    target = _target_problem(req, base, cap=cap, fc=fc, perf=perf, candidates=candidates,
                             horizon=horizon, latency=latency)
    opts = req.optimiser
    solution = optimise(target, method=opts.method, ga=opts.ga(), progress=say)
    ev = evaluate(base, solution.evaluation.schedule)
    probs: list[float] = []
    dropped: list[rk.Dropped] = []
    if scenarios is not None:
        ev, probs, dropped = rk.enforce_confidence(base, scenarios, ev, req.confidence)
        if dropped:
            say(f"plan: {len(dropped)} step(s) dropped: P(gain > cost) below "
                f"--confidence {req.confidence:g} over {req.scenarios} scenarios")
    return _Decision(solution, ev, tuple(probs), tuple(dropped),
                     _risk_quantile(req.confidence) if req.risk == "quantile" else None)


def _step_details(
    ev: Evaluation, *, cap: np.ndarray, load: np.ndarray, step_seconds: float,
    p_gain: Sequence[float],
) -> list[dict[str, Any]]:
    """Per step: what it gains (throughput at saturation, or headroom below it), the
    served work it adds, the utilisation before/after at the offered load, and its P.

    ``cap`` ``(T, K)`` and ``load`` ``(T,)`` are the expected capacities and load.
    """
    out: list[dict[str, Any]] = []
    sw = list(ev.switches)
    for j, s in enumerate(sw):
        until = sw[j + 1].t if j + 1 < len(sw) else len(load)
        ld = load[s.t:until]
        ca, cb = cap[s.t:until, s.source], cap[s.t:until, s.target]
        served = float(np.sum(np.minimum(ld, cb) - np.minimum(ld, ca)) * step_seconds)
        saturated = bool(np.any(ld > ca))
        d: dict[str, Any] = {
            "gains": "throughput" if saturated and served > 0 else "headroom",
            "served_ops": served,
            "utilisation": {"before": round(float(np.mean(ld / ca)), 4),
                            "after": round(float(np.mean(ld / cb)), 4)},
        }
        if p_gain:
            d["p_gain"] = round(float(p_gain[j]), 4)
        out.append(d)
    return out


def _uncertainty(
    req: PlanRequest, decision: _Decision, *, perf: Any, fc: Forecast,
    candidates: Sequence[Mapping[str, Any]], start: datetime, step: float,
) -> dict[str, Any]:
    """The provenance of the risk objective and the confidence rule (dropped steps named)."""
    space = get_space(req.engine)
    out: dict[str, Any] = {
        "risk": req.risk, "confidence": req.confidence, "scenarios": req.scenarios,
        "model_uncertainty": "coefficient draws from the "
        + ("prior's stated uncertainty" if perf.model_type == "prior" else "fit's covariance"),
    }
    if decision.quantile is not None:
        out["quantile"] = decision.quantile
    if req.risk == "endure-kl":  # the neighbourhood's size, as the backtest learnt it
        out["kl_radius"] = round(rk.forecast_kl_radius(fc), 6)
    if decision.dropped:
        out["dropped"] = [
            {"due": (start + timedelta(seconds=d.t * step)).isoformat(),
             "change": {k: space.complete(candidates[d.target])[k] for k in space.changed_keys(
                 space.complete(candidates[d.source]), space.complete(candidates[d.target]))},
             "p_gain": round(d.p_gain, 4)}
            for d in decision.dropped
        ]
    return out


def _provenance(
    req: PlanRequest, *, fc: Forecast, source: str, perf: Any, model_file: str,
    decision: _Decision, n_batches: int, restarts: MeasuredRestarts,
    impact: RestartImpact | None, uncertainty: Mapping[str, Any], utilisation: np.ndarray,
    batching: Mapping[str, Any] | None = None, p99: np.ndarray | None = None,
    change_costs: ChangeCosts | None = None, floor: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the plan was made from, as the plan file records it.

    ``utilisation`` ``(T,)``: offered load over the running configuration's capacity;
    ``batching``: how the restart batches were found and why each is safe (Cassandra);
    ``p99`` ``(T, K)``: the predicted p99 the latency term compared (None: no term);
    ``floor``: the Redis durability floor the candidates were kept above (:func:`_search_space`).
    """
    from planner.executor.restart_costs import describe

    solution, ev = decision.solution, decision.evaluation
    dp = solution.dp
    assert dp is not None
    objective: dict[str, Any] = {
        "served": req.served,
        "headroom_measure": (HEADROOM_BESIDE_LATENCY if perf.predicts_latency
                             else HEADROOM_BY_UTILISATION),
        "running_utilisation": {"mean": round(float(np.mean(utilisation)), 4),
                                "max": round(float(np.max(utilisation)), 4)},
        "saturated_intervals": int(np.sum(utilisation > 1.0)),
    }
    if req.served == "work":
        objective["headroom_weight"] = req.headroom_weight
        objective["latency_weight"] = req.latency_weight
    if p99 is not None:
        running = p99[:, 0]  # candidate 0 is the configuration running now
        objective["latency_measure"] = LATENCY_MEASURE
        objective["running_p99_ms"] = {"mean": round(float(np.mean(running)), 3),
                                       "max": round(float(np.max(running)), 3)}
    return {
        "forecast": {"model": fc.model, "source": source, "samples": req.samples},
        "performance_model": {"name": perf.name, "version": perf.version, "file": model_file},
        "optimiser": solution.info,
        "cost_model": {"restart_seconds": restarts.seconds,
                       "restart_seconds_source": restarts.source,
                       **({"restarts": describe(restarts)} if restarts.measured else {}),
                       "live_seconds": 0.0,
                       "live_seconds_source": "live changes take no node out of service",
                       "compaction_seconds": req.compaction_seconds,
                       "compaction_seconds_source": _compaction_source(req, change_costs),
                       **_impact_provenance(req, impact), "served": req.served,
                       "batches": n_batches},
        "objective": objective,
        **({"restart_hold": req.hold_restarts} if req.hold_restarts else {}),
        "uncertainty": dict(uncertainty),
        "expected": {"total_ops": ev.total_ops, "stay_ops": ev.baseline_ops,
                     "dp_optimum_ops": dp.total_ops},
        **({"batching": dict(batching)} if batching else {}),
        **({"durability_floor": dict(floor)} if floor else {}),
    }


def _plan_document(
    request: PlanRequest, *, start: datetime, step: float, horizon: int,
    provenance: dict[str, Any], current: Mapping[str, Any], steps: Any,
) -> dict[str, Any]:
    """The plan file's document (docs/plan-file.md), before :func:`plan_from_dict` checks it."""
    return {
        "schema_version": 1,
        "kind": "kairos-plan", "cluster": request.cluster, "engine": request.engine,
        "created_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "horizon": {"start": start.isoformat(), "step_seconds": step, "steps": horizon},
        "provenance": provenance,
        "availability": {"consistency_level": request.cl.upper(),
                         "tolerated_failures": request.tolerate, "aggressive": request.aggressive},
        "current_config": dict(current),
        "steps": steps,
    }


def _advice(request: PlanRequest, *, fc: Forecast, best_capacity: np.ndarray, nodes: int,
            step: float, horizon: int, current: Mapping[str, Any],
            curve: memory_advice.MeasuredCurve | None) -> dict[str, Any]:
    """What the plan advises beside its steps: capacity (always) and, from a measured memory
    curve, the memory split under the forecast's mean mix."""
    out: dict[str, Any] = {"capacity_advice": cap_advice.advise(
        timestamps=fc.timestamps[:horizon], load_upper=fc.load_upper[:horizon],
        best_capacity=best_capacity, nodes=nodes, min_nodes=min(request.rf, nodes),
        step_seconds=step, margin=request.capacity_margin,
        scale_in_after_seconds=request.scale_in_after_seconds,
    ).to_dict()}
    if curve is not None:
        out["memory_split"] = memory_advice.advise(curve, current=current, mix={
            c: float(np.mean(v[:horizon])) for c, v in fc.mix_mean.items()})
    return out


def _memory_curve(request: PlanRequest) -> memory_advice.MeasuredCurve | None:
    if request.memory_curve is None:
        return None
    curve = memory_advice.load_curve(request.memory_curve)
    if curve.engine != request.engine:
        raise ValidationError(f"--memory-curve: {request.memory_curve} measures "
                              f"{curve.engine}'s {curve.parameter}; the plan is for "
                              f"{request.engine}")
    return curve


def _table_forecast(name: str, given: Forecast | PathLike, fc: Forecast, horizon: int,
                    flag: str = "--table-forecast") -> Forecast:
    """Table (or, with ``flag`` ``--node-forecast``, host) ``name``'s forecast, read and
    checked against the plan's forecast.

    Raises
    ------
    ValidationError
        ``<flag> <name>=<file>: <problem>``.
    """
    from planner.forecast.forecaster import load_forecast

    if isinstance(given, str | os.PathLike):
        where = f"{flag} {name}={os.fspath(given)}"
        try:
            tf = load_forecast(os.fspath(given))
        except ValidationError as exc:
            raise ValidationError(f"{where}: {exc}") from None
    else:
        where, tf = f"{flag} {name}=<in-process>", given
    problem = None
    if tf.engine != fc.engine:
        problem = f"is a {tf.engine} forecast, the plan's is {fc.engine}"
    elif tf.step_seconds != fc.step_seconds:
        problem = (f"has {tf.step_seconds:g}-s steps, the plan's forecast "
                   f"{fc.step_seconds:g}-s ones")
    elif float(tf.timestamps[0]) != float(fc.timestamps[0]):
        problem = (f"starts at {float(tf.timestamps[0]):.0f}, the plan's forecast at "
                   f"{float(fc.timestamps[0]):.0f} (epoch seconds): forecast both from the "
                   "same time")
    elif tf.horizon < horizon:
        problem = f"covers {tf.horizon} steps, the plan's horizon {horizon}"
    if problem is not None:
        raise ValidationError(f"{where}: {problem}")
    return tf


def _mix_of(f: Forecast, perf: PerformanceModel, horizon: int) -> np.ndarray:
    """``(horizon, C)`` forecast mix in the model's class order."""
    return np.stack([np.asarray(f.mix_mean[c], dtype=float)[:horizon] for c in perf.classes],
                    axis=1)


def _table_workloads(req: PlanRequest, fc: Forecast, perf: PerformanceModel,
                     horizon: int) -> tuple[dict[str, TableWorkload], TableWorkload | None]:
    """Each table's forecast load and mix over the horizon, and the rest of the forecast's
    load (its operations per class less the tables'; None when the tables hold it all)."""
    def mix_of(f: Forecast) -> np.ndarray:
        return _mix_of(f, perf, horizon)

    tables = {}
    for name, given in (req.table_forecasts or {}).items():
        tf = _table_forecast(name, given, fc, horizon)
        tables[name] = TableWorkload(np.asarray(tf.load_mean, dtype=float)[:horizon], mix_of(tf))
    total = np.asarray(fc.load_mean, dtype=float)[:horizon, None] * mix_of(fc)
    ops = np.clip(total - sum(w.load[:, None] * w.mix for w in tables.values()), 0.0, None)
    load = ops.sum(axis=1)
    if not np.any(load > 1e-6 * np.maximum(total.sum(axis=1), 1.0)):
        return tables, None
    mix = np.where(load[:, None] > 0, ops / np.where(load > 0, load, 1.0)[:, None], mix_of(fc))
    return tables, TableWorkload(load, mix)


def _node_workloads(req: PlanRequest, fc: Forecast, perf: PerformanceModel, horizon: int,
                    hosts: Sequence[str]) -> tuple[dict[str, NodeWorkload], tuple[str, ...]]:
    """Every host's forecast load and mix over the horizon (in ring order), and the hosts
    without a forecast of their own: each of those takes an even part of the forecast's
    operations the others leave, in their mix (the plan's mix when they leave none).

    Raises
    ------
    ValidationError
        ``--node-forecast <host>=<file>: <problem>``, a host not among the plan's included.
    """
    given = dict(req.node_forecasts or {})
    replicas = _replicas(req, hosts)
    hosts = [h for h in hosts if h not in replicas]
    for host, item in given.items():
        where = os.fspath(item) if isinstance(item, str | os.PathLike) else "<in-process>"
        if host in replicas:
            raise ValidationError(f"--node-forecast {host}={where}: {host} is a replica of "
                                  f"{replicas[host]} (--replica-of): it runs its primary's "
                                  "values and has no forecast of its own")
        if host not in hosts:
            raise ValidationError(f"--node-forecast {host}={where}: {host!r} is not one of the "
                                  f"plan's hosts ({', '.join(hosts)}; --hosts or --ring)")
    nodes = {}
    for host, item in given.items():
        nf = _table_forecast(host, item, fc, horizon, flag="--node-forecast")
        nodes[host] = NodeWorkload(np.asarray(nf.load_mean, dtype=float)[:horizon],
                                   _mix_of(nf, perf, horizon))
    missing = tuple(h for h in hosts if h not in nodes)
    if missing:
        total = np.asarray(fc.load_mean, dtype=float)[:horizon, None] * _mix_of(fc, perf, horizon)
        ops = np.clip(total - sum(w.load[:, None] * w.mix for w in nodes.values()), 0.0, None)
        load = ops.sum(axis=1)
        mix = np.where(load[:, None] > 0, ops / np.where(load > 0, load, 1.0)[:, None],
                       _mix_of(fc, perf, horizon))
        nodes.update({h: NodeWorkload(load / len(missing), mix) for h in missing})
    return {h: nodes[h] for h in hosts}, missing


def _replicas(req: PlanRequest, hosts: Sequence[str]) -> dict[str, str]:
    """``req.replicas`` checked: Redis only, both ends among ``hosts``, a primary no
    replica."""
    replicas = dict(req.replicas or {})
    if replicas and not get_engine(req.engine).replica_roles:
        raise ValidationError(f"--replica-of: {req.engine} has no replica nodes (Redis' "
                              "replicas only)")
    for replica, primary in sorted(replicas.items()):
        for host in (replica, primary):
            if host not in hosts:
                raise ValidationError(f"--replica-of {replica}={primary}: {host!r} is not one "
                                      f"of the plan's hosts ({', '.join(hosts)})")
        if primary in replicas or primary == replica:
            raise ValidationError(f"--replica-of {replica}={primary}: {primary} is itself a "
                                  "replica; name the primary it follows")
    return replicas


def _side_workloads(
    req: PlanRequest, fc: Forecast, perf: PerformanceModel, horizon: int, hosts: Sequence[str],
) -> tuple[tuple[dict[str, TableWorkload], TableWorkload | None] | None,
           tuple[dict[str, NodeWorkload], tuple[str, ...]] | None]:
    """The tables' and the nodes' forecasts (each None when none is given), read and checked
    before the optimiser runs."""
    if req.replicas and not req.node_forecasts:
        raise ValidationError("--replica-of: says whom a replica follows in the per-node "
                              "choice; give --node-forecast for the primaries too")
    return (_table_workloads(req, fc, perf, horizon) if req.table_forecasts else None,
            _node_workloads(req, fc, perf, horizon, hosts) if req.node_forecasts else None)


def _schedule(req: PlanRequest, candidates: Sequence[Mapping[str, Any]],
              evaluation: Evaluation, horizon: int) -> list[dict[str, Any]]:
    """The optimiser's cluster-wide configuration per time point, complete."""
    space = get_space(req.engine)
    index = np.zeros(horizon, dtype=np.int64)
    for s in evaluation.switches:
        index[s.t:] = s.target
    full = [space.complete(c) for c in candidates]
    return [full[int(i)] for i in index]


#: Why a plan given node forecasts has no per-node choice at all.
NO_NODE_KEYS = ("the model has no effect for any node-level live parameter (a listpack "
                "threshold or a restart-class one takes a restart): every node runs the "
                "cluster-wide values")


def _per_node(req: PlanRequest, *, perf: PerformanceModel, configs: Sequence[Mapping[str, Any]],
              current: Mapping[str, Any], step: float,
              nodes: tuple[dict[str, NodeWorkload], tuple[str, ...]] | None,
              ) -> PerNodeChoices | None:
    """Each node's node-level live values over the optimiser's schedule
    (:func:`planner.planning.per_node.choose_per_node`); None without node forecasts or
    without a node-level live parameter the model has an effect for.

    Only the parameters the model has an effect for are chosen: on the others every value
    predicts the same, so none could pay, and their product would only slow the search."""
    if nodes is None:
        return None
    space = get_space(req.engine)
    modelled = {f.param for f in perf.features}
    keys = [k for k in node_keys(req.engine) if k in modelled]
    if not keys:
        return None
    measured = measured_values(perf)
    workloads, fixed = nodes
    choices = choose_per_node(
        model=perf, configs=configs, running=current, nodes=workloads, step_seconds=step,
        keys=keys, values={k: measured.get(k) or space[k].candidate_values or () for k in keys},
        fixed=fixed, seed=(req.optimiser.seed, 17), **_choice_rules(req),
    )
    return with_replicas(choices, req.replicas) if req.replicas else choices


def _choice_rules(req: PlanRequest) -> dict[str, Any]:
    """How the per-table and per-node choices credit served work and weigh confidence: as
    the optimiser does."""
    return {"served": req.served,
            "headroom_weight": req.headroom_weight if req.served == "work" else 0.0,
            "scenarios": req.scenarios, "confidence": req.confidence}


def _per_node_provenance(choices: PerNodeChoices, engine: str) -> dict[str, Any]:
    """The plan's ``provenance.per_node``: the rule, per node what it was given, the groups."""
    return {
        "rule": "each node's values maximise its own predicted capacity under its own "
                f"forecast mix ({capacity_rule(engine)[1]}); a live change costs nothing, "
                "so a node is overridden "
                "when the served work it adds to the others' overrides is positive (in at "
                "least the confidence of the model's draws, with scenarios)",
        "keys": list(choices.keys), "gain_ops": round(choices.gain_ops, 1),
        "nodes": {host: c.to_dict() for host, c in choices.nodes.items()},
        "groups": [g.to_dict() for g in choices.groups],
    }


def _per_table(req: PlanRequest, *, fc: Forecast, perf: PerformanceModel,
               configs: Sequence[Mapping[str, Any]], current: Mapping[str, Any],
               change_costs: ChangeCosts | None,
               workloads: tuple[dict[str, TableWorkload], TableWorkload | None] | None,
               ) -> PerTableChoices | None:
    """Each table's table-level values over the optimiser's schedule
    (:func:`planner.planning.per_table.choose_per_table`), its changes priced as the
    optimiser prices a cluster-wide one (``--compaction-seconds``, or measured); None
    without table forecasts (``workloads``)."""
    if workloads is None:
        return None
    space = get_space(req.engine)
    measured = measured_values(perf)
    seconds = {"compaction": req.compaction_seconds}

    def change_seconds(key: str, old: Any, new: Any) -> float:
        found = change_costs.seconds_for(key, old, new) if change_costs is not None else None
        return float(seconds.get(key, 0.0)) if found is None else found

    tables, rest = workloads
    return choose_per_table(
        model=perf, configs=configs, running=current, tables=tables,
        step_seconds=float(fc.step_seconds), change_seconds=change_seconds, rest=rest,
        values={k: measured.get(k) or space[k].candidate_values or () for k in
                table_keys(req.engine)},
        seed=(req.optimiser.seed, 16), **_choice_rules(req),
    )


def _per_table_provenance(choices: PerTableChoices) -> dict[str, Any]:
    """The plan's ``provenance.per_table``: the rule, and per table what it was given."""
    return {
        "rule": "each table's value maximises its own predicted capacity under its own "
                "forecast mix (cluster capacity 1 / sum_t w_t / cap_t); overridden when "
                "the served work it adds beats its change cost (the compaction change cost "
                "times its share of the load)",
        "gain_ops": round(choices.gain_ops, 1), "cost_ops": round(choices.cost_ops, 1),
        "tables": {name: c.to_dict() for name, c in choices.tables.items()},
    }


def _plan_steps(
    req: PlanRequest, decision: _Decision, per_table: PerTableChoices | None,
    per_node: PerNodeChoices | None, *,
    candidates: Sequence[Mapping[str, Any]], batches: Sequence[Sequence[str]],
    tables: Sequence[str], start: datetime, step: float, horizon: int, pcap: np.ndarray,
    pload: np.ndarray, prov: dict[str, Any], say: Progress,
) -> list[dict[str, Any]]:
    """The plan's steps: the optimiser's, with the per-table and per-node overrides
    (recorded in ``prov``) and the advised memory split's step."""
    steps = steps_from_evaluation(
        engine=req.engine, evaluation=decision.evaluation, candidates=candidates,
        batches=batches, start=start, step_seconds=step, n_steps=horizon, tables=tables,
        details=_step_details(decision.evaluation, cap=pcap, load=pload,
                              step_seconds=step, p_gain=decision.p_gain),
    )
    if per_table is not None:
        steps = with_per_table(steps, per_table, tables=[*tables, *per_table.tables],
                               start=start, step_seconds=step, n_steps=horizon)
        prov["per_table"] = _per_table_provenance(per_table)
        if "expected" in prov:  # the horizon's total includes what the tables add
            net = per_table.gain_ops - per_table.cost_ops
            prov["expected"] = {**prov["expected"], "per_table_net_ops": net,
                                "total_ops": prov["expected"]["total_ops"] + net}
        say(f"plan: per-table overrides gain {per_table.gain_ops:.4g} ops for "
            f"{per_table.cost_ops:.4g} ops of changes")
    if req.node_forecasts and per_node is None:
        prov["per_node"] = {"keys": [], "reason": NO_NODE_KEYS}
        say(f"plan: no per-node overrides: {NO_NODE_KEYS}")
    if per_node is not None:
        steps = with_per_node(steps, per_node, start=start, step_seconds=step, n_steps=horizon)
        prov["per_node"] = _per_node_provenance(per_node, req.engine)
        if "expected" in prov:  # live changes cost nothing: the gain is the net
            prov["expected"] = {**prov["expected"], "per_node_net_ops": per_node.gain_ops,
                                "total_ops": prov["expected"]["total_ops"] + per_node.gain_ops}
        say(f"plan: per-node overrides gain {per_node.gain_ops:.4g} ops")
    return with_split_step(steps, prov.get("memory_split"), start=start, step_seconds=step,
                           horizon=horizon, capacity=pcap[:, 0], load=pload)


def make_plan(request: PlanRequest, *, progress: Progress | None = None) -> PlanResult:
    """Make a plan: forecast -> performance model -> cost/benefit -> optimiser -> plan.

    Parameters
    ----------
    request
        What to plan for (see :class:`PlanRequest`).
    progress
        Called with one-line progress messages (forecasting, batches, GA generations);
        ``kairos plan`` prints them to stderr.

    Returns
    -------
    PlanResult
        The validated plan (not written), the optimiser's evaluation and the DP optimum.

    Raises
    ------
    planner.errors.ValidationError
        Naming the input (``--tables``, ``--model``, ``forecast``, ...) and why.

    Examples
    --------
    In-process, as the autopilot re-plans on the live ring::

        from planner.plan import save_plan
        from planner.planning.pipeline import OptimiserOptions, PlanRequest, make_plan

        result = make_plan(PlanRequest(
            forecast="state/forecast.json", ring="state/ring.json",  # or loaded objects
            engine="cassandra", cluster="lab", cl="QUORUM", horizon=48,
            restart_seconds_from="state", tables=("shop.orders",),
            optimiser=OptimiserOptions(seed=0)))
        save_plan(result.plan, "state/plan.yml", known_hosts=result.hosts)
        print(result.summary())
    """
    say: Progress = progress or (lambda _msg: None)
    tables = _check_request(request)
    curve = _memory_curve(request)  # read before anything is planned
    current = _current(request)
    perf, model_file = _model(request)
    candidates, floor = _search_space(request, current, tables, perf, say)
    fc, source = _forecast(request, say)
    cap, loads, horizon = _capacities(request, fc, perf, candidates)
    batches, hosts, batching = _batches(request, say)
    workloads, nodes = _side_workloads(request, fc, perf, horizon, hosts)
    step = float(fc.step_seconds)
    restarts = _restarts(request)
    say(f"plan: T_r {restarts.seconds:g} s ({restarts.source})")
    impact, change_costs = _impact(request), _change_costs(request)  # each file read once
    p99 = _p99(request, fc, perf, candidates, horizon)
    costs = _switch_costs(request, candidates, batches, step, restarts, impact, p99, change_costs)
    decision = _decide(request, fc=fc, perf=perf, candidates=candidates, costs=costs,
                       cap=cap, loads=loads, horizon=horizon, say=say)
    start = datetime.fromtimestamp(float(fc.timestamps[0]), tz=UTC)
    pcap, pload = (cap.mean(axis=0), loads.mean(axis=0)) if cap.ndim == 3 else (cap, loads)
    prov = _provenance(
        request, fc=fc, source=source, perf=perf, model_file=model_file,
        decision=decision, n_batches=len(batches), restarts=restarts, impact=impact, floor=floor,
        uncertainty=_uncertainty(request, decision, perf=perf, fc=fc, candidates=candidates,
                                 start=start, step=step),
        utilisation=pload / pcap[:, 0], batching=batching, p99=p99, change_costs=change_costs,
    )
    prov.update(_advice(request, fc=fc, best_capacity=pcap.max(axis=1), nodes=len(hosts),
                        step=step, horizon=horizon, current=current, curve=curve))
    configs = _schedule(request, candidates, decision.evaluation, horizon)
    per_table = _per_table(request, fc=fc, perf=perf, configs=configs, current=current,
                           change_costs=change_costs, workloads=workloads)
    per_node = _per_node(request, perf=perf, configs=configs, current=current, step=step,
                         nodes=nodes)
    steps = _plan_steps(request, decision, per_table, per_node, candidates=candidates,
                        batches=batches, tables=tables, start=start, step=step,
                        horizon=horizon, pcap=pcap, pload=pload, prov=prov, say=say)
    doc = _plan_document(request, start=start, step=step, horizon=horizon, provenance=prov,
                         current=current, steps=steps)
    return PlanResult(
        plan=plan_from_dict(doc, known_hosts=hosts), evaluation=decision.evaluation,
        dp=decision.solution.dp, forecast=fc, hosts=hosts, batches=tuple(batches),
        p_gain=decision.p_gain, dropped=decision.dropped, per_table=per_table, per_node=per_node,
    )

