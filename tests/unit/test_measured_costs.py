"""Measured costs: T_r per node from earlier rollouts' state files or the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.executor.restart_costs import measured_restart_seconds, measured_restarts
from planner.plan import save_plan
from planner.planning.pipeline import OptimiserOptions, PlanRequest, make_plan
from planner.workload.series import WorkloadSeries
from planner.workload.store import Store

HOSTS = ("cass1", "cass2", "cass3")


def _request(**kw: Any) -> PlanRequest:
    n = 16
    read = np.where(np.arange(n) < 8, 0.1, 0.9)
    series = WorkloadSeries(
        engine="cassandra", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, 200.0),
        mix={"read": read, "update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
        step_seconds=20.0,
    )  # fmt: skip
    base: dict[str, Any] = dict(
        trace=series, forecast_model="naive", horizon=48, restart_seconds=45.0,
        current={"heap_size": "512M"}, tables=("kairos_demo.kv",), scenarios=0,
        confidence=0.0, optimiser=OptimiserOptions(method="dp"),
    )
    return PlanRequest(**(base | kw))


def _timings(drain: float, stop: float, start: float, sync: float) -> dict[str, float]:
    return {"drain": drain, "stop": stop, "start": start, "sync": sync,
            "total": drain + stop + start + sync}


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two applied plans of cluster 'lab' (cass1 measured 3 times) and one of 'other'."""
    root = tmp_path_factory.mktemp("measured")
    plans = root / "plans"
    plans.mkdir()
    result = make_plan(_request())
    for name, cluster in (("a", "lab"), ("b", "lab"), ("c", "other")):
        plan = result.plan if cluster == "lab" else make_plan(_request(cluster="other")).plan
        save_plan(plan, plans / f"{name}.yml", known_hosts=HOSTS)
    states = {
        "a": {"s2": {"status": "applied", "finished_at": "2026-01-01T00:10:00+00:00",
                     "nodes": {"cass1": _timings(5, 1, 30, 4), "cass2": _timings(6, 1, 35, 8)},
                     "verified": {}},
              "s1": {"status": "applied", "finished_at": "2026-01-01T00:01:00+00:00",
                     "nodes": {}, "verified": {}}},  # a live step: nothing measured
        "b": {"s2": {"status": "failed", "finished_at": "2026-01-02T00:00:00+00:00",
                     "nodes": {"cass3": {"drain": 5.0}},  # a failed node: not counted
                     "verified": {"cass1": {"verified_at": "2026-01-02T00:00:00+00:00",
                                            "timings": _timings(5, 1, 40, 4)}}},
              "s3": {"status": "applied", "finished_at": "2026-01-03T00:00:00+00:00",
                     "nodes": {"cass1": _timings(5, 1, 60, 4)}, "verified": {}}},
        "c": {"s2": {"status": "applied", "finished_at": "2026-01-01T00:00:00+00:00",
                     "nodes": {"cass1": _timings(100, 1, 100, 100)}, "verified": {}}},
    }
    for name, steps in states.items():
        (plans / f"{name}.yml.state.json").write_text(json.dumps({"version": 1, "steps": steps}))
    return root


def test_t_r_per_node_is_the_median_of_its_measured_restarts(state_dir: Path) -> None:
    m = measured_restarts(state_dir, cluster="lab", engine="cassandra", default=60.0)
    # cass1: 40, 50, 70 -> 50; cass2: 50; cluster: median(50, 50); cluster 'other' ignored
    assert dict(m.node_seconds) == {"cass1": 50.0, "cass2": 50.0}
    assert (m.seconds, m.restarts) == (50.0, 4)
    assert m.source.startswith("measured: 4 restart(s) of 2 node(s) in ")
    seconds, source = measured_restart_seconds(state_dir, cluster="other", engine="cassandra")
    assert (seconds, source.split(":")[0]) == (301.0, "measured")


def test_nothing_measured_falls_back_to_the_default_and_says_so(tmp_path: Path) -> None:
    seconds, source = measured_restart_seconds(tmp_path, cluster="lab", engine="cassandra",
                                               default=45.0)
    assert seconds == 45.0
    assert source == f"default 45 s: no restart of cassandra cluster 'lab' measured in {tmp_path}"
    with pytest.raises(ValidationError, match=r"--restart-seconds-from: .*no such file"):
        measured_restart_seconds(tmp_path / "nope", cluster="lab", engine="cassandra")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(ValidationError, match="expected a state directory, a plan"):
        measured_restart_seconds(tmp_path / "x.txt", cluster="lab", engine="cassandra")


def test_the_store_gives_the_same_figures_as_the_state_files(
    state_dir: Path, tmp_path: Path
) -> None:
    from planner.executor.rollout import load_state, state_path_for
    from planner.plan import load_plan

    db = tmp_path / "kairos.db"
    with Store(db) as store:
        for name in ("a", "b", "c"):
            plan = state_dir / "plans" / f"{name}.yml"
            assert store.record_rollout_state(plan, load_plan(plan),
                                              load_state(state_path_for(plan))) == (
                {"a": 2, "b": 2, "c": 1}[name])
        first = state_dir / "plans" / "a.yml"
        store.record_rollout_state(first, load_plan(first), load_state(state_path_for(first)))
    m = measured_restarts(db, cluster="lab", engine="cassandra", default=60.0)
    assert dict(m.node_seconds) == {"cass1": 50.0, "cass2": 50.0} and m.restarts == 4


def test_a_plan_prices_restarts_with_the_measured_t_r_and_names_its_source(
    state_dir: Path,
) -> None:
    given = make_plan(_request(restart_seconds=45.0))
    measured = make_plan(_request(restart_seconds_from=state_dir))
    cost = measured.plan.provenance["cost_model"]
    assert cost["restart_seconds"] == 50.0
    assert cost["restart_seconds_source"].startswith("measured: 4 restart(s)")
    assert cost["restarts"]["node_seconds"] == {"cass1": 50.0, "cass2": 50.0}
    assert given.plan.provenance["cost_model"]["restart_seconds_source"] == (
        "given: --restart-seconds 45")
    # one-node batches: cass1 and cass2 at 50 s, cass3 unmeasured at the cluster's 50 s
    g, m = given.plan.steps[-1].expected, measured.plan.steps[-1].expected
    assert m.cost_ops == pytest.approx(g.cost_ops * 50.0 / 45.0, rel=1e-9)
