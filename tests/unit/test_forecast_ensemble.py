"""The backtest-driven ensemble (issue 19): combination, mix shrinkage, intervals, budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.forecast import candidates as fcand
from planner.forecast.ensemble import combine
from planner.forecast.forecaster import forecast, load_forecast, save_forecast
from planner.forecast.intervals import conformal_bands
from planner.workload.series import WorkloadSeries
from planner.workload.traces import ops_like

HOURLY = 3600.0


def hourly_ops(profile: str = "web", days: int = 35, seed: int = 3) -> WorkloadSeries:
    """An hourly production-like trace: daily (24) and weekly (168) seasons."""
    return ops_like(profile=profile, steps=24 * days, step_seconds=HOURLY, seed=seed)


@pytest.fixture(scope="module")
def web_forecast() -> tuple[WorkloadSeries, object]:
    s = hourly_ops()
    return s, forecast(s, horizon=12)


def test_ensemble_is_never_worse_than_its_best_single_candidate_on_the_backtest(
    web_forecast: tuple,
) -> None:
    _, fc = web_forecast
    load = fc.info["ensemble"]["load"]
    assert fc.model == "ensemble"
    assert load["load_smape"] <= min(load["candidates_load_smape"].values()) + 1e-12
    assert set(load["candidates_load_smape"]) >= {"naive", "snaive_day", "profile_day", "ets",
                                                   "theta", "fourier_ar", "mstl"}


def test_mix_forecast_is_never_worse_than_the_last_mix_on_the_backtest(
    web_forecast: tuple,
) -> None:
    _, fc = web_forecast
    mix = fc.info["ensemble"]["mix"]
    assert mix["mix_tv"] <= mix["naive_mix_tv"] + 1e-12
    assert all(0.0 <= s <= 1.0 for s in mix["shrinkage"])


def test_ensemble_beats_naive_and_seasonal_naive_on_later_data() -> None:
    s = hourly_ops(seed=5)
    n, h = len(s), 12
    errs: dict[str, list[float]] = {"ens": [], "naive": [], "snaive": []}
    for o in range(n - 120, n - h + 1, 18):
        fc = forecast(s.slice(0, o), horizon=h)
        actual = s.load[o : o + h]
        for key, pred in (("ens", fc.load_mean), ("naive", np.full(h, s.load[o - 1])),
                          ("snaive", s.load[o - 24 : o - 24 + h])):
            errs[key].append(float(np.mean(2 * np.abs(pred - actual) / (actual + pred))))
    ens = np.mean(errs["ens"])
    assert ens < 0.9 * min(np.mean(errs["naive"]), np.mean(errs["snaive"]))


def test_combination_weights_two_equally_good_independent_candidates() -> None:
    rng = np.random.default_rng(0)
    actual = rng.normal(0, 1, (200, 6))
    f = np.stack([actual + rng.normal(0, 0.5, actual.shape) for _ in range(2)])
    comb = combine(["a", "b"], f, actual, 100, [(0, 6)], to_load=lambda z: np.exp(z))
    assert not comb.scheme.startswith("single:")  # averaging halves the error variance
    np.testing.assert_allclose(comb.weights[0], [0.5, 0.5], atol=0.1)
    assert comb.eval_smape[comb.scheme] <= min(comb.eval_smape["single:a"],
                                               comb.eval_smape["single:b"])


def test_conformal_bands_cover_iid_residuals_at_the_nominal_rate() -> None:
    rng = np.random.default_rng(1)
    calib, later = rng.standard_t(4, (300, 8)), rng.standard_t(4, (300, 8))
    lo, hi = conformal_bands(calib, 0.9)
    inside = np.mean((later >= lo) & (later <= hi))
    assert 0.86 <= inside <= 0.94
    assert np.all(np.diff(hi) >= 0) and np.all(np.diff(lo) <= 0)  # only widen with lead time


def test_interval_coverage_is_checked_and_near_nominal(web_forecast: tuple) -> None:
    _, fc = web_forecast
    check = fc.info["ensemble"]["load"]["interval_coverage_check"]
    assert 0.8 <= check <= 0.98
    assert fc.backtest is not None and fc.backtest[0].load_coverage == pytest.approx(check)


def test_weekly_season_at_5_minutes_is_fast_issue_19() -> None:
    # 4 weeks at 5 minutes (period 2016) took ~200 s before the ensemble
    s = ops_like(profile="saas", steps=288 * 28, seed=2)
    t0 = time.perf_counter()
    fc = forecast(s, horizon=12)
    assert time.perf_counter() - t0 < 20  # the bench measures ~1-2 s; this guards a regression
    assert fc.info["ensemble"]["seasons"] == {"day": 288, "week": 2016, "other": None}
    assert "mstl" in fc.info["ensemble"]["load"]["candidates_load_smape"]


def test_time_budget_skips_the_expensive_candidates_and_says_so() -> None:
    fc = forecast(hourly_ops(days=21), horizon=6, budget_seconds=1e-6)
    skipped = fc.info["ensemble"]["load"]["skipped"]
    assert "mstl" in skipped and "time budget" in skipped["mstl"]
    assert set(fc.info["ensemble"]["load"]["candidates_load_smape"]) == {"naive", "ses"}


@pytest.mark.parametrize("budget", [0.0, -1.0])
def test_bad_budget_names_the_field(budget: float) -> None:
    with pytest.raises(ValidationError, match="budget_seconds: must be > 0"):
        forecast(hourly_ops(days=10), horizon=6, budget_seconds=budget)


def test_too_short_history_for_the_ensemble_is_a_clear_error() -> None:
    with pytest.raises(ValidationError, match="too few for the ensemble with horizon 24"):
        forecast(hourly_ops(days=2), horizon=24)


def test_ensemble_forecast_file_records_model_weights_and_errors(
    web_forecast: tuple, tmp_path: Path
) -> None:
    _, fc = web_forecast
    save_forecast(fc, tmp_path / "f.json")
    doc = json.loads((tmp_path / "f.json").read_text())  # strict JSON: no NaN
    assert doc["model"] == "ensemble"
    ens = doc["info"]["ensemble"]
    assert ens["load"]["scheme"] and ens["load"]["weights"]
    assert ens["load"]["load_smape"] > 0 and ens["mix"]["naive_mix_tv"] > 0
    back = load_forecast(tmp_path / "f.json")
    np.testing.assert_allclose(back.load_upper, fc.load_upper)
    assert back.backtest is not None and back.backtest[0].model == "ensemble"


def test_candidates_see_only_the_past() -> None:
    # changing the future must not change a forecast made before it
    rng = np.random.default_rng(4)
    z = np.sin(2 * np.pi * np.arange(24 * 30) / 24) + rng.normal(0, 0.1, 24 * 30)
    seasons = fcand.Seasons(day=24, week=168)
    origins = np.arange(24 * 20, 24 * 25, 7)
    later = z.copy()
    later[24 * 25 + 12 :] += 5.0
    for cand in (fcand.naive, fcand.ses, fcand.seasonal_naive(24), fcand.seasonal_profile(24, 3),
                 fcand.ets_adjusted(168, 2), fcand.theta_adjusted(24, 3, 72),
                 fcand.fourier_ar(seasons, 24 * 14), fcand.mstl(seasons),
                 fcand.statsmodels_theta(24), fcand.statsmodels_theta(168)):
        np.testing.assert_allclose(cand(z, origins, 12), cand(later, origins, 12))


def test_cli_prints_the_ensemble_line_and_takes_a_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from planner.cli import main
    from planner.commands import forecast as cmd
    from planner.forecast.ensemble import DEFAULT_BUDGET_SECONDS
    from planner.workload.series import save_trace

    assert cmd.DEFAULT_BUDGET_SECONDS == DEFAULT_BUDGET_SECONDS
    trace = tmp_path / "t.json"
    save_trace(hourly_ops(days=14), trace)
    out = tmp_path / "fc.json"
    assert main(["forecast", "--trace", str(trace), "--horizon", "6", "--budget", "2",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "chosen model: ensemble" in printed
    assert "ensemble: " in printed and "interval coverage check" in printed
    assert load_forecast(out).info["ensemble"]["budget_seconds"] == 2.0
    with pytest.raises(SystemExit, match="2"):
        main(["forecast", "--trace", str(trace), "--horizon", "6", "--budget", "0",
              "--out", str(out)])
    assert "argument --budget: 0 is out of range" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("step", "n", "h"),
    [(1800.0, 48 * 20, 96), (7.0, 400, 12), (3600.0, 24 * 9, 30), (300.0, 288 * 3, 1)],
    ids=["horizon-over-a-day", "no-calendar-season", "short-history", "one-step"],
)
def test_ensemble_gives_valid_forecasts_in_awkward_shapes(step: float, n: int, h: int) -> None:
    s = ops_like(profile="ingest", steps=n, step_seconds=step, seed=9)
    fc = forecast(s, horizon=h)
    assert fc.horizon == h and np.all(fc.load_lower <= fc.load_mean)
    assert np.all(fc.load_mean <= fc.load_upper) and np.all(np.isfinite(fc.load_upper))
    mean = np.column_stack([fc.mix_mean[c] for c in fc.classes])
    np.testing.assert_allclose(mean.sum(axis=1), 1.0, atol=1e-9)


def test_constant_load_and_an_unused_class_are_forecast_exactly() -> None:
    n = 24 * 10
    s = WorkloadSeries(
        engine="redis", timestamps=1.7e9 + HOURLY * np.arange(n), load=np.full(n, 500.0),
        mix={"read": np.full(n, 0.8), "write": np.full(n, 0.2), "other": np.zeros(n)},
        step_seconds=HOURLY,
    )
    fc = forecast(s, horizon=6)
    np.testing.assert_allclose(fc.load_mean, 500.0)
    np.testing.assert_allclose(fc.mix_mean["other"], 0.0, atol=1e-9)
    np.testing.assert_allclose(fc.mix_mean["read"], 0.8, atol=1e-9)


# ---------------------------------------------------------------- issue 45
def test_recent_errors_scheme_follows_the_candidate_right_lately() -> None:
    # a was right for the first three quarters of the origins, b since: a fixed mean (or
    # the plain inverse-MSE) splits the weight, the recency-weighted scheme moves to b
    from planner.forecast.ensemble import _inverse_mse, _recent_inverse_mse

    rng = np.random.default_rng(6)
    actual = rng.normal(0, 1, (200, 6))
    noise_a = np.where(np.arange(200)[:, None] < 150, 0.2, 1.0)
    noise_b = np.where(np.arange(200)[:, None] < 150, 1.0, 0.2)
    f = np.stack([actual + rng.normal(0, 1, actual.shape) * noise_a,
                  actual + rng.normal(0, 1, actual.shape) * noise_b])
    recent = _recent_inverse_mse(2.0)(f, actual)
    plain = _inverse_mse(2.0)(f, actual)
    assert recent[1] > 0.6
    assert plain[1] < 0.4  # b's early errors still dominate the unweighted mean
    np.testing.assert_allclose(recent.sum(), 1.0)


def test_recent_errors_scheme_is_one_of_the_schemes_judged() -> None:
    rng = np.random.default_rng(0)
    actual = rng.normal(0, 1, (200, 6))
    f = np.stack([actual + rng.normal(0, 0.5, actual.shape) for _ in range(2)])
    comb = combine(["a", "b"], f, actual, 100, [(0, 6)], to_load=lambda z: np.exp(z))
    assert "recent_inverse_mse2" in comb.eval_smape


def test_mix_interval_coverage_is_checked_and_near_nominal(web_forecast: tuple) -> None:
    _, fc = web_forecast
    check = fc.info["ensemble"]["mix"]["interval_coverage_check"]
    assert 0.8 <= check <= 0.98


def test_mix_bands_are_wider_in_the_hours_the_mix_moves_most() -> None:
    # the read share is noisy from 00:00 to 06:00 only (a nightly batch): its interval
    # there must be wider than at midday, where the share barely moves
    n = 24 * 21
    rng = np.random.default_rng(8)
    hour = np.arange(n) % 24
    read = 0.6 + np.where(hour < 6, 0.08, 0.005) * rng.standard_normal(n)
    load = 1000 + 300 * np.sin(2 * np.pi * hour / 24) + rng.normal(0, 20, n)
    s = WorkloadSeries(
        engine="redis", timestamps=1.7e9 - 1.7e9 % 86400 + HOURLY * np.arange(n), load=load,
        mix={"read": read, "write": 0.9 - read, "other": np.full(n, 0.1)}, step_seconds=HOURLY,
    )
    fc = forecast(s, horizon=24)
    width = fc.mix_upper["read"] - fc.mix_lower["read"]  # the forecast starts at midnight
    assert np.mean(width[1:5]) > 3 * np.mean(width[11:15])


def test_the_planner_never_imports_the_benchmark_peer() -> None:
    # statsforecast is a dev dependency for bench/forecast.py only (issue 45)
    root = Path(__file__).resolve().parents[2] / "planner"
    offenders = [p.name for p in root.rglob("*.py") if "statsforecast" in p.read_text()]
    assert offenders == []


def test_profile_switch_takes_the_weekly_profile_only_where_the_two_part() -> None:
    def const(v: list[float]) -> fcand.Candidate:
        return lambda z, origins, h: np.tile(np.array(v), (origins.size, 1))

    switch = fcand.profile_switch(const([0.0] * 4), const([0.1, 0.5, -0.6, 0.39]), 0.4)
    out = switch(np.zeros(10), np.array([5, 6]), 4)
    np.testing.assert_allclose(out, [[0.0, 0.5, -0.6, 0.0]] * 2)


def test_profile_switch_knows_a_saturday_that_the_daily_profile_does_not() -> None:
    # weekdays at level 0, weekends at log(0.2): from Saturday 00:00 the median of the last
    # seven days says "weekday", the weekly profile says "weekend", and the switch follows it
    rng = np.random.default_rng(10)
    n = 24 * 7 * 5
    weekend = (np.arange(n) // 24) % 7 >= 5
    z = np.where(weekend, np.log(0.2), 0.0) + rng.normal(0, 0.02, n)
    origin = np.array([24 * 7 * 4 + 24 * 5])  # the last Saturday, 00:00
    day, week = fcand.seasonal_profile(24, 7), fcand.seasonal_profile(168, 3)
    got = fcand.profile_switch(day, week)(z, origin, 12)[0]
    assert np.all(np.abs(got - np.log(0.2)) < 0.2)
    assert np.all(np.abs(day(z, origin, 12)[0] - np.log(0.2)) > 0.5)
    assert "profile_switch" in fcand_names(168 * 3)


def fcand_names(n_fit: int) -> set[str]:
    from planner.forecast.ensemble import load_candidates

    cands, _ = load_candidates(fcand.Seasons(day=24, week=168), n_fit, 12)
    return set(cands)


def test_weekdays_count_from_monday_in_utc() -> None:
    of = fcand.weekdays(ops_like(profile="web", steps=48).timestamps[0], 300.0, 288)
    np.testing.assert_array_equal(of(np.array([0, 287, 288, 288 * 5, 288 * 7])), [0, 0, 1, 5, 0])
    # a series starting on Wednesday 12:00
    of = fcand.weekdays(1767571200.0 + 2.5 * 86400, 3600.0, 24)
    np.testing.assert_array_equal(of(np.array([0, 11, 12, 24 * 3 + 12])), [2, 2, 3, 6])


def test_profile_daytype_forecasts_a_saturday_from_weekend_days_and_a_monday_from_weekdays(
) -> None:
    # weekdays at level 0, weekends at log(0.2), a different daily shape each
    rng = np.random.default_rng(11)
    n = 24 * 7 * 5
    t = np.arange(n)
    weekend = (t // 24) % 7 >= 5
    shape = np.where(weekend, 0.3 * np.sin(2 * np.pi * t / 24), 0.5 * np.cos(2 * np.pi * t / 24))
    z = np.where(weekend, np.log(0.2), 0.0) + shape + rng.normal(0, 0.02, n)
    cand = fcand.daytype_profile(24, 14, lambda i: (i // 24) % 7)
    saturday, monday = 24 * 7 * 4 + 24 * 5, 24 * 7 * 4
    got = cand(z, np.array([saturday, monday]), 12)
    np.testing.assert_allclose(got[0], z[saturday : saturday + 12], atol=0.1)
    np.testing.assert_allclose(got[1], z[monday : monday + 12], atol=0.1)


def test_profile_daytype_needs_the_start_time_and_two_weeks() -> None:
    from planner.forecast.ensemble import load_candidates

    seasons = fcand.Seasons(day=24, week=168)
    names, _ = load_candidates(seasons, 168 * 3, 12)
    assert "profile_daytype" not in names  # the series' start is unknown
    names, _ = load_candidates(seasons, 168 * 3, 12, weekday_of=lambda i: (i // 24) % 7)
    assert "profile_daytype" in names
    names, skipped = load_candidates(seasons, 24 * 12, 12, weekday_of=lambda i: (i // 24) % 7)
    assert "profile_daytype" not in names and "14 days" in skipped["profile_daytype"]


def test_the_day_type_candidate_counts_weekdays_from_the_series_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # issue 45: the start was once overwritten by the wall clock (time.perf_counter()), so
    # the day of the week of every step, and the forecast, changed with the time of the run
    seen: list[float] = []
    real = fcand.weekdays

    def spy(start: float, step: float, day: int):  # type: ignore[no-untyped-def]
        seen.append(start)
        return real(start, step, day)

    monkeypatch.setattr(fcand, "weekdays", spy)
    s = hourly_ops(profile="saas", days=28)
    forecast(s, horizon=12)
    assert seen == [float(s.timestamps[0])]


def test_the_same_history_gives_the_same_forecast_whatever_the_clock_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import planner.forecast.ensemble as ens

    s = hourly_ops(profile="saas", days=28)
    runs = []
    for clock in (1_000.0, 1_000.0 + 3.5 * 86400):  # the wall clock half a week apart
        monkeypatch.setattr(ens.time, "perf_counter", lambda c=clock: c)
        runs.append(forecast(s, horizon=12))
    monkeypatch.undo()
    errors = [r.info["ensemble"]["load"]["candidates_load_smape"] for r in runs]
    assert "profile_daytype" in errors[0] and errors[0] == errors[1]
    for name in ("load_mean", "load_lower", "load_upper"):
        np.testing.assert_array_equal(getattr(runs[0], name), getattr(runs[1], name))
    for c in s.classes:
        np.testing.assert_array_equal(runs[0].mix_mean[c], runs[1].mix_mean[c])


def test_statsmodels_theta_learns_the_daily_shape_from_every_day_of_the_history() -> None:
    # a fixed daily shape under white noise: the value a day before carries one day's noise,
    # the decomposition's mean per phase over ~20 days almost none
    rng = np.random.default_rng(8)
    n = 24 * 28
    shape = np.sin(2 * np.pi * np.arange(n) / 24) + 0.5 * np.cos(4 * np.pi * np.arange(n) / 24)
    z = 3.0 + shape + rng.normal(0, 0.2, n)
    origins = np.arange(24 * 21, n - 12, 5)
    targets = origins[:, None] + np.arange(12)[None, :]
    theta = fcand.statsmodels_theta(24)(z, origins, 12)
    snaive = fcand.seasonal_naive(24)(z, origins, 12)
    err_theta = np.mean(np.abs(theta - (3.0 + shape[targets])))
    err_snaive = np.mean(np.abs(snaive - (3.0 + shape[targets])))
    assert err_theta < 0.5 * err_snaive


def test_statsmodels_theta_is_a_candidate_when_two_cycles_precede_the_backtest() -> None:
    from planner.forecast.ensemble import load_candidates

    seasons = fcand.Seasons(day=24, week=168)
    names, _ = load_candidates(seasons, 168 * 2 + 2, 12)
    assert {"sm_theta_day", "sm_theta_week"} <= set(names)
    names, skipped = load_candidates(seasons, 168 * 2 - 10, 12)
    assert "sm_theta_day" in names and "sm_theta_week" not in names
    assert "two week cycles" in skipped["sm_theta_week"]


def test_the_scheme_can_be_chosen_on_both_halves_of_the_origins() -> None:
    # a: exact on the older half, 0.3 off on the newer; b: 0.2 off throughout
    n, split, h = 40, 20, 3
    actual = np.zeros((n, h))
    a = np.where(np.arange(n)[:, None] < split, 0.0, 0.3) + actual
    b = actual + 0.2
    f = np.stack([a, b])
    buckets = [(0, 1), (1, 3)]
    newer_only = combine(["a", "b"], f, actual, split, buckets, np.exp)
    assert newer_only.scheme == "single:b"
    both = combine(["a", "b"], f, actual, split, buckets, np.exp, newer_share=0.5)
    assert both.scheme == "single:a"
    smape_03 = 2 * (np.exp(0.3) - 1) / (np.exp(0.3) + 1)
    assert both.eval_smape["single:a"] == pytest.approx(0.5 * smape_03)
    assert both.eval_smape["single:a"] <= min(both.eval_smape.values()) + 1e-12
    # every residual stays out of sample: the older half forecast with the newer's weights
    np.testing.assert_allclose(both.cross_forecast[split:], a[split:])
