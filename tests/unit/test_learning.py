"""The model learns from production: windows of the store judged against the model."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from planner.autopilot.learning import (
    TAU_CLASS,
    TAU_COMMON,
    ProductionWindow,
    append_judgement,
    judge,
    learn,
    load_track,
    observe,
    offset_posterior,
    recent_error,
    record_window,
    restart_hold,
)
from planner.errors import ValidationError
from planner.model.performance import prior_model
from planner.model.spaces import get_space
from planner.workload.store import CounterSample, Store

REPO = Path(__file__).resolve().parents[2]
STEP = 20.0
NODES = ("c1", "c2", "c3")


def cassandra_store(path: Path, *, rounds: int, per_node_rate: float, read_share: float,
                    pending_from: int) -> Store:
    """Three nodes' counters growing at ``per_node_rate`` ops/s; queues from a round on."""
    store = Store(path)
    for r in range(rounds):
        ts = 1000.0 + r * STEP
        samples = []
        for n in NODES:
            total = int(per_node_rate * STEP * r)
            reads = int(total * read_share)
            samples.append(CounterSample(
                node=n, scope="node", ts=ts, counters={"read": reads, "write": total - reads,
                "scan": 0}, started_at=0.0, instance=f"{n}:1",
                gauges={"p99_ms_read": 2.0 + r, "pending_tasks": 4.0 if r >= pending_from else 0.0,
                        "blocked_tasks": 0.0}))
        store.append_counters("cassandra", "lab", samples, round_ts=ts)
    return store


def test_observe_measures_the_served_load_the_mix_and_saturation(tmp_path: Path) -> None:
    with cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=100.0, read_share=0.8,
                         pending_from=6) as store:
        calm = observe(store, "cassandra", "lab", start=1000.0, end=1100.0, step_seconds=STEP)
        busy = observe(store, "cassandra", "lab", start=1120.0, end=1200.0, step_seconds=STEP)
    assert calm.served_ops_per_s == pytest.approx(300.0, rel=0.01)
    assert calm.mix["read"] == pytest.approx(0.8, abs=0.01)
    assert calm.mix["update"] == pytest.approx(0.2, abs=0.01)
    assert not calm.saturated and calm.saturated_share == 0.0
    assert busy.saturated and busy.saturated_share == 1.0
    assert busy.p99_ms == {"read": pytest.approx(10.0)}  # median of its rounds' 8..12 ms
    with cassandra_store(tmp_path / "s.db", rounds=3, per_node_rate=1.0, read_share=0.5,
                         pending_from=9) as store, \
            pytest.raises(ValidationError, match="collect longer"):
        observe(store, "cassandra", "lab", start=1000.0, end=1030.0, step_seconds=STEP)


def test_judge_a_capacity_and_a_lower_bound(tmp_path: Path) -> None:
    model = prior_model("cassandra")
    config = get_space("cassandra").defaults()
    with cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=100.0, read_share=0.8,
                         pending_from=6) as store:
        calm = observe(store, "cassandra", "lab", start=1000.0, end=1100.0, step_seconds=STEP)
        busy = observe(store, "cassandra", "lab", start=1120.0, end=1200.0, step_seconds=STEP)
    predicted = model.predict(busy.mix, config).ops_per_s
    saturated = judge(busy, model, config, step_id="s1")
    assert saturated.kind == "capacity"
    assert saturated.error == pytest.approx(300.0 / predicted - 1, rel=0.02)
    assert saturated.error < -0.5  # the prior expects far more than 300 ops/s
    below = judge(calm, model, config, step_id="s1")
    assert below.kind == "lower bound" and below.error == 0.0  # served < predicted: no error
    assert below.utilisation == pytest.approx(300.0 / model.predict(calm.mix, config).ops_per_s,
                                              rel=0.02)


def test_a_capacity_window_is_recorded_in_the_observations(tmp_path: Path) -> None:
    csv = tmp_path / "obs.csv"
    shutil.copy(REPO / "inventories/local/calibration/cassandra-observations.csv", csv)
    before = pd.read_csv(csv)
    model = prior_model("cassandra")
    if "p99_ms" not in before.columns:  # latency columns are optional: the window has none
        before = before.assign(p50_ms=5.0, p99_ms=20.0)
        before.to_csv(csv, index=False)
    params = [c for c in before.columns
              if c not in ("read", "update", "insert", "scan", "ops_per_s", "p50_ms", "p99_ms")]
    config = {k: v.item() if hasattr(v, "item") else v for k, v in before.iloc[0][params].items()}
    with cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=400.0, read_share=0.9,
                         pending_from=0) as store:
        window = observe(store, "cassandra", "lab", start=1000.0, end=1200.0, step_seconds=STEP)
    judgement = judge(window, model, config, step_id="s1")
    assert record_window(judgement, csv, engine="cassandra") == len(before) + 1
    after = pd.read_csv(csv)
    assert list(after.columns) == list(before.columns)
    assert after.iloc[-1]["ops_per_s"] == pytest.approx(1200.0, rel=0.01)
    assert after.iloc[-1]["read"] == pytest.approx(0.9, abs=0.01)
    assert after["p99_ms"].isna().tolist() == [False] * len(before) + [True]
    lower = judge(replace(window, saturated_share=0.0), model, config, step_id="s1")
    assert record_window(lower, csv, engine="cassandra") is None
    assert len(pd.read_csv(csv)) == len(after)  # a lower bound is not capacity data
    with pytest.raises(ValidationError, match="no value for compaction"):
        record_window(replace(judgement, config={"concurrent_reads": 64}), csv,
                      engine="cassandra")
    fresh = tmp_path / "new.csv"  # no calibration: the window's own columns
    assert record_window(judgement, fresh, engine="cassandra") == 1
    assert list(pd.read_csv(fresh).columns) == ["read", "update", "insert", "scan",
                                                *config, "ops_per_s"]


def test_the_offset_posterior_in_closed_form() -> None:
    """Hand-computed: prior S = 0.25 everywhere + 0.04 on the diagonal (tau 0.5 common,
    0.2 per class), sigma 0.1. One pure-read window with residual log 2: m'Sm = 0.29,
    so the read offset is 0.29 / 0.30 of the residual, the others (correlated through the
    common part) 0.25 / 0.30; variances 0.29 - 0.29^2 / 0.30 = 0.29 / 30 and 0.29 -
    0.25^2 / 0.30. Two such windows (residuals log 2 +- 0.1): 0.58 / 0.59 of their mean,
    variance 0.29 x 0.01 / 0.59."""
    assert (TAU_COMMON, TAU_CLASS) == (0.5, 0.2)
    read = np.array([[1.0, 0.0, 0.0, 0.0]])
    mean, cov = offset_posterior(read, np.array([math.log(2)]), 0.1)
    assert mean == pytest.approx([0.29 / 0.30 * math.log(2)] + [0.25 / 0.30 * math.log(2)] * 3)
    assert mean[0] == pytest.approx(0.6700, abs=1e-4)  # x1.95 of the x2 measured
    assert np.diag(cov) == pytest.approx([0.29 / 30] + [0.29 - 0.0625 / 0.30] * 3)
    assert cov[0, 1] == pytest.approx(0.25 - 0.29 * 0.25 / 0.30)  # 0.0083
    assert cov[1, 2] == pytest.approx(0.25 - 0.0625 / 0.30)  # 0.0417
    two, cov2 = offset_posterior(np.vstack([read, read]),
                                 np.array([math.log(2) + 0.1, math.log(2) - 0.1]), 0.1)
    assert two[0] == pytest.approx(0.58 / 0.59 * math.log(2))
    assert cov2[0, 0] == pytest.approx(0.29 * 0.01 / 0.59)  # se 0.098 -> 0.070
    # A noise-free base model: the window's noise is floored at 2 %, the update finite.
    exact, _ = offset_posterior(np.vstack([read, read]), np.array([0.5, 0.6]), 0.0)
    assert exact[0] == pytest.approx(0.58 / (0.58 + 0.0004) * 0.55)


def test_learning_keeps_the_base_models_configuration_effects(tmp_path: Path) -> None:
    """The learnt model is the base plus an offset of the level: the ratio between two
    configurations' predictions (here leveled vs size-tiered compaction, the prior's
    +90 % on reads) is the base's under every mix; only the intercepts and their
    covariance change."""
    base = prior_model("cassandra")
    stcs = get_space("cassandra").defaults()
    lcs = {**stcs, "compaction": "LeveledCompactionStrategy"}
    mix = {"read": 0.9, "update": 0.1}
    served = base.predict(mix, stcs).ops_per_s * 1.5  # production: x1.5 the base's level
    window = ProductionWindow("cassandra", 0.0, 60.0, served, mix, 3, 1.0, {})
    judgement = judge(window, base, stcs, step_id="s1")
    lower = judge(replace(window, saturated_share=0.0), base, stcs, step_id="s0")
    assert learn(base, [lower]) is None  # a lower bound measured no capacity
    learnt = learn(base, [lower, judgement], base_source="the prior")
    assert learnt is not None
    model, offset = learnt
    assert offset.windows == 1
    # 97 % of the log residual (sigma 0.1): the learnt model predicts x1.48 of the base.
    factor = model.predict(mix, stcs).ops_per_s / base.predict(mix, stcs).ops_per_s
    assert math.log(factor) == pytest.approx(0.2828 / 0.2928 * math.log(1.5), abs=1e-3)
    assert factor == pytest.approx(1.480, abs=0.001)
    for m in (mix, {"update": 0.9, "read": 0.1}, {"scan": 1.0}):
        assert model.predict(m, lcs).ops_per_s / model.predict(m, stcs).ops_per_s == \
            pytest.approx(base.predict(m, lcs).ops_per_s / base.predict(m, stcs).ops_per_s)
    assert np.array_equal(model.coef[:, 1:], base.coef[:, 1:])
    assert model.coef[:, 0] - base.coef[:, 0] == pytest.approx(offset.mean)
    n_j = base.coef.shape[1]
    added = (model.cov - base.cov)[::n_j, ::n_j]
    assert added == pytest.approx(offset.cov)
    assert model.cov - base.cov == pytest.approx(
        np.kron(offset.cov, np.eye(n_j)[:1].T @ np.eye(n_j)[:1]))  # the intercepts only
    assert model.predict(mix, stcs).std > 0 and model.model_type == "prior"
    assert model.provenance.startswith("the base model cassandra-prior (the prior) plus a "
                                       "production offset learnt from 1 capacity window: read ")
    assert model.info["production_offset"]["windows"] == 1
    assert model.info["production_offset"]["offset"]["read"] == pytest.approx(
        math.expm1(offset.mean[0]))
    assert "label" in model.info  # the prior's warning is kept


def test_each_window_is_judged_against_the_base_not_the_learnt_model() -> None:
    """The same window twice: the offset is learnt from two residuals against the base
    (0.5656 / 0.5756 of the level), not from a residual against a model that already
    learnt it (which would be near zero and pull the offset back)."""
    base = prior_model("cassandra")
    config = get_space("cassandra").defaults()
    mix = {"read": 0.9, "update": 0.1}
    served = base.predict(mix, config).ops_per_s * 2.0
    window = ProductionWindow("cassandra", 0.0, 60.0, served, mix, 3, 1.0, {})
    once = learn(base, [judge(window, base, config, step_id="s1")])
    assert once is not None
    learnt, _ = once
    again = judge(window, learnt, config, step_id="s1")  # judged by the learnt model
    assert again.error == pytest.approx(2.0 ** (1 - 0.2828 / 0.2928) - 1, abs=1e-3)  # +2.4%
    twice = learn(base, [judge(window, base, config, step_id="s1"), again])
    assert twice is not None
    assert twice[1].at(np.array([0.9, 0.1, 0.0, 0.0]))[0] == pytest.approx(
        0.5656 / 0.5756 * math.log(2.0), abs=1e-3)


def test_the_recent_error_holds_restart_steps_until_it_falls_back(tmp_path: Path) -> None:
    track = tmp_path / "track.jsonl"
    assert load_track(track) == [] and restart_hold([]) is None
    model = prior_model("cassandra")
    config = get_space("cassandra").defaults()
    with cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=100.0, read_share=0.8,
                         pending_from=0) as store:
        window = observe(store, "cassandra", "lab", start=1000.0, end=1200.0, step_seconds=STEP)
    for _ in range(3):
        append_judgement(track, judge(window, model, config, step_id="s1"))
    kept = load_track(track)
    assert len(kept) == 3 and recent_error(kept) > 0.5
    reason = restart_hold(kept)
    assert reason is not None and "above 25%" in reason and "no restart step" in reason
    # Quiet windows the model agrees with (lower bounds, error 0) measured no error: they
    # neither lift the hold nor dilute it; one that served more than predicted counts.
    quiet = {**kept[-1], "kind": "lower bound", "error": 0.0}
    assert recent_error([*kept, quiet, quiet, quiet]) == recent_error(kept)
    assert restart_hold([*kept, quiet, quiet, quiet]) is not None
    beyond = {**quiet, "error": 0.3}
    assert recent_error([kept[0], beyond]) == pytest.approx((abs(kept[0]["error"]) + 0.3) / 2)
    # Three windows the model got right: the hold is lifted.
    right = {**kept[-1], "error": 0.05}
    assert restart_hold([*kept, right, right, right]) is None
    track.write_text(track.read_text() + "not json\n")
    with pytest.raises(ValidationError, match="line 4: not JSON"):
        load_track(track)


# ------------------------------------------------------ the autopilot's loop
def adopted_plan_with_an_applied_step(state_dir: Path, *, applied_at: float) -> Path:
    """A Cassandra plan whose live step s1 (concurrent_reads 64) is recorded applied."""
    from datetime import UTC, datetime, timedelta

    import yaml

    from planner.autopilot import decisions as ap
    from planner.executor.rollout import record_step, state_path_for

    at = datetime.fromtimestamp(applied_at, UTC)
    plan = state_dir / "plan.yml"
    plan.write_text(yaml.safe_dump({
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "cassandra",
        "created_at": (at - timedelta(minutes=5)).isoformat(),
        "horizon": {"start": (at - timedelta(minutes=5)).isoformat(), "step_seconds": 60,
                    "steps": 60},
        "provenance": {"source": "tests/unit/test_learning.py"},
        "availability": {"consistency_level": "QUORUM", "tolerated_failures": 0,
                         "aggressive": False},
        "current_config": {"compaction": "SizeTieredCompactionStrategy", "concurrent_reads": 32,
                           "memtable_cleanup_threshold": 0.33333334},
        "steps": [{"id": "s1", "due": (at - timedelta(minutes=1)).isoformat(),
                   "until": (at + timedelta(minutes=55)).isoformat(),
                   "target": {"concurrent_reads": 64}, "per_node": {},
                   "live": ["concurrent_reads"], "restart": [], "batches": [],
                   "expected": {"benefit_ops": 1.0, "cost_ops": 0.0, "net_ops": 1.0}}],
    }, sort_keys=False))
    record_step(state_path_for(plan), step_id="s1", status="applied", now=at)
    ap.adopt_plan(ap.state_path(state_dir, "lab", "cassandra"), plan=str(plan), forecast=None,
                  now=at, reasons=["test"])
    return plan


def ticker(state_dir: Path, model: str | None) -> Any:
    """One autopilot tick's learning stage at a given time: windows of 60 s, 10 s settle,
    the store ``k.db`` in ``state_dir``."""
    from planner.autopilot.learning import learn_from_production

    def tick(now: float) -> Any:
        return learn_from_production(
            state_dir=str(state_dir), cluster="lab", engine="cassandra",
            store=str(state_dir / "k.db"), model=model, now=now, step_seconds=STEP,
            settle_seconds=10.0, window_seconds=60.0)

    return tick


def test_the_tick_judges_the_window_after_a_step_learns_the_offset_and_holds(
    tmp_path: Path,
) -> None:
    """The lab's model expects 1,024 ops/s where production serves 450 (-56 %): the first
    window moves the level 97 % of the way (sigma 0.1 against the prior's 0.5), so the
    next windows are judged -2.8 % and -1.4 % off, and the restart hold set by the first
    lifts once the mean of the last three errors (20 %) is below 25 %."""
    from planner.autopilot.learning import learnt_paths
    from planner.autopilot.tick import plan_request
    from planner.model.performance import load_model

    calibration = tmp_path / "calibration"
    calibration.mkdir()
    for name in ("cassandra-model.json", "cassandra-observations.csv"):
        shutil.copy(REPO / "inventories/local/calibration" / name, calibration / name)
    model = str(calibration / "cassandra-model.json")
    plan = adopted_plan_with_an_applied_step(tmp_path, applied_at=990.0)
    # Saturated all along at 3 x 150 ops/s: far below what the lab's model expects.
    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=0).close()

    tick = ticker(tmp_path, model)

    early = tick(1040.0)
    assert "window is not over (40 of 60 s)" in early.note and early.judgement is None
    first = tick(1080.0)
    assert first.judgement is not None and first.judgement["kind"] == "capacity"
    assert first.judgement["plan"] == str(plan) and first.judgement["step_id"] == "s1"
    assert first.judgement["config"]["concurrent_reads"] == 64  # the step's, in force
    assert first.judgement["served_ops_per_s"] == pytest.approx(450.0, rel=0.01)
    paths = learnt_paths(tmp_path, "lab", "cassandra")
    rows = len(pd.read_csv(calibration / "cassandra-observations.csv"))
    assert first.refit is not None and first.refit["observations"] == rows + 1
    assert first.model == str(paths["model"]) and paths["model"].exists()
    assert first.refit["windows"] == 1 and first.refit["base"] == model
    assert first.refit["offset"] == pytest.approx(-0.548, abs=0.001)
    assert first.refit["offset_se"] == pytest.approx(0.098, abs=0.001)
    assert first.refit["predicted_ops_per_s"] == pytest.approx(462.8, abs=0.1)
    assert first.note == (
        "step s1: served 450 ops/s (capacity; the model predicts 1024, error -56%); "
        "production offset -55% from 1 window (se 10%); the model now predicts 463 ops/s "
        "for this window's mix")
    learnt = load_model(paths["model"])
    assert learnt.info["production_offset"]["windows"] == 1
    assert "plus a production offset learnt from 1 capacity window" in learnt.provenance
    # The only evidence says the model is 56 % off: restart steps are held from now on.
    assert first.judgement["error"] == pytest.approx(-0.56, abs=0.01)
    assert first.hold is not None and "recent error is 56%" in first.hold
    request = plan_request(_inputs(tmp_path, model), forecast="f.json", forecast_path="f.json",
                           ring=None, first={}, base=tmp_path / "b",
                           learning={"model": first.model, "hold": first.hold})
    assert request.model == str(paths["model"])
    assert request.hold_restarts == first.hold
    again = tick(1080.0)
    assert "window is not over" in again.note  # a window is judged once
    second, third = tick(1140.0), tick(1200.0)
    track = load_track(paths["track"])
    assert len(track) == 3
    # Later windows are judged by the learnt model: it predicts what production serves.
    assert [j["error"] for j in track] == pytest.approx([-0.560, -0.028, -0.014], abs=0.001)
    assert [j["predicted_ops_per_s"] for j in track] == pytest.approx(
        [1023.6, 462.8, 456.5], abs=0.1)
    assert second.hold is not None and "recent error is 29%" in second.hold
    assert third.refit is not None and third.refit["observations"] == rows + 3
    assert third.refit["windows"] == 3 and third.refit["offset_se"] == pytest.approx(
        0.057, abs=0.001)
    assert "production offset -56% from 3 windows (se 6%)" in third.note
    assert recent_error(track) == pytest.approx(0.201, abs=0.001)
    assert third.hold is None and restart_hold(track) is None  # 20 %: lifted
    request = plan_request(_inputs(tmp_path, model), forecast="f.json", forecast_path="f.json",
                           ring=None, first={}, base=tmp_path / "b",
                           learning={"model": third.model, "hold": third.hold})
    assert request.model == str(paths["model"])
    assert request.hold_restarts is None


def test_the_tick_learns_from_the_prior_when_no_model_is_configured(tmp_path: Path) -> None:
    """The shipped prior has no observations, yet production's level is learnt. Its
    assumed base is far off (6,175 ops/s predicted, 450 served: a log residual of -2.6,
    five times tau), so after one window it predicts 492 (the next window is judged
    -8.6 % off) and after two 471 (+4.7 % over what is served); its configuration effects
    are kept."""
    from planner.autopilot.learning import learnt_paths
    from planner.model.performance import load_model

    adopted_plan_with_an_applied_step(tmp_path, applied_at=990.0)
    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=0).close()

    tick = ticker(tmp_path, None)

    first = tick(1080.0)
    assert first.judgement is not None and first.refit is not None
    assert first.judgement["predicted_ops_per_s"] == pytest.approx(6175, abs=1)
    assert first.judgement["error"] == pytest.approx(-0.927, abs=0.001)
    assert first.refit["base"] == "the shipped prior cassandra-prior"
    assert first.refit["offset"] == pytest.approx(-0.920, abs=0.001)
    assert first.refit["predicted_ops_per_s"] == pytest.approx(492.1, abs=0.1)
    assert first.note.endswith("; production offset -92% from 1 window (se 10%); the model "
                               "now predicts 492 ops/s for this window's mix")
    paths = learnt_paths(tmp_path, "lab", "cassandra")
    learnt, prior = load_model(paths["model"]), prior_model("cassandra")
    assert first.model == str(paths["model"]) and learnt.model_type == "prior"
    config = first.judgement["config"]
    lcs = {**config, "compaction": "LeveledCompactionStrategy"}
    mix = first.judgement["mix"]
    assert learnt.predict(mix, lcs).ops_per_s / learnt.predict(mix, config).ops_per_s == \
        pytest.approx(prior.predict(mix, lcs).ops_per_s / prior.predict(mix, config).ops_per_s)
    recorded = pd.read_csv(paths["observations"])  # the record starts with this window
    assert len(recorded) == 1 and first.refit["observations"] == 1
    assert recorded["ops_per_s"].iloc[0] == pytest.approx(450.0, rel=0.01)
    second = tick(1140.0)
    assert second.judgement is not None and second.refit is not None
    assert second.judgement["error"] == pytest.approx(-0.086, abs=0.001)
    assert second.refit["predicted_ops_per_s"] == pytest.approx(470.9, abs=0.1)


def test_before_any_step_the_current_configuration_is_judged_from_the_adoption_on(
    tmp_path: Path,
) -> None:
    """A plan with no step applied (or none at all: no change pays) still has a
    configuration in force, the plan's current one: its windows are judged from the
    plan's adoption, and a re-adopted plan with the same configuration goes on from the
    last judgement without settling again."""
    from datetime import UTC, datetime

    from planner.autopilot import decisions as ap
    from planner.autopilot.learning import CURRENT, learnt_paths
    from planner.executor.rollout import state_path_for

    plan = adopted_plan_with_an_applied_step(tmp_path, applied_at=990.0)
    state_path_for(plan).unlink()  # s1 not applied: the plan's current configuration runs
    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=99).close()

    tick = ticker(tmp_path, None)

    assert "the current configuration's window is not over (40 of 60 s)" in tick(1040.0).note
    first = tick(1080.0)
    assert first.judgement is not None and first.judgement["step_id"] == CURRENT
    assert first.judgement["config"]["concurrent_reads"] == 32  # not s1's 64
    assert first.judgement["kind"] == "lower bound" and first.refit is None
    assert (first.judgement["start"], first.judgement["end"]) == (1000.0, 1080.0)
    assert first.note.startswith("the current configuration: served 450 ops/s (lower bound")
    # The same plan adopted again later (a re-plan that changed nothing): the window goes
    # on from the last judgement's end, not from the new adoption plus settling.
    ap.adopt_plan(ap.state_path(tmp_path, "lab", "cassandra"), plan=str(plan), forecast=None,
                  now=datetime.fromtimestamp(1100.0, UTC), reasons=["test"])
    second = tick(1200.0)
    assert second.judgement is not None and second.judgement["start"] == 1080.0
    assert len(load_track(learnt_paths(tmp_path, "lab", "cassandra")["track"])) == 2


def test_before_any_plan_the_declared_current_configuration_is_judged_once_per_window(
    tmp_path: Path,
) -> None:
    """No plan in force yet: the last window is judged against the configuration the
    operator declares (the tick's current file), so that the first plan already knows what
    production serves and its first step has a window before it. Without the file nothing
    is judged; a window is judged once; a bad file is refused naming it."""
    from planner.autopilot.learning import CURRENT, learn_from_production, learnt_paths

    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=0).close()
    current = tmp_path / "current.yml"
    current.write_text("concurrent_reads: 64\n")

    def tick(now: float, declared: str | None) -> Any:
        return learn_from_production(
            state_dir=str(tmp_path), cluster="lab", engine="cassandra",
            store=str(tmp_path / "k.db"), model=None, now=now, step_seconds=STEP,
            settle_seconds=10.0, window_seconds=60.0, current=declared)

    assert "no current configuration declared" in tick(1100.0, None).note
    first = tick(1100.0, str(current))
    assert first.judgement is not None and first.judgement["step_id"] == CURRENT
    assert first.judgement["plan"] == ""
    assert (first.judgement["start"], first.judgement["end"]) == (1040.0, 1100.0)
    assert first.judgement["config"]["concurrent_reads"] == 64  # the declared value
    assert first.judgement["config"]["compaction"] == "SizeTieredCompactionStrategy"  # default
    assert first.judgement["kind"] == "capacity"  # pending tasks: saturated
    assert first.judgement["served_ops_per_s"] == pytest.approx(450.0, rel=0.01)
    assert first.note.startswith("the declared current configuration (no plan in force yet): "
                                 "served 450 ops/s (capacity")
    assert first.refit is not None  # learnt from it, before any plan
    assert "window is not over (30 of 60 s)" in tick(1130.0, str(current)).note
    track = load_track(learnt_paths(tmp_path, "lab", "cassandra")["track"])
    assert len(track) == 1
    current.write_text("concurrent_reads: many\n")
    with pytest.raises(ValidationError, match=f"{current}: concurrent_reads: 'many' is not"):
        tick(1200.0, str(current))  # the tick keeps the refusal as its learning note (_learn)


def test_an_unreadable_learning_file_is_a_note_and_never_fails_the_tick(tmp_path: Path) -> None:
    from dataclasses import replace as with_fields
    from datetime import UTC, datetime

    from planner.autopilot.learning import learnt_paths
    from planner.autopilot.tick import _learn

    adopted_plan_with_an_applied_step(tmp_path, applied_at=990.0)
    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=0).close()
    learnt_paths(tmp_path, "lab", "cassandra")["track"].mkdir(parents=True)  # unreadable
    inputs = with_fields(_inputs(tmp_path, ""), store=str(tmp_path / "k.db"),
                         learn_settle_seconds=10.0, learn_window_seconds=60.0)
    learnt = _learn(inputs, datetime.fromtimestamp(1200.0, UTC))
    assert learnt["note"].startswith("not learnt: IsADirectoryError: "), learnt


def _inputs(state_dir: Path, model: str) -> Any:
    from datetime import UTC, datetime

    from planner.autopilot import decisions as ap
    from planner.autopilot.tick import TickInputs

    return TickInputs(state_dir=str(state_dir), cluster="lab", engine="cassandra", run="r",
                      started_at=datetime.now(UTC), policy=ap.Policy(), hosts=("c1",),
                      model=model)


def test_the_report_shows_the_model_against_production(tmp_path: Path) -> None:
    from planner.report.page import build_inputs, render

    track = tmp_path / "track.jsonl"
    model = prior_model("cassandra")
    config = get_space("cassandra").defaults()
    with cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=100.0, read_share=0.8,
                         pending_from=0) as store:
        window = observe(store, "cassandra", "lab", start=1000.0, end=1200.0, step_seconds=STEP)
    judgement = judge(window, model, config, step_id="s1")
    append_judgement(track, judgement)
    page = render(build_inputs(model_track=track))
    section = page.split('data-table="model-track"', 1)[1].split("</table>", 1)[0]
    assert "<td>capacity</td>" in section
    assert f"{judgement.error:+.1%}" in section and "(hold)" in section
    assert "no model track given" in render(build_inputs())


def test_a_cassandra_window_is_saturated_by_its_mean_requests_in_flight() -> None:
    # bench/saturation.sh's two runs on the lab: an instant's count is high in only some
    # rounds of a saturated window, low in every round of a rate-limited one.
    def window(flights: list[int]) -> ProductionWindow:
        share = sum(f >= 16 for f in flights) / len(flights)
        return ProductionWindow("cassandra", 0.0, 35.0, 1400.0, {"read": 0.9}, len(flights),
                                share, {}, sum(flights) / len(flights))

    assert window([69, 2, 1, 1, 1, 102, 95]).saturated  # 3 of 7 rounds, mean 39
    assert window([54, 30, 2, 60, 41, 1, 1]).saturated  # 4 of 7, mean 27
    assert not window([1, 1, 2, 1, 2, 1, 1]).saturated  # 200 ops/s, rate-limited
    assert not window([40, 1, 1, 1]).saturated  # one burst: mean 10.75, 1 of 4


def test_a_cassandra_node_held_at_its_cpu_limit_is_saturated(tmp_path: Path) -> None:
    """The demo's scan-heavy window on the enveloped lab (2026-11-27): Cassandra's queues
    showed 1 request in flight while each node used 0.36-0.38 of its 0.4 CPU. The rounds that
    read the nodes' envelopes decide; the others cannot say (one such round in a window
    suffices)."""
    store = Store(tmp_path / "k.db")
    for r in range(8):
        ts = 1000.0 + r * STEP
        resources = r in (3, 4)  # the collect playbook's rounds
        samples = []
        for n in NODES:
            gauges = {"active_requests": 1.0, "pending_tasks": 0.0, "blocked_tasks": 0.0}
            if resources:  # 0.37 cores between the two rounds; 0.12 in the calm store below
                gauges |= {"cpu_seconds": 100.0 + 0.37 * STEP * r, "cpu_limit_cores": 0.4}
            samples.append(CounterSample(node=n, scope="node", ts=ts,
                                         counters={"read": 0, "write": 0, "scan": 150 * r},
                                         started_at=0.0, instance=f"{n}:1", gauges=gauges))
        store.append_counters("cassandra", "lab", samples, round_ts=ts)
    with store:
        rounds = store.gauge_rounds("cassandra", "lab")
        window = observe(store, "cassandra", "lab", start=1000.0, end=1000.0 + 7 * STEP,
                         step_seconds=STEP)
    assert [round(g.values.get("cpu_limit_share", 0.0), 3) for g in rounds] == [
        0, 0, 0, 0, 0.925, 0, 0, 0]
    assert window.saturated_share == 0.0 and window.in_flight == 1.0
    assert window.cpu_limit_share == pytest.approx(0.925) and window.saturated
    calm = ProductionWindow("cassandra", 0.0, 35.0, 150.0, {"scan": 1.0}, 8, 0.0, {}, 1.0, 0.3)
    assert not calm.saturated
    assert not ProductionWindow("cassandra", 0.0, 35.0, 150.0, {"scan": 1.0}, 8, 0.0, {},
                                1.0).saturated  # no envelope read: unknown, not saturated
