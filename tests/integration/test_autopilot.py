"""playbooks/autopilot.yml on the real lab: the run lock, a failed step holds, dry-run.

Every run uses its own autopilot directory and run lock (tmp_path) and a synthetic trace
that ends now (write-heavy, then read-heavy), so the planner has something to plan; the
apply lock stays the lab's. No test here restarts a node: the pid files prove it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from planner.workload import WorkloadSeries, save_trace

from .conftest import REPO, PlaybookRun

pytestmark = [pytest.mark.lab, pytest.mark.cassandra]

HOSTS = ("cass1", "cass2", "cass3")
LAB = REPO / ".lab" / "cassandra"
BIN = Path(sys.executable).parent
LOCK_MESSAGE = "another Kairos run holds"


def pids() -> dict[str, int]:
    return {h: int((LAB / h / "cassandra.pid").read_text()) for h in HOSTS}


def write_inputs(tmp: Path) -> list[str]:
    """A trace ending now and the lab's current config; the autopilot's -e arguments."""
    n, step = 40, 20.0
    read = np.where(np.arange(n) < 20, 0.1, 0.9)
    save_trace(
        WorkloadSeries(
            engine="cassandra",
            # The trace ends a minute ago: the plan's first steps are due now.
            timestamps=time.time() - 60.0 - step * (n - 1 - np.arange(n)),
            load=np.full(n, 300.0),
            mix={"read": read, "update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
            step_seconds=step,
        ),
        tmp / "trace.csv",
    )
    (tmp / "current.yml").write_text("heap_size: 512M\n")
    return [
        "-e", f"kairos_autopilot_dir={tmp}",
        "-e", f"kairos_autopilot_lock_file={tmp}/autopilot.lock",
        "-e", f"kairos_autopilot_trace={tmp}/trace.csv",
        "-e", "kairos_autopilot_forecast_model=naive",
        "-e", "kairos_autopilot_horizon=30",
        "-e", f"kairos_autopilot_current={tmp}/current.yml",
        "-e", '{"kairos_autopilot_plan_args": ["--method", "dp"]}',
    ]  # fmt: skip


def start(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.Popen(
        [str(BIN / "ansible-playbook"), "playbooks/autopilot.yml", *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], began: float) -> PlaybookRun:
    out, _ = proc.communicate(timeout=300)
    return PlaybookRun(proc.returncode, out, time.monotonic() - began)


def log_lines(tmp: Path) -> list[dict[str, object]]:
    path = tmp / "autopilot.log.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_overlapping_runs_one_proceeds_the_other_exits_at_once_and_dry_run_applies_nothing(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    args = write_inputs(tmp_path)
    before = pids()
    began = time.monotonic()
    dry = ("-e", "kairos_dry_run=true")
    first, second = start(*args, *dry), start(*args, *dry)
    runs = [finish(first, began), finish(second, began)]
    winners = [r for r in runs if r.rc == 0]
    losers = [r for r in runs if r.rc != 0]
    assert len(winners) == 1 and len(losers) == 1, [r.output[-2000:] for r in runs]
    loser, winner = losers[0], winners[0]
    assert LOCK_MESSAGE in loser.output and "this run exits without touching the cluster" in (
        loser.output
    ), loser.output[-2000:]
    assert "Collect workload counters" not in loser.output  # it stopped at the lock
    assert not (tmp_path / "autopilot.lock").exists(), "the winner did not release the run lock"
    # Dry-run: planned and reported, nothing applied, no node restarted.
    assert pids() == before, "a dry run restarted a node"
    (line,) = log_lines(tmp_path)
    assert line["outcome"] == "dry-run" and line["replanned"] and not line["applied"], line
    plan = Path(str(line["plan"]))
    assert plan.exists() and not plan.with_name(plan.name + ".state.json").exists()
    assert "dry run: would apply step" in winner.output
    # A dry run does not adopt its plan: the next tick still sees no plan.
    assert not (tmp_path / "lab-cassandra-autopilot.json").exists()


def test_a_failed_step_is_not_reapplied_on_the_next_tick(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    args = write_inputs(tmp_path)
    kairos = str(BIN / "kairos")
    plan = tmp_path / "plan.yml"
    subprocess.run([kairos, "forecast", "--trace", str(tmp_path / "trace.csv"), "--horizon", "30",
                    "--model", "naive", "--out", str(tmp_path / "fc.json")],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run([kairos, "plan", "--forecast", str(tmp_path / "fc.json"), "--horizon", "30",
                    "--method", "dp", "--restart-seconds", "45", "--current",
                    str(tmp_path / "current.yml"), "-o", str(plan)],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run([kairos, "autopilot", "adopt", "--state-dir", str(tmp_path),
                    "--plan", str(plan), "--forecast", str(tmp_path / "fc.json")],
                   check=True, capture_output=True)  # fmt: skip
    decide = subprocess.run([kairos, "autopilot", "decide", "--state-dir", str(tmp_path)],
                            check=True, capture_output=True, text=True)  # fmt: skip
    due = json.loads(decide.stdout)["step"]
    assert due, decide.stdout
    subprocess.run([kairos, "rollout", "record", str(plan), "--step", due, "--status", "failed",
                    "--error", "cass2: did not come back (test)"],
                   check=True, capture_output=True)  # fmt: skip
    state_file = plan.with_name(plan.name + ".state.json")
    recorded = state_file.read_text()
    before = pids()
    began = time.monotonic()
    run = finish(start(*args), began)
    assert run.rc == 0, run.output[-3000:]
    assert pids() == before, "the failed step was applied again"
    assert state_file.read_text() == recorded, "the state file changed: something was attempted"
    (line,) = log_lines(tmp_path)
    assert line["outcome"] == "held" and not line["applied"] and not line["replanned"], line
    assert f"step {due} failed" in str(line["hold"]) and "waiting for a person" in str(line["hold"])
    assert "holding: step" in run.output
