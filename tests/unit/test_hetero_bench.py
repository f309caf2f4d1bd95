"""bench/hetero_bench.py on a tiny instance (2 tables, 2 nodes, 3 time points, 2 options
per track): its joint objective against a plain re-computation, and every method against
the brute-force optimum over all plans."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.planning import optimiser as op

REPO = Path(__file__).resolve().parents[2]
TWO_NODE_OPTIONS = ({"concurrent_reads": 32, "concurrent_writes": 32},
                    {"concurrent_reads": 64, "concurrent_writes": 32})


@pytest.fixture(scope="module")
def hb() -> Any:
    """bench/hetero_bench.py as a module (in sys.modules: its dataclass needs it)."""
    spec = importlib.util.spec_from_file_location("hetero_bench", REPO / "bench" /
                                                  "hetero_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hetero_bench"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["hetero_bench"]


@pytest.fixture(scope="module")
def tiny(hb: Any) -> Any:
    return hb.build_problem(n_nodes=2, n_tables=2, n_steps=3,
                            cluster_keys=("memtable_cleanup_threshold",),
                            node_opts=TWO_NODE_OPTIONS)


@pytest.fixture(scope="module")
def every_plan(hb: Any, tiny: Any) -> tuple[np.ndarray, np.ndarray]:
    """All 16^3 plans and their values."""
    states = list(itertools.product(*(range(n) for n in tiny.options)))
    plans = np.array([np.array(c).T for c in itertools.product(states, repeat=tiny.n_steps)])
    return plans, hb.objective(tiny, plans)


def _by_hand(p: Any, plan: np.ndarray) -> float:
    """The objective re-computed with loops from its definition (the bench's docstring)."""
    n_tab, n_nodes = len(p.tables), len(p.hosts)
    keep = 1 - p.reconfig.survivor_penalty

    def cap(state: np.ndarray, t: int) -> float:
        bounds = []
        for n in range(n_nodes):
            ld = p.node_table_load[n, :, t]
            busy = sum(ld[i] / ld.sum() / p.caps[i, t, state[0], state[1 + i],
                                                 state[1 + n_tab + n]] for i in range(n_tab))
            share = p.node_load[n, t] / p.total_load[t]
            bounds.append((1 / busy) / n_nodes / share)
        return min(bounds)

    total, prev = 0.0, p.initial
    for t in range(p.n_steps):
        load, state = p.total_load[t], plan[:, t]
        after = cap(state, t)
        total += min(load, after) * p.step_seconds
        if p.restart[prev[0], state[0]]:
            before, done = cap(prev, t), 0.0
            for f, secs in zip(p.reconfig.batch_fractions, p.reconfig.batch_durations,
                               strict=True):
                pending = max(0.0, 1 - done - f) if abs(1 - done - f) > 1e-9 else 0.0
                actual = keep * (done * after + pending * before)
                total -= secs * max(0.0, min(load, after) - min(load, actual))
                done += f
        for i in range(n_tab):
            if prev[1 + i] != state[1 + i]:
                total -= 120.0 * min(load, after) * p.table_load[i, t] / load
        prev = state
    return total


def test_the_objective_is_its_definition(hb: Any, tiny: Any,
                                         every_plan: tuple[np.ndarray, np.ndarray]) -> None:
    plans, values = every_plan
    rng = np.random.default_rng(0)
    picked = rng.choice(len(plans), 40, replace=False)
    # a restart and a table change both occur among them (the costs are exercised)
    assert any(tiny.restart[tiny.initial[0], plans[i][0]].any() for i in picked)
    for i in picked:
        assert values[i] == pytest.approx(_by_hand(tiny, plans[i]), rel=1e-9)


def test_no_method_beats_the_brute_force_optimum(
        hb: Any, tiny: Any, every_plan: tuple[np.ndarray, np.ndarray]) -> None:
    plans, values = every_plan
    best = float(values.max())
    hprob, homo = hb.homogeneous_problem(tiny)
    dp = op.solve_dp(hprob)
    homogeneous = [i for i, pl in enumerate(plans)
                   if all(len(set(pl[1:1 + 2, t])) == 1 and len(set(pl[3:, t])) == 1
                          for t in range(tiny.n_steps))]
    # the DP is the exact optimum of the joint objective on the homogeneous subspace
    assert dp.total_ops == pytest.approx(float(values[homogeneous].max()), rel=1e-9)
    assert float(hb.objective(tiny, hb.plan_of_schedule(tiny, dp.schedule, homo))) == \
        pytest.approx(dp.total_ops, rel=1e-9)
    decomposed, _ = hb.decomposition(tiny, dp.schedule, homo)
    assert float(hb.objective(tiny, decomposed)) <= best * (1 + 1e-12)
    for seed in (0, 1):
        plan, value, _ = hb.solve_joint_ga(tiny, op.GAOptions(
            seed=seed, population=8, generations=5, searches=1))
        assert value == pytest.approx(float(hb.objective(tiny, plan)), rel=1e-9)
        assert value <= best * (1 + 1e-12)
    assert hb.bound(tiny) >= best


def test_a_track_dp_is_the_best_of_that_track(
        hb: Any, tiny: Any, every_plan: tuple[np.ndarray, np.ndarray]) -> None:
    """The polish's per-track DP finds the best plan among those that differ from the
    start in that track only."""
    plans, values = every_plan
    start = plans[12345 % len(plans)]
    for r in range(tiny.n_tracks):
        _, value = hb.track_dp(tiny, start, r)
        others = np.delete(np.arange(tiny.n_tracks), r)
        same = np.all(plans[:, others] == start[others], axis=(1, 2))
        assert value == pytest.approx(float(values[same].max()), rel=1e-9)
