"""Partial pooling (issue 16 part 3): a real configuration effect survives, noise is shrunk.

SYNTHETIC calibrations shaped like the lab's (bench/pooling.py): 3 knobs, the whole grid of
8 configurations x 2 mixes x 2 sweeps, one run per pair and sweep, run noise 3 % (log).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from planner.calibrate import fit_observations
from planner.errors import ValidationError
from planner.model.performance import (
    POOLED,
    Feature,
    PerformanceModel,
    configuration_effects,
    fit_design,
    fit_model,
    load_model,
    save_model,
)

REPO = Path(__file__).resolve().parents[2]
# The synthetic calibrations are the bench's (one generator for the bench and the tests).
_spec = importlib.util.spec_from_file_location("bench_pooling", REPO / "bench" / "pooling.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
STCS, LCS, RH, WH = bench.STCS, bench.LCS, bench.RH, bench.WH
ORIGINAL, SPECIAL, WH_LABEL = bench.ORIGINAL, bench.SPECIAL, bench.WH_LABEL
GRID = [dict(zip(ORIGINAL, v, strict=True))
        for v in itertools.product((STCS, LCS), (32, 64), (0.333, 0.11))]


def observations(seed: int, *, effect: float, noise: float = 0.03) -> pd.DataFrame:
    """SPECIAL is ``effect`` faster under the write-heavy mix in both sweeps (SYNTHETIC)."""
    frame: pd.DataFrame = bench.observations(seed, effect=effect, noise=noise)
    return frame


def test_a_consistent_effect_survives_with_an_interval_excluding_zero() -> None:
    df = observations(0, effect=0.25)
    model, report = fit_observations(df, engine="cassandra")
    assert model is not None and report["design"] == POOLED
    # the former all-or-nothing rule threw the effect away: no design predicts SPECIAL
    # when it is held out, so the mix alone won
    assert report["selected_by_heldout"] == "mix-only"
    special = next(e for e in report["effects"]
                   if e["config"] == SPECIAL and e["mix"] == WH_LABEL)
    assert special["effect"] == pytest.approx(0.25, abs=0.04)  # seed 0: +26.6 %
    lo, hi = special["interval"]
    assert special["excludes_zero"] and 0.10 < lo < 0.25 < hi < 0.40
    # the model the planner uses carries it: its median ratio is the reported effect
    ratio = model.predict(WH, SPECIAL).ops_per_s / model.predict(WH, ORIGINAL).ops_per_s
    assert ratio - 1 == pytest.approx(special["effect"], rel=1e-9)
    # the other configurations stay near zero under write-heavy
    others = [e for e in report["effects"] if e["config"] != SPECIAL]
    assert max(abs(e["effect"]) for e in others) < 0.08
    assert report["heldout_mape"] < 0.06  # 5.1 %: SPECIAL held out is not predictable


def test_pure_noise_is_shrunk_towards_the_mix_only_model() -> None:
    df = observations(0, effect=0.0)
    model, report = fit_observations(df, engine="cassandra")
    assert model is not None
    assert len(report["effects"]) == 7 * 2 and report["effects_excluding_zero"] == 0
    assert all(e["interval"][0] < 0 < e["interval"][1] for e in report["effects"])
    assert max(abs(e["effect"]) for e in report["effects"]) < 0.03
    mix_only = fit_design(df[["read", "update", "insert", "scan", "ops_per_s"]],
                          engine="cassandra", design="interaction")
    for config, mix in itertools.product(GRID, (RH, WH)):
        got = model.predict(mix, config).ops_per_s
        assert got == pytest.approx(mix_only.predict(mix, ORIGINAL).ops_per_s, rel=0.02)
    # the configurations' spread is estimated at about the runs' noise or below (seed 0: 1 %)
    assert report["tau"]["configurations"] < 0.03


def test_the_covariance_is_the_one_the_intervals_come_from() -> None:
    """Coefficient draws (what the planner samples) give the reported interval back."""
    df = observations(1, effect=0.25)
    model, report = fit_observations(df, engine="cassandra")
    assert model is not None
    special = next(e for e in report["effects"]
                   if e["config"] == SPECIAL and e["mix"] == WH_LABEL)
    draws = model.sample_capacity(model.mix_matrix([WH]), [ORIGINAL, SPECIAL], n=20000,
                                  rng=np.random.default_rng(0))[:, 0, :]
    q = np.quantile(draws[:, 1] / draws[:, 0] - 1, [0.025, 0.975])
    np.testing.assert_allclose(q, special["interval"], atol=0.01)
    assert model.predict(WH, SPECIAL).std > 0


def test_a_pooled_model_saves_and_loads_and_old_model_files_still_load(tmp_path: Path) -> None:
    model = fit_design(observations(2, effect=0.25), engine="cassandra", design=POOLED)
    config_features = [f for f in model.features if f.kind == "config"]
    assert len(config_features) == len(GRID)
    save_model(model, tmp_path / "m.json")
    again = load_model(tmp_path / "m.json")
    assert again.features == model.features
    for config in (SPECIAL, ORIGINAL, {"compaction": LCS, "concurrent_reads": 48}):
        assert again.predict(WH, config) == model.predict(WH, config)
    for path in (REPO / "inventories/local/calibration/cassandra-model.json",
                 REPO / "planner/data/cassandra-prior.json",
                 REPO / "planner/data/redis-prior.json"):
        assert load_model(path).coef.size > 0


def test_a_config_feature_needs_its_match_and_only_it_has_one() -> None:
    with pytest.raises(ValidationError, match="match: required for kind config"):
        Feature.from_dict({"param": "concurrent_reads", "kind": "config"})
    with pytest.raises(ValidationError, match="match: required for kind config"):
        Feature.from_dict({"param": "concurrent_reads", "kind": "linear",
                           "match": {"concurrent_reads": 32}})
    feat = Feature.from_dict({"param": "concurrent_reads", "kind": "config",
                              "match": {"concurrent_reads": 64, "compaction": STCS}})
    model = PerformanceModel(engine="cassandra", name="t", version=1, model_type="fitted",
                             features=(feat,), coef=np.zeros((4, 2)), cov=np.zeros((8, 8)),
                             sigma=0.1)
    x = model.config_matrix([{"concurrent_reads": 64}, {"concurrent_reads": 32}])
    assert x[:, 1].tolist() == [1.0, 0.0]  # STCS is the default compaction
    assert json.loads(json.dumps(feat.to_dict()))["match"] == {"concurrent_reads": 64,
                                                               "compaction": STCS}


def test_fit_model_takes_the_pooled_design_and_effects_need_no_calibration() -> None:
    df = observations(3, effect=0.25)
    model, report = fit_model(df, engine="cassandra", design=POOLED)
    assert report.design == POOLED and report.heldout_mape < 0.06
    effects = configuration_effects(model, {"wh": WH}, [SPECIAL], ORIGINAL)
    assert len(effects) == 1 and effects[0]["excludes_zero"]
    assert effects[0]["effect"] == pytest.approx(0.25, abs=0.06)


def _two_by_two(seed: int) -> pd.DataFrame:
    """SYNTHETIC, shaped like inventories/local/calibration/redis-hz-*: a threshold that more
    than doubles hash reads (+35 % hash writes), hz that does nothing, 2 runs a pair, 3 %
    noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for hz, entries, (read, write), _ in itertools.product(
            (10, 50), (512, 1024), ((0.9, 0.1), (0.2, 0.8)), range(2)):
        log_ops = read * np.log(1200) + write * np.log(2000)
        if entries == 1024:
            log_ops += read * np.log(2.6) + write * np.log(1.35)
        rows.append({"read": read, "write": write, "other": 0.0, "hz": hz,
                     "hash-max-listpack-entries": entries,
                     "ops_per_s": float(np.exp(log_ops + rng.normal(0, 0.03)))})
    return pd.DataFrame(rows)


def test_a_configuration_left_out_gets_the_whole_effect_its_parameters_say() -> None:
    """The own effects say only what the parameters cannot: where both could say the same
    (3 configurations, no interaction to fit), the parameters carry all of it, so the
    configuration never measured is predicted with the whole effect, not with the share the
    two shrunk groups would split it into (that split predicted it 20 % low)."""
    for seed in range(5):
        df = _two_by_two(seed)
        held = (df["hz"] == 50) & (df["hash-max-listpack-entries"] == 1024)
        model = fit_design(df[~held], engine="redis", design=POOLED)
        for read, write, truth in ((0.9, 0.1, 1200**0.9 * 2000**0.1 * 2.6**0.9 * 1.35**0.1),
                                   (0.2, 0.8, 1200**0.2 * 2000**0.8 * 2.6**0.2 * 1.35**0.8)):
            predicted = model.predict({"read": read, "write": write, "other": 0.0},
                                      {"hz": 50, "hash-max-listpack-entries": 1024}).ops_per_s
            assert predicted / truth - 1 == pytest.approx(0, abs=0.08), (seed, read)
    # measured, its own effect still carries what the parameters do not say
    df = _two_by_two(0)
    odd = (df["hz"] == 10) & (df["hash-max-listpack-entries"] == 512)
    df.loc[odd, "ops_per_s"] *= 0.7
    model = fit_design(df, engine="redis", design=POOLED)
    mean = float(np.exp(np.log(df.loc[odd & (df["read"] == 0.9), "ops_per_s"]).mean()))
    got = model.predict({"read": 0.9, "write": 0.1, "other": 0.0},
                        {"hz": 10, "hash-max-listpack-entries": 512}).ops_per_s
    assert got / mean - 1 == pytest.approx(0, abs=0.08)
