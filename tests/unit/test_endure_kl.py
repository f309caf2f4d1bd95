"""ENDURE's neighbourhood as ENDURE defines it (seeds/003, issue 42): the worst mix within a
KL ball around the forecast's, its radius learnt from the forecast's own backtest errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.forecast.forecaster import backtest, forecast
from planner.forecast.results import BacktestResult, mix_kl, smoothed_mix
from planner.model.performance import load_default_model
from planner.model.spaces import get_space
from planner.planning import risk as rk
from planner.planning.explain import explain_text
from planner.planning.pipeline import OptimiserOptions, PlanRequest, make_plan
from planner.workload import traces
from planner.workload.series import WorkloadSeries

EXPECTED = np.array([0.6, 0.3, 0.1, 0.0])
LOG_RATE = np.array([7.0, 6.0, 6.5, 4.0])  # the last class (scans) is by far the slowest


def kl(q: np.ndarray, p: np.ndarray) -> float:
    return float(np.sum(q * np.log(q / smoothed_mix(p))))


def test_no_radius_keeps_the_expected_mix_and_a_radius_is_used_to_the_full() -> None:
    assert np.allclose(rk.kl_worst_mix(EXPECTED, LOG_RATE, 0.0), smoothed_mix(EXPECTED),
                       atol=1e-9)
    for radius in (0.01, 0.1, 0.5, 2.0):
        q = rk.kl_worst_mix(EXPECTED, LOG_RATE, radius)
        assert q.sum() == pytest.approx(1.0) and (q > 0).all()
        assert kl(q, EXPECTED) == pytest.approx(radius, rel=1e-6)
    # more room, a worse mix: the slowest class gains, and the mix's log rate only falls
    rates = [float(rk.kl_worst_mix(EXPECTED, LOG_RATE, r) @ LOG_RATE) for r in (0, .05, .2, 1)]
    assert rates == sorted(rates, reverse=True) and rates[-1] < rates[0] - 0.5


def test_the_tilt_is_the_minimum_a_brute_force_search_of_the_ball_finds() -> None:
    rng = np.random.default_rng(3)
    p = smoothed_mix(EXPECTED)
    for radius in (0.05, 0.3):
        q = rk.kl_worst_mix(EXPECTED, LOG_RATE, radius)
        # Dirichlet draws around the expected mix, the ones inside the ball
        draws = rng.dirichlet(p * 40, size=200_000)
        inside = draws[np.sum(draws * np.log(draws / p), axis=1) <= radius]
        assert inside.shape[0] > 1000
        assert float(q @ LOG_RATE) <= float((inside @ LOG_RATE).min()) + 1e-9


def test_a_ball_past_every_tilt_puts_the_mass_on_the_slowest_class() -> None:
    q = rk.kl_worst_mix(EXPECTED, LOG_RATE, 50.0)
    assert q[3] > 0.999
    # equal rates: no class is worse, the expected mix stays whatever the radius
    assert np.allclose(rk.kl_worst_mix(EXPECTED, np.full(4, 5.0), 1.0), smoothed_mix(EXPECTED))


def test_the_kl_distance_is_zero_on_the_forecast_and_finite_where_it_said_zero() -> None:
    assert mix_kl(EXPECTED, EXPECTED) == pytest.approx(0.0, abs=1e-3)
    came = np.array([0.5, 0.3, 0.1, 0.1])  # scans the forecast put at 0
    assert 0.1 < float(mix_kl(came, EXPECTED)) < 1.0


def _series(read: np.ndarray, step: float = 30.0) -> WorkloadSeries:
    n = read.size
    return WorkloadSeries(
        engine="cassandra", timestamps=1.7e9 + step * np.arange(n), load=np.full(n, 500.0),
        mix={"read": read, "update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
        step_seconds=step)


def test_the_radius_is_learnt_from_the_backtest_s_mix_errors() -> None:
    steady = backtest(_series(np.full(120, 0.8)), model="naive", horizon=10)
    rng = np.random.default_rng(1)
    jittery = _series(np.clip(0.8 + rng.normal(0, 0.1, 120), 0, 1))
    noisy = backtest(jittery, model="naive", horizon=10)
    # a perfect forecast is only as far as the smoothing puts it
    assert steady.mix_kl_radius < 0.005 and noisy.mix_kl_radius > 5 * steady.mix_kl_radius
    # the radius is the level quantile: a higher level, a wider ball
    wider = backtest(jittery, model="naive", horizon=10, level=0.99)
    assert wider.mix_kl_radius > noisy.mix_kl_radius
    again = BacktestResult.from_dict(noisy.to_dict())
    assert again.mix_kl_radius == pytest.approx(noisy.mix_kl_radius)
    old = noisy.to_dict()
    del old["mix_kl_radius"]  # a forecast file written before the radius existed
    assert math.isnan(BacktestResult.from_dict(old).mix_kl_radius)


def test_the_worst_capacity_in_the_ball_is_at_most_the_expected_mix_s() -> None:
    model = load_default_model("cassandra")
    space = get_space("cassandra")
    cands = [space.complete({}), space.complete({"compaction": "LeveledCompactionStrategy"})]
    series = traces.GENERATORS["mgrast"](seed=1, steps=400, step_seconds=30.0)
    fc = forecast(series, horizon=20, model="markov1")
    radius = rk.forecast_kl_radius(fc)
    assert radius > 0
    mean = np.stack([np.asarray(fc.mix_mean[c])[:20] for c in model.classes], 1)
    beta = model.coef @ model.config_matrix(cands).T  # log ops/s per class and candidate
    expected = np.exp(mean @ beta)
    worst = rk.kl_worst_case_capacity(model, fc, cands, 20, radius)
    assert worst.shape == expected.shape == (20, 2)
    assert (worst <= expected * (1 + 1e-6)).all() and (worst < expected).any()
    assert (rk.kl_worst_case_capacity(model, fc, cands, 20, 10 * radius) <= worst + 1e-9).all()
    with pytest.raises(ValidationError, match="KL radius must be >= 0"):
        rk.kl_worst_case_capacity(model, fc, cands, 20, -1.0)


def test_endure_kl_plans_record_and_explain_their_radius() -> None:
    series = traces.GENERATORS["mgrast"](seed=1, steps=900, step_seconds=30.0).slice(0, 720)
    result = make_plan(PlanRequest(
        trace=series, forecast_model="markov1", horizon=30, restart_seconds=60.0,
        risk="endure-kl", optimiser=OptimiserOptions(method="dp", seed=0), served="capacity"))
    radius = result.plan.provenance["uncertainty"]["kl_radius"]
    assert radius == pytest.approx(rk.forecast_kl_radius(result.forecast), abs=1e-6) and radius > 0
    text = explain_text(result.plan)
    assert f"the worst mix within KL {radius:.3g} nats of the forecast's" in text


def test_a_forecast_without_a_mix_backtest_is_refused_naming_the_way_out() -> None:
    short = _series(np.where(np.arange(16) < 8, 0.1, 0.9), step=20.0)
    with pytest.raises(ValidationError, match=r"risk endure-kl: the forecast \(model naive\) "
                       r"has no backtest of its mix .* or use --risk endure"):
        make_plan(PlanRequest(trace=short, forecast_model="naive", horizon=48,
                              restart_seconds=45.0, risk="endure-kl",
                              optimiser=OptimiserOptions(method="dp"), served="capacity"))
