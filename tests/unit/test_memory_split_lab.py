"""bench/memory_split_lab.py: what the two memory-split benches share, run without a lab
(the executor, the meter and the clock are fakes)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from planner.errors import KairosError
from planner.model.memory_curve import parse_curve
from planner.model.memory_split import MIB

REPO = Path(__file__).parents[2]
BENCH = REPO / "bench"
if str(REPO / "module_utils") not in sys.path:
    sys.path.append(str(REPO / "module_utils"))  # as the benches do: after library/
_spec = importlib.util.spec_from_file_location("bench_memory_split_lab",
                                               BENCH / "memory_split_lab.py")
assert _spec is not None and _spec.loader is not None
lab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab)


def test_the_run_document_names_the_command_and_when_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = lab.run_document("memory_split_redis.py", ["--out", "x.json"])
    assert doc["command"] == "bench/memory_split_redis.py --out x.json"
    assert doc["started_at"].endswith("+00:00")
    monkeypatch.setattr(sys, "argv", ["memory_split_redis.py", "--keep"])
    assert lab.run_document("memory_split_redis.py", None)["command"] == (
        "bench/memory_split_redis.py --keep")


def test_the_lab_executor_only_applies_through_the_named_playbook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("planner.calibrate.bench.find_ansible_playbook",
                        lambda: "/bin/ansible-playbook")
    load = object()
    ex = lab.lab_executor(load, playbook="change_settings_redis.yml", rollout_cl="ONE",
                          log_name="memory-split.log")
    assert ex.load is load and ex.warmup_seconds == 0.0 and ex.measure_seconds == 0.0
    assert ex.playbook == (REPO / "playbooks" / "change_settings_redis.yml").resolve()
    assert ex.inventory == (REPO / "inventories" / "local" / "hosts.yml").resolve()
    assert ex.rollout_cl == "ONE" and ex.log_path == REPO / ".kairos" / "memory-split.log"
    assert ex.log is lab.say


def test_the_curve_document_fits_the_windows_and_says_what_a_miss_costs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "argv", ["memory_split_redis.py", "--grid-mib", "4:8:4"])
    windows = [{"hit_ratio": h, "reads_per_s": 1 / (0.001 + 0.002 * (1 - h)), "maxmemory_mib": s}
               for h, s in ((0.3, 4.0), (0.6, 8.0), (0.8, 16.0))]
    doc = lab.curve_document(windows, script="memory_split_redis.py", engine="redis",
                             parameter="maxmemory", size_key="maxmemory_mib", share=0.9,
                             miss="a miss", envelope_mib=512, overhead_mib=4, unit_mib=2,
                             fork_room_mib=20.0)
    assert doc["command"] == "bench/memory_split_redis.py --grid-mib 4:8:4"
    assert [p["size_mib"] for p in doc["points"]] == [4.0, 8.0, 16.0]
    assert doc["budget"] == {"envelope_mib": 512, "overhead_mib": 4, "unit_mib": 2,
                             "fork_room_mib": 20.0}
    curve = parse_curve(doc, "the test's windows")
    assert curve.cost.base_seconds == pytest.approx(0.001)
    assert curve.cost.slope_seconds == pytest.approx(0.002)
    said = capsys.readouterr().out
    assert "a miss costs 2222 us of the cluster's time per read (1/reads = 1000 us + 2000 us x " \
           "miss ratio, R2 1.00)" in said


class _Meter:
    def __init__(self, windows: list[dict[str, Any]]) -> None:
        self.windows = windows

    def settled_window(self, _args: argparse.Namespace) -> dict[str, Any]:
        if not self.windows:
            raise KairosError("a 20-s window saw no load (is it running?)")
        return self.windows.pop(0)


class _Executor:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    def apply(self, changes: dict[str, Any]) -> None:
        self.applied.append(changes)


def test_the_live_change_measures_at_the_start_applies_and_measures_after(
    capsys: pytest.CaptureFixture[str],
) -> None:
    executor, probed = _Executor(), []
    change = lab.LiveChange(executor, "maxmemory")
    args = argparse.Namespace(start="8mb")
    before, after = change.before_and_after(
        _Meter([{"hit_ratio": 0.5}, {"hit_ratio": 0.8}]), args, "24mb",
        back_to_start=lambda: probed.append(True),
        before_line=lambda w: f"b {w['hit_ratio']}", after_line=lambda w: f"a {w['hit_ratio']}")
    assert (before, after) == ({"hit_ratio": 0.5}, {"hit_ratio": 0.8})
    assert probed == [True] and executor.applied == [{"maxmemory": "24mb"}] and change.applied
    said = [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert said == ["before: the nodes back at 8mb", "before: b 0.5",
                    "applying maxmemory 24mb through the executor, under load", "after: a 0.8"]


def test_a_live_change_that_fails_after_applying_counts_as_applied() -> None:
    """The run's ending must not put a probe's size back over the applied split."""
    change = lab.LiveChange(_Executor(), "key_cache_size")
    with pytest.raises(KairosError):
        change.before_and_after(_Meter([{"hit_ratio": 0.5}]), argparse.Namespace(start="2MiB"),
                                "8MiB", back_to_start=lambda: None, before_line=str,
                                after_line=str)
    assert change.applied
    unapplied = lab.LiveChange(_Executor(), "key_cache_size")
    with pytest.raises(KairosError):
        unapplied.before_and_after(_Meter([]), argparse.Namespace(start="2MiB"), "8MiB",
                                   back_to_start=lambda: None, before_line=str, after_line=str)
    assert not unapplied.applied


class _Cost:
    @staticmethod
    def ops_per_second(hit_ratio: float) -> float:
        return 1000.0 * hit_ratio


class _Curve:
    cost = _Cost()


class _Refinement:
    sizes_bytes = (4 * MIB, 8 * MIB)


def test_the_findings_and_the_served_change_beside_the_prediction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lab.kairos_cgroup, "held", lambda names: {"held": names})
    advice = {"advised": "8MiB", "predicted": {"hit_ratio": 0.82, "reads_per_s": 1350.0}}
    before = {"hit_ratio": 0.5, "reads_per_s": 1000.0}
    after = {"hit_ratio": 0.8, "reads_per_s": 1300.0}
    found = lab.findings(windows=[], refinement=_Refinement(), figures={"f": 1}, doc={"d": 1},
                         curve=_Curve(), advice=advice, start="2MiB", before=before,
                         after=after, nodes={"cass1": "127.0.0.1", "cass2": "127.0.0.2"})
    assert found == {
        "windows": [], "refinement_sizes_mib": [4.0, 8.0], "figures": {"f": 1},
        "curve": {"d": 1}, "advice": advice, "start": "2MiB", "chosen": "8MiB",
        "before": before, "after": after,
        "predicted": {"hit_ratio": 0.82, "reads_per_s": 1350.0, "reads_per_s_before": 500.0},
        "environment": {"held": ["lab-cass1", "lab-cass2"]},
    }
    assert lab.served_change(found) == (
        "50.0% -> 80.0% (predicted 82.0%); reads served 1000 -> 1300/s, +30% (predicted "
        "500 -> 1350, +170%)")


def test_a_load_that_does_not_stop_is_recorded_as_the_runs_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from planner.loadgen.run import LoadError

    class Stuck:
        def stop(self, **kw: Any) -> Any:
            raise LoadError(f"load workers did not finish within {kw['timeout']:.0f} s after stop")

    result: dict[str, Any] = {}
    assert lab.stop_load(Stuck(), result, timeout=30) is None
    assert result["error"] == "the load: load workers did not finish within 30 s after stop"
    out = tmp_path / "run.json"
    assert lab.finish(result, None, out, lambda r: None) == 1  # written, and a failure
    assert '"load": null' in out.read_text()
    assert "did not stop cleanly" in capsys.readouterr().out
    earlier = {"error": "the executor failed"}  # the first error is the one kept
    lab.stop_load(Stuck(), earlier, timeout=30)
    assert earlier["error"] == "the executor failed"


def test_a_run_that_stops_records_its_error_and_puts_the_nodes_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from planner.loadgen.run import LoadError

    said: list[str] = []

    class Load:
        def start(self) -> None:
            said.append("started")

        def stop(self, **kw: Any) -> Any:
            said.append(f"stopped {kw}")
            raise LoadError("load workers did not finish")

    def measure(result: dict[str, Any]) -> None:
        result["windows"] = []
        raise KairosError("a 20-s window saw no load (is it running?)")

    out = tmp_path / "run.json"
    code = lab.run_under_load("memory_split_redis.py", ["--out", str(out)], Load(), measure,
                              out=out, report=lambda r: said.append("reported"),
                              restore=lambda: said.append("restored"), timeout=30)
    assert code == 1
    assert said == ["started", "stopped {'timeout': 30}", "restored"]  # no report: no "after"
    doc = json.loads(out.read_text())
    assert doc["error"] == "a 20-s window saw no load (is it running?)"  # the first error
    assert doc["windows"] == [] and doc["load"] is None
    assert doc["command"].startswith("bench/memory_split_redis.py --out ")
    assert "stopped: a 20-s window saw no load" in capsys.readouterr().out


class _ScriptedMeter(lab.SettlingMeter):
    """Settle windows read from a script, each taking its seconds of a fake clock."""

    def __init__(self, script: list[tuple[float, int]], clock: list[float]) -> None:
        super().__init__()
        self.script, self.clock = list(script), clock

    def window(self, seconds: float) -> dict[str, Any]:
        self.clock[0] += seconds
        hit_ratio, fill = self.script.pop(0)
        return {"hit_ratio": hit_ratio, "fill": fill}


def _settle(script: list[tuple[float, int]], seconds_max: float,
            monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], int]:
    clock = [0.0]
    monkeypatch.setattr(lab.time, "monotonic", lambda: clock[0])
    meter = _ScriptedMeter(script, clock)
    return meter.settled(seconds_max), len(meter.script)


def test_a_cache_still_filling_is_not_settled_though_its_hit_ratio_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The hit ratio holds within a point while the entries grow 5 % a window: the old rule
    # (two windows within 2 points) settled at the second window.
    filling = [(0.81 + 0.002 * i, 10_000 + 500 * i) for i in range(12)]
    got, left = _settle(filling, 30.0, monkeypatch)
    assert got == {"settled_seconds": 30, "settled": False, "hit_ratio_span": 0.004,
                   "fill_span": pytest.approx(1000 / 12_500, abs=1e-4)}
    assert left == 6


def test_a_full_cache_with_a_steady_hit_ratio_settles_after_three_windows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    steady = [(0.50, 4_000), (0.90, 9_000), (0.91, 9_990), (0.92, 10_000), (0.915, 10_050),
              (0.91, 10_020)]
    got, left = _settle(steady, 60.0, monkeypatch)
    assert got["settled"] and got["settled_seconds"] == 25 and left == 1
    assert got["hit_ratio_span"] == pytest.approx(0.01)


def test_a_hit_ratio_rising_slowly_over_three_windows_is_not_settled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rising = [(0.80 + 0.011 * i, 10_000) for i in range(8)]
    got, _ = _settle(rising, 40.0, monkeypatch)
    assert not got["settled"] and got["hit_ratio_span"] == pytest.approx(0.022)


def test_a_window_that_did_not_settle_is_measured_said_and_marked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clock = [0.0]
    monkeypatch.setattr(lab.time, "monotonic", lambda: clock[0])
    script = [(0.5, 1_000), (0.6, 2_000), (0.8, 4_000)]  # two settle windows, the measured
    meter = _ScriptedMeter(script, clock)
    w = meter.settled_window(argparse.Namespace(settle_max=10.0, window=20.0))
    assert w["settled"] is False and w["hit_ratio"] == 0.8 and not meter.script
    assert "not settled after 10 s (the last 3 windows: hit ratio within 10.0%, entries " \
           "within 50.0%)" in capsys.readouterr().out
