"""Build planning problems from workloads, and replay a trace under plans and baselines.

:func:`restart_matrix`, :func:`capacity_matrix` and :func:`make_problem` turn a
configuration space, a performance model and a (forecast) workload into the arrays of
:class:`planner.costbenefit.PlanningProblem`.

:func:`simulate` replays a workload trace (the truth) the way Kairos would run it: every
``replan_every`` intervals it forecasts the next ``horizon`` intervals from the history
seen so far, plans with the optimiser, and carries out the plan until the next replan
(a restart still in progress is carried over). The realised schedule is then valued
on the *true* workload, as are SOPHIA's baselines:

* default -- stay in the initial (default) configuration;
* static-optimal -- the one candidate best over the whole replayed period, known in
  advance and in place from the start (idealised, as in SOPHIA);
* naive -- at each interval switch to the candidate best for the workload observed in
  the previous interval, restarting all nodes at once (one batch);
* theoretical best -- the best candidate in every interval at no cost (upper bound);
* oracle (optional) -- Kairos with a perfect forecast (SOPHIA with Oracle).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from planner.costbenefit import (
    Evaluation,
    PlanningProblem,
    ReconfigModel,
    Served,
    evaluate,
    lockout_matrix,
    served_matrix,
    transition_costs,
)
from planner.errors import ValidationError
from planner.optimiser import (
    GAOptions,
    baseline_default,
    baseline_naive,
    baseline_static_optimal,
    baseline_theoretical_best,
    solve_dp,
    solve_ga,
)

__all__ = [
    "Forecaster",
    "SimulationResult",
    "StrategyResult",
    "capacity_matrix",
    "make_problem",
    "model_forecaster",
    "oracle_forecaster",
    "persistence_forecaster",
    "restart_matrix",
    "simulate",
]

#: ``forecaster(load_history (n,), mix_history (n, C), timestamps (n,), horizon)`` ->
#: ``(load (H,), mix (H, C))`` point forecasts.
Forecaster = Callable[[np.ndarray, np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]
CapacityFn = Callable[[np.ndarray], np.ndarray]
#: Fewest intervals between two deviation-triggered replans.
MIN_REPLAN_GAP = 2


# ------------------------------------------------------------------ building
def restart_matrix(engine: str, candidates: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """``(K, K)`` bool: does going from candidate ``a`` to ``b`` need a restart?

    Uses ``planner.spaces.change_kind`` per changed parameter (per-transition rules
    such as a live row-cache resize included).
    """
    from planner.spaces import change_kind, get_space

    space = get_space(engine)
    full = [space.complete(c) for c in candidates]
    n = len(full)
    out = np.zeros((n, n), dtype=bool)
    for a in range(n):
        for b in range(n):
            if a != b:
                out[a, b] = any(
                    change_kind(engine, k, full[a][k], full[b][k]) == "restart"
                    for k in space.changed_keys(full[a], full[b])
                )
    return out


#: Seconds of full throughput a change of these parameters costs on top of any restart:
#: switching the compaction strategy makes every node rewrite all its SSTables (SOPHIA:
#: the most expensive change). An assumption until the executor measures it.
DEFAULT_CHANGE_SECONDS: dict[str, float] = {"compaction": 120.0}


def change_seconds_matrix(
    engine: str,
    candidates: Sequence[Mapping[str, Any]],
    seconds: Mapping[str, float] | None = None,
) -> np.ndarray:
    """``(K, K)`` extra cost (seconds of full throughput) of each candidate switch.

    The sum over changed parameters of ``seconds[param]`` (default
    :data:`DEFAULT_CHANGE_SECONDS`).
    """
    from planner.spaces import get_space

    per = DEFAULT_CHANGE_SECONDS if seconds is None else dict(seconds)
    space = get_space(engine)
    full = [space.complete(c) for c in candidates]
    n = len(full)
    out = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a != b:
                out[a, b] = sum(
                    per.get(k, 0.0) for k in space.changed_keys(full[a], full[b])
                )
    return out


def capacity_matrix(
    model: Any, mixes: np.ndarray, candidates: Sequence[Mapping[str, Any]]
) -> np.ndarray:
    """``(T, K)`` predicted cluster capacity for mix rows (engine class order)."""
    m = np.asarray(mixes, dtype=float)
    classes = model.classes
    rows = [dict(zip(classes, r.tolist(), strict=True)) for r in m / m.sum(axis=1, keepdims=True)]
    mean, _std = model.predict_matrix(rows, list(candidates))
    return np.asarray(mean, dtype=float)


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
) -> PlanningProblem:
    """A planning problem from capacities (or ``(S, T, K)`` sample capacities).

    With samples (and optionally ``(S, T)`` loads) the served throughput and the costs
    are averaged over them: the plan then maximises the expected total.
    """
    cap = np.asarray(capacity, dtype=float)
    if cap.ndim == 2:
        cap = cap[None]
    ld = None if load is None else np.asarray(load, dtype=float)
    if ld is not None and ld.ndim == 1:
        ld = np.broadcast_to(ld, cap.shape[:2])
    srv = np.zeros(cap.shape[1:])
    cst = np.zeros((cap.shape[1], cap.shape[2], cap.shape[2]))
    for s in range(cap.shape[0]):
        ls = None if ld is None else ld[s]
        srv += served_matrix(cap[s], load=ls, served=served)
        cst += transition_costs(
            cap[s], restart=restart, model=reconfig, step_seconds=step_seconds,
            load=ls, served=served, change_seconds=change_seconds,
        )
    n = cap.shape[0]
    return PlanningProblem(
        served=srv / n,
        costs=cst / n,
        lockout=lockout_matrix(restart, model=reconfig, step_seconds=step_seconds),
        step_seconds=step_seconds,
        initial=initial,
        initial_lockout=initial_lockout,
    )


# --------------------------------------------------------------- forecasters
def oracle_forecaster(load: np.ndarray, mix: np.ndarray) -> Forecaster:
    """A perfect forecaster for a known trace (SOPHIA's HPC queue, 'SOPHIA with Oracle')."""

    def fc(lh: np.ndarray, mh: np.ndarray, ts: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(lh)
        return load[n : n + h], mix[n : n + h]

    return fc


def persistence_forecaster() -> Forecaster:
    """The last observed interval repeated (a reference, not a real forecaster)."""

    def fc(lh: np.ndarray, mh: np.ndarray, ts: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
        return np.repeat(lh[-1:], h), np.repeat(mh[-1:], h, axis=0)

    return fc


def model_forecaster(
    *,
    engine: str,
    step_seconds: float,
    model: str = "auto",
    season_length: int | None = None,
    history: int | None = None,
) -> Forecaster:
    """Part 1's forecaster (``planner.forecast.forecast``) on the last ``history`` points."""
    from planner.forecast import forecast
    from planner.workload import WorkloadSeries, classes_for

    classes = classes_for(engine)

    def fc(lh: np.ndarray, mh: np.ndarray, ts: np.ndarray, h: int) -> tuple[np.ndarray, np.ndarray]:
        k = len(lh) if history is None else min(len(lh), history)
        series = WorkloadSeries(
            engine=engine,
            timestamps=ts[-k:],
            load=lh[-k:],
            mix={c: mh[-k:, i] for i, c in enumerate(classes)},
            step_seconds=step_seconds,
        )
        out = forecast(series, horizon=h, model=model, season_length=season_length)
        mix_mean = out.mix_mean
        if isinstance(mix_mean, Mapping):
            mix = np.stack([np.asarray(mix_mean[c], dtype=float) for c in classes], axis=1)
        else:
            mix = np.asarray(mix_mean, dtype=float)
        mix = np.clip(mix, 1e-9, None)
        return np.asarray(out.load_mean, dtype=float), mix / mix.sum(axis=1, keepdims=True)

    return fc


# ----------------------------------------------------------------- simulate
@dataclass(frozen=True)
class StrategyResult:
    """One strategy's outcome on the true workload."""

    name: str
    total_ops: float
    switches: int
    cost_ops: float
    evaluation: Evaluation | None = None


@dataclass(frozen=True)
class SimulationResult:
    """Totals per strategy over the replayed period, and Kairos's per-step gains."""

    strategies: Mapping[str, StrategyResult]
    start: int
    steps: int
    step_seconds: float
    kairos_steps: tuple[dict[str, Any], ...] = field(default=())
    replans: int = 0

    def gain(self, name: str, over: str) -> float:
        """Relative gain of strategy ``name`` over ``over`` (0.05 = 5% more operations)."""
        base = self.strategies[over].total_ops
        return self.strategies[name].total_ops / base - 1.0 if base else 0.0


def _run_kairos(
    truth: PlanningProblem,
    *,
    load: np.ndarray,
    mix: np.ndarray,
    timestamps: np.ndarray,
    start: int,
    capacity_fn: CapacityFn,
    restart: np.ndarray,
    reconfig: ReconfigModel,
    step_seconds: float,
    served: Served,
    change_seconds: np.ndarray | None,
    horizon: int,
    replan_every: int,
    forecaster: Forecaster,
    method: Literal["ga", "dp"],
    ga: GAOptions,
    min_gain: float,
    deviation: float | None,
    progress: Callable[[str], None] | None,
) -> tuple[np.ndarray, int]:
    n_t = truth.n_steps + start
    sched = np.empty(truth.n_steps, dtype=np.int64)
    cur = truth.initial
    busy = 0  # absolute interval index before which no switch may start
    lock = truth.lockout
    tau = start
    replans = 0
    while tau < n_t:
        h = min(horizon, n_t - tau)
        fl, fm = forecaster(load[:tau], mix[:tau], timestamps[:tau], h)
        fl, fm = np.asarray(fl, dtype=float)[:h], np.asarray(fm, dtype=float)[:h]
        cap = capacity_fn(fm)
        prob = make_problem(
            cap, restart=restart, reconfig=reconfig, step_seconds=step_seconds,
            load=fl if served == "offered" else None, served=served, initial=cur,
            initial_lockout=max(0, busy - tau), change_seconds=change_seconds,
        )
        ev = solve_dp(prob) if method == "dp" else solve_ga(prob, options=ga).evaluation
        replans += 1
        plan = ev.schedule
        if ev.switches and ev.net_ops < min_gain * ev.baseline_ops:
            plan = np.full(h, cur)  # not worth the risk: stay put
        stop = min(tau + replan_every, n_t)
        t = tau
        while t < stop:
            want = int(plan[t - tau])
            if want != cur and t >= busy:
                busy = t + int(lock[cur, want])
                cur = want
            sched[t - start] = cur
            t += 1
            # SOPHIA re-invokes the optimiser when the workload departs from the forecast
            # (rate limited: at most once every MIN_REPLAN_GAP intervals)
            if (
                deviation is not None
                and t < stop
                and t - tau >= MIN_REPLAN_GAP
                and 0.5 * float(np.abs(mix[t - 1] - fm[t - 1 - tau]).sum()) > deviation
            ):
                break
        tau = t
        if progress is not None:
            progress(f"simulate: interval {tau}/{n_t} ({replans} plans)")
    return sched, replans


def simulate(
    *,
    load: np.ndarray,
    mix: np.ndarray,
    timestamps: np.ndarray,
    step_seconds: float,
    capacity_fn: CapacityFn,
    restart: np.ndarray,
    reconfig: ReconfigModel,
    forecaster: Forecaster,
    start: int,
    horizon: int,
    replan_every: int,
    served: Served = "capacity",
    initial: int = 0,
    method: Literal["ga", "dp"] = "ga",
    ga: GAOptions | None = None,
    min_gain: float = 0.0,
    oracle: bool = False,
    change_seconds: np.ndarray | None = None,
    deviation: float | None = 0.2,
    progress: Callable[[str], None] | None = None,
) -> SimulationResult:
    """Replay a trace under Kairos and the baselines (see the module docstring).

    Parameters
    ----------
    load, mix, timestamps
        The true workload: ``(T,)`` ops/s, ``(T, C)`` class fractions, epoch seconds.
    step_seconds
        Interval length.
    capacity_fn
        ``mix (n, C) -> capacity (n, K)``: the performance model over the candidates.
    restart
        ``(K, K)`` restart-needed matrix of the candidates.
    reconfig
        Kairos's cost model (safe batches). Naive uses one batch of all nodes.
    forecaster
        See :data:`Forecaster`; sees only the history before each replan.
    start
        First replayed interval (the history before it warms up the forecaster).
    horizon, replan_every
        Look-ahead and replanning period, in intervals.
    served
        ``"capacity"`` (SOPHIA) or ``"offered"`` (min(load, capacity)).
    initial
        Candidate index running at ``start`` (the default configuration).
    method, ga
        Optimiser for Kairos's plans.
    min_gain
        A plan is followed only if its expected net gain exceeds this fraction of the
        expected baseline (0 = any positive gain).
    oracle
        Also run Kairos with a perfect forecast.
    change_seconds
        ``(K, K)`` extra cost of a change however applied (see ``transition_costs``).
    deviation
        Replan early when the observed mix departs from the forecast by more than this
        total-variation distance (None: only every ``replan_every`` intervals).
    """
    ld = np.asarray(load, dtype=float)
    mx = np.asarray(mix, dtype=float)
    ts = np.asarray(timestamps, dtype=float)
    n_t = len(ld)
    if mx.shape[0] != n_t or ts.shape != (n_t,):
        raise ValidationError("load, mix and timestamps: must have the same length")
    if not 1 <= start < n_t:
        raise ValidationError(f"start: must be in [1, {n_t - 1}], got {start}")
    if horizon < 1 or replan_every < 1:
        raise ValidationError("horizon and replan_every: must be >= 1")
    ga_opts = ga or GAOptions()
    cap_true = capacity_fn(mx)
    kw: dict[str, Any] = {
        "restart": restart, "step_seconds": step_seconds, "served": served, "initial": initial,
        "load": ld[start:] if served == "offered" else None, "change_seconds": change_seconds,
    }
    truth = make_problem(cap_true[start:], reconfig=reconfig, **kw)
    naive_model = ReconfigModel(
        restart_seconds=reconfig.restart_seconds, batch_fractions=(1.0,),
        survivor_penalty=0.0, live_seconds=reconfig.live_seconds,
    )
    truth_naive = make_problem(cap_true[start:], reconfig=naive_model, **kw)
    served_true = served_matrix(cap_true, load=ld, served=served)
    wishes = np.argmax(served_true[start - 1 : n_t - 1], axis=1)

    out: dict[str, StrategyResult] = {}

    def record(name: str, ev: Evaluation) -> None:
        out[name] = StrategyResult(
            name=name, total_ops=ev.total_ops, switches=len(ev.switches), cost_ops=ev.cost_ops,
            evaluation=ev,
        )

    common: dict[str, Any] = {
        "load": ld, "mix": mx, "timestamps": ts, "start": start, "capacity_fn": capacity_fn,
        "restart": restart, "reconfig": reconfig, "step_seconds": step_seconds, "served": served,
        "change_seconds": change_seconds, "horizon": horizon, "replan_every": replan_every,
        "method": method, "ga": ga_opts,
        "min_gain": min_gain, "deviation": deviation, "progress": progress,
    }
    sched, replans = _run_kairos(truth, forecaster=forecaster, **common)
    record("kairos", evaluate(truth, sched))
    if oracle:
        orc = oracle_forecaster(ld, mx)
        record("oracle", evaluate(truth, _run_kairos(truth, forecaster=orc, **common)[0]))
    record("default", baseline_default(truth))
    record("static_optimal", baseline_static_optimal(truth))
    record("naive", baseline_naive(truth_naive, wishes=wishes))
    best = baseline_theoretical_best(truth)
    out["theoretical_best"] = StrategyResult(
        name="theoretical_best", total_ops=best, switches=0, cost_ops=0.0
    )
    kev = out["kairos"].evaluation
    steps = tuple(
        {
            "t": start + s.t,
            "time": float(ts[start + s.t]),
            "from": s.source,
            "to": s.target,
            "benefit_ops": s.benefit_ops,
            "cost_ops": s.cost_ops,
            "net_ops": s.net_ops,
        }
        for s in (kev.switches if kev is not None else ())
    )
    return SimulationResult(
        strategies=out, start=start, steps=n_t - start, step_seconds=step_seconds,
        kairos_steps=steps, replans=replans,
    )
