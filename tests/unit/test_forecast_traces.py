"""The production-like traces of bench/forecast.py (planner.workload.traces.ops_like)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.workload.traces import OPS_PROFILES, mgrast_draws, mgrast_like, ops_like


def _acf(x: np.ndarray, lag: int) -> float:
    x = x - x.mean()
    return float(np.dot(x[:-lag], x[lag:]) / np.dot(x, x))


@pytest.mark.parametrize("profile", sorted(OPS_PROFILES))
def test_ops_traces_have_daily_and_weekly_seasons_and_valid_mixes(profile: str) -> None:
    s = ops_like(profile=profile, steps=288 * 21, seed=1)
    assert s.step_seconds == 300.0 and len(s) == 288 * 21
    log_load = np.log(s.load)
    assert _acf(log_load, 288) > 0.3  # a day
    if OPS_PROFILES[profile].weekend <= 0.8:  # a week: last week's value beats yesterday's
        week = np.mean(np.abs(log_load[2016:] - log_load[:-2016]))
        assert week < np.mean(np.abs(log_load[2016:] - log_load[2016 - 288 : -288]))
    np.testing.assert_allclose(s.mix_matrix().sum(axis=1), 1.0, atol=1e-9)
    assert np.all(s.load > 0)


def test_ops_traces_are_seeded() -> None:
    a, b = ops_like(seed=7, steps=500), ops_like(seed=7, steps=500)
    np.testing.assert_array_equal(a.load, b.load)
    assert not np.array_equal(a.load, ops_like(seed=8, steps=500).load)


def test_web_reads_rise_with_load() -> None:
    s = ops_like(profile="web", steps=288 * 14, seed=2)
    assert np.corrcoef(np.log(s.load), s.mix["read"])[0, 1] > 0.3


def test_weekends_are_quieter_for_the_saas_profile() -> None:
    s = ops_like(profile="saas", steps=288 * 14, seed=3)
    days = s.load.reshape(14, 288).mean(axis=1)
    assert days[5:7].mean() < 0.6 * days[:5].mean()  # the trace starts on a Monday


def test_unknown_profile_names_the_field() -> None:
    with pytest.raises(ValidationError, match="profile: unknown 'mobile'"):
        ops_like(profile="mobile")


def test_mgrast_draws_are_the_trace_with_what_generated_it() -> None:
    # bench/forecast_oracle.py forecasts bench/forecast.py's mgrast trace from these.
    series = mgrast_like(steps=3000, step_seconds=300.0, seed=15)
    load, _, level, regime_end = mgrast_draws(3000, 15)
    np.testing.assert_array_equal(series.load, load)
    np.testing.assert_allclose(series.mix_matrix().sum(axis=1), 1.0)
    steps = np.arange(3000)
    assert np.all(regime_end > steps) and np.all(regime_end <= 3000)
    # one level per regime: it changes exactly where a regime ends
    changes = np.flatnonzero(np.diff(level) != 0) + 1
    assert set(changes.tolist()) <= set(regime_end.tolist())
    assert np.all(np.abs(load / level - 1) < 0.2)  # 3 % noise around the level
