"""The payoff experiment's pure logic (planner/lab/payoff.py) and its lab driver on fakes
(bench/payoff.py: order, executor calls, failures, every load stopped)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from planner.errors import KairosError, ValidationError
from planner.lab import payoff as po
from planner.loadgen import Pacer
from planner.model.performance import Feature, PerformanceModel, save_model

REPO = Path(__file__).resolve().parents[2]
READ = {"read": 0.9, "update": 0.1, "insert": 0.0, "scan": 0.0}
WRITE = {"read": 0.1, "update": 0.3, "insert": 0.6, "scan": 0.0}


def model(param: str = "concurrent_reads", *, gamma: tuple[float, ...] = (0.3, 0.3, 0.3, 0.3),
          ref: float = 32.0, scale: float = 32.0, info: Mapping[str, Any] | None = None,
          ) -> PerformanceModel:
    """1000 ops/s for every class at the reference; a linear effect of ``param`` per class
    (read, update, insert, scan): ``exp(gamma)`` at ``ref + scale``."""
    coef = np.array([[math.log(1000.0), g] for g in gamma])
    return PerformanceModel(
        engine="cassandra", name="payoff-test", version=1, model_type="fitted",
        features=(Feature(param=param, kind="linear", ref=ref, scale=scale),),
        coef=coef, cov=np.eye(8) * 1e-6, sigma=0.02, info=dict(info or {}))


def schedule(*mixes: Mapping[str, float], every: float = 60.0) -> po.Schedule:
    return po.Schedule(shape="test", seconds=every * len(mixes), step_seconds=5.0,
                       segments=tuple(po.Segment(i * every, m) for i, m in enumerate(mixes)))


# ------------------------------------------------------------------ schedules
@pytest.mark.parametrize("shape", po.shapes_for("cassandra"))
def test_every_shape_compresses_into_segments_of_a_minute_or_more(shape: str) -> None:
    s = po.make_schedule(shape, minutes=8)
    assert s.seconds == 480 and s.steps == 96
    assert 2 <= len(s.segments) <= 6 and s.segments[0].start == 0
    assert all(d >= 55 for d in s.durations()) and sum(s.durations()) == 480
    assert all(seg.start % 5 == 0 for seg in s.segments)
    for seg in s.segments:
        assert set(seg.mix) == {"read", "update", "insert", "scan"}
        assert sum(seg.mix.values()) == pytest.approx(1.0, abs=1e-9)
    # neighbours differ: every shift is a real change of the mix
    for a, b in zip(s.segments, s.segments[1:], strict=False):
        assert sum(abs(a.mix[c] - b.mix[c]) for c in a.mix) >= po.MERGE_L1
    steps = s.step_mixes()
    assert len(steps) == 96 and steps[0] == s.segments[0].mix
    assert steps[int(s.segments[-1].start // 5)] == s.segments[-1].mix
    assert po.make_schedule(shape, minutes=8) == s  # seeded


def test_the_shapes_keep_sophias_character() -> None:
    bus = po.make_schedule("bus", minutes=12).segments
    assert bus[0].mix["scan"] > 0.7  # the night: scans
    assert max(seg.mix["update"] for seg in bus) > 0.7  # a rush hour: updates
    hpc = po.make_schedule("hpc", minutes=8).segments
    writes = [seg.mix["insert"] + seg.mix["update"] for seg in hpc]
    assert all(w > 0.9 or w < 0.1 for w in writes)  # job phases: upload/commit or analysis
    assert writes[0] > 0.9 and writes[1] < 0.1  # write, then read, ...
    mg = po.make_schedule("mgrast", minutes=12).segments
    reads = [seg.mix["read"] for seg in mg]
    assert max(reads) > 0.8 and min(reads) < 0.2  # read-heavy and write-heavy regimes


def test_a_short_run_has_two_segments() -> None:
    s = po.make_schedule("hpc", minutes=1)
    assert s.seconds == 60 and len(s.segments) == 2 and s.shifts == (30.0,)


def test_segmentation_finds_the_cuts_of_a_step_function() -> None:
    rows = [[0.9, 0.1, 0, 0]] * 10 + [[0.1, 0.9, 0, 0]] * 7 + [[0.5, 0.5, 0, 0]] * 13
    assert po._segmentation(np.array(rows, dtype=float), 3, 2) == [0, 10, 17, 30]


@pytest.mark.parametrize("minutes", [0, 0.2, 121, float("nan"), float("inf")])
def test_bad_minutes_are_refused_naming_the_option(minutes: float) -> None:
    with pytest.raises(ValidationError, match=r"^--minutes: must be in"):
        po.make_schedule("bus", minutes=minutes)


def test_a_bad_shape_or_step_is_refused_naming_the_option() -> None:
    with pytest.raises(ValidationError, match=r"^--shape: unknown 'tpcc'"):
        po.make_schedule("tpcc", minutes=4)
    with pytest.raises(ValidationError, match=r"^--step-seconds"):
        po.make_schedule("bus", minutes=1, step_seconds=45)
    with pytest.raises(ValidationError, match=r"^--shift-seconds"):
        po.make_schedule("bus", minutes=4, shift_seconds=1)


def test_a_schedule_must_start_at_zero_on_steps() -> None:
    with pytest.raises(ValidationError, match="first starting at 0"):
        po.Schedule("x", 60, 5, (po.Segment(5, READ),))
    with pytest.raises(ValidationError, match="not on a step"):
        po.Schedule("x", 60, 5, (po.Segment(0, READ), po.Segment(7, WRITE)))


# ------------------------------------------------------------------- options
def test_policies_are_parsed_and_checked() -> None:
    assert po.parse_policies("kairos, naive") == ("kairos", "naive")
    with pytest.raises(ValidationError, match=r"^--policies: unknown policy 'smart'; known: "
                       "default, static-best, naive, kairos"):
        po.parse_policies("default,smart")
    with pytest.raises(ValidationError, match=r"^--policies: a policy is named twice"):
        po.parse_policies("naive,naive")
    with pytest.raises(ValidationError, match=r"^--policies: give at least one"):
        po.parse_policies(" , ")


def test_runs_go_in_mirrored_order() -> None:
    order = po.run_order(["default", "static-best", "naive", "kairos"], 3)
    assert [p for _, p in order] == [
        "default", "static-best", "naive", "kairos", "kairos", "naive", "static-best",
        "default", "default", "static-best", "naive", "kairos"]
    assert [r for r, _ in order] == [1] * 4 + [2] * 4 + [3] * 4
    with pytest.raises(ValidationError, match=r"^--repetitions: must be a positive integer"):
        po.run_order(["default"], 0)


# ---------------------------------------------------------------- candidates
def test_parameters_default_and_candidates_come_from_the_model() -> None:
    cal = {"calibration": {"original": {"memtable_cleanup_threshold": 0.33333334},
                           "levels": {"memtable_cleanup_threshold": [0.11, 0.33333334]}}}
    m = model("memtable_cleanup_threshold", ref=0.33, scale=0.22, info=cal)
    assert po.model_params(m) == ["memtable_cleanup_threshold"]
    default = po.default_config(m, ["memtable_cleanup_threshold"])
    assert default == {"memtable_cleanup_threshold": 0.33333334}  # what the nodes ran
    grid = po.candidate_grid(m, default)
    # the running value first, then the calibration's levels and the space's values
    assert grid == [{"memtable_cleanup_threshold": v} for v in (0.33333334, 0.11, 0.33)]
    plain = model()
    assert po.default_config(plain, ["concurrent_reads"]) == {"concurrent_reads": 32}
    assert po.candidate_grid(plain, {"concurrent_reads": 32}) == [
        {"concurrent_reads": 32}, {"concurrent_reads": 64}]


def test_the_baselines_choose_among_what_the_kairos_planner_searches() -> None:
    """A model calibrated on 64 and 8 MiB/s: the space's 16 MiB/s is no candidate of the
    baselines, as it is none of make_plan's (planner.planning.pipeline.measured_values)."""
    from planner.model.performance import fit_design
    from planner.planning.pipeline import measured_values

    rows = [{"read": read, "update": 1 - read, "insert": 0.0, "scan": 0.0,
             "compaction_throughput": rate, "ops_per_s": ops}
            for read in (0.9, 0.1) for rate, ops in (("64MiB/s", 1000.0), ("8MiB/s", 900.0))
            for ops in (ops * 0.98, ops * 1.02)]
    m = fit_design(pd.DataFrame(rows), engine="cassandra", design="pooled")
    default = po.default_config(m, po.model_params(m))
    assert default == {"compaction_throughput": "64MiB/s"}
    grid = po.candidate_grid(m, default)
    assert [c["compaction_throughput"] for c in grid] == ["64MiB/s", "8MiB/s"]
    assert measured_values(m) == {"compaction_throughput": ("64MiB/s", "8MiB/s")}


def test_a_model_without_features_names_its_calibrations_parameters() -> None:
    m = PerformanceModel(
        engine="cassandra", name="mix-only", version=1, model_type="fitted", features=(),
        coef=np.full((4, 1), math.log(1000.0)), cov=np.eye(4) * 1e-4, sigma=0.1,
        info={"calibration": {"levels": {"concurrent_reads": [32, 64]}}})
    assert po.model_params(m) == ["concurrent_reads"]


def test_too_many_candidates_are_refused_naming_params() -> None:
    from planner.model.performance import prior_model

    prior = prior_model("cassandra")
    params = po.model_params(prior)
    assert len(params) > 7
    with pytest.raises(ValidationError, match=r"^--params: .* more than 128"):
        po.candidate_grid(prior, po.default_config(prior, params))


# ------------------------------------------------------------------- policies
def test_default_never_changes_and_static_best_is_in_place_from_the_start() -> None:
    # 64 concurrent reads: +50 % on reads, -30 % on the rest
    m = model(gamma=(math.log(1.5), math.log(0.7), math.log(0.7), math.log(0.7)))
    cands = po.candidate_grid(m, {"concurrent_reads": 32})
    mostly_reads = schedule(READ, READ, WRITE)
    d = po.decide("default", model=m, schedule=mostly_reads, candidates=cands)
    assert d.start == {"concurrent_reads": 32} and d.changes == ()
    s = po.decide("static-best", model=m, schedule=mostly_reads, candidates=cands)
    assert s.start == {"concurrent_reads": 64} and s.changes == ()
    mostly_writes = schedule(WRITE, WRITE, READ)
    s2 = po.decide("static-best", model=m, schedule=mostly_writes, candidates=cands)
    assert s2.start == {"concurrent_reads": 32}
    # the predicted served operations, by hand: 60 s per segment
    cap = m.predict_matrix([READ, WRITE], cands)[0]
    assert d.predicted_ops == pytest.approx(60 * (2 * cap[0, 0] + cap[1, 0]))
    assert s.predicted_ops == pytest.approx(60 * (2 * cap[0, 1] + cap[1, 1]))
    assert s.info["predicted_gain_over_default"] == pytest.approx(
        s.predicted_ops / d.predicted_ops - 1, abs=1e-4)


def test_on_a_tie_static_best_and_naive_keep_the_default() -> None:
    m = model(gamma=(0.0, 0.0, 0.0, 0.0))
    cands = po.candidate_grid(m, {"concurrent_reads": 32})
    sched = schedule(READ, WRITE)
    assert po.decide("static-best", model=m, schedule=sched, candidates=cands).start == cands[0]
    assert po.decide("naive", model=m, schedule=sched, candidates=cands).changes == ()


def test_naive_switches_at_every_shift_to_the_best_for_the_new_mix() -> None:
    m = model(gamma=(math.log(1.5), math.log(0.7), math.log(0.7), math.log(0.7)))
    cands = po.candidate_grid(m, {"concurrent_reads": 32})
    n = po.decide("naive", model=m, schedule=schedule(READ, WRITE, WRITE, READ),
                  candidates=cands)
    assert n.start == {"concurrent_reads": 32}
    assert [(c.at, dict(c.settings), c.restart) for c in n.changes] == [
        (0.0, {"concurrent_reads": 64}, False), (60.0, {"concurrent_reads": 32}, False),
        (180.0, {"concurrent_reads": 64}, False)]
    assert po.expected_final(n.start, n.changes) == {"concurrent_reads": 64}


def test_naive_pays_a_restart_that_kairos_declines_when_the_gain_is_too_small() -> None:
    # memtable_cleanup_threshold 0.11 (a restart): +3 % on writes, -3 % on reads; shifts
    # every 30 s. Naive restarts at every shift; the gain never pays a rolling restart.
    m = model("memtable_cleanup_threshold", ref=0.33, scale=-0.22,
              gamma=(math.log(0.97), math.log(1.03), math.log(1.03), 0.0))
    cands = po.candidate_grid(m, {"memtable_cleanup_threshold": 0.33})
    sched = schedule(READ, WRITE, READ, WRITE, every=30.0)
    n = po.decide("naive", model=m, schedule=sched, candidates=cands)
    assert [c.at for c in n.changes] == [30.0, 60.0, 90.0] and all(c.restart for c in n.changes)
    k = po.decide("kairos", model=m, schedule=sched, candidates=cands,
                  kairos={"restart_seconds": 60.0})
    assert k.changes == () and k.info["steps"] == 0
    assert k.info["restart_seconds"] == 60.0


def test_kairos_changes_when_the_gain_beats_the_cost() -> None:
    # +60 % for every mix over 4 minutes: worth a rolling restart at once
    m = model("memtable_cleanup_threshold", ref=0.33, scale=-0.22,
              gamma=(math.log(1.6),) * 4)
    cands = po.candidate_grid(m, {"memtable_cleanup_threshold": 0.33})
    k = po.decide("kairos", model=m, schedule=schedule(READ, WRITE, READ, WRITE),
                  candidates=cands, kairos={"restart_seconds": 20.0, "cl": "QUORUM"})
    assert len(k.changes) == 1
    first = k.changes[0]
    assert first.at == 0.0 and dict(first.settings) == {"memtable_cleanup_threshold": 0.11}
    assert first.restart and "plan step s1" in first.reason
    assert k.predicted_ops > po.decide("default", model=m, schedule=schedule(
        READ, WRITE, READ, WRITE), candidates=cands).predicted_ops


def test_the_compaction_cost_and_the_confidence_reach_the_kairos_policy() -> None:
    # The enveloped lab's calibration (LCS +49 % on scans, -8 % on updates, wide intervals)
    # on the bus day in 8 min: a rewrite priced at the default 120 s of full throughput
    # costs more than LCS gains; at the 30 s measured with no load it pays, with
    # P(gain > cost) between 0.8 and 0.9.
    from planner.model.performance import load_model

    m = load_model(REPO / "inventories/local/calibration/cassandra-compaction-model.json")
    cands = po.candidate_grid(m, po.default_config(m, po.model_params(m)))
    sched = po.make_schedule("bus", minutes=8, seed=0)
    kw = {"tables": ("kairos_effect.usertable",)}
    priced = po.decide("kairos", model=m, schedule=sched, candidates=cands, kairos=kw)
    assert priced.changes == () and priced.info["compaction_seconds"] == 120.0
    unsure = po.decide("kairos", model=m, schedule=sched, candidates=cands,
                       kairos={**kw, "compaction_seconds": 30.0})
    assert unsure.changes == () and unsure.info["dropped_below_confidence"] == 1
    k = po.decide("kairos", model=m, schedule=sched, candidates=cands,
                  kairos={**kw, "compaction_seconds": 30.0, "confidence": 0.8})
    assert [(c.at, dict(c.settings), c.restart) for c in k.changes] == [
        (0.0, {"compaction": "LeveledCompactionStrategy"}, False)]
    assert k.info["compaction_seconds"] == 30.0 and k.info["confidence"] == 0.8


def test_on_the_reporting_day_naive_follows_every_batch_and_kairos_levels_once() -> None:
    # Scans, a batch of updates, scans: the calibrated model's best strategy changes at
    # every shift. With the measured switch costs (41.9 s to leveled) Kairos levels the
    # table when the scans begin and keeps it through the midday batch; naive switches
    # back and forth.
    from planner.model.performance import load_model

    m = load_model(REPO / "inventories/local/calibration/cassandra-compaction-model.json")
    cands = po.candidate_grid(m, po.default_config(m, po.model_params(m)))
    sched = po.make_schedule("reporting", minutes=10, seed=0)
    assert [(s.start, round(s.mix["scan"], 1)) for s in sched.segments] == [
        (0.0, 0.1), (90.0, 0.9), (300.0, 0.1), (390.0, 0.9)]
    lcs, stcs = "LeveledCompactionStrategy", "SizeTieredCompactionStrategy"
    naive = po.decide("naive", model=m, schedule=sched, candidates=cands)
    assert [(c.at, c.settings["compaction"]) for c in naive.changes] == [
        (90.0, lcs), (300.0, stcs), (390.0, lcs)]
    costs = REPO / "inventories/local/calibration/change-costs.json"
    k = po.decide("kairos", model=m, schedule=sched, candidates=cands,
                  kairos={"tables": ("kairos_effect.usertable",), "change_costs": costs})
    assert [(c.at, c.settings["compaction"]) for c in k.changes] == [(90.0, lcs)]
    assert k.info["compaction_seconds_source"].startswith("measured")


def test_an_open_loop_cuts_on_the_load_and_offers_each_segment_its_share() -> None:
    # The warehouse day: its batches and its quiet night share one mix, so only the load
    # tells them apart; a closed loop cuts on the mix alone and saturates throughout.
    sched = po.make_schedule("warehouse", minutes=10, seed=0, shift_seconds=100.0,
                             peak_rate=1000.0)
    assert [(s.start, round(s.mix["update"], 1), round(s.load, 1)) for s in sched.segments] == [
        (0.0, 0.9, 1.0), (75.0, 0.9, 0.1), (200.0, 0.1, 0.7), (300.0, 0.9, 1.0),
        (375.0, 0.1, 0.6), (475.0, 0.9, 0.1)]
    assert max(s.load for s in sched.segments) == 1.0
    rates = sched.step_rates()
    assert len(rates) == sched.steps == 120
    assert rates[0] == pytest.approx(1000.0 * sched.segments[0].load)
    assert rates[15] == pytest.approx(1000.0 * sched.segments[1].load)
    assert rates[15] < 150.0
    assert sched.to_dict()["peak_rate"] == 1000.0 and "open loop" in sched.source
    closed = po.make_schedule("warehouse", minutes=10, seed=0, shift_seconds=100.0)
    assert closed.peak_rate is None and closed.segment_rates() is None
    assert set(closed.step_rates()) == {po.UNTHROTTLED_RATE}
    assert all(s.load == 1.0 for s in closed.segments)
    assert len(closed.segments) < len(sched.segments)  # the night joins a batch


@pytest.mark.parametrize("rate", [0.0, -5.0, math.nan, math.inf])
def test_a_bad_peak_rate_is_refused_naming_the_option(rate: float) -> None:
    with pytest.raises(ValidationError, match=r"^--peak-rate: must be ops/s > 0"):
        po.make_schedule("warehouse", minutes=10, peak_rate=rate)


def test_in_an_open_loop_nothing_is_credited_beyond_the_offered_load() -> None:
    # 64 concurrent reads serve the read mix 35 % faster, but at 500 ops/s offered both
    # candidates (about 1000 ops/s) serve all of it: no static-best change, and the
    # prediction is what is offered.
    m = model(gamma=(0.3, 0.0, 0.0, 0.0))
    cands = po.candidate_grid(m, {"concurrent_reads": 32})
    saturated = schedule(READ, READ)
    assert po.decide("static-best", model=m, schedule=saturated,
                     candidates=cands).start == {"concurrent_reads": 64}
    offered = po.Schedule(shape="test", seconds=120.0, step_seconds=5.0, peak_rate=500.0,
                          segments=(po.Segment(0.0, READ), po.Segment(60.0, READ)))
    best = po.decide("static-best", model=m, schedule=offered, candidates=cands)
    assert best.start == {"concurrent_reads": 32}
    assert best.predicted_ops == pytest.approx(500.0 * 120.0)
    k = po.decide("kairos", model=m, schedule=offered, candidates=cands)
    assert k.info["offered_load_told"] == "the schedule's rates"  # not saturation


def test_on_the_warehouse_day_kairos_levels_in_the_quiet_night_and_naive_at_the_reports(
) -> None:
    # The measured switch to leveled costs 24.7 s of its throughput over an 84.8-s rewrite
    # (the quarter-size table, under scans). Offered its share of the day's load, Kairos
    # rewrites in the quiet night, early enough that the rewrite ends when the reports
    # begin; naive switches when they begin, and back at every batch.
    from planner.model.performance import load_model

    m = load_model(REPO / "inventories/local/calibration/cassandra-compaction-model.json")
    cands = po.candidate_grid(m, po.default_config(m, po.model_params(m)))
    sched = po.make_schedule("warehouse", minutes=10, seed=0, shift_seconds=100.0,
                             peak_rate=1000.0)
    night, reports = sched.segments[1].start, sched.segments[2].start
    lcs, stcs = "LeveledCompactionStrategy", "SizeTieredCompactionStrategy"
    naive = po.decide("naive", model=m, schedule=sched, candidates=cands)
    assert [(c.at, c.settings["compaction"]) for c in naive.changes] == [
        (reports, lcs), (300.0, stcs), (375.0, lcs), (475.0, stcs)]
    costs = REPO / "inventories/local/calibration/change-costs-usertable-small.json"
    kw = {"tables": ("kairos_effect.usertable_small",), "change_costs": costs}
    k = po.decide("kairos", model=m, schedule=sched, candidates=cands, kairos=kw)
    (step,) = k.changes
    assert step.settings == {"compaction": lcs}
    assert night <= step.at and step.at + 84.8 <= reports + sched.step_seconds
    # saturated from start to end there is no quiet hour: no rewrite before the scans
    closed = po.make_schedule("warehouse", minutes=10, seed=0, shift_seconds=100.0)
    k_closed = po.decide("kairos", model=m, schedule=closed, candidates=cands, kairos=kw)
    assert all(c.at >= closed.segments[1].start for c in k_closed.changes)


def test_a_live_change_needs_no_restart_and_kairos_makes_it_at_once() -> None:
    m = model()
    cands = po.candidate_grid(m, {"concurrent_reads": 32})
    k = po.decide("kairos", model=m, schedule=schedule(READ, WRITE), candidates=cands)
    assert [(c.at, dict(c.settings), c.restart) for c in k.changes] == [
        (0.0, {"concurrent_reads": 64}, False)]


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"^--policies: unknown policy 'oracle'"):
        po.decide("oracle", model=model(), schedule=schedule(READ),
                  candidates=[{"concurrent_reads": 32}])


def test_the_schedule_is_the_planners_perfect_forecast() -> None:
    m = model()
    sched = schedule(READ, WRITE)
    fc = po.schedule_forecast(sched, m, start=1000.0, load=5000.0)
    assert fc.horizon == 24 and fc.step_seconds == 5.0 and fc.timestamps[0] == 1000.0
    assert fc.mix_at(0)["read"] == pytest.approx(0.9) and fc.mix_at(12)["insert"] == 0.6
    assert np.all(fc.load_mean == 5000.0) and np.all(fc.load_lower == fc.load_upper)


def test_the_unthrottled_rate_never_makes_the_pacer_wait() -> None:
    # a million operations a second, far more than the lab serves: still no wait
    pacer = Pacer()
    assert all(pacer.delay(po.UNTHROTTLED_RATE, 100.0 + i * 1e-6) == 0.0
               for i in range(200_000))


# ------------------------------------------------------------------- summary
def run(policy: str, rep: int, served: int, *, status: str = "ok", p99: float = 10.0,
        changes: int = 0, restarts: int = 0, shape: str = "bus") -> dict[str, Any]:
    return {"shape": shape, "policy": policy, "repetition": rep, "status": status,
            "served_ops": served, "ops_per_s": served / 100.0, "p99_ms": p99,
            "failed_ops": 0, "lost_acknowledged_writes": 0, "changes_made": changes,
            "restarts": restarts, "run_id": f"{policy}-{rep}",
            "series": [{"t": 0.0, "ops_per_s": served / 100.0, "failed": 0, "mix": READ}]}


def test_the_summary_averages_completed_runs_with_half_the_range() -> None:
    runs = [run("kairos", 1, 1100, changes=1), run("kairos", 2, 1300, changes=3, restarts=1),
            run("default", 1, 1000), run("default", 2, 1000, status="failed"),
            run("default", 3, 900), run("naive", 1, 800, changes=4, restarts=4)]
    s = po.summarise(runs)["bus"]
    assert list(s) == ["default", "naive", "kairos"]  # the policies' order
    assert s["kairos"]["served_ops"] == {"mean": 1200.0, "spread": 100.0, "n": 2}
    assert s["kairos"]["changes_made"]["mean"] == 2.0 and s["kairos"]["restarts"]["mean"] == 0.5
    assert s["default"]["runs"] == 2 and s["default"]["failed"] == 1
    assert s["default"]["served_ops"] == {"mean": 950.0, "spread": 50.0, "n": 2}
    assert s["naive"]["served_ops"] == {"mean": 800.0, "spread": 0.0, "n": 1}
    c = po.comparisons(po.summarise(runs))["bus"]
    assert c["default"]["diff"] == pytest.approx(100 * (1200 / 950 - 1))
    assert c["default"]["spread"] == pytest.approx(100 * 150 / 950)
    assert c["naive"] == {"diff": pytest.approx(50.0), "spread": pytest.approx(12.5)}
    table = po.summary_table(po.summarise(runs))
    assert "| default | 2 (+1 failed) | 950 ± 50 |" in table
    assert "| naive | 1 | 800 |" in table  # one run: no spread shown
    assert "kairos vs default / naive: default +26.3 % (runs' spread ±15.8 %); naive +50.0 %" \
        in table


def test_a_summary_of_failed_runs_only_has_no_mean_and_no_comparison() -> None:
    s = po.summarise([run("kairos", 1, 5, status="failed"), run("default", 1, 1000)])
    assert s["bus"]["kairos"]["served_ops"]["mean"] is None
    assert po.comparisons(s) == {}
    assert "| kairos | 0 (+1 failed) | - |" in po.summary_table(s)


def test_figures_count_successful_operations_only() -> None:
    load = {"ops": 1000, "failed": 10, "seconds": 10.0, "failures": {"Timeout": 10},
            "latency_ms": {"p50": 2.0, "p99": 40.5}, "lost_acknowledged_writes": 0,
            "verified": True,
            "steps": [{"step": 0, "ops_per_s": 100.0, "failed": 0, "mix": READ},
                      {"step": 1, "ops_per_s": 102.0, "failed": 10, "mix": WRITE}]}
    f = po.figures(load, step_seconds=5.0)
    assert f["served_ops"] == 990 and f["ops_per_s"] == 99.0 and f["p99_ms"] == 40.5
    assert f["series"] == [{"t": 0.0, "ops_per_s": 100.0, "failed": 0, "mix": READ},
                           {"t": 5.0, "ops_per_s": 100.0, "failed": 10, "mix": WRITE}]


def test_read_back_mismatches_compare_numbers_loosely_and_skip_what_was_not_read() -> None:
    expected = {"concurrent_reads": 64, "memtable_cleanup_threshold": 0.33333334,
                "compaction": "LeveledCompactionStrategy", "heap_size": "512M"}
    read = {"concurrent_reads": 32, "memtable_cleanup_threshold": 0.333333340001,
            "compaction": "LeveledCompactionStrategy"}
    assert po.readback_mismatches(expected, read) == {
        "concurrent_reads": {"expected": 64, "read": 32}}


def test_the_page_draws_one_line_per_run() -> None:
    runs = [run("kairos", 1, 1100), run("kairos", 2, 1300), run("default", 1, 1000)]
    runs[0]["changes"] = [{"started": 0.0}]
    results = {"runs": runs, "summary": po.summarise(runs),
               "schedules": {"bus": {"seconds": 60.0, "source": "test"}}}
    page = po.render_html(results)
    assert page.count("<polyline") == 3 and page.count('stroke-dasharray="5 3"') == 1
    assert "kairos vs default" in page and page.startswith("<!DOCTYPE html>")


# ------------------------------------------------- the lab driver, on fakes
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class FakeResult:
    def __init__(self, config: Any, seconds: float) -> None:
        self.config, self.seconds = config, seconds

    def to_dict(self) -> dict[str, Any]:
        tr = self.config.trace
        steps = [{"step": i, "ops_per_s": 100.0, "failed": 0, "mix": dict(tr.mixes[i])}
                 for i in range(tr.steps)]
        ops = int(100 * tr.duration)
        return {"ops": ops, "failed": 0, "seconds": tr.duration, "failures": {},
                "latency_ms": {"p50": 1.0, "p99": 9.0}, "lost_acknowledged_writes": 0,
                "verified": True, "steps": steps}


class Lab:
    """Fakes of the executor, the load and the nodes, sharing one clock."""

    def __init__(self, clock: Clock, fail_on: Mapping[str, Any] | None = None) -> None:
        self.clock = clock
        self.nodes: dict[str, Any] = {"concurrent_reads": 32}
        self.applied: list[dict[str, Any]] = []
        self.restart_all: list[bool] = []  # what each executor call was asked to restart
        self.loads: list[FakeLoad] = []
        self.fail_on = fail_on
        self.settled: list[tuple[int, int]] = []  # (changes applied, loads run) at each wait
        self.settle_error: str | None = None

    def apply(self, bench: Any, changes: Mapping[str, Any], *, restart_all: bool = False) -> None:
        self.clock.t += 10.0  # an executor run takes time
        if self.fail_on is not None and dict(changes) == dict(self.fail_on):
            raise KairosError("the executor failed (rc 2) applying ...")
        self.applied.append(dict(changes))
        self.restart_all.append(restart_all)
        self.nodes.update(changes)

    def read(self, params: Any, **_: Any) -> tuple[dict[str, Any], str]:
        return {k: self.nodes[k] for k in params}, "5.0.6"

    def settle(self, hosts: Any, *, timeout: float, **_: Any) -> float:
        self.settled.append((len(self.applied), len(self.loads)))
        if self.settle_error is not None:
            raise KairosError(self.settle_error)
        self.clock.t += 15.0
        return 15.0


class FakeLoad:
    def __init__(self, lab: Lab, config: Any, **_: Any) -> None:
        self.lab, self.config = lab, config
        self.began: float | None = None
        self.stopped = self.aborted = False
        lab.loads.append(self)

    def __enter__(self) -> FakeLoad:
        self.began = self.lab.clock.t
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if not self.stopped:
            self.aborted = True

    def running(self) -> bool:
        assert self.began is not None
        return not self.stopped and self.lab.clock.t - self.began < self.config.seconds

    def wait(self, timeout: float | None = None) -> bool:
        assert self.began is not None
        self.lab.clock.t = max(self.lab.clock.t, self.began + self.config.seconds)
        return True

    def stop(self) -> FakeResult:
        self.stopped = True
        return FakeResult(self.config, self.config.seconds)


def load_bench(monkeypatch: pytest.MonkeyPatch, name: str) -> Any:
    """bench/payoff.py imported as module ``name`` (in sys.modules: its dataclasses need it)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / "payoff.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def fake_bench(monkeypatch: pytest.MonkeyPatch, name: str, lab: Lab, load: Any,
               read_config: Any, settle: Any) -> Any:
    """bench/payoff.py as ``name`` on the fake ``lab``: its clock and executor, ``load(lab,
    config, **kw)`` for the load, ``read_config`` and ``settle`` for the nodes' Cassandra
    read-back and compaction wait."""
    import planner.calibrate.bench as cb
    import planner.loadgen as lg

    module = load_bench(monkeypatch, name)
    monkeypatch.setattr(module, "time", lab.clock)
    monkeypatch.setattr(cb.ExecutorBench, "apply", lambda self, ch, restart_all=False:
                        lab.apply(self, ch, restart_all=restart_all))
    monkeypatch.setattr(cb, "read_running_config", read_config)
    monkeypatch.setattr(cb, "wait_for_compactions", settle)
    monkeypatch.setattr(lg, "BackgroundLoad", lambda config, **kw: load(lab, config, **kw))
    monkeypatch.setattr(lg, "run_load", lambda *a, **k: type("R", (), {"stopped_by": "duration"}))
    return module


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Any, Lab, Path]]:
    lab = Lab(Clock())
    module = fake_bench(monkeypatch, "payoff_bench", lab, FakeLoad, lab.read, lab.settle)
    path = tmp_path / "model.json"
    save_model(model(), path)
    yield module, lab, path


def test_the_driver_runs_in_mirrored_order_and_applies_each_policys_changes(
    bench: tuple[Any, Lab, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, lab, path = bench
    out = tmp_path / "out"
    rc = module.main(["--model", str(path), "--shapes", "hpc", "--minutes", "1",
                      "--policies", "default,naive", "--warmup", "0", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    assert [(r["policy"], r["repetition"]) for r in runs] == [
        ("default", 1), ("naive", 1), ("naive", 2), ("default", 2)]
    assert [r["status"] for r in runs] == ["ok"] * 4
    assert [r["changes_made"] for r in runs] == [0, 1, 1, 0]
    # naive switches at t=0; the second naive run and the last default one first restore 32
    assert lab.applied == [{"concurrent_reads": 64}, {"concurrent_reads": 32},
                           {"concurrent_reads": 64}, {"concurrent_reads": 32}]
    # each run waits for the compactions after its starting configuration, before its load
    assert lab.settled == [(0, 0), (0, 1), (2, 2), (4, 3)]
    assert [r["settle_seconds"] for r in runs] == [15.0] * 4
    assert runs[1]["changes"][0]["started"] == 0.0 and runs[1]["changes"][0]["ok"]
    assert runs[1]["readback"]["read"] == {"concurrent_reads": 64}
    assert all(len(r["series"]) == 12 for r in runs)
    assert all(load.stopped and not load.aborted for load in lab.loads)
    assert lab.nodes == {"concurrent_reads": 32}  # the default at the end
    assert "| naive | 2 | 6,000 ± 0 | 100.0 ± 0.0 | 9.0 ± 0.0 |" in capsys.readouterr().out
    assert (out / "series.csv").read_text().count("\n") == 1 + 4 * 12
    assert "<polyline" in (out / "payoff.html").read_text()


def test_render_writes_a_records_page_again_from_its_results(
    bench: tuple[Any, Lab, Path], tmp_path: Path
) -> None:
    module = bench[0]
    record = REPO / "docs" / "payoff-records" / "warehouse"
    (tmp_path / "results.json").write_text((record / "results.json").read_text())
    assert module.main(["--render", str(tmp_path)]) == 0
    page = (tmp_path / "payoff.html").read_text()
    assert page.count('<section id="warehouse">') == 1 and "<polyline" in page
    assert module.main(["--render", str(tmp_path / "missing")]) == 2


def test_preconditioning_gives_every_run_the_same_history_in_the_default_configuration(
    bench: tuple[Any, Lab, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import planner.loadgen as lg

    module, lab, path = bench
    loads: list[tuple[dict[str, float], float, dict[str, Any]]] = []

    def run_load(config: Any, *_: Any, **__: Any) -> Any:
        loads.append((dict(config.mix), config.seconds, dict(lab.nodes)))
        return type("R", (), {"stopped_by": "duration"})

    monkeypatch.setattr(lg, "run_load", run_load)
    out = tmp_path / "out"
    rc = module.main(["--model", str(path), "--shapes", "hpc", "--minutes", "1",
                      "--policies", "naive,default", "--warmup", "0", "--precondition", "30",
                      "--precondition-mix", "update=1", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["policy"], r["repetition"]) for r in runs] == [
        ("naive", 1), ("default", 1), ("default", 2), ("naive", 2)]
    # one 30-s preconditioning per run, all of it updates, always in the default (32):
    # after the naive run left 64, the default is restored first
    assert [(m["update"], sec, nodes) for m, sec, nodes in loads[1:]] == [
        (1.0, 30.0, {"concurrent_reads": 32})] * 4  # loads[0] writes the table
    assert [r["precondition"]["restored"] for r in runs] == [
        {}, {"concurrent_reads": 32}, {}, {}]
    assert lab.applied[:2] == [{"concurrent_reads": 64}, {"concurrent_reads": 32}]
    assert module.main(["--model", str(path), "--precondition", "-5", "--plan-only"]) == 2
    assert "--precondition: must be in [0, 3600] seconds, got -5" in capsys.readouterr().err


def test_an_executor_failure_fails_the_run_stops_its_load_and_the_experiment(
    bench: tuple[Any, Lab, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, lab, path = bench
    lab.fail_on = {"concurrent_reads": 64}
    out = tmp_path / "out"
    rc = module.main(["--model", str(path), "--shapes", "bus", "--minutes", "1",
                      "--policies", "naive,default", "--warmup", "0", "--out", str(out)])
    assert rc == 1
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert len(runs) == 1 and runs[0]["status"] == "failed"
    assert runs[0]["error"].startswith("the executor failed at 0 s applying "
                                       "{'concurrent_reads': 64}")
    assert lab.loads[0].stopped and not lab.loads[0].aborted  # stopped, its figures kept
    assert runs[0]["served_ops"] > 0
    assert "FAILED" in capsys.readouterr().err


def test_a_resumed_experiment_keeps_its_completed_runs_and_reruns_the_failed_one(
    bench: tuple[Any, Lab, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, lab, path = bench
    lab.fail_on = {"concurrent_reads": 64}
    out = tmp_path / "out"
    argv = ["--model", str(path), "--shapes", "bus", "--minutes", "1", "--policies",
            "default,naive", "--repetitions", "1", "--warmup", "0", "--out", str(out)]
    assert module.main(argv) == 1  # default ran, naive failed
    lab.fail_on = None
    lab.applied.clear()
    assert module.main([*argv, "--resume"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [(r["policy"], r["status"]) for r in results["runs"]] == [
        ("default", "ok"), ("naive", "ok")]
    assert [r["policy"] for r in results["failed_runs"]] == ["naive"]
    assert results["resumed"][0]["command"].endswith("--resume")
    assert not results["command"].endswith("--resume")
    assert lab.applied[0] == {"concurrent_reads": 64}  # only naive ran again
    assert "resuming" in capsys.readouterr().err
    other = [*argv[:7], "default", *argv[8:], "--resume"]  # another experiment
    assert module.main(other) == 2
    assert "is another experiment: its plans differ" in capsys.readouterr().err


def test_nodes_that_do_not_settle_fail_the_run_before_its_load(
    bench: tuple[Any, Lab, Path], tmp_path: Path
) -> None:
    module, lab, path = bench
    lab.settle_error = "compactions still run after 1800 s: {'127.0.0.1': 3}"
    out = tmp_path / "out"
    rc = module.main(["--model", str(path), "--shapes", "hpc", "--minutes", "1",
                      "--policies", "default", "--repetitions", "1", "--out", str(out)])
    assert rc == 1
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["failed"]
    assert runs[0]["error"] == ("the nodes did not settle before the run: compactions still "
                                "run after 1800 s: {'127.0.0.1': 3}")
    assert lab.loads == []  # no load was started on unsettled nodes


def test_short_sets_the_ci_run_unless_an_option_is_given(
    bench: tuple[Any, Lab, Path]
) -> None:
    module = bench[0]
    short = module.parse_args(["--short"])
    assert (short.minutes, short.repetitions, short.policies, short.keys) == (
        1.0, 1, "default,kairos", 5000)
    mixed = module.parse_args(["--short", "--minutes", "2", "--policies", "naive"])
    assert (mixed.minutes, mixed.policies, mixed.warmup) == (2.0, "naive", 5.0)
    full = module.parse_args([])
    assert (full.minutes, full.repetitions, full.policies) == (
        8.0, 2, "default,static-best,naive,kairos")


def test_an_open_loop_run_offers_the_segments_rates_and_warms_up_at_the_first(
    bench: tuple[Any, Lab, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import planner.loadgen as lg

    module, lab, path = bench
    warmups: list[tuple[float, float | None]] = []

    def run_load(config: Any, *_: Any, **__: Any) -> Any:
        warmups.append((config.seconds, config.rate))
        return type("R", (), {"stopped_by": "duration"})

    monkeypatch.setattr(lg, "run_load", run_load)
    out = tmp_path / "out"
    rc = module.main(["--model", str(path), "--shapes", "warehouse", "--minutes", "10",
                      "--shift-seconds", "100", "--peak-rate", "800", "--policies", "default",
                      "--repetitions", "1", "--warmup", "20", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    sched = po.make_schedule("warehouse", minutes=10, shift_seconds=100.0, peak_rate=800.0)
    (load,) = lab.loads
    assert load.config.trace.rates == sched.step_rates()
    assert load.config.trace.rates[0] == pytest.approx(800.0 * sched.segments[0].load)
    assert warmups[-1] == (20.0, pytest.approx(800.0 * sched.segments[0].load))
    results = json.loads((out / "results.json").read_text())
    assert results["schedules"]["warehouse"]["peak_rate"] == 800.0
    assert "offered ops/s per segment: [" in capsys.readouterr().err
    assert module.main(["--model", str(path), "--peak-rate", "0", "--plan-only"]) == 2
    assert "--peak-rate: must be ops/s > 0, got 0.0" in capsys.readouterr().err


def test_the_driver_refuses_bad_options_before_touching_anything(
    bench: tuple[Any, Lab, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    module, lab, path = bench
    assert module.main(["--model", str(path), "--policies", "default,best"]) == 2
    assert "--policies: unknown policy 'best'" in capsys.readouterr().err
    assert module.main(["--model", str(path), "--minutes", "500"]) == 2
    assert "--minutes: must be in" in capsys.readouterr().err
    assert module.main(["--model", str(path), "--shapes", "tpcc"]) == 2
    assert "--shapes: unknown 'tpcc'" in capsys.readouterr().err
    assert lab.applied == [] and lab.loads == []


def test_a_saved_layout_is_restored_in_the_default_before_every_run(
    bench: tuple[Any, Lab, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, lab, path = bench
    restored: list[dict[str, Any]] = []  # the nodes' configuration at each restore

    def restore_layout(self: Any) -> dict[str, int]:
        restored.append(dict(lab.nodes))
        return {"cass1": 5}

    monkeypatch.setattr(module.Lab, "restore_layout", restore_layout)
    layout = tmp_path / "layout"
    layout.mkdir()
    (layout / "layout.json").write_text(json.dumps(
        {"keyspace": "kairos_payoff", "table": "usertable", "nodes": {"cass1": {"sstables": 5}}}))
    out = tmp_path / "out"
    rc = module.main(["--model", str(path), "--shapes", "hpc", "--minutes", "1",
                      "--policies", "naive,default", "--warmup", "0", "--layout", str(layout),
                      "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    runs = json.loads((out / "results.json").read_text())["runs"]
    # every run, after the naive one left 64 too: the default first, then the layout
    assert restored == [{"concurrent_reads": 32}] * 4
    assert [r["precondition"]["layout"] for r in runs] == [{"cass1": 5}] * 4
    assert [r["precondition"]["restored"] for r in runs] == [
        {}, {"concurrent_reads": 32}, {}, {}]

    # refused before any node is touched: no layout saved there, or saved from another table
    applied = len(lab.applied)
    assert module.main(["--model", str(path), "--layout", str(tmp_path / "none"),
                        "--out", str(out)]) == 2
    assert "no saved layout" in capsys.readouterr().err
    assert module.main(["--model", str(path), "--layout", str(layout), "--table", "other",
                        "--out", str(out)]) == 2
    assert "saved from kairos_payoff.usertable, not kairos_payoff.other" in (
        capsys.readouterr().err)
    assert module.main(["--model", str(path), "--save-layout", "--out", str(out)]) == 2
    assert "--save-layout: give the directory" in capsys.readouterr().err
    assert len(lab.applied) == applied
