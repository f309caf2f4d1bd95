"""p99 latency beside throughput (issue 38 part 5): the fit, the model file, the objective."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from planner import calibrate as cal
from planner.errors import ValidationError
from planner.model.performance import (
    Feature,
    LatencyTerms,
    PerformanceModel,
    fit_design,
    load_default_model,
    load_model,
    save_model,
)
from planner.planning.costbenefit import ReconfigModel, evaluate, served_matrix
from planner.planning.explain import _decision_lines
from planner.planning.pipeline import (
    OptimiserOptions,
    PlanRequest,
    make_plan,
    make_problem,
    optimise,
)
from planner.workload.series import WorkloadSeries

REPO = Path(__file__).resolve().parents[2]
CALIBRATION = REPO / "inventories/local/calibration"
STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"
MIXES = {"read-heavy": {"read": 0.9, "update": 0.1}, "write-heavy": {"read": 0.1, "update": 0.9}}
IN_FLIGHT = 64  # the load generator's concurrency in the constructed windows


def _windows(*, tail_effect: float, seed: int, runs: int = 3) -> pd.DataFrame:
    """Closed-loop windows of 4 configurations x 2 mixes: LCS serves reads 20 % faster
    (throughput only); concurrent_reads 64 lengthens the read class's tail by
    ``tail_effect`` (log scale) at the same throughput. p99 = tail x 64 / throughput
    (Little's law), each with 3 % log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for compaction in (STCS, LCS):
        for reads in (32, 64):
            for mix in MIXES.values():
                for _ in range(runs):
                    read = mix["read"]
                    ops = math.exp(read * math.log(900) + (1 - read) * math.log(1300)
                                   + read * (0.2 if compaction == LCS else 0.0))
                    tail = 3.0 * math.exp(read * (tail_effect if reads == 64 else 0.0))
                    ops *= math.exp(rng.normal(0, 0.03))
                    p99 = 1000 * IN_FLIGHT * tail / ops * math.exp(rng.normal(0, 0.03))
                    rows.append({"read": read, "update": mix["update"], "insert": 0.0,
                                 "scan": 0.0, "compaction": compaction,
                                 "concurrent_reads": reads, "ops_per_s": ops, "p99_ms": p99})
    return pd.DataFrame(rows)


def _p99_ratio(model: PerformanceModel, mix: dict[str, float], a: dict[str, Any],
               b: dict[str, Any]) -> float:
    pa, pb = model.predict(mix, a).p99_ms, model.predict(mix, b).p99_ms
    assert pa is not None and pb is not None
    return pa / pb


@pytest.mark.parametrize("design", ["interaction", "pooled"])
def test_the_fit_recovers_a_known_tail_effect_and_littles_law(design: str) -> None:
    model = fit_design(_windows(tail_effect=math.log(1.5), seed=1), engine="cassandra",
                       design=design)
    assert model.predicts_latency
    base = {"compaction": STCS, "concurrent_reads": 32}
    # the tail: concurrent_reads 64 gives pure reads a 1.5x p99 at the same throughput
    assert _p99_ratio(model, {"read": 1.0}, {**base, "concurrent_reads": 64}, base) == (
        pytest.approx(1.5, rel=0.06))
    assert _p99_ratio(model, {"update": 1.0}, {**base, "concurrent_reads": 64}, base) == (
        pytest.approx(1.0, abs=0.06))
    # Little's law: LCS's 20 % more read throughput is a 1/1.22 shorter p99 (no tail effect)
    assert _p99_ratio(model, {"read": 1.0}, {**base, "compaction": LCS}, base) == (
        pytest.approx(math.exp(-0.2), rel=0.04))
    p = model.predict(MIXES["write-heavy"], base)
    assert p.p99_ms == pytest.approx(1000 * IN_FLIGHT * 3.0 / p.ops_per_s, rel=0.05)


def test_with_no_tail_effect_the_pooled_p99_follows_the_throughput() -> None:
    """The pooled fit shrinks the tail effects towards "p99 = tail x in-flight / throughput"
    (Little's law), not towards "p99 the same everywhere"."""
    model = fit_design(_windows(tail_effect=0.0, seed=2, runs=2), engine="cassandra",
                       design="pooled")
    for config in ({"compaction": LCS, "concurrent_reads": 32},
                   {"compaction": STCS, "concurrent_reads": 64},
                   {"compaction": LCS, "concurrent_reads": 64}):
        for mix in MIXES.values():
            p = model.predict(mix, config)
            assert p.p99_ms == pytest.approx(1000 * IN_FLIGHT * 3.0 / p.ops_per_s, rel=0.03)


def test_rows_without_a_p99_fit_throughput_only_and_say_why() -> None:
    df = _windows(tail_effect=0.0, seed=3)
    df.loc[5, "p99_ms"] = np.nan
    model = fit_design(df, engine="cassandra", design="pooled")
    assert not model.predicts_latency and model.predict(MIXES["read-heavy"], {}).p99_ms is None
    assert "latency not fitted: 1 of 24 rows" in model.info["fit"]["latency"]
    same = fit_design(df.drop(columns="p99_ms"), engine="cassandra", design="pooled")
    assert np.array_equal(model.coef, same.coef) and np.array_equal(model.cov, same.cov)


@pytest.mark.parametrize("path", [None, CALIBRATION / "cassandra-model.json",
                                  CALIBRATION / "cassandra-gb-memtable-model.json"])
def test_a_model_file_without_latency_loads_and_predicts_throughput_only(
    path: Path | None
) -> None:
    """The shipped prior and the committed lab models were written before latency was fitted."""
    model = load_default_model("cassandra") if path is None else load_model(path)
    if path is not None:
        assert "latency" not in json.loads(path.read_text())
    assert model.latency is None and not model.predicts_latency
    prediction = model.predict(MIXES["read-heavy"], {})
    assert prediction.p99_ms is None and prediction.ops_per_s > 0
    with pytest.raises(ValidationError, match="predicts no latency"):
        model.predict_p99_matrix([MIXES["read-heavy"]], [{}])


def test_a_refitted_lab_record_keeps_its_latency_through_the_model_file(tmp_path: Path) -> None:
    """inventories/local/calibration/cassandra-gb-memtable-*: the real windows' p99 (4
    configurations of which 3 measured, 2 mixes, 2 sweeps), refitted as kairos calibrate
    --fit-only does; the figures docs/calibration.md quotes."""
    df = pd.read_csv(CALIBRATION / "cassandra-gb-memtable-observations.csv")
    model, report = cal.fit_observations(df, engine="cassandra")
    assert model is not None and model.predicts_latency
    lat = report["latency"]
    assert lat["fitted"] and lat["heldout_skipped"] == []
    assert lat["in_sample_mape"] == pytest.approx(0.015, abs=0.001)
    assert lat["heldout_mape"] == pytest.approx(0.046, abs=0.001)
    save_model(model, tmp_path / "model.json")
    again = load_model(tmp_path / "model.json")
    assert again.predicts_latency
    mixes, configs = list(MIXES.values()), [{}, {"memtable_cleanup_threshold": 0.11}]
    assert np.array_equal(again.predict_p99_matrix(mixes, configs),
                          model.predict_p99_matrix(mixes, configs))
    # the default measured 169-176 ms write-heavy: the model says so
    p99 = again.predict(MIXES["write-heavy"], {}).p99_ms
    assert p99 is not None and 165 < p99 < 180


def test_a_corrupt_latency_block_is_refused(tmp_path: Path) -> None:
    model = fit_design(_windows(tail_effect=0.0, seed=4), engine="cassandra",
                       design="interaction")
    doc = model.to_dict()
    for key, value, match in (("coef", [[0.0]], r"latency.coef: shape"),
                              ("target", "log(p99_ms)", "latency.target"),
                              ("sigma", -1.0, r"latency.sigma")):
        bad = {**doc, "latency": {**doc["latency"], key: value}}
        (tmp_path / "m.json").write_text(json.dumps(bad))
        with pytest.raises(ValidationError, match=match):
            load_model(tmp_path / "m.json")


# ------------------------------------------------------------------ the objective
LIVE = np.zeros((2, 2), dtype=bool)


def _reconfig() -> ReconfigModel:
    return ReconfigModel(restart_seconds=30.0, batch_fractions=(1 / 3, 1 / 3, 1 / 3))


def _choice(cap: np.ndarray, load: np.ndarray, p99: np.ndarray, weight: float,
            restart: np.ndarray = LIVE) -> np.ndarray:
    problem = make_problem(cap, restart=restart, reconfig=_reconfig(), step_seconds=60.0,
                           load=load, served="work", headroom_weight=0.5, p99=p99,
                           latency_weight=weight)
    return optimise(problem, method="dp").evaluation.schedule


def test_weight_zero_leaves_the_credit_and_evaluate_bit_identical() -> None:
    rng = np.random.default_rng(5)
    cap = rng.uniform(500, 1500, (12, 3))
    load = rng.uniform(200, 1200, 12)
    p99 = rng.uniform(100, 300, (12, 3))
    before = served_matrix(cap, load=load, served="work", headroom_weight=0.5)
    assert np.array_equal(before, served_matrix(cap, load=load, served="work",
                                                headroom_weight=0.5, p99=p99,
                                                latency_weight=0.0))
    restart = ~np.eye(3, dtype=bool)
    kw: dict[str, Any] = dict(restart=restart, reconfig=_reconfig(), step_seconds=60.0,
                              load=load, served="work", headroom_weight=0.5)
    old, new = make_problem(cap, **kw), make_problem(cap, **kw, p99=p99, latency_weight=0.0)
    for schedule in (np.zeros(12, dtype=int), np.r_[[0] * 4, [2] * 8], np.r_[[1] * 6, [2] * 6]):
        a, b = evaluate(old, schedule), evaluate(new, schedule)
        assert (a.total_ops, a.baseline_ops, a.benefit_ops, a.cost_ops) == (
            b.total_ops, b.baseline_ops, b.benefit_ops, b.cost_ops)
        assert a.switches == b.switches
    # and a positive weight does change them (the test above can fail)
    assert not np.array_equal(before, served_matrix(cap, load=load, served="work",
                                                    headroom_weight=0.5, p99=p99,
                                                    latency_weight=0.5))


def test_below_saturation_a_positive_weight_prefers_the_lower_p99() -> None:
    """Same capacity, 40 % utilisation: only the predicted p99 tells the two apart."""
    cap = np.full((8, 2), 1000.0)
    load = np.full(8, 400.0)
    p99 = np.tile([200.0, 150.0], (8, 1))
    assert np.all(_choice(cap, load, p99, 0.0) == 0)  # nothing to gain: stay
    assert np.all(_choice(cap, load, p99, 0.3) == 1)
    # worth 0.3 x 400 x ln(200/150) = 34.5 ops/s: 2.1k ops in one 60-s interval, less than
    # the 3.6k ops of headroom a rolling restart loses (3 batches of 30 s at 2/3 capacity);
    # over 8 intervals (16.6k ops) the restart pays
    restart = ~np.eye(2, dtype=bool)
    assert np.all(_choice(cap[:1], load[:1], p99[:1], 0.3, restart) == 0)
    assert np.all(_choice(cap, load, p99, 0.3, restart) == 1)
    # a lower p99 on a candidate that saturates is not credited
    tight = np.tile([1000.0, 390.0], (8, 1))
    assert served_matrix(tight, load=load, served="work", p99=p99, latency_weight=1.0)[
        0, 1] == 390.0


def test_where_saturated_the_weight_does_not_change_the_choice() -> None:
    """Offered 2000 ops/s: the faster configuration serves more work though its predicted
    p99 is twice as long, whatever the latency weight."""
    cap = np.tile([1000.0, 1200.0], (8, 1))
    load = np.full(8, 2000.0)
    p99 = np.tile([150.0, 300.0], (8, 1))
    for weight in (0.0, 0.5, 1.0):
        assert np.all(_choice(cap, load, p99, weight) == 1)
    assert np.array_equal(
        served_matrix(cap, load=load, served="work", headroom_weight=0.5),
        served_matrix(cap, load=load, served="work", headroom_weight=0.5, p99=p99,
                      latency_weight=1.0))


def test_the_latency_weight_is_validated() -> None:
    cap, load = np.ones((2, 2)), np.ones(2)
    with pytest.raises(ValidationError, match=r"latency_weight: must be in \[0, 1\]"):
        served_matrix(cap, load=load, served="work", p99=np.ones((2, 2)), latency_weight=1.5)
    with pytest.raises(ValidationError, match="needs the predicted p99"):
        served_matrix(cap, load=load, served="work", latency_weight=0.5)
    with pytest.raises(ValidationError, match=r"p99: expected \(2, 2\) positive"):
        served_matrix(cap, load=load, served="work", p99=np.zeros((2, 2)), latency_weight=0.5)


# ---------------------------------------------------------------- kairos plan
def _latency_model(*, latency: bool = True, latency_std: float = 0.0) -> PerformanceModel:
    """1,000 ops/s whatever concurrent_reads (32 or 64, a live change); 64 readers cut the
    p99 by a quarter (log -0.29) at the same throughput, each class's effect known to
    ``latency_std`` (log scale)."""
    feature = Feature("concurrent_reads", "linear", ref=32.0, scale=32.0, lo=32.0, hi=64.0)
    n = 4 * 2
    coef = np.array([[math.log(1000.0), 0.0]] * 4)
    terms = LatencyTerms(coef=np.array([[math.log(200.0), math.log(0.75)]] * 4),
                         cov=np.diag(np.tile([0.0, latency_std**2], 4)), sigma=0.05)
    return PerformanceModel(engine="cassandra", name="latency-test", version=1,
                            model_type="fitted", features=(feature,), coef=coef,
                            cov=np.zeros((n, n)), sigma=0.05,
                            latency=terms if latency else None)


def _trace(load: float) -> WorkloadSeries:
    n = 16
    return WorkloadSeries(
        engine="cassandra", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, load),
        mix={"read": np.full(n, 0.5), "update": np.full(n, 0.5), "insert": np.zeros(n),
             "scan": np.zeros(n)}, step_seconds=20.0)


def _plan(load: float, **kw: Any) -> Any:
    request = dict(trace=_trace(load), model=_latency_model(), forecast_model="naive",
                   horizon=16, current={"concurrent_reads": 32},
                   optimiser=OptimiserOptions(method="dp"))
    return make_plan(PlanRequest(**(request | kw)))


def test_kairos_plan_takes_the_lower_p99_when_unsaturated_and_records_the_weight() -> None:
    off = _plan(400.0)
    assert off.plan.steps == ()
    obj = off.plan.provenance["objective"]
    assert obj["latency_weight"] == 0.0 and "running_p99_ms" not in obj
    on = _plan(400.0, latency_weight=0.3)
    (step,) = on.plan.steps
    assert dict(step.target) == {"concurrent_reads": 64} and step.expected.gains == "headroom"
    obj = on.plan.provenance["objective"]
    assert obj["latency_weight"] == 0.3 and "p99" in obj["latency_measure"]
    assert obj["running_p99_ms"]["mean"] == pytest.approx(200.0)
    # 0.3 x 400 ops/s x ln(4/3) x 20 s x 16 intervals
    assert on.evaluation.net_ops == pytest.approx(0.3 * 400 * math.log(4 / 3) * 320)
    text = "\n".join(_decision_lines(on.plan.provenance))
    assert "0.3 x offered x ln(p99 running / p99)" in text and "200 ms" in text


def test_the_latency_models_uncertainty_weighs_in_p_gain() -> None:
    """The scenarios draw the latency coefficients too: an effect of -0.29 +- 0.71 (the mix's
    two classes, each +- 1) pays in about two scenarios of three, short of confidence 0.9."""
    sure = _plan(400.0, latency_weight=0.3, model=_latency_model(latency_std=0.0))
    assert [s.expected.p_gain for s in sure.plan.steps] == [1.0]
    unsure = _plan(400.0, latency_weight=0.3, model=_latency_model(latency_std=1.0))
    assert unsure.plan.steps == () and len(unsure.dropped) == 1
    assert 0.55 < unsure.dropped[0].p_gain < 0.8


def test_kairos_plan_weight_zero_is_the_plan_of_a_model_without_latency() -> None:
    with_latency = _plan(400.0, latency_weight=0.0)
    without = _plan(400.0, model=_latency_model(latency=False))
    saturated = [_plan(5000.0, latency_weight=w) for w in (0.0, 1.0)]
    for a, b in ((with_latency, without), tuple(saturated)):
        assert a.evaluation.total_ops == b.evaluation.total_ops
        assert a.plan.steps == b.plan.steps


def test_kairos_plan_refuses_a_latency_weight_it_cannot_honour() -> None:
    with pytest.raises(ValidationError, match=r"--latency-weight: the performance model "
                       r"latency-test .* predicts no latency"):
        _plan(400.0, model=_latency_model(latency=False), latency_weight=0.3)
    with pytest.raises(ValidationError, match="only --served work does"):
        _plan(400.0, latency_weight=0.3, served="offered")
    with pytest.raises(ValidationError, match=r"--latency-weight: must be in \[0, 1\]"):
        _plan(400.0, latency_weight=2.0)


def test_the_cli_passes_the_latency_weight() -> None:
    import argparse

    from planner.commands import plan as plan_cmd

    parser = argparse.ArgumentParser()
    plan_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["plan", "--trace", "t.csv", "-o", "p.yml"])
    assert plan_cmd.request_from_args(args).latency_weight == 0.0
    args = parser.parse_args(["plan", "--trace", "t.csv", "-o", "p.yml",
                              "--latency-weight", "0.25"])
    assert plan_cmd.request_from_args(args).latency_weight == 0.25
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "--trace", "t.csv", "-o", "p.yml", "--latency-weight", "2"])
