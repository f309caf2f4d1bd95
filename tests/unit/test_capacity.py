"""Capacity advice (planner.planning.capacity): scale out before the forecast outgrows the best
configuration, scale in only over a long over-provisioned horizon, never below RF."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.planning.capacity import advice_line, advise

STEP = 300.0
DAY = 288  # 5-min steps


def ts(n: int) -> np.ndarray:
    return 1_767_225_600.0 + STEP * np.arange(n)


def test_growth_beyond_capacity_advises_a_scale_out_with_the_date_and_the_count() -> None:
    # 2 days of load growing from 500 to 1,500 ops/s against a best capacity of 1,000:
    # with a 20 % margin the first short step is where 1.2 x load > 1,000 (load > 833.3).
    n = 2 * DAY
    load = np.linspace(500.0, 1500.0, n)
    a = advise(timestamps=ts(n), load_upper=load, best_capacity=np.full(n, 1000.0),
               nodes=3, min_nodes=3, step_seconds=STEP, margin=0.2)
    first = int(np.argmax(load * 1.2 > 1000.0))
    assert a.action == "scale-out" and a.by is not None
    assert a.by.timestamp() == ts(n)[first]
    assert a.nodes_advised == math.ceil(3 * 1500.0 * 1.2 / 1000.0) == 6
    assert a.figures["peak_need_over_capacity"] == pytest.approx(1.8)
    assert a.figures["best_capacity_then"] == 1000.0
    d = a.to_dict()
    assert d["runbook"] == "docs/runbooks/add-a-node.md" and d["by"] == a.by.isoformat()
    line = advice_line(d)
    assert "add 3 node(s): 3 -> 6" in line and "does not add or remove nodes" in line


def test_the_capacity_that_counts_is_the_best_reachable_one_at_each_step() -> None:
    # the load peaks where the best configuration is also at its best: no scale-out
    n = DAY
    load = np.where(np.arange(n) < n // 2, 300.0, 900.0)
    best = np.where(np.arange(n) < n // 2, 400.0, 1200.0)
    a = advise(timestamps=ts(n), load_upper=load, best_capacity=best, nodes=3, min_nodes=3,
               step_seconds=STEP, margin=0.2)
    assert a.action == "none" and a.nodes_advised == 3
    assert "fewest for replication factor 3" in a.reason


def test_a_flat_low_day_advises_a_scale_in_no_lower_than_the_replication_factor() -> None:
    n = DAY
    a = advise(timestamps=ts(n), load_upper=np.full(n, 100.0),
               best_capacity=np.full(n, 1000.0), nodes=6, min_nodes=3, step_seconds=STEP)
    # 6 x 120 / 1000 = 0.72 nodes would do: the replication factor is the floor
    assert a.action == "scale-in" and a.nodes_advised == 3 and a.by is None
    assert a.to_dict()["runbook"] == "docs/runbooks/remove-a-node.md"
    b = advise(timestamps=ts(n), load_upper=np.full(n, 700.0),
               best_capacity=np.full(n, 1000.0), nodes=6, min_nodes=3, step_seconds=STEP)
    # 6 x 840 / 1000 = 5.04: six nodes are needed, one fewer would not serve it
    assert b.action == "none" and b.nodes_advised == 6 and "one node fewer" in b.reason


def test_a_short_quiet_horizon_is_not_a_trend() -> None:
    n = 24  # two hours
    a = advise(timestamps=ts(n), load_upper=np.full(n, 100.0),
               best_capacity=np.full(n, 1000.0), nodes=6, min_nodes=3, step_seconds=STEP)
    assert a.action == "none" and a.nodes_advised == 6
    assert "the horizon is 2 h, shorter than the 24 h" in a.reason
    shorter = advise(timestamps=ts(n), load_upper=np.full(n, 100.0),
                     best_capacity=np.full(n, 1000.0), nodes=6, min_nodes=3,
                     step_seconds=STEP, scale_in_after_seconds=3600.0)
    assert shorter.action == "scale-in"


@pytest.mark.parametrize(("kw", "message"), [
    ({"margin": 1.0}, r"^--capacity-margin: must be in \[0, 1\), got 1.0"),
    ({"margin": -0.1}, r"^--capacity-margin: must be in"),
    ({"best_capacity": np.zeros(4)}, r"capacities finite and > 0"),
    ({"load_upper": np.array([1.0, np.nan, 1.0, 1.0])}, r"loads must be finite"),
    ({"load_upper": np.ones(3)}, r"one value per step, got shapes \(4,\), \(3,\), \(4,\)"),
    ({"nodes": 0}, r"nodes 0 and min_nodes 3 must be >= 1"),
])
def test_bad_inputs_are_refused_by_name(kw: dict, message: str) -> None:
    args = {"timestamps": ts(4), "load_upper": np.ones(4), "best_capacity": np.ones(4),
            "nodes": 3, "min_nodes": 3, "step_seconds": STEP, **kw}
    with pytest.raises(ValidationError, match=message):
        advise(**args)
