"""The Redis modules' main flows, against the lab's Redis 7.0 cluster as captured.

redis-py's client is replaced by :class:`FakeRedis`, whose servers answer each command
with the captured replies of tests/unit/fixtures/redis/: INFO replication (the primary's or
the replica's text with this node's port and offset written in), CLUSTER INFO, and CLUSTER
NODES (the captured six lines, with this node marked ``myself`` and the roles as they are
now). info_cluster.txt and info_persistence.txt follow Redis 7.0's INFO format. CONFIG GET
and CONFIG SET answer as Redis 7.0 does, refusing immutable directives. Everything sent is
recorded, so the tests see what a module changed and that the password only went to AUTH.
"""

from __future__ import annotations

import re
from typing import Any
from unittest import mock

import pytest
from ansible.module_utils import kairos_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tests.unit.test_modules_harness import (
    FIXTURES,
    SECRET,
    assert_no_secret,
    refused,
    run_module,
)

NODES = {f"redis{i}": f"127.0.0.1:{7000 + i}" for i in range(1, 7)}
#: Primary -> its replica in the captured cluster_nodes.txt.
REPLICA_OF = {"127.0.0.1:7001": "127.0.0.1:7006", "127.0.0.1:7002": "127.0.0.1:7004",
              "127.0.0.1:7003": "127.0.0.1:7005"}


def captured(name: str) -> str:
    with open(FIXTURES / "redis" / name, newline="") as handle:
        return handle.read()


class Server:
    """One Redis 7.0 node of the captured cluster."""

    def __init__(self, endpoint: str, primary: str | None) -> None:
        self.endpoint = endpoint
        self.primary = primary  # None: a primary
        self.offset = 2924288
        self.link = "up"
        self.config = {"hz": "10", "maxmemory": "0", "maxmemory-policy": "noeviction",
                       "io-threads": "1", "appendonly": "no"}

    def info_replication(self, cluster: FakeCluster) -> str:
        if self.primary is None:
            replica = next(s for s in cluster.servers.values() if s.primary == self.endpoint)
            text = captured("info_replication_primary.txt").replace("port=7006",
                                                                   f"port={replica.port}")
            return text.replace("2924288", str(self.offset))
        text = captured("info_replication_replica.txt")
        text = text.replace("master_port:7002", f"master_port:{self.primary.split(':')[1]}")
        text = text.replace("master_link_status:up", f"master_link_status:{self.link}")
        return text.replace("2983693", str(self.offset))

    @property
    def port(self) -> str:
        return self.endpoint.split(":")[1]


class FakeCluster:
    def __init__(self) -> None:
        self.servers: dict[str, Server] = {}
        for primary, replica in REPLICA_OF.items():
            self.servers[primary] = Server(primary, None)
            self.servers[replica] = Server(replica, primary)
        self.sent: list[tuple[str, tuple[str, ...]]] = []
        self.passwords: set[str | None] = set()
        self.dead: set[str] = set()  # endpoints no process listens on

    def cluster_nodes(self, me: str) -> str:
        """The captured CLUSTER NODES, as ``me`` sees the roles now."""
        lines = captured("cluster_nodes.txt").replace("myself,", "").splitlines(keepends=True)
        ids = {re.search(r" (\S+)@", line)[1]: line.split()[0] for line in lines}
        out = []
        for line in lines:
            parts = line.split(" ")
            server = self.servers[parts[1].split("@")[0]]
            flags = "master" if server.primary is None else "slave"
            parts[2] = f"myself,{flags}" if server.endpoint == me else flags
            parts[3] = "-" if server.primary is None else ids[server.primary]
            out.append(" ".join(parts))
        return "".join(out)

    def answer(self, endpoint: str, args: tuple[str, ...]) -> Any:
        if endpoint in self.dead:  # redis-py's words for a port nothing listens on
            raise RedisConnectionError(f"Error 111 connecting to {endpoint}. Connection refused.")
        self.sent.append((endpoint, args))
        server = self.servers[endpoint]
        command = " ".join(args[:2]).upper()
        if command == "INFO REPLICATION":
            return server.info_replication(self)
        if command == "INFO CLUSTER":
            return captured("info_cluster.txt")
        if command == "INFO PERSISTENCE":
            return captured("info_persistence.txt")
        if command == "CLUSTER INFO":
            return captured("cluster_info_ok.txt")
        if command == "CLUSTER NODES":
            return self.cluster_nodes(endpoint)
        if command == "CONFIG GET":
            key = args[2]
            return [key, server.config[key]] if key in server.config else []
        if command == "CONFIG SET":
            pairs = dict(zip(args[2::2], args[3::2], strict=True))
            if "io-threads" in pairs:
                raise ResponseError("ERR CONFIG SET failed (possibly related to argument "
                                    "'io-threads') - can't set immutable config")
            server.config.update(pairs)
            return "OK"
        if command == "CLUSTER FAILOVER":
            old = self.servers[server.primary]
            server.primary, old.primary = None, endpoint
            return "OK"
        raise AssertionError(f"unexpected command {args}")


class FakeRedis:
    """redis.Redis as Node uses it: a pool whose connections send one command each."""

    cluster: FakeCluster

    def __init__(self, *, host: str, port: int, password: str | None, **_: Any) -> None:
        self.endpoint = f"{host}:{port}"
        self.cluster.passwords.add(password)
        self.connection_pool = self

    def get_connection(self, *_: Any) -> Any:
        client = self

        class Connection:
            def send_command(self, *args: str) -> None:
                self.args = args

            def read_response(self) -> Any:
                return client.cluster.answer(client.endpoint, self.args)

            def disconnect(self) -> None:
                pass

        return Connection()

    def release(self, _conn: Any) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def redis() -> Any:
    cluster = FakeCluster()
    fake = type("Redis", (FakeRedis,), {"cluster": cluster})
    with mock.patch.object(kairos_redis._redis, "Redis", fake):
        yield cluster


def changes(cluster: FakeCluster) -> list[tuple[str, tuple[str, ...]]]:
    return [(ep, a) for ep, a in cluster.sent if a[0] != "INFO" and a[:2] != ("CONFIG", "GET")
            and a[:2] not in (("CLUSTER", "INFO"), ("CLUSTER", "NODES"))]


def args(**more: Any) -> dict[str, Any]:
    return {"nodes": NODES, "password": SECRET, **more}


def test_the_fake_answers_as_the_captured_cluster(redis: FakeCluster) -> None:
    assert redis.cluster_nodes("127.0.0.1:7001") == captured("cluster_nodes.txt")


# ---------------------------------------------------------- redis_replication_facts
def test_replication_facts_read_roles_and_sync_and_change_nothing(redis: FakeCluster) -> None:
    result = run_module("redis_replication_facts", args(), check_mode=True)
    assert result["changed"] is False
    assert result["primaries"] == {"redis1": ["redis6"], "redis2": ["redis4"],
                                   "redis3": ["redis5"]}
    assert result["cluster_enabled"] is True and result["cluster_state"] == "ok"
    assert result["down"] == [] and result["unmet"] == {}
    assert result["nodes"]["redis1"]["slots"] == 5461
    assert redis.passwords == {SECRET} and changes(redis) == []
    assert_no_secret(result)


def test_replication_facts_need_nodes() -> None:
    refused("redis_replication_facts", {"password": SECRET}, "missing required arguments: nodes")


# ------------------------------------------------------------------ redis_sync_gate
def test_sync_gate_passes_on_a_cluster_in_sync(redis: FakeCluster) -> None:
    result = run_module("redis_sync_gate", args(node="redis4", role="replica", timeout=1))
    assert result["changed"] is False and result["unmet"] == {}
    assert_no_secret(result)


def test_sync_gate_names_the_replica_whose_link_is_down(redis: FakeCluster) -> None:
    redis.servers["127.0.0.1:7004"].link = "down"
    result = refused("redis_sync_gate", args(node="redis4", timeout=0),
                     "link_up: redis4: master_link_status:down")
    assert result["unmet"] == {"link_up": ["redis4: master_link_status:down"]}
    assert_no_secret(result)


def test_sync_gate_stops_waiting_when_a_node_outside_the_batch_is_gone(
    redis: FakeCluster
) -> None:
    # The fault of tests/integration/test_apply_plan_redis.py: redis5 killed while redis4's
    # rescue waits for the cluster; without down_grace the gate waited its whole timeout.
    redis.dead.add("127.0.0.1:7005")
    result = refused("redis_sync_gate", args(node="redis4", timeout=30, interval=0.05,
                                             down_grace=0.3),
                     r"not in sync after redis4 after [\d.]+ s, a node down: down: redis5: "
                     r"refused every connection for 0 s; reachable: redis5: ConnectionError")
    assert 0.3 <= result["waited_seconds"] < 5
    assert_no_secret(result)


def test_sync_gate_waits_for_the_restarted_node_and_without_down_grace(
    redis: FakeCluster
) -> None:
    redis.dead.add("127.0.0.1:7004")  # redis4 itself, still starting: waited for
    slow = refused("redis_sync_gate", args(node="redis4", timeout=0.6, interval=0.05,
                                           down_grace=0.1), "not in sync after redis4 within 0.6 s")
    assert "down" not in slow["unmet"] and slow["waited_seconds"] >= 0.6
    redis.dead = {"127.0.0.1:7005"}
    waited = refused("redis_sync_gate", args(node="redis4", timeout=0.6, interval=0.05),
                     "within 0.6 s: reachable: redis5")
    assert "down" not in waited["unmet"] and waited["waited_seconds"] >= 0.6


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"node": "redis9"}, r"node redis9 is not one of nodes \(redis1, "),
        ({"role": "leader"}, "value of role must be one of: primary, replica"),
    ],
)
def test_sync_gate_refuses_bad_arguments(
    redis: FakeCluster, more: dict[str, Any], message: str
) -> None:
    refused("redis_sync_gate", args(**more), message)
    assert redis.sent == []


# --------------------------------------------------------------- redis_restart_order
def test_restart_order_puts_replicas_first(redis: FakeCluster) -> None:
    result = run_module("redis_restart_order", args(restart=["redis1", "redis4", "redis2"]))
    assert result["changed"] is False
    assert result["hosts"] == ["redis4", "redis1", "redis2"]
    assert [o["failover"] for o in result["order"]] == [False, True, True]


def test_restart_order_refuses_an_unknown_node(redis: FakeCluster) -> None:
    refused("redis_restart_order", args(restart=["redis9"]), "unknown Redis nodes: redis9")


# ------------------------------------------------------------------- redis_failover
def test_failover_check_mode_names_the_target_and_sends_nothing(redis: FakeCluster) -> None:
    result = run_module("redis_failover", args(node="redis2"), check_mode=True)
    assert result["changed"] is True and result["target"] == "redis4"
    assert result["diff"]["after"] == {"redis2": "replica", "redis4": "primary"}
    assert result["attempts"] == 0 and changes(redis) == []


def test_failover_of_a_replica_changes_nothing(redis: FakeCluster) -> None:
    result = run_module("redis_failover", args(node="redis4"))
    assert result["changed"] is False and result["msg"] == "redis4 is already a replica of redis2"
    assert changes(redis) == []


def test_failover_asks_the_replica_and_reports_the_roles_read_back(redis: FakeCluster) -> None:
    result = run_module("redis_failover", args(node="redis2", interval=0.01))
    assert result["changed"] is True and result["attempts"] == 1
    assert changes(redis) == [("127.0.0.1:7004", ("CLUSTER", "FAILOVER"))]
    assert result["before"]["redis2"] == ["redis4"]
    assert result["after"] == {"redis1": ["redis6"], "redis3": ["redis5"], "redis4": ["redis2"]}
    assert_no_secret(result)


def test_failover_stops_waiting_when_another_node_is_gone(redis: FakeCluster) -> None:
    # The fault test's kill: redis1, a primary outside the batch, dies as redis2 fails over.
    redis.dead.add("127.0.0.1:7001")
    result = refused("redis_failover", args(node="redis2", interval=0.05, timeout=30,
                                            down_grace=0.3),
                     r"failover of redis2 to redis4 stopped after \d+ s, a node down: redis1: "
                     r"refused every connection for 0 s; .*reachable: redis1: ConnectionError")
    assert result["after"]["redis4"] == ["redis2"]  # the swap itself went through
    assert_no_secret(result)


def test_failover_without_down_grace_waits_for_its_timeout(redis: FakeCluster) -> None:
    redis.dead.add("127.0.0.1:7001")
    result = refused("redis_failover", args(node="redis2", interval=0.05, timeout=0.3),
                     r"failover of redis2 to redis4 not complete within 0.3 s: .*"
                     r"reachable: redis1: ConnectionError")
    assert result["after"]["redis4"] == ["redis2"]


def test_failover_refuses_a_target_that_is_not_the_nodes_replica(redis: FakeCluster) -> None:
    refused("redis_failover", args(node="redis2", target="redis5"),
            "redis5 is not a replica of redis2")
    assert changes(redis) == []


# ---------------------------------------------------------------- redis_live_config
def live(**more: Any) -> dict[str, Any]:
    return {"port": 7002, "password": SECRET, **more}


def test_live_config_check_mode_reports_the_change_and_sets_nothing(redis: FakeCluster) -> None:
    result = run_module("redis_live_config", live(settings={"hz": 20}), check_mode=True)
    assert result["changed"] is True and result["changed_keys"] == ["hz"]
    assert result["before"] == {"hz": "10"} and result["after"] == {"hz": "20"}
    assert changes(redis) == []


def test_live_config_already_running_changes_nothing(redis: FakeCluster) -> None:
    result = run_module("redis_live_config", live(settings={"hz": 10, "maxmemory": "0mb"}))
    assert result["changed"] is False and result["changed_keys"] == []
    assert changes(redis) == []


def test_live_config_sets_in_one_config_set_and_reports_the_read_back(
    redis: FakeCluster,
) -> None:
    result = run_module("redis_live_config", live(
        settings={"hz": 20, "maxmemory-policy": "allkeys-lfu", "maxmemory": "64mb"},
    ))
    assert result["changed"] is True
    assert changes(redis) == [("127.0.0.1:7002", (
        "CONFIG", "SET", "hz", "20", "maxmemory", "64mb", "maxmemory-policy", "allkeys-lfu"))]
    assert result["after"] == {"hz": "20", "maxmemory": "64mb",
                               "maxmemory-policy": "allkeys-lfu"}
    assert redis.sent[-1] == ("127.0.0.1:7002", ("CONFIG", "GET", "maxmemory-policy"))
    assert_no_secret(result)


def test_live_config_checks_the_conf_file_says_what_runs(redis: FakeCluster, tmp_path: Any) -> None:
    conf = tmp_path / "7002.conf"
    conf.write_text("port 7002\nhz 10\nappendonly yes\n")
    refused("redis_live_config", live(expect={"hz": 10, "appendonly": "no"}, conf_file=str(conf)),
            "disagrees with the running server: appendonly file='yes' running='no'")


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ({"settings": {"io-threads": 4}, "restart_only": ["io-threads", "appendonly"]},
         r"cannot change live \(needs a restart\): io-threads; nothing was set"),
        ({"settings": {"requirepass": SECRET}}, r"requirepass are the role's \(redis_password\)"),
        ({"settings": {"no-such-directive": 1}}, "unknown directives .*: no-such-directive"),
        ({"expect": {"hz": 50}}, r"does not run the expected values: hz=50 \(runs 10\)"),
        ({"port": "seven"}, "argument 'port' is of type"),
    ],
)
def test_live_config_refuses_bad_settings_and_sets_nothing(
    redis: FakeCluster, more: dict[str, Any], message: str
) -> None:
    result = refused("redis_live_config", live(**more), message)
    assert changes(redis) == []
    assert_no_secret(result)


def test_live_config_reports_the_servers_refusal_of_a_directive_not_named_restart_only(
    redis: FakeCluster,
) -> None:
    # The caller did not class io-threads: Redis refuses it (IMMUTABLE_CONFIG) and, CONFIG
    # SET being atomic, sets nothing of the command.
    before = {ep: dict(server.config) for ep, server in redis.servers.items()}
    refused("redis_live_config", live(settings={"io-threads": 4, "hz": 20}),
            r"CONFIG SET hz, io-threads refused: .*immutable config.*nothing was set")
    assert {ep: dict(server.config) for ep, server in redis.servers.items()} == before
