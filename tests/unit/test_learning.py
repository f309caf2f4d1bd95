"""The model learns from production: windows of the store judged against the model."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from planner.errors import ValidationError
from planner.learning import (
    append_judgement,
    judge,
    learn,
    load_track,
    observe,
    recent_error,
    restart_hold,
)
from planner.perfmodel import prior_model
from planner.spaces import get_space
from planner.store import CounterSample, Store

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


def test_learn_adds_a_capacity_window_and_refits(tmp_path: Path) -> None:
    csv = tmp_path / "obs.csv"
    shutil.copy(REPO / "inventories/local/calibration/cassandra-observations.csv", csv)
    before = pd.read_csv(csv)
    model = prior_model("cassandra")
    config = {"compaction": str(before.iloc[0]["compaction"]),
              "concurrent_reads": int(before.iloc[0]["concurrent_reads"]),
              "memtable_cleanup_threshold": float(before.iloc[0]["memtable_cleanup_threshold"])}
    with cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=400.0, read_share=0.9,
                         pending_from=0) as store:
        window = observe(store, "cassandra", "lab", start=1000.0, end=1200.0, step_seconds=STEP)
    judgement = judge(window, model, config, step_id="s1")
    fitted, report = learn(judgement, csv, engine="cassandra")
    after = pd.read_csv(csv)
    assert len(after) == len(before) + 1
    assert after.iloc[-1]["ops_per_s"] == pytest.approx(1200.0, rel=0.01)
    assert report.n_observations == len(before) + 1
    assert fitted.predict(window.mix, config).ops_per_s > 0
    lower = judge(replace(window, saturated_share=0.0), model, config, step_id="s1")
    assert learn(lower, csv, engine="cassandra") is None
    assert len(pd.read_csv(csv)) == len(after)  # a lower bound is not capacity data


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

    from planner import autopilot as ap
    from planner.rollout import record_step, state_path_for

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


def test_the_tick_judges_the_window_after_a_step_learns_and_then_holds(tmp_path: Path) -> None:
    from planner.autopilot_tick import _plan_argv
    from planner.learning import learn_from_production, learnt_paths

    calibration = tmp_path / "calibration"
    calibration.mkdir()
    for name in ("cassandra-model.json", "cassandra-observations.csv"):
        shutil.copy(REPO / "inventories/local/calibration" / name, calibration / name)
    model = str(calibration / "cassandra-model.json")
    plan = adopted_plan_with_an_applied_step(tmp_path, applied_at=990.0)
    # Saturated all along at 3 x 150 ops/s: far below what the lab's model expects.
    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=0).close()

    def tick(now: float) -> Any:
        return learn_from_production(
            state_dir=str(tmp_path), cluster="lab", engine="cassandra",
            store=str(tmp_path / "k.db"), model=model, now=now, step_seconds=STEP,
            settle_seconds=10.0, window_seconds=60.0)

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
    assert "refitted on" in first.note
    # The only evidence says the model is 56 % off: restart steps are held from now on.
    assert first.judgement["error"] == pytest.approx(-0.56, abs=0.01)
    assert first.hold is not None and "recent error is 56%" in first.hold
    again = tick(1080.0)
    assert "window is not over" in again.note  # a window is judged once
    second, third = tick(1140.0), tick(1200.0)
    track = load_track(paths["track"])
    assert len(track) == 3
    # Later windows are judged by the model refitted on production: it predicts less.
    assert second.judgement is not None and third.judgement is not None
    assert second.judgement["predicted_ops_per_s"] < first.judgement["predicted_ops_per_s"]
    assert third.refit is not None and third.refit["observations"] == rows + 3
    assert third.hold == restart_hold(track)
    print([round(j["error"], 3) for j in track], recent_error(track))
    assert third.hold is not None and "no restart step" in third.hold
    argv = _plan_argv(_inputs(tmp_path, model), "f.json", "p.yml", None, {}, tmp_path / "b",
                      {"model": third.model, "hold": third.hold})
    assert argv[argv.index("--model") + 1] == str(paths["model"])
    assert argv[argv.index("--hold-restarts") + 1] == third.hold


def test_before_any_step_the_current_configuration_is_judged_from_the_adoption_on(
    tmp_path: Path,
) -> None:
    """A plan with no step applied (or none at all: no change pays) still has a
    configuration in force, the plan's current one: its windows are judged from the
    plan's adoption, and a re-adopted plan with the same configuration goes on from the
    last judgement without settling again."""
    from datetime import UTC, datetime

    from planner import autopilot as ap
    from planner.learning import CURRENT, learn_from_production, learnt_paths
    from planner.rollout import state_path_for

    plan = adopted_plan_with_an_applied_step(tmp_path, applied_at=990.0)
    state_path_for(plan).unlink()  # s1 not applied: the plan's current configuration runs
    cassandra_store(tmp_path / "k.db", rounds=11, per_node_rate=150.0, read_share=0.9,
                    pending_from=99).close()

    def tick(now: float) -> Any:
        return learn_from_production(
            state_dir=str(tmp_path), cluster="lab", engine="cassandra",
            store=str(tmp_path / "k.db"), model=None, now=now, step_seconds=STEP,
            settle_seconds=10.0, window_seconds=60.0)

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


def _inputs(state_dir: Path, model: str) -> Any:
    from datetime import UTC, datetime

    from planner import autopilot as ap
    from planner.autopilot_tick import TickInputs

    return TickInputs(state_dir=str(state_dir), cluster="lab", engine="cassandra", run="r",
                      started_at=datetime.now(UTC), policy=ap.Policy(), hosts=("c1",),
                      model=model)


def test_the_report_shows_the_model_against_production(tmp_path: Path) -> None:
    from planner.report import build_inputs, render

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
    from planner.learning import ProductionWindow

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
