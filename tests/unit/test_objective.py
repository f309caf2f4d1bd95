"""The objective: served work plus headroom, per-batch T_r, and what a plan says it gains."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.planning.costbenefit import ReconfigModel, credit, served_matrix, transition_costs
from planner.planning.pipeline import OptimiserOptions, PlanRequest, make_plan
from planner.workload.series import WorkloadSeries, save_trace

RESTART = np.array([[False, True], [True, False]])


def test_work_credits_served_work_plus_weighted_headroom() -> None:
    cap = np.array([[1000.0, 800.0, 4000.0]])
    load = np.array([900.0])
    # 1000: 900 served + 0.5 * 900 * (1 - 0.9); 800: saturated; 4000: 900 + 0.5*900*0.775
    got = served_matrix(cap, load=load, served="work", headroom_weight=0.5)
    assert got[0].tolist() == pytest.approx([945.0, 800.0, 1248.75])
    assert served_matrix(cap, load=load, served="work", headroom_weight=0.0).tolist() == (
        served_matrix(cap, load=load, served="offered").tolist()
    )
    # more capacity at 2% utilisation is worth almost nothing: d g / d cap = w * u^2
    low = credit(np.array([10_000.0, 20_000.0]), np.array(200.0), 0.5)
    assert float(low[1] - low[0]) == pytest.approx(1.0)  # 0.5 * 200 * (0.02 - 0.01)


def test_work_refuses_a_weight_outside_zero_one() -> None:
    with pytest.raises(ValidationError, match=r"headroom_weight: must be in \[0, 1\]"):
        served_matrix(np.ones((1, 1)), load=np.ones(1), served="work", headroom_weight=2.0)
    with pytest.raises(ValidationError, match="served: expected one of capacity, offered, work"):
        served_matrix(np.ones((1, 1)), load=np.ones(1), served="latency")  # type: ignore[arg-type]


def test_below_saturation_a_restart_costs_headroom_not_served_work() -> None:
    """cap 1000 -> 2000 at load 100, two halves, T_r 10 s, weight 0.5.

    Batch 1: the pending half serves 500 -> credit 100 + 50*(1 - 0.2) = 140 vs 147.5 for
    2000: 7.5 x 10 s. Batch 2: the done half serves 1000 -> 145: 2.5 x 10 s. Total 100.
    """
    model = ReconfigModel(restart_seconds=10.0, batch_fractions=(0.5, 0.5))
    cost = transition_costs(np.array([[1000.0, 2000.0]]), restart=RESTART, model=model,
                            step_seconds=100.0, load=np.array([100.0]), served="work",
                            headroom_weight=0.5)
    assert cost[0, 0, 1] == pytest.approx(100.0)
    offered = transition_costs(np.array([[1000.0, 2000.0]]), restart=RESTART, model=model,
                               step_seconds=100.0, load=np.array([100.0]), served="offered")
    assert offered[0, 0, 1] == 0.0  # no served work is lost below saturation


def test_each_batch_is_down_as_long_as_its_slowest_measured_node() -> None:
    """SOPHIA's 40k -> 50k with batch 1 down 35 s, batch 2 down 70 s: 30k*35 + 25k*70."""
    model = ReconfigModel.from_batches([["a"], ["b"]], restart_seconds=60.0,
                                       node_seconds={"a": 35.0, "b": 70.0})
    assert model.batch_durations == (35.0, 70.0)
    assert model.duration_seconds == 105.0
    cost = transition_costs(np.array([[40_000.0, 50_000.0]]), restart=RESTART, model=model,
                            step_seconds=300.0)
    assert cost[0, 0, 1] == pytest.approx(30_000 * 35 + 25_000 * 70)
    partial = ReconfigModel.from_batches([["a", "c"], ["b"]], restart_seconds=60.0,
                                         node_seconds={"a": 35.0})
    assert partial.batch_durations == (60.0, 60.0)  # c unmeasured: the default


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    n = 16
    read = np.where(np.arange(n) < 8, 0.1, 0.9)
    path = tmp_path_factory.mktemp("objective") / "trace.csv"
    save_trace(WorkloadSeries(
        engine="cassandra", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, 200.0),
        mix={"read": read, "update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
        step_seconds=20.0,
    ), path)  # fmt: skip
    return path


def _plan(source: Path | WorkloadSeries, **kw: object) -> object:
    base = dict(trace=source, forecast_model="naive", horizon=48, restart_seconds=45.0,
                current={"heap_size": "512M"}, tables=("kairos_demo.kv",),
                optimiser=OptimiserOptions(method="dp"))
    return make_plan(PlanRequest(**(base | kw)))  # type: ignore[arg-type]


def test_a_plan_below_saturation_says_it_gains_headroom_with_utilisation(trace: Path) -> None:
    result = _plan(trace, served="capacity")
    plan = result.plan  # type: ignore[attr-defined]
    restart = plan.steps[-1]
    assert dict(restart.target) == {"memtable_cleanup_threshold": 0.11}
    e = restart.expected
    assert e.gains == "headroom" and e.served_ops == 0.0
    # prior, 90% reads, leveled: exp(.9*8.70 + .1*8.99) * exp(.9*.642 - .1*.365) ~ 10.6k ops/s;
    # 200 ops/s offered is 1.89% of it, and 1.05% after mct 0.11 (x1.8)
    assert (e.utilisation_before, e.utilisation_after) == pytest.approx((0.0189, 0.0105),
                                                                       abs=1e-4)
    obj = plan.provenance["objective"]
    assert obj["served"] == "capacity" and obj["saturated_intervals"] == 0
    assert "no latency data" in obj["headroom_measure"]


def test_with_served_offered_an_unsaturated_cluster_gets_no_step(trace: Path) -> None:
    result = _plan(trace, served="offered")
    assert result.plan.steps == ()  # type: ignore[attr-defined]


def test_a_saturated_cluster_gains_throughput() -> None:
    """At 20k ops/s offered the prior's ~8k ops/s cluster is saturated: the restart step
    serves more work and says so."""
    series = WorkloadSeries(
        engine="cassandra", timestamps=1.7e9 + 20 * np.arange(16),
        load=np.full(16, 20_000.0),
        mix={"read": np.full(16, 0.5), "update": np.full(16, 0.5), "insert": np.zeros(16),
             "scan": np.zeros(16)}, step_seconds=20.0,
    )  # fmt: skip
    result = _plan(series, served="work")
    steps = result.plan.steps  # type: ignore[attr-defined]
    assert steps and steps[-1].expected.gains == "throughput"
    assert steps[-1].expected.served_ops > 1e6
    assert steps[-1].expected.p_gain >= 0.9
