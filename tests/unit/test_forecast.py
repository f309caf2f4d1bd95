"""Forecasting: known-structure series, interval coverage, validity, selection, errors, CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.cli import main
from planner.errors import ValidationError
from planner.forecast.forecaster import (
    MODELS,
    Forecast,
    backtest,
    forecast,
    infer_season_length,
    load_forecast,
    save_forecast,
)
from planner.workload.series import WorkloadSeries, save_trace

T0 = 1_700_000_000.0


def diurnal(
    n: int = 360, step: float = 3600.0, seed: int = 0, noise: float = 0.03
) -> WorkloadSeries:
    """A pure daily pattern in load and mix plus a little noise."""
    rng = np.random.default_rng(seed)
    m = round(86400 / step)
    phase = 2 * np.pi * np.arange(n) / m
    load = 2000 + 1000 * np.sin(phase) + rng.normal(0, noise * 2000, n)
    read = np.clip(0.5 + 0.35 * np.sin(phase + 0.7) + rng.normal(0, noise * 0.3, n), 0.02, 0.97)
    rest = 1 - read
    return WorkloadSeries(
        engine="cassandra",
        timestamps=T0 + step * np.arange(n),
        load=load,
        mix={"read": read, "update": 0.6 * rest, "insert": 0.3 * rest, "scan": 0.1 * rest},
        step_seconds=step,
    )


def switching(n: int = 400, p: float = 0.06, seed: int = 0) -> WorkloadSeries:
    """Abrupt random switches between a read-heavy and a write-heavy regime (MG-RAST-like)."""
    rng = np.random.default_rng(seed)
    state = np.zeros(n, dtype=int)
    for i in range(1, n):
        state[i] = 1 - state[i - 1] if rng.random() < p else state[i - 1]
    read = np.where(state == 1, 0.95, 0.05)
    load = np.where(state == 1, 3000.0, 1500.0) * rng.lognormal(0, 0.1, n)
    return WorkloadSeries(
        engine="cassandra",
        timestamps=T0 + 300.0 * np.arange(n),
        load=load,
        mix={
            "read": read,
            "update": 0.7 * (1 - read),
            "insert": 0.3 * (1 - read),
            "scan": np.zeros(n),
        },
        step_seconds=300.0,
    )


def _constant_mix_series(load: np.ndarray, step: float = 3600.0) -> WorkloadSeries:
    n = load.size
    return WorkloadSeries(
        engine="redis",
        timestamps=T0 + step * np.arange(n),
        load=load,
        mix={"read": np.full(n, 0.7), "write": np.full(n, 0.3), "other": np.zeros(n)},
        step_seconds=step,
    )


SEASONAL = {"seasonal_naive", "ets", "stl", "sarimax"}


def test_daily_pattern_is_forecast_far_better_than_naive() -> None:
    s = diurnal()
    assert infer_season_length(s) == 24
    fc = forecast(s, horizon=24, folds=2)
    assert fc.model == "ensemble"
    by = {b.model: b for b in fc.backtest or ()}
    chosen = by[fc.model].summary()["load_smape"]
    assert chosen < by["snaive_day"].summary()["load_smape"]
    assert chosen < 0.3 * by["naive"].summary()["load_smape"]
    assert by[fc.model].summary()["mix_tv"] < 0.3 * by["naive"].summary()["mix_tv"]
    assert fc.backtest is not None and fc.backtest[0].model == fc.model


def test_auto_with_candidates_still_selects_a_single_model() -> None:
    fc = forecast(diurnal(), horizon=24, folds=2, candidates=["naive", "seasonal_naive"])
    assert fc.model == "seasonal_naive"
    assert fc.info["selection"] == "auto"


def test_switching_series_is_not_forecast_worse_than_naive_out_of_sample() -> None:
    full = switching(n=480)
    assert infer_season_length(full) is None
    chosen = forecast(full.slice(0, 360), horizon=12, folds=3).model
    # judge the choice on later data that did not take part in the selection
    later = {
        name: backtest(full, model=name, horizon=12, folds=10).score for name in {chosen, "naive"}
    }
    assert later[chosen] <= 1.05 * later["naive"]


def test_markov2_learns_what_markov1_cannot() -> None:
    # A A B A A B ...: after A comes A or B depending on the state before it.
    n = 300
    pattern = np.array([0.1, 0.1, 0.9] * (n // 3))
    s = WorkloadSeries(
        engine="cassandra",
        timestamps=T0 + 60.0 * np.arange(n),
        load=np.full(n, 1000.0),
        mix={"read": pattern, "update": 1 - pattern, "insert": np.zeros(n), "scan": np.zeros(n)},
        step_seconds=60.0,
    )
    tv2 = backtest(s, model="markov2", horizon=6, folds=3).summary()["mix_tv"]
    tv1 = backtest(s, model="markov1", horizon=6, folds=3).summary()["mix_tv"]
    assert tv2 < 0.02
    assert tv1 > 0.2


@pytest.mark.parametrize("model", ["naive", "ets"])
def test_intervals_cover_at_the_nominal_rate(model: str) -> None:
    inside, total = 0.0, 0
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        n = 160
        if model == "naive":  # a random walk: naive intervals are exact
            load = 5000 + np.cumsum(rng.normal(0, 50, n))
        else:  # seasonal level + white noise
            load = 3000 + 800 * np.sin(2 * np.pi * np.arange(n) / 12) + rng.normal(0, 100, n)
        res = backtest(
            _constant_mix_series(load),
            model=model,
            horizon=12,
            folds=4,
            season_length=12 if model == "ets" else None,
            level=0.9,
            seed=seed,
        )
        inside += res.load_coverage * 48
        total += 48
    assert 0.8 <= inside / total <= 0.97


@pytest.mark.parametrize("model", MODELS)
def test_every_model_gives_valid_mixes_and_ordered_intervals(model: str) -> None:
    s = diurnal(n=120, step=7200.0, seed=4)  # 12 steps a day
    fc = forecast(s, horizon=8, model=model, folds=1)
    assert fc.model == model
    mean = np.column_stack([fc.mix_mean[c] for c in fc.classes])
    np.testing.assert_allclose(mean.sum(axis=1), 1.0, atol=1e-9)
    for c in fc.classes:
        assert np.all(fc.mix_lower[c] <= fc.mix_mean[c] + 1e-12)
        assert np.all(fc.mix_mean[c] <= fc.mix_upper[c] + 1e-12)
        assert np.all((fc.mix_lower[c] >= 0) & (fc.mix_upper[c] <= 1))
    assert np.all(fc.load_lower <= fc.load_mean) and np.all(fc.load_mean <= fc.load_upper)
    assert np.all(fc.load_lower >= 0)
    np.testing.assert_allclose(np.diff(fc.timestamps), 7200.0)
    assert fc.timestamps[0] == s.timestamps[-1] + 7200.0


def test_forecast_round_trips_through_json(tmp_path: Path) -> None:
    fc = forecast(diurnal(n=120, step=7200.0), horizon=6, model="seasonal_naive", folds=2)
    save_forecast(fc, tmp_path / "f.json")
    back = load_forecast(tmp_path / "f.json")
    assert back.model == "seasonal_naive" and back.season_length == 12
    np.testing.assert_allclose(back.load_upper, fc.load_upper)
    assert back.mix_at(3) == pytest.approx(fc.mix_at(3))
    assert back.backtest is not None and back.backtest[0].load_smape.shape == (6,)


def test_sample_paths_are_valid_seeded_and_spread_like_the_intervals() -> None:
    fc = forecast(diurnal(n=120, step=7200.0), horizon=12, model="ets", folds=1)
    paths = fc.sample_paths(200, np.random.default_rng(7))
    again = fc.sample_paths(200, np.random.default_rng(7))
    assert len(paths) == 200
    np.testing.assert_allclose(paths[5].load, again[5].load)
    loads = np.array([p.load for p in paths])
    inside = (loads >= fc.load_lower - 1e-9) & (loads <= fc.load_upper + 1e-9)
    assert 0.8 <= inside.mean() <= 0.97
    for p in paths[:20]:
        np.testing.assert_allclose(p.mix_matrix().sum(axis=1), 1.0, atol=1e-9)


def test_irregular_trace_must_be_resampled() -> None:
    s = WorkloadSeries(
        engine="cassandra",
        timestamps=np.array([0.0, 10, 25, 40, 70, 75, 90, 100, 130, 140, 150, 160]),
        load=np.ones(12),
        mix={
            "read": np.ones(12),
            "update": np.zeros(12),
            "insert": np.zeros(12),
            "scan": np.zeros(12),
        },
    )
    with pytest.raises(ValidationError, match=r"trace is irregular.*resample"):
        forecast(s, horizon=3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"horizon": 0}, "horizon: must be a positive integer"),
        ({"horizon": 4, "model": "prophet"}, "model: unknown model 'prophet'"),
        ({"horizon": 4, "level": 1.5}, r"level: must be in \(0, 1\)"),
        ({"horizon": 4, "season_length": 1}, "season_length: must be an integer"),
        ({"horizon": 4, "model": "auto", "candidates": ["ets", "nope"]}, "unknown model 'nope'"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        forecast(diurnal(n=60), **kwargs)


def test_seasonal_model_without_season_is_an_error() -> None:
    with pytest.raises(ValidationError, match="stl needs a season; none was detected"):
        forecast(switching(n=200), horizon=4, model="stl")


def test_too_short_trace_for_backtest_is_an_error() -> None:
    with pytest.raises(ValidationError, match="too few to backtest ets"):
        backtest(diurnal(n=60), model="ets", horizon=24, folds=3, season_length=24)


def test_forecast_rejects_bad_documents(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"kind": "kairos-trace"}')
    with pytest.raises(ValidationError, match="not a kairos-forecast document"):
        load_forecast(tmp_path / "x.json")
    with pytest.raises(ValidationError, match="lower <= mean <= upper"):
        Forecast(
            engine="redis",
            timestamps=np.array([1.0]),
            load_mean=np.array([5.0]),
            load_lower=np.array([6.0]),
            load_upper=np.array([7.0]),
            mix_mean={"read": [1.0], "write": [0.0], "other": [0.0]},
            mix_lower={"read": [1.0], "write": [0.0], "other": [0.0]},
            mix_upper={"read": [1.0], "write": [0.0], "other": [0.0]},
            level=0.9,
            model="naive",
            step_seconds=1.0,
        )


def test_cli_forecast_prints_table_and_writes_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    save_trace(diurnal(n=120, step=7200.0), trace)
    out = tmp_path / "fc.json"
    rc = main(
        ["forecast", "--trace", str(trace), "--horizon", "6", "--folds", "2", "--out", str(out)]
    )
    captured = capsys.readouterr()
    assert rc == 0
    assert "season length: 12 steps" in captured.out
    assert [ln for ln in captured.out.splitlines() if ln.startswith("* ")]
    assert "backtest naive" in captured.err
    assert load_forecast(out).horizon == 6


def test_cli_forecast_bad_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,load,read,update,insert,scan\n0,1,0.5,0.1,0,0\n60,1,1,0,0,0\n")
    rc = main(["forecast", "--trace", str(bad), "--horizon", "2", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "mix: row 0: fractions sum to 0.6, not 1" in capsys.readouterr().err
