"""A node dies outside the batch during a QUORUM rollout under load: no second node goes down.

One test, three faults (a kill -9 of a node outside the batch while the batch's node is in
its sync gate, in its drain, and in its start), each under continuous QUORUM load with
acknowledged-write checks. For each: the batch's node is left serving, nothing is stopped
after the kill, the step is recorded failed naming the dead node, and the lock is free;
after the first, the next run is refused at pre-flight naming the dead node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.loadgen import BackgroundLoad

from .conftest import BIN, REPO, assert_no_secret, cql_node_cluster, run_playbook
from .test_apply_plan import (
    HOSTS,
    Timeline,
    flush_writers_plan,
    node_pid,
    state,
    up_normal,
    yaml_setting,
)

pytestmark = [pytest.mark.lab, pytest.mark.cassandra, pytest.mark.usefixtures("lab")]

LOCK = REPO / ".kairos" / "lab-cassandra.lock"
BATCH_NODE, VICTIM = "cass1", "cass3"
# The task whose start is the fault's moment, and how long after its header the kill lands.
FAULTS = {
    "sync gate": ("cassandra : Sync gate - every peer sees the batch back", 1.0),
    "drain": ("cassandra : Drain the node", 0.5),
    "start": ("cassandra : Restart the node on its new files", 2.0),  # stopped, starting
}


def cql_open(address: str) -> bool:
    try:
        with socket.create_connection((address, 9042), timeout=0.3):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def seen_down(session: Any, address: str) -> bool:
    """The node's failure detector has convicted ``address`` (its hints' row says DOWN)."""
    try:
        rows = session.execute("SELECT address, status FROM system_views.pending_hints", timeout=2)
    except Exception:  # a busy node answers late: ask again next round
        return False
    return any(r.address == address and r.status == "DOWN" for r in rows)


def run_with_fault(plan: Path, task: str, delay: float, log: Path) -> dict[str, float | int | str]:
    """Apply ``plan``; when ``task`` starts, kill -9 the victim; return what happened when.

    Besides the kill and the batch node's return, it notes when the node outside the batch
    (never restarted here) convicted the victim: until then its coordinators still send the
    dead node requests, which time out whatever the rollout does."""
    witness = cql_node_cluster(HOSTS["cass2"])
    session = witness.connect()
    # A task's banner is printed when the task starts only when skipped hosts are shown
    # (else Ansible defers it to the first result): the fault's moment depends on it.
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               PYTHONUNBUFFERED="1", ANSIBLE_DISPLAY_SKIPPED_HOSTS="true")
    began = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "ansible-playbook"), "playbooks/apply_plan.yml", "-e", f"plan={plan}"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
        killed_at = back_at = down_seen_at = 0.0
        went_down = False
        batch_pid_at_kill = 0
        while proc.poll() is None and time.monotonic() - began < 900:
            if not killed_at and f"TASK [{task}" in log.read_text():
                time.sleep(delay)
                batch_pid_at_kill = node_pid(BATCH_NODE)
                os.kill(node_pid(VICTIM), signal.SIGKILL)
                killed_at = time.monotonic()
            if killed_at and not back_at:
                # "Back" is the first time the batch's node serves CQL after it was last
                # seen not serving (a drain closes the port a moment after it begins).
                serving = cql_open(HOSTS[BATCH_NODE])
                went_down = went_down or not serving
                if serving and went_down:
                    back_at = time.monotonic()
            if killed_at and not down_seen_at and seen_down(session, HOSTS[VICTIM]):
                down_seen_at = time.monotonic()
            time.sleep(0.2)
        back_at = back_at or (killed_at if not went_down else 0.0)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    witness.shutdown()
    output = log.read_text()
    assert_no_secret(output, "the output of apply_plan.yml")
    assert killed_at, f"the fault's task never started:\n{output[-3000:]}"
    return {"rc": proc.returncode, "output": output, "killed_at": killed_at,
            "back_at": back_at, "down_seen_at": down_seen_at,
            "batch_pid_at_kill": batch_pid_at_kill}


def bring_back_victim() -> None:
    back = run_playbook("playbooks/lab_up.yml", "--limit", VICTIM)
    assert back.rc == 0, back.output[-3000:]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(up_normal(h) == set(HOSTS.values()) for h in HOSTS):
            return
        time.sleep(2)
    pytest.fail("the lab did not come back to three UN nodes")


def test_a_node_dying_outside_the_batch_never_takes_a_second_node_down(tmp_path: Path) -> None:
    assert not LOCK.exists(), f"a stale lock is left: {LOCK.read_text()}"
    for number, (fault, (task, delay)) in enumerate(FAULTS.items()):
        batches = [["cass1"], ["cass2"], ["cass3"]]
        plan, _ = flush_writers_plan(tmp_path / f"fault-{number}.yml", batches)
        other = "cass2"
        other_pid = node_pid(other)
        timeline = Timeline()
        try:
            with BackgroundLoad(
                engine="cassandra", contact_points=list(HOSTS.values()), cl="QUORUM",
                keyspace="kairos_rollout", keys=2000, rate=300, concurrency=16,
                max_seconds=600, seed=11 + number, on_progress=timeline,
            ) as background:
                time.sleep(3)
                run = run_with_fault(plan, task, delay, tmp_path / f"fault-{number}.log")
                time.sleep(3)
            result = background.result()
            output = str(run["output"])
            killed_at, back_at = float(run["killed_at"]), float(run["back_at"])
            # Until the node outside the batch convicts the victim, its coordinators send the
            # dead node requests that time out, whatever the rollout does (20 s if unseen).
            convicted = float(run["down_seen_at"]) or killed_at + 20
            settled = max(back_at or killed_at, convicted)
            print(
                f"\nfault in the {fault}: rollout rc={run['rc']}; load {result.ops} ops, failures "
                f"{dict(result.failures)} ({timeline.failures_after(settled + 10)} later than "
                f"10 s after {BATCH_NODE} served and {VICTIM} was seen down), acknowledged "
                f"writes {result.acknowledged_writes}, lost {result.lost_acknowledged_writes}; "
                f"{BATCH_NODE} back "
                f"{back_at - killed_at if back_at else float('nan'):.1f} s and {VICTIM} seen "
                f"down {convicted - killed_at:.1f} s after the kill; failures at (s after the "
                f"kill, count) {timeline.failure_moments(killed_at)}"
            )
            assert run["rc"] != 0, output[-4000:]
            assert "rollout stopped: cass1 failed" in output, output[-4000:]
            assert f"{VICTIM} down outside the batch" in output, output[-4000:]
            recorded = state(plan)["steps"]["s1"]
            assert recorded["status"] == "failed" and VICTIM in recorded["error"], recorded
            assert not LOCK.exists(), "the failed rollout kept the lock"
            # No second node went down: the other node never restarted, the batch's node
            # serves, and it was not taken down again once the victim was dead.
            assert node_pid(other) == other_pid
            assert alive(node_pid(BATCH_NODE)) and cql_open(HOSTS[BATCH_NODE])
            assert HOSTS[BATCH_NODE] in up_normal(other)
            if fault == "sync gate":
                assert node_pid(BATCH_NODE) == run["batch_pid_at_kill"]
                # Two replicas were never down at once: no Unavailable / NoHostAvailable. A few
                # requests in flight to the killed node may time out until it is marked down.
                assert set(result.failures) <= {"WriteTimeout", "ReadTimeout"}, result.failures
                assert timeline.failures_after(settled + 10) == 0
            else:
                # Both replicas were down from the kill until the batch's node served again
                # (the drain or stop had begun): failures only in that window.
                assert back_at, f"{BATCH_NODE} never served again"
                # The driver reconnects once the peers announce the node up (seconds later).
                assert timeline.failures_after(settled + 10) == 0
            assert result.lost_acknowledged_writes == 0 and result.verified
            if number == 0:
                again = run_playbook(
                    "playbooks/apply_plan.yml", "-e", f"plan={plan}", "-e", "retry_failed=true"
                )
                assert again.rc != 0
                tail = again.output[-3000:]
                assert "pre-flight refused, nothing was touched" in again.output, tail
                assert f"down: {VICTIM}" in again.output, tail
                assert "batch 1 ['cass1']" in again.output, tail
                assert not LOCK.exists()
                assert node_pid(other) == other_pid
        finally:
            bring_back_victim()


def test_an_interrupted_rollout_frees_its_lock_at_once_and_resumes_after_the_verified_node(
    tmp_path: Path,
) -> None:
    """kill -9 of ansible-playbook after cass1 is verified: the next run takes the dead run's
    lock over at once and restarts only cass2 and cass3; a per_node live value lands on its
    node only, and every node is read back before the step is recorded applied."""
    assert not LOCK.exists(), f"a stale lock is left: {LOCK.read_text()}"
    batches = [["cass1"], ["cass2"], ["cass3"]]
    plan, writers = flush_writers_plan(tmp_path / "resume.yml", batches)
    doc = yaml.safe_load(plan.read_text())
    reads = 48 if yaml_setting("cass3", "concurrent_reads") != 48 else 40
    doc["current_config"]["concurrent_reads"] = yaml_setting("cass1", "concurrent_reads")
    doc["steps"][0]["per_node"] = {"cass3": {"concurrent_reads": reads}}
    doc["steps"][0]["live"] = ["concurrent_reads"]
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    state_file = plan.with_name(plan.name + ".state.json")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    log = tmp_path / "interrupted.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "ansible-playbook"), "playbooks/apply_plan.yml", "-e", f"plan={plan}"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            verified = json.loads(state_file.read_text())["steps"]["s1"].get("verified", {}) \
                if state_file.exists() else {}
            if "cass1" in verified:
                os.killpg(proc.pid, signal.SIGKILL)  # the run dies: no rescue, no release
                break
            time.sleep(0.5)
        proc.wait()
    assert "cass1" in verified, log.read_text()[-3000:]
    assert LOCK.exists(), "the killed run had the lock"
    pids_before = {h: node_pid(h) for h in HOSTS}

    run = run_playbook("playbooks/apply_plan.yml", "-e", f"plan={plan}", timeout=900)
    assert run.rc == 0, run.output[-4000:]
    assert "taking over the lock of" in run.output and "is gone" in run.output
    assert "resuming step s1: cass1 already verified" in run.output, run.output[-4000:]
    assert node_pid("cass1") == pids_before["cass1"], "a verified node was restarted again"
    assert all(node_pid(h) != pids_before[h] for h in ("cass2", "cass3"))
    assert all(yaml_setting(h, "memtable_flush_writers") == writers for h in HOSTS)
    assert yaml_setting("cass3", "concurrent_reads") == reads
    assert all(yaml_setting(h, "concurrent_reads") != reads for h in ("cass1", "cass2"))
    recorded = state(plan)["steps"]["s1"]
    assert recorded["status"] == "applied"
    assert set(recorded["verified"]) == set(HOSTS)
    assert recorded["verified"]["cass3"]["readback"]["running"]["concurrent_reads"] == str(reads)
    assert not LOCK.exists()
