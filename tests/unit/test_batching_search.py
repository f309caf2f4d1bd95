"""Safe batches close to the optimum (issue 17, parts 3 and 4): whole racks, the exact
branch and bound on small rings, tabu search on large ones, the final safety check and
the reason given for each batch."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from planner.cli import main
from planner.topology import batch_search
from planner.topology import batching as topology
from planner.topology.batch_search import (
    CapacityProblem,
    fewer_batches,
    fewest_batches_exact,
    fractional_bound,
    violation,
)
from planner.topology.batching import batch_reasons, safe_batches
from planner.topology.ring import Ring, UnsafeBatchError, check_batch, requirements


def no_search(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("the local search ran")


# ------------------------------------------------------------------ whole racks
@pytest.mark.parametrize(
    ("rf", "cl", "expected"),
    [(3, "QUORUM", 3), (3, "ONE", 2), (5, "QUORUM", 3), (5, "ONE", 2), (4, "TWO", 2)],
)
def test_whole_racks_give_rf_over_rf_minus_cl_batches_whatever_the_node_count(
    monkeypatch: pytest.MonkeyPatch, rf: int, cl: str, expected: int
) -> None:
    """RF racks, NetworkTopologyStrategy: one replica per rack, so racks pack exactly."""
    need = {"ONE": 1, "TWO": 2, "QUORUM": rf // 2 + 1}[cl]
    assert expected == math.ceil(rf / (rf - need))
    monkeypatch.setattr(topology, "_local_search", no_search)
    monkeypatch.setattr(topology, "_dsatur", no_search)
    ring = Ring.synthetic(12 * rf, vnodes=8, rf=rf, racks=rf, seed=5)
    plan = safe_batches(ring, consistency_level=cl)
    assert len(plan) == expected == plan.lower_bound and plan.exact
    racks_of = [{ring.node(h).rack for h in b} for b in plan.batches]
    assert sorted(r for racks in racks_of for r in racks) == [f"rack{i + 1}" for i in range(rf)]
    for batch, racks in zip(plan.batches, racks_of, strict=True):
        assert len(batch) == 12 * len(racks)  # whole racks, nothing else
        check_batch(ring, batch, consistency_level=cl)


def test_a_thousand_nodes_in_three_racks_take_three_whole_rack_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topology, "_local_search", no_search)
    ring = Ring.synthetic(1000, vnodes=1, rf=3, racks=3, seed=1)
    plan = safe_batches(ring, consistency_level="QUORUM")
    assert plan.sizes == (334, 333, 333) and plan.exact
    assert plan.reasons[0] == (
        "whole rack rack1 (334 nodes): every replica set has at most 1 of its 3 replicas "
        "in it and keeps 2 up; QUORUM needs 2"
    )


def test_local_quorum_pairs_the_racks_of_two_datacenters() -> None:
    ring = Ring.synthetic(24, vnodes=4, rf=3, dcs=2, racks=3, seed=2)
    plan = safe_batches(ring, consistency_level="LOCAL_QUORUM")
    assert len(plan) == 3 and plan.exact
    assert plan.reasons[0] == (
        "whole racks dc1/rack1, dc2/rack1 (8 nodes): every replica set has at most 1 of its 3 "
        "replicas per datacenter in it and keeps 2 up; LOCAL_QUORUM needs 2"
    )


# ----------------------------------------------------------------- exact search
def grotzsch() -> CapacityProblem:
    """Mycielski's graph of the 5-cycle: 11 nodes, no triangle, chromatic number 4."""
    cycle = [(i, (i + 1) % 5) for i in range(5)]
    shadows = [(a, b + 5) for a, b in cycle] + [(a + 5, b) for a, b in cycle]
    hub = [(i + 5, 10) for i in range(5)]
    return CapacityProblem(n=11, members=tuple(cycle + shadows + hub), caps=(1,) * 20)


def fano() -> CapacityProblem:
    """The Fano plane's 7 lines, at most 2 of each line per batch: 2 batches cannot do
    (the plane is not 2-colourable), 3 can."""
    lines = ((0, 1, 2), (0, 3, 4), (0, 5, 6), (1, 3, 5), (1, 4, 6), (2, 3, 6), (2, 4, 5))
    return CapacityProblem(n=7, members=lines, caps=(2,) * 7)


@pytest.mark.parametrize(("problem", "optimum", "bound"), [(grotzsch(), 4, 2), (fano(), 3, 2)])
def test_branch_and_bound_proves_the_optimum_above_the_bound(
    problem: CapacityProblem, optimum: int, bound: int
) -> None:
    found = fewest_batches_exact(problem, problem.n, lower_bound=bound)
    assert found.proved and found.batches == optimum and found.batch_of is not None
    assert violation(problem, found.batch_of) == 0
    assert sorted(set(found.batch_of)) == list(range(optimum))


def test_branch_and_bound_proves_the_upper_bound_it_cannot_beat() -> None:
    """Given a 4-batch solution of the Grotzsch graph, nothing better: the 4 is proved."""
    found = fewest_batches_exact(grotzsch(), 4, lower_bound=2)
    assert found.proved and found.batches == 4 and found.batch_of is None


def cycle(n: int) -> CapacityProblem:
    return CapacityProblem(n=n, members=tuple((i, (i + 1) % n) for i in range(n)),
                           caps=(1,) * n)


@pytest.mark.parametrize(("problem", "bound"), [(cycle(5), 3), (cycle(6), 2), (grotzsch(), 3),
                                                 (fano(), 2)])
def test_fractional_bound_is_the_fractional_chromatic_number_rounded_up(
    problem: CapacityProblem, bound: int
) -> None:
    """5-cycle 5/2, Grotzsch 29/10; Fano: 7 points, safe batches of at most 4, so 7/4."""
    assert fractional_bound(problem) == bound


def test_fractional_bound_gives_up_on_too_many_safe_batches() -> None:
    assert fractional_bound(grotzsch(), max_sets=10) is None
    assert fractional_bound(CapacityProblem(n=0, members=(), caps=())) == 0


def brute_force_fewest(problem: CapacityProblem) -> int:
    """The fewest batches by trying every assignment to 1, 2, ... batches."""
    for k in range(1, problem.n + 1):
        for assign in itertools.product(range(k), repeat=problem.n):
            if violation(problem, assign) == 0:
                return k
    raise AssertionError("unreachable: one node per batch is safe")


@pytest.mark.parametrize(("seed", "cl"), [(s, cl) for s in range(3) for cl in ("QUORUM", "ONE")])
def test_bound_and_proof_agree_with_brute_force_on_tiny_rings(seed: int, cl: str) -> None:
    ring = Ring.synthetic(7, vnodes=3, rf=3, racks=1, seed=seed)
    reqs = requirements(ring, consistency_level=cl)
    problem = CapacityProblem(n=7, members=tuple(r.members for r in reqs),
                              caps=tuple(len(r.members) - r.need for r in reqs))
    optimum = brute_force_fewest(problem)
    bound = fractional_bound(problem)
    assert bound is not None and bound <= optimum
    plan = safe_batches(ring, consistency_level=cl)
    assert len(plan) == optimum == plan.lower_bound and plan.exact


def test_branch_and_bound_out_of_budget_proves_nothing() -> None:
    found = fewest_batches_exact(grotzsch(), 11, lower_bound=2, max_nodes=3)
    assert not found.proved and found.nodes > 3


@pytest.mark.parametrize(("nodes", "cl", "optimum"), [(24, "QUORUM", 14), (36, "QUORUM", 15),
                                                      (36, "ONE", 4), (60, "QUORUM", 14)])
def test_small_one_rack_rings_get_the_proved_optimum(
    monkeypatch: pytest.MonkeyPatch, nodes: int, cl: str, optimum: int
) -> None:
    """16 vnodes, one rack: 36 nodes at QUORUM need 15 batches, one more than the largest
    clique (14), and 4 at ONE against a bound of 2; the branch and bound proves both. At 60
    nodes the clique is 11 but the fractional bound is 14, which the batches meet."""
    monkeypatch.setattr(topology, "_local_search", no_search)
    ring = Ring.synthetic(nodes, vnodes=16, rf=3, racks=1, seed=1)
    plan = safe_batches(ring, consistency_level=cl)
    assert len(plan) == optimum == plan.lower_bound and plan.exact
    for batch in plan.batches:
        check_batch(ring, batch, consistency_level=cl)


def test_an_unfinished_exact_search_falls_back_and_does_not_claim_a_proof(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(batch_search, "EXACT_NODES", 5)
    ring = Ring.synthetic(36, vnodes=16, rf=3, racks=1, seed=1)
    plan = safe_batches(ring, consistency_level="ONE", search_moves=500)
    assert not plan.exact and plan.lower_bound == 2 and len(plan) >= 4
    assert sorted(h for b in plan.batches for h in b) == sorted(ring.hosts)
    for batch in plan.batches:
        check_batch(ring, batch, consistency_level="ONE")


# ----------------------------------------------------------------- local search
def random_problem(rng: random.Random, n: int) -> CapacityProblem:
    """Replica-set-like requirements: windows of 3-5 nodes, caps 1-2."""
    members, caps = [], []
    for _ in range(rng.randint(n, 4 * n)):
        size = rng.randint(3, 5)
        members.append(tuple(rng.sample(range(n), size)))
        caps.append(rng.randint(1, size // 2))
    return CapacityProblem(n=n, members=tuple(members), caps=tuple(caps))


@pytest.mark.parametrize("seed", range(12))
def test_local_search_only_returns_safe_batchings(seed: int) -> None:
    rng = random.Random(seed)
    problem = random_problem(rng, rng.randint(6, 40))
    start = list(range(problem.n))  # one node per batch: safe
    found = fewer_batches(problem, start, lower_bound=1, seed=seed, max_moves=2_000)
    assert violation(problem, found.batch_of) == 0
    assert sorted(set(found.batch_of)) == list(range(found.batches))
    assert found.batches <= problem.n and found.moves <= 2_000


@pytest.mark.parametrize("seed", range(6))
def test_safe_batches_with_the_search_on_small_rings_checks_out(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The exact search is switched off so the tabu search does the work."""
    monkeypatch.setattr(topology, "EXACT_NODE_LIMIT", 0)
    rng = random.Random(seed)
    ring = Ring.synthetic(rng.randint(8, 30), vnodes=rng.randint(1, 6), rf=rng.choice([3, 5]),
                          racks=1, seed=seed)
    cl = rng.choice(["ONE", "QUORUM"])
    tolerate = rng.choice([0, 1]) if cl == "ONE" else 0
    plan = safe_batches(ring, consistency_level=cl, tolerated_failures=tolerate,
                        search_moves=3_000, seed=seed)
    assert sorted(h for b in plan.batches for h in b) == sorted(ring.hosts)
    for batch in plan.batches:
        check_batch(ring, batch, consistency_level=cl, tolerated_failures=tolerate)


def dsatur_count(ring: Ring, cl: str) -> int:
    reqs = requirements(ring, consistency_level=cl)
    caps = np.array([len(r.members) - r.need for r in reqs])
    node_reqs: list[list[int]] = [[] for _ in ring.nodes]
    for j, r in enumerate(reqs):
        for m in r.members:
            node_reqs[m].append(j)
    arrays = [np.array(x, dtype=np.int64) for x in node_reqs]
    return len(topology._dsatur(range(len(ring.nodes)), reqs, arrays, caps, node_reqs))


def test_the_search_improves_on_dsatur_above_the_bound() -> None:
    """One rack, 16 vnodes: DSATUR takes 19 batches, the bound says 8 (it is weak)."""
    ring = Ring.synthetic(100, vnodes=16, rf=3, racks=1, seed=2)
    assert dsatur_count(ring, "QUORUM") == 19
    plan = safe_batches(ring, consistency_level="QUORUM", search_moves=3_000)
    assert len(plan) == 15 and plan.lower_bound == 8 and not plan.exact
    for batch in plan.batches:
        check_batch(ring, batch, consistency_level="QUORUM")


def test_the_search_is_deterministic_for_a_seed() -> None:
    ring = Ring.synthetic(90, vnodes=16, rf=3, racks=1, seed=7)
    runs = [safe_batches(ring, consistency_level="QUORUM", search_moves=2_000, seed=3)
            for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize(("seed", "cap_one"), [(s, c) for s in range(4) for c in (True, False)])
def test_the_incremental_scores_match_a_recount_after_the_moves(seed: int, cap_one: bool) -> None:
    """The tabu search moves nodes and updates the scores (and its tabu penalties) one
    move at a time; after thousands of moves they are still the scores of the batching."""
    rng = random.Random(seed)
    problem = random_problem(rng, 40)
    if cap_one:
        problem = CapacityProblem(n=problem.n, members=problem.members,
                                  caps=(1,) * len(problem.members))
    k = 4
    start = [rng.randrange(k) for _ in range(problem.n)]
    state_of = batch_search._PairState if cap_one else batch_search._CapState
    state = state_of(problem, start, k)
    found, spent, _ = batch_search._tabu(state, 3_000, float("inf"), np.random.default_rng(seed))
    assert spent == 3_000 and not found  # 4 batches are too few for every one of these
    fresh = state_of(problem, state.where, k)
    bits = batch_search.TIE_BITS
    assert np.array_equal(state.score >> bits, fresh.score >> bits)
    assert state.violation == fresh.violation > 0
    assert np.array_equal(state.own_at, fresh.own_at)
    if not cap_one:
        assert state.violation == violation(problem, state.where)


def test_a_round_also_makes_the_moves_its_evaluation_still_prices() -> None:
    """Two clashes apart (0-1 and 2-3, nothing shared between them): one evaluation, one
    move in each, no violation left; never both nodes of one clash."""
    problem = CapacityProblem(n=4, members=((0, 1), (2, 3)), caps=(1, 1))
    state = batch_search._PairState(problem, [0, 0, 0, 0], 2)
    rounds = batch_search._Rounds(state, np.random.default_rng(0))
    rounds.run(best_seen=2, budget=10)
    assert state.violation == 0 and rounds.count == 1 and rounds.moves == 2
    assert sorted(state.where) == [0, 0, 1, 1]
    assert state.where[0] != state.where[1] and state.where[2] != state.where[3]
    state = batch_search._PairState(problem, [0, 0, 0, 0], 2)
    rounds = batch_search._Rounds(state, np.random.default_rng(0))
    rounds.run(best_seen=2, budget=1)  # the budget holds within a round
    assert state.violation == 1 and rounds.moves == 1


def test_free_moves_keep_the_violation_and_move_only_nodes_in_none() -> None:
    """0-1 and 3-4 clash; 2 (with 1 in batch 0) violates nothing and may go to batch 2,
    where it violates nothing either: the only free move."""
    problem = CapacityProblem(n=5, members=((0, 1), (1, 2), (3, 4)), caps=(1, 1, 1))
    state = batch_search._PairState(problem, [0, 0, 1, 2, 2], 3)
    rounds = batch_search._Rounds(state, np.random.default_rng(0))
    rounds.free_moves(budget=10)
    assert state.where == [0, 0, 2, 2, 2] and state.violation == 2 and rounds.moves == 1


@pytest.mark.parametrize("seed", range(4))
def test_free_moves_on_a_random_batching_keep_it_as_it_was_elsewhere(seed: int) -> None:
    """Any caps: the moved nodes violated nothing before and after, none shares a
    requirement with another, and the violation (recounted) is unchanged."""
    rng = random.Random(seed)
    problem = random_problem(rng, 40)
    state = batch_search._CapState(problem, [rng.randrange(8) for _ in range(problem.n)], 8)
    batch_search._tabu(state, 300, float("inf"), np.random.default_rng(seed))  # fewer clashes
    start, before = list(state.where), violation(problem, state.where)
    rounds = batch_search._Rounds(state, np.random.default_rng(seed))
    rounds.free_moves(budget=100)
    moved = [v for v in range(problem.n) if state.where[v] != start[v]]
    assert moved and len(moved) == rounds.moves <= batch_search.FREE_MOVES
    assert violation(problem, state.where) == state.violation == before
    node_reqs = problem.node_reqs()
    for v in moved:
        for j in node_reqs[v]:  # within its cap in v's batch, before and after
            ms, cap = problem.members[j], problem.caps[j]
            assert sum(start[m] == start[v] for m in ms) <= cap
            assert sum(state.where[m] == state.where[v] for m in ms) <= cap
        assert not set(moved) & {m for j in node_reqs[v] for m in problem.members[j]} - {v}


def test_the_final_check_refuses_an_unsafe_batching() -> None:
    problem = CapacityProblem(n=3, members=((0, 1, 2),), caps=(1,))
    incidence = (np.zeros(3, dtype=np.int64), np.arange(3, dtype=np.int64))
    batch_search._check_safe(problem, incidence, [0, 1, 2], 3)
    with pytest.raises(RuntimeError, match="unsafe batching"):
        batch_search._check_safe(problem, incidence, [0, 1, 1], 2)


def assert_safe(ring: Ring, plan: topology.BatchPlan, cl: str) -> None:
    """Every replica set keeps its CL in every batch, counted here from the requirements."""
    batch_of = {h: b for b, batch in enumerate(plan.batches) for h in batch}
    assert sorted(batch_of) == sorted(ring.hosts)
    for r in requirements(ring, consistency_level=cl):
        down = [batch_of[ring.nodes[m].host] for m in r.members]
        assert max(down.count(b) for b in down) <= len(r.members) - r.need


def test_a_thousand_nodes_on_one_rack_take_fifteen_batches() -> None:
    """Issue 17's ring: 1,000 nodes, 16 vnodes, one rack, QUORUM. DSATUR takes 19 batches,
    the search 15 (search seed 0: at move 39,377); the clique bound is 5."""
    ring = Ring.synthetic(1000, vnodes=16, rf=3, racks=1, seed=1)
    assert dsatur_count(ring, "QUORUM") == 19
    plan = safe_batches(ring, consistency_level="QUORUM", seed=0, search_seconds=300)
    assert len(plan) == 15 and plan.lower_bound == 5 and not plan.exact
    assert_safe(ring, plan, "QUORUM")


def clique(n: int) -> CapacityProblem:
    return CapacityProblem(n=n, members=tuple(itertools.combinations(range(n), 2)),
                           caps=(1,) * (n * (n - 1) // 2))


def test_a_stalled_search_gives_up_before_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clique of 6 needs 6 batches: at 5 the least violation stays 1, and the search
    stops PATIENCE_PER_NODE * 6 / 1**2 moves after it last fell, not at the move budget."""
    monkeypatch.setattr(batch_search, "PATIENCE_PER_NODE", 150)
    found = fewer_batches(clique(6), list(range(6)), lower_bound=1, seed=1, max_moves=10**6)
    assert found.batches == 6 and found.reached == () and not found.stopped_by_time
    assert found.moves <= batch_search.PATIENCE_PER_NODE * 6 + 10
    state = batch_search._PairState(clique(6), [0, 1, 2, 3, 4, 0], 5)
    _, spent, _ = batch_search._tabu(state, 10**6, float("inf"), np.random.default_rng(0),
                                     patience=40)
    assert spent == 40  # violation 1 from the start: never falls, 40 / 1 moves
    state = batch_search._PairState(clique(7), [0, 1, 2, 3, 4, 0, 1], 5)
    _, spent, _ = batch_search._tabu(state, 10**6, float("inf"), np.random.default_rng(0),
                                     patience=40)
    assert spent == 10  # violation 2, the least 5 batches allow 7 nodes: 40 / 2**2 moves


def test_the_clock_stops_the_search_with_the_safe_batching_it_had() -> None:
    problem = random_problem(random.Random(1), 30)
    start = list(range(30))
    found = fewer_batches(problem, start, lower_bound=1, seconds=1e-9)
    assert found.stopped_by_time and violation(problem, found.batch_of) == 0


def test_search_budgets_are_validated() -> None:
    ring = Ring.simple(["a", "b", "c"], rf=3)
    with pytest.raises(topology.ValidationError, match=r"search_seconds: must be > 0, got 0"):
        safe_batches(ring, consistency_level="ONE", search_seconds=0)
    with pytest.raises(topology.ValidationError, match=r"search_moves: must be >= 0, got -1"):
        safe_batches(ring, consistency_level="ONE", search_moves=-1)


def test_an_unsafe_batching_from_a_heuristic_is_refused_not_returned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The final check: a bug in a heuristic fails loudly, naming the replica set."""
    def everything_at_once(todo: list[int], *_args: object) -> tuple[list[list[int]], int, bool]:
        return [list(todo)], 1, True

    monkeypatch.setattr(topology, "_fewest_batches", everything_at_once)
    with pytest.raises(UnsafeBatchError, match=r"leaves 0 of 3 replica\(s\) up .* QUORUM needs 2"):
        safe_batches(Ring.simple(["a", "b", "c"], rf=3), consistency_level="QUORUM")


# ---------------------------------------------------------------------- reasons
def test_reasons_name_the_tightest_replica_set_margin() -> None:
    ring = Ring.simple([f"n{i}" for i in range(10)], rf=5)
    assert batch_reasons(ring, [["n0"], ["n0", "n1"]], consistency_level="ONE",
                         tolerated_failures=1) == (
        "tightest replica set keeps 4 of 5 replicas up; ONE needs 1 plus 1 spare",
        "tightest replica set keeps 3 of 5 replicas up; ONE needs 1 plus 1 spare",
    )
    plan = safe_batches(ring, consistency_level="QUORUM")  # 3 batches: 2 of 5 down at most
    assert len(plan) == 3
    assert "tightest replica set keeps 3 of 5 replicas up; QUORUM needs 3" in plan.reasons
    assert set(plan.reasons) <= {f"tightest replica set keeps {k} of 5 replicas up; QUORUM "
                                 "needs 3" for k in (3, 4)}


def test_batch_reasons_refuses_an_unsafe_batch() -> None:
    ring = Ring.simple(["a", "b", "c"], rf=3)
    with pytest.raises(UnsafeBatchError, match=r"taking down a, b leaves 1 of 3"):
        batch_reasons(ring, [["a", "b"]], consistency_level="QUORUM")


def test_aggressive_plan_says_availability_is_given_up() -> None:
    plan = safe_batches(Ring.simple(["a", "b", "c"], rf=3), consistency_level="ALL",
                        aggressive=True)
    assert plan.reasons == ("AGGRESSIVE, availability not kept: all 3 node(s) at once; a "
                            "cannot go down even alone (3 replica(s), ALL needs 3)",)


def test_cli_prints_the_count_the_bound_and_why_each_batch_is_safe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["batches", "--hosts", "a,b,c,d", "--rf", "3", "--cl", "QUORUM"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "4 batch(es), lower bound 4 (minimal), for QUORUM with 0 tolerated failure(s):",
        *[line for h in "abcd" for line in (
            f"  {'abcd'.index(h) + 1}: {h}",
            "     safe: tightest replica set keeps 2 of 3 replicas up; QUORUM needs 2")],
    ]
    assert main(["batches", "--hosts", "a,b,c", "--cl", "ONE", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reasons"] == [
        "tightest replica set keeps 1 of 3 replicas up; ONE needs 1",
        "tightest replica set keeps 2 of 3 replicas up; ONE needs 1",
    ]
