"""The autopilot plans per table (issue 42; docs/autopilot.md, "Planning per table").

With ``kairos_autopilot_per_table`` the tick's inputs say ``history.per_table``: the round
is collected per table too, and a re-plan forecasts each of the inputs' tables from its own
series in the store and plans with those forecasts, as ``kairos plan --table-forecast``
does. The store is filled from cass2's captured virtual-table rows
(tests/unit/fixtures/cassandra_views/cass2.json) through the collector's own
``cassandra_samples(..., per_table=True)``: each node's sample beside its tables', as
``kairos collect --per-table`` keeps them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.autopilot.tick import load_tick, record_run, tick_path
from planner.cli import main
from planner.forecast.forecaster import load_forecast
from planner.workload.collect import cassandra_samples
from planner.workload.series import load_trace
from planner.workload.store import Store

from .test_tick_inputs import changed

VIEWS = Path(__file__).parent / "fixtures" / "cassandra_views" / "cass2.json"
NODES = ("cass1", "cass2", "cass3")
ROLLOUT, EVENTS, MISSING = "kairos_rollout.usertable", "kairos_app.events", "shop.missing"
#: Requests a node coordinates per second, per (view, table): a read-heavy table and a
#: write-heavy one; the captured counts are where they start.
RATES = {
    ("coordinator_read_latency", ROLLOUT): 9_500.0,
    ("coordinator_write_latency", ROLLOUT): 500.0,
    ("coordinator_read_latency", EVENTS): 500.0,
    ("coordinator_write_latency", EVENTS): 9_500.0,
}
#: The round at which kairos_app.events is created (absent from the rows before it).
EVENTS_FROM = 10


def fill_store(path: Path, *, rounds: int = 14, step: float = 60.0) -> None:
    """``rounds`` per-table rounds of the three nodes ``step`` seconds apart, the last one
    half a step ago."""
    data = json.loads(VIEWS.read_text())
    views = {k: v for k, v in data.items() if k.startswith("coordinator_")}
    first = time.time() - step * (rounds - 0.5)
    with Store(path) as store:
        for k in range(rounds):
            t = first + step * k
            samples = []
            for i, node in enumerate(NODES):
                rows = {}
                for view, table in views.items():
                    rows[view] = []
                    for row in table:
                        name = f"{row['keyspace_name']}.{row['table_name']}"
                        age = k - EVENTS_FROM if name == EVENTS else k
                        if age >= 0:
                            served = int(age * step * RATES.get((view, name), 0.0))
                            rows[view].append({**row, "count": row["count"] + served})
                local = {**data["system.local"], "host_id": f"{node}-host"}
                samples += cassandra_samples(node, ts=t + 0.1 * i, local=local, views=rows,
                                             per_table=True)
            store.append_counters("cassandra", "lab", samples, round_ts=t)


def document(tmp_path: Path, *, per_table: Any = True, **history: Any) -> dict[str, Any]:
    """A Cassandra tick on the store, planned on the hosts (no ring), quickly."""
    return changed(
        state_dir=str(tmp_path / "state"), dry_run=True,
        history={"store": str(tmp_path / "kairos.db"), "step_seconds": 60,
                 "per_table": per_table, **history},
        forecast={"horizon": 6, "model": "naive"},
        ring={"live": False, "file": "", "read": False},
        plan={"tables": [ROLLOUT, EVENTS, MISSING],
              "options": {"method": "dp", "served": "offered", "scenarios": 0,
                          "confidence": 0}},
    )


def tick(tmp_path: Path, doc: dict[str, Any], capsys: pytest.CaptureFixture[str],
         *extra: str) -> tuple[int, dict[str, Any], str]:
    """``kairos autopilot tick --inputs`` on ``doc``: its exit code, JSON and stderr."""
    path = tmp_path / "state" / "ticks" / "autopilot-1-cassandra.inputs.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    rc = main(["autopilot", "tick", "--inputs", str(path), *extra])
    out = capsys.readouterr()
    return rc, json.loads(out.out.strip().splitlines()[-1]) if rc == 0 else {}, out.err


def test_each_table_s_forecast_reaches_the_plan_and_a_young_table_is_left_out_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fill_store(tmp_path / "kairos.db")

    rc, result, err = tick(tmp_path, document(tmp_path), capsys)

    assert rc == 0, err
    assert result["replanned"], result
    # The cluster's history counts each request once: the nodes' samples, not their tables'
    # beside them (3 nodes x 20,000 requests a second from round 10, 10,000 before).
    trace = load_trace(tmp_path / "state" / "lab-cassandra-trace.csv")
    assert float(trace.load[0]) == pytest.approx(3 * 10_000.0, rel=1e-3)
    assert float(trace.load[-1]) == pytest.approx(3 * 20_000.0, rel=1e-3)
    notes = result["per_table"]
    assert set(notes) == {ROLLOUT, EVENTS, MISSING}
    assert notes[ROLLOUT].startswith("forecast from 13 point(s), mean 30000.0 ops/s, chosen "
                                     "model naive: wrote "), notes[ROLLOUT]
    assert notes[EVENTS] == (
        "left out: 3 point(s) of its history (collected per table); forecasting 6 steps "
        "with the naive model needs at least 10: waiting for more")
    assert notes[MISSING].startswith("left out: no history of its own (store: cassandra/lab: "
                                     "fewer than 2 usable intervals")
    # The plan was made with that forecast, and only with it (kairos plan --table-forecast).
    plan_file = Path(result["decision"]["plan"])
    plan = yaml.safe_load(plan_file.read_text())
    assert set(plan["provenance"]["per_table"]["tables"]) == {ROLLOUT}
    table_forecast = Path(notes[ROLLOUT].rsplit("wrote ", 1)[1])
    assert table_forecast == Path(f"{str(plan_file).removesuffix('.yml')}.{ROLLOUT}"
                                  ".forecast.json")
    fc = load_forecast(table_forecast)
    assert fc.scope == f"table:{ROLLOUT}" and fc.horizon == 6
    assert np.allclose(fc.load_mean, 3 * 10_000.0) and np.allclose(fc.mix_mean["read"], 0.95)
    assert any(line.startswith(f"table {EVENTS}: left out: 3 point(s)")
               for line in result["plan_text"])
    # The run's log line says it too.
    line = record_run(load_tick(tick_path(tmp_path / "state", "autopilot-1", "cassandra")),
                      state_dir=str(tmp_path / "state"), cluster="lab", engine="cassandra",
                      run="autopilot-1", started_at=result["started_at"], dry_run=True)
    assert line["per_table"] == notes and line["outcome"] == "dry-run"


def test_without_the_setting_the_plan_is_cluster_wide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fill_store(tmp_path / "kairos.db")

    rc, result, err = tick(tmp_path, document(tmp_path, per_table=False), capsys)

    assert rc == 0, err
    assert result["replanned"] and result["per_table"] == {}
    plan = yaml.safe_load(Path(result["decision"]["plan"]).read_text())
    assert "per_table" not in plan["provenance"]
    assert not list((tmp_path / "state" / "plans").glob("*.trace.csv"))


def test_the_check_before_collecting_says_to_collect_per_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    rc, checked, err = tick(tmp_path, document(tmp_path), capsys, "--check")

    assert rc == 0, err
    assert checked == {"stage": "collect", "collect": {"per_table": True}}
    # A collection that fails after the check is logged as such.
    tick_file = load_tick(tick_path(tmp_path / "state", "autopilot-1", "cassandra"))
    assert tick_file["stage"] == "collect"
    line = record_run(tick_file, state_dir=str(tmp_path / "state"), cluster="lab",
                      engine="cassandra", run="autopilot-1", started_at="x", dry_run=True,
                      failed_task="Collect one round", error="no node answered")
    assert line["outcome"] == "collect-failed"
    rc, checked, _ = tick(tmp_path, document(tmp_path, per_table="no"), capsys, "--check")
    assert rc == 0 and checked["collect"] == {"per_table": False}


@pytest.mark.parametrize("check", [True, False], ids=["the-check", "the-tick"])
def test_a_bad_setting_is_refused_naming_the_field_and_logged_as_failing_to_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool,
) -> None:
    if not check:  # the check passed on the document written before the collection
        assert tick(tmp_path, document(tmp_path), capsys, "--check")[0] == 0
    rc, _, err = tick(tmp_path, document(tmp_path, per_table="maybe"), capsys,
                      *(["--check"] if check else []))

    assert rc == 2
    assert err.startswith("kairos autopilot: error: ") and "Traceback" not in err
    assert "history.per_table: expected true or false, got a string 'maybe'" in err, err
    tick_file = load_tick(tick_path(tmp_path / "state", "autopilot-1", "cassandra"))
    assert tick_file["stage"] == "decide"
    line = record_run(tick_file, state_dir=str(tmp_path / "state"), cluster="lab",
                      engine="cassandra", run="autopilot-1", started_at="x", dry_run=True,
                      failed_task="Check", error=err)
    assert line["outcome"] == "decide-failed"


# ------------------------------------------------------------- through the playbook
def test_the_playbook_collects_per_table_and_the_plan_gets_the_tables_forecasts(
    tmp_path: Path,
) -> None:
    """playbooks/autopilot.yml with kairos_autopilot_per_table (test_autopilot_tick_ring's
    stand-ins: collection and the executor answered, the tick real): the round is collected
    with --per-table beside --resources, and the plan made on the store holds the table's
    forecast."""
    from .test_autopilot_tick_ring import calls, logged, setup
    from .test_autopilot_tick_ring import tick as playbook_tick

    inventory = setup(tmp_path, all_vars={"kairos_tables": [ROLLOUT, EVENTS]}, cassandra_vars={})
    fill_store(tmp_path / "kairos.db")  # kairos_autopilot_store: <kairos_autopilot_dir>/kairos.db

    run = playbook_tick(tmp_path, inventory, "-e", "kairos_autopilot_per_table=true",
                        "-e", "kairos_autopilot_trace=", "-e", "kairos_autopilot_step_seconds=60")

    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    (collect,) = calls(tmp_path, "collect")
    assert "--per-table" in collect and "--resources" in collect, collect
    (line,) = logged(tmp_path)
    assert line["replanned"], line
    assert line["per_table"][ROLLOUT].startswith("forecast from 13 point(s)"), line
    assert line["per_table"][EVENTS].startswith("left out: 3 point(s) of its history")
    plan = yaml.safe_load(Path(line["plan"]).read_text())
    assert set(plan["provenance"]["per_table"]["tables"]) == {ROLLOUT}


def test_the_playbook_refuses_a_setting_that_is_not_a_boolean_before_collecting(
    tmp_path: Path,
) -> None:
    from .test_autopilot_tick_ring import calls, logged, setup
    from .test_autopilot_tick_ring import tick as playbook_tick

    inventory = setup(tmp_path, all_vars={"kairos_tables": [ROLLOUT]}, cassandra_vars={})

    run = playbook_tick(tmp_path, inventory, "-e", "kairos_autopilot_per_table=maybe")

    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert calls(tmp_path, "collect") == []  # no node asked
    assert not (tmp_path / "facts-args.json").exists()  # nor the ring read
    (line,) = logged(tmp_path)
    assert line["outcome"] == "decide-failed", line
    assert "history.per_table: expected true or false, got a string 'maybe'" in line["message"]
