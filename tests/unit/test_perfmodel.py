"""Performance model: the prior reproduces the seeds' figures; fitting recovers coefficients."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner.errors import ValidationError
from planner.model.performance import (
    Feature,
    PerformanceModel,
    default_model_path,
    fit_model,
    load_default_model,
    load_model,
    prior_model,
    save_model,
)
from planner.model.spaces import get_space
from planner.workload.series import CASSANDRA_CLASSES

STCS = "SizeTieredCompactionStrategy"
LCS = "LeveledCompactionStrategy"


@pytest.mark.parametrize("engine", ["cassandra", "redis"])
def test_shipped_prior_equals_its_builder(engine: str) -> None:
    shipped = json.loads(default_model_path(engine).read_text())
    built = json.loads(json.dumps(prior_model(engine).to_dict()))
    assert shipped == built
    assert load_default_model(engine).model_type == "prior"


@pytest.mark.parametrize("engine", ["cassandra", "redis"])
def test_prior_has_provenance_beside_it(engine: str) -> None:
    model = load_default_model(engine)
    prov = default_model_path(engine).parent / model.provenance
    text = prov.read_text()
    assert "PRIOR, NOT CALIBRATED" in text
    for value in model.info["assumed_base_ops_per_s"].values():
        assert f"{value:g}" in text


def test_cassandra_provenance_names_every_seed_figure() -> None:
    text = (default_model_path("cassandra").parent / "cassandra-prior.provenance.md").read_text()
    for needle in (
        "44%",
        "90%",
        "1.8x",
        "0.11",
        "0.2",
        "seeds/000",
        "seeds/002",
        "ln 1.44",
        "ln 1.90",
        "ln 1.8",
    ):
        assert needle in text, needle


def test_cassandra_prior_reproduces_sophia_compaction_effects() -> None:
    m = load_default_model("cassandra")
    read = {"read": 1.0}
    write = {"update": 0.5, "insert": 0.5}
    ratio_read = (
        m.predict(read, {"compaction": LCS}).ops_per_s
        / m.predict(read, {"compaction": STCS}).ops_per_s
    )
    ratio_write = (
        m.predict(write, {"compaction": STCS}).ops_per_s
        / m.predict(write, {"compaction": LCS}).ops_per_s
    )
    assert ratio_read == pytest.approx(1.90)
    assert ratio_write == pytest.approx(1.44)


def test_cassandra_prior_reproduces_seed_002_threshold_effect_within_its_range() -> None:
    m = load_default_model("cassandra")
    mix = {"read": 0.8, "update": 0.2}

    def ops(mct: float) -> float:
        return m.predict(mix, {"memtable_cleanup_threshold": mct}).ops_per_s

    assert ops(0.11) / ops(0.2) == pytest.approx(1.8)
    assert ops(0.33) == pytest.approx(ops(0.2))  # flat outside the measured range
    assert ops(0.05) == pytest.approx(ops(0.11))


def test_redis_prior_is_flat_over_configurations() -> None:
    m = load_default_model("redis")
    space = get_space("redis")
    mean, std = m.predict_matrix([{"read": 0.5, "write": 0.5}], space.candidates())
    assert np.ptp(mean) == pytest.approx(0.0, abs=1e-6)
    assert np.all(std > 0)


def test_predict_matrix_shape_and_speed() -> None:
    m = load_default_model("cassandra")
    rng = np.random.default_rng(3)
    mixes = [dict(zip(CASSANDRA_CLASSES, r, strict=True)) for r in rng.dirichlet(np.ones(4), 180)]
    configs = (
        get_space("cassandra").candidates(
            keys=["compaction", "memtable_cleanup_threshold", "concurrent_writes", "heap_size"]
        )
        * 2
    )
    configs = configs[:30]
    start = time.perf_counter()
    mean, std = m.predict_matrix(mixes, configs)
    elapsed = time.perf_counter() - start
    assert mean.shape == std.shape == (180, 30)
    assert elapsed < 0.25
    single = m.predict(mixes[7], configs[11])
    assert single.ops_per_s == pytest.approx(mean[7, 11])
    assert single.std == pytest.approx(std[7, 11])


@pytest.mark.parametrize(
    ("mix", "config", "match"),
    [
        ({"read": 0.5, "update": 0.2}, {}, "fractions sum to 0.7"),
        ({"read": 0.5, "write": 0.5}, {}, r"unknown class\(es\) \['write'\]"),
        ({"read": 1.0}, {"concurrent_writes": 0}, "concurrent_writes: 0 is below"),
        ({"read": 1.0}, {"nope": 1}, "nope: unknown cassandra parameter"),
    ],
)
def test_predict_rejects_bad_input(mix: dict, config: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        load_default_model("cassandra").predict(mix, config)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    m = prior_model("cassandra")
    save_model(m, tmp_path / "m.json")
    back = load_model(tmp_path / "m.json")
    mix = {"read": 0.3, "update": 0.3, "insert": 0.2, "scan": 0.2}
    assert back.predict(mix, {"compaction": LCS}) == m.predict(mix, {"compaction": LCS})


def test_load_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no such file"):
        load_model(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"kind": "something"}')
    with pytest.raises(ValidationError, match="not a kairos-perfmodel document"):
        load_model(tmp_path / "bad.json")


# ------------------------------------------------------------------ fitting
TRUE_FEATURES = (
    Feature("compaction", "level", level=LCS),
    Feature("concurrent_writes", "linear", ref=32.0, scale=16.0),
)
TRUE_COEF = np.array(
    [
        [np.log(5000), 0.6, 0.00],
        [np.log(7000), -0.3, 0.10],
        [np.log(8000), -0.4, 0.15],
        [np.log(500), 0.5, 0.00],
    ]
)


def _observations(n: int, sigma: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    truth = PerformanceModel(
        engine="cassandra",
        name="truth",
        version=1,
        model_type="fitted",
        features=TRUE_FEATURES,
        coef=TRUE_COEF,
        cov=np.zeros((12, 12)),
        sigma=0.0,
    )
    mixes = rng.dirichlet(np.ones(4) * 0.7, n)
    comp = rng.choice([STCS, LCS], n)
    cw = rng.choice([16, 32, 48, 64], n)
    configs = [
        {"compaction": c, "concurrent_writes": int(w)} for c, w in zip(comp, cw, strict=True)
    ]
    mu, _ = truth.predict_log(mixes, truth.config_matrix(configs))
    ops = np.exp(np.diag(mu) + rng.normal(0, sigma, n))
    df = pd.DataFrame(mixes, columns=list(CASSANDRA_CLASSES))
    df["compaction"] = comp
    df["concurrent_writes"] = cw
    df["ops_per_s"] = ops
    return df


def test_fit_recovers_known_coefficients() -> None:
    df = _observations(400, sigma=0.03, seed=11)
    model, report = fit_model(df, engine="cassandra", seed=1)
    assert report.design == "interaction"
    assert report.heldout_mape < 0.05
    assert report.baseline_mape > 3 * report.heldout_mape
    assert [f.label for f in model.features] == [
        "compaction=LeveledCompactionStrategy",
        "concurrent_writes",
    ]
    # the fitted feature scale differs from the truth's: compare on the truth's scale
    scale = model.features[1].scale / 16.0
    fitted = np.array(model.coef)
    fitted[:, 2] /= scale
    np.testing.assert_allclose(fitted, TRUE_COEF, atol=0.05)
    assert model.sigma == pytest.approx(0.03, rel=0.2)


def test_fit_from_csv_and_additive_truth(tmp_path: Path) -> None:
    df = _observations(300, sigma=0.02, seed=5)
    # make the truth additive: compaction shifts every class equally
    df["ops_per_s"] = df["ops_per_s"] * 0 + np.exp(
        np.log(6000)
        + 0.3 * (df["compaction"] == LCS).to_numpy()
        + np.random.default_rng(2).normal(0, 0.02, len(df))
    )
    df = df.drop(columns=["concurrent_writes"])
    path = tmp_path / "obs.csv"
    df.to_csv(path, index=False)
    model, report = fit_model(path, engine="cassandra")
    assert set(report.candidates) == {"interaction", "additive"}
    assert report.heldout_mape == min(report.candidates.values())
    assert report.heldout_mape < 0.04
    ratio = (
        model.predict({"scan": 1.0}, {"compaction": LCS}).ops_per_s
        / model.predict({"scan": 1.0}, {"compaction": STCS}).ops_per_s
    )
    assert ratio == pytest.approx(np.exp(0.3), rel=0.05)


def test_fit_notes_unobserved_classes() -> None:
    df = _observations(200, sigma=0.02, seed=8)
    df["insert"] = df["insert"] + df["scan"]
    df["scan"] = 0.0
    model, report = fit_model(df, engine="cassandra")
    assert any("class scan never observed" in n for n in report.notes)
    assert model.predict({"scan": 1.0}, {}).std > model.predict({"read": 1.0}, {}).std


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.drop(columns=["ops_per_s"]), "ops_per_s: column missing"),
        (lambda d: d.drop(columns=["scan"]), "scan: column missing"),
        (lambda d: d.assign(flux_capacitor=1), "flux_capacitor: unknown cassandra parameter"),
        (
            lambda d: d.assign(ops_per_s=d["ops_per_s"].where(d.index != 4, -1.0)),
            "ops_per_s: row 4: must be a positive number",
        ),
        (
            lambda d: d.assign(concurrent_writes=d["concurrent_writes"].where(d.index != 6, 1)),
            "observations row 6: concurrent_writes: 1 is below the minimum 2",
        ),
        (lambda d: d.assign(read=d["read"] + 0.5), r"observations mix 0: fractions sum to"),
        (lambda d: d.head(8), r"8 rows are too few to fit 12 coefficients"),
    ],
)
def test_fit_rejects_bad_observations(mutate: object, match: str) -> None:
    df = _observations(60, sigma=0.02, seed=3)
    with pytest.raises(ValidationError, match=match):
        fit_model(mutate(df), engine="cassandra")  # type: ignore[operator]
