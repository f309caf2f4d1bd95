"""Envelopes (module_utils/kairos_cgroup.py, kairos_process's envelope, kairos_envelope,
planner/loadgen/envelope.py) on this machine's real cgroups, where they can be used (as root, v1 or
v2 with controllers); the input checks everywhere.

Each test makes its own envelope, named after the test and its pid, and removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import kairos_cgroup as cgroup

from planner.errors import KairosError
from planner.loadgen import envelope
from tests.unit.test_modules_harness import ModuleFailed, run_module

KIND, FOLDERS = cgroup.layout()
needs_cgroups = pytest.mark.skipif(KIND is None, reason=f"no envelopes here: {FOLDERS}")
MATCH = "kairos-envelope-unit-test"


def name(tag: str) -> str:
    return f"unit-{tag}-{os.getpid()}"


def sleeper() -> list[str]:
    return [sys.executable, "-c", "import time; time.sleep(60)", MATCH]


# -------------------------------------------------------------------- input checks
@pytest.mark.parametrize(("limits", "message"), [
    ({"cpu": "half"}, r"envelope field cpu: 'half' is not a number"),
    ({"cpu": 0.001}, r"cpu: 0.001 cores is below the kernel's 1 ms quota minimum"),
    ({"memory": "-1G"}, r"envelope field memory: '-1G' must be above zero"),
    ({"memory": "1.5X"}, r"envelope field memory: '1.5X' is not a number"),
    ({"read_iops": 0}, r"envelope field read_iops: 0 must be above zero"),
    ({"cpu_weight": 20000}, r"cpu_weight: 20000 is above 10000"),
    ({"cpus": 1}, r"unknown envelope field\(s\) cpus; expected cpu, cpu_weight, memory"),
])
def test_bad_limits_are_refused_naming_the_field(limits: dict[str, Any], message: str) -> None:
    with pytest.raises(cgroup.EnvelopeError, match=message):
        cgroup.check_limits(limits)


def test_limits_take_sizes_and_leave_the_rest_uncapped() -> None:
    assert cgroup.check_limits({"cpu": 0.5, "memory": "1536M", "read_bps": "64MiB"}) == {
        "cpu": 0.5, "cpu_weight": None, "memory": 1536 << 20, "read_iops": None,
        "read_bps": 64 << 20}
    assert cgroup.parse_bytes("1.5G") == 1536 << 20 and cgroup.parse_bytes(4096) == 4096
    assert cgroup.describe(cgroup.check_limits({"cpu": 0.5, "memory": "1536M",
                                                "read_iops": 1500})) == (
        "0.5 CPU, 1.50 GiB, 1500 read IOPS")


def test_own_cgroups_and_the_starters_base_cut_before_any_kairos_folder(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("12:cpu,cpuacct:/\n4:memory:/machine/abc/kairos/lab-control\n0::/user\n")
    assert cgroup.own_cgroups(str(proc)) == {
        "cpu": "/", "cpuacct": "/", "memory": "/machine/abc/kairos/lab-control", "": "/user"}
    # A starter inside a Kairos envelope (the test session in "control") nests the nodes
    # beside itself, never inside its own caps.
    assert cgroup._base("/machine/abc/kairos/lab-control") == "machine/abc"
    assert cgroup._base("/") == ""


def test_no_cgroup_hierarchy_is_a_reason_not_an_error(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    kind, reason = cgroup.layout(root=str(tmp_path / "none"), proc_file=str(proc))
    assert kind is None and "no cgroup v1 cpu/memory/blkio" in reason


def test_the_data_disk_is_found_for_read_caps() -> None:
    device = cgroup.block_device(str(Path(__file__).parent))
    if device is not None:  # tmpfs or overlay has none; then read caps are refused
        major, minor = device.split(":")
        assert Path(f"/sys/dev/block/{major}:{minor}").exists()
        assert not Path(f"/sys/dev/block/{device}/partition").exists()


def test_the_load_clients_envelope_names_a_bad_directory(tmp_path: Path) -> None:
    with pytest.raises(KairosError, match=r"KAIROS_LOAD_CGROUPS: .* is not a cgroup"):
        envelope.join([str(tmp_path)])
    assert envelope.cgroup_dirs({envelope.ENV: f"/a{os.pathsep}/b"}) == ["/a", "/b"]
    assert envelope.cgroup_dirs({}) == []
    assert envelope.lab_envelopes(str(tmp_path / "missing.json")) == {}
    bad = tmp_path / "envelopes.json"
    bad.write_text("{not json")
    with pytest.raises(KairosError, match=r"envelopes.json: cannot read the lab's envelopes"):
        envelope.lab_envelopes(str(bad))


def test_kairos_process_refuses_a_bad_envelope_before_starting(tmp_path: Path) -> None:
    if KIND is None:
        pytest.skip(f"no envelopes here: {FOLDERS}")
    pidfile = tmp_path / "node.pid"
    with pytest.raises(ModuleFailed, match=r"envelope unit-.*: envelope field cpu: 0.0001"):
        run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH,
                                      "command": sleeper(),
                                      "envelope": {"name": name("bad"), "cpu": 0.0001}})
    assert not pidfile.exists()


# ------------------------------------------------------------ on the real cgroups
@needs_cgroups
@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_a_process_starts_inside_its_envelope_and_the_limits_read_back(tmp_path: Path) -> None:
    pidfile, label = tmp_path / "node.pid", name("node")
    spec = {"name": label, "cpu": 0.25, "memory": "64M", "read_iops": 700,
            "device_path": str(tmp_path)}
    started = run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH,
                                            "command": sleeper(), "envelope": spec})
    pid = started["pid"]
    try:
        held = started["envelope"]
        assert held["applied"] is True and held["inside"] is True and held["pids"] == [pid]
        wanted = {"cpu": 0.25, "memory": 64 << 20, "read_iops": 700, "read_bps": None}
        assert {k: held["limits"][k] for k in wanted} == wanted
        # The same run on a running process: nothing started, the limits set again live.
        spec["memory"] = "96M"
        again = run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH,
                                              "command": sleeper(), "envelope": spec})
        assert again["changed"] is False and again["pid"] == pid
        assert again["envelope"]["limits"]["memory"] == 96 << 20
        read = run_module("kairos_envelope", {"name": label, "sample_seconds": 0.2})
        assert read["exists"] is True and read["pids"] == [pid]
        assert read["summary"] == "0.25 CPU, 0.09 GiB, 700 read IOPS"
        assert read["rates"]["cpu_cores"] < 0.1  # a sleeper
        assert read["report"].startswith(f"0.25 CPU, 0.09 GiB, 700 read IOPS (cgroup {KIND}")
        with pytest.raises(cgroup.EnvelopeError, match=r"cannot remove .*processes still inside"):
            cgroup.remove(KIND, FOLDERS, label, timeout=0.5)
    finally:
        run_module("kairos_process", {"pidfile": str(pidfile), "match": MATCH,
                                      "state": "stopped", "stop_timeout": 10})
    gone = run_module("kairos_envelope", {"name": label, "state": "absent"})
    assert gone["changed"] is True and cgroup.read(KIND, FOLDERS, label) is None
    assert run_module("kairos_envelope", {"name": label, "state": "absent"})["changed"] is False


@contextlib.contextmanager
def joined_child(groups: list[str], label: str) -> Iterator[int]:
    """A forked child that joins ``groups`` like a load worker and waits; killed after."""
    child = os.fork()
    if child == 0:
        envelope.join(groups)
        time.sleep(30)
        os._exit(0)
    try:
        for _ in range(50):
            if cgroup.read(KIND, FOLDERS, label)["pids"] == [child]:
                break
            time.sleep(0.05)
        assert cgroup.read(KIND, FOLDERS, label)["pids"] == [child]
        yield child
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


@needs_cgroups
def test_a_side_envelope_is_made_joined_left_and_removed() -> None:
    label = name("side")
    made = run_module("kairos_envelope", {"name": label, "state": "present",
                                          "limits": {"cpu_weight": 10}})
    try:
        assert made["changed"] is True and made["limits"]["cpu_weight"] == 10
        assert made["summary"] == "CPU weight 10"
        again = run_module("kairos_envelope", {"name": label, "state": "present",
                                               "limits": {"cpu_weight": 10}})
        assert again["changed"] is False and again["groups"] == made["groups"]
        with joined_child(made["groups"], label) as child:
            envelope.leave(made["groups"], child)
            assert cgroup.read(KIND, FOLDERS, label)["pids"] == []
        # A measurement's provenance names it as the kernel holds it, and a missing one.
        assert cgroup.held([label, name("absent")]) == {
            "envelopes": {label: "CPU weight 10", name("absent"): "none"}, "cgroup": KIND}
        # With no names, every envelope in the folder (a calibration's provenance).
        assert cgroup.held()["envelopes"][label] == "CPU weight 10"
        assert name("absent") not in cgroup.held()["envelopes"]
    finally:
        assert run_module("kairos_envelope", {"name": label, "state": "absent"})["changed"]


@needs_cgroups
def test_removing_a_side_envelope_with_evict_moves_what_is_left_out_first() -> None:
    label = name("evict")
    made = run_module("kairos_envelope", {"name": label, "state": "present",
                                          "limits": {"cpu_weight": 10}})
    with joined_child(made["groups"], label) as child:  # a load draining at lab-down
        with pytest.raises(ModuleFailed, match=r"processes still inside"):
            run_module("kairos_envelope", {"name": label, "state": "absent", "timeout": 0.5})
        gone = run_module("kairos_envelope", {"name": label, "state": "absent", "evict": True})
        assert gone["changed"] is True and cgroup.read(KIND, FOLDERS, label) is None
        assert os.waitpid(child, os.WNOHANG) == (0, 0), "evicted, not killed"


@needs_cgroups
def test_entering_the_lab_joins_control_and_names_the_load_envelope(tmp_path: Path) -> None:
    sides = {side: run_module("kairos_envelope", {"name": name(side), "state": "present",
                                                  "limits": {"cpu_weight": 10}})["groups"]
             for side in ("control", "load")}
    path = tmp_path / "envelopes.json"
    path.write_text(json.dumps(sides))
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        assert envelope.enter_lab(str(path), child) == sides
        assert cgroup.read(KIND, FOLDERS, name("control"))["pids"] == [child]
        assert envelope.cgroup_dirs() == sides["load"]
        envelope.leave_lab(sides, child)
        assert cgroup.read(KIND, FOLDERS, name("control"))["pids"] == []
        assert envelope.ENV not in os.environ
        assert envelope.enter_lab(str(tmp_path / "none.json")) == {}  # a lab without them
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.environ.pop(envelope.ENV, None)
        for side in sides:
            run_module("kairos_envelope", {"name": name(side), "state": "absent"})
