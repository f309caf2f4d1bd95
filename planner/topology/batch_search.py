"""Fewer safe batches: exact branch and bound on small rings, tabu search on large ones.

The batching problem of :mod:`planner.topology.ring`, stripped of the ring: nodes ``0..n-1``
and requirements ``0..J-1``, each allowing at most ``caps[j]`` of its ``members[j]`` in one
batch. With every cap 1 it is graph colouring (a replica set is a clique); larger caps
(RF 5 at QUORUM allows 2 of 5 down) make it a capacitated colouring.

:func:`fewer_batches` starts from a safe batching with ``k`` batches (DSATUR's) and tries
``k - 1``, ``k - 2``, ... down to the lower bound: it empties the smallest batch into the
others, then moves nodes to cut the total violation, forbidding a node to return to a
batch it just left for a few moves (TabuCol, Hertz and de Werra 1987, with the dynamic
tenure of Galinier and Hao 1999). It goes in rounds: one evaluation of every move of the
nodes in violation, the best move, then up to :data:`EXTRA_MOVES` more that the same
evaluation still prices exactly (nodes sharing no requirement with a node moved in the
round), and every :data:`FREE_MOVE_ROUNDS` rounds a few moves of nodes in no violation
that add none, which TabuCol alone never makes. A batching with zero violation is
checked safe, recounted from scratch, and the next ``k`` starts from it. A ``k`` is
given up when the least violation seen stops falling (see :data:`PATIENCE_PER_NODE`),
so the attempt below the best count, usually out of reach, does not take the rest of
the budget. Ties are broken by a seeded generator and the search is bounded by a number
of moves, so the result is the same on every machine; the wall-clock budget is only a
backstop.

The violation is the number of same-batch pairs of a cap-1 requirement when every cap is
1 (each move is then two vectorised updates), else ``sum_j sum_b max(0, count - cap)``.
Either is zero exactly when every batch is safe.

:func:`fewest_batches_exact` is DSATUR branch and bound for the same problem (any caps):
complete within a budget of search nodes, so on small rings (tens of nodes) it proves
the optimum, and says so only when it finished. :func:`fractional_bound` is the LP
(fractional colouring) lower bound over every safe batch, for rings small enough to
enumerate them: it can prove a count the branch and bound would take too long to.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = [
    "CapacityProblem",
    "ExactResult",
    "SearchResult",
    "fewer_batches",
    "fewest_batches_exact",
    "fractional_bound",
    "violation",
]

#: Moves allowed per node when the caller does not say. 1,000 nodes with 16 vnodes on one
#: rack (Ring.synthetic seed 1) went from DSATUR's 19 batches to 15 within 200,000 moves
#: for each of search seeds 0-99 (91 within 150,000), at about 13 us a move of CPU time.
MOVES_PER_NODE = 200
#: A batch count is given up when the least violation seen, ``best``, has not fallen for
#: ``PATIENCE_PER_NODE * nodes / best**2`` moves. On the 1,000-node one-rack ring, 15
#: batches (reached) went up to 54,500 moves without a new best at 2 violations and, early
#: on, several thousand at 25-30 (``150 * nodes / best`` gave 15 up on 14 of search seeds
#: 0-99); 14 (never reached) stays at 53-61 violations, and this gives it up after 2,400
#: to 6,800 moves in all (median 3,500).
PATIENCE_PER_NODE = 10_000
#: Tabu tenure: this many moves per node in violation, plus U[0, TENURE_SPREAD). Galinier
#: and Hao's 0.6 and 10 took about twice the moves of these on the 1,000-node vnode ring.
TENURE_PER_NODE = 1.0
TENURE_SPREAD = 12
#: Scores are multiplied by this and a uniform draw below it added, to break ties.
TIE_BITS = 20
TIE_SCALE = 1 << TIE_BITS
#: Moves a round of the tabu search may make after its best one, from the same evaluation
#: (see :class:`_Rounds`).
EXTRA_MOVES = 2
#: Every this many rounds, up to FREE_MOVES moves of nodes in no violation that add none
#: (:meth:`_Rounds.free_moves`).
FREE_MOVE_ROUNDS = 50
FREE_MOVES = 10
_NEVER = 1 << 50  # a tabu move's penalty: more than any score plus tie-breaking draw
_least = np.minimum.reduce
#: Search nodes (partial batchings) the exact branch and bound may visit by default: the
#: 60-node one-rack ring at ONE needs 97,701 to prove 4 batches (about 1 s).
EXACT_NODES = 150_000
#: Safe batches :func:`fractional_bound` may enumerate before it gives up (none: the 60-node
#: one-rack QUORUM ring has 2,607, enumerated and solved in about 0.1 s).
FRACTIONAL_SETS = 10_000


@dataclass(frozen=True)
class CapacityProblem:
    """At most ``caps[j]`` of ``members[j]`` (node numbers ``0..n-1``) in any one batch."""

    n: int
    members: tuple[tuple[int, ...], ...]
    caps: tuple[int, ...]

    def node_reqs(self) -> list[list[int]]:
        """The requirements each node belongs to."""
        out: list[list[int]] = [[] for _ in range(self.n)]
        for j, ms in enumerate(self.members):
            for m in ms:
                out[m].append(j)
        return out


@dataclass(frozen=True)
class SearchResult:
    """The fewest batches found (a batch number per node) and what the search spent."""

    batch_of: tuple[int, ...]
    batches: int
    moves: int
    seconds: float
    stopped_by_time: bool
    #: (batches, moves spent until they were found) for each batch count reached.
    reached: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ExactResult:
    """What the branch and bound found: the fewest batches it saw, and whether that is proved.

    ``batch_of`` is None when nothing below the upper bound it was given turned up; with
    ``proved`` that upper bound is then the optimum.
    """

    batch_of: tuple[int, ...] | None
    batches: int
    proved: bool
    nodes: int


def violation(problem: CapacityProblem, batch_of: Sequence[int]) -> int:
    """Total excess over the caps: 0 exactly when every batch is safe."""
    total = 0
    for ms, cap in zip(problem.members, problem.caps, strict=True):
        counts: dict[int, int] = {}
        for m in ms:
            counts[batch_of[m]] = counts.get(batch_of[m], 0) + 1
        total += sum(max(0, c - cap) for c in counts.values())
    return total


class _State(Protocol):
    """A batching under search: ``score[b, v] // TIE_SCALE`` is what ``v`` would violate
    in batch ``b``.

    Moving ``v`` from ``a`` to ``b`` changes ``violation`` by the difference of the two
    counts. The counts are kept multiplied by :data:`TIE_SCALE` so that the search can add
    its tie-breaking draws below them without a multiplication per move. Batch-major, so
    that a move updates contiguous rows.
    """

    score: np.ndarray
    own_at: np.ndarray  # flat index of (where[v], v) in score
    where: list[int]  # the batch of each node
    violation: int
    neighbours: list[np.ndarray]  # the nodes sharing a requirement with each node

    def move(self, v: int, new: int) -> None: ...


class _PairState:
    """Every cap is 1: batches are colours, and two members of a requirement clash.

    ``score[b, v]`` is ``TIE_SCALE`` times the number of nodes in ``b`` sharing a
    requirement with ``v``; a move updates its neighbours' entries in two vectorised
    steps. (Counting a pair once, however many requirements share it, searched better
    than weighting it by them.)
    """

    def __init__(self, problem: CapacityProblem, batch_of: Sequence[int], k: int,
                 pairs: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        src, dst = _pairs(problem) if pairs is None else pairs
        self.neighbours = _neighbour_lists(problem.n, (src, dst))
        self.where = [int(b) for b in batch_of]
        where = np.asarray(self.where, dtype=np.int64)
        clash = np.bincount(where[dst] * problem.n + src,
                            minlength=k * problem.n).reshape(k, problem.n)
        self.own_at = where * problem.n + np.arange(problem.n)
        self.violation = int(clash.reshape(-1)[self.own_at].sum()) // 2
        self.score = clash * TIE_SCALE

    def move(self, v: int, new: int) -> None:
        """Move ``v`` to batch ``new``."""
        old, score, nbrs = self.where[v], self.score, self.neighbours[v]
        self.violation += (score.item(new, v) - score.item(old, v)) >> TIE_BITS
        row = score[old]
        row[nbrs] -= TIE_SCALE
        row = score[new]
        row[nbrs] += TIE_SCALE
        self.where[v] = new
        self.own_at[v] = new * score.shape[1] + v


def _pairs(problem: CapacityProblem) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of distinct nodes sharing a requirement, once: (src, dst), sorted
    by src then dst. Built once per search, not once per batch count tried."""
    codes = [np.zeros(0, dtype=np.int64)]
    by_size: dict[int, list[tuple[int, ...]]] = {}
    for ms in problem.members:
        by_size.setdefault(len(ms), []).append(ms)
    for size, group in by_size.items():
        arr = np.asarray(group, dtype=np.int64)
        for i in range(size):
            for j in range(size):
                if i != j:
                    codes.append(arr[:, i] * problem.n + arr[:, j])
    code = np.unique(np.concatenate(codes))
    code = code[code // problem.n != code % problem.n]
    return code // problem.n, code % problem.n


def _neighbour_lists(n: int, pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """The nodes sharing a requirement with each node, from :func:`_pairs`."""
    src, dst = pairs
    bounds = np.searchsorted(src, np.arange(n + 1))
    return [dst[bounds[v]:bounds[v + 1]] for v in range(n)]


class _CapState:
    """Any caps: per requirement and batch counts; ``score[b, v]`` is ``TIE_SCALE`` times
    the number of ``v``'s requirements that would be over their cap with ``v`` in ``b``."""

    def __init__(self, problem: CapacityProblem, batch_of: Sequence[int], k: int,
                 pairs: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self.neighbours = _neighbour_lists(problem.n, _pairs(problem) if pairs is None else pairs)
        self.members = problem.members
        self.caps = problem.caps
        self.node_reqs = problem.node_reqs()
        self.where = [int(b) for b in batch_of]
        where = np.asarray(self.where, dtype=np.int64)
        pair_node = np.array([v for v, js in enumerate(self.node_reqs) for _ in js], dtype=np.int64)
        pair_req = np.array([j for js in self.node_reqs for j in js], dtype=np.int64)
        counts = np.zeros((len(problem.caps), k), dtype=np.int64)
        np.add.at(counts, (pair_req, where[pair_node]), 1)
        caps = np.asarray(problem.caps, dtype=np.int64)
        self.violation = int(np.maximum(counts - caps[:, None], 0).sum())
        # The other members per batch: the count, less v itself in its own batch.
        others = counts[pair_req]
        others[np.arange(len(pair_node)), where[pair_node]] -= 1
        over = (others >= caps[pair_req, None]).astype(np.int64)
        clash = np.zeros((problem.n, k), dtype=np.int64)
        np.add.at(clash, pair_node, over)
        self.score = np.ascontiguousarray(clash.T) * TIE_SCALE
        self.counts: list[list[int]] = counts.tolist()
        self.own_at = where * problem.n + np.arange(problem.n)

    def move(self, v: int, new: int) -> None:
        """Move ``v`` to batch ``new``: counts, the violation, and the members' scores."""
        old, where = self.where[v], self.where
        down: list[int] = []
        up: list[int] = []
        for j in self.node_reqs[v]:
            row, cap = self.counts[j], self.caps[j]
            n_old, n_new = row[old], row[new]
            self.violation += (n_new >= cap) - (n_old > cap)
            # Another member's view of `old` falls below the cap: when the count drops to
            # cap - 1 if it is outside `old`, to cap if it is inside; `new` mirrors this.
            if n_old == cap or n_old == cap + 1:
                inside = n_old == cap + 1
                down += [m for m in self.members[j] if m != v and (where[m] == old) == inside]
            if n_new + 1 == cap or n_new == cap:
                inside = n_new == cap
                up += [m for m in self.members[j] if m != v and (where[m] == new) == inside]
            row[old] = n_old - 1
            row[new] = n_new + 1
        np.subtract.at(self.score[old], down, TIE_SCALE)
        np.add.at(self.score[new], up, TIE_SCALE)
        where[v] = new
        self.own_at[v] += (new - old) * self.score.shape[1]


def fewer_batches(
    problem: CapacityProblem,
    batch_of: Sequence[int],
    *,
    lower_bound: int,
    seed: int = 0,
    max_moves: int | None = None,
    seconds: float = 10.0,
) -> SearchResult:
    """Fewer safe batches than ``batch_of`` has, if the search finds them.

    Parameters
    ----------
    problem
        The nodes and capacity requirements.
    batch_of
        A safe batching: the batch number (``0..k-1``, every one used) of each node.
    lower_bound
        A proven lower bound; the search stops when it reaches it.
    seed
        Seeds the tie-breaking and the tabu tenures.
    max_moves
        Moves allowed over all the batch counts tried (default ``MOVES_PER_NODE`` per node).
    seconds
        Wall-clock backstop; on a machine of ordinary speed the moves run out first.

    Returns
    -------
    SearchResult
        The best safe batching found (``batch_of`` itself when nothing better was found).
    """
    t0 = time.perf_counter()
    budget = MOVES_PER_NODE * problem.n if max_moves is None else max_moves
    rng = np.random.default_rng(seed)
    pairs = all(cap == 1 for cap in problem.caps)
    sizes = [len(ms) for ms in problem.members]
    incidence = (np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
                 np.fromiter((m for ms in problem.members for m in ms), dtype=np.int64,
                             count=sum(sizes)))
    pair_arrays = _pairs(problem)
    best = [int(b) for b in batch_of]
    k = max(best) + 1 if best else 0
    used = 0
    stopped_by_time = False
    reached: list[tuple[int, int]] = []
    while k > max(lower_bound, 1) and used < budget and not stopped_by_time:
        start = _empty_smallest_batch(problem, incidence, best, k)
        state: _State = (_PairState(problem, start, k - 1, pair_arrays) if pairs
                         else _CapState(problem, start, k - 1, pair_arrays))
        found, spent, stopped_by_time = _tabu(state, budget - used, t0 + seconds, rng,
                                              patience=PATIENCE_PER_NODE * problem.n)
        used += spent
        if not found:
            break
        best = list(state.where)
        _check_safe(problem, incidence, best, k - 1)
        k -= 1
        reached.append((k, used))
    return SearchResult(batch_of=tuple(best), batches=k, moves=used,
                        seconds=time.perf_counter() - t0, stopped_by_time=stopped_by_time,
                        reached=tuple(reached))


def _check_safe(
    problem: CapacityProblem, incidence: tuple[np.ndarray, np.ndarray], batch_of: Sequence[int],
    k: int,
) -> None:
    """Raise unless no batch holds more than its cap of any requirement: recounted from
    scratch, not from the search's incremental scores, so a bug there fails here."""
    req_of, node_of = incidence
    where = np.asarray(batch_of, dtype=np.int64)
    counts = np.bincount(req_of * k + where[node_of], minlength=len(problem.caps) * k)
    caps = np.repeat(np.asarray(problem.caps, dtype=np.int64), k)
    if len(counts) and (counts > caps).any():
        raise RuntimeError("fewer_batches: internal error, the search returned an unsafe batching")


def _empty_smallest_batch(
    problem: CapacityProblem, incidence: tuple[np.ndarray, np.ndarray], batch_of: Sequence[int],
    k: int,
) -> list[int]:
    """``k - 1`` batches: the smallest batch's nodes go, one by one, where they break least
    (the fewest requirements at their cap there; ties to the lowest batch)."""
    req_of, node_of = incidence
    drop = int(np.argmin(np.bincount(np.asarray(batch_of), minlength=k)))
    out = [b - (b > drop) if b != drop else -1 for b in batch_of]
    where = np.asarray(out, dtype=np.int64)
    kept = where[node_of] >= 0
    counts = np.zeros((len(problem.caps), max(k - 1, 1)), dtype=np.int64)
    np.add.at(counts, (req_of[kept], where[node_of[kept]]), 1)
    caps = np.asarray(problem.caps, dtype=np.int64)
    order = np.argsort(node_of, kind="stable")
    starts = np.searchsorted(node_of[order], np.arange(problem.n + 1))
    for v in (v for v, b in enumerate(batch_of) if b == drop):
        js = req_of[order[starts[v]:starts[v + 1]]]
        over = (counts[js] >= caps[js, None]).sum(axis=0)
        b = int(np.argmin(over))
        out[v] = b
        counts[js, b] += 1
    return out


def _tabu(
    state: _State, budget: int, deadline: float, rng: np.random.Generator,
    patience: int | None = None,
) -> tuple[bool, int, bool]:
    """Move nodes until no batch is over a cap: (found, moves spent, stopped by the clock).

    The search goes in rounds (:class:`_Rounds`): each evaluates every move of every node
    in violation and makes the best one, then up to :data:`EXTRA_MOVES` more from the same
    evaluation; every :data:`FREE_MOVE_ROUNDS` rounds, :meth:`_Rounds.free_moves` moves
    a few nodes in no violation. With ``patience``, the search also gives up when the
    least violation seen, ``best``, has not fallen for ``patience / best**2`` moves: a
    count within reach gets down to a few violations quickly and may then wait long for
    the last ones, a count out of reach stays stuck far from zero (the square gives up on
    the one sooner and on the other later than ``patience / best`` would).
    """
    if state.score.shape[0] < 2:
        return state.violation == 0, 0, False
    rounds = _Rounds(state, rng)
    best_seen, improved_at = state.violation, 0
    while state.violation > 0:
        moves = rounds.moves
        if moves >= budget or (patience is not None
                               and (moves - improved_at) * best_seen ** 2 >= patience):
            return False, moves, False
        if rounds.count % 128 == 0 and time.perf_counter() > deadline:
            return False, moves, True
        rounds.run(best_seen, budget)
        if rounds.count % FREE_MOVE_ROUNDS == 0 and state.violation > 0:
            rounds.free_moves(budget)
        if state.violation < best_seen:
            best_seen, improved_at = state.violation, rounds.moves
    return True, rounds.moves, False


class _Rounds:
    """The tabu search's moves (TabuCol), evaluated a round at a time.

    A round scores the move of each node in violation to each other batch (the change
    in violation, plus a uniform draw below :data:`TIE_SCALE` to break ties) and makes
    the least one among the moves not tabu, or tabu but reaching below the least
    violation seen (aspiration). Leaving batch ``a`` makes ``(a, v)`` tabu for
    ``TENURE_PER_NODE * |nodes in violation| + U[0, TENURE_SPREAD)`` moves; a node's own
    batch is kept tabu, which leaves it out.

    Then up to :data:`EXTRA_MOVES` more moves from the same evaluation, each the least
    left that does not add violation and is not tabu, of a node sharing no requirement
    with a node already moved in the round: such a node's scores are unchanged, so the
    evaluation is still exact for it. That is several moves for one evaluation whenever
    the violations lie apart, which is what the evaluation's numpy calls cost.

    The tabu moves are a matrix of penalties (0, or more than any score) added to the
    scores of the nodes in violation; each is lifted when its tenure ends (a bucket of
    expiries per move), never a pass over every node's tabu state.
    """

    def __init__(self, state: _State, rng: np.random.Generator) -> None:
        k, n = state.score.shape
        self.state, self.rng, self.k = state, rng, k
        self.flat = state.score.reshape(-1)
        self.penalty = np.zeros((k, n), dtype=np.int64)
        self.penalty.reshape(-1)[state.own_at] = _NEVER
        # until[b][v]: the move at which (b, v) stops being tabu; -1 while b is v's batch.
        self.until = [[0] * n for _ in range(k)]
        for v, b in enumerate(state.where):
            self.until[b][v] = -1
        self.expiring: dict[int, list[tuple[int, int]]] = {}
        self.lifted = 0  # tenures ending at or before this move are lifted
        self.stamp = np.full(n, -1, dtype=np.int64)  # the round a node's scores changed in
        self.moves = self.count = 0
        # Random numbers drawn in blocks: one generator call per move would cost as much
        # as the move.
        self.noise = rng.integers(TIE_SCALE, size=(k, max(1 << 12, n)))
        self.used = 0
        self.tenures: list[int] = rng.integers(TENURE_SPREAD, size=4096).tolist()

    def run(self, best_seen: int, budget: int) -> None:
        """One round: the best move, then the extra moves (see the class)."""
        state = self.state
        self._lift()
        own = self.flat.take(state.own_at)
        in_violation = (own >= TIE_SCALE).nonzero()[0]
        width = len(in_violation)
        delta = state.score.take(in_violation, axis=1)
        delta -= own.take(in_violation)
        penalty = self.penalty.take(in_violation, axis=1)
        aspired = _least(delta, axis=None) < (best_seen - state.violation) * TIE_SCALE
        if not aspired:
            delta += penalty
        if self.used + width > self.noise.shape[1]:
            self.noise, self.used = self.rng.integers(TIE_SCALE, size=self.noise.shape), 0
        delta += self.noise[:, self.used:self.used + width]
        self.used += width
        pick = int(delta.argmin())
        new, column = divmod(pick, width)
        v = int(in_violation[column])
        first = delta.item(pick)
        if first >= _NEVER:  # every move tabu: a random one
            new = (state.where[v] + 1 + self.tenures[self.moves & 4095] % (self.k - 1)) % self.k
        self._move(v, new, width)
        self.count += 1
        if first >= TIE_SCALE:  # it adds violation: so would every other move
            return
        if aspired:
            delta += penalty
        self._extra(delta, in_violation, v, budget)

    def _extra(self, delta: np.ndarray, in_violation: np.ndarray, v: int, budget: int) -> None:
        """The round's extra moves: ``delta`` is its evaluation, ``v`` the node just moved.

        Each node's least move, the nodes in increasing order of it: a node is skipped
        when it or a node sharing a requirement with it has moved in the round.
        """
        state, stamp, mark = self.state, self.stamp, self.count
        stamp[v] = mark
        stamp[state.neighbours[v]] = mark
        least = _least(delta, axis=0)
        batches = delta.argmin(axis=0).tolist()
        made = 0
        for column in least.argsort(kind="stable").tolist():
            if (made == EXTRA_MOVES or state.violation == 0 or self.moves >= budget
                    or least.item(column) >= TIE_SCALE):  # it would add violation, or is tabu
                return
            v = in_violation.item(column)
            if stamp.item(v) == mark:
                continue
            self._move(v, batches[column], len(in_violation))
            made += 1
            stamp[state.neighbours[v]] = mark

    def _move(self, v: int, new: int, width: int) -> None:
        """Move ``v`` to ``new`` and make its return tabu for the tenure."""
        old = self.state.where[v]
        self.state.move(v, new)
        end = self.moves + int(TENURE_PER_NODE * width) + self.tenures[self.moves & 4095]
        self.until[old][v] = end  # penalty[old, v] is already set: it was v's own batch
        self.expiring.setdefault(end, []).append((old, v))
        self.until[new][v] = -1
        self.penalty[new, v] = _NEVER
        self.moves += 1
        if self.moves & 4095 == 0:
            self.tenures = self.rng.integers(TENURE_SPREAD, size=4096).tolist()

    def free_moves(self, budget: int) -> None:
        """Up to :data:`FREE_MOVES` moves, drawn at random, of nodes in no violation to a
        batch where they violate nothing either (and not tabu), none sharing a requirement
        with another: the violation stays, the batches around the nodes in violation
        change. The rounds only ever move nodes in violation; these moves let the rest of
        the batching drift on its plateau too."""
        state = self.state
        own = self.flat.take(state.own_at)
        free = state.score < TIE_SCALE
        free &= own < TIE_SCALE
        free &= self.penalty == 0  # also leaves out each node's own batch
        batch, node = free.nonzero()
        mark, made = -2 - self.count, 0  # marks apart from the rounds' (>= 1)
        for i in self.rng.permutation(len(node)).tolist():
            if made == FREE_MOVES or self.moves >= budget:
                return
            v = int(node[i])
            if self.stamp[v] == mark:
                continue
            self.stamp[state.neighbours[v]] = mark
            self.stamp[v] = mark
            self._move(v, int(batch[i]), 1)
            made += 1

    def _lift(self) -> None:
        """Lift the tabu moves whose tenure has ended."""
        while self.lifted < self.moves:
            self.lifted += 1
            for b, u in self.expiring.pop(self.lifted, ()):
                if self.until[b][u] == self.lifted:
                    self.penalty[b, u] = 0


def fewest_batches_exact(
    problem: CapacityProblem, upper: int, *, lower_bound: int, max_nodes: int | None = None
) -> ExactResult:
    """The fewest safe batches, proved, by DSATUR branch and bound (Brelaz 1979, Sewell 1996).

    Nodes are placed one at a time, the one with the most batches already closed to it
    first (ties: the most co-members, then the lowest number); each tries the batches
    open to it, then one new batch, as long as the count stays below the best found (at
    first ``upper``, a batching the caller already has). A batch closes to a node when
    one of its requirements already has ``cap`` members in it. The search stops early
    when it finds ``lower_bound`` batches, and gives up (``proved`` False) after
    ``max_nodes`` search nodes (default :data:`EXACT_NODES`): the answer is then only as
    good as what it saw.
    """
    max_nodes = EXACT_NODES if max_nodes is None else max_nodes
    search = _BranchAndBound(problem, upper, lower_bound, max_nodes)
    if problem.n:
        search.run(0)
    else:
        search.best_k = 0
    proved = search.nodes <= max_nodes
    return ExactResult(batch_of=None if search.best is None else tuple(search.best),
                       batches=search.best_k, proved=proved, nodes=search.nodes)


class _BranchAndBound:
    """The state of :func:`fewest_batches_exact`: bit masks, undone on the way back.

    ``closed[v]`` has bit ``b`` set when batch ``b`` is closed to node ``v``, ``shut[b]``
    the same by batch (bit ``v``), ``in_batch[b]`` the nodes placed in batch ``b``;
    ``key[v]`` orders the open nodes (closed batches, then co-members, then number).
    """

    def __init__(self, problem: CapacityProblem, upper: int, lower: int, max_nodes: int) -> None:
        n, slots = problem.n, max(upper, 1)
        # A cap-1 requirement closes a batch to all its other members at once: one mask
        # per node. A cap-2 one closes it when a second member joins: per node, the
        # members closed by each co-member (``twice[v][u]``, the nodes in ``co_twice``).
        # Wider caps need counting, kept per node as (mask, cap).
        self.pair_co = [0] * n
        self.co_twice = [0] * n
        self.twice: list[dict[int, int]] = [{} for _ in range(n)]
        self.wide: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        co = [0] * n
        for ms, cap in zip(problem.members, problem.caps, strict=True):
            mask = sum(1 << m for m in ms)
            for m in ms:
                co[m] |= mask
                if cap == 1:
                    self.pair_co[m] |= mask & ~(1 << m)
                elif cap == 2:
                    self.co_twice[m] |= mask & ~(1 << m)
                    for u in ms:
                        if u != m:
                            self.twice[m][u] = self.twice[m].get(u, 0) | mask & ~(1 << m)
                else:
                    self.wide[m].append((mask & ~(1 << m), cap))
        self.weight = (n + 1) * (n + 1)  # one closed batch outweighs any co-member count
        self.key = [(co[v] & ~(1 << v)).bit_count() * (n + 1) + n - v for v in range(n)]
        self.closed = [0] * n
        self.shut = [0] * slots
        self.in_batch = [0] * slots
        self.batch_of = [-1] * n
        self.open_nodes = set(range(n))
        self.open_mask = (1 << n) - 1  # the same, as bits
        self.best: list[int] | None = None
        self.best_k, self.lower, self.nodes, self.max_nodes = upper, lower, 0, max_nodes

    def run(self, used: int) -> bool:
        """Place the remaining nodes with ``used`` batches open: True to stop searching."""
        if not self.open_nodes:
            self.best, self.best_k = list(self.batch_of), used
            return used <= self.lower
        self.nodes += 1
        if self.nodes > self.max_nodes:
            return True
        v = max(self.open_nodes, key=self.key.__getitem__)
        closed = self.closed[v]
        for b in range(used + 1):
            if b >= self.best_k - 1:  # no better than the best found (it may just have fallen)
                break
            if closed >> b & 1:
                continue
            newly = self._place(v, b)
            if self.run(max(used, b + 1)):
                return True
            self._unplace(v, b, newly)
        return False

    def safe_sets(self, limit: int) -> list[int] | None:
        """Every non-empty safe batch as a bit mask, or None if there are more than ``limit``.

        Depth first, adding nodes in increasing order; batch 0 holds the set, so a node
        it closes to cannot join (what :meth:`_place` computes for the search).
        """
        out: list[int] = []

        def grow(allowed: int) -> bool:
            while allowed:
                low = allowed & -allowed
                allowed ^= low
                v = low.bit_length() - 1
                out.append(self.in_batch[0] | low)
                if len(out) > limit:
                    return False
                newly = self._place(v, 0)
                ok = grow(allowed & ~self.shut[0])
                self._unplace(v, 0, newly)
                if not ok:
                    return False
            return True

        return out if grow(self.open_mask) else None

    def _place(self, v: int, b: int) -> int:
        """Put ``v`` in batch ``b``; returns the mask of the open nodes ``b`` closed to."""
        self.batch_of[v] = b
        self.open_nodes.discard(v)
        self.open_mask ^= 1 << v
        held = self.in_batch[b]
        newly = self.pair_co[v]
        partners, twice = held & self.co_twice[v], self.twice[v]
        while partners:
            low = partners & -partners
            partners ^= low
            newly |= twice[low.bit_length() - 1]
        for mask, cap in self.wide[v]:
            if (mask & held).bit_count() + 1 >= cap:
                newly |= mask
        self.in_batch[b] = held | 1 << v
        newly &= self.open_mask & ~self.shut[b]
        if newly:
            self.shut[b] |= newly
            self._flip(newly, b, self.weight)
        return newly

    def _unplace(self, v: int, b: int, newly: int) -> None:
        if newly:
            self.shut[b] &= ~newly
            self._flip(newly, b, -self.weight)
        self.in_batch[b] ^= 1 << v
        self.batch_of[v] = -1
        self.open_nodes.add(v)
        self.open_mask |= 1 << v

    def _flip(self, mask: int, b: int, weight: int) -> None:
        """Toggle batch ``b``'s bit in ``closed`` for the nodes of ``mask``; adjust keys."""
        bit, closed, key = 1 << b, self.closed, self.key
        while mask:
            low = mask & -mask
            mask ^= low
            u = low.bit_length() - 1
            closed[u] ^= bit
            key[u] += weight


def fractional_bound(problem: CapacityProblem, max_sets: int | None = None) -> int | None:
    """A lower bound on the batches: the fractional chromatic number, rounded up.

    Every safe batch is enumerated (each a column of a covering LP: every node in at
    least one batch); its optimum, at most any batching's count, can exceed the clique
    bound by several batches (the 60-node one-rack QUORUM ring: clique 11, LP 13.5, and
    14 batches do). The bound is certified from the dual: node weights ``y`` (rounded
    down to integers) with no safe batch weighing more than ``M`` need at least
    ``sum(y) / M`` batches, whatever the LP solver's rounding. None when there are more
    than ``max_sets`` (default :data:`FRACTIONAL_SETS`) safe batches or the LP fails.
    """
    from scipy.optimize import linprog  # scipy is slow to import: only when needed
    from scipy.sparse import csr_matrix

    max_sets = FRACTIONAL_SETS if max_sets is None else max_sets
    if problem.n == 0:
        return 0
    sets = _BranchAndBound(problem, 1, 0, 0).safe_sets(max_sets)
    if sets is None:
        return None
    rows = [v for s in sets for v in _bits(s)]
    cols = [c for c, s in enumerate(sets) for _ in range(s.bit_count())]
    cover = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(problem.n, len(sets)))
    res = linprog(np.ones(len(sets)), A_ub=-cover, b_ub=-np.ones(problem.n),
                  bounds=(0, None), method="highs")
    if res.status != 0:
        return None
    weight = np.floor(np.maximum(-res.ineqlin.marginals, 0.0) * (1 << 20)).astype(np.int64)
    heaviest = int((cover.T.astype(np.int64) @ weight).max())
    if heaviest <= 0:
        return None
    return -(-int(weight.sum()) // heaviest)


def _bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        mask ^= low
        out.append(low.bit_length() - 1)
    return out
