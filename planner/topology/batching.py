"""Restart batches: the fewest batches of nodes that are each safe to take down together.

Each (replica set, scope) of a :class:`planner.topology.ring.Ring` allows at most ``cap =
up - tolerated - need`` nodes of a batch (:func:`planner.topology.ring.requirements`).
:func:`safe_batches` partitions the nodes into the fewest batches respecting every cap:
whole racks when they meet the lower bound (exact, whatever the node count), else first
fit by rack and DSATUR, then an exact DSATUR branch and bound (with a work budget) on small
clusters and a tabu search on large ones, or when the exact search runs out of budget (both
in :mod:`planner.topology.batch_search`). Every batch is re-checked before it is returned,
with the reason it is safe (:func:`batch_reasons`). For one token per node this reproduces
SOPHIA's closed form, steps = RF / (RF - CL).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.errors import KairosError, ValidationError
from planner.topology import batch_search
from planner.topology.batch_search import (
    CapacityProblem,
    fewer_batches,
    fewest_batches_exact,
    fractional_bound,
)
from planner.topology.ring import (
    Requirement,
    Ring,
    UnsafeBatchError,
    check_batch,
    normalise_cl,
    requirements,
)

__all__ = ["BatchPlan", "batch_reasons", "safe_batches"]

#: Above this many nodes safe_batches does not attempt the exact search (its budget is
#: planner.topology.batch_search.EXACT_NODES search nodes).
EXACT_NODE_LIMIT = 64
#: Search nodes of the first, short branch and bound on a small ring: most finish in it
#: (24 nodes: under 20), and only the others pay for the fractional bound's LP.
EXACT_PROBE_NODES = 2_000
#: Tabu moves per node of the short search between the two, when the fractional bound
#: rose (60 nodes at QUORUM: 14 batches, the bound, in 400 to 12,000 moves, seeds 0-3).
EXACT_PROBE_MOVES = 200
#: Work budget (rack assignments tried) of the exact whole-rack packing.
EXACT_BUDGET = 200_000
#: Default wall-clock budget of the local search (planner.topology.batch_search) on large rings, a
#: backstop: the move budget or the search's patience normally ends it first, in 0.4-2.6 s
#: of CPU time at 1,000 nodes on one rack (search seeds 0-99, a quiet 2-core machine), and
#: then the result does not depend on the machine.
SEARCH_SECONDS = 15.0


@dataclass(frozen=True)
class BatchPlan:
    """Batches of hosts to reconfigure in order.

    Attributes
    ----------
    batches
        Host names per batch; every node appears in exactly one batch.
    lower_bound
        A proven lower bound on the number of batches.
    exact
        True when ``len(batches)`` is proved minimal (search completed, or the
        heuristic met the lower bound).
    aggressive
        True when availability was given up (SOPHIA-AGGRESSIVE: all nodes at once).
    reasons
        Why each batch is safe, one line per batch (:func:`batch_reasons`): whole racks
        and what they hold of a replica set, or the tightest replica set's margin, e.g.
        ``tightest replica set keeps 2 of 3 replicas up; QUORUM needs 2``.
        :func:`safe_batches` always fills it; the default keeps older callers working.
    """

    batches: tuple[tuple[str, ...], ...]
    lower_bound: int
    exact: bool
    aggressive: bool = False
    reasons: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of hosts in each batch."""
        return tuple(len(b) for b in self.batches)


def safe_batches(
    ring: Ring,
    *,
    consistency_level: str,
    tolerated_failures: int = 0,
    aggressive: bool = False,
    keyspaces: Iterable[str] | None = None,
    hosts: Iterable[str] | None = None,
    search_seconds: float = SEARCH_SECONDS,
    search_moves: int | None = None,
    seed: int = 0,
) -> BatchPlan:
    """Partition the nodes into the fewest batches that are each safe.

    Parameters
    ----------
    ring
        The ring.
    consistency_level
        One of :data:`CONSISTENCY_LEVELS` (case-insensitive).
    tolerated_failures
        Extra node failures that must be survivable while a batch is down.
    aggressive
        If no safe batching exists (RF = CL), reconfigure every node at once instead
        of refusing (SOPHIA-AGGRESSIVE). Ignored when a safe batching exists.
    keyspaces
        Only these keyspaces' replica sets count (default: all).
    hosts
        Only these hosts are to be reconfigured (default: all nodes).
    search_seconds
        Wall-clock budget of the local search that follows DSATUR on rings too large for
        the exact search (default :data:`SEARCH_SECONDS`).
    search_moves
        Its move budget (default :data:`planner.topology.batch_search.MOVES_PER_NODE` per node).
        The result depends only on the ring, the seed and this budget, unless the clock
        stops the search first (a machine several times slower than usual).
    seed
        Seeds the local search's tie-breaking.

    Returns
    -------
    BatchPlan
        With the reason each batch is safe; every batch is re-checked against every
        replica set before it is returned.

    Raises
    ------
    UnsafeBatchError
        Some node cannot be taken down even alone (RF = CL, or too many tolerated
        failures) and ``aggressive`` is false; the message names it and the replica set.
    """
    if tolerated_failures < 0:
        raise ValidationError(f"tolerated_failures: must be >= 0, got {tolerated_failures}")
    search = _Search(seconds=search_seconds, moves=search_moves, seed=seed)
    cl = normalise_cl(consistency_level)
    reqs = requirements(ring, consistency_level=cl, keyspaces=keyspaces)
    todo = _hosts_to_do(ring, hosts)
    caps = np.array([len(r.members) - tolerated_failures - r.need for r in reqs], dtype=np.int64)
    node_reqs: list[list[int]] = [[] for _ in ring.nodes]
    for j, r in enumerate(reqs):
        for m in r.members:
            node_reqs[m].append(j)
    blocked = [(i, j) for i in todo for j in node_reqs[i] if caps[j] < 1]
    if blocked:
        host, r = ring.nodes[blocked[0][0]].host, reqs[blocked[0][1]]
        if aggressive:
            return _all_at_once(ring, todo, host, r, cl)
        raise _no_safe_batch(host, r, cl, tolerated_failures)
    if not todo:
        return BatchPlan(batches=(), lower_bound=0, exact=True)
    inc = _Incidence.of(reqs)
    best, lower, exact = _fewest_batches(todo, reqs, caps, node_reqs, ring, inc, search)
    best = [sorted(b) for b in best]
    reasons = _checked_reasons(ring, todo, best, reqs, inc, cl, tolerated_failures, keyspaces)
    return BatchPlan(
        batches=tuple(tuple(ring.nodes[i].host for i in b) for b in best),
        lower_bound=lower,
        exact=exact,
        reasons=reasons,
    )


def _all_at_once(ring: Ring, todo: list[int], host: str, r: Requirement, cl: str) -> BatchPlan:
    """SOPHIA-AGGRESSIVE: one batch of every node, saying which node forced it."""
    return BatchPlan(
        batches=(tuple(ring.nodes[i].host for i in todo),),
        lower_bound=1,
        exact=True,
        aggressive=True,
        reasons=(f"AGGRESSIVE, availability not kept: all {len(todo)} node(s) at once; "
                 f"{host} cannot go down even alone ({len(r.members)} replica(s), "
                 f"{cl} needs {r.need})",),
    )


def _checked_reasons(
    ring: Ring,
    todo: list[int],
    batches: list[list[int]],
    reqs: Sequence[Requirement],
    inc: _Incidence,
    cl: str,
    tolerated: int,
    keyspaces: Iterable[str] | None,
) -> tuple[str, ...]:
    """Why each batch is safe, after checking it is: whatever produced the batches, a bug
    in a heuristic must fail loudly here, never reach a rollout."""
    if sorted(i for b in batches for i in b) != todo:
        raise KairosError("safe_batches: internal error, the batches do not partition the hosts")
    margins = _tightest(ring, reqs, inc, batches, tolerated)
    for b, margin in enumerate(margins):
        if margin is not None and margin.slack < 0:
            check_batch(ring, [ring.nodes[i].host for i in batches[b]], consistency_level=cl,
                        tolerated_failures=tolerated, keyspaces=keyspaces)
            raise UnsafeBatchError(f"safe_batches: internal error, batch {b + 1} is unsafe")
    return tuple(_reason(ring, b, m, cl, tolerated)
                 for b, m in zip(batches, margins, strict=True))


def _hosts_to_do(ring: Ring, hosts: Iterable[str] | None) -> list[int]:
    """Indices of the nodes to reconfigure (all by default), sorted, unknown hosts refused."""
    if hosts is None:
        return list(range(len(ring.nodes)))
    todo = []
    for i, h in enumerate(hosts):
        if h not in ring:
            raise ValidationError(f"hosts[{i}]: unknown host {h!r}")
        todo.append(ring._index[h])
    return sorted(set(todo))


def _no_safe_batch(host: str, r: Requirement, cl: str, tolerated: int) -> UnsafeBatchError:
    """The refusal for a node that cannot go down even alone, naming its replica set."""
    scope = "" if r.scope == "all" else f" in {r.scope}"
    return UnsafeBatchError(
        f"no safe batch for {cl} with {tolerated} tolerated failure(s): "
        f"host {host!r} cannot go down because {r.source.describe()} "
        f"has {len(r.members)} replica(s){scope} and {cl} needs {r.need}"
        + (f" plus {tolerated} spare" if tolerated else "")
        + " (RF = CL leaves no slack); choose a weaker CL or pass aggressive "
        "(--aggressive) to reconfigure all nodes at once"
    )


@dataclass(frozen=True)
class _Incidence:
    """The requirements as flat arrays: entry ``e`` says node ``node[e]`` is a member of
    requirement ``req[e]``; ``size`` and ``need`` per requirement."""

    req: np.ndarray
    node: np.ndarray
    size: np.ndarray
    need: np.ndarray

    @classmethod
    def of(cls, reqs: Sequence[Requirement]) -> _Incidence:
        size = np.fromiter((len(r.members) for r in reqs), dtype=np.int64, count=len(reqs))
        return cls(
            req=np.repeat(np.arange(len(reqs), dtype=np.int64), size),
            node=np.fromiter((m for r in reqs for m in r.members), dtype=np.int64,
                             count=int(size.sum())),
            size=size,
            need=np.fromiter((r.need for r in reqs), dtype=np.int64, count=len(reqs)),
        )

    def held(self, nodes: Sequence[int], n_nodes: int) -> np.ndarray:
        """How many of ``nodes`` each requirement has among its members."""
        mask = np.zeros(n_nodes, dtype=np.int64)
        mask[list(nodes)] = 1
        return np.bincount(self.req, weights=mask[self.node],
                           minlength=len(self.size)).astype(np.int64)


@dataclass(frozen=True)
class _Search:
    """The local search's budget and seed (see :func:`safe_batches`), validated."""

    seconds: float
    moves: int | None
    seed: int

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValidationError(f"search_seconds: must be > 0, got {self.seconds}")
        if self.moves is not None and self.moves < 0:
            raise ValidationError(f"search_moves: must be >= 0, got {self.moves}")


def _fewest_batches(
    todo: list[int],
    reqs: Sequence[Requirement],
    caps: np.ndarray,
    node_reqs: list[list[int]],
    ring: Ring,
    inc: _Incidence,
    search: _Search,
) -> tuple[list[list[int]], int, bool]:
    """The fewest safe batches found, a proven lower bound, and whether they are minimal.

    Whole racks first (exact and fast when they meet the bound: the usual case with
    NetworkTopologyStrategy and RF racks); else first fit by rack and DSATUR, then a
    branch and bound below the best found on small rings, a tabu search on large ones
    (or when the branch and bound ran out of budget).
    """
    # Each batch takes at most cap of a requirement's members.
    lower = max(1, int(np.max(-(-inc.held(todo, len(ring.nodes)) // caps), initial=1)))
    racks = _whole_rack_batches(ring, todo, inc, caps, lower)
    if racks is not None and len(racks) == lower:
        return racks, lower, True
    lower = max(lower, _clique_bound(todo, reqs, caps))
    reqs_arr = [np.array(node_reqs[i], dtype=np.int64) for i in range(len(ring.nodes))]
    best = _first_fit(ring, todo, reqs_arr, caps, order="rack")
    if racks is not None and len(racks) <= len(best):
        best = racks  # the same count, and racks are easier on people and clients
    if len(best) > lower:
        alt = _dsatur(todo, reqs, reqs_arr, caps, node_reqs)
        if len(alt) < len(best):
            best = alt
    if len(best) == lower:
        return best, lower, True
    problem = _todo_problem(todo, reqs, caps)
    if len(todo) <= EXACT_NODE_LIMIT:
        best, lower, exact = _exact_search(todo, problem, best, lower, search)
        if exact:
            return best, lower, True
    best = _local_search(todo, problem, best, lower, search)
    return best, lower, len(best) == lower


def _exact_search(
    todo: list[int], problem: CapacityProblem, best: list[list[int]], lower: int, search: _Search
) -> tuple[list[list[int]], int, bool]:
    """Branch and bound (planner.topology.batch_search) below ``len(best)`` batches: (best, lower
    bound, proved minimal).

    A short branch and bound first (most small rings end there). Else the fractional
    bound, and a short tabu search to bring the best down to it: the branch and bound
    proves well but finds good batchings slowly, and with the bound met nothing is left
    to prove (the 60-node one-rack QUORUM ring). Else the full branch and bound below the
    best. Out of budget, the bound stays the best proven one."""
    batch_of = _batch_numbers(todo, best)
    budget = batch_search.EXACT_NODES
    found = fewest_batches_exact(problem, len(best), lower_bound=lower,
                                 max_nodes=min(EXACT_PROBE_NODES, budget))
    if found.batch_of is not None:
        best, batch_of = _batches_of(todo, found.batch_of, found.batches), list(found.batch_of)
    if found.proved or budget <= EXACT_PROBE_NODES:
        return best, (len(best) if found.proved else lower), found.proved
    fractional = fractional_bound(problem) or 0
    if len(best) > fractional > lower:  # a new bound worth reaching for
        moves = EXACT_PROBE_MOVES * len(todo)
        if search.moves is not None:
            moves = min(moves, search.moves)
        short = fewer_batches(problem, batch_of, lower_bound=fractional, seed=search.seed,
                              max_moves=moves, seconds=search.seconds)
        if short.batches < len(best):
            best = _batches_of(todo, short.batch_of, short.batches)
    lower = max(lower, fractional)
    if len(best) <= lower:
        return best, len(best), True
    found = fewest_batches_exact(problem, len(best), lower_bound=lower, max_nodes=budget)
    if found.batch_of is not None:
        best = _batches_of(todo, found.batch_of, found.batches)
    if found.proved:
        return best, len(best), True
    return best, lower, False


def _local_search(
    todo: list[int], problem: CapacityProblem, best: list[list[int]], lower: int, search: _Search
) -> list[list[int]]:
    """Fewer batches by tabu search (planner.topology.batch_search), on the requirements that
    bind."""
    found = fewer_batches(problem, _batch_numbers(todo, best), lower_bound=lower, seed=search.seed,
                          max_moves=search.moves, seconds=search.seconds)
    if found.batches >= len(best):
        return best
    return _batches_of(todo, found.batch_of, found.batches)


def _todo_problem(
    todo: list[int], reqs: Sequence[Requirement], caps: np.ndarray
) -> CapacityProblem:
    """The batching problem over ``todo``, renumbered ``0..``.

    A requirement with no more members to do than its cap can never be violated, so
    only the others are kept.
    """
    local = {v: i for i, v in enumerate(todo)}
    # Every node to do (todo is sorted and distinct, members sorted): the numbers stay.
    top = max((r.members[-1] for r in reqs if r.members), default=-1)
    everyone = bool(todo) and todo[-1] == len(todo) - 1 and top < len(todo)
    members, binding_caps = [], []
    for r, cap in zip(reqs, caps.tolist(), strict=True):
        ms = r.members if everyone else tuple(local[m] for m in r.members if m in local)
        if len(ms) > cap:
            members.append(ms)
            binding_caps.append(cap)
    return CapacityProblem(n=len(todo), members=tuple(members), caps=tuple(binding_caps))


def _batch_numbers(todo: list[int], best: list[list[int]]) -> list[int]:
    """``best`` as the batch number of each position in ``todo``."""
    local = {v: i for i, v in enumerate(todo)}
    batch_of = [0] * len(todo)
    for b, batch in enumerate(best):
        for v in batch:
            batch_of[local[v]] = b
    return batch_of


def _batches_of(todo: list[int], batch_of: Sequence[int], k: int) -> list[list[int]]:
    """The batches (of ``todo``'s node numbers) of a batch number per position in ``todo``."""
    out: list[list[int]] = [[] for _ in range(k)]
    for i, b in enumerate(batch_of):
        out[b].append(todo[i])
    return out


def _whole_rack_batches(
    ring: Ring,
    todo: Sequence[int],
    inc: _Incidence,
    caps: np.ndarray,
    lower: int,
) -> list[list[int]] | None:
    """The fewest batches made of whole racks, or None if some rack is unsafe on its own.

    A rack (a datacenter's rack) holds, per requirement, a number of its members; a set
    of racks is a safe batch when those numbers add up to at most the cap everywhere.
    There are few racks, so they are packed exactly (within a work budget). With
    NetworkTopologyStrategy and at least RF racks, a rack holds at most one replica of a
    set, so RF 3 at QUORUM packs 3 racks into 3 batches whatever the node count.
    """
    names = sorted({(ring.nodes[i].dc, ring.nodes[i].rack) for i in todo})
    if len(names) < 2 or len(names) > EXACT_NODE_LIMIT:
        return None
    group_of = {name: g for g, name in enumerate(names)}
    groups: list[list[int]] = [[] for _ in names]
    for i in todo:
        groups[group_of[ring.nodes[i].dc, ring.nodes[i].rack]].append(i)
    node_group = np.full(len(ring.nodes), -1, dtype=np.int64)
    for g, members in enumerate(groups):
        node_group[members] = g
    group = node_group[inc.node]
    load = np.zeros((len(caps), len(names)), dtype=np.int64)
    np.add.at(load, (inc.req[group >= 0], group[group >= 0]), 1)
    if np.any(load > caps[:, None]):
        return None
    packed = _pack_groups(load, caps, lower)
    return [[i for g in batch for i in groups[g]] for batch in packed]


def _pack_groups(load: np.ndarray, caps: np.ndarray, lower: int) -> list[list[int]]:
    """Fewest batches of groups (columns of ``load``) within ``caps``, by backtracking.

    Largest groups first, a group opens at most one new batch (symmetry); the first
    packing found for the smallest feasible count from ``lower`` up is returned, else
    first fit's when the budget runs out.
    """
    order = sorted(range(load.shape[1]), key=lambda g: (-int(load[:, g].sum()), g))
    budget = [EXACT_BUDGET]

    def pack(k: int) -> list[list[int]] | None:
        used = np.zeros((load.shape[0], k), dtype=np.int64)
        assign: list[int] = []

        def place(pos: int, opened: int) -> bool:
            if pos == len(order):
                return True
            budget[0] -= 1
            if budget[0] < 0:
                return False
            g = order[pos]
            for b in range(min(opened + 1, k)):
                if np.all(used[:, b] + load[:, g] <= caps):
                    used[:, b] += load[:, g]
                    assign.append(b)
                    if place(pos + 1, max(opened, b + 1)):
                        return True
                    assign.pop()
                    used[:, b] -= load[:, g]
            return False

        if not place(0, 0):
            return None
        out: list[list[int]] = [[] for _ in range(k)]
        for g, b in zip(order, assign, strict=True):
            out[b].append(g)
        return [b for b in out if b]

    for k in range(lower, load.shape[1] + 1):
        found = pack(k)
        if found is not None:
            return found
    return [[g] for g in order]  # each rack alone is safe (checked by the caller)


@dataclass(frozen=True)
class _Margin:
    """The tightest requirement of a batch: how many of its members the batch holds."""

    req: Requirement
    in_batch: int
    slack: int  # replicas up, minus tolerated failures, minus the need
    uniform: bool  # every requirement the batch touches has the same size and need


def _tightest(
    ring: Ring, reqs: Sequence[Requirement], inc: _Incidence,
    batches: Sequence[Sequence[int]], tolerated: int,
) -> list[_Margin | None]:
    """Per batch, its tightest requirement (least slack, then most members in the batch);
    None for a batch that holds no replica at all."""
    out: list[_Margin | None] = []
    for batch in batches:
        held = inc.held(batch, len(ring.nodes))
        touched = np.flatnonzero(held > 0)
        if not len(touched):
            out.append(None)
            continue
        slack = inc.size[touched] - held[touched] - tolerated - inc.need[touched]
        j = int(touched[np.lexsort((touched, -held[touched], slack))[0]])
        uniform = bool(np.all(inc.size[touched] == inc.size[j])
                       and np.all(inc.need[touched] == inc.need[j]))
        out.append(_Margin(req=reqs[j], in_batch=int(held[j]), uniform=uniform,
                           slack=int(inc.size[j] - held[j] - tolerated - inc.need[j])))
    return out


def _reason(
    ring: Ring, batch: Sequence[int], margin: _Margin | None, cl: str, tolerated: int
) -> str:
    """Why ``batch`` is safe, in one line (see :attr:`BatchPlan.reasons`)."""
    if margin is None:
        return "holds no replica of any replica set"
    r, held = margin.req, margin.in_batch
    n = len(r.members)
    scope = "" if r.scope == "all" else f" in {r.scope}"
    needs = f"{cl} needs {r.need}" + (f" plus {tolerated} spare" if tolerated else "")
    racks = _whole_racks(ring, batch)
    if not racks:
        return f"tightest replica set keeps {n - held} of {n} replicas{scope} up; {needs}"
    what = (f"whole rack{'s' if len(racks) > 1 else ''} {', '.join(racks)} "
            f"({len(batch)} node{'s' if len(batch) > 1 else ''})")
    if margin.uniform:
        per_dc = "" if r.scope == "all" else " per datacenter"
        return (f"{what}: every replica set has at most {held} of its {n} replicas{per_dc} "
                f"in it and keeps {n - held} up; {needs}")
    return (f"{what}: the tightest replica set has {held} of its {n} replicas{scope} in "
            f"it and keeps {n - held} up; {needs}")


def _whole_racks(ring: Ring, batch: Sequence[int]) -> list[str]:
    """The racks ``batch`` consists of, if it is exactly whole racks of the ring, else []."""
    chosen = {(ring.nodes[i].dc, ring.nodes[i].rack) for i in batch}
    in_racks = sum(1 for n in ring.nodes if (n.dc, n.rack) in chosen)
    if in_racks != len(batch):
        return []
    dcs = {n.dc for n in ring.nodes}
    return [f"{dc}/{rack}" if len(dcs) > 1 else rack for dc, rack in sorted(chosen)]


def batch_reasons(
    ring: Ring,
    batches: Sequence[Sequence[str]],
    *,
    consistency_level: str,
    tolerated_failures: int = 0,
    keyspaces: Iterable[str] | None = None,
) -> tuple[str, ...]:
    """Why each of ``batches`` is safe on ``ring``, one line per batch.

    The same lines as :attr:`BatchPlan.reasons`, for batches made elsewhere (a plan's,
    checked on the live ring by ``kairos explain``).

    Raises
    ------
    ValidationError
        An unknown host, consistency level or keyspace.
    UnsafeBatchError
        A batch is unsafe (:func:`check_batch`'s message).
    """
    cl = normalise_cl(consistency_level)
    reqs = requirements(ring, consistency_level=cl, keyspaces=keyspaces)
    index: list[list[int]] = []
    for b, batch in enumerate(batches):
        for i, h in enumerate(batch):
            if h not in ring:
                raise ValidationError(f"batches[{b}][{i}]: unknown host {h!r}")
        index.append([ring._index[h] for h in batch])
    margins = _tightest(ring, reqs, _Incidence.of(reqs), index, tolerated_failures)
    for batch, margin in zip(batches, margins, strict=True):
        if margin is not None and margin.slack < 0:
            check_batch(ring, batch, consistency_level=cl,
                        tolerated_failures=tolerated_failures, keyspaces=keyspaces)
    return tuple(_reason(ring, b, m, cl, tolerated_failures)
                 for b, m in zip(index, margins, strict=True))


def _first_fit(
    ring: Ring,
    todo: Sequence[int],
    reqs_arr: Sequence[np.ndarray],
    caps: np.ndarray,
    *,
    order: str,
) -> list[list[int]]:
    """Greedy first-fit; ``rack`` order keeps racks together, ``degree`` is DSATUR-ish."""
    if order == "rack":
        seq = sorted(todo, key=lambda i: (ring.nodes[i].rack, ring.nodes[i].dc, i))
    else:
        seq = sorted(todo, key=lambda i: (-len(reqs_arr[i]), i))
    counts: list[np.ndarray] = []
    batches: list[list[int]] = []
    for i in seq:
        r = reqs_arr[i]
        cap_r = caps[r]
        for b, cnt in enumerate(counts):
            if (cnt[r] < cap_r).all():
                cnt[r] += 1
                batches[b].append(i)
                break
        else:
            cnt = np.zeros(len(caps), dtype=np.int64)
            cnt[r] += 1
            counts.append(cnt)
            batches.append([i])
    return batches


def _clique_bound(todo: Sequence[int], reqs: Sequence[Requirement], caps: np.ndarray) -> int:
    """Greedy clique in the conflict graph of cap-1 requirements (a lower bound)."""
    todo_set = set(todo)
    adj: dict[int, set[int]] = {}
    for j, r in enumerate(reqs):
        if caps[j] != 1:
            continue
        members = [m for m in r.members if m in todo_set]
        for m in members:
            adj.setdefault(m, set()).update(members)
    if not adj:
        return 1
    best = 1
    starts = sorted(adj, key=lambda v: -len(adj[v]))[:8]
    for v in starts:
        clique = {v}
        cand = adj[v] - {v}
        while cand:
            u = max(cand, key=lambda w: (len(adj[w] & cand), -w))
            clique.add(u)
            cand &= adj[u]
            cand.discard(u)
        best = max(best, len(clique))
    return best


def _dsatur(
    todo: Sequence[int],
    reqs: Sequence[Requirement],
    reqs_arr: Sequence[np.ndarray],
    caps: np.ndarray,
    node_reqs: Sequence[Sequence[int]],
) -> list[list[int]]:
    """DSATUR generalised to capacities: place the node with most blocked batches first."""
    import heapq

    todo_set = set(todo)
    blocked: dict[int, set[int]] = {i: set() for i in todo}
    degree = {i: len(node_reqs[i]) for i in todo}
    heap = [(0, -degree[i], i) for i in todo]
    heapq.heapify(heap)
    placed: set[int] = set()
    counts: list[np.ndarray] = []
    batches: list[list[int]] = []
    while heap:
        neg_sat, _, v = heapq.heappop(heap)
        if v in placed or -neg_sat != len(blocked[v]):
            continue
        placed.add(v)
        r = reqs_arr[v]
        for b, cnt in enumerate(counts):
            if b not in blocked[v] and np.all(cnt[r] < caps[r]):
                break
        else:
            b = len(counts)
            counts.append(np.zeros(len(caps), dtype=np.int64))
            batches.append([])
        counts[b][r] += 1
        batches[b].append(v)
        full = r[counts[b][r] >= caps[r]].tolist()
        # Each member once, whatever the requirements it shares with v (the keys are
        # distinct, so the order of the pushes does not change the order of the pops).
        for m in set().union(*[reqs[j].members for j in full]):
            if m in todo_set and m not in placed and b not in blocked[m]:
                blocked[m].add(b)
                heapq.heappush(heap, (-len(blocked[m]), -degree[m], m))
    return batches
