"""Replay a trace under Kairos's plans and SOPHIA's baselines, and the forecasters it uses.

:func:`restart_matrix`, :func:`capacity_matrix`, :func:`change_seconds_matrix` and
:func:`make_problem` live in :mod:`planner.planning.pipeline` (the planning pipeline) and are
re-exported here for the callers that build problems from this module.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from planner.errors import ValidationError
from planner.planning.costbenefit import (
    Evaluation,
    PlanningProblem,
    ReconfigModel,
    Served,
    evaluate,
    served_matrix,
)
from planner.planning.optimiser import (
    GAOptions,
    baseline_default,
    baseline_naive,
    baseline_static_optimal,
    baseline_theoretical_best,
)
from planner.planning.pipeline import (
    DEFAULT_CHANGE_SECONDS,
    SwitchCosts,
    capacity_matrix,
    change_seconds_matrix,
    make_problem,
    optimise,
    restart_matrix,
)

__all__ = [
    "DEFAULT_CHANGE_SECONDS",
    "Forecaster",
    "SimulationResult",
    "StrategyResult",
    "capacity_matrix",
    "change_seconds_matrix",
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
    """Part 1's forecaster (``planner.forecast.forecaster.forecast``) on the last ``history``
    points."""
    from planner.forecast.forecaster import forecast
    from planner.workload.series import WorkloadSeries, classes_for

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


@dataclass(frozen=True)
class _Replay:
    """How Kairos replans during a replay: the true workload and what every replan shares."""

    load: np.ndarray
    mix: np.ndarray
    timestamps: np.ndarray
    start: int
    capacity_fn: CapacityFn
    costs: SwitchCosts
    horizon: int
    replan_every: int
    method: Literal["ga", "dp"]
    ga: GAOptions
    min_gain: float
    deviation: float | None
    progress: Callable[[str], None] | None

    def run(self, truth: PlanningProblem, forecaster: Forecaster) -> tuple[np.ndarray, int]:
        """Kairos's realised schedule over the replayed intervals, and how many plans it made.

        Each replan runs the planning pipeline on what was seen so far: the forecaster, the
        capacity function (the performance model), :class:`planner.planning.pipeline.SwitchCosts`
        and :func:`planner.planning.pipeline.optimise` -- as ``kairos plan`` does, without the DP
        comparison.
        """
        start = self.start
        n_t = truth.n_steps + start
        sched = np.empty(truth.n_steps, dtype=np.int64)
        cur = truth.initial
        busy = 0  # absolute interval index before which no switch may start
        tau = start
        replans = 0
        while tau < n_t:
            h = min(self.horizon, n_t - tau)
            fl, fm = forecaster(self.load[:tau], self.mix[:tau], self.timestamps[:tau], h)
            fl, fm = np.asarray(fl, dtype=float)[:h], np.asarray(fm, dtype=float)[:h]
            prob = self.costs.problem(
                self.capacity_fn(fm), load=fl, initial=cur, initial_lockout=max(0, busy - tau)
            )
            ev = optimise(prob, method=self.method, ga=self.ga, compare_dp=False).evaluation
            replans += 1
            plan = ev.schedule
            if ev.switches and ev.net_ops < self.min_gain * ev.baseline_ops:
                plan = np.full(h, cur)  # not worth the risk: stay put
            tau, cur, busy = _follow(
                plan, sched, mix=self.mix, forecast_mix=fm, tau=tau,
                stop=min(tau + self.replan_every, n_t), start=start, cur=cur, busy=busy,
                lockout=truth.lockout, deviation=self.deviation,
            )
            if self.progress is not None:
                self.progress(f"simulate: interval {tau}/{n_t} ({replans} plans)")
        return sched, replans

    def strategies(
        self, truth: PlanningProblem, forecaster: Forecaster, *, oracle: bool
    ) -> tuple[dict[str, StrategyResult], int]:
        """Kairos (and, with ``oracle``, Kairos with a perfect forecast) on the truth."""
        sched, replans = self.run(truth, forecaster)
        out = {"kairos": _strategy("kairos", evaluate(truth, sched))}
        if oracle:
            perfect = self.run(truth, oracle_forecaster(self.load, self.mix))[0]
            out["oracle"] = _strategy("oracle", evaluate(truth, perfect))
        return out, replans


def _follow(
    plan: np.ndarray,
    sched: np.ndarray,
    *,
    mix: np.ndarray,
    forecast_mix: np.ndarray,
    tau: int,
    stop: int,
    start: int,
    cur: int,
    busy: int,
    lockout: np.ndarray,
    deviation: float | None,
) -> tuple[int, int, int]:
    """Carry out ``plan`` (made at ``tau``) into ``sched`` until ``stop`` or a deviation.

    Returns the interval reached, the candidate then running and the end of its lockout.
    """
    t = tau
    while t < stop:
        want = int(plan[t - tau])
        if want != cur and t >= busy:
            busy = t + int(lockout[cur, want])
            cur = want
        sched[t - start] = cur
        t += 1
        # SOPHIA re-invokes the optimiser when the workload departs from the forecast
        # (rate limited: at most once every MIN_REPLAN_GAP intervals)
        if (
            deviation is not None
            and t < stop
            and t - tau >= MIN_REPLAN_GAP
            and 0.5 * float(np.abs(mix[t - 1] - forecast_mix[t - 1 - tau]).sum()) > deviation
        ):
            break
    return t, cur, busy


def _check_trace(
    load: np.ndarray,
    mix: np.ndarray,
    timestamps: np.ndarray,
    *,
    start: int,
    horizon: int,
    replan_every: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The true workload as float arrays, refused when the lengths or the window disagree."""
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
    return ld, mx, ts


def _strategy(name: str, ev: Evaluation) -> StrategyResult:
    return StrategyResult(
        name=name, total_ops=ev.total_ops, switches=len(ev.switches), cost_ops=ev.cost_ops,
        evaluation=ev,
    )


def _baselines(
    truth: PlanningProblem, *, costs: SwitchCosts, capacity: np.ndarray, load: np.ndarray,
    start: int,
) -> dict[str, StrategyResult]:
    """SOPHIA's baselines valued on the true workload (``capacity`` and ``load`` from 0)."""
    reconfig = costs.reconfig
    # naive restarts all nodes in one batch (no survivors to penalise), each interval
    # switching to the candidate best for the workload of the interval before
    naive = ReconfigModel(
        restart_seconds=reconfig.restart_seconds, batch_fractions=(1.0,),
        survivor_penalty=0.0, live_seconds=reconfig.live_seconds,
    )
    truth_naive = replace(costs, reconfig=naive).problem(
        capacity[start:], load=load[start:], initial=truth.initial
    )
    served = served_matrix(capacity, load=load, served=costs.served)
    wishes = np.argmax(served[start - 1 : len(load) - 1], axis=1)
    out = {
        "default": _strategy("default", baseline_default(truth)),
        "static_optimal": _strategy("static_optimal", baseline_static_optimal(truth)),
        "naive": _strategy("naive", baseline_naive(truth_naive, wishes=wishes)),
    }
    out["theoretical_best"] = StrategyResult(
        name="theoretical_best", total_ops=baseline_theoretical_best(truth), switches=0,
        cost_ops=0.0,
    )
    return out


def _kairos_steps(
    ev: Evaluation | None, *, start: int, timestamps: np.ndarray
) -> tuple[dict[str, Any], ...]:
    """Kairos's switches with their replayed interval, time and expected gains."""
    return tuple(
        {
            "t": start + s.t,
            "time": float(timestamps[start + s.t]),
            "from": s.source,
            "to": s.target,
            "benefit_ops": s.benefit_ops,
            "cost_ops": s.cost_ops,
            "net_ops": s.net_ops,
        }
        for s in (ev.switches if ev is not None else ())
    )


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
    load, mix, timestamps, step_seconds
        The true workload: ``(T,)`` ops/s, ``(T, C)`` class fractions, epoch seconds;
        the interval length.
    capacity_fn
        ``mix (n, C) -> capacity (n, K)``: the performance model over the candidates.
    restart, change_seconds
        ``(K, K)`` restart-needed matrix of the candidates, and the extra cost of a change
        however applied (see ``transition_costs``).
    reconfig
        Kairos's cost model (safe batches). Naive uses one batch of all nodes.
    forecaster
        See :data:`Forecaster`; sees only the history before each replan.
    start
        First replayed interval (the history before it warms up the forecaster).
    horizon, replan_every
        Look-ahead and replanning period, in intervals.
    served, initial
        ``"capacity"`` (SOPHIA) or ``"offered"`` (min(load, capacity)); the candidate
        running at ``start`` (the default configuration).
    method, ga
        Optimiser for Kairos's plans.
    min_gain
        A plan is followed only if its expected net gain exceeds this fraction of the
        expected baseline (0 = any positive gain).
    oracle
        Also run Kairos with a perfect forecast.
    deviation
        Replan early when the observed mix departs from the forecast by more than this
        total-variation distance (None: only every ``replan_every`` intervals).
    """
    ld, mx, ts = _check_trace(
        load, mix, timestamps, start=start, horizon=horizon, replan_every=replan_every
    )
    costs = SwitchCosts(
        restart=restart, reconfig=reconfig, step_seconds=step_seconds, served=served,
        change_seconds=change_seconds,
    )
    cap_true = capacity_fn(mx)
    truth = costs.problem(cap_true[start:], load=ld[start:], initial=initial)
    replay = _Replay(
        load=ld, mix=mx, timestamps=ts, start=start, capacity_fn=capacity_fn, costs=costs,
        horizon=horizon, replan_every=replan_every, method=method, ga=ga or GAOptions(),
        min_gain=min_gain, deviation=deviation, progress=progress,
    )
    out, replans = replay.strategies(truth, forecaster, oracle=oracle)
    out |= _baselines(truth, costs=costs, capacity=cap_true, load=ld, start=start)
    return SimulationResult(
        strategies=out, start=start, steps=len(ld) - start, step_seconds=step_seconds,
        kairos_steps=_kairos_steps(out["kairos"].evaluation, start=start, timestamps=ts),
        replans=replans,
    )
