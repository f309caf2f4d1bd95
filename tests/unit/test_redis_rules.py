"""Redis parsers and decisions (module_utils/kairos_redis.py) on output captured from the lab.

Fixtures in tests/unit/fixtures/redis/ are real redis-cli output of the lab's Redis 7.0
cluster (CRLF line ends kept). A whole-cluster picture is made from them by giving each
node the captured CLUSTER NODES with its own line marked ``myself``, and an INFO
replication derived from the captured primary / replica output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.kairos_redis import (
    RedisModuleError,
    build_topology,
    caught_up,
    choose_failover_target,
    config_set_args,
    differing,
    normalise_value,
    parse_cluster_info,
    parse_cluster_nodes,
    parse_conf,
    parse_info,
    replication_state,
    restart_order,
    slot_count,
    unmet_conditions,
)

FIXTURES = Path(__file__).parent / "fixtures" / "redis"
ENDPOINTS = {f"redis{i}": f"127.0.0.1:{7000 + i}" for i in range(1, 7)}


def read(name: str) -> str:
    with open(FIXTURES / name, newline="") as handle:
        return handle.read()


# ------------------------------------------------------------------ parsers
def test_info_replication_of_a_primary() -> None:
    state = replication_state(parse_info(read("info_replication_primary.txt")))
    assert state["role"] == "primary"
    assert state["primary_endpoint"] is None and state["link"] is None
    assert state["offset"] == state["repl_offset"] == 2924288
    assert state["replicas"] == [
        {"endpoint": "127.0.0.1:7006", "state": "online", "offset": 2924288, "lag": 0}
    ]


def test_info_replication_of_a_replica() -> None:
    state = replication_state(parse_info(read("info_replication_replica.txt")))
    assert state["role"] == "replica"
    assert state["primary_endpoint"] == "127.0.0.1:7002"
    assert state["link"] == "up" and state["sync_in_progress"] is False
    assert state["offset"] == 2983693


def test_info_without_role_is_refused() -> None:
    with pytest.raises(RedisModuleError, match="no usable role"):
        replication_state(parse_info("# Replication\r\nconnected_slaves:0\r\n"))


def test_cluster_info_ok() -> None:
    info = parse_cluster_info(read("cluster_info_ok.txt"))
    assert info["cluster_state"] == "ok"
    assert info["cluster_slots_ok"] == 16384 and info["cluster_known_nodes"] == 6


def test_cluster_nodes() -> None:
    nodes = {n["endpoint"]: n for n in parse_cluster_nodes(read("cluster_nodes.txt"))}
    assert len(nodes) == 6
    me = nodes["127.0.0.1:7001"]
    assert me["myself"] and me["role"] == "primary" and me["slots"] == [[0, 5460]]
    replica = nodes["127.0.0.1:7004"]
    assert replica["role"] == "replica" and replica["primary_id"] == nodes["127.0.0.1:7002"]["id"]
    assert not any(n["failing"] for n in nodes.values())
    assert sum(slot_count(n["slots"]) for n in nodes.values()) == 16384


def test_cluster_nodes_with_hostname_migrating_slots_and_failure_flags() -> None:
    text = (
        "a1 10.0.0.1:6379@16379,node-a myself,master - 0 0 1 connected 0-99 "
        "[100->-b2] 200\n"
        "b2 10.0.0.2:6379@16379 master,fail? - 0 0 2 disconnected 101-199\n"
    )
    a, b = parse_cluster_nodes(text)
    assert a["endpoint"] == "10.0.0.1:6379" and a["slots"] == [[0, 99], [200, 200]]
    assert b["failing"] and b["link_state"] == "disconnected"


def test_conf_file_parsing_joins_repeated_and_unquotes() -> None:
    conf = parse_conf(
        '# c\nsave 3600 1\nsave 300 100\nmaxmemory 64mb\nrequirepass "x"\nappendfsync ""\n'
    )
    assert conf == {"save": "3600 1 300 100", "maxmemory": "64mb", "requirepass": "x",
                    "appendfsync": ""}


# --------------------------------------------------------------- comparison
@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("64mb", "67108864", True),
        ("1gb", "1073741824", True),
        ("1g", "1000000000", True),
        (True, "yes", True),
        ("allkeys-LRU", "allkeys-lru", True),
        ('""', "", True),
        ("3600 1  300 100", "3600 1 300 100", True),
        ("10", "20", False),
        (2, "2", True),
    ],
)
def test_values_compare_by_meaning(a: Any, b: Any, same: bool) -> None:
    assert (normalise_value(a) == normalise_value(b)) is same


def test_only_differing_keys_are_set_in_one_config_set() -> None:
    running = {"hz": "10", "maxmemory": "67108864", "maxmemory-policy": "allkeys-lru"}
    wanted = {"hz": 20, "maxmemory": "64mb", "maxmemory-policy": "allkeys-lfu"}
    changed = differing(wanted, running)
    assert changed == ["hz", "maxmemory-policy"]
    assert config_set_args({k: wanted[k] for k in changed}) == [
        "CONFIG", "SET", "hz", "20", "maxmemory-policy", "allkeys-lfu",
    ]
    assert differing({"hz": "10", "maxmemory": "64mb"}, running) == []  # idempotent


# ------------------------------------------------------------------ topology
def info_for(state: dict[str, Any]) -> str:
    """INFO replication text for a node, from the captured fixtures' shape."""
    if state["role"] == "primary":
        lines = ["# Replication", "role:master", f"connected_slaves:{len(state['replicas'])}"]
        lines += [
            f"slave{i}:ip=127.0.0.1,port={port},state=online,offset={state['offset']},lag=0"
            for i, port in enumerate(state["replicas"])
        ]
        lines += ["master_failover_state:no-failover", f"master_repl_offset:{state['offset']}"]
    else:
        host, port = state["primary"].split(":")
        lines = ["# Replication", "role:slave", f"master_host:{host}", f"master_port:{port}",
                 f"master_link_status:{state.get('link', 'up')}",
                 f"master_sync_in_progress:{state.get('sync', 0)}",
                 f"slave_repl_offset:{state['offset']}", "master_failover_state:no-failover",
                 f"master_repl_offset:{state['offset']}"]
    return "\r\n".join(lines) + "\r\n"


def views(
    offsets: dict[str, int] | None = None,
    link: dict[str, str] | None = None,
    down: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """The captured cluster seen from every node: primaries 7001-7003, replicas 7004-7006."""
    nodes_text = read("cluster_nodes.txt").replace("myself,", "")
    primary_of = {
        "redis4": "127.0.0.1:7002", "redis5": "127.0.0.1:7003", "redis6": "127.0.0.1:7001",
    }
    replicas_of = {"redis1": [7006], "redis2": [7004], "redis3": [7005]}
    offsets = offsets or {}
    out: dict[str, dict[str, Any]] = {}
    for name, endpoint in ENDPOINTS.items():
        if name in down:
            out[name] = {"error": "ConnectionError: refused"}
            continue
        mine = "\n".join(
            line.replace(" master ", " myself,master ").replace(" slave ", " myself,slave ")
            if f" {endpoint}@" in line else line
            for line in nodes_text.splitlines()
        )
        if name in replicas_of:
            state = {"role": "primary", "replicas": replicas_of[name],
                     "offset": offsets.get(name, 1000)}
        else:
            state = {"role": "replica", "primary": primary_of[name],
                     "offset": offsets.get(name, 1000), "link": (link or {}).get(name, "up")}
        out[name] = {"info": info_for(state), "cluster_info": read("cluster_info_ok.txt"),
                     "cluster_nodes": mine}
    return out


def test_topology_joins_the_views_by_inventory_name() -> None:
    topo = build_topology(ENDPOINTS, views())
    assert topo["cluster_enabled"] and topo["down"] == []
    assert topo["primaries"] == {"redis1": ["redis6"], "redis2": ["redis4"], "redis3": ["redis5"]}
    assert topo["nodes"]["redis4"]["primary"] == "redis2"
    assert topo["nodes"]["redis1"]["slots"] == 5461
    assert unmet_conditions(topo, offsets={"redis1": 1000, "redis2": 1000, "redis3": 1000}) == {}


def test_gate_names_a_replica_behind_and_a_link_down() -> None:
    topo = build_topology(
        ENDPOINTS, views(offsets={"redis2": 5000, "redis4": 4000}, link={"redis5": "down"})
    )
    unmet = unmet_conditions(topo, offsets={"redis2": 5000})
    assert unmet == {
        "caught_up": ["redis4: offset 4000 < redis2's 5000"],
        "link_up": ["redis5: master_link_status:down"],
    }
    assert unmet_conditions(topo, offsets={"redis2": 5000}, max_lag=1000).keys() == {"link_up"}


def test_gate_names_a_node_down_and_a_wrong_role() -> None:
    topo = build_topology(ENDPOINTS, views(down=("redis6",)))
    unmet = unmet_conditions(topo, node="redis1", role="replica")
    assert unmet["reachable"] == ["redis6: ConnectionError: refused"]
    assert unmet["role"] == ["redis1: is a primary, waiting for replica"]


def test_gate_sees_cluster_disagreement() -> None:
    v = views()
    v["redis3"]["cluster_info"] = v["redis3"]["cluster_info"].replace(
        "cluster_state:ok", "cluster_state:fail").replace(
        "cluster_slots_ok:16384", "cluster_slots_ok:10922")
    v["redis1"]["cluster_nodes"] = v["redis1"]["cluster_nodes"].replace(
        "127.0.0.1:7004@17004 slave", "127.0.0.1:7004@17004 slave,fail?")
    unmet = unmet_conditions(build_topology(ENDPOINTS, v))
    assert unmet["cluster_state"] == ["redis3: cluster_state:fail"]
    assert unmet["slots"][0].startswith("redis3: 10922/16384 slots ok")
    assert unmet["agreement"] == ["redis1: flags redis4 as failing"]


@pytest.fixture
def two_replica_topology() -> dict[str, Any]:
    """One primary (p) with replicas r1 (behind), r2 (ahead) and r3 (link down)."""
    def replica(offset: int, link: str = "up") -> dict[str, Any]:
        return {"up": True, "role": "replica", "primary": "p", "offset": offset, "link": link,
                "sync_in_progress": False}
    return {
        "nodes": {
            "p": {"up": True, "role": "primary", "primary": None, "offset": 900},
            "r1": replica(800),
            "r2": replica(890),
            "r3": replica(950, link="down"),
            "q": {"up": True, "role": "primary", "primary": None, "offset": 10},
        },
        "down": [],
        "primaries": {"p": ["r1", "r2", "r3"], "q": []},
        "cluster_enabled": False,
    }


def test_failover_target_is_the_most_caught_up_linked_replica(
    two_replica_topology: dict[str, Any],
) -> None:
    assert choose_failover_target(two_replica_topology, "p") == "r2"


@pytest.mark.parametrize(
    ("primary", "match"),
    [("q", "has no replica"), ("r1", "is not a primary"), ("zz", "does not answer")],
)
def test_failover_target_refusals(
    two_replica_topology: dict[str, Any], primary: str, match: str
) -> None:
    with pytest.raises(RedisModuleError, match=match):
        choose_failover_target(two_replica_topology, primary)


def test_failover_refused_when_no_replica_is_in_sync(two_replica_topology: dict[str, Any]) -> None:
    for r in ("r1", "r2"):
        two_replica_topology["nodes"][r]["sync_in_progress"] = True
    with pytest.raises(RedisModuleError, match="no replica of p is in sync"):
        choose_failover_target(two_replica_topology, "p")


def test_restart_order_puts_replicas_first_keeping_the_plan_order() -> None:
    topo = build_topology(ENDPOINTS, views())
    order = restart_order(topo, ["redis1", "redis5", "redis2", "redis6", "redis3", "redis4"])
    assert [(o["host"], o["failover"]) for o in order] == [
        ("redis5", False), ("redis6", False), ("redis4", False),
        ("redis1", True), ("redis2", True), ("redis3", True),
    ]
    assert order[0]["primary"] == "redis3"


def test_restart_order_refuses_unknown_or_down_nodes_and_lone_primaries() -> None:
    topo = build_topology(ENDPOINTS, views(down=("redis4",)))
    with pytest.raises(RedisModuleError, match="unknown Redis nodes: redis9"):
        restart_order(topo, ["redis1", "redis9"])
    with pytest.raises(RedisModuleError, match="do not answer: redis4"):
        restart_order(topo, ["redis4"])
    # redis2's only replica (redis4) is down: redis2 cannot be failed over.
    with pytest.raises(RedisModuleError, match="redis2 has no replica"):
        restart_order(topo, ["redis2"])


def test_caught_up() -> None:
    assert caught_up(100, 100) and caught_up(101, 100) and not caught_up(99, 100)
    assert caught_up(99, 100, max_lag=1)


def test_cluster_nodes_while_a_replica_restarts() -> None:
    """Captured on 7003 while 7004 was down during a rollout: disconnected, not yet failing."""
    nodes = {n["endpoint"]: n for n in parse_cluster_nodes(read("cluster_nodes_replica_down.txt"))}
    down = nodes["127.0.0.1:7004"]
    assert down["link_state"] == "disconnected" and down["role"] == "replica"
    assert not down["failing"]
    assert sum(slot_count(n["slots"]) for n in nodes.values() if n["role"] == "primary") == 16384
