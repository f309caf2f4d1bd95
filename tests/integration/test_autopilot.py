"""playbooks/autopilot.yml on the real lab: run lock, Redis in the tick, failed applies hold.

Every run uses its own autopilot directory and run lock (tmp_path) and synthetic traces
that end now (write-heavy, then read-heavy), so the planner has something to plan; the
apply locks stay the lab's. No test here restarts a node: the pid files prove it. The only
change made to the lab is one live Redis value (hz) through the Redis executor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.model.spaces import get_space
from planner.workload.series import WorkloadSeries, save_trace

from .conftest import (
    APP_TABLE,
    REPO,
    PlaybookRun,
    assert_no_secret,
    ensure_app_table,
    redis_client,
    run_playbook,
)

pytestmark = [pytest.mark.lab, pytest.mark.cassandra, pytest.mark.redis]

HOSTS = ("cass1", "cass2", "cass3")
LAB = REPO / ".lab" / "cassandra"
REDIS_PORTS = {f"redis{i}": 7000 + i for i in range(1, 7)}
REDIS_LAB = REPO / ".lab" / "redis"
BIN = Path(sys.executable).parent
KAIROS = str(BIN / "kairos")
LOCK_MESSAGE = "another Kairos run holds"


@pytest.fixture(scope="module", autouse=True)
def app_table(lab: PlaybookRun) -> None:
    """The table the plans' compaction steps name (and a keyspace for the live ring)."""
    ensure_app_table()


def pids() -> dict[str, int]:
    """Every lab process's pid (Cassandra and Redis): a restart changes one."""
    cassandra = {h: int((LAB / h / "cassandra.pid").read_text()) for h in HOSTS}
    return cassandra | {h: int((REDIS_LAB / h / "redis.pid").read_text()) for h in REDIS_PORTS}


def redis_running(key: str) -> set[str]:
    """The value every Redis node runs for key (one value when they agree)."""
    seen = set()
    for port in REDIS_PORTS.values():
        with redis_client(port, decode_responses=True) as client:
            seen.add(str(client.config_get(key)[key]))
    return seen


def redis_current() -> dict[str, Any]:
    """What the Redis nodes run now, for every parameter of the Redis space."""
    values: dict[str, Any] = {}
    for key, param in get_space("redis").parameters.items():
        (value,) = redis_running(key)
        values[key] = int(value) if param.type == "int" else value
    return values


def trace(path: Path, engine: str) -> Path:
    n, step = 40, 20.0
    read = np.where(np.arange(n) < 20, 0.1, 0.9)
    other = {"cassandra": {"update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
             "redis": {"write": 1 - read, "other": np.zeros(n)}}[engine]  # fmt: skip
    save_trace(
        WorkloadSeries(
            engine=engine,
            # The trace ends a minute ago: the plan's first steps are due now.
            timestamps=time.time() - 60.0 - step * (n - 1 - np.arange(n)),
            load=np.full(n, 300.0),
            mix={"read": read, **other},
            step_seconds=step,
        ),
        path,
    )
    return path


def write_inputs(tmp: Path) -> list[str]:
    """Traces ending now and what the lab runs; the autopilot's -e arguments."""
    (tmp / "current.yml").write_text("heap_size: 512M\n")
    (tmp / "redis-current.yml").write_text(yaml.safe_dump(redis_current()))
    return [
        "-e", f"kairos_autopilot_dir={tmp}",
        "-e", f"kairos_autopilot_lock_file={tmp}/autopilot.lock",
        "-e", f"kairos_autopilot_trace={trace(tmp / 'trace.csv', 'cassandra')}",
        "-e", f"kairos_autopilot_redis_trace={trace(tmp / 'redis-trace.csv', 'redis')}",
        "-e", "kairos_autopilot_forecast_model=naive",
        "-e", "kairos_autopilot_horizon=30",
        # The shipped prior, whose synthetic trace makes a step due: these tests are about
        # the tick's mechanics, not about what the lab's calibrated model would choose.
        "-e", "kairos_cassandra_model_file=",
        "-e", f"kairos_autopilot_current={tmp}/current.yml",
        "-e", f"kairos_autopilot_redis_current={tmp}/redis-current.yml",
        # SOPHIA's capacity credit: 300 ops/s is far below the prior's capacity, and under
        # the default served-work objective no step would be due.
        "-e", '{"kairos_autopilot_plan_options": {"method": "dp", "served": "capacity"}}',
        # A compaction step names the tables it alters (the plan's steps[].tables).
        "-e", json.dumps({"kairos_tables": [APP_TABLE]}),
    ]  # fmt: skip


def only(*engines: str) -> list[str]:
    return ["-e", json.dumps({"kairos_autopilot_engines": list(engines)})]


def start(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.Popen(
        [str(BIN / "ansible-playbook"), "playbooks/autopilot.yml", *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], began: float) -> PlaybookRun:
    out, _ = proc.communicate(timeout=600)
    return PlaybookRun(proc.returncode, out, time.monotonic() - began)


def tick(*args: str) -> PlaybookRun:
    run = finish(start(*args), time.monotonic())
    print(f"\nautopilot.yml rc={run.rc} in {run.seconds:.1f} s")
    assert_no_secret(run.output, "the autopilot's output")
    return run


def log_lines(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "autopilot.log.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def by_engine(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {str(line["engine"]): line for line in lines}
    assert len(out) == len(lines), f"more than one line per engine: {lines}"
    return out


def redis_plan(path: Path, *, current: dict[str, Any], target: dict[str, Any],
               due_in_minutes: float = -1.0) -> Path:
    """A Redis plan with one live step, due a minute ago unless said (the plan is the
    contract)."""
    now = datetime.now(UTC)
    path.write_text(yaml.safe_dump({
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "redis",
        "created_at": now.isoformat(),
        "horizon": {"start": (now - timedelta(minutes=5)).isoformat(), "step_seconds": 60,
                    "steps": 30},
        "provenance": {"source": "tests/integration/test_autopilot.py"},
        "availability": {"consistency_level": "ONE", "tolerated_failures": 0, "aggressive": False},
        "current_config": current,
        "steps": [{
            "id": "s1", "due": (now + timedelta(minutes=due_in_minutes)).isoformat(),
            "until": (now + timedelta(minutes=25)).isoformat(), "target": target, "per_node": {},
            "live": list(target), "restart": [], "batches": [],
            "expected": {"benefit_ops": 1.0e6, "cost_ops": 1.0e4, "net_ops": 9.9e5},
        }],
    }, sort_keys=False))  # fmt: skip
    return path


def adopt(tmp: Path, engine: str, plan: Path, forecast: Path | None = None) -> None:
    subprocess.run([KAIROS, "autopilot", "adopt", "--state-dir", str(tmp), "--engine", engine,
                    "--plan", str(plan)] + (["--forecast", str(forecast)] if forecast else []),
                   check=True, capture_output=True)  # fmt: skip


def state_of(plan: Path) -> dict[str, Any]:
    return json.loads(plan.with_name(plan.name + ".state.json").read_text())


def cassandra_plan_with_a_failed_step(tmp: Path) -> tuple[Path, str]:
    """A Cassandra plan adopted by the autopilot whose due step is recorded as failed."""
    plan, forecast = tmp / "plan.yml", tmp / "fc.json"
    subprocess.run([KAIROS, "forecast", "--trace", str(tmp / "trace.csv"), "--horizon", "30",
                    "--model", "naive", "--out", str(forecast)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run([KAIROS, "plan", "--forecast", str(forecast), "--horizon", "30",
                    "--method", "dp", "--served", "capacity", "--restart-seconds", "45",
                    "--current", str(tmp / "current.yml"), "--tables", APP_TABLE, "-o", str(plan)],
                   check=True, capture_output=True)  # fmt: skip
    adopt(tmp, "cassandra", plan, forecast)
    decide = subprocess.run([KAIROS, "autopilot", "decide", "--state-dir", str(tmp)],
                            check=True, capture_output=True, text=True)  # fmt: skip
    due = json.loads(decide.stdout)["step"]
    assert due, decide.stdout
    subprocess.run([KAIROS, "rollout", "record", str(plan), "--step", due, "--status", "failed",
                    "--error", "cass2: did not come back (test)"],
                   check=True, capture_output=True)  # fmt: skip
    return plan, due


# ----------------------------------------------------------------- tests
def test_overlapping_runs_one_proceeds_the_other_exits_at_once_and_dry_run_applies_nothing(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    """Two runs at once from two control directories (autopilot and apply state): nothing
    on disk is shared, so the lease in each cluster is what lets exactly one proceed."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    before = pids()
    began = time.monotonic()
    dry = ("-e", "kairos_dry_run=true")
    procs = []
    for directory in dirs:
        directory.mkdir()
        procs.append(start(*write_inputs(directory), *dry, "-e",
                           f"kairos_state_dir={directory / 'state'}"))
    runs = [finish(proc, began) for proc in procs]
    assert sorted(r.rc == 0 for r in runs) == [False, True], [
        [line for line in r.output.splitlines() if "msg" in line or "fatal" in line][-8:]
        for r in runs]
    won = next(i for i, r in enumerate(runs) if r.rc == 0)
    winner, loser, tmp_path = runs[won], runs[1 - won], dirs[won]
    assert LOCK_MESSAGE in loser.output and "this run exits without touching the cluster" in (
        loser.output
    ), loser.output[-2000:]
    # It names the holder: the winner's run, host and ansible-playbook process.
    assert f"pid {procs[won].pid}," in loser.output and "owner autopilot-" in loser.output, (
        loser.output[-2000:])
    assert "Collect one round" not in loser.output  # it stopped at the lease
    assert not (tmp_path / "autopilot.lock").exists(), "the winner did not release the run lock"
    assert not list((tmp_path / "state").glob("*.lock")), "the winner kept a lease"
    # Dry-run: both engines planned and reported, nothing applied, no node restarted.
    assert pids() == before, "a dry run restarted a node"
    lines = by_engine(log_lines(tmp_path))
    assert set(lines) == {"cassandra", "redis"}, lines
    for engine, line in lines.items():
        assert line["outcome"] == "dry-run" and line["replanned"] and not line["applied"], line
        plan = Path(str(line["plan"]))
        assert plan.exists() and not plan.with_name(plan.name + ".state.json").exists()
        assert yaml.safe_load(plan.read_text())["engine"] == engine
        # A dry run does not adopt its plan: the next tick still sees no plan.
        assert not (tmp_path / f"lab-{engine}-autopilot.json").exists()
    assert "cassandra: dry run: would apply step" in winner.output
    assert "redis: " in winner.output


def test_redis_tick_applies_the_due_step_through_the_redis_executor(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    args = write_inputs(tmp_path)
    (hz,) = redis_running("hz")
    target = {"hz": 11 if hz != "11" else 12}
    plan = redis_plan(tmp_path / "redis.yml", current={"hz": int(hz)}, target=target)
    adopt(tmp_path, "redis", plan)
    before = pids()

    run = tick(*args, *only("redis"))

    assert run.rc == 0, run.output[-4000:]
    (line,) = log_lines(tmp_path)
    assert line["engine"] == "redis" and line["outcome"] == "applied" and line["applied"], line
    assert line["step"] == "s1" and Path(line["apply_log"]).exists()
    assert_no_secret(Path(line["apply_log"]).read_text(), "the executor's log")
    assert state_of(plan)["steps"]["s1"]["status"] == "applied"
    assert redis_running("hz") == {str(target["hz"])}
    assert pids() == before, "a live step restarted a node"
    assert not (tmp_path / "autopilot.lock").exists()

    again = tick(*args, *only("redis"))  # the step is done: nothing is applied twice
    assert again.rc == 0, again.output[-3000:]
    last = log_lines(tmp_path)[-1]
    assert last["outcome"] == "nothing-to-do" and "already applied" in last["message"], last
    assert state_of(plan)["steps"]["s1"]["attempts"] == 1


def test_a_failed_apply_releases_the_run_lock_holds_that_engine_and_is_not_reapplied(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    args = write_inputs(tmp_path)
    # Redis: the plan believes hz is something the nodes do not run, so the executor's
    # pre-flight refuses the step (nothing touched) and the tick fails for Redis.
    (hz,) = redis_running("hz")
    wrong = int(hz) + 1
    target = {"lazyfree-lazy-user-del": "no" if redis_running("lazyfree-lazy-user-del") == {"yes"}
              else "yes"}  # fmt: skip
    redis_file = redis_plan(tmp_path / "redis.yml", current={"hz": wrong}, target=target)
    adopt(tmp_path, "redis", redis_file)
    # Cassandra: its due step failed before; the same tick must still record it (held).
    cassandra_file, due = cassandra_plan_with_a_failed_step(tmp_path)
    cassandra_state = state_of(cassandra_file)
    before = pids()

    first = tick(*args)

    assert first.rc != 0 and "the autopilot tick failed for redis" in first.output, (
        first.output[-4000:]
    )
    assert not (tmp_path / "autopilot.lock").exists(), "a failed apply left the run lock"
    lines = by_engine(log_lines(tmp_path))
    assert lines["redis"]["outcome"] == "apply-failed", lines["redis"]
    assert "pre-flight refused, nothing was touched" in lines["redis"]["apply_error"]
    assert lines["cassandra"]["outcome"] == "held" and f"step {due} failed" in str(
        lines["cassandra"]["hold"]
    ), lines["cassandra"]
    failed = state_of(redis_file)["steps"]["s1"]
    assert failed["status"] == "failed" and failed["attempts"] == 1, failed
    assert state_of(cassandra_file) == cassandra_state
    assert redis_running("lazyfree-lazy-user-del") != {target["lazyfree-lazy-user-del"]}
    assert pids() == before

    second = tick(*args)

    assert second.rc == 0, second.output[-4000:]
    assert not (tmp_path / "autopilot.lock").exists()
    lines = by_engine(log_lines(tmp_path)[2:])
    assert lines["redis"]["outcome"] == "held" and not lines["redis"]["applied"], lines["redis"]
    assert "step s1 failed" in str(lines["redis"]["hold"])
    assert "waiting for a person" in str(lines["redis"]["hold"])
    assert lines["cassandra"]["outcome"] == "held"
    assert state_of(redis_file)["steps"]["s1"]["attempts"] == 1, "the failed step was re-applied"
    assert state_of(cassandra_file) == cassandra_state
    assert not list((tmp_path / "apply-logs").glob(f"{lines['redis']['run']}-*")), (
        "the second tick ran an executor"
    )
    assert pids() == before


def test_the_redis_demo_plans_and_applies_its_step_under_a_shifting_load(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    """`make demo-redis`, shortened (tests/demo_redis.sh): the load turns from write-heavy to
    read-heavy hashes; tick 1 judges the declared configuration's window, plans with the
    lab's calibrated Redis model and applies its step under load (a threshold change is a
    reload: every node restarts, replicas first); tick 2 judges the step's window. Nothing
    is forced: whatever step the planner chose must be running on every node and written in
    every conf file, with 0 failed operations and 0 lost WAIT-acknowledged writes, and its
    served gain is measured beside the expected one."""
    from ansible.module_utils.kairos_redis import parse_conf, same_value

    keep = ("maxmemory-policy", "hash-max-listpack-entries")
    original = {k: next(iter(redis_running(k))) for k in keep}
    demo = tmp_path / "demo"
    # Rounds every 5 s rather than 10: the same 10 points before tick 1 and a judged window
    # of 6 points, in half the time (CI time).
    env = dict(os.environ, KAIROS_DEMO_DIR=str(demo), KAIROS_DEMO_DAY="20", KAIROS_DEMO_LAB_UP="0",
               KAIROS_DEMO_STEP="5", KAIROS_DEMO_SETTLE="20", KAIROS_DEMO_WINDOW="30")
    try:
        run = subprocess.run(["bash", "tests/demo_redis.sh"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=1200)
        output = run.stdout + run.stderr
        print(output[-6000:])
        assert run.returncode == 0, output[-6000:]
        assert_no_secret(output, "the demo's output")
        summary = json.loads((demo / "summary.json").read_text())
        for name, load in summary["loads"].items():
            assert load["failed"] == 0 and load["failures"] == {}, (name, load["failures"])
            assert load["acknowledged_writes"] > 0 and load["verified"], name
            assert load["lost_acknowledged_writes"] == 0, name
        declared, *judged = summary["track"]
        assert declared["step_id"] == "current" and declared["plan"] == ""
        assert {k: declared["config"][k] for k in keep} == {
            "maxmemory-policy": "allkeys-lfu", "hash-max-listpack-entries": 512}
        (step,) = summary["steps"]  # the plan acted: one step, applied under load
        assert [j["step_id"] for j in judged] == [step["id"]], judged
        plan = Path(judged[0]["plan"])  # tick 2 may re-plan after it: the step's own plan
        state = json.loads(plan.with_name(plan.name + ".state.json").read_text())
        assert state["steps"][step["id"]]["status"] == "applied"
        for key, value in step["target"].items():
            assert redis_running(key) == {str(value)}, key
            for host, port in REDIS_PORTS.items():
                conf = parse_conf((REDIS_LAB / host / f"{port}.conf").read_text())
                assert same_value(conf[key], str(value)), (host, key, conf[key])
        assert step["expected"] is not None and step["expected"] > 0
        assert step["served_gain"] is not None and step["served_gain"] > 0, step
        assert f"step {step['id']} (" in output and "served by the same closed loop" in output
    finally:
        restored = run_playbook("playbooks/change_settings_redis.yml",
                                "-e", json.dumps({"settings": original}))
        assert restored.rc == 0, restored.output[-3000:]
