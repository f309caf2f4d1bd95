"""Plan optimisers: a DEAP genetic algorithm, the exact dynamic programme, baselines.

All work on a :class:`planner.planning.costbenefit.PlanningProblem` (served throughput per
interval and candidate, switch costs, restart lock-outs), so they are independent of
forecasting and of the performance model.

* :func:`solve_dp` -- the exact optimum over (interval, candidate) in O(T K^2): the
  reference the GA is measured against.
* :func:`solve_ga` -- SOPHIA's search method: a genetic algorithm (DEAP) over wish
  lists of one candidate per interval, repaired to feasible schedules (a change during
  a rolling restart is ignored) and written back (Lamarckian). The population is seeded
  with heuristic plans (stay, static best, per-window best), mutation works on
  segments (move a boundary, drop a segment, retarget a segment to its best candidate)
  and the best plan is polished by a segment hill-climb. Several independent searches
  (``searches``, optionally in ``workers`` processes) are run and the best is kept.
* Baselines from SOPHIA's evaluation: :func:`baseline_default`,
  :func:`baseline_static_optimal`, :func:`baseline_naive`, :func:`baseline_theoretical_best`.

DEAP is used only in this module; its creator classes are made in :func:`_toolbox`
(never at import time, never twice).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.errors import ValidationError, at_least
from planner.planning.costbenefit import (
    ROW_BLOCK,
    Evaluation,
    PlanningProblem,
    SwitchCostTensor,
    decode,
    evaluate,
    evaluate_population,
)

__all__ = [
    "GAOptions",
    "GAResult",
    "baseline_default",
    "baseline_naive",
    "baseline_static_optimal",
    "baseline_theoretical_best",
    "heuristic_genomes",
    "simplify",
    "solve_dp",
    "solve_ga",
]

Progress = Callable[[int, int, float], None]
#: Single-interval moves tried per hill-climb round (sampled above this).
MAX_POINT_MOVES = 200
#: Candidates a hill-climb round retargets a segment to, or detours through: every one up
#: to this many, else the ones serving most over the segment (512 candidates would make
#: every round thousands of plans of no use).
MAX_SEGMENT_TARGETS = 32


# ----------------------------------------------------------------------- exact
def solve_dp(problem: PlanningProblem) -> Evaluation:
    """The optimal plan by dynamic programming over (interval, running candidate).

    ``V[t, k]`` is the best value from interval ``t`` on with ``k`` running and no
    restart in progress; a switch ``k -> b`` at ``t`` earns ``b``'s throughput over its
    lock-out, pays ``costs[t, k, b]`` and continues from ``V[t + lockout, b]``.

    O(T K^2) time and O(T K + K^2) memory: the costs are read one interval (and one block
    of :data:`planner.planning.costbenefit.ROW_BLOCK` rows) at a time, so a
    :class:`planner.planning.costbenefit.SwitchCostTensor` is never materialised; what a switch
    earns over its lock-out is one ``K`` row per distinct lock-out length (2: live and
    restart), not a ``(K, K)`` gather.
    """
    n_t, n_k = problem.n_steps, problem.n_candidates
    dt = problem.step_seconds
    cum = np.zeros((n_t + 1, n_k))
    np.cumsum(problem.served * dt, axis=0, out=cum[1:])
    value = np.zeros((n_t + 1, n_k))
    choice = np.zeros((n_t, n_k), dtype=np.int64)  # -1 stay, else target
    lock = problem.lockout
    lengths = np.unique(lock)  # distinct lock-outs, ascending
    code = np.searchsorted(lengths, lock)  # (K, K) index into lengths
    longer = code == 1  # with two lengths: the switches that take the longer one
    costs = problem.costs
    block = ROW_BLOCK
    best_b = np.empty(n_k, dtype=np.int64)
    best_move = np.empty(n_k)
    for t in range(n_t - 1, -1, -1):
        stay = problem.served[t] * dt + value[t + 1]
        end = np.minimum(t + lengths, n_t)  # (L,)
        # earned[l, b]: b's throughput over lock-out l, then V from where it ends
        earned = cum[end] - cum[t][None, :] + value[end]
        for lo in range(0, n_k, block):
            hi = min(n_k, lo + block)
            rows = np.arange(hi - lo)
            cost = _cost_rows(costs, t, lo, hi)
            move = (earned[0] - cost if len(lengths) == 1
                    else np.subtract(np.where(longer[lo:hi], earned[1], earned[0]), cost,
                                     out=cost) if len(lengths) == 2
                    else earned[code[lo:hi], np.arange(n_k)[None, :]] - cost)
            move[rows, rows + lo] = -np.inf
            best_b[lo:hi] = np.argmax(move, axis=1)
            best_move[lo:hi] = move[rows, best_b[lo:hi]]
        better = best_move > stay + 1e-9 * np.maximum(1.0, np.abs(stay))
        value[t] = np.where(better, best_move, stay)
        choice[t] = np.where(better, best_b, -1)
    # forward pass
    sched = np.empty(n_t, dtype=np.int64)
    cur = problem.initial
    t = 0
    start = min(problem.initial_lockout, n_t)
    sched[:start] = cur
    t = start
    while t < n_t:
        b = int(choice[t, cur])
        if b < 0:
            sched[t] = cur
            t += 1
        else:
            end = min(t + int(lock[cur, b]), n_t)
            sched[t:end] = b
            cur = b
            t = end
    return evaluate(problem, sched)


def _cost_rows(costs: np.ndarray | SwitchCostTensor, t: int, lo: int, hi: int) -> np.ndarray:
    """``costs[t, lo:hi]``, the caller's to overwrite: a copy of stored costs, or computed
    for these rows only."""
    if isinstance(costs, SwitchCostTensor):
        return costs.rows(t, lo, hi)
    return np.array(costs[t, lo:hi], dtype=float)


# ------------------------------------------------------------------- baselines
def baseline_default(problem: PlanningProblem, *, default: int | None = None) -> Evaluation:
    """Stay in ``default`` (the problem's initial configuration unless given)."""
    k = problem.initial if default is None else default
    return evaluate(problem, decode(problem, np.full(problem.n_steps, k)))


def baseline_static_optimal(problem: PlanningProblem) -> Evaluation:
    """SOPHIA's Static-Opt: the one configuration best over the whole (known) horizon.

    Idealised as in SOPHIA: it is assumed to be in place from the start, so no switch
    cost is charged (the evaluation's ``initial`` is that configuration).
    """
    k = int(np.argmax(problem.served.sum(axis=0)))
    ideal = PlanningProblem(
        served=problem.served,
        costs=problem.costs,
        lockout=problem.lockout,
        step_seconds=problem.step_seconds,
        initial=k,
    )
    return evaluate(ideal, np.full(problem.n_steps, k))


def baseline_naive(
    problem: PlanningProblem, *, wishes: Sequence[int] | np.ndarray | None = None
) -> Evaluation:
    """SOPHIA's Naive: switch to the current best whenever it changes, ignoring cost.

    ``problem`` should carry the all-nodes-at-once cost model; ``wishes`` is the
    configuration the static tuner names per interval (default: the best for each
    interval of ``problem``).
    """
    want = np.argmax(problem.served, axis=1) if wishes is None else np.asarray(wishes)
    return evaluate(problem, decode(problem, want))


def baseline_theoretical_best(problem: PlanningProblem) -> float:
    """Upper bound: the best candidate in every interval, no reconfiguration cost."""
    return float(problem.served.max(axis=1).sum() * problem.step_seconds)


# ------------------------------------------------------------------------ GA
@dataclass(frozen=True)
class GAOptions:
    """Genetic algorithm settings (defaults meet the benchmark targets on 2 cores).

    ``searches`` independent runs (seeds ``seed``, ``seed + 1``, ...), ``workers``
    processes to run them in (1 = in this process).
    """

    seed: int = 0
    population: int = 48
    generations: int = 60
    searches: int = 2
    workers: int = 1
    crossover: float = 0.8
    mutation: float = 0.5
    tournament: int = 3
    elite: int = 2
    polish: bool = True
    polish_top: int = 1
    time_limit: float | None = None

    def __post_init__(self) -> None:
        at_least(self, population=4, generations=0)
        if self.searches < 1 or self.workers < 1:
            raise ValidationError("searches and workers: must be >= 1")
        if not (0 <= self.crossover <= 1 and 0 <= self.mutation <= 1):
            raise ValidationError("crossover and mutation: probabilities in [0, 1]")
        at_least(self, seed=0)


@dataclass(frozen=True)
class GAResult:
    """Outcome of :func:`solve_ga`."""

    evaluation: Evaluation
    options: GAOptions
    seconds: float
    evaluations: int
    history: tuple[float, ...] = field(default=())  # best total per generation (search 0)


def heuristic_genomes(problem: PlanningProblem) -> list[np.ndarray]:
    """Heuristic wish lists that seed the population.

    Stay put; each candidate that is best in some interval held constant (includes the
    static best); and, for windows of 1, L, 2L, 4L, ... intervals (L the restart
    lock-out), the candidate best over each window.
    """
    n_t, n_k = problem.n_steps, problem.n_candidates
    out = [np.full(n_t, problem.initial, dtype=np.int64)]
    total = problem.served.sum(axis=0)
    best_any = set(np.argmax(problem.served, axis=1).tolist())
    best_any.add(int(np.argmax(total)))
    for k in sorted(best_any, key=lambda k: -total[k]):
        out.append(np.full(n_t, k, dtype=np.int64))
    # live-connected groups: the per-interval best within a group needs no restart
    live = (problem.lockout == 1) & (problem.lockout.T == 1)
    seen: set[int] = set()
    for k in range(n_k):
        if k in seen:
            continue
        group, todo = {k}, [k]
        while todo:
            a = todo.pop()
            for b in np.flatnonzero(live[a]).tolist():
                if b not in group:
                    group.add(b)
                    todo.append(b)
        seen |= group
        if 1 < len(group) < n_k or problem.initial in group:
            members = np.array(sorted(group))
            out.append(members[np.argmax(problem.served[:, members], axis=1)])
    lmax = int(problem.lockout.max())
    widths = sorted({1, lmax, 2 * lmax, 4 * lmax, 8 * lmax, max(1, n_t // 4)})
    for w in widths:
        if w >= n_t:
            continue
        g = np.empty(n_t, dtype=np.int64)
        for s in range(0, n_t, w):
            g[s : s + w] = int(np.argmax(problem.served[s : s + w].sum(axis=0)))
        out.append(g)
    return out[: max(1, 4 * n_k + 8)]


def _segments(sched: Sequence[int] | np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, value) runs of a schedule."""
    a = np.asarray(sched)
    if not len(a):
        return []
    cuts = (np.flatnonzero(a[1:] != a[:-1]) + 1).tolist()
    return [(s, e, int(a[s])) for s, e in zip([0, *cuts], [*cuts, len(a)], strict=True)]


def _best_targets(window: np.ndarray) -> list[int]:
    """The candidates a segment move tries: all of them, or with more than
    :data:`MAX_SEGMENT_TARGETS` the ones that serve the most over ``window`` ((K,) sums),
    in index order."""
    n_k = len(window)
    if n_k <= MAX_SEGMENT_TARGETS:
        return list(range(n_k))
    return sorted(np.argpartition(-window, MAX_SEGMENT_TARGETS)[:MAX_SEGMENT_TARGETS].tolist())


def _neighbours(
    problem: PlanningProblem, sched: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Segment moves around ``sched``.

    Drop a segment; retarget a segment to every other candidate; shift a boundary by a
    few intervals; and insert a new segment (of the best candidate over it) of length
    L, 2L, 4L (L the longest lock-out) at every interval.
    """
    n_t, n_k = problem.n_steps, problem.n_candidates
    segs = _segments(sched.tolist())
    lmax = int(problem.lockout.max())
    shifts = sorted({1, 2, 3, max(1, lmax // 2), lmax, lmax + 1, 2 * lmax})
    cands: list[np.ndarray] = []
    cum = np.zeros((n_t + 1, n_k))
    np.cumsum(problem.served, axis=0, out=cum[1:])
    for i, (s, e, v) in enumerate(segs):
        prev_v = segs[i - 1][2] if i > 0 else problem.initial
        g = sched.copy()
        g[s:e] = prev_v  # drop (merge into the previous segment)
        cands.append(g)
        for k in _best_targets(cum[e] - cum[s]):
            if k != v and k != prev_v:
                g = sched.copy()
                g[s:e] = k
                cands.append(g)
        if i > 0 and s > 0:  # detour: reach v through an intermediate candidate
            for k in _best_targets(cum[s] - cum[max(segs[i - 1][0], s - lmax)]):
                if k != v and k != prev_v:
                    d = int(problem.lockout[prev_v, k])
                    if s - d >= segs[i - 1][0]:
                        g = sched.copy()
                        g[s - d : s] = k
                        cands.append(g)
        for d in shifts:
            if s - d >= 0 and i > 0:
                g = sched.copy()
                g[s - d : s] = v
                cands.append(g)
            if s + d < e:
                g = sched.copy()
                g[s : s + d] = prev_v
                cands.append(g)
    # point moves: one interval to another candidate (cheap live hops); sampled when many
    ts_, ks_ = np.repeat(np.arange(n_t), n_k), np.tile(np.arange(n_k), n_t)
    keep = ks_ != sched[ts_]
    ts_, ks_ = ts_[keep], ks_[keep]
    if len(ts_) > MAX_POINT_MOVES:
        pick = rng.choice(len(ts_), MAX_POINT_MOVES, replace=False)
        ts_, ks_ = ts_[pick], ks_[pick]
    pts = np.repeat(sched[None, :], len(ts_), axis=0)
    pts[np.arange(len(ts_)), ts_] = ks_
    cands.extend(pts)
    for length in sorted({lmax, 2 * lmax, 4 * lmax}):
        for a in range(0, n_t):
            b = min(n_t, a + length)
            best = int(np.argmax(cum[b] - cum[a]))
            if np.any(sched[a:b] != best):
                g = sched.copy()
                g[a:b] = best
                cands.append(g)
    if not cands:
        return np.empty((0, n_t), dtype=np.int64)
    return np.stack(cands)


def _polish(
    problem: PlanningProblem, sched: np.ndarray, value: float, *, seed: int, rounds: int = 200
) -> tuple[np.ndarray, float, int]:
    """Steepest-ascent hill climb over segment moves; returns (schedule, value, evals)."""
    evals = 0
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        cands = _neighbours(problem, sched, rng)
        if not len(cands):
            break
        vals, fixed = evaluate_population(problem, cands)
        evals += len(cands)
        i = int(np.argmax(vals))
        if vals[i] <= value + 1e-9 * max(1.0, abs(value)):
            break
        sched, value = fixed[i], float(vals[i])
    return sched, value, evals


def simplify(problem: PlanningProblem, schedule: np.ndarray) -> np.ndarray:
    """Drop switches that gain nothing (ties between equally fast candidates).

    Repeatedly merges a segment into its predecessor while that does not lower the
    total, so a plan never carries steps that change parameters for no benefit.
    """
    sched = np.asarray(schedule, dtype=np.int64).copy()
    value = float(evaluate_population(problem, sched[None, :])[0][0])
    changed = True
    while changed:
        changed = False
        segs = _segments(sched.tolist())
        for i in range(len(segs) - 1, -1, -1):
            s, e, v = segs[i]
            prev_v = segs[i - 1][2] if i > 0 else problem.initial
            if v == prev_v:
                continue
            trial = sched.copy()
            trial[s:e] = prev_v
            vals, fixed = evaluate_population(problem, trial[None, :])
            if vals[0] >= value - 1e-9 * max(1.0, abs(value)):
                sched, value, changed = fixed[0], float(vals[0]), True
                break
    return sched


def _toolbox() -> tuple[Any, Any]:
    """DEAP creator classes and a toolbox, made on first use only."""
    from deap import base, creator, tools

    if not hasattr(creator, "KairosPlanFitness"):
        creator.create("KairosPlanFitness", base.Fitness, weights=(1.0,))
    if not hasattr(creator, "KairosPlan"):
        creator.create("KairosPlan", list, fitness=creator.KairosPlanFitness)
    tb = base.Toolbox()
    tb.register("mate", tools.cxTwoPoint)
    return creator, tb


def _mutate(
    ind: list[int], rng: random.Random, problem: PlanningProblem, top: list[list[int]],
    lmax: int | None = None,
) -> None:
    """Segment mutation in place (one of four moves); ``lmax`` the longest lock-out (found
    when not given)."""
    n_t, n_k = problem.n_steps, problem.n_candidates
    lmax = int(problem.lockout.max()) if lmax is None else lmax
    segs = _segments(ind)
    move = rng.random()
    if move < 0.3 and len(segs) > 1:  # shift a boundary
        i = rng.randrange(1, len(segs))
        s, e, v = segs[i]
        d = rng.randint(1, max(1, lmax))
        if rng.random() < 0.5:
            for t in range(max(0, s - d), s):
                ind[t] = v
        else:
            pv = segs[i - 1][2]
            for t in range(s, min(e, s + d)):
                ind[t] = pv
        return
    if move < 0.5 and len(segs) > 1:  # drop a segment
        i = rng.randrange(len(segs))
        s, e, _ = segs[i]
        v = segs[i - 1][2] if i > 0 else segs[1][2]
        for t in range(s, e):
            ind[t] = v
        return
    if move < 0.75:  # retarget a segment to its best candidate (or a random one)
        s, e, _ = segs[rng.randrange(len(segs))]
        if rng.random() < 0.7:
            k = int(np.argmax(problem.served[s:e].sum(axis=0)))
        else:
            k = rng.randrange(n_k)
        for t in range(s, e):
            ind[t] = k
        return
    # a new block of a good candidate
    length = min(n_t, max(1, int(rng.expovariate(1.0 / (2 * lmax + 1)))))
    s = rng.randrange(0, max(1, n_t - length + 1))
    choices = top[s]
    k = choices[rng.randrange(len(choices))] if rng.random() < 0.8 else rng.randrange(n_k)
    for t in range(s, min(n_t, s + length)):
        ind[t] = k


def next_generation(
    pop: list[Any], options: GAOptions, rng: random.Random, make: Callable[[Any], Any],
    mate: Callable[[Any, Any], Any], mutate: Callable[[Any], Any],
    assess: Callable[[list[Any]], None],
) -> list[Any]:
    """One elitist generation: the ``options.elite`` best kept, the rest chosen by tournament,
    paired for crossover and mutated (each at its rate); only the changed ones are assessed.
    Shared with bench/hetero_bench.py's GA over heterogeneous plans."""
    from deap import tools

    elite = tools.selBest(pop, options.elite)
    chosen = tools.selTournament(pop, len(pop) - options.elite, tournsize=options.tournament)
    offspring = [make(ind) for ind in chosen]
    for ind, src in zip(offspring, chosen, strict=True):
        ind.fitness.values = src.fitness.values
    for i in range(1, len(offspring), 2):
        if rng.random() < options.crossover:
            mate(offspring[i - 1], offspring[i])
            del offspring[i - 1].fitness.values, offspring[i].fitness.values
    for ind in offspring:
        if rng.random() < options.mutation:
            mutate(ind)
            if ind.fitness.valid:
                del ind.fitness.values
    assess([ind for ind in offspring if not ind.fitness.valid])
    kept = [make(e) for e in elite]
    for e, src in zip(kept, elite, strict=True):
        e.fitness.values = src.fitness.values
    return kept + offspring


def _run_search(
    problem: PlanningProblem, options: GAOptions, seed: int, progress: Progress | None,
    search_index: int, deadline: float | None,
) -> tuple[np.ndarray, float, int, list[float]]:
    creator, tb = _toolbox()
    rng = random.Random(seed)
    n_t, n_k = problem.n_steps, problem.n_candidates
    order = np.argsort(-problem.served, axis=1)
    top = [order[t, : min(3, n_k)].tolist() for t in range(n_t)]

    lmax = int(problem.lockout.max())

    def make(genome: Sequence[int] | np.ndarray) -> Any:
        return creator.KairosPlan(genome.tolist() if isinstance(genome, np.ndarray)
                                  else map(int, genome))

    seeds = heuristic_genomes(problem)
    pop = [make(g) for g in seeds[: options.population]]
    while len(pop) < options.population:
        base_g = list(seeds[rng.randrange(len(seeds))])
        for _ in range(rng.randint(1, 4)):
            _mutate(base_g, rng, problem, top, lmax)
        pop.append(make(base_g))

    evals = 0

    def assess(inds: list[Any]) -> None:
        nonlocal evals
        if not inds:
            return
        vals, fixed = evaluate_population(problem, np.array(inds, dtype=np.int64))
        evals += len(inds)
        for ind, v, f in zip(inds, vals, fixed, strict=True):
            ind[:] = f.tolist()  # Lamarckian repair
            ind.fitness.values = (float(v),)

    assess(pop)
    history = []
    for gen in range(options.generations):
        if deadline is not None and time.perf_counter() > deadline:
            break
        pop = next_generation(pop, options, rng, make, tb.mate,
                              lambda ind: _mutate(ind, rng, problem, top, lmax), assess)
        best_v = max(ind.fitness.values[0] for ind in pop)
        history.append(best_v)
        if progress is not None:
            progress(search_index, gen + 1, best_v)
    best_sched, best_value, extra = _finish(problem, pop, options, seed)
    return best_sched, best_value, evals + extra, history


def distinct_best(pop: list[Any], options: GAOptions) -> list[Any]:
    """The final population's best individuals, distinct, best first: the ``polish_top``
    the polish starts from, or the best alone without it."""
    from deap import tools

    finalists: list[Any] = []
    for ind in tools.selBest(pop, len(pop)):
        if all(list(ind) != list(f) for f in finalists):
            finalists.append(ind)
        if len(finalists) == (options.polish_top if options.polish else 1):
            break
    return finalists


def _finish(
    problem: PlanningProblem, pop: list[Any], options: GAOptions, seed: int
) -> tuple[np.ndarray, float, int]:
    """The final population's best plan, the distinct top ones polished when asked:
    ``(schedule, value, evaluations spent polishing)``."""
    finalists = distinct_best(pop, options)
    best_sched, best_value = np.array(finalists[0], dtype=np.int64), finalists[0].fitness.values[0]
    evals = 0
    if options.polish:
        for ind in finalists:
            sched, value, extra = _polish(
                problem, np.array(ind, dtype=np.int64), ind.fitness.values[0], seed=seed
            )
            evals += extra
            if value > best_value:
                best_sched, best_value = sched, value
    return best_sched, float(best_value), evals


@contextmanager
def seeded_random(seed: int) -> Iterator[None]:
    """The global ``random`` (which DEAP's operators use) seeded for a search, then restored.
    Shared with bench/hetero_bench.py's searches."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _seeded_search(
    problem: PlanningProblem, options: GAOptions, seed: int, progress: Progress | None,
    search_index: int, deadline: float | None,
) -> tuple[np.ndarray, float, int, list[float]]:
    """One search with the global ``random`` seeded, then restored."""
    with seeded_random(seed):
        return _run_search(problem, options, seed, progress, search_index, deadline)


def _search_worker(
    args: tuple[PlanningProblem, GAOptions, int, int, float | None],
) -> tuple[np.ndarray, float, int, list[float]]:
    problem, options, seed, index, deadline = args
    return _seeded_search(problem, options, seed, None, index, deadline)


def solve_ga(
    problem: PlanningProblem,
    *,
    options: GAOptions | None = None,
    progress: Progress | None = None,
) -> GAResult:
    """Search plans with the genetic algorithm; see the module docstring.

    Parameters
    ----------
    problem
        The planning problem.
    options
        GA settings; ``options.seed`` makes the result reproducible.
    progress
        Called as ``progress(search, generation, best_total_ops)`` (in-process runs).

    Returns
    -------
    GAResult
    """
    opts = options or GAOptions()
    t0 = time.perf_counter()
    deadline = None if opts.time_limit is None else t0 + opts.time_limit
    seeds = [opts.seed + i for i in range(opts.searches)]
    results: list[tuple[np.ndarray, float, int, list[float]]]
    if opts.workers > 1 and opts.searches > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(opts.workers, opts.searches)) as pool:
            results = list(
                pool.map(
                    _search_worker,
                    [(problem, opts, s, i, deadline) for i, s in enumerate(seeds)],
                )
            )
    else:
        results = [
            _seeded_search(problem, opts, s, progress, i, deadline) for i, s in enumerate(seeds)
        ]
    best = max(results, key=lambda r: r[1])
    ev = evaluate(problem, simplify(problem, best[0]))
    if not math.isclose(ev.total_ops, best[1], rel_tol=1e-6, abs_tol=1e-6):
        raise AssertionError("GA fitness disagrees with evaluate()")  # pragma: no cover
    return GAResult(
        evaluation=ev,
        options=opts,
        seconds=time.perf_counter() - t0,
        evaluations=sum(r[2] for r in results),
        history=tuple(results[0][3]),
    )
