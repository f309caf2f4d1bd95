"""The Cassandra executor (playbooks/apply_plan.yml) on the real 3-node lab, RF 3.

Every test writes its own plan; each rollout's target differs from what the nodes run now
(read from their rendered cassandra.yaml), so the tests do not depend on their order.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import kairos_cgroup as cgroup
from ansible.module_utils.kairos_nodetool import parse_concurrency, parse_status

from planner.loadgen import BackgroundLoad, LoadResult

from .conftest import APP_TABLE, REPO, PlaybookRun, cql_cluster, ensure_app_table, run_playbook
from .lab_plans import (
    HOSTS,
    LAB,
    flush_writers_plan,
    node_pid,
    pids,
    toggle,
    write_plan,
    yaml_setting,
)

pytestmark = [pytest.mark.lab, pytest.mark.cassandra]

# ----------------------------------------------------------------- helpers
def nodetool(host: str, *args: str) -> str:
    return subprocess.run(
        [str(LAB / host / "bin" / "nodetool"), *args], capture_output=True, text=True, check=True
    ).stdout


def node_envelope(host: str) -> dict[str, Any] | None:
    """The node's envelope as the kernel holds it; None on a machine without envelopes."""
    kind, folders = cgroup.layout()
    if kind is None:
        return None
    held = cgroup.read(kind, folders, f"lab-{host}")
    assert held is not None, f"{host} runs without its envelope"
    return held


def up_normal(host: str) -> set[str]:
    return {n["address"] for n in parse_status(nodetool(host, "status")) if n["code"] == "UN"}


def apply(plan: Path, *args: str) -> PlaybookRun:
    run = run_playbook("playbooks/apply_plan.yml", "-e", f"plan={plan}", *args, timeout=900)
    print(f"\napply_plan.yml rc={run.rc} in {run.seconds:.1f} s")
    return run


def state(plan: Path) -> dict[str, Any]:
    return json.loads(plan.with_name(plan.name + ".state.json").read_text())


@dataclass
class Timeline:
    """(monotonic time, failed operations so far), about every second, from the load."""

    points: list[tuple[float, int]] = field(default_factory=list)

    def __call__(self, _elapsed: float, _ops: int, failures: int) -> None:
        self.points.append((time.monotonic(), failures))

    def failures_after(self, moment: float) -> int:
        before = [f for t, f in self.points if t <= moment]
        return self.points[-1][1] - (before[-1] if before else 0)

    def failure_moments(self, since: float) -> list[tuple[float, int]]:
        """(seconds after ``since``, new failures) for every second in which some failed."""
        moments, last = [], 0
        for t, failures in self.points:
            if failures > last:
                moments.append((round(t - since, 1), failures - last))
            last = failures
        return moments


def load(cl: str, timeline: Timeline | None = None) -> BackgroundLoad:
    return BackgroundLoad(
        on_progress=timeline,
        engine="cassandra",
        contact_points=list(HOSTS.values()),
        cl=cl,
        keyspace="kairos_rollout",
        keys=2000,
        rate=300,
        concurrency=16,
        max_seconds=600,
        seed=7,
    )


def report(label: str, result: LoadResult, run: PlaybookRun,
           timeline: Timeline | None = None, began: float = 0.0) -> None:
    print(
        f"{label}: {result.ops} ops ({result.ops_per_s:.0f}/s), failures {dict(result.failures)}, "
        f"acknowledged writes {result.acknowledged_writes}, lost "
        f"{result.lost_acknowledged_writes}; rollout {run.seconds:.1f} s"
    )
    if timeline is not None and result.failed:
        # When they happened, to tell which phase of which node they belong to.
        print(f"failures at (s after the rollout began, count): {timeline.failure_moments(began)}")


@pytest.fixture(scope="module", autouse=True)
def app_table(lab: PlaybookRun) -> Iterator[None]:
    """The application table a plan's compaction change names; no lock before or after."""
    ensure_app_table()
    lock = REPO / ".kairos" / "lab-cassandra.lock"
    assert not lock.exists(), f"a stale lock is left: {lock.read_text()}"
    yield
    assert not lock.exists(), "a rollout left the lock behind"


def ensure_second_table() -> str:
    """A second application table (RF 3), for a plan that gives a table its own options."""
    table = "kairos_app.profiles"
    cluster = cql_cluster(["127.0.0.1", "127.0.0.2", "127.0.0.3"], app=True)
    try:
        cluster.connect().execute(
            f"CREATE TABLE IF NOT EXISTS {table} (id bigint PRIMARY KEY, body text)", timeout=60)
    finally:
        cluster.shutdown()
    return table


def table_compactions() -> dict[str, str]:
    """The kairos_app tables' compaction classes (short names), read over CQL."""
    cluster = cql_cluster(["127.0.0.1"])
    try:
        rows = cluster.connect().execute(
            "SELECT table_name, compaction FROM system_schema.tables "
            "WHERE keyspace_name='kairos_app'")
        return {r.table_name: r.compaction["class"].rsplit(".", 1)[-1] for r in rows}
    finally:
        cluster.shutdown()


# ------------------------------------------------------------------- tests
def test_malformed_plan_is_refused_before_anything_is_touched(tmp_path: Path) -> None:
    before = pids()
    bad_yaml = tmp_path / "broken.yml"
    bad_yaml.write_text("schema_version: 1\nsteps: [\n")
    # A value the nodes do not run, else the plan is refused for changing nothing.
    writers = toggle(yaml_setting("cass1", "memtable_flush_writers"), 3, 4)
    unknown_host = write_plan(
        tmp_path / "unknown.yml",
        target={"memtable_flush_writers": writers},
        live=[],
        restart=["memtable_flush_writers"],
        batches=[["cass1"], ["cass9"], ["cass2", "cass3"]],
    )
    out_of_space = write_plan(
        tmp_path / "range.yml",
        target={"concurrent_reads": 100000},
        live=["concurrent_reads"],
        restart=[],
        batches=[],
    )
    for plan, named in (
        (bad_yaml, "YAML"),
        (unknown_host, "cass9"),
        (out_of_space, "concurrent_reads"),
    ):
        run = apply(plan)
        assert run.rc != 0, run.output[-2000:]
        assert "plan refused before touching any node" in run.output
        assert named in run.output, run.output[-2000:]
        assert set(run.recap()) == {"localhost"}, "a cluster node was visited"
    assert pids() == before


def test_live_only_change_restarts_nothing_and_the_file_matches(tmp_path: Path) -> None:
    """A live step, with a table of its own (issue 42): the application table gets the
    step's compaction, a second table its per_table override."""
    before = pids()
    reads = toggle(yaml_setting("cass1", "concurrent_reads"), 40, 56)
    writes = toggle(yaml_setting("cass1", "concurrent_writes"), 40, 56)
    own = ensure_second_table()
    plan = write_plan(
        tmp_path / "live.yml",
        target={
            "concurrent_reads": reads,
            "concurrent_writes": writes,
            "compaction": "LeveledCompactionStrategy",
        },
        live=["compaction", "concurrent_reads", "concurrent_writes"],
        restart=[],
        batches=[],
        tables=[APP_TABLE, own],
        per_table={own: {"compaction": "UnifiedCompactionStrategy"}},
    )
    began = time.monotonic()
    # -vvv --diff prints every module's arguments and results: run_playbook fails if a
    # CQL or JMX password shows up in them.
    run = apply(plan, "-vvv", "--diff", "-e", json.dumps({"kairos_tables": [APP_TABLE]}))
    print(f"live-only change applied in {time.monotonic() - began:.1f} s")
    assert run.rc == 0, run.output[-3000:]
    assert pids() == before, "a live-only change restarted a node"
    for host in HOSTS:
        pools = parse_concurrency(nodetool(host, "getconcurrency", "ReadStage", "MutationStage"))
        assert pools == {"ReadStage": reads, "MutationStage": writes}
        assert yaml_setting(host, "concurrent_reads") == reads
        assert yaml_setting(host, "concurrent_writes") == writes
    assert table_compactions() == {"events": "LeveledCompactionStrategy",
                                   "profiles": "UnifiedCompactionStrategy"}
    recorded = state(plan)["steps"]["s1"]
    assert recorded["status"] == "applied"
    # Applied only after every node read its values back (and each table its compaction).
    for host in HOSTS:
        readback = recorded["verified"][host]["readback"]
        assert readback["tables"] == {APP_TABLE: "LeveledCompactionStrategy",
                                      own: "UnifiedCompactionStrategy"}
        assert readback["running"]["concurrent_reads"] == str(reads)
        assert readback["file"]["concurrent_writes"] == writes

    again = apply(plan)
    assert again.rc == 0, again.output[-3000:]
    assert "was applied" in again.output
    assert again.changed() == 0, again.output[-3000:]
    assert pids() == before


def test_check_mode_shows_every_change_and_restarts_nothing(tmp_path: Path) -> None:
    before = pids()
    plan, writers = flush_writers_plan(tmp_path / "check.yml", [["cass1"], ["cass2"], ["cass3"]])
    run = apply(plan, "--check", "--diff")
    assert run.rc == 0, run.output[-3000:]
    assert run.output.count(f"+memtable_flush_writers: {writers}") == 3, run.output[-3000:]
    assert pids() == before
    assert all(yaml_setting(h, "memtable_flush_writers") != writers for h in HOSTS)
    assert not plan.with_name(plan.name + ".state.json").exists()


@pytest.mark.skipif(
    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") > 48 * 2**30,
    reason="a 64G heap must not fit in this machine's memory",
)
def test_a_node_that_cannot_start_is_rolled_back_and_the_rollout_stops(tmp_path: Path) -> None:
    before = pids()
    before_yaml = {h: (LAB / h / "conf" / "jvm-server.options").read_text() for h in HOSTS}
    plan = write_plan(
        tmp_path / "fault.yml",
        target={"heap_size": "64G"},
        live=[],
        restart=["heap_size"],
        batches=[["cass1"], ["cass2"], ["cass3"]],
    )
    run = apply(plan)
    assert run.rc != 0
    assert "rollout stopped: cass1 failed" in run.output, run.output[-4000:]
    assert "insufficient memory" in run.output or "died" in run.output, run.output[-4000:]
    # cass1 is back on its previous configuration and UN; the others were not touched.
    assert (LAB / "cass1" / "conf" / "jvm-server.options").read_text() == before_yaml["cass1"]
    assert node_pid("cass1") != before["cass1"]
    assert {h: node_pid(h) for h in ("cass2", "cass3")} == {
        h: before[h] for h in ("cass2", "cass3")
    }
    for host in ("cass2", "cass3"):
        assert (LAB / host / "conf" / "jvm-server.options").read_text() == before_yaml[host]
        assert up_normal(host) == set(HOSTS.values())
    recorded = state(plan)["steps"]["s1"]
    assert recorded["status"] == "failed" and "cass1" in recorded["error"]

    # Not retried blindly.
    again = apply(plan)
    assert again.rc != 0
    assert "a person must resume or roll it back" in again.output
    assert pids()["cass1"] == node_pid("cass1")


def test_a_wrong_cql_password_is_refused_at_the_lease_and_no_lock_is_kept(
    tmp_path: Path,
) -> None:
    """The first login is the lease's: refused there, the run never falls back to the file
    lock and touches nothing."""
    plan, writers = flush_writers_plan(tmp_path / "login.yml", [["cass1"], ["cass2"], ["cass3"]])
    before = pids()
    run = apply(plan, "-e", "cassandra_cql_password=not-the-password")
    assert run.rc != 0
    assert "cannot take the lease lab-cassandra: the CQL login was refused" in run.output, (
        run.output[-3000:])
    assert "not-the-password" not in run.output
    assert not (REPO / ".kairos" / "lab-cassandra.lock").exists(), "the refusal kept the lock"
    assert pids() == before
    assert all(yaml_setting(h, "memtable_flush_writers") != writers for h in HOSTS)


def test_change_settings_without_a_plan_sets_a_live_setting_everywhere_and_restarts_nothing(
) -> None:
    # Its restart path, under load at ONE: test_spaces_on_lab.py.
    before = pids()
    reads = toggle(yaml_setting("cass1", "concurrent_reads"), 40, 56)
    run = run_playbook(
        "playbooks/change_settings.yml", "-e", json.dumps({"settings": {"concurrent_reads": reads}})
    )
    assert run.rc == 0, run.output[-4000:]
    assert pids() == before, "a live setting restarted a node"
    for host in HOSTS:
        pools = parse_concurrency(nodetool(host, "getconcurrency", "ReadStage"))
        assert pools == {"ReadStage": reads}
        assert yaml_setting(host, "concurrent_reads") == reads


def test_bad_settings_are_refused_before_anything_is_touched() -> None:
    before = pids()
    for settings, named in (
        ({"no_such_knob": 1}, "no_such_knob"),
        ({"memtable_flush_writers": 0}, "memtable_flush_writers"),
    ):
        run = run_playbook(
            "playbooks/change_settings.yml", "-e", json.dumps({"settings": settings})
        )
        assert run.rc != 0
        assert "refused before touching any node" in run.output and named in run.output
    assert pids() == before


def test_rolling_restart_batches_on_the_live_ring_and_would_change_no_file() -> None:
    # Check mode: the restart itself is the cassandra role's rollout_batch, which the
    # rollouts above and test_spaces_on_lab.py (two nodes at once at ONE, under load) run
    # for real.
    before = pids()
    files = {h: (LAB / h / "conf" / "cassandra.yaml").read_text() for h in HOSTS}
    run = run_playbook("playbooks/rolling_restart.yml", "-e", "cl=ONE", "--check", "--diff")
    print(f"\nrolling_restart.yml --check rc={run.rc} in {run.seconds:.1f} s")
    assert run.rc == 0, run.output[-4000:]
    assert "rolling restart of 3 node(s) in 2 batch(es) at ONE" in run.output
    # The files are rendered once per batch, by the restart that would write them (not
    # also in the live-settings play: every node restarts); no file would change.
    restart = "TASK [cassandra : Restart the node on its new files and wait for CQL]"
    restarts = run.output.count(restart)
    assert restarts == 2, run.output[-4000:]
    assert "TASK [cassandra : Render cassandra.yaml]" not in run.output, run.output[-4000:]
    assert "--- before: " not in run.output, run.output[-4000:]
    assert pids() == before
    assert files == {h: (LAB / h / "conf" / "cassandra.yaml").read_text() for h in HOSTS}


def test_a_hint_file_a_node_still_holds_refuses_the_pre_flight() -> None:
    """pending_hints lists closed hint files only: a file in a node's hints directory that
    is not delivered refuses the rollout before any node, naming the node holding it."""
    cluster = cql_cluster([HOSTS["cass1"]])
    try:
        cass2_id = cluster.connect().execute(
            "SELECT host_id FROM system.peers_v2 WHERE peer = %s", [HOSTS["cass2"]]).one().host_id
    finally:
        cluster.shutdown()
    # Written behind Cassandra's back, it is in no hints store: never delivered nor listed.
    held = LAB / "cass1" / "hints" / f"{cass2_id}-1795700000000-2.hints"
    held.touch()
    try:
        run = run_playbook("playbooks/rolling_restart.yml", "--check",
                           "-e", "kairos_sync_timeout=3")
    finally:
        held.unlink()
    print(f"\nrolling_restart.yml --check with a held hint file rc={run.rc} in {run.seconds:.1f} s")
    assert run.rc != 0
    preflight = run.output[run.output.find("Wait until no node holds hints"):][:3000]
    assert ("pre-flight refused, nothing was touched: cass1: node cass2, cass3 not caught up"
            in run.output), preflight
    assert "1 hint file(s) for cass2, cass3" in run.output
    # The refusal of one node stops every node: no batch begins, not even in check mode.
    assert "TASK [cassandra : Drain the node]" not in run.output, run.output[-4000:]
    assert run.output.count("pre-flight refused, nothing was touched") >= 3  # each node's
    assert not (REPO / ".kairos" / "lab-cassandra.lock").exists()
