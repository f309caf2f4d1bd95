"""Collectors on the live lab: rates from real counters, a real counter reset, a real restart.

The Redis counter reset is ``CONFIG RESETSTAT`` on one primary, which zeroes its ``INFO
commandstats`` exactly as a restart would, but keeps its run_id: the store must leave that
interval out. The Cassandra restart is real: one node is stopped and started with the
role's entry points (drain, stop; converge, start) while a load runs, and its counters
start again from zero: the store must see a restart, never a negative rate or a spike.
playbooks/collect.yml also reads each node's envelope where it runs: every Cassandra node's
resource use is stored with the round; and each round compares what the nodes run with the
plan in force (`kairos drift --adopted`): one Redis value set by hand is reported by node,
parameter, expected and running value, and set back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.loadgen import BackgroundLoad
from planner.model.spaces import get_space
from planner.workload.collect import collect
from planner.workload.store import Store

from .conftest import redis_client, run_playbook
from .test_autopilot import redis_plan

pytestmark = pytest.mark.lab

BIN = Path(sys.executable).parent
CASSANDRA = "cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3"
REDIS_PORTS = range(7001, 7007)
REDIS = ",".join(f"redis{i + 1}=127.0.0.1:{p}" for i, p in enumerate(REDIS_PORTS))


#: Where each engine's test load runs: the lab's nodes and a namespace of its own.
LOAD_TARGETS: dict[str, dict[str, Any]] = {
    "cassandra": {
        "contact_points": ("127.0.0.1", "127.0.0.2", "127.0.0.3"),
        "keyspace": "kairos_collecttest",
        "cl": "QUORUM",  # RF 3: two replicas stay up while one node restarts
    },
    "redis": {
        "contact_points": tuple(f"127.0.0.1:{p}" for p in REDIS_PORTS),
        "prefix": "kairos_collecttest",
    },
}


def _load(engine: str, **options: Any) -> BackgroundLoad:
    """A load on the lab's ``engine``; not verified: these tests read counters, not data."""
    return BackgroundLoad(engine=engine, verify=False, **LOAD_TARGETS[engine], **options)


def _round(store: Store, engine: str, hosts: str) -> int:
    result = collect(engine, hosts, timeout=10)
    print(f"{engine} round: nodes {result.nodes}, errors {result.errors}")
    assert result.samples, f"no {engine} node answered: {result.errors}"
    return store.append_counters(engine, "lab", result.samples, round_ts=result.round_ts)


@pytest.mark.cassandra
def test_cassandra_rates_under_load(lab: object, tmp_path: Path) -> None:
    store = Store(tmp_path / "k.db")
    rate = 60.0
    with _load("cassandra", mix={"read": 0.6, "update": 0.3, "scan": 0.1}, keys=200, rate=rate,
               concurrency=4, seed=5, max_seconds=60) as load:  # fmt: skip
        time.sleep(2)
        for _ in range(3):
            _round(store, "cassandra", CASSANDRA)
            time.sleep(4)
        _round(store, "cassandra", CASSANDRA)
    print(load.result().to_dict())
    d = store.derive("cassandra", "lab")
    print("intervals", [(iv.node, iv.kind, dict(iv.ops)) for iv in d.intervals])
    print("dropped", d.dropped, d.dropped_bins)
    s = d.series
    assert s is not None and len(s) >= 2
    # Our load at least (other tests may add theirs); never negative, never absurd.
    assert np.all(s.load > 0.5 * rate)
    assert np.all(s.load < 100 * rate)
    np.testing.assert_allclose(s.mix_matrix().sum(axis=1), 1.0, atol=1e-9)
    assert np.all(s.mix["read"] > 0) and np.all(s.mix["update"] > 0)
    assert np.all(s.mix["scan"] > 0)
    assert np.all(s.mix["insert"] == 0)  # all writes count as update by default
    # Gauges: every round has each class's p99 (the load reads, updates and scans) and the
    # request stages' queues, read from the nodes' own views.
    gauges = store.gauge_rounds("cassandra", "lab")
    print("gauges", [g.values for g in gauges])
    assert len(gauges) == 4
    for g in gauges:
        assert {"p99_ms_read", "p99_ms_write", "p99_ms_scan", "pending_tasks",
                "blocked_tasks"} <= set(g.values), g
        assert all(0 < g.values[f"p99_ms_{c}"] < 10_000 for c in ("read", "write", "scan")), g


@pytest.mark.cassandra
def test_collect_playbook_records_each_nodes_resource_use(lab: object, tmp_path: Path) -> None:
    """playbooks/collect.yml reads each Cassandra node's envelope on its own host and stores
    its resource use with the round: over two rounds each node has a CPU rate within its
    quota, and its page cache stays within its memory cap (the envelope holds it)."""
    db = tmp_path / "k.db"
    args = ("-e", f"kairos_store={db}", "-e", '{"kairos_collect_engines": ["cassandra"]}')
    with _load("cassandra", mix={"read": 0.8, "update": 0.2}, keys=200, rate=60.0,
               concurrency=4, seed=11, max_seconds=90):  # fmt: skip
        time.sleep(2)
        runs = [run_playbook("playbooks/collect.yml", *args, timeout=120)]
        time.sleep(5)
        runs.append(run_playbook("playbooks/collect.yml", *args, timeout=120))
    for run in runs:
        print(run.output[-3000:])
        assert run.rc == 0, run.output[-3000:]
        assert "no resource use" not in run.output  # every lab node has its envelope
    assert "resources: cass1 " in runs[1].output
    with Store(db) as store:
        latest = store.rounds("cassandra", "lab")[-1]
        nodes = {g.node: g.values for g in store.node_gauges("cassandra", "lab")
                 if g.ts == latest}
    print("resources", nodes)
    assert set(nodes) == {"cass1", "cass2", "cass3"}
    for node, v in nodes.items():
        assert v["memory_limit_bytes"] == 1536 * 2**20, (node, v)  # the inventory's envelope
        # The rate runs over the counters' read times, about a second after the envelope's.
        assert 0 < v["cpu_cores"] <= v["cpu_limit_cores"] * 1.25, (node, v)
        assert 0 <= v["page_cache_bytes"] <= v["memory_limit_bytes"], (node, v)
        assert v["page_cache_bytes"] <= v["memory_bytes"], (node, v)
        assert v["cpu_throttled_share"] >= 0 and v["read_iops"] >= 0, (node, v)


@pytest.mark.cassandra
def test_cassandra_node_restart_gives_no_negative_rate_and_no_spike(
    lab: object, tmp_path: Path
) -> None:
    store = Store(tmp_path / "k.db")
    rate, node = 60.0, "cass2"
    with _load("cassandra", mix={"read": 0.6, "update": 0.4}, keys=200, rate=rate,
               concurrency=4, seed=7, max_seconds=400) as load:  # fmt: skip
        time.sleep(2)
        _round(store, "cassandra", CASSANDRA)
        time.sleep(4)
        _round(store, "cassandra", CASSANDRA)
        (old,) = {s.instance for s in store.samples("cassandra", "lab") if s.node == node}
        stopped = run_playbook("playbooks/lab_down.yml", "--limit", node)
        assert stopped.rc == 0, stopped.output[-3000:]
        started = run_playbook("playbooks/cassandra.yml", "--limit", node, timeout=600)
        assert started.rc == 0, started.output[-3000:]
        # Rounds until the driver sees the node back and it reports its new instance.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(3)
            result = collect("cassandra", CASSANDRA, timeout=10)
            store.append_counters("cassandra", "lab", result.samples, round_ts=result.round_ts)
            if any(s.node == node and s.instance != old for s in result.samples):
                break
        else:
            pytest.fail(f"{node} did not answer with a new instance within 120 s")
        time.sleep(4)
        _round(store, "cassandra", CASSANDRA)
    print(load.result().to_dict())
    d = store.derive("cassandra", "lab")
    print("intervals", [(iv.node, iv.kind, round(iv.end - iv.start, 1), dict(iv.ops))
                        for iv in d.intervals])  # fmt: skip
    print("dropped", d.dropped, d.dropped_bins)
    # The restart is recognised (new gossip generation inside the interval), its interval
    # counts what the node served since it came back: never old - new.
    restarts = [iv for iv in d.intervals if iv.node == node and iv.kind == "restart"]
    assert len(restarts) == 1, (d.intervals, d.dropped)
    for iv in d.intervals:
        per_second = sum(iv.ops.values()) / (iv.end - iv.start)
        assert all(v >= 0 for v in iv.ops.values()), iv
        assert per_second < 3 * rate, f"spike: {iv}"  # the node's lifetime count would be far more
    s = d.series
    assert s is not None and len(s) >= 3
    assert np.all(s.load >= 0) and np.all(s.load < 3 * rate), s.load
    assert np.all(s.load > 0), s.load
    store.refresh_cluster_samples("cassandra", "lab")
    cached = store.cached_cluster_samples("cassandra", "lab")
    assert cached and all(0 <= load_ < 3 * rate for _, load_, _ in cached), cached


@pytest.mark.redis
def test_redis_rates_and_a_real_counter_reset(lab: object, tmp_path: Path) -> None:

    store = Store(tmp_path / "k.db")
    rate = 150.0
    primaries = [
        p for p in REDIS_PORTS
        if redis_client(p, decode_responses=True).info("replication")["role"] == "master"
    ]
    target = primaries[0]
    name = f"redis{target - 7000}"
    with _load("redis", mix={"read": 0.5, "write": 0.45, "other": 0.05}, keys=300, rate=rate,
               concurrency=2, seed=6, max_seconds=60) as load:  # fmt: skip
        time.sleep(2)
        _round(store, "redis", REDIS)
        time.sleep(3)
        _round(store, "redis", REDIS)
        time.sleep(1.5)
        client = redis_client(target, decode_responses=True)
        assert client.config_resetstat()  # commandstats of one primary fall to zero
        time.sleep(1.5)
        _round(store, "redis", REDIS)
        time.sleep(3)
        _round(store, "redis", REDIS)
    print(load.result().to_dict())
    d = store.derive("redis", "lab")
    print("dropped", d.dropped, d.dropped_bins)
    reasons = {x.node: x.reason for x in d.dropped}
    assert name in reasons and "went down" in reasons[name] and "without a restart" in reasons[name]
    s = d.series
    assert s is not None and len(s) == 2  # the reset interval is left out, not spiked
    assert np.all(s.load > 0.5 * rate) and np.all(s.load < 20 * rate)
    np.testing.assert_allclose(s.mix_matrix().sum(axis=1), 1.0, atol=1e-9)
    assert np.all(s.mix["read"] > 0) and np.all(s.mix["write"] > 0)
    # the collector's own INFO calls are not workload
    assert set(s.mix) == {"read", "write", "other"}
    # Gauges: p99 per class, and the main thread's utilisation from the second round on
    # (a fraction of one core: Redis serves on one thread).
    gauges = store.gauge_rounds("redis", "lab")
    print("gauges", [g.values for g in gauges])
    assert len(gauges) == 4 and "cpu_main_utilisation" not in gauges[0].values
    for g in gauges:
        assert 0 < g.values["p99_ms_read"] < 10_000 and 0 < g.values["p99_ms_write"] < 10_000, g
    assert all(0 < g.values["cpu_main_utilisation"] <= 1.05 for g in gauges[1:]), gauges


@pytest.mark.redis
def test_cli_collect_rounds_and_export(lab: object, tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    proc = subprocess.run(
        [str(BIN / "kairos"), "collect", "--engine", "redis", "--hosts", REDIS, "--store",
         str(db), "--cluster", "lab", "--count", "3", "--interval", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
    assert proc.stdout.count("6 node(s), 6 new sample(s)") == 3
    assert "last interval" in proc.stdout
    assert proc.stdout.count("p99 ms: ") == 3 and proc.stdout.count("main thread busiest") == 2
    trace = tmp_path / "trace.csv"
    proc = subprocess.run(
        [str(BIN / "kairos"), "collect", "--engine", "redis", "--store", str(db), "--cluster",
         "lab", "--export", str(trace)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    header = trace.read_text().splitlines()[0]
    assert header == "engine,timestamp,load,read,write,other"


def _redis_lab_config() -> dict[str, Any]:
    """What every Redis node of the lab runs, for each parameter of the Redis space (as
    tests/integration/test_autopilot.py's redis_current: the nodes agree on each)."""

    values: dict[str, Any] = {}
    for key, param in get_space("redis").parameters.items():
        seen = set()
        for port in REDIS_PORTS:
            with redis_client(port, decode_responses=True) as client:
                seen.add(str(client.config_get(key)[key]))
        assert len(seen) == 1, f"the lab's Redis nodes differ on {key}: {seen}"
        (value,) = seen
        values[key] = int(value) if param.type == "int" else value
    return values


def _adopt_redis_plan(tmp: Path, current: dict[str, Any]) -> Path:
    """A Redis plan whose current_config is ``current``, adopted in ``tmp/autopilot``; its
    one step (hz) is due in 20 minutes and never applied: what is in force is current_config."""
    plan = redis_plan(tmp / "lab-redis.yml", current=current,
                      target={"hz": 11 if current["hz"] != 11 else 12}, due_in_minutes=20)
    adopted = tmp / "autopilot"
    subprocess.run([str(BIN / "kairos"), "autopilot", "adopt", "--state-dir", str(adopted),
                    "--cluster", "lab", "--engine", "redis", "--plan", str(plan)],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return adopted


@pytest.mark.redis
def test_a_collect_round_reports_a_value_set_by_hand_as_drift(lab: object, tmp_path: Path) -> None:
    """Issue 40: a value changed by hand (CONFIG SET) is reported as drift within one collect
    round, by node, parameter, expected and running value; the playbook does not fail on it."""

    current = _redis_lab_config()
    adopted = _adopt_redis_plan(tmp_path, current)
    report = adopted / "drift-lab-redis.json"
    args = ("-e", f"kairos_store={tmp_path / 'k.db'}", "-e", f"kairos_drift_dir={adopted}",
            "-e", '{"kairos_collect_engines": ["redis"]}')

    clean = run_playbook("playbooks/collect.yml", *args, timeout=120)
    print(clean.output[-3000:])
    assert clean.rc == 0, clean.output[-3000:]
    # The round's lines as Ansible shows them (its YAML may fold a long line).
    lines = " ".join(clean.output.split())
    assert f"plan in force: {(tmp_path / 'lab-redis.yml').resolve()}" in lines
    assert "no drift" in lines
    seen = json.loads(report.read_text())
    assert seen["drift"] == [] and seen["applied_through"] is None, seen
    assert set(seen["nodes"]) == {f"redis{p - 7000}" for p in REDIS_PORTS}
    assert all(n["compared"] > 0 and n["error"] is None for n in seen["nodes"].values()), seen

    hz = int(current["hz"])
    by_hand = 37 if hz != 37 else 38
    node = redis_client(7003, decode_responses=True)
    try:
        assert node.config_set("hz", by_hand)
        drifted = run_playbook("playbooks/collect.yml", *args, timeout=120)
    finally:
        node.config_set("hz", hz)
        node.close()
    print(drifted.output[-3000:])
    assert drifted.rc == 0, drifted.output[-3000:]  # drift is a finding, not a failed round
    assert re.search(rf"redis3\s+hz\s+running\s+{hz}\s+{by_hand}\s+DRIFT", drifted.output)
    assert "drift: 1 value(s) on 1 node(s)" in " ".join(drifted.output.split())
    found = json.loads(report.read_text())
    assert [(d["node"], d["parameter"], d["source"], str(d["expected"]), str(d["observed"]))
            for d in found["drift"]] == [("redis3", "hz", "running", str(hz), str(by_hand))]
    assert found["nodes"]["redis3"]["drifted"] == 1 and found["checked_at"] >= seen["checked_at"]
