"""Static tuner: exhaustive best configuration, tie-breaking, errors."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.model.performance import load_default_model
from planner.model.spaces import get_space
from planner.model.tuner import best_static_config, rank_configs

STCS = "SizeTieredCompactionStrategy"
LCS = "LeveledCompactionStrategy"


def test_prior_prefers_leveled_for_reads_and_size_tiered_for_writes() -> None:
    model, space = load_default_model("cassandra"), get_space("cassandra")
    read_cfg, read_pred = best_static_config(model, {"read": 0.95, "update": 0.05}, space)
    write_cfg, _ = best_static_config(model, {"insert": 0.9, "update": 0.1}, space)
    assert read_cfg["compaction"] == LCS
    assert write_cfg["compaction"] == STCS
    assert read_pred.ops_per_s > 0 and read_pred.std > 0


def test_best_is_the_argmax_of_the_model_over_the_candidates() -> None:
    model, space = load_default_model("cassandra"), get_space("cassandra")
    mix = {"read": 0.4, "update": 0.3, "insert": 0.1, "scan": 0.2}
    cands = space.candidates(keys=["compaction", "memtable_cleanup_threshold", "heap_size"])
    best, pred = best_static_config(model, mix, space, cands)
    brute = [model.predict(mix, c).ops_per_s for c in cands]
    assert pred.ops_per_s == pytest.approx(max(brute))
    assert best in cands


def test_ties_keep_the_configuration_with_fewest_changes() -> None:
    model, space = load_default_model("cassandra"), get_space("cassandra")
    current = {"concurrent_writes": 64, "concurrent_reads": 64}
    best, _ = best_static_config(
        model, {"read": 1.0}, space, space.candidates(base=current), current=current
    )
    # concurrent_* have no reported effect: the tuner must not move them
    assert best["concurrent_writes"] == 64
    assert best["concurrent_reads"] == 64
    # flat Redis prior: nothing beats staying put
    redis = get_space("redis")
    best_r, _ = best_static_config(load_default_model("redis"), {"read": 1.0}, redis)
    assert best_r == redis.defaults()


def test_ranking_is_sorted_best_first() -> None:
    model, space = load_default_model("cassandra"), get_space("cassandra")
    ranked = rank_configs(model, {"read": 0.5, "update": 0.5}, space)
    ops = np.array([r.prediction.ops_per_s for r in ranked])
    assert np.all(np.diff(ops) <= 1e-6 * ops[0])
    assert len(ranked) == len(space.candidates())


def test_engine_mismatch_and_empty_candidates_are_errors() -> None:
    with pytest.raises(ValidationError, match="the model is for cassandra, the space for redis"):
        best_static_config(load_default_model("cassandra"), {"read": 1.0}, get_space("redis"))
    with pytest.raises(ValidationError, match="candidate list is empty"):
        best_static_config(
            load_default_model("cassandra"), {"read": 1.0}, get_space("cassandra"), []
        )
    with pytest.raises(ValidationError, match="compaction: 'Foo' is not one of"):
        best_static_config(
            load_default_model("cassandra"),
            {"read": 1.0},
            get_space("cassandra"),
            [{"compaction": "Foo"}],
        )
