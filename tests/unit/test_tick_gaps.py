"""The autopilot tick's history across a failover: the step a node's role changed in is
dropped by the store, and the tick interpolates it rather than failing its forecast."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from planner.autopilot.tick import MAX_FILL_STEPS, _pick_trace, fill_short_gaps
from planner.autopilot.tick_inputs import read_tick_inputs
from planner.errors import ValidationError
from planner.workload.series import WorkloadSeries, load_trace
from planner.workload.store import CounterSample, Store

STEP = 10.0
BASE = float(int(time.time()) // 10 * 10 - 200)  # inside the tick's history age


def _round(t: float, r: int, role: str) -> list[CounterSample]:
    """A primary at 100 reads/s and a second node that serves 50 writes/s once it is one."""
    return [
        CounterSample("m1", "node", t, {"read": 1000 * r, "write": 0, "other": 0, "ignored": 0},
                      started_at=0.0, instance="a", role="master"),
        CounterSample("r1", "node", t + 0.02,
                      {"read": 0, "write": 500 * r, "other": 0, "ignored": 0},
                      started_at=0.0, instance="b", role=role),
    ]


def _inputs(tmp_path: Path, store: Path) -> object:
    return read_tick_inputs({
        "state_dir": str(tmp_path), "cluster": "lab", "engine": "redis", "run": "r1",
        "started_at": "2026-12-04T00:00:00+00:00", "hosts": ["m1", "r1"],
        "history": {"store": str(store), "age": "1d", "step_seconds": STEP},
    })


def test_a_failover_step_is_interpolated_in_the_tick_s_trace(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    with Store(db) as store:
        for r in range(8):  # r1 is promoted between rounds 3 and 4
            t = BASE + STEP * r
            store.append_counters("redis", "lab", _round(t, r, "replica" if r < 4 else "master"),
                                  round_ts=t)
        assert store.cluster_series("redis", "lab", step_seconds=STEP).step_seconds is None
    path, note = _pick_trace(_inputs(tmp_path, db))  # type: ignore[arg-type]
    assert path is not None, note
    trace = load_trace(path)
    assert trace.step_seconds == STEP and len(trace) == 7
    assert "1 dropped step(s) (a restart or failover) interpolated" in note
    # the dropped step (1030) lies between 100 ops/s before and 150 after
    np.testing.assert_allclose(trace.load, [100, 100, 100, 125, 150, 150, 150], rtol=0.02)


def _series(times: list[float], step: float | None = None) -> WorkloadSeries:
    n = len(times)
    return WorkloadSeries(engine="redis", timestamps=np.array(times), load=np.arange(n) + 1.0,
                          mix={"read": np.full(n, 0.5), "write": np.full(n, 0.5),
                               "other": np.zeros(n)}, step_seconds=step)


def test_a_gap_longer_than_the_fill_cuts_the_history_before_it() -> None:
    long_gap = STEP * (MAX_FILL_STEPS + 2)  # MAX_FILL_STEPS + 1 steps missing
    times = [0, 10, 20, 20 + long_gap, 30 + long_gap, 50 + long_gap, 60 + long_gap]
    series, note = fill_short_gaps(_series(times), STEP)
    assert series.step_seconds == STEP
    assert series.timestamps.tolist() == [20 + long_gap + STEP * k for k in range(5)]
    assert f"cut before a gap of {MAX_FILL_STEPS + 1} dropped step(s)" in note
    assert "1 dropped step(s)" in note
    np.testing.assert_allclose(series.load, [4, 5, 5.5, 6, 7])


def test_a_regular_series_is_left_as_it_is() -> None:
    regular = _series([0, 10, 20], STEP)
    assert fill_short_gaps(regular, STEP) == (regular, "")


def test_one_point_after_a_long_gap_is_a_reason_to_wait() -> None:
    long_gap = STEP * (MAX_FILL_STEPS + 2)
    with pytest.raises(ValidationError, match=r"1 point\(s\) since a gap of 3 dropped step"):
        fill_short_gaps(_series([0.0, 10.0, 10.0 + long_gap]), STEP)
