"""The autopilot tick's one input document (planner/autopilot/tick_inputs.py, docs/autopilot.md).

The playbook writes the role's settings as they are (numbers as text from ``-e``, ``""`` for
unset); the reader converts and checks them, and a bad value is refused naming the file, the
field and the problem, with no traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from planner.autopilot.tick_inputs import load_tick_inputs
from planner.cli import main
from planner.errors import ValidationError

#: What playbooks/autopilot.yml writes for Cassandra with the role's defaults.
DOCUMENT: dict[str, Any] = {
    "state_dir": "/k", "cluster": "lab", "engine": "cassandra", "run": "autopilot-1",
    "started_at": "2026-11-27T12:00:00+00:00", "dry_run": False,
    "hosts": ["cass1", "cass2", "cass3"],
    "policy": {"stale_fraction": 0.25, "stale_steps": 2, "min_replan_seconds": 600,
               "failed_backoff_seconds": "", "max_attempts": 3},
    "history": {"trace": "", "store": "/k/kairos.db", "age": "7d", "step_seconds": 300,
                "per_table": False, "source": "builtin"},
    "learning": {"settle_seconds": 60, "window_seconds": ""},
    "forecast": {"horizon": 48, "model": "auto"},
    "plan": {"restart_seconds": 60, "restart_costs": "", "change_costs": "", "model": "",
             "current": "", "tables": ["shop.orders"], "engine_options": {"cl": "QUORUM"},
             "options": {}},
    "ring": {"live": True, "file": "/k/lab-cassandra-ring.json", "read": True, "error": ""},
    "apply": {"state_dir": "/state", "vars": {}},
    "retired": {"kairos_autopilot_plan_args": [], "kairos_autopilot_redis_plan_args": []},
}


def write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "tick.inputs.json"
    path.write_text(json.dumps(doc))
    return path


def changed(**groups: Any) -> dict[str, Any]:
    """DOCUMENT with some fields replaced: ``plan={"options": ...}`` merges into the group."""
    doc = json.loads(json.dumps(DOCUMENT))
    for key, value in groups.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] |= value
        else:
            doc[key] = value
    return doc


def test_the_role_s_defaults_read_as_typed_inputs(tmp_path: Path) -> None:
    inp = load_tick_inputs(write(tmp_path, DOCUMENT))
    assert (inp.engine, inp.hosts, inp.tables) == ("cassandra", ("cass1", "cass2", "cass3"),
                                                    ("shop.orders",))
    assert inp.store == "/k/kairos.db" and inp.trace is None  # no trace: export the store
    assert inp.ring == "/k/lab-cassandra-ring.json" and inp.live_ring and not inp.ring_error
    assert inp.policy.failed_backoff_seconds is None and inp.policy.min_replan_seconds == 600
    assert inp.learn_window_seconds == 900.0  # "": three steps
    assert inp.model is None and inp.current is None and inp.restart_costs is None
    assert inp.plan_options == {"cl": "QUORUM"}
    assert inp.apply_state_dir == "/state" and inp.started_at.utcoffset() is not None
    assert inp.per_table is False


@pytest.mark.parametrize("value", [True, "true", "yes", "True", 1])
def test_planning_per_table_is_read_as_ansible_reads_a_boolean(tmp_path: Path,
                                                               value: Any) -> None:
    assert load_tick_inputs(write(tmp_path, changed(history={"per_table": value}))).per_table
    off = load_tick_inputs(write(tmp_path, changed(history={"per_table": ""})))
    assert off.per_table is False  # unset


def test_values_given_as_text_with_minus_e_are_read(tmp_path: Path) -> None:
    doc = changed(dry_run="true", forecast={"horizon": "30"},
                  policy={"failed_backoff_seconds": "120"},
                  plan={"options": {"method": "dp", "seed": "7", "cl": "local_quorum"}})
    inp = load_tick_inputs(write(tmp_path, doc))
    assert inp.dry_run is True and inp.horizon == 30
    assert inp.policy.failed_backoff_seconds == 120.0
    assert inp.plan_options == {"cl": "LOCAL_QUORUM", "method": "dp", "seed": 7}


def test_the_shared_plan_options_win_over_the_engine_s(tmp_path: Path) -> None:
    doc = changed(plan={"options": {"cl": "ALL"}})
    assert load_tick_inputs(write(tmp_path, doc)).plan_options == {"cl": "ALL"}


def test_a_ring_that_could_not_be_read_is_the_reason_given(tmp_path: Path) -> None:
    doc = changed(ring={"read": False, "error": "no node answered"})
    inp = load_tick_inputs(write(tmp_path, doc))
    assert inp.ring is None and inp.ring_error == "no node answered"
    redis = load_tick_inputs(write(tmp_path, changed(engine="redis", ring={"live": False})))
    assert not redis.live_ring and redis.ring is None and redis.ring_error is None


def test_a_trace_file_is_decided_on_instead_of_the_store(tmp_path: Path) -> None:
    inp = load_tick_inputs(write(tmp_path, changed(history={"trace": "/t.csv"})))
    assert inp.trace == "/t.csv" and inp.store is None


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        (changed(forecast={"horizon": "many"}), "forecast.horizon", "expected an integer"),
        (changed(forecast={"horizon": 1}), "forecast.horizon", "out of range"),
        (changed(engine="mongo"), "engine", "expected one of cassandra, redis"),
        (changed(started_at="2026-11-27T12:00:00"), "started_at", "give a UTC offset"),
        (changed(dry_run="maybe"), "dry_run", "expected true or false"),
        (changed(hosts="cass1,cass2"), "hosts", "expected a list"),
        (changed(policy={"stale_fraction": 2}), "policy.stale_fraction", "out of range"),
        (changed(history={"age": "last week"}), "history.age", "not epoch seconds"),
        (changed(plan={"options": {"method": "sa"}}), "plan.options.method",
         "expected one of ga, dp"),
        (changed(plan={"options": {"confidence": 1}}), "plan.options.confidence",
         r"must be a number in \[0, 1\)"),
        (changed(plan={"options": {"horizon": 5}}), "plan.options.horizon",
         "set by the tick.*kairos_autopilot_horizon"),
        (changed(plan={"options": {"metod": "dp"}}), "plan.options.metod",
         "unknown plan option"),
        (changed(plan={"tables": "shop.orders"}), "plan.tables", "expected a list"),
        (changed(forecast={"horizn": 4}), "forecast.horizn", "unknown key"),
        ({k: v for k, v in DOCUMENT.items() if k != "run"}, "run", "missing"),
        (changed(retired={"kairos_autopilot_plan_args": ["--method", "dp"]}),
         "retired.kairos_autopilot_plan_args", "no longer read; give kairos_autopilot_plan_o"),
        (changed(history={"per_table": "maybe"}), "history.per_table",
         "expected true or false, got a string 'maybe'"),
        (changed(history={"per_table": [True]}), "history.per_table", "expected true or false"),
        (changed(history={"source": "statsd"}), "history.source",
         "expected one of builtin, prometheus"),
        (changed(history={"per_table": True, "trace": "/t.csv"}), "history.per_table",
         r"from the store's history; history.trace \(kairos_autopilot_trace\) names a trace"),
        (changed(history={"per_table": True, "source": "prometheus"}), "history.per_table",
         r"needs the built-in collector; history.source \(kairos_workload_source\) is "
         "prometheus"),
        (changed(history={"per_table": True}, plan={"tables": []}), "history.per_table",
         r"no table to plan per table: plan.tables \(kairos_tables\) names none"),
        (changed(engine="redis", history={"per_table": True}, ring={"live": False}),
         "history.per_table", "redis has no tables"),
        (changed(plan={"options": {"table_forecasts": {"shop.orders": "f.json"}}}),
         "plan.options.table_forecasts", "set by the tick.*kairos_autopilot_per_table"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_input_names_the_file_the_field_and_the_problem(
    tmp_path: Path, doc: dict[str, Any], field: str, problem: str
) -> None:
    path = write(tmp_path, doc)
    with pytest.raises(ValidationError, match=f"^{re.escape(str(path))}: "
                       f"{re.escape(field)}: .*{problem}"):
        load_tick_inputs(path)


def test_the_tick_refuses_bad_input_with_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, changed(plan={"options": {"seed": -1}}))
    assert main(["autopilot", "tick", "--inputs", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kairos autopilot: error: {path}: plan.options.seed: -1 is out of "
                          "range"), err
    assert "Traceback" not in err
    (tmp_path / "broken.json").write_text("{")
    assert main(["autopilot", "tick", "--inputs", str(tmp_path / "broken.json")]) == 2
    assert str(tmp_path / "broken.json") in capsys.readouterr().err


def test_a_tick_that_refused_its_inputs_is_recorded_as_failing_to_decide(
    tmp_path: Path,
) -> None:
    from planner.autopilot.tick import load_tick, tick_path

    tick = tick_path(tmp_path, "autopilot-1", "cassandra")
    assert load_tick(tick)["stage"] == "collect"  # nothing written: collection failed
    tick.parent.mkdir(parents=True)
    tick.with_name("autopilot-1-cassandra.inputs.json").write_text("{}")
    assert load_tick(tick)["stage"] == "decide"


def test_a_trace_too_short_to_forecast_waits_for_the_next_tick_rather_than_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A young store (9 points; naive needs 10) is a reason to wait, said in the decision:
    the run does not fail, no plan is made, and one more point lets the tick re-plan."""
    import time

    import numpy as np

    from planner.workload.series import WorkloadSeries, save_trace

    def trace(n: int) -> Path:
        step = 10.0
        path = tmp_path / f"trace-{n}.csv"
        save_trace(WorkloadSeries(
            engine="cassandra", timestamps=time.time() - step * (n - np.arange(n)),
            load=np.full(n, 300.0), mix={"read": np.full(n, 0.9), "update": np.full(n, 0.1),
                                         "insert": np.zeros(n), "scan": np.zeros(n)},
            step_seconds=step), path)
        return path

    def run(n: int, name: str) -> dict[str, Any]:
        doc = changed(state_dir=str(tmp_path / name), run=name,
                      history={"trace": str(trace(n)), "store": "", "step_seconds": 10},
                      forecast={"horizon": 6, "model": "naive"},
                      ring={"live": False, "file": "", "read": False},
                      plan={"options": {"method": "dp"}})
        assert main(["autopilot", "tick", "--inputs", str(write(tmp_path, doc))]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    young = run(9, "young")
    assert young["outcome"] == "nothing-to-do" and not young["replanned"], young
    assert ("cannot re-plan: 9 point(s) of history (the trace file "
            f"{tmp_path / 'trace-9.csv'}); forecasting 6 steps with the naive model needs "
            "at least 10: waiting for more") in young["decision"]["message"], young["decision"]
    assert not (tmp_path / "young" / "plans").exists()

    enough = run(10, "enough")
    assert enough["replanned"], enough
