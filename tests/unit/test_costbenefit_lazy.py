"""Switch costs computed when read (issue 42): the same numbers as the dense formulas.

The reference functions below are the (T, K, K) implementations as they were before
SwitchCostTensor, kept verbatim: the new path must give the same costs, the same DP
optimum and the same GA fitness on small random problems.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.model.spaces import change_kind, get_space
from planner.planning import risk as rk
from planner.planning.costbenefit import (
    PlanningProblem,
    ReconfigModel,
    SwitchCostTensor,
    credit,
    evaluate,
    evaluate_population,
    lockout_matrix,
    transition_costs,
)
from planner.planning.optimiser import solve_dp
from planner.planning.pipeline import (
    SwitchCosts,
    change_seconds_matrix,
    make_problem,
    restart_matrix,
)


# ----------------------------------------------------------- the old formulas
def _old_credit(x: np.ndarray, u: np.ndarray, load: np.ndarray | None, hw: float) -> np.ndarray:
    if load is None:
        return x
    return credit(x, load[u][:, None, None], hw)


def _old_rolling(cap: np.ndarray, model: ReconfigModel, step: float, load: np.ndarray | None,
                 hw: float) -> np.ndarray:
    n_t, n_k = cap.shape
    costs = np.zeros((n_t, n_k, n_k))
    t_idx = np.arange(n_t)
    keep = 1.0 - model.survivor_penalty
    done = 0.0
    for f, tr in zip(model.batch_fractions, model.batch_durations, strict=True):
        pending = 1.0 - done - f
        lo, hi = 0.0, tr
        while hi - lo > 1e-12:
            u_off = math.floor(lo / step + 1e-12)
            piece_end = min(hi, (u_off + 1) * step)
            dt = piece_end - lo
            u = np.minimum(t_idx + u_off, n_t - 1)
            cap_u = cap[u]
            cap_a = cap_u[:, :, None]
            cap_b = cap_u[:, None, :]
            actual = keep * (done * cap_b + pending * cap_a)
            short = (_old_credit(np.broadcast_to(cap_b, costs.shape), u, load, hw)
                     - _old_credit(actual, u, load, hw))
            costs += dt * np.maximum(short, 0.0)
            lo = piece_end
        done += f
    return costs


def _span_reference(cap: np.ndarray, change: np.ndarray, span: np.ndarray | None, step: float,
                    load: np.ndarray | None, hw: float) -> np.ndarray:
    """A change's cost spread over its span, switch by switch and second by second piece:
    the share ``c / d`` of the new configuration's capacity for ``d = max(span, c)``
    seconds, each piece at its own interval's load."""
    n_t, n_k = cap.shape
    out = np.zeros((n_t, n_k, n_k))
    for t, a, b in itertools.product(range(n_t), range(n_k), range(n_k)):
        c = float(change[a, b])
        if a == b or c <= 0:
            continue
        d = max(c, 0.0 if span is None else float(span[a, b]))
        lo = 0.0
        while d - lo > 1e-12:
            u_off = math.floor(lo / step + 1e-12)
            end = min(d, (u_off + 1) * step)
            u = min(t + u_off, n_t - 1)
            ld = None if load is None else np.float64(load[u])
            full = cap[u, b] if ld is None else credit(np.float64(cap[u, b]), ld, hw)
            part = (1 - c / d) * cap[u, b]
            less = part if ld is None else credit(np.float64(part), ld, hw)
            out[t, a, b] += (end - lo) * max(float(full - less), 0.0)
            lo = end
    return out


def old_transition_costs(cap: np.ndarray, *, restart: np.ndarray, model: ReconfigModel,
                         step_seconds: float, load: np.ndarray | None = None,
                         change_seconds: np.ndarray | None = None,
                         headroom_weight: float = 0.0,
                         change_span: np.ndarray | None = None) -> np.ndarray:
    """transition_costs before issue 42 (``load`` None: the capacity is credited), with a
    change's cost over its span (issue 38) from :func:`_span_reference`."""
    n_k = cap.shape[1]
    costs = np.where(restart[None, :, :],
                     _old_rolling(cap, model, step_seconds, load, headroom_weight), 0.0)
    extra = np.where(restart, model.warmup_seconds, model.live_seconds)
    if change_seconds is not None:
        costs = costs + _span_reference(cap, change_seconds, change_span, step_seconds, load,
                                        headroom_weight)
    if np.any(extra > 0):
        full = _old_credit(np.broadcast_to(cap[:, None, :], costs.shape), np.arange(len(cap)),
                           load, headroom_weight)
        costs = costs + extra[None, :, :] * full
    diag = np.arange(n_k)
    costs[:, diag, diag] = 0.0
    return costs


def old_solve_dp_value(problem: PlanningProblem, costs: np.ndarray) -> float:
    """The old DP's optimum (``costs`` dense), the value from interval 0 on."""
    n_t, n_k = problem.n_steps, problem.n_candidates
    dt = problem.step_seconds
    cum = np.zeros((n_t + 1, n_k))
    np.cumsum(problem.served * dt, axis=0, out=cum[1:])
    value = np.zeros((n_t + 1, n_k))
    lock = problem.lockout
    cols = np.arange(n_k)[None, :]
    for t in range(n_t - 1, -1, -1):
        stay = problem.served[t] * dt + value[t + 1]
        end = np.minimum(t + lock, n_t)
        move = cum[end, cols] - cum[t][None, :] - costs[t] + value[end, cols]
        np.fill_diagonal(move, -np.inf)
        best_move = move.max(axis=1)
        value[t] = np.where(best_move > stay + 1e-9 * np.maximum(1.0, np.abs(stay)),
                            best_move, stay)
    return float(value[0, problem.initial])


# ------------------------------------------------------------- random inputs
def _inputs(seed: int, n_t: int, n_k: int) -> dict:
    rng = np.random.default_rng(seed)
    cap = rng.uniform(100, 2000, size=(n_t, n_k))
    load = rng.uniform(0, 2500, size=n_t)
    load[rng.integers(n_t)] = 0.0  # no load at all in one interval
    restart = rng.random((n_k, n_k)) < 0.6
    np.fill_diagonal(restart, False)
    n_b = int(rng.integers(1, 4))
    model = ReconfigModel(
        restart_seconds=float(rng.choice([5.0, 30.0, 95.0])),
        batch_fractions=tuple(np.full(n_b, 1 / n_b)),
        survivor_penalty=float(rng.choice([0.0, 0.05, 0.2])),
        live_seconds=float(rng.choice([0.0, 2.0])),
        warmup_seconds=float(rng.choice([0.0, 7.0])),
        batch_seconds=tuple(rng.uniform(1, 120, n_b)) if rng.random() < 0.3 else None,
    )
    change = np.where(rng.random((n_k, n_k)) < 0.3, rng.choice([24.7, 120.0]), 0.0) \
        if rng.random() < 0.5 else None
    span = rng.choice([0.0, 84.8, 300.0], size=(n_k, n_k)) \
        if change is not None and rng.random() < 0.5 else None
    return {"cap": cap, "load": load, "restart": restart, "model": model, "change": change,
            "span": span, "step": float(rng.choice([10.0, 30.0, 60.0]))}


MODES = [("capacity", 0.0), ("offered", 0.0), ("work", 0.5), ("work", 1.0)]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 100_000), st.sampled_from(MODES))
def test_costs_read_lazily_equal_the_dense_formula(seed: int, mode: tuple) -> None:
    served, hw = mode
    x = _inputs(seed, n_t=7, n_k=5)
    load = None if served == "capacity" else x["load"]
    old = old_transition_costs(x["cap"], restart=x["restart"], model=x["model"],
                               step_seconds=x["step"], load=load, change_seconds=x["change"],
                               headroom_weight=hw if served == "work" else 0.0,
                               change_span=x["span"])
    lazy = SwitchCostTensor(x["cap"], restart=x["restart"], model=x["model"],
                            step_seconds=x["step"], load=x["load"], served=served,
                            change_seconds=x["change"], headroom_weight=hw,
                            change_span=x["span"])
    assert lazy.shape == old.shape
    # whole intervals and row blocks: the same numbers (to rounding: the last batch's
    # pending share is exactly 0 now, not 5.6e-17)
    dense = transition_costs(
        x["cap"], restart=x["restart"], model=x["model"], step_seconds=x["step"],
        load=x["load"], served=served, change_seconds=x["change"], headroom_weight=hw,
        change_span=x["span"])
    assert np.allclose(dense, old, rtol=1e-12, atol=1e-9)
    assert np.array_equal(lazy[3], dense[3])
    assert np.array_equal(lazy[2, 1:4], dense[2, 1:4])
    assert np.array_equal(np.asarray(lazy), dense)
    # single switches (the GA's reads) agree to rounding
    t, a, b = (np.array(v) for v in zip(*itertools.product(range(7), range(5), range(5)),
                                        strict=True))
    assert np.allclose(lazy[t, a, b], old[t, a, b], rtol=1e-12, atol=1e-9)
    assert lazy[6, 4, 0] == pytest.approx(old[6, 4, 0], rel=1e-12, abs=1e-9)


def test_a_block_of_rows_smaller_than_the_matrix_gives_the_same_costs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = _inputs(11, n_t=4, n_k=9)
    whole = transition_costs(x["cap"], restart=x["restart"], model=x["model"],
                             step_seconds=x["step"], load=x["load"], served="work",
                             headroom_weight=0.5)
    monkeypatch.setattr("planner.planning.costbenefit.ROW_BLOCK", 2)
    blocks = transition_costs(x["cap"], restart=x["restart"], model=x["model"],
                              step_seconds=x["step"], load=x["load"], served="work",
                              headroom_weight=0.5)
    assert np.array_equal(blocks, whole)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 100_000), st.sampled_from(MODES), st.integers(1, 4))
def test_make_problem_over_samples_equals_the_old_sum(seed: int, mode: tuple,
                                                      samples: int) -> None:
    """The expected costs over sample paths: the old per-sample sum, divided by S."""
    served, hw = mode
    x = _inputs(seed, n_t=6, n_k=4)
    rng = np.random.default_rng(seed + 1)
    caps = x["cap"][None] * rng.uniform(0.7, 1.3, size=(samples, 6, 4))
    loads = x["load"][None] * rng.uniform(0.7, 1.3, size=(samples, 6))
    prob = make_problem(caps, restart=x["restart"], reconfig=x["model"], step_seconds=x["step"],
                        load=loads, served=served, change_seconds=x["change"],
                        headroom_weight=hw)
    old = np.zeros((6, 4, 4))
    for s in range(samples):
        old += old_transition_costs(
            caps[s], restart=x["restart"], model=x["model"], step_seconds=x["step"],
            load=None if served == "capacity" else loads[s], change_seconds=x["change"],
            headroom_weight=hw if served == "work" else 0.0)
    old = old / samples
    assert isinstance(prob.costs, SwitchCostTensor)
    assert np.allclose(np.asarray(prob.costs), old, rtol=1e-12, atol=1e-9)
    genomes = np.random.default_rng(seed).integers(0, 4, size=(30, 6))
    dense = PlanningProblem(served=prob.served, costs=old, lockout=prob.lockout,
                            step_seconds=prob.step_seconds)
    lazy_vals, lazy_fixed = evaluate_population(prob, genomes)
    old_vals, old_fixed = evaluate_population(dense, genomes)
    assert np.array_equal(lazy_fixed, old_fixed)
    assert np.allclose(lazy_vals, old_vals, rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 100_000), st.sampled_from(MODES))
def test_dp_on_computed_costs_reaches_the_old_dp_optimum(seed: int, mode: tuple) -> None:
    served, hw = mode
    x = _inputs(seed, n_t=12, n_k=6)
    prob = make_problem(x["cap"], restart=x["restart"], reconfig=x["model"],
                        step_seconds=x["step"], load=x["load"], served=served,
                        change_seconds=x["change"], headroom_weight=hw,
                        initial=int(seed % 6))
    dense = np.asarray(prob.costs)
    old_value = old_solve_dp_value(prob, dense)
    dp = solve_dp(prob)
    assert dp.total_ops == pytest.approx(old_value, rel=1e-9)
    stored = PlanningProblem(served=prob.served, costs=dense, lockout=prob.lockout,
                             step_seconds=prob.step_seconds, initial=prob.initial)
    assert solve_dp(stored).schedule.tolist() == dp.schedule.tolist()
    assert evaluate(stored, dp.schedule).total_ops == pytest.approx(dp.total_ops, rel=1e-12)


def test_dp_with_three_lockout_lengths_matches_brute_force() -> None:
    """A lock-out matrix with more than the usual two lengths (live, restart)."""
    rng = np.random.default_rng(5)
    cap = rng.uniform(5, 20, size=(6, 3))
    lockout = np.array([[1, 2, 3], [3, 1, 2], [2, 3, 1]])
    costs = rng.uniform(0, 50, size=(6, 3, 3))
    prob = PlanningProblem(served=cap, costs=costs, lockout=lockout, step_seconds=10.0)
    genomes = np.array(list(itertools.product(range(3), repeat=6)))
    values, _ = evaluate_population(prob, genomes)
    assert solve_dp(prob).total_ops == pytest.approx(values.max())
    assert solve_dp(prob).total_ops == pytest.approx(old_solve_dp_value(prob, costs))


def test_scenario_costs_are_each_scenarios_costs() -> None:
    """make_scenarios keeps no (S, T, K, K) array; each scenario's costs are its own."""
    x = _inputs(3, n_t=5, n_k=4)
    pricing = SwitchCosts(restart=x["restart"], reconfig=x["model"], step_seconds=x["step"],
                          served="work", headroom_weight=0.5)
    rng = np.random.default_rng(0)
    caps = x["cap"][None] * rng.uniform(0.8, 1.2, size=(6, 5, 4))
    loads = np.broadcast_to(x["load"], (6, 5)).copy()
    sc = rk.make_scenarios(caps, loads, pricing)
    for s in range(6):
        old = old_transition_costs(caps[s], restart=x["restart"], model=x["model"],
                                   step_seconds=x["step"], load=loads[s], headroom_weight=0.5)
        assert sc.costs[:, 2, 1, 3][s] == pytest.approx(old[2, 1, 3], rel=1e-12)
    sched = np.array([0, 0, 3, 3, 1])
    expect = [
        float(np.sum(sc.served[s, np.arange(5), sched]) * x["step"])
        - sum(old_transition_costs(caps[s], restart=x["restart"], model=x["model"],
                                   step_seconds=x["step"], load=loads[s],
                                   headroom_weight=0.5)[t, a, b]
              for t, a, b in ((2, 0, 3), (4, 3, 1)))
        for s in range(6)
    ]
    assert np.allclose(sc.values(sched), expect, rtol=1e-12)


def _old_pairwise(engine: str, candidates: list, value) -> np.ndarray:  # type: ignore[no-untyped-def]
    space = get_space(engine)
    full = [space.complete(c) for c in candidates]
    n = len(full)
    out = np.zeros((n, n), dtype=object)
    for a in range(n):
        for b in range(n):
            if a != b:
                out[a, b] = value(space.changed_keys(full[a], full[b]), full[a], full[b])
    return out


def test_candidate_matrices_equal_the_pairwise_definitions() -> None:
    """restart_matrix and change_seconds_matrix per parameter, as per pair before."""
    space = get_space("cassandra")
    cands = space.candidates(
        keys=("compaction", "row_cache_size", "concurrent_reads", "heap_size"),
        values={"row_cache_size": ("0MiB", "64MiB", "128MiB")}, max_configs=64)
    restart = _old_pairwise("cassandra", cands, lambda keys, a, b: any(
        change_kind("cassandra", k, a[k], b[k]) == "restart" for k in keys))
    seconds = _old_pairwise("cassandra", cands, lambda keys, a, b: sum(
        {"compaction": 120.0, "heap_size": 7.5}.get(k, 0.0) for k in keys))
    assert restart_matrix("cassandra", cands).tolist() == restart.astype(bool).tolist()
    assert change_seconds_matrix("cassandra", cands, {"compaction": 120.0, "heap_size": 7.5}
                                 ).tolist() == seconds.astype(float).tolist()
    # a live row-cache resize (64 -> 128 MiB) needs no restart; turning it on does
    k64 = next(i for i, c in enumerate(cands) if c["row_cache_size"] == "64MiB"
               and all(c[k] == cands[0][k] for k in c if k != "row_cache_size"))
    k128 = next(i for i, c in enumerate(cands) if c["row_cache_size"] == "128MiB"
                and all(c[k] == cands[0][k] for k in c if k != "row_cache_size"))
    assert not restart_matrix("cassandra", cands)[k64, k128]
    assert restart_matrix("cassandra", cands)[0, k64] == (cands[0]["row_cache_size"] == "0MiB")


def test_a_large_problem_holds_no_cost_tensor() -> None:
    """512 candidates x 200 intervals: the dense tensor would be 420 MB; the problem holds
    its (T, K) and (K, K) inputs only."""
    rng = np.random.default_rng(0)
    n_t, n_k = 200, 512
    cap = rng.uniform(100, 2000, size=(n_t, n_k))
    restart = rng.random((n_k, n_k)) < 0.7
    model = ReconfigModel(restart_seconds=60.0, batch_fractions=(1 / 3,) * 3)
    prob = make_problem(cap, restart=restart, reconfig=model, step_seconds=60.0)
    assert isinstance(prob.costs, SwitchCostTensor)
    assert prob.costs.shape == (n_t, n_k, n_k)
    held = sum(v.nbytes for v in vars(prob.costs).values() if isinstance(v, np.ndarray))
    assert held < 5 * n_k * n_k * 8
    row = prob.costs[7]
    assert row.shape == (n_k, n_k) and np.all(np.diag(row) == 0)
    assert prob.costs[7, 3, 9] == pytest.approx(row[3, 9], rel=1e-12)
    assert lockout_matrix(restart, model=model, step_seconds=60.0).max() == 3
