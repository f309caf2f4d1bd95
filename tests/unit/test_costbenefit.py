"""Cost-benefit: hand-computed transition costs, SOPHIA's break-even, plan evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.planning.costbenefit import (
    PlanningProblem,
    ReconfigModel,
    break_even_seconds,
    decode,
    evaluate,
    evaluate_population,
    lockout_matrix,
    schedule_from_switches,
    served_matrix,
    transition_costs,
)

RESTART = np.array([[False, True], [True, False]])
LIVE = np.zeros((2, 2), dtype=bool)


def test_sophia_break_even_two_servers_one_at_a_time() -> None:
    """SOPHIA Fig. 2: 40k -> 50k ops/s, 2 servers, CL=1 so one server at a time.

    Batch 1 down: the other server (old config) serves 40k/2 = 20k, 30k short of 50k.
    Batch 2 down: the reconfigured server serves 50k/2 = 25k, 25k short.
    Cost = 55k * T_r; the switch pays after cost / (50k - 40k) = 5.5 T_r.
    With T_r = 35 s that is 192.5 s -- SOPHIA reports the crossover at ~190 s.
    """
    model = ReconfigModel(restart_seconds=35.0, batch_fractions=(0.5, 0.5))
    assert break_even_seconds(old_capacity=40_000, new_capacity=50_000, model=model) == (
        pytest.approx(192.5)
    )
    cap = np.array([[40_000.0, 50_000.0]])
    cost = transition_costs(cap, restart=RESTART, model=model, step_seconds=300.0)
    assert cost[0, 0, 1] == pytest.approx(55_000 * 35.0)
    # the reverse switch: batch 1 leaves the 40k half... (50k/2 up) short of 40k by 15k,
    # batch 2 leaves 40k/2 up, short by 20k
    assert cost[0, 1, 0] == pytest.approx(35_000 * 35.0)


def test_break_even_never_for_a_slower_config() -> None:
    model = ReconfigModel(restart_seconds=35.0, batch_fractions=(0.5, 0.5))
    assert break_even_seconds(old_capacity=50_000, new_capacity=40_000, model=model) == np.inf


def test_all_at_once_loses_everything_for_t_r() -> None:
    model = ReconfigModel(restart_seconds=60.0, batch_fractions=(1.0,))
    cap = np.array([[40_000.0, 50_000.0]])
    cost = transition_costs(cap, restart=RESTART, model=model, step_seconds=300.0)
    assert cost[0, 0, 1] == pytest.approx(50_000 * 60.0)


def test_survivor_penalty_adds_to_the_cost() -> None:
    """Three batches of 1/3, penalty 10%: actual_i = 0.9 * (done*new + pending*old)."""
    model = ReconfigModel(restart_seconds=10.0, batch_fractions=(1 / 3,) * 3, survivor_penalty=0.1)
    cap = np.array([[30_000.0, 60_000.0]])
    cost = transition_costs(cap, restart=RESTART, model=model, step_seconds=100.0)[0, 0, 1]
    a1 = 0.9 * (0 * 60_000 + 2 / 3 * 30_000)
    a2 = 0.9 * (1 / 3 * 60_000 + 1 / 3 * 30_000)
    a3 = 0.9 * (2 / 3 * 60_000 + 0 * 30_000)
    assert cost == pytest.approx(10.0 * ((60_000 - a1) + (60_000 - a2) + (60_000 - a3)))


def test_a_measured_warm_up_adds_full_capacity_seconds_to_restarts_only() -> None:
    cold = ReconfigModel(restart_seconds=10.0, batch_fractions=(0.5, 0.5), warmup_seconds=7.0)
    plain = ReconfigModel(restart_seconds=10.0, batch_fractions=(0.5, 0.5))
    cap = np.array([[30_000.0, 60_000.0]])
    with_warmup = transition_costs(cap, restart=RESTART, model=cold, step_seconds=100.0)
    without = transition_costs(cap, restart=RESTART, model=plain, step_seconds=100.0)
    # The new configuration's full capacity, for the seconds the cold nodes lose.
    assert with_warmup[0, 0, 1] - without[0, 0, 1] == pytest.approx(7.0 * 60_000)
    assert np.all(transition_costs(cap, restart=LIVE, model=cold, step_seconds=100.0) == 0)
    with pytest.raises(ValidationError, match="warmup_seconds: must be a finite number >= 0"):
        ReconfigModel(restart_seconds=1.0, batch_fractions=(1.0,), warmup_seconds=-1.0)


def test_live_changes_cost_nothing_by_default() -> None:
    model = ReconfigModel(restart_seconds=60.0, batch_fractions=(0.5, 0.5))
    cap = np.array([[40_000.0, 50_000.0]])
    assert np.all(transition_costs(cap, restart=LIVE, model=model, step_seconds=60.0) == 0)
    warm = ReconfigModel(restart_seconds=60.0, batch_fractions=(0.5, 0.5), live_seconds=2.0)
    cost = transition_costs(cap, restart=LIVE, model=warm, step_seconds=60.0)
    assert cost[0, 0, 1] == pytest.approx(2.0 * 50_000)


def test_restart_spanning_intervals_uses_each_intervals_capacity() -> None:
    """One batch (all nodes) down 90 s with 60 s intervals: 60 s at t, 30 s at t+1."""
    model = ReconfigModel(restart_seconds=90.0, batch_fractions=(1.0,))
    cap = np.array([[10.0, 20.0], [10.0, 40.0]])
    cost = transition_costs(cap, restart=RESTART, model=model, step_seconds=60.0)
    assert cost[0, 0, 1] == pytest.approx(60 * 20 + 30 * 40)
    assert cost[1, 0, 1] == pytest.approx(90 * 40)  # the last interval repeats past the end


def test_offered_mode_restarts_in_quiet_periods_are_cheap() -> None:
    """Offered load 20k, capacity 40k -> 50k: half the cluster still carries 20k+."""
    model = ReconfigModel(restart_seconds=35.0, batch_fractions=(0.5, 0.5))
    cap = np.array([[40_000.0, 50_000.0]])
    cost = transition_costs(
        cap, restart=RESTART, model=model, step_seconds=300.0, load=np.array([20_000.0]),
        served="offered",
    )
    assert cost[0, 0, 1] == pytest.approx(0.0)
    served = served_matrix(cap, load=np.array([20_000.0]), served="offered")
    assert served.tolist() == [[20_000.0, 20_000.0]]


def test_lockout_is_batches_times_t_r_in_intervals() -> None:
    model = ReconfigModel(restart_seconds=60.0, batch_fractions=(1 / 3,) * 3)
    lk = lockout_matrix(RESTART, model=model, step_seconds=30.0)
    assert lk.tolist() == [[1, 6], [6, 1]]
    assert lockout_matrix(LIVE, model=model, step_seconds=30.0).tolist() == [[1, 1], [1, 1]]


def _problem() -> PlanningProblem:
    # 6 intervals of 10 s; config 1 is better in intervals 2..5
    cap = np.array([[10, 5], [10, 5], [5, 20], [5, 20], [5, 20], [5, 20]], dtype=float)
    model = ReconfigModel(restart_seconds=10.0, batch_fractions=(0.5, 0.5))
    return PlanningProblem(
        served=cap,
        costs=transition_costs(cap, restart=RESTART, model=model, step_seconds=10.0),
        lockout=lockout_matrix(RESTART, model=model, step_seconds=10.0),
        step_seconds=10.0,
    )


def test_evaluate_hand_computed_plan() -> None:
    prob = _problem()
    sched = schedule_from_switches(prob, [(2, 1)])
    ev = evaluate(prob, sched)
    # served: 10+10 then 4x20, times 10 s; baseline: 10+10+4x5
    assert ev.total_ops + ev.cost_ops == pytest.approx(10 * (20 + 80))
    assert ev.baseline_ops == pytest.approx(10 * (20 + 20))
    # switch at t=2 (10 s into... interval 2): batch 1 short 20-2.5, batch 2 short 20-10
    assert ev.cost_ops == pytest.approx(10 * (17.5 + 10))
    assert ev.benefit_ops == pytest.approx(600.0)
    assert len(ev.switches) == 1 and ev.switches[0].benefit_ops == pytest.approx(600.0)
    assert ev.net_ops == pytest.approx(600.0 - 275.0)


def test_decode_ignores_changes_during_a_restart() -> None:
    prob = _problem()  # lock-out 2 intervals
    assert decode(prob, [1, 0, 0, 1, 1, 1]).tolist() == [1, 1, 0, 0, 1, 1]


def test_switch_inside_a_restart_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"switches\[1\]: interval 3 falls inside"):
        schedule_from_switches(_problem(), [(2, 1), (3, 0)])


def test_population_values_match_evaluate() -> None:
    prob = _problem()
    rng = np.random.default_rng(3)
    genomes = rng.integers(0, 2, size=(20, 6))
    vals, scheds = evaluate_population(prob, genomes)
    for g, v, s in zip(genomes, vals, scheds, strict=True):
        assert s.tolist() == decode(prob, g).tolist()
        assert v == pytest.approx(evaluate(prob, s).total_ops)


def test_sample_problem_inputs_are_validated() -> None:
    with pytest.raises(ValidationError, match=r"batch_fractions: must be positive and sum to 1"):
        ReconfigModel(restart_seconds=1.0, batch_fractions=(0.5, 0.2))
    with pytest.raises(ValidationError, match=r"costs: expected shape"):
        PlanningProblem(served=np.ones((3, 2)), costs=np.zeros((3, 3, 3)),
                        lockout=np.ones((2, 2), dtype=int), step_seconds=1.0)
    with pytest.raises(ValidationError, match=r"served='offered' needs the offered load"):
        served_matrix(np.ones((2, 2)), served="offered")
