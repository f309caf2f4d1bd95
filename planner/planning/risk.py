"""Uncertainty in the plan: joint scenarios, risk-adjusted problems and P(gain > cost).

A *scenario* is one plausible world over the horizon: a forecast sample path (load and
mix, :meth:`planner.forecast.forecaster.Forecast.sample_paths`) together with one draw of the
performance model's coefficients
(:meth:`planner.model.performance.PerformanceModel.sample_capacity`).
Priced like the point problem, each scenario gives its own credited throughput
``served[s, t, k]`` and switch costs ``costs[s, t, a, b]`` (:class:`Scenarios`).

From them:

* :func:`step_probabilities` -- for each step of a plan, the share of scenarios in which
  the plan is worth more with the step than without it: P(gain > cost);
* :func:`enforce_confidence` -- the confidence rule: a step whose P is below the
  operator's confidence is dropped (the configuration before it is kept), one at a time,
  lowest first, until every remaining step reaches it;
* risk-adjusted problems the optimisers (GA and DP) search unchanged, because each stays
  a sum over intervals: :func:`quantile_problem` (each candidate at the lower quantile of
  its capacity relative to the running one, under the model's uncertainty) and
  :func:`endure_problem` (ENDURE's robust tuning, seeds/003: the credit under the worst
  mix in a neighbourhood of the expected mix, with the load at its lower bound). The
  neighbourhood is the forecast's own interval box (``endure``, :func:`worst_case_capacity`)
  or, as ENDURE defines it, the KL-divergence ball of radius rho the history's own forecast
  errors stayed in (``endure-kl``, :func:`kl_worst_case_capacity`).

docs/planning.md ("Uncertainty") argues the choice with bench/risk.py's comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal, Protocol

import numpy as np

from planner.errors import ValidationError
from planner.planning.costbenefit import (
    Evaluation,
    PlanningProblem,
    SwitchCostTensor,
    decode,
    evaluate,
    served_matrix,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_SCENARIOS",
    "MAX_SCENARIO_CELLS",
    "RISK_MODES",
    "Dropped",
    "Risk",
    "ScenarioCosts",
    "Scenarios",
    "endure_problem",
    "enforce_confidence",
    "forecast_kl_radius",
    "kl_worst_case_capacity",
    "kl_worst_mix",
    "make_scenarios",
    "quantile_problem",
    "sample_world",
    "sample_world_p99",
    "step_probabilities",
    "worst_case_capacity",
]

Risk = Literal["mean", "quantile", "endure", "endure-kl"]
RISK_MODES: tuple[str, ...] = ("mean", "quantile", "endure", "endure-kl")
#: The issue's default: a step must pay in 9 scenarios out of 10.
DEFAULT_CONFIDENCE = 0.9
#: Joint scenarios: P(gain > cost) near 0.9 is then known to about +-0.02.
DEFAULT_SCENARIOS = 200
#: Bound on scenarios x T x K capacities (and as many credits) held at once (float64: 320 MB
#: each). The switch costs are computed when read (planner.planning.costbenefit.SwitchCostTensor),
#: so they add nothing: memory grows linearly in scenarios, intervals and candidates.
MAX_SCENARIO_CELLS = 40_000_000


class _Pricing(Protocol):
    """What prices a capacity matrix: :class:`planner.planning.pipeline.SwitchCosts`."""

    def problem(self, capacity: np.ndarray, *, load: np.ndarray | None = ...,
                initial: int = ..., initial_lockout: int = ...,
                p99: np.ndarray | None = ...) -> PlanningProblem: ...


@dataclass(frozen=True)
class Scenarios:
    """Joint scenarios priced like the plan.

    Parameters
    ----------
    capacity
        ``(S, T, K)`` ops/s of each candidate in each scenario.
    load
        ``(S, T)`` offered ops/s.
    served
        ``(S, T, K)`` credited ops/s (the plan's credit mode).
    costs
        ``(S, T, K, K)`` ops a switch ``a -> b`` starting at ``t`` costs, read as
        ``costs[:, t, a, b]``: an array, or (:func:`make_scenarios`) each scenario's
        costs computed when read.
    step_seconds
        Length of one interval.
    initial
        The candidate running now.
    """

    capacity: np.ndarray
    load: np.ndarray
    served: np.ndarray
    costs: np.ndarray | ScenarioCosts
    step_seconds: float
    initial: int = 0

    @property
    def n(self) -> int:
        """Number of scenarios S."""
        return int(self.served.shape[0])

    def values(self, schedule: np.ndarray) -> np.ndarray:
        """``(S,)`` credit minus switch costs of a feasible schedule in each scenario."""
        sched = np.asarray(schedule, dtype=np.int64)
        n_t = sched.shape[0]
        total = self.served[:, np.arange(n_t), sched].sum(axis=1) * self.step_seconds
        prev = np.concatenate(([self.initial], sched[:-1]))
        for t in np.flatnonzero(sched != prev).tolist():
            total = total - self.costs[:, t, prev[t], sched[t]].astype(float)
        return total


def sample_world(
    *, forecast: Any, model: Any, candidates: Sequence[Mapping[str, Any]], horizon: int,
    n: int, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """``(S, T, K)`` capacities and ``(S, T)`` loads of ``n`` joint scenarios.

    Scenario ``s`` pairs forecast sample path ``s`` with coefficient draw ``s`` (the two
    are independent: the forecast knows nothing of the model's error).
    """
    _mixes, cap, loads = _world(forecast=forecast, model=model, candidates=candidates,
                                horizon=horizon, n=n, rng=rng)
    return cap, loads


def sample_world_p99(
    *, forecast: Any, model: Any, candidates: Sequence[Mapping[str, Any]], horizon: int,
    n: int, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sample_world` and each scenario's ``(S, T, K)`` p99 (ms): a draw of the latency
    coefficients over that scenario's mix path and capacity
    (:meth:`planner.model.performance.PerformanceModel.sample_p99`), for the latency term, so that
    P(gain > cost) weighs the latency model's uncertainty too. The capacities and loads are
    those :func:`sample_world` draws from the same ``rng``."""
    mixes, cap, loads = _world(forecast=forecast, model=model, candidates=candidates,
                               horizon=horizon, n=n, rng=rng)
    return cap, loads, model.sample_p99(mixes, candidates, capacity=cap, rng=rng)


def _world(
    *, forecast: Any, model: Any, candidates: Sequence[Mapping[str, Any]], horizon: int,
    n: int, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(S, T, C)`` mixes, ``(S, T, K)`` capacities and ``(S, T)`` loads of the scenarios."""
    if n < 1:
        raise ValidationError(f"--scenarios: must be >= 1, got {n}")
    paths = forecast.sample_paths(n, rng)
    mixes = np.stack([np.asarray(p.mix_matrix(), dtype=float)[:horizon] for p in paths])
    loads = np.stack([np.asarray(p.load, dtype=float)[:horizon] for p in paths])
    cap = model.sample_capacity(mixes, candidates, n=n, rng=rng)
    return mixes, cap, loads


def make_scenarios(capacity: np.ndarray, load: np.ndarray, pricing: _Pricing,
                   p99: np.ndarray | None = None) -> Scenarios:
    """Price every scenario with the plan's cost model (``pricing.problem``); ``p99``
    ``(S, T, K)``: each scenario's own p99 for the latency term (None: the pricing's)."""
    cap = np.asarray(capacity, dtype=float)
    ld = np.asarray(load, dtype=float)
    if cap.ndim != 3 or ld.shape != cap.shape[:2]:
        raise ValidationError(
            f"scenarios: capacity (S, T, K) and load (S, T) expected, got {cap.shape} and "
            f"{ld.shape}"
        )
    n_s, n_t, n_k = cap.shape
    if n_s * n_t * n_k > MAX_SCENARIO_CELLS:
        raise ValidationError(
            f"--scenarios: {n_s} scenarios x {n_t} intervals x {n_k} candidates is over "
            f"{MAX_SCENARIO_CELLS:,} capacities; use fewer scenarios or a shorter horizon"
        )
    served = np.empty_like(cap)
    costs = []
    step, initial = 0.0, 0
    for s in range(n_s):
        pb = (pricing.problem(cap[s], load=ld[s]) if p99 is None
              else pricing.problem(cap[s], load=ld[s], p99=p99[s]))
        served[s] = pb.served
        costs.append(pb.costs)  # computed when read: no (T, K, K) per scenario
        step, initial = pb.step_seconds, pb.initial
    return Scenarios(capacity=cap, load=ld, served=served, costs=ScenarioCosts(costs),
                     step_seconds=step, initial=initial)


class ScenarioCosts:
    """Each scenario's switch costs, read as ``costs[:, t, a, b]`` (one value per scenario).

    Holds the scenarios' own cost tensors (computed when read,
    :class:`planner.planning.costbenefit.SwitchCostTensor`, or arrays), not an ``(S, T, K, K)``
    array: a plan's value needs the costs of its few switches only.
    """

    def __init__(self, per_scenario: Sequence[Any]) -> None:
        self._costs = list(per_scenario)
        if not self._costs:
            raise ValidationError("scenarios: at least one is needed")
        self.shape = (len(self._costs), *self._costs[0].shape)

    def __getitem__(self, key: tuple[slice, Any, Any, Any]) -> np.ndarray:
        if not (isinstance(key, tuple) and len(key) == 4 and key[0] == slice(None)):
            raise ValidationError("scenario costs: read as costs[:, t, a, b]")
        return np.array([c[key[1:]] for c in self._costs], dtype=float)


# --------------------------------------------------------------- confidence rule
def _windows(evaluation: Evaluation, n_steps: int) -> list[tuple[int, int, int, int]]:
    """``(t, until, source, target)`` of each switch: it holds until the next one."""
    sw = list(evaluation.switches)
    return [
        (s.t, sw[j + 1].t if j + 1 < len(sw) else n_steps, s.source, s.target)
        for j, s in enumerate(sw)
    ]


def _without(problem: PlanningProblem, evaluation: Evaluation, j: int) -> np.ndarray:
    """The schedule without step ``j``: the configuration before it holds until the next
    step, which then starts from there (a restart it would now overlap waits)."""
    t, until, a, _b = _windows(evaluation, problem.n_steps)[j]
    wish = np.asarray(evaluation.schedule, dtype=np.int64).copy()
    wish[t:until] = a
    return decode(problem, wish)


def step_probabilities(
    problem: PlanningProblem, scenarios: Scenarios, evaluation: Evaluation
) -> list[float]:
    """P(gain > cost) of each step of ``evaluation``, over the scenarios.

    A step's gain and cost are what the plan is worth with it minus without it
    (:func:`_without`): the credit it adds until the next step, its own switch cost, and
    what it changes in the later steps' costs (a live change that makes the following
    restart cheaper is credited with that). P is the share of scenarios where the plan
    with the step is worth strictly more.
    """
    sched = np.asarray(evaluation.schedule, dtype=np.int64)
    with_it = scenarios.values(sched)
    return [
        float(np.mean(with_it > scenarios.values(_without(problem, evaluation, j))))
        for j in range(len(evaluation.switches))
    ]


@dataclass(frozen=True)
class Dropped:
    """A step the confidence rule removed: when, from/to which candidate, its P."""

    t: int
    source: int
    target: int
    p_gain: float


def enforce_confidence(
    problem: PlanningProblem, scenarios: Scenarios, evaluation: Evaluation, confidence: float
) -> tuple[Evaluation, list[float], list[Dropped]]:
    """Drop steps whose P(gain > cost) is below ``confidence``, lowest first.

    Dropping a step keeps the configuration before it until the next step, which then
    starts from there (a restart it would now overlap is repaired by
    :func:`planner.planning.costbenefit.decode`: it waits). P is recomputed after every drop,
    since a later step's gain depends on where it starts from.

    Returns
    -------
    (evaluation, probabilities, dropped)
        The plan valued on ``problem``, each remaining step's P, and the dropped steps.
    """
    if not 0.0 <= confidence < 1.0:
        raise ValidationError(f"--confidence: must be in [0, 1), got {confidence!r}")
    dropped: list[Dropped] = []
    ev = evaluation
    while True:
        probs = step_probabilities(problem, scenarios, ev)
        low = [j for j, p in enumerate(probs) if p < confidence]
        if not low:
            return ev, probs, dropped
        j = min(low, key=lambda i: probs[i])
        t, _until, a, b = _windows(ev, problem.n_steps)[j]
        dropped.append(Dropped(t=t, source=a, target=b, p_gain=probs[j]))
        ev = evaluate(problem, _without(problem, ev, j))


# --------------------------------------------------------- risk-adjusted problems
def _replace(problem: PlanningProblem, served: np.ndarray,
             costs: np.ndarray | SwitchCostTensor) -> PlanningProblem:
    return PlanningProblem(
        served=served, costs=costs, lockout=problem.lockout, step_seconds=problem.step_seconds,
        initial=problem.initial, initial_lockout=problem.initial_lockout,
    )


def quantile_problem(
    problem: PlanningProblem, *, model: Any, mixes: np.ndarray, capacity: np.ndarray,
    candidates: Sequence[Mapping[str, Any]], quantile: float, load: np.ndarray | None,
    served: str, headroom_weight: float, p99: np.ndarray | None = None,
    latency_weight: float = 0.0,
) -> PlanningProblem:
    """``problem`` credited with each candidate at the lower ``quantile`` of its capacity
    relative to the configuration running now, under the model's uncertainty.

    The log ratio ``log(cap_k / cap_0)`` at mix ``m`` is normal with mean
    ``m' B (x_k - x_0)`` and variance ``(x_k - x_0)' Var(m' B) (x_k - x_0)`` (``B`` the
    coefficients, their covariance from the fit or the prior): exact, so the credit is
    smooth in time and no free live switch chases sampling noise, and what moves every
    candidate alike (the base throughput) cancels. An effect of 0 +- 5% has a negative
    lower quantile, so an unmeasured change is never made for nothing. Per interval and
    candidate: a sum over intervals, so the DP stays exact. Costs are ``problem``'s. The
    latency term (``p99``, ``latency_weight``) compares the point p99, below the quantile
    capacity's saturation.
    """
    if not 0.0 < quantile <= 0.5:
        raise ValidationError(f"quantile: must be in (0, 0.5], got {quantile!r}")
    m = np.asarray(mixes, dtype=float)
    m = m / m.sum(axis=1, keepdims=True)
    k0 = problem.initial
    xconf = model.config_matrix(list(candidates))
    d = xconf - xconf[k0][None, :]
    mu = m @ model.coef @ d.T
    n_c, n_j = model.coef.shape
    cov = model.cov.reshape(n_c, n_j, n_c, n_j)
    a = np.einsum("ic,cjdl,id->ijl", m, cov, m, optimize=True)
    var = np.maximum(np.einsum("ijl,kj,kl->ik", a, d, d, optimize=True), 0.0)
    z = NormalDist().inv_cdf(quantile)
    cap0 = np.asarray(capacity, dtype=float)[:, k0:k0 + 1]
    cap_q = cap0 * np.exp(mu + z * np.sqrt(var))
    credit = served_matrix(cap_q, load=load, served=served,  # type: ignore[arg-type]
                           headroom_weight=headroom_weight, p99=p99,
                           latency_weight=latency_weight, reference=k0)
    return _replace(problem, credit, problem.costs)


def worst_case_capacity(
    model: Any, forecast: Any, candidates: Sequence[Mapping[str, Any]], horizon: int
) -> np.ndarray:
    """``(T, K)`` capacity under the worst mix in the forecast's interval box (ENDURE).

    The model is log-linear in the mix, so the minimum over the box
    ``lower_c <= m_c <= upper_c`` intersected with ``sum(m) = 1`` lies at a vertex: start
    every class at its lower bound and give the rest of the mass to the classes that are
    slowest under that configuration, each up to its upper bound.
    """
    classes = list(model.classes)
    lo = np.stack([np.asarray(forecast.mix_lower[c], dtype=float)[:horizon] for c in classes], 1)
    hi = np.stack([np.asarray(forecast.mix_upper[c], dtype=float)[:horizon] for c in classes], 1)
    hi = np.maximum(hi, lo)
    beta = model.coef @ model.config_matrix(list(candidates)).T  # (C, K) log ops/s per class
    n_t, n_k = lo.shape[0], beta.shape[1]
    out = np.empty((n_t, n_k))
    for k in range(n_k):
        order = np.argsort(beta[:, k])  # slowest class first
        mix = lo.copy()
        rest = np.maximum(1.0 - mix.sum(axis=1), 0.0)
        for c in order:
            add = np.minimum(rest, hi[:, c] - lo[:, c])
            mix[:, c] += add
            rest = rest - add
        mix[:, order[0]] += rest  # an inconsistent box (upper bounds sum below 1)
        mix /= mix.sum(axis=1, keepdims=True)
        out[:, k] = np.exp(mix @ beta[:, k])
    return out


def forecast_kl_radius(forecast: Any) -> float:
    """The KL radius learnt by the forecast's own backtest (its chosen model's
    :attr:`~planner.forecast.results.BacktestResult.mix_kl_radius`); refused without one."""
    import math

    chosen = [b for b in (forecast.backtest or ()) if b.model == forecast.model and b.ok]
    radius = chosen[0].mix_kl_radius if chosen else math.nan
    if not math.isfinite(radius):
        raise ValidationError(
            f"risk endure-kl: the forecast (model {forecast.model}) has no backtest of its mix "
            "to learn the KL radius from; forecast the trace again with this version of "
            "kairos forecast, or use --risk endure (the forecast's interval box)")
    return float(radius)


def kl_worst_mix(expected: np.ndarray, log_rate: np.ndarray, radius: float) -> np.ndarray:
    """The mix in KL(q || expected) <= ``radius`` that minimises ``q . log_rate``.

    ``expected`` is (..., C) class fractions, ``log_rate`` (..., C) each class's log ops/s
    under one configuration. The minimiser is the exponential tilt
    ``q ~ expected * exp(-theta * log_rate)`` whose KL is exactly the radius (KL grows with
    theta), or, when the whole ball reaches past it, all the mass on the slowest classes.
    The expected mix is smoothed as the radius was measured
    (:func:`planner.forecast.results.smoothed_mix`).
    """
    from planner.forecast.results import smoothed_mix

    p = smoothed_mix(expected)
    b = np.asarray(log_rate, dtype=float)
    p, b = np.broadcast_arrays(p, b)
    above = b - b.min(axis=-1, keepdims=True)  # how much faster than the slowest class
    spread = above.max(axis=-1, keepdims=True)
    # theta in units of 1/spread: past 60 the tilt is all on the slowest classes
    slope = np.where(spread > 0, above / np.maximum(spread, 1e-300), 0.0)

    def tilt(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = p * np.exp(-theta[..., None] * slope)
        q /= q.sum(axis=-1, keepdims=True)
        return q, np.sum(q * np.log(np.maximum(q, 1e-300) / p), axis=-1)

    lo = np.zeros(p.shape[:-1])
    hi = np.full(p.shape[:-1], 60.0)
    _, kl_hi = tilt(hi)
    inside = kl_hi <= radius  # the ball holds even the extreme tilt
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        _, kl = tilt(mid)
        over = kl > radius
        hi = np.where(over, mid, hi)
        lo = np.where(over, lo, mid)
    q, _ = tilt(np.where(inside, hi, lo))
    return q


def kl_worst_case_capacity(
    model: Any, forecast: Any, candidates: Sequence[Mapping[str, Any]], horizon: int,
    radius: float,
) -> np.ndarray:
    """``(T, K)`` capacity under the worst mix within KL ``radius`` of the expected one
    (ENDURE's neighbourhood, seeds/003; :func:`kl_worst_mix`): the model is log-linear in
    the mix, so the worst case is a tilt of the expected mix towards each configuration's
    slowest classes."""
    if not radius >= 0:
        raise ValidationError(f"risk endure-kl: the KL radius must be >= 0, got {radius!r}")
    classes = list(model.classes)
    mean = np.stack([np.asarray(forecast.mix_mean[c], dtype=float)[:horizon] for c in classes],
                    1)  # (T, C)
    beta = model.coef @ model.config_matrix(list(candidates)).T  # (C, K) log ops/s per class
    q = kl_worst_mix(mean[:, None, :], beta.T[None, :, :], radius)  # (T, K, C)
    return np.exp(np.einsum("tkc,ck->tk", q, beta))


def endure_problem(
    problem: PlanningProblem, *, capacity: np.ndarray, load_lower: np.ndarray | None,
    served: str, headroom_weight: float, p99: np.ndarray | None = None,
    latency_weight: float = 0.0,
) -> PlanningProblem:
    """``problem`` credited under the worst-case world (:func:`worst_case_capacity`).

    The load is at its lower bound (least work to serve); costs stay those of ``problem``.
    The latency term (``p99``, ``latency_weight``) compares the point p99 (under the
    expected mix, not the worst one).
    """
    credit = served_matrix(
        capacity, load=load_lower, served=served,  # type: ignore[arg-type]
        headroom_weight=headroom_weight, p99=p99, latency_weight=latency_weight,
        reference=problem.initial,
    )
    return _replace(problem, credit, problem.costs)
