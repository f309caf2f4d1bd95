"""Cost-benefit analysis of reconfiguration plans (SOPHIA section 4, Eq. 6-8).

Everything here is a pure function of arrays, independent of forecasting and of the
performance model:

* ``capacity[t, k]``: throughput (ops/s) candidate configuration ``k`` can serve in
  decision interval ``t`` -- what the performance model predicts for the workload
  forecast for that interval (the saturated cluster throughput).
* ``served[t, k]``: the throughput the plan is credited with, ``g(load, capacity)``.
  SOPHIA credits the capacity (clients saturate the cluster; ``served="capacity"``).
  With ``served="offered"`` it is ``min(load[t], capacity[t, k])``: a configuration gains
  nothing beyond the load actually offered, and restarts in quiet periods are cheap.
  ``served="work"`` is the work served plus a headroom term below saturation::

      g = min(load, cap) + headroom_weight * load * max(0, 1 - load / cap)

  the offered work times the share of capacity left free (1 - utilisation). Its value
  grows with capacity as utilisation squared: a cluster at 2% utilisation gains nothing
  worth a restart from more capacity, one at 90% nearly as much as at saturation (and
  queueing latency, ~1/(1 - u), is what falls). Weight 0 is ``offered``.
  With a model that predicts p99 latency, ``"work"`` may also credit it (opt-in,
  ``latency_weight``, default 0; see :func:`latency_credit`)::

      + latency_weight * load * clip(ln(p99_ref / p99_k), -1, 1)    where load < cap_k

  the offered work times the relative p99 reduction against the configuration running now
  (``ref``), only where candidate ``k`` is below saturation: where it is saturated, served
  work is what counts and the term is 0. It is a per-interval credit only: what a restart
  costs stays the served work and headroom it loses (:func:`transition_costs`).
* ``costs[t, a, b]``: operations lost when a switch from ``a`` to ``b`` starts at the
  beginning of interval ``t`` (see :func:`transition_costs`).

A plan is an ordered list of switches ``(t_j, k_j)``. Its value is

    sum_t served[t, config(t)] * step_seconds  -  sum_j costs[t_j, k_{j-1}, k_j]

where ``config(t)`` is the target of the latest switch at or before ``t``. Benefit is
the served total minus that of staying in the current configuration; cost is the sum
of the switch costs. While a rolling restart is in progress (``lockout`` intervals)
no other switch may start.

The cost of a restart switch a -> b with batches of capacity shares f_1..f_m, each down
for ``T_r`` seconds: during batch i, the done share D_i = f_1 + ... + f_{i-1} already
runs ``b``, the pending share 1 - D_i - f_i still runs ``a``, and the surviving nodes
lose ``survivor_penalty`` of their capacity to the extra load (hints, coordination,
streaming) they take over:

    actual_i = (1 - survivor_penalty) * (D_i * cap_b + (1 - D_i - f_i) * cap_a)
    cost     = sum_i T_r * max(0, served(cap_b) - served(actual_i))

(a restart is never credited as a gain, even when the old configuration the pending
nodes still run is the faster one). ``T_r`` may differ per batch (``batch_seconds``: the
slowest measured node of the batch), see :class:`ReconfigModel`.
SOPHIA's Eq. 8 (``L = H(C_k) * T_r``) is the special case that ignores the pending
nodes still running the old configuration. A change whose parameters are all live
costs ``live_seconds * served(cap_b)`` (default 0: e.g. a cache warm-up). Parameters
whose change is expensive however it is applied (a compaction strategy change rewrites
every SSTable) add ``change_seconds[a, b] * served(cap_b)`` to any switch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.errors import ValidationError

__all__ = [
    "LATENCY_LOG_BOUND",
    "SERVED_MODES",
    "Evaluation",
    "PlanningProblem",
    "ReconfigModel",
    "Served",
    "Switch",
    "break_even_seconds",
    "decode",
    "evaluate",
    "evaluate_population",
    "latency_credit",
    "lockout_matrix",
    "schedule_from_switches",
    "served_matrix",
    "transition_costs",
]

Served = Literal["capacity", "offered", "work"]
SERVED_MODES = ("capacity", "offered", "work")
#: Bound on the latency term's log p99 ratio: the term is worth at most the weight times
#: the offered work (a p99 e times lower or higher), so served work stays the currency.
LATENCY_LOG_BOUND = 1.0


@dataclass(frozen=True)
class ReconfigModel:
    """How a reconfiguration costs throughput.

    Parameters
    ----------
    restart_seconds
        ``T_r``: seconds one node (and so one batch) is out of service for a restart
        (drain, stop, start, sync), measured by the executor.
    batch_fractions
        Capacity share of each batch, in order (sums to 1); ``n_i / N`` for a homogeneous
        cluster. From :func:`planner.topology.safe_batches`.
    survivor_penalty
        Fraction of the up nodes' capacity lost to the extra load while a batch is down.
    live_seconds
        Seconds of full capacity an all-live change costs (default 0).
    batch_seconds
        Seconds each batch is out of service, in batch order (the slowest measured node of
        the batch: its nodes restart together); None: ``restart_seconds`` for every batch.
    warmup_seconds
        Seconds of full capacity a rolling restart loses to its nodes coming back cold
        (JIT, caches), measured by bench/restart_cost.py (planner/restart_impact.py);
        default 0.
    """

    restart_seconds: float
    batch_fractions: tuple[float, ...]
    survivor_penalty: float = 0.0
    live_seconds: float = 0.0
    batch_seconds: tuple[float, ...] | None = None
    warmup_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.restart_seconds) or self.restart_seconds < 0:
            raise ValidationError(
                f"restart_seconds: must be a finite number >= 0, got {self.restart_seconds!r}"
            )
        if not self.batch_fractions:
            raise ValidationError("batch_fractions: at least one batch is needed")
        fr = np.asarray(self.batch_fractions, dtype=float)
        if np.any(fr <= 0) or abs(float(fr.sum()) - 1.0) > 1e-6:
            raise ValidationError(
                f"batch_fractions: must be positive and sum to 1, got {self.batch_fractions!r}"
            )
        if not 0.0 <= self.survivor_penalty < 1.0:
            raise ValidationError(
                f"survivor_penalty: must be in [0, 1), got {self.survivor_penalty!r}"
            )
        if self.live_seconds < 0:
            raise ValidationError(f"live_seconds: must be >= 0, got {self.live_seconds!r}")
        if not math.isfinite(self.warmup_seconds) or self.warmup_seconds < 0:
            raise ValidationError(
                f"warmup_seconds: must be a finite number >= 0, got {self.warmup_seconds!r}")
        if self.batch_seconds is not None:
            bs = tuple(float(x) for x in self.batch_seconds)
            if len(bs) != len(self.batch_fractions) or not all(
                math.isfinite(x) and x >= 0 for x in bs
            ):
                raise ValidationError(
                    f"batch_seconds: expected {len(self.batch_fractions)} finite values >= 0 "
                    f"(one per batch), got {self.batch_seconds!r}"
                )
            object.__setattr__(self, "batch_seconds", bs)

    @classmethod
    def from_batches(
        cls,
        batches: Sequence[Sequence[str]],
        *,
        restart_seconds: float,
        survivor_penalty: float = 0.0,
        live_seconds: float = 0.0,
        node_seconds: Mapping[str, float] | None = None,
        warmup_seconds: float = 0.0,
    ) -> ReconfigModel:
        """Model for host batches of a homogeneous cluster (share = batch size / nodes).

        ``node_seconds`` gives measured T_r per host; a batch is down as long as its slowest
        node, and a host without a measurement counts ``restart_seconds``.
        """
        kept = [list(b) for b in batches if len(b)]
        total = sum(len(b) for b in kept)
        if total == 0:
            raise ValidationError("batches: no hosts to reconfigure")
        per_batch = None
        if node_seconds:
            per_batch = tuple(
                max(float(node_seconds.get(h, restart_seconds)) for h in b) for b in kept
            )
        return cls(
            restart_seconds=float(restart_seconds),
            batch_fractions=tuple(len(b) / total for b in kept),
            survivor_penalty=survivor_penalty,
            live_seconds=live_seconds,
            batch_seconds=per_batch,
            warmup_seconds=warmup_seconds,
        )

    @property
    def batch_durations(self) -> tuple[float, ...]:
        """Seconds each batch is out of service."""
        if self.batch_seconds is not None:
            return self.batch_seconds
        return (self.restart_seconds,) * len(self.batch_fractions)

    @property
    def duration_seconds(self) -> float:
        """Wall time of one rolling restart: the sum of the batches' T_r."""
        return float(sum(self.batch_durations))


def _check_served(served: str, load: np.ndarray | None, headroom_weight: float) -> None:
    """Refuse an unknown credit mode, a missing load, or a headroom weight outside [0, 1]."""
    if served not in SERVED_MODES:
        raise ValidationError(
            f"served: expected one of {', '.join(SERVED_MODES)}, got {served!r}"
        )
    if served != "capacity" and load is None:
        raise ValidationError(f"served={served!r} needs the offered load per interval")
    if not (math.isfinite(headroom_weight) and 0.0 <= headroom_weight <= 1.0):
        raise ValidationError(f"headroom_weight: must be in [0, 1], got {headroom_weight!r}")


def _check_latency(
    latency_weight: float, p99: np.ndarray | None, shape: tuple[int, ...], reference: int
) -> np.ndarray | None:
    """The ``(T, K)`` p99 matrix a positive ``latency_weight`` needs (None at weight 0)."""
    if not (math.isfinite(latency_weight) and 0.0 <= latency_weight <= 1.0):
        raise ValidationError(f"latency_weight: must be in [0, 1], got {latency_weight!r}")
    if latency_weight == 0.0:
        return None
    if p99 is None:
        raise ValidationError("latency_weight: a positive weight needs the predicted p99 "
                              "per interval and candidate")
    arr = np.asarray(p99, dtype=float)
    if arr.shape != shape or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValidationError(
            f"p99: expected {shape} positive finite values (ms), got shape {arr.shape}")
    if not 0 <= reference < shape[-1]:
        raise ValidationError(f"reference: {reference} is not a candidate index")
    return arr


def latency_credit(
    capacity: np.ndarray, load: np.ndarray, p99: np.ndarray, *, reference: int,
    weight: float,
) -> np.ndarray:
    """``(T, K)`` credit for predicted p99 below saturation.

    ``weight * load * clip(ln(p99[:, reference] / p99), -1, 1)`` where ``load < capacity``
    (the candidate is not saturated), else 0. ``p99[t, k]`` is the model's p99 of candidate
    ``k`` under interval ``t``'s mix (planner.perfmodel.LatencyTerms: a saturated window's
    p99, so only its ratio between candidates is used); ``reference`` is the configuration
    running now, whose term is 0. The log ratio is symmetric (half the p99 earns what twice
    the p99 loses) and bounded by :data:`LATENCY_LOG_BOUND`, so the term is worth at most
    ``weight`` times the offered work. ``load`` is ``(T,)``.
    """
    cap = np.asarray(capacity, dtype=float)
    ld = np.asarray(load, dtype=float).reshape(-1, 1)
    ratio = np.log(p99[:, reference:reference + 1] / p99)
    gain = np.clip(ratio, -LATENCY_LOG_BOUND, LATENCY_LOG_BOUND)
    return np.where(ld < cap, weight * ld * gain, 0.0)


def credit(x: np.ndarray, load: np.ndarray | None, headroom_weight: float = 0.0) -> np.ndarray:
    """``g(load, x)``: served work plus ``headroom_weight * load * (1 - utilisation)``
    below saturation (see the module docstring); ``load`` None credits ``x``.

    ``load`` broadcasts against ``x`` (the caller shapes it).
    """
    if load is None:
        return x
    served = np.minimum(x, load)
    if headroom_weight == 0.0:
        return served
    free = np.where(x > load, 1.0 - load / np.where(x > 0, x, 1.0), 0.0)
    return served + headroom_weight * load * free


def served_matrix(
    capacity: np.ndarray,
    *,
    load: np.ndarray | None = None,
    served: Served = "capacity",
    headroom_weight: float = 0.0,
    p99: np.ndarray | None = None,
    latency_weight: float = 0.0,
    reference: int = 0,
) -> np.ndarray:
    """Throughput credited per (interval, candidate): capacity, min(load, capacity), or
    the work served plus the weighted headroom term (``"work"``, see :func:`credit`) and,
    with a positive ``latency_weight``, the latency term (:func:`latency_credit` of ``p99``
    ``(T, K)`` against candidate ``reference``). Weight 0 leaves the credit as it was."""
    cap = np.asarray(capacity, dtype=float)
    _check_served(served, load, headroom_weight)
    lat = _check_latency(latency_weight, p99, cap.shape, reference)
    if served == "capacity" or load is None:
        return cap
    ld = np.asarray(load, dtype=float)
    out = credit(cap, ld.reshape((*ld.shape, 1)), headroom_weight if served == "work" else 0.0)
    if lat is None or served != "work":
        return out
    return out + latency_credit(cap, ld, lat, reference=reference, weight=latency_weight)


def transition_costs(
    capacity: np.ndarray,
    *,
    restart: np.ndarray,
    model: ReconfigModel,
    step_seconds: float,
    load: np.ndarray | None = None,
    served: Served = "capacity",
    change_seconds: np.ndarray | None = None,
    headroom_weight: float = 0.0,
) -> np.ndarray:
    """Operations lost by each switch ``a -> b`` started at the beginning of interval ``t``.

    Parameters
    ----------
    capacity
        ``(T, K)`` ops/s of candidate ``k`` in interval ``t``.
    restart
        ``(K, K)`` bool: True when going from ``a`` to ``b`` needs a (rolling) restart.
    model
        T_r, batch shares and penalties.
    step_seconds
        Length of one interval; a restart longer than that spans the next intervals,
        whose capacity and load are then used (the last interval repeats past the end).
    load, served, headroom_weight
        As for :func:`served_matrix`: what is lost is credit, so below saturation a
        restart loses headroom (weighted), not served work.
    change_seconds
        ``(K, K)`` extra seconds of full throughput lost by the change itself, whether live
        or not (e.g. a compaction strategy change rewrites every SSTable).

    Returns
    -------
    numpy.ndarray
        ``(T, K, K)`` costs in operations, 0 on the diagonal.
    """
    cap, rst, ld = _check_cost_inputs(
        capacity, restart=restart, step_seconds=step_seconds, load=load, served=served
    )
    _check_served(served, load, headroom_weight)
    hw = headroom_weight if served == "work" else 0.0
    n_k = cap.shape[1]
    costs = np.where(rst[None, :, :], _rolling_costs(cap, model, step_seconds, ld, hw), 0.0)
    # All-live changes cost live_seconds; a restart, the warm-up of its cold nodes.
    extra = np.where(rst, model.warmup_seconds, model.live_seconds)
    if change_seconds is not None:
        cs = np.asarray(change_seconds, dtype=float)
        if cs.shape != (n_k, n_k) or np.any(cs < 0):
            raise ValidationError(f"change_seconds: expected ({n_k}, {n_k}) values >= 0")
        extra = extra + cs
    if np.any(extra > 0):
        full = _credit(np.broadcast_to(cap[:, None, :], costs.shape), np.arange(len(cap)), ld, hw)
        costs = costs + extra[None, :, :] * full
    diag = np.arange(n_k)
    costs[:, diag, diag] = 0.0
    return costs


def _check_cost_inputs(
    capacity: np.ndarray,
    *,
    restart: np.ndarray,
    step_seconds: float,
    load: np.ndarray | None,
    served: Served,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Capacity ``(T, K)``, restart ``(K, K)`` and the load that caps credit (None: capacity)."""
    cap = np.asarray(capacity, dtype=float)
    if cap.ndim != 2:
        raise ValidationError(f"capacity: expected a (T, K) matrix, got shape {cap.shape}")
    n_t, n_k = cap.shape
    rst = np.asarray(restart, dtype=bool)
    if rst.shape != (n_k, n_k):
        raise ValidationError(f"restart: expected shape ({n_k}, {n_k}), got {rst.shape}")
    if step_seconds <= 0:
        raise ValidationError(f"step_seconds: must be > 0, got {step_seconds!r}")
    _check_served(served, load, 0.0)
    if served == "capacity" or load is None:
        return cap, rst, None
    ld = np.asarray(load, dtype=float)
    if ld.shape != (n_t,):
        raise ValidationError(f"load: expected {n_t} values, got shape {ld.shape}")
    return cap, rst, ld


def _credit(
    x: np.ndarray, u: np.ndarray, load: np.ndarray | None, headroom_weight: float = 0.0
) -> np.ndarray:
    """Credited throughput of ``x`` (T, K, K) during a piece lying in intervals ``u`` (T,)."""
    if load is None:
        return x
    return credit(x, load[u][:, None, None], headroom_weight)


def _rolling_costs(
    cap: np.ndarray, model: ReconfigModel, step_seconds: float, load: np.ndarray | None,
    headroom_weight: float = 0.0,
) -> np.ndarray:
    """``(T, K, K)`` operations a rolling restart a -> b loses, batch by batch (every pair)."""
    n_t, n_k = cap.shape
    costs = np.zeros((n_t, n_k, n_k))
    t_idx = np.arange(n_t)
    keep = 1.0 - model.survivor_penalty
    done = 0.0
    for f, tr in zip(model.batch_fractions, model.batch_durations, strict=True):
        pending = 1.0 - done - f
        lo, hi = 0.0, tr
        # split [lo, hi) (relative to the start of interval t) at interval boundaries
        while hi - lo > 1e-12:
            u_off = math.floor(lo / step_seconds + 1e-12)
            piece_end = min(hi, (u_off + 1) * step_seconds)
            dt = piece_end - lo
            u = np.minimum(t_idx + u_off, n_t - 1)
            cap_u = cap[u]  # (T, K)
            cap_a = cap_u[:, :, None]
            cap_b = cap_u[:, None, :]
            actual = keep * (done * cap_b + pending * cap_a)
            short = (_credit(np.broadcast_to(cap_b, costs.shape), u, load, headroom_weight)
                     - _credit(actual, u, load, headroom_weight))
            costs += dt * np.maximum(short, 0.0)
            lo = piece_end
        done += f
    return costs


def lockout_matrix(
    restart: np.ndarray, *, model: ReconfigModel, step_seconds: float
) -> np.ndarray:
    """Intervals a switch occupies before the next may start: ceil(duration / step), >= 1."""
    rst = np.asarray(restart, dtype=bool)
    steps = max(1, math.ceil(model.duration_seconds / step_seconds - 1e-9))
    out = np.where(rst, steps, 1).astype(np.int64)
    np.fill_diagonal(out, 1)
    return out


@dataclass(frozen=True)
class PlanningProblem:
    """Everything the optimiser needs, as arrays.

    Parameters
    ----------
    served
        ``(T, K)`` ops/s credited to candidate ``k`` in interval ``t`` (for forecast
        uncertainty: the mean over sample paths, which makes the objective the expected
        value since it is linear in ``served`` and ``costs``).
    costs
        ``(T, K, K)`` ops lost by a switch ``a -> b`` starting at ``t``.
    lockout
        ``(K, K)`` intervals a switch occupies (>= 1 off the diagonal).
    step_seconds
        Length of one decision interval.
    initial
        Index of the configuration running now.
    initial_lockout
        Intervals before the first switch may start (a restart still in progress).
    """

    served: np.ndarray
    costs: np.ndarray
    lockout: np.ndarray
    step_seconds: float
    initial: int = 0
    initial_lockout: int = 0

    def __post_init__(self) -> None:
        s = np.asarray(self.served, dtype=float)
        if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 1:
            raise ValidationError(f"served: expected a non-empty (T, K) matrix, got {s.shape}")
        n_t, n_k = s.shape
        c = np.asarray(self.costs, dtype=float)
        if c.shape != (n_t, n_k, n_k):
            raise ValidationError(f"costs: expected shape {(n_t, n_k, n_k)}, got {c.shape}")
        lk = np.asarray(self.lockout, dtype=np.int64)
        if lk.shape != (n_k, n_k) or np.any(lk < 1):
            raise ValidationError(f"lockout: expected ({n_k}, {n_k}) integers >= 1")
        if not np.all(np.isfinite(s)) or not np.all(np.isfinite(c)):
            raise ValidationError("served/costs: must be finite")
        if not 0 <= self.initial < n_k:
            raise ValidationError(f"initial: {self.initial} is not a candidate index (K={n_k})")
        if self.initial_lockout < 0:
            raise ValidationError("initial_lockout: must be >= 0")
        if self.step_seconds <= 0:
            raise ValidationError(f"step_seconds: must be > 0, got {self.step_seconds!r}")
        object.__setattr__(self, "served", s)
        object.__setattr__(self, "costs", c)
        object.__setattr__(self, "lockout", lk)

    @property
    def n_steps(self) -> int:
        """Number of decision intervals T."""
        return int(self.served.shape[0])

    @property
    def n_candidates(self) -> int:
        """Number of candidate configurations K."""
        return int(self.served.shape[1])


@dataclass(frozen=True)
class Switch:
    """One step of a plan: at interval ``t`` switch from ``source`` to ``target``."""

    t: int
    source: int
    target: int
    benefit_ops: float
    cost_ops: float

    @property
    def net_ops(self) -> float:
        """Benefit minus cost."""
        return self.benefit_ops - self.cost_ops


@dataclass(frozen=True)
class Evaluation:
    """Value of a plan over the horizon."""

    total_ops: float  # served operations minus switch costs
    baseline_ops: float  # served operations staying in the initial configuration
    benefit_ops: float  # served under the plan minus baseline
    cost_ops: float  # sum of the switch costs
    switches: tuple[Switch, ...]
    schedule: np.ndarray  # (T,) configuration index credited in each interval

    @property
    def net_ops(self) -> float:
        """Benefit minus cost (= total_ops - baseline_ops)."""
        return self.benefit_ops - self.cost_ops


def decode(problem: PlanningProblem, genome: Sequence[int] | np.ndarray) -> np.ndarray:
    """Feasible schedule from a wish list of one configuration per interval.

    A change of the wish is honoured only when no restart is in progress; otherwise
    the running configuration is kept (the wish is repaired).
    """
    g = np.asarray(genome, dtype=np.int64)
    out = np.empty(problem.n_steps, dtype=np.int64)
    cur = problem.initial
    busy = problem.initial_lockout
    lock = problem.lockout
    for t in range(problem.n_steps):
        want = int(g[t])
        if t >= busy and want != cur:
            busy = t + int(lock[cur, want])
            cur = want
        out[t] = cur
    return out


def schedule_from_switches(
    problem: PlanningProblem, switches: Sequence[tuple[int, int]]
) -> np.ndarray:
    """Schedule for switches ``[(t, k), ...]``; raises if one starts during a restart."""
    sched = np.full(problem.n_steps, problem.initial, dtype=np.int64)
    cur, busy, last_t = problem.initial, problem.initial_lockout, -1
    for i, (t, k) in enumerate(switches):
        if not 0 <= t < problem.n_steps or not 0 <= k < problem.n_candidates:
            raise ValidationError(f"switches[{i}]: ({t}, {k}) is outside the problem")
        if t <= last_t:
            raise ValidationError(f"switches[{i}]: times must increase")
        if t < busy:
            raise ValidationError(
                f"switches[{i}]: interval {t} falls inside the restart that ends at {busy}"
            )
        if k == cur:
            raise ValidationError(f"switches[{i}]: switches to the configuration already running")
        busy = t + int(problem.lockout[cur, k])
        cur, last_t = k, t
        sched[t:] = k
    return sched


def evaluate(problem: PlanningProblem, schedule: Sequence[int] | np.ndarray) -> Evaluation:
    """Benefit, cost and switches of a feasible schedule (see :func:`decode`).

    Each switch's benefit is the operations gained over the intervals until the next
    switch (or the horizon) relative to staying in the previous configuration.
    """
    sched = np.asarray(schedule, dtype=np.int64)
    if sched.shape != (problem.n_steps,):
        raise ValidationError(f"schedule: expected {problem.n_steps} entries, got {sched.shape}")
    dt = problem.step_seconds
    t_idx = np.arange(problem.n_steps)
    served = problem.served[t_idx, sched] * dt
    base = problem.served[:, problem.initial] * dt
    prev = np.concatenate(([problem.initial], sched[:-1]))
    starts = np.flatnonzero(sched != prev)
    switches = []
    bounds = [*starts.tolist(), problem.n_steps]
    for j, t in enumerate(starts.tolist()):
        a, b = int(prev[t]), int(sched[t])
        until = bounds[j + 1]
        gain = float(np.sum(problem.served[t:until, b] - problem.served[t:until, a]) * dt)
        switches.append(
            Switch(t=t, source=a, target=b, benefit_ops=gain,
                   cost_ops=float(problem.costs[t, a, b]))
        )
    cost = float(sum(s.cost_ops for s in switches))
    total = float(served.sum()) - cost
    baseline = float(base.sum())
    return Evaluation(
        total_ops=total,
        baseline_ops=baseline,
        benefit_ops=float(served.sum()) - baseline,
        cost_ops=cost,
        switches=tuple(switches),
        schedule=sched,
    )


def evaluate_population(
    problem: PlanningProblem, genomes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decode and value many wish lists at once (the GA's fitness).

    Parameters
    ----------
    genomes
        ``(P, T)`` integer wish lists.

    Returns
    -------
    (values, schedules)
        ``values[p]`` total operations (served minus switch costs) and the repaired
        feasible ``schedules[p]``.
    """
    g = np.asarray(genomes, dtype=np.int64)
    n_p, n_t = g.shape
    dt = problem.step_seconds
    cur = np.full(n_p, problem.initial, dtype=np.int64)
    busy = np.full(n_p, problem.initial_lockout, dtype=np.int64)
    total = np.zeros(n_p)
    out = np.empty_like(g)
    served, costs, lock = problem.served, problem.costs, problem.lockout
    for t in range(n_t):
        want = g[:, t]
        sw = (want != cur) & (busy <= t)
        if sw.any():
            idx = np.flatnonzero(sw)
            a, b = cur[idx], want[idx]
            total[idx] -= costs[t, a, b]
            busy[idx] = t + lock[a, b]
            cur[idx] = b
        out[:, t] = cur
        total += served[t, cur] * dt
    return total, out


def break_even_seconds(
    *, old_capacity: float, new_capacity: float, model: ReconfigModel
) -> float:
    """How long (from the start of the restarts) a steady workload must last to pay.

    With constant capacities in ``capacity`` credit mode: the switch pays when
    ``new * tau - cost >= old * tau``, i.e. ``tau = cost / (new - old)``.
    ``inf`` when the new configuration is not faster.
    """
    if new_capacity <= old_capacity:
        return math.inf
    cap = np.array([[old_capacity, new_capacity]])
    restart = np.array([[False, True], [True, False]])
    step = max(model.duration_seconds, 1.0)
    cost = transition_costs(cap, restart=restart, model=model, step_seconds=step)[0, 0, 1]
    return float(cost / (new_capacity - old_capacity))
