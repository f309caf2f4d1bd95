"""The rollout pre-flight's judgement (module_utils/kairos_preflight.py, kairos_preflight).

Every read is what the real module returns on the captured outputs the module tests use
(fixtures/nodetool, fixtures/cassandra_views, fixtures/redis, the lab's gossip rows), then
registered as the role registers it: with ``failed_when: false``, which keeps ``failed``
false on a read whose module failed. Each refusal has its test; the messages are those the
integration tests and the runbooks look for (tests/integration/test_apply_plan.py,
test_rollout_faults.py). The lock, taken before the pre-flight, is refused by kairos_lock
(tests/unit/test_modules_kairos.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import cassandra_sync_gate
import pytest
from ansible.module_utils import kairos_cql, kairos_preflight, kairos_redis
from ansible.module_utils.kairos_preflight import PreflightError, judge, refusal
from cassandra import AuthenticationFailed

from tests.unit.test_modules_cassandra import (
    ADDRESSES,
    NODETOOL,
    FakeDatabase,
    FakeNodetool,
    listening_port,
)
from tests.unit.test_modules_harness import SECRET, ModuleFailed, run_module
from tests.unit.test_modules_redis import NODES, FakeCluster, FakeRedis
from tests.unit.test_sync_gate import FakePeers, view

HOSTS = ["cass1", "cass2", "cass3"]
#: A read the role skipped (its ``when`` was false), as Ansible registers it.
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}

Reads = dict[str, dict[str, Any]]


def registered(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What the role registers from a read run with ``failed_when: false``."""
    try:
        result = run()
    except ModuleFailed as failed:
        result = failed.result
    return {**result, "failed": False, "failed_when_result": False}


def names(refusals: list[dict[str, str]]) -> list[str]:
    return [r["name"] for r in refusals]


# ------------------------------------------------------------------- Cassandra reads
@pytest.fixture
def cql() -> Iterator[FakeDatabase]:
    db = FakeDatabase()
    with mock.patch.object(kairos_cql, "build_cluster", db.build_cluster):
        yield db


@pytest.fixture
def no_sleep() -> Iterator[None]:
    with mock.patch.object(cassandra_sync_gate.time, "sleep", lambda _s: None):
        yield


def read_ring(tmp_path: Path) -> dict[str, Any]:
    """cassandra_cluster_facts as the pre-flight runs it (writes live-ring.json)."""
    return registered(lambda: run_module("cassandra_cluster_facts", {
        "host": ADDRESSES, "hosts": dict(zip(ADDRESSES, HOSTS, strict=True)),
        "dest": str(tmp_path / "live-ring.json"), "username": "kairos", "password": SECRET,
    }))


def kairos(*argv: str) -> dict[str, Any]:
    return registered(lambda: run_module("kairos_command", {"argv": list(argv)}))


def plan_rollout(tmp_path: Path, cl: str = "QUORUM") -> Path:
    """A restart of every node batched on live-ring.json (kairos rollout adhoc)."""
    out = tmp_path / "rollout.json"
    made = kairos("rollout", "adhoc", "--engine", "cassandra", "--hosts", ",".join(HOSTS),
                  "--set", "memtable_flush_writers=4", "--restart-all",
                  "--ring", str(tmp_path / "live-ring.json"), "--cl", cl,
                  "--state", str(tmp_path / "state.json"), "--out", str(out))
    assert made["rc"] == 0, made
    return out


def check_batches(tmp_path: Path, rollout: Path, down: list[str]) -> dict[str, Any]:
    """``kairos rollout preflight`` through kairos_command, as the pre-flight runs it."""
    return kairos("rollout", "preflight", "--rollout", str(rollout),
                  "--ring", str(tmp_path / "live-ring.json"), "--down", ",".join(down))


def cross_check(peers: dict[str, list[Any]]) -> dict[str, Any]:
    """cassandra_sync_gate with cross_check (before the first batch), timing out at once."""
    def run() -> dict[str, Any]:
        with mock.patch.object(cassandra_sync_gate, "build_cluster",
                               FakePeers(peers).build_cluster):
            return run_module("cassandra_sync_gate", {
                "host": list(peers), "nodes": [], "generations": {}, "cross_check": True,
                "username": "kairos", "password": SECRET, "interval": 0, "down_grace": 0,
                "timeout": 0})
    return registered(run)


def hint_files(hints: Path, host_ids: list[str], peer_port: int) -> dict[str, Any]:
    """cassandra_node_gate with checks [hints] on cass1, as the pre-flight runs it."""
    return registered(lambda: run_module("cassandra_node_gate", {
        "nodetool": NODETOOL, "node": "cass2, cass3", "peer": "127.0.0.1",
        "peer_port": peer_port, "hints_directory": str(hints), "host_ids": host_ids,
        "checks": ["hints"], "timeout": 0, "interval": 0.01,
    }))


def ring_view(status: str = "status_3_UN.txt", rc: int = 0) -> dict[str, Any]:
    """cassandra_ring_status on cass1, on a captured nodetool status."""
    fake = FakeNodetool(status=status)

    def answer(_module: Any, argv: Any, **_: Any) -> tuple[int, str, str]:
        out = fake(argv)
        return (rc, out[1], "") if rc == 0 else (rc, "", "nodetool: Failed to connect to "
                                                 "'127.0.0.1:7199' - ConnectException")
    with mock.patch("ansible.module_utils.basic.AnsibleModule.run_command", answer):
        return registered(lambda: run_module("cassandra_ring_status", {"nodetool": NODETOOL}))


@pytest.fixture
def peer_port() -> Iterator[int]:
    """cass1's storage port, answering."""
    yield from listening_port("127.0.0.1")


@pytest.fixture
def whole(cql: FakeDatabase, tmp_path: Path, no_sleep: None, peer_port: int) -> Reads:
    """The reads of a whole cluster: every node UN, no hints, the batches safe."""
    ring = read_ring(tmp_path)
    (tmp_path / "hints").mkdir()
    return {
        "ring": ring,
        "batches": check_batches(tmp_path, plan_rollout(tmp_path), ring["down"]),
        "hints": cross_check({a: [view()] for a in ADDRESSES}),
        "hint_files": hint_files(tmp_path / "hints", list(ring["host_ids"].values()), peer_port),
        "view": SKIPPED,  # the failure detectors confirmed every node alive
    }


def cassandra(reads: Reads, host: str = "cass1") -> list[dict[str, str]]:
    return judge("cassandra", reads, host=host, cluster_size=len(HOSTS))


def test_a_whole_cluster_with_safe_batches_is_not_refused(whole: Reads) -> None:
    assert whole["hints"]["failure_detector_confirmed"] is True
    assert cassandra(whole) == []
    # Nodetool's view, when the failure detectors could not be asked: every node UN.
    assert cassandra({**whole, "view": ring_view()}) == []


def test_a_dead_node_is_refused_by_name_with_the_batch_it_makes_unsafe(
    cql: FakeDatabase, tmp_path: Path, whole: Reads
) -> None:
    """As tests/integration/test_rollout_faults.py's retry finds it: cass3 dead."""
    rollout = tmp_path / "rollout.json"
    cql.hosts[2].is_up = False  # 127.0.0.3, DN in status_1_DN.txt
    ring = read_ring(tmp_path)
    assert ring["down"] == ["cass3"]
    got = cassandra({
        "ring": ring,
        "batches": check_batches(tmp_path, rollout, ring["down"]),
        "hints": SKIPPED, "hint_files": SKIPPED,  # the role waits for no hints with a node down
        "view": ring_view("status_1_DN.txt"),
    })
    assert names(got) == ["unsafe_batch", "down", "view"]
    assert "pre-flight: batch 1 ['cass1'] (cass3 down now)" in got[0]["message"]
    assert got[1] == refusal("down", "down: cass3")
    assert got[2]["message"] == "cass1 does not see every node UN: ['DN', 'UN', 'UN']"


def test_an_unsafe_batch_is_refused_naming_it(
    cql: FakeDatabase, tmp_path: Path, whole: Reads
) -> None:
    """Batched at ONE on RF 3 (two nodes at once); the keyspace's RF is 2 by the apply."""
    rollout = plan_rollout(tmp_path, cl="ONE")
    cql.replication["kairos_app"]["replication_factor"] = "2"
    ring = read_ring(tmp_path)
    got = cassandra({**whole, "ring": ring, "batches": check_batches(tmp_path, rollout, [])})
    assert names(got) == ["unsafe_batch"]
    assert got[0]["message"].startswith(
        "kairos rollout: error: pre-flight: batch 1 ['cass1', 'cass2']: ")


def test_hints_a_node_holds_for_another_are_refused(whole: Reads) -> None:
    held = view()
    held["hints"] = [{"address": "127.0.0.1", "files": 2, "status": "UP"}]
    hints = cross_check({"127.0.0.1": [view()], "127.0.0.2": [held], "127.0.0.3": [view()]})
    assert hints["failed"] is False and hints["unmet"]  # failed_when: false
    # Without the failure detectors' word, nodetool's view is read: every node UN.
    got = cassandra({**whole, "hints": hints, "view": ring_view()})
    assert names(got) == ["hints"]
    assert re.fullmatch(r"the cluster not caught up after [\d.]+s: 127\.0\.0\.2 sees hints: "
                        r"2 hint file\(s\) for 127\.0\.0\.1", got[0]["message"]), got


def test_regression_e10c706_a_held_hint_file_is_refused_though_failed_is_false(
    whole: Reads, tmp_path: Path, peer_port: int
) -> None:
    """The refusal tested ``.failed``, which ``failed_when: false`` keeps false: a hint file
    cass1 still writes for cass2 let the rollout go on."""
    cass2 = whole["ring"]["host_ids"]["127.0.0.2"]
    (tmp_path / "hints" / f"{cass2}-1795700000000-2.hints").touch()
    held = hint_files(tmp_path / "hints", list(whole["ring"]["host_ids"].values()), peer_port)
    assert held["failed"] is False
    got = cassandra({**whole, "hint_files": held})
    assert names(got) == ["hint_file"]
    # What tests/integration/test_apply_plan.py's held hint file finds, from cass1.
    assert got[0]["message"].startswith("cass1: node cass2, cass3 not caught up")
    assert "1 hint file(s) for cass2, cass3" in got[0]["message"]
    assert cassandra({**whole, "hint_files": held}, host="cass2")[0]["message"].startswith("cass2:")


def test_schema_versions_that_disagree_are_refused(
    cql: FakeDatabase, tmp_path: Path, whole: Reads
) -> None:
    answer = cql.select

    def select(query: str, params: Any) -> list[Any]:
        rows = answer(query, params)
        if query == "SELECT peer, schema_version FROM system.peers_v2":
            rows[-1] = rows[-1]._replace(schema_version="59adb24e-f3cd-3e02-97f0-5b395827453f")
        return rows
    with mock.patch.object(cql, "select", select):
        ring = read_ring(tmp_path)
    got = cassandra({**whole, "ring": ring})
    assert names(got) == ["schema"]
    assert got[0]["message"] == "schema versions disagree: " + str(ring["schema_versions"])
    assert "59adb24e-f3cd-3e02-97f0-5b395827453f': ['cass3']" in got[0]["message"]


def test_a_view_without_every_node_un_is_refused_naming_the_node(whole: Reads) -> None:
    got = cassandra({**whole, "view": ring_view("status_1_DN.txt")}, host="cass2")
    assert got == [refusal("view", "cass2 does not see every node UN: ['DN', 'UN', 'UN']")]
    # A nodetool that does not answer sees no node (the module waits for nothing here).
    assert cassandra({**whole, "view": ring_view(rc=1)}, host="cass2") == [
        refusal("view", "cass2 does not see every node UN: []")]


def test_an_unreadable_ring_is_refused_with_the_drivers_reason(
    cql: FakeDatabase, tmp_path: Path, whole: Reads
) -> None:
    """As a wrong CQL password is (test_apply_plan.py): nothing else is judged blind."""
    def connect() -> Any:
        raise AuthenticationFailed("Failed to authenticate to 127.0.0.1: bad credentials")

    def refuse(hosts: list[str], **_: Any) -> Any:
        return SimpleNamespace(connect=connect, shutdown=lambda: None)
    with mock.patch.object(kairos_cql, "build_cluster", refuse):
        ring = read_ring(tmp_path)
    assert "down" not in ring and ring["failed"] is False
    got = cassandra({"ring": ring, "batches": SKIPPED, "hints": SKIPPED, "hint_files": SKIPPED,
                     "view": ring_view()})
    assert names(got) == ["ring_unreadable"]
    assert got[0]["message"].startswith("cannot read the live ring: ")
    assert "Failed to authenticate" in got[0]["message"] and SECRET not in got[0]["message"]


def test_a_batch_check_that_could_not_run_is_a_refusal_not_a_pass(whole: Reads) -> None:
    """kairos_command fails without an exit code when the planner cannot be imported."""
    broken = {"failed": False, "failed_when_result": False, "msg": "the Kairos planner cannot "
              "be imported by /usr/bin/python3 (No module named 'planner')"}
    got = cassandra({**whole, "batches": broken})
    assert got == [refusal("unsafe_batch", broken["msg"])]


def test_every_refusal_comes_in_reading_order(
    cql: FakeDatabase, tmp_path: Path, whole: Reads
) -> None:
    cql.hosts[2].is_up = False
    ring = read_ring(tmp_path)
    many = {**whole, "ring": {**ring, "schema_agreement": False},
            "batches": check_batches(tmp_path, tmp_path / "rollout.json", ring["down"]),
            "hints": {**whole["hints"], "msg": "the cluster not caught up", "unmet": {"x": 1}},
            "hint_files": {**whole["hint_files"], "msg": "node cass2 not caught up"},
            "view": ring_view("status_1_DN.txt")}
    assert names(cassandra(many)) == [
        "unsafe_batch", "down", "hints", "hint_file", "schema", "view"]


# ----------------------------------------------------------------------- Redis reads
@pytest.fixture
def redis() -> Iterator[FakeCluster]:
    cluster = FakeCluster()
    fake = type("Redis", (FakeRedis,), {"cluster": cluster})
    with mock.patch.object(kairos_redis._redis, "Redis", fake):
        yield cluster


def redis_reads(*, expect: dict[str, Any] | None = None,
                restart: list[str] | None = None) -> Reads:
    """The Redis pre-flight's reads on redis2 (127.0.0.1:7002)."""
    login = {"nodes": NODES, "password": SECRET}
    topology = registered(lambda: run_module("redis_replication_facts", login))
    config = registered(lambda: run_module("redis_live_config", {
        "port": 7002, "password": SECRET, "settings": {}, "expect": expect or {"hz": 10},
        "restart_only": []}, check_mode=True))
    order = registered(lambda: run_module("redis_restart_order", {**login, "restart": restart})
                       ) if restart else SKIPPED
    return {"topology": {k: topology[k] for k in ("down", "unmet")}, "config": config,
            "order": order}


def test_a_redis_cluster_in_sync_running_the_plans_values_is_not_refused(
    redis: FakeCluster,
) -> None:
    assert judge("redis", redis_reads(restart=["redis2", "redis4"]), host="redis2") == []


def test_a_dead_redis_node_is_refused_by_name(redis: FakeCluster) -> None:
    answer = redis.answer

    def dead(endpoint: str, args: tuple[str, ...]) -> Any:
        if endpoint == "127.0.0.1:7005":
            raise ConnectionRefusedError(111, "Connection refused")
        return answer(endpoint, args)
    with mock.patch.object(redis, "answer", dead):
        reads = redis_reads()
    got = judge("redis", reads, host="redis2")
    assert got[0] == refusal("down", "down: redis5")


def test_a_redis_replica_not_in_sync_is_refused(redis: FakeCluster) -> None:
    redis.servers["127.0.0.1:7004"].link = "down"
    got = judge("redis", redis_reads(), host="redis2")
    assert names(got) == ["not_in_sync"]
    assert got[0]["message"].startswith("not in sync: {") and "redis4" in got[0]["message"]


def test_drift_from_the_plans_current_values_is_refused_naming_the_node(
    redis: FakeCluster,
) -> None:
    """The plan says redis2 runs hz 11; it runs 10 (the autopilot's lab test plants this)."""
    reads = redis_reads(expect={"hz": 11})
    assert reads["config"]["failed"] is False
    assert reads["config"]["drift"] == {"hz": {"expected": "11", "running": "10"}}
    got = judge("redis", reads, host="redis2")
    assert got == [refusal("drift", "redis2: 127.0.0.1:7002: the node does not run the "
                                    "expected values: hz=11 (runs 10)")]


def test_an_unknown_directive_is_a_config_refusal(redis: FakeCluster) -> None:
    reads = redis_reads(expect={"no-such-knob": 1})
    assert names(judge("redis", reads, host="redis2")) == ["config"]


def test_restarts_that_cannot_be_ordered_are_refused(redis: FakeCluster) -> None:
    got = judge("redis", redis_reads(restart=["redis9"]), host="redis2")
    assert names(got) == ["order"] and "unknown Redis nodes: redis9" in got[0]["message"]


# ----------------------------------------------------------------- the shape, the module
def test_both_engines_give_the_same_shape() -> None:
    quiet = {"failed": False}
    for engine, reads in (
        ("cassandra", {"ring": {"down": ["cass3"]}, "batches": SKIPPED, "hints": SKIPPED,
                       "hint_files": SKIPPED, "view": SKIPPED}),
        ("redis", {"topology": {"down": ["redis5"], "unmet": {}}, "config": quiet,
                   "order": SKIPPED}),
    ):
        got = judge(engine, reads, host="n1", cluster_size=3)
        assert [set(r) for r in got] == [{"name", "message"}]
        assert got[0]["name"] == "down" and got[0]["name"] in kairos_preflight.REFUSALS


@pytest.mark.parametrize(
    ("engine", "reads", "message"),
    [
        ("mongodb", {}, "unknown engine 'mongodb'"),
        ("redis", {"topology": {}, "config": {}}, "missing order"),
        ("redis", {"topology": {}, "config": {}, "order": {}, "drift": {}}, "unknown drift"),
        ("redis", {"topology": {}, "config": "failed", "order": {}}, "registered results: config"),
        ("cassandra", {k: {} for k in ("ring", "batches", "hints", "hint_files", "view")},
         "needs cluster_size"),
    ],
)
def test_reads_that_are_not_the_engines_are_an_error(
    engine: str, reads: Any, message: str
) -> None:
    with pytest.raises(PreflightError, match=message):
        judge(engine, reads, host="n1")


def test_the_module_returns_the_refusals_and_changes_nothing() -> None:
    reads = {"ring": {"down": ["cass3"]}, "batches": SKIPPED, "hints": SKIPPED,
             "hint_files": SKIPPED, "view": SKIPPED}
    result = run_module("kairos_preflight", {"engine": "cassandra", "host": "cass1",
                                             "reads": reads, "cluster_size": 3}, check_mode=True)
    assert result == {"changed": False, "refusals": [{"name": "down", "message": "down: cass3"}]}
    with pytest.raises(ModuleFailed, match="missing ring"):
        run_module("kairos_preflight", {"engine": "cassandra", "host": "cass1",
                                        "reads": {k: v for k, v in reads.items() if k != "ring"},
                                        "cluster_size": 3})


def test_the_refusals_go_through_json_as_ansible_passes_them(whole: Reads) -> None:
    """What the role hands the module is JSON (the registered results as Ansible keeps them)."""
    whole = json.loads(json.dumps(whole))
    assert cassandra(whole) == []
