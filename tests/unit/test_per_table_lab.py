"""bench/per_table_lab.py without a lab: the traces it plans from, the strategies it reads
out of the plan, the predictions and the verdict."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.workload.store import CounterSample, Store

REPO = Path(__file__).parents[2]
BENCH = REPO / "bench"
for extra in (BENCH, REPO / "module_utils"):  # as the bench finds its neighbours
    if str(extra) not in sys.path:
        sys.path.append(str(extra))
_spec = importlib.util.spec_from_file_location("bench_per_table_lab", BENCH / "per_table_lab.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

MODEL = REPO / "inventories/local/calibration/cassandra-compaction-model.json"


def phase(updates: float, scans: float, failed: int = 0) -> dict[str, Any]:
    tables = {"updates": {"ops_per_s": updates, "failed": failed, "lost_acknowledged_writes": 0,
                          "mix": {"update": 0.9, "scan": 0.1}},
              "scans": {"ops_per_s": scans, "failed": 0, "lost_acknowledged_writes": 0,
                        "mix": {"scan": 0.9, "update": 0.1}}}
    return {"tables": tables, "total_ops_per_s": updates + scans}


def test_the_plan_is_made_from_the_collected_per_table_requests(tmp_path: Path) -> None:
    """Per-table samples of three nodes, as the collector stores them (writes and scans per
    table, cumulative, beside each node's own sample, their sum), through the store's
    series, kairos forecast and kairos plan on the lab's compaction model: the scan-heavy
    table gets leveled compaction, the other keeps size-tiered."""
    store = Store(tmp_path / "kairos.db")
    now = time.time()
    rates = {"updates": {"write": 180.0, "scan": 20.0}, "scans": {"write": 8.0, "scan": 72.0}}
    for i in range(30):
        ts = now - (30 - i) * 10.0
        samples = [
            CounterSample(node=f"cass{n}", scope=f"table:kairos_pertable.{t}", ts=ts,
                          counters={"read": 0, **{k: int(v * 10 * i) for k, v in r.items()}},
                          started_at=now - 3600, instance=f"h{n}:1")
            for n in (1, 2, 3) for t, r in rates.items()]
        samples += [
            CounterSample(node=f"cass{n}", scope="node", ts=ts, counters={"read": 0, **{
                k: sum(int(r[k] * 10 * i) for r in rates.values()) for k in ("write", "scan")}},
                started_at=now - 3600, instance=f"h{n}:1")
            for n in (1, 2, 3)]
        store.append_counters("cassandra", "pertable", samples, round_ts=ts)
    args = argparse.Namespace(keyspace="kairos_pertable", collect_interval=10.0, model=MODEL,
                              compaction_seconds=30.0)
    plan, collected = bench.make_plan(args, tmp_path / "kairos.db", tmp_path)
    assert collected["scans"]["ops_per_s"] == pytest.approx(240.0, rel=0.01)  # 3 nodes
    assert collected["cluster"]["ops_per_s"] == pytest.approx(840.0, rel=0.01)  # once each
    assert collected["updates"]["mix"]["update"] == pytest.approx(0.9, abs=0.01)
    assert bench.plan_tables(plan, "kairos_pertable") == {"updates": bench.STCS,
                                                          "scans": bench.LCS}


def test_each_table_s_strategy_is_read_from_the_plan_s_first_step(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump({
        "current_config": {"compaction": bench.STCS},
        "steps": [{"target": {}, "per_table": {
            "kairos_pertable.scans": {"compaction": bench.LCS}}}]}))
    assert bench.plan_tables(plan, "kairos_pertable") == {"updates": bench.STCS,
                                                          "scans": bench.LCS}
    plan.write_text(yaml.safe_dump({"current_config": {}, "steps": []}))
    assert bench.plan_tables(plan, "kairos_pertable") == dict.fromkeys(bench.MIXES, bench.STCS)


def test_the_lab_model_predicts_per_table_above_either_strategy_for_both() -> None:
    predicted = bench.predictions(MODEL, phase(600.0, 250.0), {
        "stcs": dict.fromkeys(bench.MIXES, bench.STCS),
        "per_table": {"updates": bench.STCS, "scans": bench.LCS},
        "lcs": dict.fromkeys(bench.MIXES, bench.LCS)})
    assert predicted["per_table"] > predicted["stcs"]
    assert predicted["per_table"] > predicted["lcs"]


def test_the_phases_run_there_and_back() -> None:
    assert bench.phase_order(False) == ["stcs_for_both", "per_table", "lcs_for_both"]
    assert bench.phase_order(True) == ["stcs_for_both", "per_table", "lcs_for_both",
                                       "lcs_for_both", "per_table", "stcs_for_both"]


def test_the_verdict_reports_both_gains_and_fails_on_a_failed_operation(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump({"current_config": {"compaction": bench.STCS}, "steps": [
        {"target": {}, "per_table": {"kairos_pertable.scans": {"compaction": bench.LCS}}}]}))
    args = argparse.Namespace(model=MODEL, keyspace="kairos_pertable", out=None)

    def runs(*totals: tuple[float, float], failed: int = 0) -> dict[str, Any]:
        return {"runs": [phase(u, s, failed) for u, s in totals]}

    result = {"plan": str(plan), "phases": {
        "stcs_for_both": runs((600, 200), (580, 220)),   # mean 800
        "per_table": runs((600, 300), (620, 280)),       # mean 900
        "lcs_for_both": runs((500, 300))}}               # 800
    assert bench.finish(args, result) == 0
    assert result["phases"]["per_table"]["total_ops_per_s"] == 900
    assert result["gain_over_stcs_for_both"]["measured"] == pytest.approx(0.125)
    assert result["gain_over_lcs_for_both"]["measured"] == pytest.approx(0.125)
    assert result["gain_over_stcs_for_both"]["predicted"] > 0
    result["phases"]["per_table"] = runs((600, 300), (600, 300), failed=2)
    assert bench.finish(args, result) == 1
    assert result["failed_or_lost"] == {"per_table/0/updates": (2, 0),
                                        "per_table/1/updates": (2, 0)}
    capsys.readouterr()


def test_mix_sets_a_table_s_request_mix_and_refuses_what_is_not_one() -> None:
    args = bench.parse_args(["--mix", "updates=update:1"])
    assert args.mixes == {"updates": {"update": 1.0}, "scans": {"scan": 0.9, "update": 0.1}}
    assert bench.parse_args([]).mixes == bench.MIXES
    for given, said in (("events=update:1", "the table is one of updates, scans"),
                        ("updates=write:1", "'write' is not a class"),
                        ("updates=update:x", "the share of update is not a number"),
                        ("updates=update:0.5", "the shares sum to 0.5, not 1"),
                        ("updates=update:1.5,scan:-0.5", "the share of update is not in [0, 1]")):
        with pytest.raises(SystemExit):
            bench.parse_args(["--mix", given])
        with pytest.raises(ValueError, match=said.replace("[", r"\[").replace("]", r"\]")):
            bench.parse_mixes([given])
