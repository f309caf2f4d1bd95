"""bench/rollout.py's split of the overhead into what each batch adds and what the run pays
once, on the task spans of a real loaded run (tests/unit/fixtures/rollout/loaded_run.json)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_rollout", REPO / "bench" / "rollout.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

RUN = json.loads((REPO / "tests/unit/fixtures/rollout/loaded_run.json").read_text())
SPANS = [(name, float(start), float(seconds)) for name, start, seconds in RUN["spans"]]


def test_each_batch_spans_from_its_heartbeat_to_the_end_of_its_record() -> None:
    windows = bench.batch_spans(SPANS)
    assert len(windows) == 3
    heartbeats = [s for n, s, _ in SPANS if n.startswith("Keep the lock's heartbeat")]
    assert [a for a, _ in windows] == heartbeats
    records = [s + d for n, s, d in SPANS if n.startswith("Record the node verified")]
    assert [b for _, b in windows] == pytest.approx(records)
    # The step's final record is the run's, not the last batch's.
    final = next(s for n, s, _ in SPANS if n.startswith("Record the step applied"))
    assert windows[-1][1] <= final


def test_the_overhead_splits_into_batches_and_the_run_once() -> None:
    split = bench.overhead_split(SPANS, RUN["launched"], RUN["wall"], RUN["batches"],
                                 RUN["per_node"])
    windows = bench.batch_spans(SPANS)
    for (began, ended), batch in zip(windows, split["per_batch"], strict=True):
        own = RUN["per_node"][batch["hosts"][0]]["total"]
        assert batch["node_seconds"] == pytest.approx(own, abs=0.05)
        assert batch["overhead_seconds"] == pytest.approx(ended - began - own, abs=0.05)
        assert 0 < batch["overhead_seconds"] < batch["seconds"]
    in_batches = sum(b - a for a, b in windows)
    assert split["once_seconds"] == pytest.approx(RUN["wall"] - in_batches, abs=0.05)
    added = sum(b["overhead_seconds"] for b in split["per_batch"])
    owned = sum(b["node_seconds"] for b in split["per_batch"])
    assert split["batch_overhead_ratio"] == pytest.approx(added / owned, abs=0.01)
    assert split["start_to_first_task_seconds"] == pytest.approx(-RUN["launched"], abs=0.05)


def test_a_run_whose_batches_cannot_be_found_says_so_instead_of_a_figure() -> None:
    without_first = [s for s in SPANS if s[1] != bench.batch_spans(SPANS)[0][0]]
    split = bench.overhead_split(without_first, RUN["launched"], RUN["wall"], RUN["batches"],
                                 RUN["per_node"])
    assert split == {"error": "2 batch spans found for 3 batches"}


def test_hints_held_after_a_gate_are_named_with_how_long_after_it() -> None:
    gate = "cassandra : Sync gate - every peer sees the batch back, schemas agree, hints delivered"
    hints = "cassandra : Sync gate - no peer holds hints for the batch, the file it still writes"
    beat, record = "Keep the lock's heartbeat", "Record the node verified"
    spans = [(beat, 90.0, 0.1), (gate, 100.0, 0.5), (hints, 100.5, 0.5), (record, 101.2, 0.1),
             (beat, 120.0, 0.1), (gate, 130.0, 0.5), (record, 130.6, 0.1)]
    # The gates passed at 101 (its last gate, the hints') and 130.5.
    samples = [
        (100.5, "cass2", "cass1", 1),  # before cass1's gate passed: not late
        (104.0, "cass2", "cass1", 1),
        (109.0, "cass3", "cass1", 2),
        (112.0, "cass2", "cass1", 0),  # a row with no file left does not count
        (129.0, "cass1", "cass2", 1),  # before cass2's gate
    ]
    judged = bench.hints_after_gate(spans, [["cass1"], ["cass2"]], samples)
    assert judged == [
        {"hosts": ["cass1"], "held_by": ["cass2", "cass3"], "held_until_s_after_gate": 8.0},
        {"hosts": ["cass2"], "held_by": [], "held_until_s_after_gate": None},
    ]
