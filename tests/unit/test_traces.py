"""Synthetic traces: seeded, valid, and shaped like SOPHIA's three workloads."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.workload.traces import (
    GENERATORS,
    bus_tracking_like,
    hpc_queue_like,
    mgrast_like,
    reporting_like,
    synthetic_capacity,
    warehouse_like,
)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generators_are_seeded_and_valid(name: str) -> None:
    a = GENERATORS[name](steps=300, seed=4)
    b = GENERATORS[name](steps=300, seed=4)
    c = GENERATORS[name](steps=300, seed=5)
    assert np.array_equal(a.load, b.load) and not np.array_equal(a.load, c.load)
    assert a.engine == "cassandra" and len(a) == 300 and a.step_seconds
    assert np.allclose(a.mix_matrix().sum(axis=1), 1.0)
    assert np.all(a.load >= 0)


def test_mgrast_switches_abruptly_between_read_and_write() -> None:
    s = mgrast_like(steps=2000, step_seconds=30.0, seed=1)
    read = s.mix["read"]
    assert (read > 0.8).mean() > 0.25 and (read < 0.25).mean() > 0.25
    sharp = np.abs(np.diff(read)) > 0.5
    assert 50 < sharp.sum() < 400  # many sharp shifts, not every step


def test_mgrast_has_no_daily_pattern() -> None:
    s = mgrast_like(steps=2880 * 3, step_seconds=30.0, seed=2)
    read = s.mix["read"].reshape(3, 2880)
    day_to_day = np.corrcoef(read[0], read[1])[0, 1]
    assert abs(day_to_day) < 0.2


def test_bus_tracking_has_a_daily_scan_update_cycle() -> None:
    s = bus_tracking_like(steps=288 * 3, seed=3)
    hour = (s.timestamps % 86400) / 3600
    night = (hour >= 23) | (hour < 5)
    rush = (hour >= 7.5) & (hour < 9.5)
    assert s.mix["scan"][night].mean() > 0.7
    assert s.mix["update"][rush].mean() > 0.6
    days = s.mix["scan"].reshape(3, 288)
    assert np.corrcoef(days[0], days[1])[0, 1] > 0.8


def test_reporting_scans_all_day_but_in_the_ingestion_hours() -> None:
    s = reporting_like(steps=288 * 2, seed=4)
    hour = (s.timestamps % 86400) / 3600
    batch = (hour < 2) | ((hour >= 12) & (hour < 14))
    assert s.mix["update"][batch].mean() == pytest.approx(0.9, abs=0.01)
    assert s.mix["scan"][~batch].mean() == pytest.approx(0.9, abs=0.01)
    assert np.all(s.mix["read"] == 0.0) and np.all(s.mix["insert"] == 0.0)


def test_the_warehouse_day_has_quiet_hours_before_its_reports() -> None:
    s = warehouse_like(steps=288, seed=4)
    hour = (s.timestamps % 86400) / 3600
    quiet = ((hour >= 2) & (hour < 8)) | (hour >= 18)
    batch = (hour < 2) | ((hour >= 12) & (hour < 14))
    reports = ~quiet & ~batch
    assert s.mix["update"][quiet | batch].mean() == pytest.approx(0.9, abs=0.01)
    assert s.mix["scan"][reports].mean() == pytest.approx(0.9, abs=0.01)
    assert s.load[quiet].mean() / s.load[reports].mean() == pytest.approx(0.2, abs=0.02)
    assert s.load[batch].mean() / s.load[reports].mean() == pytest.approx(1.5, abs=0.05)


def test_hpc_jobs_alternate_write_read_write_phases() -> None:
    s = hpc_queue_like(steps=1440, seed=1, concurrency=1)
    write = s.mix["insert"] + s.mix["update"]
    assert (write > 0.9).mean() > 0.2 and (write < 0.1).mean() > 0.2
    smooth = hpc_queue_like(steps=1440, seed=1, concurrency=10)
    w10 = smooth.mix["insert"] + smooth.mix["update"]
    assert np.std(np.diff(w10)) < np.std(np.diff(write))  # more jobs, smoother aggregate


def test_synthetic_capacity_reproduces_sophias_example_scale() -> None:
    read_heavy = np.array([[0.95, 0.02, 0.03, 0.0]])
    cap = synthetic_capacity(read_heavy, n_candidates=16, seed=0)
    assert cap.shape == (1, 16)
    assert 38_000 < cap[0, 0] < 43_000  # default: ~40k on a read-heavy mix
    assert cap[0].max() > 1.15 * cap[0, 0]  # a read-optimised candidate does better


def test_bad_arguments() -> None:
    with pytest.raises(ValidationError, match=r"steps: a trace needs at least 2"):
        mgrast_like(steps=1)
    with pytest.raises(ValidationError, match=r"mix: expected"):
        synthetic_capacity(np.ones((3, 2)))
