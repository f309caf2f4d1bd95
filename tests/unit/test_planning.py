"""planner.planning.pipeline: make_plan is what `kairos plan` runs, and the simulator shares
its stages.

The inputs are the demo's (tests/demo.sh): a 16-point trace that shifts from write-heavy to
read-heavy, forecast with `naive`, the lab's three nodes at QUORUM, T_r = 45 s. On them the
DP pays for a live compaction change and then a restart-class change
(memtable_cleanup_threshold 0.11) rolled out one node per batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.errors import ValidationError
from planner.forecast.forecaster import load_forecast
from planner.lab import simulator as sm
from planner.model.performance import load_default_model, prior_model
from planner.planning import pipeline as planning
from planner.planning.costbenefit import ReconfigModel
from planner.planning.optimiser import GAOptions
from planner.planning.pipeline import OptimiserOptions, PlanRequest, make_plan
from planner.topology.ring import Ring
from planner.workload.series import WorkloadSeries, save_trace

TABLES = ("kairos_demo.kv",)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("planning")
    n = 16
    read = np.where(np.arange(n) < 8, 0.1, 0.9)
    save_trace(
        WorkloadSeries(
            engine="cassandra", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, 200.0),
            mix={"read": read, "update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
            step_seconds=20.0,
        ),
        tmp / "trace.csv",
    )  # fmt: skip
    assert main(["forecast", "--trace", str(tmp / "trace.csv"), "--horizon", "48", "--model",
                 "naive", "--out", str(tmp / "forecast.json")]) == 0  # fmt: skip
    (tmp / "current.yml").write_text("heap_size: 512M\n")
    return {"dir": tmp, "forecast": tmp / "forecast.json", "current": tmp / "current.yml"}


def _request(demo: dict[str, Path], **kw: Any) -> PlanRequest:
    base: dict[str, Any] = {
        "forecast": demo["forecast"], "current": demo["current"], "cl": "QUORUM",
        "horizon": 48, "restart_seconds": 45.0, "tables": TABLES,
        "optimiser": OptimiserOptions(method="dp"),
        # SOPHIA's credit (saturated clients): the demo's trace offers 200 ops/s, far below
        # the prior's capacity, and these tests are about the steps it then makes.
        "served": "capacity",
    }
    return PlanRequest(**(base | kw))


def _plain(plan: Any) -> dict[str, Any]:
    """The plan as data without its creation time (the only thing that differs run to run)."""
    doc = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    doc.pop("created_at")
    return doc


def test_the_demo_inputs_pay_for_a_restart_step_one_node_per_batch(
    demo: dict[str, Path],
) -> None:
    result = make_plan(_request(demo))
    plan = result.plan
    assert [s.id for s in plan.steps] == ["s1", "s2"]
    live, restart = plan.steps
    assert dict(live.target) == {"compaction": "LeveledCompactionStrategy"}
    assert live.restart == () and live.tables == TABLES
    assert dict(restart.target) == {"memtable_cleanup_threshold": 0.11}
    assert restart.batches == (("cass1",), ("cass2",), ("cass3",))
    assert restart.expected.net_ops == pytest.approx(6670072.831121067, rel=1e-9)
    expected = plan.provenance["expected"]
    assert expected["total_ops"] == pytest.approx(15581892.74227377, rel=1e-9)
    assert expected["stay_ops"] == pytest.approx(5928111.41163702, rel=1e-9)
    assert expected["dp_optimum_ops"] == expected["total_ops"]  # the DP is the optimum
    assert result.hosts == ("cass1", "cass2", "cass3")
    assert result.summary() == (
        "2 step(s), expected net gain 9.654e+06 ops (+162.85% vs staying put)"
    )


@pytest.mark.parametrize("method", ["dp", "ga"])
def test_kairos_plan_writes_the_plan_make_plan_returns(
    demo: dict[str, Path], method: Literal["dp", "ga"], capsys: pytest.CaptureFixture[str]
) -> None:
    out = demo["dir"] / f"cli-{method}.yml"
    argv = ["plan", "--forecast", str(demo["forecast"]), "--current", str(demo["current"]),
            "--cl", "QUORUM", "--horizon", "48", "--restart-seconds", "45",
            "--tables", ",".join(TABLES), "--method", method, "--served", "capacity",
            "--seed", "7", "--population", "16", "--generations", "10", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    options = OptimiserOptions(method=method, seed=7, population=16, generations=10)
    result = make_plan(_request(demo, optimiser=options))
    assert _plain(yaml.safe_load(out.read_text())) == _plain(result.plan)
    assert f"wrote {out}: {result.summary()} in " in capsys.readouterr().out


def test_the_plan_carries_capacity_advice_from_the_forecast_and_the_best_candidate(
    demo: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # The demo offers 200 ops/s, far below the prior's capacity: no scale out, and no scale
    # in below RF 3; six nodes with a 1-minute floor instead of a day: a scale in to RF.
    plan = make_plan(_request(demo)).plan
    advice = plan.provenance["capacity_advice"]
    assert advice["action"] == "none" and advice["nodes_now"] == 3
    assert advice["figures"]["peak_load_upper"] >= 200.0
    assert "3 nodes is the fewest for replication factor 3" in advice["reason"]
    from planner.planning.explain import explain_text

    assert "Capacity: no change of node count advised: the best reachable" in explain_text(plan)
    six = make_plan(_request(demo, hosts=tuple(f"cass{i}" for i in range(1, 7)),
                             scale_in_after_seconds=60.0)).plan
    assert six.provenance["capacity_advice"]["action"] == "scale-in"
    assert six.provenance["capacity_advice"]["nodes_advised"] == 3
    out = demo["dir"] / "advice.yml"
    assert main(["plan", "--forecast", str(demo["forecast"]), "--current", str(demo["current"]),
                 "--horizon", "48", "--tables", ",".join(TABLES), "--method", "dp",
                 "--capacity-margin", "0.5", "-o", str(out)]) == 0  # fmt: skip
    assert "Capacity: no change of node count advised" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["provenance"]["capacity_advice"]["figures"][
        "margin"] == 0.5


def test_a_seeded_ga_plan_is_reproducible_and_records_its_gap_to_the_dp(
    demo: dict[str, Path],
) -> None:
    options = OptimiserOptions(seed=7, population=16, generations=10)
    first, again = (make_plan(_request(demo, optimiser=options)) for _ in range(2))
    assert _plain(first.plan) == _plain(again.plan)
    info = first.plan.provenance["optimiser"]
    assert info == {"method": "ga", "seed": 7, "population": 16, "generations": 10,
                    "searches": 2, "gap_to_dp": 0.066635}  # fmt: skip
    assert first.evaluation.total_ops == pytest.approx(14543586.222508952, rel=1e-9)
    assert first.dp is not None and first.dp.total_ops > first.evaluation.total_ops


def test_loaded_forecast_ring_model_and_current_plan_as_their_files_do(
    demo: dict[str, Path],
) -> None:
    from_files = make_plan(_request(demo))
    loaded = make_plan(_request(
        demo, forecast=load_forecast(demo["forecast"]), source=str(demo["forecast"]),
        ring=Ring.simple(["cass1", "cass2", "cass3"], rf=3), current={"heap_size": "512M"},
        model=load_default_model("cassandra"),
    ))  # fmt: skip
    a, b = _plain(from_files.plan), _plain(loaded.plan)
    assert a["provenance"]["performance_model"]["file"] == "cassandra-prior (shipped)"
    assert b["provenance"]["performance_model"]["file"] == "in-process"
    for doc in (a, b):
        del doc["provenance"]["performance_model"]["file"]
    assert a == b


def test_the_simulator_plans_each_replan_with_the_pipelines_optimiser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    real = planning.optimise

    def spy(problem: Any, **kw: Any) -> planning.Solution:
        calls.append(kw)
        return real(problem, **kw)

    monkeypatch.setattr(sm, "optimise", spy)
    n = 40
    load = np.full(n, 100.0)
    mix = np.stack([np.where(np.arange(n) < 20, 0.9, 0.1), np.where(np.arange(n) < 20, 0.1, 0.9)],
                   axis=1)  # fmt: skip
    res = sm.simulate(
        load=load, mix=mix, timestamps=60.0 * np.arange(n), step_seconds=60.0,
        capacity_fn=lambda m: np.stack([100 + 50 * m[:, 0], 100 + 50 * m[:, 1]], axis=1),
        restart=np.array([[False, True], [True, False]]),
        reconfig=ReconfigModel(restart_seconds=30.0, batch_fractions=(0.5, 0.5)),
        forecaster=sm.oracle_forecaster(load, mix), start=10, horizon=10, replan_every=5,
        method="ga", ga=GAOptions(seed=3, population=8, generations=3, searches=1),
    )
    assert res.replans == 6 and len(calls) == 6
    assert all(c["compare_dp"] is False and c["method"] == "ga" and c["ga"].seed == 3
               for c in calls)  # fmt: skip
    assert [(s["t"], s["from"], s["to"]) for s in res.kairos_steps] == [(20, 0, 1)]


def test_without_tables_no_step_changes_a_table_setting(demo: dict[str, Path]) -> None:
    """With tables the demo's first step changes compaction; without them no step may, and
    the plan says why (the executor could not know which tables to alter)."""
    said: list[str] = []
    with_tables = make_plan(_request(demo))
    assert any("compaction" in s.target for s in with_tables.plan.steps)
    result = make_plan(_request(demo, tables=()), progress=said.append)
    assert all("compaction" not in s.target for s in result.plan.steps)
    assert any("no --tables given: compaction stay(s) as the nodes run" in m for m in said)


def test_make_plan_refuses_what_it_cannot_plan(demo: dict[str, Path]) -> None:
    with pytest.raises(ValidationError, match=r"^forecast, trace: give exactly one$"):
        make_plan(_request(demo, trace=demo["dir"] / "trace.csv"))
    with pytest.raises(ValidationError, match="is a redis model, not cassandra"):
        make_plan(_request(demo, model=prior_model("redis")))
    with pytest.raises(ValidationError, match=r"^--samples: 1000 sample paths x --horizon 6000"):
        make_plan(_request(demo, samples=1000, horizon=6000))


def test_a_restart_hold_plans_live_steps_only_and_says_why(
    demo: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    why = "the performance model's recent error is 40% over the last 3 window(s)"
    said: list[str] = []
    plan = make_plan(_request(demo, hold_restarts=why), progress=said.append).plan
    # The same inputs pay for a restart step without the hold (the test above); with it,
    # only the live compaction change is left.
    assert [dict(s.target) for s in plan.steps] == [{"compaction": "LeveledCompactionStrategy"}]
    assert all(s.restart == () and s.batches == () for s in plan.steps)
    assert plan.provenance["restart_hold"] == why
    assert any(f"restart steps held ({why})" in m for m in said), said
    out = demo["dir"] / "held.yml"
    assert main(["plan", "--forecast", str(demo["forecast"]), "--current", str(demo["current"]),
                 "--cl", "QUORUM", "--restart-seconds", "45", "--tables", ",".join(TABLES),
                 "--method", "dp", "--hold-restarts", why, "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["provenance"]["restart_hold"] == why
    assert "restart steps held" in capsys.readouterr().err


def test_a_calibrated_model_widens_the_search_to_what_it_measured(
    demo: dict[str, Path],
) -> None:
    """The default grid holds neither UnifiedCompactionStrategy nor compaction_throughput;
    a model calibrated on them (with effects) makes the plan consider both, and the prior
    keeps the default grid."""
    import pandas as pd

    from planner.model.performance import fit_design

    rng = np.random.default_rng(0)
    rows = []
    for compaction in ("SizeTieredCompactionStrategy", "LeveledCompactionStrategy",
                       "UnifiedCompactionStrategy"):
        for throughput in ("64MiB/s", "8MiB/s"):
            for read in (0.9, 0.1):
                for _run in range(2):
                    gain = ((1.6 if compaction == "UnifiedCompactionStrategy" else 1.0) ** read
                            * (1.4 if throughput == "8MiB/s" else 1.0))
                    rows.append({"read": read, "update": 1 - read, "insert": 0.0, "scan": 0.0,
                                 "compaction": compaction, "compaction_throughput": throughput,
                                 "ops_per_s": 1000 * gain * np.exp(rng.normal(0, 0.01))})
    model = fit_design(pd.DataFrame(rows), engine="cassandra", design="pooled")
    assert planning.measured_values(model)["compaction_throughput"] == ("64MiB/s", "8MiB/s")
    assert planning.measured_values(prior_model("cassandra")) == {}
    plan = make_plan(_request(demo, model=model)).plan
    targets = [dict(s.target) for s in plan.steps]
    assert any(t.get("compaction_throughput") == "8MiB/s" for t in targets), targets
    assert any(t.get("compaction") == "UnifiedCompactionStrategy" for t in targets), targets
    prior = make_plan(_request(demo)).plan
    assert not any("compaction_throughput" in s.target or "UnifiedCompactionStrategy"
                   in s.target.values() for s in prior.steps)


def test_without_tables_a_measured_row_cache_is_not_turned_on(demo: dict[str, Path]) -> None:
    """Turning the row cache on sets the tables' caching: with tables a plan may (and names
    them in the step); without, the row cache stays off and the plan says why."""
    import pandas as pd

    from planner.model.performance import fit_design

    rng = np.random.default_rng(1)
    rows = [{"read": read, "update": 1 - read, "insert": 0.0, "scan": 0.0,
             "row_cache_size": size,
             "ops_per_s": 1000 * (1.5 ** read if size == "256MiB" else 1.0)
             * np.exp(rng.normal(0, 0.01))}
            for size in ("0MiB", "256MiB") for read in (0.9, 0.1) for _run in range(3)]
    model = fit_design(pd.DataFrame(rows), engine="cassandra", design="pooled")
    with_tables = make_plan(_request(demo, model=model)).plan
    on = [s for s in with_tables.steps if s.target.get("row_cache_size") == "256MiB"]
    assert on and all(s.tables for s in on), with_tables.steps
    said: list[str] = []
    without = make_plan(_request(demo, model=model, tables=()), progress=said.append).plan
    assert all("row_cache_size" not in s.target for s in without.steps), without.steps
    assert any("no --tables given: the row cache stays off" in m for m in said), said
