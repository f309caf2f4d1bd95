"""``kairos metrics``: the exposition format, the atomic textfile, and every source read
from files Kairos recorded on the lab (tests/unit/fixtures/metrics/README.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from planner._module_utils import kairos_proc
from planner.cli import main
from planner.errors import ValidationError
from planner.executor.rollout import record_step
from planner.planning import capacity
from planner.report.exposition import Family, format_value, render, write_textfile
from planner.report.metrics import FAMILIES, Sources, collect

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"
ROOT = Path(__file__).resolve().parents[2]
PLAN = "lab-cassandra-20261127T152000Z.yml"
ADHOC_STEP = "adhoc-20261127T202537Z"
#: After every step of the fixture plan was due.
LATER = datetime(2026, 11, 28, tzinfo=UTC)
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is absent (Debian package prometheus; `make setup` installs it)")


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """The demo's state directory laid out as the autopilot writes it, paths made local."""
    d = tmp_path / ".kairos"
    (d / "plans").mkdir(parents=True)
    shutil.copytree(FIXTURES / "models", d / "models")
    for name in ("autopilot.log.jsonl", "adhoc-lab-cassandra.state.json"):
        shutil.copy(FIXTURES / name, d / name)
    for name in (PLAN, PLAN + ".state.json"):
        shutil.copy(FIXTURES / name, d / "plans" / name)
    ap_state = json.loads((FIXTURES / "lab-cassandra-autopilot.json").read_text())
    ap_state.update(plan=str(d / "plans" / PLAN), forecast=None)
    (d / "lab-cassandra-autopilot.json").write_text(json.dumps(ap_state))
    rollout = json.loads((FIXTURES / "rollout-lab-cassandra.json").read_text())
    rollout["state"] = str(d / "adhoc-lab-cassandra.state.json")
    (d / "rollout-lab-cassandra.json").write_text(json.dumps(rollout))
    return d


def series(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of an exposition text (labels as written, sorted)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def export(state_dir: Path, now: datetime = LATER, **kwargs: object) -> dict[str, float]:
    sources = Sources(state_dir=state_dir, cluster="lab", **kwargs)  # type: ignore[arg-type]
    collected = collect(sources, now=now, hostname=socket.gethostname())
    return series(render(collected.families.values()))


def lock_record(pid: int | None, host: str, created: float = 1_795_800_000.0) -> dict:
    """A lock as library/kairos_lock.py writes it."""
    return {"owner": "autopilot-20261127T151630324582", "host": host, "pid": pid,
            "pid_start": kairos_proc.process_start(pid) if pid else None, "created_at": created,
            "created": "2026-11-27T17:20:00+0000", "heartbeat_at": created + 60}


# ------------------------------------------------------------------ the format
def test_render_writes_help_type_and_escaped_labels() -> None:
    fam = Family("kairos_x_seconds", 'HELP with a \\ and a\nnewline')
    fam.add(1.5, node='cass"1\\', phase="a\nb")
    fam.add(2, node="cass2", phase="drain")
    text = render([fam, Family("kairos_empty", "no samples: left out")])
    assert text.splitlines() == [
        "# HELP kairos_x_seconds HELP with a \\\\ and a\\nnewline",
        "# TYPE kairos_x_seconds gauge",
        'kairos_x_seconds{node="cass\\"1\\\\",phase="a\\nb"} 1.5',
        'kairos_x_seconds{node="cass2",phase="drain"} 2',
    ]


@pytest.mark.parametrize(("value", "text"), [(float("inf"), "+Inf"), (float("-inf"), "-Inf"),
                                             (float("nan"), "NaN"), (3.0, "3"), (0.1, "0.1"),
                                             (True, "1")])
def test_values_are_written_as_the_format_spells_them(value: float, text: str) -> None:
    assert format_value(float(value)) == text


def test_duplicate_series_bad_names_and_counters_without_total_are_refused() -> None:
    fam = Family("kairos_a", "a")
    fam.add(1, node="cass1")
    with pytest.raises(ValidationError, match="duplicate series"):
        fam.add(2, node="cass1")
    with pytest.raises(ValidationError, match="bad label name"):
        fam.add(1, **{"__name__": "x"})
    with pytest.raises(ValidationError, match="letters, digits and _ only"):
        Family("kairos-a", "a")
    with pytest.raises(ValidationError, match="ends with _total"):
        Family("kairos_runs", "a", "counter")
    with pytest.raises(ValidationError, match="given twice"):
        render([fam, Family("kairos_a", "again")])


def test_textfile_is_replaced_atomically_and_readable_by_node_exporter(tmp_path: Path) -> None:
    path = tmp_path / "kairos.prom"
    write_textfile("kairos_a 1\n", path)
    write_textfile("kairos_a 2\n", path)
    assert path.read_text() == "kairos_a 2\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["kairos.prom"]  # no temporary file left


def test_a_failed_write_leaves_the_old_textfile_and_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kairos.prom"
    write_textfile("kairos_a 1\n", path)

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_textfile("kairos_a 2\n", path)
    assert path.read_text() == "kairos_a 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kairos.prom"]


@pytest.mark.parametrize(("name", "match"), [("kairos.txt", r"reads \*\.prom files only"),
                                             ("missing/kairos.prom", "does not exist")])
def test_textfile_path_is_checked(tmp_path: Path, name: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        write_textfile("", tmp_path / name)


# ----------------------------------------------------------- the lab's own files
def test_the_demo_run_plan_step_expected_gain_and_p_gain(state_dir: Path) -> None:
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f"kairos_plan_steps{{{lc}}}"] == 1
    assert got[f'kairos_plan_step_status{{{lc},status="applied",step="s1"}}'] == 1
    assert got[f'kairos_plan_step_status{{{lc},status="failed",step="s1"}}'] == 0
    assert got[f'kairos_plan_step_gain_probability_ratio{{{lc},step="s1"}}'] == 0.99
    assert got[f'kairos_plan_step_expected_net_operations{{{lc},step="s1"}}'] == \
        pytest.approx(110783.36993520285)
    assert got[f'kairos_plan_step_expected_cost_operations{{{lc},step="s1"}}'] == \
        pytest.approx(19914.26717208108)
    assert got[f'kairos_plan_step_restart_nodes{{{lc},step="s1"}}'] == 0  # a live change
    assert got[f'kairos_plan_step_finished_timestamp_seconds{{{lc},step="s1"}}'] == \
        datetime.fromisoformat("2026-11-27T15:20:55.544211+00:00").timestamp()
    assert got[f"kairos_plan_expected_net_operations{{{lc}}}"] == pytest.approx(110783.37)


def test_the_demo_run_autopilot_and_model_error(state_dir: Path) -> None:
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_autopilot_last_outcome{{{lc},outcome="nothing-to-do"}}'] == 1
    assert got[f'kairos_autopilot_last_outcome{{{lc},outcome="applied"}}'] == 0
    assert got[f"kairos_autopilot_last_run_timestamp_seconds{{{lc}}}"] == \
        datetime(2026, 11, 27, 15, 23, 37, tzinfo=UTC).timestamp()
    assert got[f"kairos_autopilot_paused{{{lc}}}"] == 0
    assert got[f"kairos_autopilot_restart_hold{{{lc}}}"] == 1
    # The demo's two windows: +111 % then -33 %: the report's 72 % recent error.
    assert got[f"kairos_model_recent_error_ratio{{{lc}}}"] == pytest.approx(0.7202, abs=1e-4)
    assert got[f"kairos_model_last_error_ratio{{{lc}}}"] == pytest.approx(-0.3335, abs=1e-4)
    assert got[f"kairos_model_error_threshold_ratio{{{lc}}}"] == 0.25
    assert got[f"kairos_model_restart_hold{{{lc}}}"] == 1
    assert got[f"kairos_model_judgements{{{lc}}}"] == 2
    assert got[f"kairos_model_last_served_operations_per_second{{{lc}}}"] == \
        pytest.approx(443.09, abs=0.01)


def test_the_executors_last_rollout_per_node_and_phase(state_dir: Path) -> None:
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    step = f'{lc},step="{ADHOC_STEP}"'
    assert got[f'kairos_rollout_status{{{lc},status="applied",step="{ADHOC_STEP}"}}'] == 1
    assert got[f"kairos_rollout_nodes{{{step}}}"] == 3
    assert got[f"kairos_rollout_nodes_verified{{{step}}}"] == 3
    node = f'{lc},node="cass1"'
    assert got[f'kairos_rollout_node_verified{{{node},step="{ADHOC_STEP}"}}'] == 1
    assert got[f'kairos_rollout_node_phase_seconds{{{node},phase="drain",'
               f'step="{ADHOC_STEP}"}}'] == 3.36
    assert got[f'kairos_rollout_node_phase_seconds{{{node},phase="total",'
               f'step="{ADHOC_STEP}"}}'] == 21.05
    assert got[f"kairos_rollout_attempts{{{step}}}"] == 1
    # the outcome, recorded after the rollout file was written, is the last progress
    finished = datetime.fromisoformat(json.loads(
        (state_dir / "adhoc-lab-cassandra.state.json").read_text())["steps"][ADHOC_STEP]
        ["finished_at"]).timestamp()
    assert got[f"kairos_rollout_last_progress_timestamp_seconds{{{step}}}"] >= finished


def test_no_file_no_series_and_every_lock_free(tmp_path: Path) -> None:
    got = export(tmp_path / "empty")
    assert {k.split("{")[0] for k in got} == {"kairos_metrics_generated_timestamp_seconds",
                                              "kairos_lock_held"}
    assert got['kairos_lock_held{cluster="lab",lock="autopilot"}'] == 0
    assert got['kairos_lock_held{cluster="lab",lock="redis"}'] == 0
    assert got["kairos_metrics_generated_timestamp_seconds"] == LATER.timestamp()


# ----------------------------------------------------------------- the locks
def test_a_held_lock_names_its_host_and_pid_and_whether_it_runs(state_dir: Path) -> None:
    host = socket.gethostname()
    (state_dir / "lab-autopilot.lock").write_text(json.dumps(lock_record(os.getpid(), host)))
    (state_dir / "lab-redis.lock").write_text(json.dumps(lock_record(2**22 + 1, host)))
    (state_dir / "lab-cassandra.lock").write_text(json.dumps(lock_record(4242, "ctl-2")))
    got = export(state_dir)
    assert got['kairos_lock_held{cluster="lab",lock="autopilot"}'] == 1
    assert got['kairos_lock_acquired_timestamp_seconds{cluster="lab",lock="autopilot"}'] == \
        1_795_800_000
    assert got['kairos_lock_heartbeat_timestamp_seconds{cluster="lab",lock="autopilot"}'] == \
        1_795_800_060
    assert got[f'kairos_lock_holder_info{{cluster="lab",host="{host}",lock="autopilot"}}'] == 1
    assert got['kairos_lock_holder_pid{cluster="lab",lock="autopilot"}'] == os.getpid()
    assert got['kairos_lock_holder_running{cluster="lab",lock="autopilot"}'] == 1
    assert got['kairos_lock_holder_running{cluster="lab",lock="redis"}'] == 0  # gone
    # held from another host: its process cannot be looked up here
    assert 'kairos_lock_holder_running{cluster="lab",lock="cassandra"}' not in got
    assert got['kairos_lock_holder_info{cluster="lab",host="ctl-2",lock="cassandra"}'] == 1


def test_a_lock_with_a_reused_pid_is_not_running(state_dir: Path) -> None:
    record = lock_record(os.getpid(), socket.gethostname()) | {"pid_start": 1}
    (state_dir / "lab-autopilot.lock").write_text(json.dumps(record))
    assert export(state_dir)['kairos_lock_holder_running{cluster="lab",lock="autopilot"}'] == 0


# ----------------------------------------------------- rollout and step states
def _rollout_of(state_dir: Path, *, step: str, plan: str = "") -> Path:
    """Point the fixture's rollout file at ``step`` of ``plan`` (its state beside it)."""
    path = state_dir / "rollout-lab-cassandra.json"
    rollout = json.loads(path.read_text())
    state = (state_dir / "plans" / (PLAN + ".state.json")) if plan else \
        state_dir / "adhoc-lab-cassandra.state.json"
    rollout.update(step_id=step, plan=plan, state=str(state))
    path.write_text(json.dumps(rollout))
    return state


def test_a_rollout_holding_the_apply_lock_is_in_progress_then_interrupted(
        state_dir: Path) -> None:
    plan = str(state_dir / "plans" / PLAN)
    state = _rollout_of(state_dir, step="s1", plan=plan)
    state.write_text(json.dumps({"steps": {}, "version": 1}))
    fingerprint = json.loads((state_dir / "rollout-lab-cassandra.json").read_text())["fingerprint"]
    record_step(state, step_id="s1", status="verified", node="cass1", fingerprint=fingerprint,
                nodes={"cass1": {"drain": 3.5, "stop": 0.4, "start": 12.0, "sync": 3.0}},
                now=datetime(2026, 11, 27, 15, 21, tzinfo=UTC))
    (state_dir / "lab-cassandra.lock").write_text(
        json.dumps(lock_record(os.getpid(), socket.gethostname())))
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_rollout_status{{{lc},status="in_progress",step="s1"}}'] == 1
    assert got[f'kairos_plan_step_status{{{lc},status="in_progress",step="s1"}}'] == 1
    assert got[f'kairos_rollout_nodes_verified{{{lc},step="s1"}}'] == 1
    assert got[f'kairos_rollout_node_verified{{{lc},node="cass2",step="s1"}}'] == 0
    assert got[f'kairos_rollout_node_phase_seconds{{{lc},node="cass1",phase="total",'
               f'step="s1"}}'] == 18.9
    (state_dir / "lab-cassandra.lock").unlink()  # the run died: nodes verified, no outcome
    got = export(state_dir, engines=("cassandra",))
    assert got[f'kairos_rollout_status{{{lc},status="interrupted",step="s1"}}'] == 1
    assert got[f'kairos_plan_step_status{{{lc},status="interrupted",step="s1"}}'] == 1


def test_verifications_of_another_target_do_not_count(state_dir: Path) -> None:
    state = _rollout_of(state_dir, step="s1", plan=str(state_dir / "plans" / PLAN))
    state.write_text(json.dumps({"steps": {}, "version": 1}))
    record_step(state, step_id="s1", status="verified", node="cass1", fingerprint="0ther")
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_rollout_nodes_verified{{{lc},step="s1"}}'] == 0
    assert got[f'kairos_rollout_status{{{lc},status="prepared",step="s1"}}'] == 1


def test_a_failed_step_is_failed_in_the_plan_and_the_rollout(state_dir: Path) -> None:
    state = _rollout_of(state_dir, step="s1", plan=str(state_dir / "plans" / PLAN))
    state.write_text(json.dumps({"steps": {}, "version": 1}))
    record_step(state, step_id="s1", status="failed", error="cass2 did not come back")
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_plan_step_status{{{lc},status="failed",step="s1"}}'] == 1
    assert got[f'kairos_plan_step_status{{{lc},status="applied",step="s1"}}'] == 0
    assert got[f'kairos_rollout_status{{{lc},status="failed",step="s1"}}'] == 1


@pytest.mark.parametrize(("now", "status"), [
    (datetime(2026, 11, 27, 15, 19, tzinfo=UTC), "planned"),
    (datetime(2026, 11, 27, 15, 20, tzinfo=UTC), "due"),
])
def test_an_unrecorded_step_is_planned_until_it_is_due(state_dir: Path, now: datetime,
                                                       status: str) -> None:
    (state_dir / "plans" / (PLAN + ".state.json")).unlink()
    got = export(state_dir, now=now, engines=("cassandra",))
    key = 'kairos_plan_step_status{cluster="lab",engine="cassandra",status="%s",step="s1"}'
    assert got[key % status] == 1
    assert sum(got[key % s] for s in ("planned", "due", "applied")) == 1


# ------------------------------------------------------------ capacity advice
def _with_advice(state_dir: Path, advice: capacity.CapacityAdvice) -> None:
    path = state_dir / "plans" / PLAN
    text = path.read_text()
    doc = yaml.safe_load(text)
    doc["provenance"]["capacity_advice"] = advice.to_dict()
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_scale_out_advice_is_exported_with_its_figures(state_dir: Path) -> None:
    ts = [1_795_792_790.0 + 10 * i for i in range(60)]
    advice = capacity.advise(timestamps=ts, load_upper=[400.0] * 30 + [900.0] * 30,
                             best_capacity=[700.0] * 60, nodes=3, min_nodes=3,
                             step_seconds=10.0)
    assert advice.action == "scale-out"
    _with_advice(state_dir, advice)
    got = export(state_dir, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_capacity_advice{{action="scale-out",{lc}}}'] == 1
    assert got[f'kairos_capacity_advice{{action="none",{lc}}}'] == 0
    assert got[f"kairos_capacity_nodes{{{lc}}}"] == 3
    assert got[f"kairos_capacity_advised_nodes{{{lc}}}"] == advice.nodes_advised == 5
    assert got[f"kairos_capacity_scale_out_by_timestamp_seconds{{{lc}}}"] == ts[30]
    assert got[f"kairos_capacity_peak_need_ratio{{{lc}}}"] == pytest.approx(900 * 1.2 / 700,
                                                                           abs=1e-4)
    assert got[f"kairos_capacity_margin_ratio{{{lc}}}"] == 0.2


def test_a_plan_without_advice_exports_none_of_it(state_dir: Path) -> None:
    got = export(state_dir, engines=("cassandra",))
    assert not [k for k in got if k.startswith(("kairos_capacity_", "kairos_memory_split_"))]


def _with_split(state_dir: Path) -> None:
    """The fixture plan with the memory split the lab's measured curve advises from 8mb."""
    from planner.model.memory_curve import advise, load_curve

    curve = load_curve(FIXTURES.parent / "memory" / "redis-maxmemory-curve.json")
    path = state_dir / "plans" / PLAN
    doc = yaml.safe_load(path.read_text())
    doc["provenance"]["memory_split"] = advise(curve, current={"maxmemory": "8mb"},
                                               mix={"read": 0.9, "write": 0.1})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_the_memory_split_advice_is_exported(state_dir: Path) -> None:
    _with_split(state_dir)
    got = export(state_dir, engines=("cassandra",))
    labels = 'cluster="lab",engine="cassandra",parameter="maxmemory"'
    assert got[f"kairos_memory_split_advised_bytes{{{labels}}}"] == 24 * 2**20
    assert got[f"kairos_memory_split_running_bytes{{{labels}}}"] == 8 * 2**20
    for at, hit in (("now", 0.799), ("advised", 0.987)):
        assert got[f'kairos_memory_split_predicted_hit_ratio{{at="{at}",{labels}}}'] == \
            pytest.approx(hit, abs=1e-3)


# ------------------------------------------------------------------- robustness
def test_an_unreadable_file_is_flagged_and_the_rest_exported(state_dir: Path) -> None:
    (state_dir / "lab-cassandra-autopilot.json").write_text("{not json")
    sources = Sources(state_dir=state_dir, cluster="lab", engines=("cassandra",))
    collected = collect(sources, now=LATER)
    got = series(render(collected.families.values()))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_metrics_source_error{{{lc},source="autopilot_state"}}'] == 1
    assert got[f'kairos_metrics_source_error{{{lc},source="model_track"}}'] == 0
    assert got[f"kairos_model_judgements{{{lc}}}"] == 2  # the other sources still exported
    assert len(collected.warnings) == 1
    assert "lab-cassandra-autopilot.json" in collected.warnings[0]


def test_a_log_line_cut_short_by_a_crash_is_skipped(state_dir: Path) -> None:
    with (state_dir / "autopilot.log.jsonl").open("a") as handle:
        handle.write('{"cluster": "lab", "engine": "cassandra", "outcome": "appl')
    got = export(state_dir, engines=("cassandra",))
    assert got['kairos_autopilot_last_outcome{cluster="lab",engine="cassandra",'
               'outcome="nothing-to-do"}'] == 1


def test_an_unknown_outcome_is_added_to_the_known_ones(state_dir: Path) -> None:
    with (state_dir / "autopilot.log.jsonl").open("a") as handle:
        handle.write(json.dumps({"cluster": "lab", "engine": "redis", "outcome": "new-kind",
                                 "logged_at": "2026-11-27T16:00:00+00:00"}) + "\n")
    got = export(state_dir, engines=("redis",))
    assert got['kairos_autopilot_last_outcome{cluster="lab",engine="redis",'
               'outcome="new-kind"}'] == 1
    assert got['kairos_autopilot_last_outcome{cluster="lab",engine="redis",'
               'outcome="applied"}'] == 0


def test_an_explicit_plan_wins_and_two_for_one_engine_are_refused(state_dir: Path) -> None:
    other = state_dir / "other.yml"
    shutil.copy(state_dir / "plans" / PLAN, other)  # no state file beside it: unrecorded
    got = export(state_dir, engines=("cassandra",), plans=(other,))
    assert got['kairos_plan_step_status{cluster="lab",engine="cassandra",status="due",'
               'step="s1"}'] == 1
    with pytest.raises(ValidationError, match="give one per cluster and engine"):
        export(state_dir, plans=(other, state_dir / "plans" / PLAN))


# ----------------------------------------------------------------------- the CLI
def test_cli_writes_the_textfile_and_says_where(state_dir: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "textfile" / "kairos.prom"
    out.parent.mkdir()
    assert main(["metrics", "--state-dir", str(state_dir), "--textfile", str(out)]) == 0
    text = out.read_text()
    assert "# TYPE kairos_plan_step_status gauge" in text
    assert re.search(r"^wrote .*kairos\.prom: \d+ series$", capsys.readouterr().err, re.M)


def test_cli_prints_to_stdout_and_warns_on_stderr(state_dir: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (state_dir / "plans" / PLAN).write_text("kind: nonsense\n")
    assert main(["metrics", "--state-dir", str(state_dir), "--engine", "cassandra"]) == 0
    captured = capsys.readouterr()
    assert 'kairos_metrics_source_error{cluster="lab",engine="cassandra",source="plan"} 1' \
        in captured.out
    assert captured.err.startswith("kairos metrics: warning: plan ")


def test_cli_apply_state_dir_holds_the_executors_files(state_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    apply_dir = tmp_path / "apply"
    apply_dir.mkdir()
    (state_dir / "rollout-lab-cassandra.json").rename(apply_dir / "rollout-lab-cassandra.json")
    (apply_dir / "lab-cassandra.lock").write_text(json.dumps(lock_record(None, "ctl-2")))
    # the run lock is kairos_state_dir's too (kairos_autopilot_lock_file's default)
    (apply_dir / "lab-autopilot.lock").write_text(json.dumps(lock_record(None, "ctl-2")))
    assert main(["metrics", "--state-dir", str(state_dir), "--apply-state-dir", str(apply_dir),
                 "--engine", "cassandra"]) == 0
    got = series(capsys.readouterr().out)
    assert got['kairos_lock_held{cluster="lab",lock="cassandra"}'] == 1
    assert got['kairos_lock_held{cluster="lab",lock="autopilot"}'] == 1
    assert got['kairos_autopilot_last_outcome{cluster="lab",engine="cassandra",'
               'outcome="nothing-to-do"}'] == 1  # the autopilot's own files: --state-dir
    assert got[f'kairos_rollout_nodes{{cluster="lab",engine="cassandra",step="{ADHOC_STEP}"}}'] \
        == 3


@needs_promtool
def test_promtool_accepts_the_exposition(state_dir: Path, tmp_path: Path) -> None:
    """Every family, from the lab's files plus a held lock, a scale-out advice and a memory
    split."""
    (state_dir / "lab-autopilot.lock").write_text(
        json.dumps(lock_record(os.getpid(), socket.gethostname())))
    _with_advice(state_dir, capacity.advise(
        timestamps=[1_795_792_790.0, 1_795_792_800.0], load_upper=[900.0, 900.0],
        best_capacity=[700.0, 700.0], nodes=3, min_nodes=3, step_seconds=10.0))
    _with_split(state_dir)
    (state_dir / "drift-lab-cassandra.json").write_text(json.dumps({  # kairos drift --report
        "version": 1, "cluster": "lab", "engine": "cassandra", "applied_through": "s1",
        "checked_at": "2026-11-28T00:10:00+00:00", "drift": [],
        "nodes": {"cass1": {"compared": 12, "drifted": 0, "error": None}}}))
    out = tmp_path / "kairos.prom"
    assert main(["metrics", "--state-dir", str(state_dir), "--textfile", str(out)]) == 0
    text = out.read_text()
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert names == {name for name, _, _ in FAMILIES}  # every family has data here
    assert PROMTOOL is not None
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                           capture_output=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout + check.stderr == ""  # no lint problem either


# ------------------------------------------------------------------------ docs
def test_every_metric_is_documented() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    missing = [name for name, _, _ in FAMILIES if f"`{name}`" not in doc]
    assert not missing
