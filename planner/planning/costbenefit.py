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
  beginning of interval ``t`` (see :func:`transition_costs`). A planning problem holds
  them as a :class:`SwitchCostTensor`, which computes them when read (the ``T K^2``
  numbers of 720 intervals x 512 candidates are 1.5 GB; what they are made of is
  ``T K + K^2``).

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
every SSTable) cost ``change_seconds[a, b]`` of full throughput, spread over the change's
span ``d = change_span[a, b]`` (its rewrite; default the cost itself) as a share
``phi = change_seconds / d`` of the capacity, priced at the load of every interval spanned:

    cost += sum over the span  dt * max(0, served(cap_b) - served((1 - phi) * cap_b))

At saturation that is ``change_seconds * served(cap_b)``; in a quiet hour the spare
capacity absorbs the rewrite and little is lost, which is what a plan that chooses *when*
to change uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from planner.errors import ValidationError, finite_at_least

__all__ = [
    "LATENCY_LOG_BOUND",
    "SERVED_MODES",
    "Evaluation",
    "PlanningProblem",
    "ReconfigModel",
    "Served",
    "Switch",
    "SwitchCostTensor",
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
        cluster. From :func:`planner.topology.batching.safe_batches`.
    survivor_penalty
        Fraction of the up nodes' capacity lost to the extra load while a batch is down.
    live_seconds
        Seconds of full capacity an all-live change costs (default 0).
    batch_seconds
        Seconds each batch is out of service, in batch order (the slowest measured node of
        the batch: its nodes restart together); None: ``restart_seconds`` for every batch.
    warmup_seconds
        Seconds of full capacity a rolling restart loses to its nodes coming back cold
        (JIT, caches), measured by bench/restart_cost.py (planner/model/restart_impact.py);
        default 0.
    """

    restart_seconds: float
    batch_fractions: tuple[float, ...]
    survivor_penalty: float = 0.0
    live_seconds: float = 0.0
    batch_seconds: tuple[float, ...] | None = None
    warmup_seconds: float = 0.0

    def __post_init__(self) -> None:
        finite_at_least("restart_seconds", self.restart_seconds)
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
        finite_at_least("warmup_seconds", self.warmup_seconds)
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
    ``k`` under interval ``t``'s mix (planner.model.performance.LatencyTerms: a saturated window's
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


def credit(x: np.ndarray, load: np.ndarray | float | None,
           headroom_weight: float = 0.0) -> np.ndarray:
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


def transition_costs(capacity: np.ndarray, **options: Any) -> np.ndarray:
    """Operations lost by each switch ``a -> b`` started at the beginning of interval ``t``:
    :class:`SwitchCostTensor` (whose keyword options these are) materialised, ``(T, K, K)``
    costs in operations, 0 on the diagonal (``T K^2`` numbers: for a large problem keep the
    tensor instead)."""
    return SwitchCostTensor(capacity, **options).dense()


#: Rows of a ``(K, K)`` cost matrix computed at once: blocks of this many rows stay in
#: the processor's cache (64 x 512 float64 = 256 KiB); a numpy call per block and step.
ROW_BLOCK = 64


class SwitchCostTensor:
    """``costs[t, a, b]`` of :func:`transition_costs`, computed when read, never stored.

    The dense tensor is ``T K^2`` numbers (720 intervals x 512 candidates: 1.5 GB), but
    it is a function of ``capacity`` ``(T, K)``, ``load`` ``(T,)`` and ``(K, K)``
    matrices, which is all this keeps (memory linear in T and in K^2, not in T K^2).
    Reading one switch costs a few operations per restart batch; a ``(K, K)`` slice
    ``costs[t]`` is what the DP reads, one interval at a time.

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
    change_span
        ``(K, K)`` seconds that loss is spread over (the rewrite's length); None: the
        change costs its whole capacity for ``change_seconds``.

    ``capacity`` may have a leading sample axis ``(S, T, K)`` (``load`` ``(S, T)``): with
    ``mean=True`` the tensor is the mean over the samples ``(T, K, K)`` (the expected
    cost that :func:`planner.planning.pipeline.make_problem` optimises), else it is
    ``(S, T, K, K)``, one cost tensor per sample.

    Reading
    -------
    ``costs[t]`` (K, K); ``costs[t, lo:hi]`` rows; ``costs[t, a, b]`` with ints or
    equal-length 1-D integer arrays (one switch each); per sample (``mean=False``)
    ``costs[:, t, a, b]`` (S,) or (S, n). ``np.asarray(costs)`` materialises it (small
    problems, tests); any other index is read from that.
    """

    def __init__(
        self,
        capacity: np.ndarray,
        *,
        restart: np.ndarray,
        model: ReconfigModel,
        step_seconds: float,
        load: np.ndarray | None = None,
        served: Served = "capacity",
        change_seconds: np.ndarray | None = None,
        headroom_weight: float = 0.0,
        mean: bool = True,
        change_span: np.ndarray | None = None,
    ) -> None:
        cap = np.ascontiguousarray(capacity, dtype=float)
        samples = cap.ndim == 3
        if samples:
            if cap.shape[0] < 1:
                raise ValidationError("capacity: at least one sample is needed")
            rst, ld = _check_cost_inputs(cap[0], restart=restart, step_seconds=step_seconds,
                                         load=None, served="capacity")[1], None
            _check_served(served, load, 0.0)
            if served != "capacity" and load is not None:
                ld = np.ascontiguousarray(load, dtype=float)
                if ld.shape != cap.shape[:-1]:
                    raise ValidationError(
                        f"load: expected shape {cap.shape[:-1]}, got {ld.shape}")
        else:
            cap, rst, ld = _check_cost_inputs(cap, restart=restart, step_seconds=step_seconds,
                                              load=load, served=served)
        _check_served(served, load, headroom_weight)
        if not np.all(np.isfinite(cap)) or (ld is not None and not np.all(np.isfinite(ld))):
            raise ValidationError("capacity/load: must be finite")
        n_k = cap.shape[-1]
        extra = np.where(rst, model.warmup_seconds, model.live_seconds)
        self._spans = _span_groups(change_seconds, change_span, n_k, step_seconds)
        self._cap = cap
        self._load = ld
        self._hw = headroom_weight if served == "work" else 0.0
        self._restart = rst
        self._extra = extra if np.any(extra > 0) else None
        self._pieces = _restart_pieces(model, step_seconds)
        self._keep = 1.0 - model.survivor_penalty
        self._samples = samples
        self._cache: dict[tuple[int | None, int], Any] = {}
        self.mean = bool(mean) or not samples
        n_t = cap.shape[-2]
        self.shape: tuple[int, ...] = (
            (n_t, n_k, n_k) if self.mean else (cap.shape[0], n_t, n_k, n_k))
        self.ndim = len(self.shape)
        self.dtype = np.dtype(float)

    # ----------------------------------------------------------------- reading
    def rows(self, t: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """``costs[t, lo:hi, :]`` (the mean over the samples when they are averaged)."""
        hi = self.shape[-1] if hi is None else hi
        if not self._samples:
            return self._rows(None, t, lo, hi)
        if not self.mean:
            raise ValidationError("costs: per-sample costs are read as costs[:, t, a, b]")
        acc = np.zeros((hi - lo, self.shape[-1]))
        for s in range(self._cap.shape[0]):  # in sample order, as the samples were summed
            acc += self._rows(s, t, lo, hi)
        return acc / self._cap.shape[0]

    def pairs(self, t: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``costs[t_i, a_i, b_i]`` for equal-length integer arrays (per sample: ``(S, n)``)."""
        t, a, b = (np.asarray(x, dtype=np.int64) for x in (t, a, b))
        if not self._samples:
            return self._pairs(self._cap, self._load, t, a, b)
        if not self.mean:
            return self._pairs(self._cap, self._load, t, a, b)
        acc = np.zeros(np.broadcast_shapes(t.shape, a.shape, b.shape))
        for s in range(self._cap.shape[0]):
            acc += self._pairs(self._cap[s], None if self._load is None else self._load[s],
                               t, a, b)
        return acc / self._cap.shape[0]

    def dense(self) -> np.ndarray:
        """The materialised tensor (``T K^2`` numbers, or ``S T K^2``)."""
        n_t = self.shape[-3]
        if self.mean:
            return np.stack([self.rows(t) for t in range(n_t)]) if n_t else np.zeros(self.shape)
        return np.stack([
            np.stack([self._rows(s, t, 0, self.shape[-1]) for t in range(n_t)])
            for s in range(self._cap.shape[0])
        ])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        if self.mean:
            if isinstance(key, int | np.integer):
                return self.rows(int(key))
            if (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], int | np.integer)
                    and isinstance(key[1], slice) and key[1].step in (None, 1)):
                lo, hi, _ = key[1].indices(self.shape[-1])
                return self.rows(int(key[0]), lo, max(lo, hi))
            if isinstance(key, tuple) and len(key) == 3 and all(_is_index(k) for k in key):
                out = self.pairs(*(np.asarray(k) for k in key))
                return float(out) if out.ndim == 0 else out
        elif (isinstance(key, tuple) and len(key) == 4 and key[0] == slice(None)
              and all(_is_index(k) for k in key[1:])):
            return self.pairs(*(np.asarray(k) for k in key[1:]))
        return self.dense()[key]

    def __len__(self) -> int:
        return self.shape[0]

    # ------------------------------------------------------------- the maths
    def _vectors(self, s: int | None, t: int) -> tuple[
            list[tuple[Any, ...]], np.ndarray | None, list[tuple[np.ndarray, np.ndarray]]]:
        """What interval ``t``'s ``(K, K)`` costs are made of, as K-vectors (sample ``s``),
        computed once for all the row blocks read: per piece of a batch, ``("b", short)``
        (the last batch: its lost credit depends on b only), ``("a", g_b, g_a)`` (the
        first: the credit of b and of the up nodes running a) or ``("ab", g_b, done_b,
        pending_a, load)``; the new configuration's full credit (None: no extra
        seconds); and per group of spanned changes, its ``(K, K)`` mask and the credit it
        loses over its span."""
        key = (s, t)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if len(self._cache) >= 256:
            self._cache.clear()
        cap = self._cap if s is None else self._cap[s]
        load = self._load if s is None or self._load is None else self._load[s]
        n_t = cap.shape[0]
        hw, keep = self._hw, self._keep
        pieces: list[tuple[Any, ...]] = []
        for dt, u_off, done, pending in self._pieces:
            u = min(t + u_off, n_t - 1)
            cu = cap[u]
            ld = None if load is None else float(load[u])
            g_b = _credit_vector(cu, ld, hw)
            if pending == 0.0:  # the last batch: the up nodes all run b
                short = g_b - _credit_vector(keep * (done * cu), ld, hw)
                pieces.append(("b", np.maximum(short, 0.0) * dt))
            elif done == 0.0:  # the first batch: the up nodes all run a
                pieces.append(("a", dt, g_b, _credit_vector(keep * (pending * cu), ld, hw)))
            else:
                pieces.append(("ab", dt, g_b, done * cu, pending * cu, ld))
        full = None
        if self._extra is not None:
            full = _credit_vector(cap[t], None if load is None else float(load[t]), hw)
        spans = []  # a change's loss over its span: (mask, K-vector) per group
        for mask, share, span in self._spans:
            lost = np.zeros(cap.shape[-1])
            for dt, u_off in span:
                u = min(t + u_off, n_t - 1)
                ld = None if load is None else float(load[u])
                short = (_credit_vector(cap[u], ld, hw)
                         - _credit_vector((1.0 - share) * cap[u], ld, hw))
                lost += dt * np.maximum(short, 0.0)
            spans.append((mask, lost))
        self._cache[key] = (pieces, full, spans)
        return pieces, full, spans

    def _rows(self, s: int | None, t: int, lo: int, hi: int) -> np.ndarray:
        """``(hi - lo, K)`` costs of sample ``s`` (None: no samples): the rolling restart's
        lost credit, batch by batch (:func:`transition_costs`' formula), for restart
        switches, plus the extra seconds of the new configuration's credit, 0 on the
        diagonal. Worked out in blocks of :data:`ROW_BLOCK` rows, in place."""
        n_k = self.shape[-1]
        pieces, full, spans = self._vectors(s, t)
        out = np.zeros((hi - lo, n_k))
        buf = np.empty((min(ROW_BLOCK, hi - lo), n_k))
        tmp = np.empty_like(buf)
        hw, keep = self._hw, self._keep
        for piece in pieces:
            if piece[0] == "b":
                out += piece[1][None, :]
                continue
            for r0 in range(lo, hi, ROW_BLOCK):
                r1 = min(hi, r0 + ROW_BLOCK)
                x = buf[: r1 - r0]
                if piece[0] == "a":
                    _kind, dt, g_b, g_a = piece
                    np.subtract(g_b[None, :], g_a[r0:r1, None], out=x)
                else:
                    _kind, dt, g_b, done_b, pending_a, ld = piece
                    # actual = keep * (done * cap_b + pending * cap_a)
                    np.add(done_b[None, :], pending_a[r0:r1, None], out=x)
                    x *= keep
                    _credit_inplace(x, ld, hw, tmp[: r1 - r0])
                    np.subtract(g_b[None, :], x, out=x)  # short of the new configuration
                np.maximum(x, 0.0, out=x)
                x *= dt
                out[r0 - lo : r1 - lo] += x
        out *= self._restart[lo:hi]  # a live change loses no batch
        if full is not None and self._extra is not None:
            out += self._extra[lo:hi] * full[None, :]
        for mask, lost in spans:
            out += mask[lo:hi] * lost[None, :]
        idx = np.arange(lo, hi)
        out[idx - lo, idx] = 0.0
        return out

    def _pairs(self, cap: np.ndarray, load: np.ndarray | None, t: np.ndarray, a: np.ndarray,
               b: np.ndarray) -> np.ndarray:
        """Costs of single switches (vectorised over them; ``cap`` may carry samples)."""
        n_t = cap.shape[-2]
        t, a, b = np.broadcast_arrays(t, a, b)
        out = np.zeros(cap.shape[:-2] + t.shape)
        hw, keep = self._hw, self._keep
        for dt, u_off, done, pending in self._pieces:
            u = np.minimum(t + u_off, n_t - 1)
            cap_a, cap_b = cap[..., u, a], cap[..., u, b]
            ld = None if load is None else load[..., u]
            actual = keep * (done * cap_b + pending * cap_a)
            short = credit(cap_b, ld, hw) - credit(actual, ld, hw)
            out += dt * np.maximum(short, 0.0)
        out = np.where(self._restart[a, b], out, 0.0)
        if self._extra is not None:
            full = credit(cap[..., t, b], None if load is None else load[..., t], hw)
            out = out + self._extra[a, b] * full
        for mask, share, span in self._spans:
            lost = np.zeros_like(out)
            for dt, u_off in span:
                u = np.minimum(t + u_off, n_t - 1)
                cap_b = cap[..., u, b]
                ld = None if load is None else load[..., u]
                short = credit(cap_b, ld, hw) - credit((1.0 - share) * cap_b, ld, hw)
                lost += dt * np.maximum(short, 0.0)
            out = out + np.where(mask[a, b], lost, 0.0)
        return np.where(a == b, 0.0, out)


def _is_index(key: Any) -> bool:
    """An int or an integer array (one switch per entry)."""
    if isinstance(key, int | np.integer):
        return True
    return isinstance(key, np.ndarray) and key.dtype.kind in "iu" and key.ndim <= 1


def _span_pieces(seconds: float, step_seconds: float) -> list[tuple[float, int]]:
    """``(seconds, interval offset)`` of ``seconds`` from the start of an interval, split at
    interval boundaries."""
    out, lo = [], 0.0
    while seconds - lo > 1e-12:
        u_off = math.floor(lo / step_seconds + 1e-12)
        end = min(seconds, (u_off + 1) * step_seconds)
        out.append((end - lo, u_off))
        lo = end
    return out


def _span_groups(
    change_seconds: np.ndarray | None, change_span: np.ndarray | None, n_k: int,
    step_seconds: float,
) -> list[tuple[np.ndarray, float, list[tuple[float, int]]]]:
    """The switches that cost ``change_seconds`` of full throughput, grouped by cost and
    span: ``(mask (K, K), share of capacity lost, pieces of the span)``.

    A change that costs ``c`` seconds of full throughput over a span of ``d`` seconds (its
    rewrite, measured: :class:`planner.model.change_cost.ChangeCost`) takes the share ``c / d``
    of the capacity for ``d`` seconds; without a span, or a span shorter than ``c``, all
    of it for ``c`` seconds. What it loses is priced at the load of each interval it
    spans: at saturation ``c`` seconds of full throughput, below it only what the spare
    capacity does not absorb (a rewrite in a quiet hour is nearly free).
    """
    if change_seconds is None:
        return []
    cs = np.asarray(change_seconds, dtype=float)
    if cs.shape != (n_k, n_k) or not np.all(np.isfinite(cs)) or np.any(cs < 0):
        raise ValidationError(f"change_seconds: expected ({n_k}, {n_k}) values >= 0")
    span = cs if change_span is None else np.asarray(change_span, dtype=float)
    if span.shape != (n_k, n_k) or not np.all(np.isfinite(span)) or np.any(span < 0):
        raise ValidationError(f"change_span: expected ({n_k}, {n_k}) values >= 0")
    span = np.maximum(span, cs)
    costly = cs > 0
    np.fill_diagonal(costly, False)
    groups = []
    for c, d in sorted({(float(c), float(d)) for c, d in zip(cs[costly], span[costly],
                                                               strict=True)}):
        mask = costly & (cs == c) & (span == d)
        groups.append((mask, c / d, _span_pieces(d, step_seconds)))
    return groups


def _restart_pieces(model: ReconfigModel, step_seconds: float) -> list[tuple[float, int, float,
                                                                            float]]:
    """``(seconds, interval offset, done share, pending share)`` of each piece of each batch.

    A batch is down ``T_r`` seconds from the start of the switch's interval; a ``T_r`` longer
    than an interval is split at interval boundaries (each piece uses its own interval's
    capacity and load). The first batch has nothing done and the last nothing pending
    (exactly 0: the up nodes then all run one configuration, which costs a vector, not a
    ``(K, K)`` matrix, to price).
    """
    out = []
    done = 0.0
    for f, tr in zip(model.batch_fractions, model.batch_durations, strict=True):
        pending = 1.0 - done - f
        if abs(pending) < 1e-9:  # the last batch (not 5.6e-17 for three thirds)
            pending = 0.0
        lo, hi = 0.0, tr
        while hi - lo > 1e-12:
            u_off = math.floor(lo / step_seconds + 1e-12)
            piece_end = min(hi, (u_off + 1) * step_seconds)
            out.append((piece_end - lo, u_off, done, pending))
            lo = piece_end
        done += f
    return out


def _credit_vector(x: np.ndarray, load: float | None, headroom_weight: float) -> np.ndarray:
    """:func:`credit` of ``x`` at one interval's ``load`` (None: ``x``)."""
    return x if load is None else credit(x, np.float64(load), headroom_weight)


def _credit_inplace(x: np.ndarray, load: float | None, headroom_weight: float,
                    tmp: np.ndarray) -> None:
    """``x = credit(x, load, headroom_weight)`` in place (``tmp`` a work buffer of x's shape).

    The same numbers as :func:`credit` for one scalar load: where ``x > load`` the headroom
    term is ``weight * load * (1 - load / x)``, elsewhere 0, which dividing by
    ``max(x, load)`` gives (``1 - load / load`` is 0) without dividing by an ``x`` of 0 (a
    batch of every node).
    """
    if load is None:
        return
    ld = np.float64(load)
    headroom = headroom_weight != 0.0 and ld > 0.0  # at no load the term is 0
    if headroom:
        np.maximum(x, ld, out=tmp)  # x <= load: 1 - load / load = 0, no term
        np.divide(ld, tmp, out=tmp)
        np.subtract(1.0, tmp, out=tmp)
        tmp *= headroom_weight * ld
    np.minimum(x, ld, out=x)
    if headroom:
        x += tmp


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
        ``(T, K, K)`` ops lost by a switch ``a -> b`` starting at ``t``: an array, or a
        :class:`SwitchCostTensor` that computes them when read (what
        :func:`planner.planning.pipeline.make_problem` builds: memory linear in T).
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
    costs: np.ndarray | SwitchCostTensor
    lockout: np.ndarray
    step_seconds: float
    initial: int = 0
    initial_lockout: int = 0

    def __post_init__(self) -> None:
        s = np.asarray(self.served, dtype=float)
        if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 1:
            raise ValidationError(f"served: expected a non-empty (T, K) matrix, got {s.shape}")
        n_t, n_k = s.shape
        # a SwitchCostTensor checked its (finite) inputs when it was made
        lazy = isinstance(self.costs, SwitchCostTensor)
        c = self.costs if lazy else np.asarray(self.costs, dtype=float)
        if c.shape != (n_t, n_k, n_k):
            raise ValidationError(f"costs: expected shape {(n_t, n_k, n_k)}, got {c.shape}")
        lk = np.asarray(self.lockout, dtype=np.int64)
        if lk.shape != (n_k, n_k) or np.any(lk < 1):
            raise ValidationError(f"lockout: expected ({n_k}, {n_k}) integers >= 1")
        if not np.all(np.isfinite(s)) or not (lazy or np.all(np.isfinite(c))):
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
    wishes = np.ascontiguousarray(g.T)  # interval-major: each step reads one row
    fixed = np.empty_like(wishes)
    served, lock = problem.served, problem.lockout
    # Decode first, collecting every switch, then read all their costs at once (one call
    # whether the costs are stored or computed) and add up in the order decoding met them.
    events: list[np.ndarray] = []  # per interval: the genomes switching then
    sources, targets = [], []
    for t in range(n_t):
        want = wishes[t]
        sw = (want != cur) & (busy <= t)
        idx = sw.nonzero()[0]
        events.append(idx)
        if len(idx):
            a, b = cur[idx], want[idx]
            sources.append(a)
            targets.append(b)
            busy[idx] = t + lock[a, b]
            cur[idx] = b
        fixed[t] = cur
    counts = [len(idx) for idx in events]
    if sum(counts):
        ts = np.repeat(np.arange(n_t), counts)
        cost = np.asarray(problem.costs[ts, np.concatenate(sources), np.concatenate(targets)],
                          dtype=float)
    gained = served[np.arange(n_t)[:, None], fixed] * dt  # (T, P)
    total = np.zeros(n_p)
    pos = 0
    for t in range(n_t):
        if counts[t]:
            total[events[t]] -= cost[pos:pos + counts[t]]
            pos += counts[t]
        total += gained[t]
    return total, fixed.T


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
