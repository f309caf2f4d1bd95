"""The measured memory curve (planner.model.memory_curve): the file's checks, the split it
advises, and a plan that carries it through kairos plan, explain and the metrics. The
fixture is the curve bench/memory_split_redis.py measured on the lab (docs/memory-split.md)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.errors import KairosError, ValidationError
from planner.model.memory_curve import advice_line, advise, load_curve
from planner.planning.split_step import with_split_step
from planner.workload.series import WorkloadSeries, save_trace

CURVE = Path(__file__).parent / "fixtures" / "memory" / "redis-maxmemory-curve.json"
HOSTS = ("redis1", "redis2", "redis3")


def test_the_lab_curve_advises_a_live_24mb_from_an_undersized_8mb() -> None:
    curve = load_curve(CURVE)
    assert curve.sizes_mib == (4.0, 48.0, 24.0, 12.0, 8.0) and curve.envelope_mib == 256
    got = advise(curve, current={"maxmemory": "8mb"}, mix={"read": 0.9, "write": 0.1})
    assert got["now"] == "8mb" and got["advised"] == "24mb" and got["changed"]
    assert got["change"] == "live"
    assert got["split_mib"] == {"maxmemory": 24.0, "os": 208.0, "overhead": 24.0}
    p = got["predicted"]
    assert p["hit_ratio_now"] == pytest.approx(0.799, abs=1e-3)  # measured at 8 MiB: 79.9 %
    assert p["hit_ratio"] == pytest.approx(0.987, abs=1e-3)
    assert p["reads_per_s"] > p["reads_per_s_now"]
    kept = advise(curve, current={"maxmemory": "24mb"}, mix={"read": 0.9, "write": 0.1})
    assert not kept["changed"] and "keep maxmemory 24mb" in advice_line(kept)
    # With no read weighing on the cache, a bigger one buys nothing: the OS keeps the room.
    idle = advise(curve, current={"maxmemory": "24mb"}, mix={"write": 1.0})
    assert idle["split_mib"]["maxmemory"] < 24


def _bad(tmp_path: Path, change: Any) -> Path:
    doc = json.loads(CURVE.read_text())
    change(doc)
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d.update(kind="x"), "kind"),
    (lambda d: d.update(parameter="hz"), "parameter"),
    (lambda d: d.update(points=d["points"][:1]), "points"),
    (lambda d: d["points"][1].update(hit_ratio=1.5), "points[1].hit_ratio"),
    (lambda d: d["miss_cost"].pop("share"), "miss_cost.share"),
    (lambda d: d["budget"].update(overhead_mib=300), "budget.overhead_mib"),
    (lambda d: d["budget"].update(unit_mib=1.5), "budget.unit_mib"),
])
def test_a_bad_curve_file_names_the_file_and_the_field(tmp_path: Path, change: Any,
                                                       field: str) -> None:
    path = _bad(tmp_path, change)
    with pytest.raises(ValidationError, match="^" + re.escape(f"{path}: {field}")):
        load_curve(path)
    missing = tmp_path / "absent.json"
    with pytest.raises(ValidationError, match=f"^{missing}: cannot read"):
        load_curve(missing)


@pytest.fixture
def forecast(tmp_path: Path) -> Path:
    n = 16
    save_trace(WorkloadSeries(
        engine="redis", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, 5e3),
        mix={"read": np.full(n, 0.9), "write": np.full(n, 0.1), "other": np.zeros(n)},
        step_seconds=20.0), tmp_path / "trace.csv")
    out = tmp_path / "forecast.json"
    assert main(["forecast", "--trace", str(tmp_path / "trace.csv"), "--horizon", "16",
                 "--model", "naive", "--out", str(out)]) == 0
    return out


def test_a_plan_made_with_the_curve_carries_its_advice_to_explain(
    forecast: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "current.yml").write_text("maxmemory: 8mb\n")
    plan = tmp_path / "plan.yml"
    argv = ["plan", "--forecast", str(forecast), "--engine", "redis", "--hosts",
            ",".join(HOSTS), "--horizon", "16", "--method", "dp", "--confidence", "0",
            "--scenarios", "0", "--current", str(tmp_path / "current.yml"), "-o", str(plan)]
    assert main([*argv, "--memory-curve", str(CURVE)]) == 0
    printed = capsys.readouterr().out
    assert "memory split (advice; docs/memory-split.md): maxmemory 8mb -> 24mb [live]" in printed
    doc = yaml.safe_load(plan.read_text())
    advice = doc["provenance"]["memory_split"]
    assert advice["figures"]["read_share"] == pytest.approx(0.9)
    # A live split is a step: due at the horizon's start, before any step of the optimiser.
    (split, *_rest) = doc["steps"]
    assert split["id"] == "s1" and split["target"] == {"maxmemory": "24mb"}
    assert split["live"] == ["maxmemory"] and split["restart"] == [] and not split["batches"]
    assert split["due"] == doc["horizon"]["start"]
    assert split["expected"]["cost_ops"] == 0.0 and split["expected"]["gains"] in (
        "throughput", "headroom")
    assert main(["explain", str(plan)]) == 0
    assert "predicted read hit ratio 79.9% -> 98.7%; rests on 5 measured size(s)" in \
        capsys.readouterr().out
    # Bad input is refused before anything is planned: the wrong engine's curve.
    assert main([*argv[:4], "cassandra", *argv[5:], "--memory-curve", str(CURVE)]) == 2
    assert "--memory-curve: " in capsys.readouterr().err


def test_the_autopilot_takes_a_curve_as_a_plan_option_checked_when_the_tick_starts(
    tmp_path: Path
) -> None:
    from planner.autopilot.tick import plan_request
    from planner.autopilot.tick_inputs import load_tick_inputs
    from tests.unit.test_tick_inputs import DOCUMENT

    doc = json.loads(json.dumps(DOCUMENT))
    doc["engine"] = "redis"
    doc["plan"] |= {"tables": [], "options": {"memory_curve": str(CURVE)}}
    path = tmp_path / "tick.inputs.json"
    path.write_text(json.dumps(doc))
    request = plan_request(load_tick_inputs(path), forecast=None, forecast_path="f.json",
                           ring=None, first={}, base=tmp_path / "p")
    assert request.memory_curve == str(CURVE)
    doc["plan"]["options"]["memory_curve"] = str(tmp_path / "absent.json")
    path.write_text(json.dumps(doc))
    with pytest.raises(ValidationError, match=r"tick.inputs.json: plan.options.memory_curve: "
                                              r".*absent.json: cannot read the memory curve"):
        load_tick_inputs(path)


# ------------------------------------------------------------------ the split as a step
START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _advice(**change: Any) -> dict[str, Any]:
    return {"parameter": "key_cache_size", "advised": "24MiB", "changed": True,
            "change": "live", "predicted": {"reads_per_s_now": 1000.0, "reads_per_s": 1500.0},
            **change}


def _step(sid: str, minutes: int, target: dict[str, Any]) -> dict[str, Any]:
    return {"id": sid, "due": (START + timedelta(minutes=minutes)).isoformat(),
            "until": (START + timedelta(minutes=10)).isoformat(), "target": target,
            "per_node": {}, "live": list(target), "restart": [], "batches": [],
            "expected": {"benefit_ops": 1.0, "cost_ops": 0.0, "net_ops": 1.0}}


def test_a_live_split_is_a_step_before_the_optimiser_s_or_joins_one_due_at_the_start() -> None:
    timing = {"start": START, "step_seconds": 60.0, "horizon": 10}
    # Saturated at the running size (load 1,200 > capacity 1,000): the step gains what the
    # predicted 1.5x capacity serves of the load above it, until the optimiser's step.
    later = [_step("s1", 4, {"concurrent_reads": 64})]
    steps = with_split_step(later, _advice(), **timing, capacity=[1000.0] * 10,
                            load=[1200.0] * 10)
    assert [s["id"] for s in steps] == ["s1", "s2"] and steps[1]["due"] == later[0]["due"]
    split = steps[0]
    assert split["target"] == {"key_cache_size": "24MiB"} and split["until"] == later[0]["due"]
    assert split["expected"]["benefit_ops"] == pytest.approx(200.0 * 60 * 4)
    assert split["expected"]["gains"] == "throughput"
    # Below saturation it adds headroom, not served work.
    quiet = with_split_step([], _advice(), **timing, capacity=[1000.0] * 10, load=[500.0] * 10)
    assert quiet[0]["expected"]["benefit_ops"] == 0.0
    assert quiet[0]["expected"]["gains"] == "headroom"
    assert quiet[0]["until"] == (START + timedelta(minutes=10)).isoformat()
    # The optimiser's step due at the start takes the split in.
    now = [_step("s1", 0, {"concurrent_reads": 64})]
    joined = with_split_step(now, _advice(), **timing, capacity=[1e3] * 10, load=[1e3] * 10)
    assert len(joined) == 1 and joined[0]["target"] == {"concurrent_reads": 64,
                                                        "key_cache_size": "24MiB"}
    assert joined[0]["live"] == ["concurrent_reads", "key_cache_size"]
    assert now[0]["target"] == {"concurrent_reads": 64}  # the caller's steps are not changed
    # Advice only: no change, or a change that needs a restart.
    for advice in (_advice(changed=False), _advice(change="restart"), None):
        assert with_split_step(later, advice, **timing, capacity=[1e3] * 10,
                               load=[1e3] * 10) == later


# ------------------------------------------------------------------ the Cassandra bench's reads
BENCH = Path(__file__).parents[2] / "bench"
_spec = importlib.util.spec_from_file_location("bench_memory_split_cassandra",
                                               BENCH / "memory_split_cassandra.py")
assert _spec is not None and _spec.loader is not None
cassandra_bench = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(BENCH))  # its lab_load, as when it runs from bench/
try:
    _spec.loader.exec_module(cassandra_bench)
finally:
    sys.path.remove(str(BENCH))
FIXTURES = Path(__file__).parent / "fixtures" / "memory"


def test_the_cassandra_bench_reads_nodetool_s_heap_gc_and_cache_capacities() -> None:
    """Captured from a lab node (nodetool gcstats and info, Cassandra 5.0)."""
    assert cassandra_bench.gc_total_ms((FIXTURES / "cassandra-gcstats.txt").read_text()) == 307
    info = (FIXTURES / "cassandra-info.txt").read_text()
    assert cassandra_bench.heap_mib(info) == (176.64, 512.0)
    assert cassandra_bench.parse_cache_capacities(info) == {"key": 25, "row": 0, "counter": 12}
    with pytest.raises(KairosError, match="gcstats printed no figures"):
        cassandra_bench.gc_total_ms("error: JMX connection refused\n")
    with pytest.raises(KairosError, match="Heap Memory"):
        cassandra_bench.heap_mib("Key Cache : entries 0")


CASSANDRA_CURVE = FIXTURES / "cassandra-key-cache-curve.json"


def test_the_lab_key_cache_curve_advises_a_live_key_cache_inside_the_held_heap() -> None:
    """The curve bench/memory_split_cassandra.py measured on the lab (docs/memory-split.md)."""
    curve = load_curve(CASSANDRA_CURVE)
    assert curve.engine == "cassandra" and curve.parameter == "key_cache_size"
    assert curve.heap_mib == 512 and 0 < curve.gc_live_mib < 512
    got = advise(curve, current={"key_cache_size": "2MiB"}, mix={"read": 0.9, "update": 0.1})
    split = got["split_mib"]
    assert got["change"] == "live" and split["heap_size"] == 512 and split["row_cache_size"] == 0
    assert 1 <= split["key_cache_size"] <= 512 / 2  # the heap's headroom
    assert split["heap_size"] + split["overhead"] + split["page_cache"] == curve.envelope_mib
    assert "heap 512 MiB (live set" in advice_line(got)
    # No read weighs on the key cache: the collector's cost alone keeps it at its smallest.
    assert advise(curve, current={"key_cache_size": "2MiB"},
                  mix={"update": 1.0})["split_mib"]["key_cache_size"] == 1


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["budget"].pop("heap_mib"), "budget.heap_mib"),
    (lambda d: d["budget"].pop("gc"), "budget.gc"),
    (lambda d: d["budget"]["gc"].update(live_mib=600), "budget.gc.live_mib"),
    (lambda d: d["budget"]["gc"].update(seconds_at_double=-1), "budget.gc.seconds_at_double"),
    (lambda d: d.update(parameter="row_cache_size"), "parameter"),
])
def test_a_bad_cassandra_curve_names_the_field(tmp_path: Path, change: Any, field: str) -> None:
    doc = json.loads(CASSANDRA_CURVE.read_text())
    change(doc)
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValidationError, match="^" + re.escape(f"{path}: {field}")):
        load_curve(path)


def test_a_cassandra_plan_made_with_the_key_cache_curve_steps_the_key_cache_live(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 16
    save_trace(WorkloadSeries(
        engine="cassandra", timestamps=1.7e9 + 20 * np.arange(n), load=np.full(n, 300.0),
        mix={"read": np.full(n, 0.9), "update": np.full(n, 0.1), "insert": np.zeros(n),
             "scan": np.zeros(n)}, step_seconds=20.0), tmp_path / "trace.csv")
    (tmp_path / "current.yml").write_text("key_cache_size: 25MiB\n")
    plan = tmp_path / "plan.yml"
    assert main(["plan", "--trace", str(tmp_path / "trace.csv"), "--forecast-model", "naive",
                 "--engine", "cassandra", "--hosts", "cass1,cass2,cass3", "--horizon", "16",
                 "--method", "dp", "--confidence", "0", "--scenarios", "0", "--current",
                 str(tmp_path / "current.yml"), "--memory-curve", str(CASSANDRA_CURVE),
                 "-o", str(plan)]) == 0
    assert "key_cache_size 25MiB -> 1MiB [live]" in capsys.readouterr().out
    doc = yaml.safe_load(plan.read_text())
    # The shipped prior proposes a change due at the start too: the split joins that step.
    first = doc["steps"][0]
    assert first["due"] == doc["horizon"]["start"]
    assert first["target"]["key_cache_size"] == "1MiB" and "key_cache_size" in first["live"]
    assert len(first["target"]) > 1 and all(
        "key_cache_size" not in s["target"] for s in doc["steps"][1:])
    assert main(["explain", str(plan)]) == 0
