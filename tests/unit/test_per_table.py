"""planner.planning.per_table: each table's compaction strategy by its own mix (MeT, seeds/001).

The shipped prior's compaction terms favour LeveledCompactionStrategy for reads and hurt
writes with it, so a read-heavy table should get LCS and a write-heavy one keep STCS.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.forecast.results import Forecast, save_forecast
from planner.model.performance import load_default_model
from planner.model.spaces import get_space
from planner.plan import load_plan
from planner.planning.per_table import (
    TableWorkload,
    choose_per_table,
    harmonic_capacity,
    with_per_table,
)

STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"
UCS = "UnifiedCompactionStrategy"
T = 6
STEP = 300.0
MODEL = load_default_model("cassandra")
CONFIG = get_space("cassandra").complete({})


def _table(load: float | np.ndarray, read: float, scan: float = 0.0) -> TableWorkload:
    """A table's forecast: ``read`` of its operations reads, the rest update."""
    return TableWorkload(np.broadcast_to(np.asarray(load, dtype=float), (T,)).copy(),
                         np.tile([read, 1 - read - scan, 0.0, scan], (T, 1)))


def _seconds(seconds: float) -> Any:
    return lambda _key, _old, _new: seconds


def _choose(tables: dict[str, TableWorkload], **kw: Any) -> Any:
    base: dict[str, Any] = {
        "model": MODEL, "configs": [CONFIG] * T, "running": CONFIG, "tables": tables,
        "step_seconds": STEP, "change_seconds": _seconds(120.0), "served": "offered",
    }
    return choose_per_table(**(base | kw))


def test_a_read_heavy_table_gets_lcs_and_a_write_heavy_one_keeps_stcs() -> None:
    # 50,000 ops/s saturates the prior's cluster (~6,000-11,000 ops/s): capacity is served.
    found = _choose({"shop.events": _table(50_000, 0.05), "shop.profiles": _table(50_000, 0.95)})
    events, profiles = found.tables["shop.events"], found.tables["shop.profiles"]
    assert profiles.override and profiles.values == ({"compaction": LCS},)
    assert profiles.capacity_chosen > profiles.capacity_cluster
    assert profiles.gain_ops > profiles.cost_ops > 0
    assert not events.override and events.values == ({"compaction": STCS},)
    assert events.reason == "the cluster-wide value is already its best"
    assert found.overrides(0) == {"shop.profiles": {"compaction": LCS}}
    assert found.gain_ops == pytest.approx(profiles.gain_ops)
    assert found.cost_ops == pytest.approx(profiles.cost_ops)


def test_on_an_lcs_cluster_the_write_heavy_table_gets_stcs() -> None:
    lcs = {**CONFIG, "compaction": LCS}
    found = _choose({"shop.events": _table(50_000, 0.05), "shop.profiles": _table(50_000, 0.95)},
                    configs=[lcs] * T, running=lcs)
    assert found.overrides(0) == {"shop.events": {"compaction": STCS}}
    assert not found.tables["shop.profiles"].override


def test_the_separable_argmax_is_the_best_of_every_assignment() -> None:
    # Three tables, three strategies: 27 assignments, each valued by the harmonic capacity.
    tables = {"ks.a": _table(np.linspace(100, 900, T), 0.9),
              "ks.b": _table(np.linspace(700, 200, T), 0.1),
              "ks.c": _table(400.0, 0.5, scan=0.2)}
    values = (STCS, LCS, UCS)
    own = {name: {v: MODEL.predict_matrix(
        [dict(zip(MODEL.classes, w.mix[0].tolist(), strict=True))],
        [{**CONFIG, "compaction": v}])[0][0, 0] for v in values} for name, w in tables.items()}
    loads = np.stack([w.load for w in tables.values()])

    def capacity(assignment: tuple[str, ...]) -> float:
        caps = np.stack([np.full(T, own[n][v]) for n, v in zip(tables, assignment, strict=True)])
        return float(np.sum(harmonic_capacity(loads, caps)))

    brute = max(itertools.product(values, repeat=len(tables)), key=capacity)
    # served = capacity and no change cost: every table whose best differs is taken
    found = _choose(tables, values={"compaction": values}, served="capacity",
                    change_seconds=_seconds(0.0))
    assert tuple(c.values[0]["compaction"] for c in found.tables.values()) == brute
    assert tuple(max(own[n], key=own[n].__getitem__) for n in tables) == brute
    stay = capacity((STCS,) * len(tables))
    assert found.gain_ops == pytest.approx((capacity(brute) - stay) * STEP, rel=1e-9)


def test_a_table_whose_gain_does_not_beat_its_cost_keeps_the_cluster_value() -> None:
    # 1,000 ops/s: far below capacity, served work does not grow with capacity
    found = _choose({"shop.events": _table(500, 0.05), "shop.profiles": _table(500, 0.95)})
    profiles = found.tables["shop.profiles"]
    assert profiles.best == ({"compaction": LCS},)
    assert not profiles.override and profiles.values == ({"compaction": STCS},)
    assert profiles.gain_ops == 0.0 and profiles.cost_ops > 0
    assert profiles.reason is not None and "does not beat its change cost" in profiles.reason
    assert found.overrides(0) == {} and found.gain_ops == 0.0 and found.cost_ops == 0.0


def test_the_cost_of_one_tables_change_is_scaled_by_its_share_of_the_load() -> None:
    tables = {"ks.big": _table(45_000, 0.05), "ks.read": _table(5_000, 0.95)}
    found = _choose(tables)
    own = [MODEL.predict_matrix([dict(zip(MODEL.classes, w.mix[0].tolist(), strict=True))],
                                [CONFIG])[0][0, 0] for w in tables.values()]
    # saturated: the cluster-wide plan serves its capacity; 120 s of it, times 10 %
    capacity = harmonic_capacity(np.array([[45_000.0], [5_000.0]]), np.array([[own[0]],
                                                                              [own[1]]]))[0]
    assert found.tables["ks.read"].cost_ops == pytest.approx(120.0 * capacity * 0.1)


def test_a_step_that_changes_the_node_level_config_may_change_the_choice() -> None:
    # The cluster goes to LCS at time point 3: the read table's override is needed only
    # before it, the write table's only after it; each change is charged where it starts.
    lcs = {**CONFIG, "compaction": LCS}
    configs = [CONFIG] * 3 + [lcs] * 3
    found = _choose({"ks.w": _table(50_000, 0.05), "ks.r": _table(50_000, 0.95)},
                    configs=configs)
    assert found.starts == (0, 3)
    assert found.overrides(0) == {"ks.r": {"compaction": LCS}}
    assert found.overrides(1) == {"ks.w": {"compaction": STCS}}
    # both follow the table's own best value throughout: nothing changes at time point 3
    assert found.changes(1) == ()
    assert found.segment_cost_ops[1] == 0.0 and found.segment_cost_ops[0] > 0


def test_the_load_no_table_forecast_names_runs_the_cluster_value() -> None:
    alone = _choose({"ks.r": _table(20_000, 0.95)})
    crowded = _choose({"ks.r": _table(20_000, 0.95)}, rest=_table(30_000, 0.05))
    # the rest dilutes the read table's share of cluster time, so its gain shrinks
    assert 0 < crowded.tables["ks.r"].gain_ops < alone.tables["ks.r"].gain_ops


# ------------------------------------------------------------------ the plan's steps
START = datetime(2025, 1, 1, tzinfo=UTC)


def _iso(t: int) -> str:
    return (START + timedelta(seconds=t * STEP)).isoformat()


def _optimiser_step(t: int) -> dict[str, Any]:
    """A step as steps_from_evaluation writes it: a live node-level change due at ``t``."""
    return {"id": "s1", "due": _iso(t), "until": _iso(T), "target": {"concurrent_reads": 64},
            "per_node": {}, "live": ["concurrent_reads"], "restart": [], "batches": [],
            "expected": {"benefit_ops": 10.0, "cost_ops": 0.0, "net_ops": 10.0}}


def test_an_override_that_pays_in_the_hold_gets_a_step_due_at_the_start() -> None:
    reads = {**CONFIG, "concurrent_reads": 64}
    found = _choose({"shop.events": _table(50_000, 0.05), "shop.profiles": _table(50_000, 0.95)},
                    configs=[CONFIG] * 2 + [reads] * (T - 2))
    steps = with_per_table([_optimiser_step(2)], found, tables=["shop.events", "shop.profiles"],
                           start=START, step_seconds=STEP, n_steps=T)
    assert [s["id"] for s in steps] == ["s1", "s2"]
    first, second = steps
    assert (first["due"], first["until"], first["target"]) == (_iso(0), _iso(2), {})
    assert first["per_table"] == {"shop.profiles": {"compaction": LCS}}
    assert first["tables"] == ["shop.events", "shop.profiles"]
    assert first["live"] == ["compaction"] and first["restart"] == []
    ex = first["expected"]
    assert ex["benefit_ops"] == pytest.approx(found.segment_gain_ops[0])
    assert ex["cost_ops"] == pytest.approx(found.segment_cost_ops[0]) and ex["cost_ops"] > 0
    assert ex["net_ops"] == pytest.approx(ex["benefit_ops"] - ex["cost_ops"])
    # the override holds for its step only: the next step repeats it, changing no table
    assert second["per_table"] == {"shop.profiles": {"compaction": LCS}}
    assert second["live"] == ["concurrent_reads"] and "tables" not in second
    assert second["expected"]["benefit_ops"] == pytest.approx(10.0 + found.segment_gain_ops[1])
    assert second["expected"]["cost_ops"] == 0.0


def test_a_plan_that_holds_gets_one_per_table_step_over_the_horizon() -> None:
    found = _choose({"shop.profiles": _table(50_000, 0.95)})
    (step,) = with_per_table([], found, tables=["shop.profiles"], start=START,
                             step_seconds=STEP, n_steps=T)
    assert (step["id"], step["due"], step["until"]) == ("s1", _iso(0), _iso(T))
    assert step["per_table"] == {"shop.profiles": {"compaction": LCS}}


def test_without_an_override_that_pays_the_steps_are_left_as_they_were() -> None:
    reads = {**CONFIG, "concurrent_reads": 64}
    found = _choose({"shop.profiles": _table(500, 0.95)}, configs=[CONFIG] * 2 + [reads] * (T - 2))
    steps = with_per_table([_optimiser_step(2)], found, tables=["shop.profiles"], start=START,
                           step_seconds=STEP, n_steps=T)
    assert steps == [_optimiser_step(2)]


# ------------------------------------------------------------------ kairos plan
def _forecast_file(path: Path, *, load: float, read: float, start: float = 1.7e9,
                   step: float = STEP, n: int = 12) -> Path:
    t = start + step * np.arange(n)
    mix = {"read": np.full(n, read), "update": np.full(n, 1 - read), "insert": np.zeros(n),
           "scan": np.zeros(n)}
    level = np.full(n, load)
    save_forecast(Forecast("cassandra", t, level, 0.9 * level, 1.1 * level, mix, mix, mix,
                           level=0.9, model="naive", step_seconds=step), path)
    return path


@pytest.fixture()
def forecasts(tmp_path: Path) -> dict[str, Path]:
    return {
        "main": _forecast_file(tmp_path / "main.json", load=60_000, read=0.5),
        "events": _forecast_file(tmp_path / "events.json", load=30_000, read=0.05),
        "profiles": _forecast_file(tmp_path / "profiles.json", load=30_000, read=0.95),
        "late": _forecast_file(tmp_path / "late.json", load=100, read=0.5, start=1.7e9 + STEP),
        "coarse": _forecast_file(tmp_path / "coarse.json", load=100, read=0.5, step=2 * STEP),
        "short": _forecast_file(tmp_path / "short.json", load=100, read=0.5, n=6),
    }


def _plan(forecasts: dict[str, Path], *table_forecast: str) -> list[str]:
    out = ["plan", "--forecast", str(forecasts["main"]), "--horizon", "12", "--method", "dp",
           "--served", "offered", "--scenarios", "0", "--confidence", "0",
           "-o", str(forecasts["main"].parent / "plan.yml")]
    for item in table_forecast:
        out += ["--table-forecast", item]
    return out


@pytest.mark.parametrize(("item", "expected"), [
    ("shop.events", r"--table-forecast: 'shop.events' is not KS.TABLE=FILE"),
    ("=events.json", r"--table-forecast: '=events.json' is not KS.TABLE=FILE"),
    ("shop-events={events}", r"--table-forecast\[0\]: 'shop-events' is not keyspace.table"),
    ("shop.events={dir}/absent.json", r"--table-forecast shop.events=.*absent.json: .*absent"),
    ("shop.events={late}", r"--table-forecast shop.events=.*late.json: starts at 1700000300, "
                           r"the plan's forecast at 1700000000"),
    ("shop.events={coarse}", r"--table-forecast shop.events=.*coarse.json: has 600-s steps, "
                             r"the plan's forecast 300-s ones"),
    ("shop.events={short}", r"--table-forecast shop.events=.*short.json: covers 6 steps, the "
                            r"plan's horizon 12"),
])
def test_bad_table_forecast_input_is_refused_naming_the_flag_table_and_problem(
    forecasts: dict[str, Path], capsys: pytest.CaptureFixture[str], item: str, expected: str,
) -> None:
    arg = item.format(dir=forecasts["main"].parent, **{k: v for k, v in forecasts.items()})
    assert main(_plan(forecasts, arg)) == 2
    err = capsys.readouterr().err
    assert re.search(expected, err), err
    assert "Traceback" not in err


def test_a_table_given_twice_is_refused(forecasts: dict[str, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_plan(forecasts, f"shop.events={forecasts['events']}",
                      f"shop.events={forecasts['profiles']}")) == 2
    assert "--table-forecast shop.events: given twice" in capsys.readouterr().err


def test_kairos_plan_writes_per_table_overrides_the_plan_loader_accepts(
    forecasts: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _plan(forecasts, f"shop.events={forecasts['events']}",
                 f"shop.profiles={forecasts['profiles']}")
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "per-table overrides for 1 of 2 table(s)" in out
    path = forecasts["main"].parent / "plan.yml"
    doc = yaml.safe_load(path.read_text())
    first = doc["steps"][0]
    assert first["per_table"] == {"shop.profiles": {"compaction": LCS}}
    assert first["tables"] == ["shop.events", "shop.profiles"]
    assert "compaction" in first["live"]
    summary = doc["provenance"]["per_table"]["tables"]
    assert summary["shop.profiles"]["override"] is True
    assert summary["shop.profiles"]["capacity_chosen"] > summary["shop.profiles"][
        "capacity_cluster_wide"]
    assert summary["shop.events"]["reason"] == "the cluster-wide value is already its best"
    plan = load_plan(path, known_hosts=["cass1", "cass2", "cass3"])
    assert plan.steps[0].id == "s1"
    # The horizon's expected total counts what the tables add, net of their changes.
    expected, per_table = doc["provenance"]["expected"], doc["provenance"]["per_table"]
    net = per_table["gain_ops"] - per_table["cost_ops"]
    assert net > 0
    assert expected["per_table_net_ops"] == pytest.approx(net, abs=0.1)


def test_an_override_is_kept_only_with_confidence_over_the_model_s_draws() -> None:
    """The optimiser's confidence rule holds for the tables too: an override whose gain beats
    its cost only just (cost 1/1.2 of the gain) loses in many coefficient draws and is not
    made; one that beats it five times over is, with its P recorded."""
    model, cfg = load_default_model("cassandra"), get_space("cassandra").complete({})

    def workload(read: float) -> TableWorkload:
        return TableWorkload(np.full(6, 50_000.0), np.tile([read, 1 - read, 0, 0], (6, 1)))

    tables = {"shop.events": workload(0.05), "shop.profiles": workload(0.95)}

    def choose(seconds: float, scenarios: int) -> Any:
        return choose_per_table(model=model, configs=[cfg] * 6, running=cfg, step_seconds=300,
                                tables=tables, change_seconds=lambda k, a, b: seconds,
                                served="offered", scenarios=scenarios, confidence=0.9,
                                seed=(0, 16)).tables["shop.profiles"]

    sure = choose(120.0, 0)
    ratio = sure.gain_ops / sure.cost_ops
    assert sure.override and sure.p_gain is None  # no draws: the expected gain decides
    marginal = choose(120.0 * ratio / 1.2, 200)
    assert not marginal.override
    assert marginal.p_gain is not None and marginal.p_gain < 0.9
    assert marginal.reason is not None and "below the confidence 0.9" in marginal.reason
    clear = choose(120.0 * ratio / 5, 200)
    assert clear.override and clear.p_gain is not None and clear.p_gain >= 0.9
    assert clear.to_dict()["p_gain"] == pytest.approx(clear.p_gain)
