"""The control host's modules' main flows: the run lock, the lab's process manager, and
the planner run in process.

They act on local files and processes only, so the tests use real ones: a lock file in a
temporary directory, and a ``sleep`` started and stopped by kairos_process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible.module_utils import basic

from tests.unit.test_modules_harness import ModuleFailed, run_module


# ------------------------------------------------------------------- kairos_lock
def lock(path: Path, owner: str, **more: Any) -> dict[str, Any]:
    return run_module("kairos_lock", {"path": str(path), "owner": owner, **more})


def test_lock_taken_then_refreshed_then_released(tmp_path: Path) -> None:
    path = tmp_path / "state" / "lab-cassandra.lock"
    taken = lock(path, "run-1")
    assert taken["changed"] is True and taken["holder"]["owner"] == "run-1"
    assert json.loads(path.read_text())["owner"] == "run-1"  # read back from the file
    again = lock(path, "run-1")
    assert again["changed"] is False
    assert again["holder"]["heartbeat_at"] >= taken["holder"]["heartbeat_at"]
    released = lock(path, "run-1", state="absent")
    assert released == {"changed": True, "holder": {}, "where": "file"} and not path.exists()
    assert lock(path, "run-1", state="absent") == {"changed": False, "holder": {},
                                                   "where": "file"}


def test_a_lock_held_by_a_live_run_is_refused_naming_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "lab.lock"
    # Held from another control host with a fresh heartbeat: alive.
    path.write_text(json.dumps({"owner": "run-0", "host": "elsewhere", "pid": 1,
                                "created": "2026-11-21T12:00:00+0000",
                                "heartbeat_at": time.time()}))
    held = (r"another Kairos run holds \S+ \(owner run-0 on elsewhere, pid 1, "
            r"since 2026-11-21T12:00:00")
    with pytest.raises(ModuleFailed, match=held) as failed:
        lock(path, "run-1")
    assert failed.value.result["locked"] is True
    assert lock(path, "run-1", state="absent")["changed"] is False  # not ours: left alone
    assert json.loads(path.read_text())["owner"] == "run-0"


def test_a_dead_holders_lock_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "lab.lock"
    path.write_text(json.dumps({"owner": "run-0", "host": "elsewhere", "pid": 1,
                                "heartbeat_at": time.time() - 3600}))
    taken = lock(path, "run-1", stale_after=60)
    assert taken["changed"] is True and taken["holder"]["owner"] == "run-1"
    assert taken["holder"]["host"] == socket.gethostname()


def test_a_lease_whose_cluster_does_not_answer_falls_back_to_the_file(tmp_path: Path) -> None:
    """A first install: no node answers yet, so the file is the lock, with a warning; the
    release then frees the file."""
    path = tmp_path / "lab-cassandra.lock"
    lease = {"engine": "cassandra", "name": "lab-cassandra", "hosts": ["127.0.0.254"],
             "port": 1, "timeout": 2}
    with mock.patch.object(basic.AnsibleModule, "warn") as warn:
        taken = lock(path, "run-1", lease=lease)
    assert taken["where"] == "file" and taken["holder"]["owner"] == "run-1"
    (said,), _ = warn.call_args
    assert "the lease lab-cassandra cannot be read" in said and str(path) in said
    assert json.loads(path.read_text())["owner"] == "run-1"
    released = lock(path, "run-1", lease=lease, state="absent")
    assert released["changed"] is True and not path.exists()


def test_lock_refuses_an_unknown_state(tmp_path: Path) -> None:
    with pytest.raises(ModuleFailed, match="value of state must be one of: present, absent"):
        lock(tmp_path / "lab.lock", "run-1", state="held")


# ---------------------------------------------------------------- kairos_process
MATCH = "kairos-process-unit-test"


def process(pidfile: Path, **more: Any) -> dict[str, Any]:
    return run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH, **more})


def command() -> list[str]:
    # A server stand-in: sleeps, and carries MATCH on its command line.
    return [sys.executable, "-c", "import time; time.sleep(60)", MATCH]


def test_process_check_mode_reports_a_start_and_starts_nothing(tmp_path: Path) -> None:
    pidfile = tmp_path / "node.pid"
    result = run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH,
                                           "command": command()}, check_mode=True)
    assert result == {"changed": True, "was_running": False, "pid": 0}
    assert not pidfile.exists()


# The module detaches the server (its own session) and never waits for it, on purpose.
@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_process_started_once_then_stopped(tmp_path: Path) -> None:
    pidfile = tmp_path / "node.pid"
    started = process(pidfile, command=command(), log=str(tmp_path / "out.log"))
    pid = started["pid"]
    try:
        assert started["changed"] is True and int(pidfile.read_text()) == pid
        again = process(pidfile, command=command())
        assert again == {"changed": False, "was_running": True, "pid": pid}
        stopped = process(pidfile, state="stopped", stop_timeout=10)
        assert stopped["changed"] is True and stopped["pid"] == pid
        assert not pidfile.exists()
        assert process(pidfile, state="stopped") == {"changed": False, "pid": 0,
                                                     "was_running": False}
    finally:
        if pidfile.exists():
            os.kill(pid, 9)


def test_process_start_needs_a_command(tmp_path: Path) -> None:
    with pytest.raises(ModuleFailed, match="'command' is required when state=started"):
        process(tmp_path / "node.pid")


@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_process_restarted_writes_its_files_while_down(tmp_path: Path) -> None:
    pidfile, conf = tmp_path / "node.pid", tmp_path / "conf.yaml"
    conf.write_text("writers: 2\n")
    same = tmp_path / "same.options"
    same.write_text("-Xmx1G\n")
    same.chmod(0o644)
    files = [{"path": str(conf), "content": "writers: 4\n"},
             {"path": str(same), "content": "-Xmx1G\n"}]
    first = process(pidfile, command=command())
    try:
        checked = run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH,
                                                "command": command(), "files": files,
                                                "state": "restarted"}, check_mode=True)
        assert checked["changed"] is True and checked["files_written"] is False
        assert checked["files_changed"] == [str(conf)]
        assert checked["diff"] == [{"before_header": str(conf), "after_header": str(conf),
                                    "before": "writers: 2\n", "after": "writers: 4\n"}]
        assert conf.read_text() == "writers: 2\n" and int(pidfile.read_text()) == first["pid"]

        done = process(pidfile, command=command(), files=files, state="restarted",
                       stop_timeout=10)
        assert done["files_written"] is True and done["files_changed"] == [str(conf)]
        assert done["pid"] != first["pid"] and int(pidfile.read_text()) == done["pid"]
        assert "stop_seconds" in done and conf.read_text() == "writers: 4\n"
        assert oct(conf.stat().st_mode & 0o777) == "0o644"
        assert not list(tmp_path.glob(".kairos-*"))  # no temporary file left behind
    finally:
        current = int(pidfile.read_text()) if pidfile.exists() else 0
        for pid in {first["pid"], current} - {0}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def test_process_restarted_says_whether_the_files_were_written_when_it_fails(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "conf.yaml"
    dies = [sys.executable, "-c", "raise SystemExit(3)", MATCH]
    with pytest.raises(ModuleFailed, match="exited at once with status 3") as failed:
        process(tmp_path / "node.pid", command=dies, state="restarted",
                files=[{"path": str(conf), "content": "x: 1\n"}])
    assert failed.value.result["files_written"] is True and conf.read_text() == "x: 1\n"
    with pytest.raises(ModuleFailed, match=r"files\[\]\.mode '9x' of .* is not octal"):
        process(tmp_path / "node.pid", command=dies, state="restarted",
                files=[{"path": str(conf), "content": "x: 2\n", "mode": "9x"}])
    assert conf.read_text() == "x: 1\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_process_waits_for_a_launcher_that_prepares_before_it_execs_the_server(
    tmp_path: Path,
) -> None:
    """A launcher that works before it execs (the Cassandra launcher dumping its class
    archive): its command line does not carry MATCH yet, and it is still starting."""
    pidfile, port = tmp_path / "node.pid", free_port()
    # Both note the moment (CLOCK_MONOTONIC, shared by every process) they began and listened.
    began, listened = tmp_path / "began", tmp_path / "listened"
    note = "import time; open('{}', 'w').write(repr(time.monotonic()))"
    server = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); "
              f"s.listen(); {note.format(listened)}; time.sleep(60)")
    launcher = tmp_path / "run.sh"
    launcher.write_text(f"#!/bin/sh\n{sys.executable} -c \"{note.format(began)}\"\nsleep 1.5\n"
                        f"exec {sys.executable} -c \"{server}\" {MATCH}\n")
    launcher.chmod(0o755)
    started = process(pidfile, command=[str(launcher)], ready_port=port, ready_timeout=20)
    try:
        # The server's start counts from its launch, the launcher's work included (not from
        # after the module's half-second launch check).
        own = float(listened.read_text()) - float(began.read_text())
        assert started["changed"] is True and started["ready_seconds"] >= own >= 1.5
        # The pid is the server's now (the launcher exec'd), and it is recognised as ours.
        assert process(pidfile, command=[str(launcher)])["was_running"] is True
    finally:
        os.kill(started["pid"], 9)
    dies = tmp_path / "dies.sh"
    dies.write_text("#!/bin/sh\nsleep 1.5\nexit 4\n")
    dies.chmod(0o755)
    with pytest.raises(ModuleFailed, match=r"died before 127\.0\.0\.1:\d+ accepted"):
        process(tmp_path / "other.pid", command=[str(dies)], ready_port=free_port(),
                ready_timeout=20)


# ------------------------------------------------------------------ kairos_files
def test_files_writes_only_what_differs_and_check_mode_writes_nothing(tmp_path: Path) -> None:
    conf, record = tmp_path / "cassandra.yaml", tmp_path / "kairos-applied.json"
    conf.write_text("writers: 2\n")
    conf.chmod(0o644)
    record.write_text("{}\n")
    record.chmod(0o600)
    files = [{"path": str(conf), "content": "writers: 4\n"},
             {"path": str(record), "content": "{}\n"}]  # same content, mode 0644 wanted
    checked = run_module("kairos_files", {"files": files}, check_mode=True)
    assert checked["changed"] is True
    assert checked["files_changed"] == [str(conf), str(record)]
    assert [d["before_header"] for d in checked["diff"]] == [str(conf)]  # content diffs only
    assert conf.read_text() == "writers: 2\n" and record.stat().st_mode & 0o777 == 0o600
    done = run_module("kairos_files", {"files": files})
    assert done["files_changed"] == [str(conf), str(record)]
    assert conf.read_text() == "writers: 4\n" and record.stat().st_mode & 0o777 == 0o644
    assert run_module("kairos_files", {"files": files}) == {
        "changed": False, "files_changed": [], "diff": []}
    with pytest.raises(ModuleFailed, match=r"cannot write .*/absent/x"):
        run_module("kairos_files", {"files": [{"path": str(tmp_path / "absent" / "x"),
                                               "content": ""}]})


# ------------------------------------------------------------------- kairos_command
def kairos(*argv: str) -> dict[str, Any]:
    return run_module("kairos_command", {"argv": list(argv)})


def test_kairos_command_runs_the_cli_in_process_and_returns_its_output(tmp_path: Path) -> None:
    state = tmp_path / "lab.state.json"
    done = kairos("rollout", "record", "--state", str(state), "--step", "s1",
                  "--status", "failed", "--error", "cass1: the gate timed out")
    assert done["rc"] == 0 and done["changed"] is False and done["stderr"] == ""
    printed = json.loads(done["stdout"])
    assert printed["status"] == "failed" and printed["error"] == "cass1: the gate timed out"
    # What it printed is what it wrote: read back from the state file.
    recorded = json.loads(state.read_text())["steps"]["s1"]
    assert recorded["status"] == "failed" and recorded["error"] == printed["error"]
    assert done["cmd"][:3] == ["kairos", "rollout", "record"]


def test_kairos_command_fails_with_the_clis_error_and_exit_code(tmp_path: Path) -> None:
    # A refusal (KairosError): exit 2 and the CLI's own message, as the console script.
    message = r"^kairos rollout: error: rollout \S+nope.json: no such file"
    with pytest.raises(ModuleFailed, match=message) as refused_run:
        kairos("rollout", "guard", "--rollout", str(tmp_path / "nope.json"),
               "--ring", str(tmp_path / "ring.json"), "--batch", "cass1")
    assert refused_run.value.result["rc"] == 2 and refused_run.value.result["stdout"] == ""
    # A usage error (argparse exits): exit 2 and its usage text, not a traceback.
    required = "the following arguments are required: --batch"
    with pytest.raises(ModuleFailed, match=required) as usage:
        kairos("rollout", "guard", "--rollout", "r.json", "--ring", "ring.json")
    assert usage.value.result["rc"] == 2 and "usage:" in usage.value.result["stderr"]
    assert "Traceback" not in usage.value.result["stderr"]
