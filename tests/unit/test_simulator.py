"""Simulator and the plan/explain/simulate commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.errors import ValidationError
from planner.lab import simulator as sm
from planner.planning.costbenefit import ReconfigModel
from planner.planning.optimiser import GAOptions
from planner.workload.traces import mgrast_like


def _two_regime_truth() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """40 read-heavy intervals, then 40 write-heavy ones (60 s each)."""
    mix = np.array([[0.9, 0.05, 0.05, 0.0]] * 40 + [[0.1, 0.2, 0.7, 0.0]] * 40)
    load = np.full(80, 1000.0)
    ts = 1.7e9 + 60.0 * np.arange(80)
    return load, mix, ts


def _capacity(mix: np.ndarray) -> np.ndarray:
    # candidate 0 write-optimised, 1 read-optimised
    return np.stack([10_000 * (0.6 * mix[:, 0] + 1.0 * (1 - mix[:, 0])),
                     10_000 * (1.0 * mix[:, 0] + 0.6 * (1 - mix[:, 0]))], axis=1)


RESTART = np.array([[False, True], [True, False]])


def _simulate(forecaster: sm.Forecaster, **kw: object) -> sm.SimulationResult:
    load, mix, ts = _two_regime_truth()
    return sm.simulate(
        load=load, mix=mix, timestamps=ts, step_seconds=60.0, capacity_fn=_capacity,
        restart=RESTART, forecaster=forecaster, start=10, horizon=20, replan_every=5,
        reconfig=ReconfigModel(restart_seconds=60.0, batch_fractions=(1 / 3,) * 3),
        ga=GAOptions(seed=1, population=16, generations=10, searches=1), **kw,  # type: ignore[arg-type]
    )


def test_oracle_kairos_switches_once_at_the_regime_change() -> None:
    load, mix, _ = _two_regime_truth()
    res = _simulate(sm.oracle_forecaster(load, mix), oracle=True)
    s = res.strategies
    # starts in 0 (bad for reads): switch to 1 at once, back to 0 around t=40 (the
    # 3-interval rolling restart may start a little early: pending nodes still serve reads)
    assert [st["to"] for st in res.kairos_steps] == [1, 0]
    assert res.kairos_steps[0]["t"] == 10
    assert 37 <= res.kairos_steps[1]["t"] <= 40
    assert s["kairos"].total_ops > s["default"].total_ops
    assert s["kairos"].total_ops > s["static_optimal"].total_ops
    assert s["kairos"].total_ops >= s["naive"].total_ops
    assert s["kairos"].total_ops <= s["theoretical_best"].total_ops
    assert s["oracle"].total_ops == pytest.approx(s["kairos"].total_ops)


def test_naive_pays_a_full_outage_per_switch() -> None:
    load, mix, _ = _two_regime_truth()
    res = _simulate(sm.oracle_forecaster(load, mix))
    naive = res.strategies["naive"]
    # reacts one interval late to each change: switches at t=10 (to 1) and t=41 (to 0),
    # each time all nodes down for T_r = 60 s while the target would serve 9600 ops/s
    assert naive.switches == 2
    assert naive.cost_ops == pytest.approx(2 * 60.0 * 9_600)


def test_persistence_forecast_is_still_sane() -> None:
    res = _simulate(sm.persistence_forecaster())
    s = res.strategies
    assert s["kairos"].total_ops > s["default"].total_ops
    assert res.gain("kairos", "default") > 0


def test_simulate_validates_lengths() -> None:
    load, mix, ts = _two_regime_truth()
    with pytest.raises(ValidationError, match=r"same length"):
        sm.simulate(load=load[:5], mix=mix, timestamps=ts, step_seconds=60.0,
                    capacity_fn=_capacity, restart=RESTART,
                    reconfig=ReconfigModel(restart_seconds=1.0, batch_fractions=(1.0,)),
                    forecaster=sm.persistence_forecaster(), start=1, horizon=2, replan_every=1)


def test_restart_matrix_from_the_cassandra_space() -> None:
    cands = [{}, {"concurrent_writes": 64}, {"memtable_flush_writers": 4}]
    r = sm.restart_matrix("cassandra", cands)
    assert r.tolist() == [[False, False, True], [False, False, True], [True, True, False]]


def test_compaction_change_costs_even_though_it_is_live() -> None:
    cands = [{}, {"compaction": "LeveledCompactionStrategy"}]
    secs = sm.change_seconds_matrix("cassandra", cands, {"compaction": 100.0})
    assert secs.tolist() == [[0.0, 100.0], [100.0, 0.0]]
    cap = np.array([[40.0, 50.0]])
    model = ReconfigModel(restart_seconds=1.0, batch_fractions=(1.0,))
    live = np.zeros((2, 2), dtype=bool)
    prob = sm.make_problem(cap, restart=live, reconfig=model, step_seconds=10.0,
                           change_seconds=secs)
    assert prob.costs[0, 0, 1] == pytest.approx(100.0 * 50.0)


def test_expected_value_over_samples_is_the_mean() -> None:
    cap = np.array([[[10.0, 20.0]], [[30.0, 0.0]]])  # two samples, one interval
    model = ReconfigModel(restart_seconds=1.0, batch_fractions=(1.0,))
    prob = sm.make_problem(cap, restart=RESTART, reconfig=model, step_seconds=10.0)
    assert prob.served.tolist() == [[20.0, 10.0]]


# ------------------------------------------------------------------- commands
@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    from planner.workload.series import save_trace

    path = tmp_path / "trace.json"
    save_trace(mgrast_like(steps=240, step_seconds=60.0, seed=2), path)
    return path


def test_kairos_plan_writes_a_valid_plan_and_explain_reads_it(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.yml"
    rc = main(["plan", "--trace", str(trace_file), "--forecast-model", "markov1",
               "--horizon", "12", "--method", "ga", "--seed", "3", "--population", "12",
               "--generations", "5", "--searches", "1", "-o", str(out)])
    assert rc == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["provenance"]["optimiser"]["seed"] == 3
    assert doc["provenance"]["forecast"]["model"] == "markov1"
    assert doc["horizon"]["steps"] == 12
    for step in doc["steps"]:
        if step["restart"]:
            assert step["batches"] == [["cass1"], ["cass2"], ["cass3"]]
    capsys.readouterr()
    assert main(["validate-plan", str(out), "--hosts", "cass1,cass2,cass3"]) == 0
    assert main(["explain", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Plan for cassandra cluster 'lab'" in text and "QUORUM" in text


def test_kairos_plan_refuses_rf_equal_cl(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["plan", "--trace", str(trace_file), "--forecast-model", "naive", "--cl", "ALL",
               "--horizon", "4", "--method", "dp", "-o", str(tmp_path / "p.yml")])
    assert rc == 2
    assert "RF = CL" in capsys.readouterr().err


def test_explain_refuses_an_invalid_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "kind": "kairos-plan"}))
    assert main(["explain", str(path)]) == 2
    assert "engine: missing" in capsys.readouterr().err


def test_simulate_command_json(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", "--trace", str(trace_file), "--forecaster", "persistence",
               "--method", "dp", "--json"])
    assert rc == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(row["totals"]) >= {"kairos", "default", "static_optimal", "naive",
                                  "theoretical_best"}
    assert row["totals"]["kairos"] <= row["totals"]["theoretical_best"]
