"""Workload series: validation, CSV/JSON round trips, resampling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.workload.series import (
    CASSANDRA_CLASSES,
    REDIS_CLASSES,
    WorkloadSeries,
    classes_for,
    load_trace,
    load_traces,
    resample,
    save_trace,
)


def _series(n: int = 6, step: float | None = 60.0, **over: object) -> WorkloadSeries:
    rng = np.random.default_rng(1)
    raw = rng.dirichlet(np.ones(4), size=n)
    kwargs: dict[str, object] = {
        "engine": "cassandra",
        "timestamps": 1_700_000_000.0 + 60.0 * np.arange(n),
        "load": rng.uniform(100, 200, n),
        "mix": {c: raw[:, j] for j, c in enumerate(CASSANDRA_CLASSES)},
        "step_seconds": step,
    }
    kwargs.update(over)
    return WorkloadSeries(**kwargs)  # type: ignore[arg-type]


def _mix(rows: list[list[float]]) -> dict[str, np.ndarray]:
    arr = np.array(rows, dtype=float)
    return {c: arr[:, j] for j, c in enumerate(CASSANDRA_CLASSES)}


def test_classes_for_engines() -> None:
    assert classes_for("cassandra") == ("read", "update", "insert", "scan")
    assert classes_for("redis") == REDIS_CLASSES
    with pytest.raises(ValidationError, match="unknown engine"):
        classes_for("mysql")


def test_valid_series_and_mix_at() -> None:
    s = _series()
    assert len(s) == 6
    assert sum(s.mix_at(3).values()) == pytest.approx(1.0)
    assert s.mix_matrix().shape == (6, 4)


@pytest.mark.parametrize(
    ("over", "match"),
    [
        (
            {"timestamps": np.array([0.0, 60, 30, 90, 120, 150])},
            r"timestamps: row 2: time goes backwards",
        ),
        (
            {"timestamps": np.array([0.0, 60, 60, 90, 120, 150])},
            r"timestamps: row 2: time repeats",
        ),
        ({"load": np.array([1.0, 2, np.nan, 4, 5, 6])}, r"load: row 2: value is nan"),
        ({"load": np.array([1.0, 2, 3, -4, 5, 6])}, r"load: row 3: negative load"),
        ({"load": np.ones(5)}, r"load: has 5 values for 6 timestamps"),
        (
            {"mix": _mix([[0.5, 0.5, 0, 0]] * 4 + [[1.2, -0.2, 0, 0], [0.5, 0.5, 0, 0]])},
            r"mix\[read\]: row 4: fraction 1.2 is outside \[0, 1\]",
        ),
        (
            {"mix": _mix([[0.5, 0.5, 0, 0]] * 5 + [[0.5, 0.4, 0, 0]])},
            r"mix: row 5: fractions sum to 0.9, not 1",
        ),
        (
            {"mix": _mix([[0.5, 0.5, 0, 0]] * 5 + [[0.5, np.nan, 0, 0]])},
            r"mix\[update\]: row 5: value is nan",
        ),
        ({"mix": {"read": np.ones(6)}}, r"missing \['update', 'insert', 'scan'\]"),
        (
            {"engine": "redis"},
            r"mix: redis classes are \['read', 'write', 'other'\]; unknown \[",
        ),
        (
            {"timestamps": np.array([0.0, 60, 120, 300, 360, 420])},
            r"timestamps: row 3: gap of 180s where the step is 60s",
        ),
        ({"step_seconds": -5.0}, r"step_seconds: must be positive"),
        ({"timestamps": np.array([0.0]), "load": [1.0], "mix": _mix([[1, 0, 0, 0]])}, "at least 2"),
    ],
)
def test_bad_series_raise_clear_errors(over: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        _series(**over)


def test_small_rounding_in_mix_is_renormalised() -> None:
    s = _series(mix=_mix([[0.333, 0.333, 0.333, 0.0]] * 6))
    assert s.mix_matrix().sum(axis=1) == pytest.approx(np.ones(6), abs=1e-12)


def test_series_arrays_are_read_only() -> None:
    s = _series()
    with pytest.raises(ValueError, match="read-only"):
        s.load[0] = 5.0


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    s = _series(scope="node:cass1")
    path = tmp_path / f"trace{suffix}"
    save_trace(s, path)
    back = load_trace(path)
    assert back.engine == "cassandra"
    assert back.scope == "node:cass1"
    assert back.step_seconds == 60.0
    np.testing.assert_allclose(back.timestamps, s.timestamps)
    np.testing.assert_allclose(back.load, s.load)
    np.testing.assert_allclose(back.mix_matrix(), s.mix_matrix(), atol=1e-9)


def test_csv_with_iso_timestamps_and_inferred_redis_engine(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text(
        "timestamp,load,read,write,other\n"
        "2026-11-21T12:00:00+00:00,1000,0.8,0.2,0\n"
        "2026-11-21T12:00:20+00:00,1100,0.7,0.3,0\n"
        "2026-11-21T12:00:40,1200,0.6,0.3,0.1\n"
    )
    s = load_trace(path)
    assert s.engine == "redis"
    assert s.step_seconds == 20.0
    assert s.timestamps[0] == pytest.approx(1_795_262_400.0)


def test_csv_with_several_scopes(tmp_path: Path) -> None:
    path = tmp_path / "scopes.csv"
    path.write_text(
        "timestamp,scope,load,read,update,insert,scan\n"
        "0,node:a,1,1,0,0,0\n60,node:a,1,1,0,0,0\n"
        "0,node:b,2,0,1,0,0\n60,node:b,2,0,1,0,0\n"
    )
    assert sorted(load_traces(path)) == ["node:a", "node:b"]
    assert load_trace(path, scope="node:b").load[0] == 2.0
    with pytest.raises(ValidationError, match=r"holds scopes \['node:a', 'node:b'\]; choose one"):
        load_trace(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("timestamp,load,read,update,insert\n0,1,1,0,0\n", "cannot tell the engine"),
        (
            "timestamp,load,read,update,insert,scan\n0,1,1,0,0,0\n60,x,1,0,0,0\n",
            r"load: row 1: 'x'",
        ),
        (
            "timestamp,load,read,update,insert,scan\n0,1,1,0,0,0\nyesterday,1,1,0,0,0\n",
            r"timestamp: row 1: 'yesterday' is neither",
        ),
        (
            "timestamp,load,read,update,insert,scan\n0,1,1,0,0,0\n60,,1,0,0,0\n",
            r"load: row 1: value is nan",
        ),
        (
            "engine,timestamp,load,read,update,insert,scan\nredis,0,1,1,0,0,0\n",
            r"write: column missing",
        ),
    ],
)
def test_bad_csv_raise_clear_errors(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValidationError, match=match):
        load_trace(path)


def test_missing_file_and_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no such file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(ValidationError, match=r"unknown format '\.txt'"):
        load_trace(tmp_path / "trace.txt")


def test_bad_json_raise_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValidationError, match="not valid JSON"):
        load_trace(path)
    path.write_text('{"engine": "cassandra", "timestamps": [0, 1]}')
    with pytest.raises(ValidationError, match="load: missing"):
        load_trace(path)


def test_resample_aggregates_load_and_weights_mix_by_load() -> None:
    s = WorkloadSeries(
        engine="cassandra",
        timestamps=np.array([0.0, 10, 20, 30]),
        load=np.array([100.0, 300, 50, 50]),
        mix=_mix([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]),
    )
    r = resample(s, 20)
    assert r.step_seconds == 20
    np.testing.assert_allclose(r.load, [200.0, 50.0])
    assert r.mix_at(0) == pytest.approx({"read": 0.25, "update": 0.75, "insert": 0, "scan": 0})
    assert r.mix_at(1) == pytest.approx({"read": 0, "update": 0, "insert": 0.5, "scan": 0.5})


def test_resample_reports_gaps_unless_filling_is_allowed() -> None:
    s = WorkloadSeries(
        engine="cassandra",
        timestamps=np.array([0.0, 10, 40, 50]),
        load=np.array([100.0, 100, 200, 200]),
        mix=_mix([[1, 0, 0, 0]] * 4),
    )
    with pytest.raises(ValidationError, match=r"gap of 2 empty 10s step\(s\) starting at 20"):
        resample(s, 10)
    filled = resample(s, 10, max_fill=2)
    np.testing.assert_allclose(filled.load, [100, 100, 133.333333, 166.666667, 200, 200])
    with pytest.raises(ValidationError, match="step_seconds: must be positive"):
        resample(s, 0)
