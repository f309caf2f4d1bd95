"""Collectors: parsing captured Redis INFO and Cassandra virtual-table rows; the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.cli import main
from planner.errors import ValidationError
from planner.workload.collect import (
    CollectResult,
    cassandra_samples,
    parse_info,
    parse_targets,
    redis_command_class,
    redis_counters,
    redis_sample,
)
from planner.workload.store import CounterSample, Store

FIXTURES = Path(__file__).parent / "fixtures"


def info(name: str) -> dict:
    return parse_info((FIXTURES / "redis_info" / name).read_text())


def views(name: str) -> dict:
    return json.loads((FIXTURES / "cassandra_views" / name).read_text())


# ------------------------------------------------------------------------ Redis
def test_parse_info_captured_master() -> None:
    data = info("master_7002.txt")
    assert data["role"] == "master"
    assert data["run_id"] == "0c3363061ef246f7afb26d58e76ddd7e2c8f9a42"
    assert data["uptime_in_seconds"] == 256
    assert data["cmdstat_set"]["calls"] == 2212
    assert data["cmdstat_cluster|nodes"]["calls"] == 39
    assert data["cmdstat_eval"] == {"calls": 0, "usec": 0, "usec_per_call": 0.0,
                                    "rejected_calls": 2, "failed_calls": 0}
    assert data["slave0"]["port"] == 7004


@pytest.mark.parametrize(
    ("command", "cls"),
    [
        ("get", "read"), ("cmdstat_mget", "read"), ("hgetall", "read"), ("exists", "read"),
        ("zrange", "read"), ("set", "write"), ("del", "write"), ("incr", "write"),
        ("hset", "write"), ("expire", "write"), ("getdel", "write"), ("scan", "other"),
        ("keys", "other"), ("evalsha", "other"), ("multi", "other"), ("publish", "other"),
        ("config|set", "other"), ("config|get", "ignored"), ("cluster|nodes", "ignored"),
        ("info", "ignored"), ("wait", "ignored"), ("replconf", "ignored"), ("hello", "ignored"),
        ("client|setinfo", "ignored"), ("some_module_cmd", "other"),
    ],
)
def test_redis_command_classes(command: str, cls: str) -> None:
    assert redis_command_class(command) == cls


def test_redis_counters_from_captured_master() -> None:
    # set 2212; get 1272 + mget 455; eval 0 calls (2 rejected); the rest is plumbing
    counters = redis_counters(info("master_7002.txt"))
    assert counters == {"read": 1727, "write": 2212, "other": 0,
                        "ignored": 1 + 20 + 2413 + 1200 + 2 + 5 + 49 + 125 + 1 + 1 + 39 + 41}


def test_redis_sample_master_and_replica() -> None:
    m = redis_sample(info("master_7002.txt"), node="redis2", ts=10_000.0)
    assert (m.role, m.instance, m.started_at, m.scope) == (
        "master", "0c3363061ef246f7afb26d58e76ddd7e2c8f9a42", 10_000.0 - 256, "node")
    r = redis_sample(info("replica_7004.txt"), node="redis4", ts=10_000.0)
    assert r.role == "replica"
    assert r.counters["write"] == 1049 and r.counters["read"] == 0  # replicated writes


def test_redis_sample_needs_server_section() -> None:
    with pytest.raises(ValidationError, match="INFO has no 'run_id'"):
        redis_sample(parse_info("# Commandstats\r\ncmdstat_get:calls=1,usec=1\r\n"), node="x",
                     ts=1.0)


def test_resetstat_capture_is_a_reset_in_the_store() -> None:
    """INFO captured on the lab just before and after CONFIG RESETSTAT on one primary."""
    raw_before, raw_after = info("before_resetstat_7002.txt"), info("after_resetstat_7002.txt")
    assert raw_before["run_id"] == raw_after["run_id"]  # no restart
    before = redis_sample(raw_before, node="redis2", ts=10_000.0)
    after = redis_sample(raw_after, node="redis2", ts=10_030.0)
    assert before.counters == {"read": 96 + 8, "write": 90, "other": 8 + 1,
                               "ignored": 104 + 90 + 6 + 5}
    assert after.counters == {"read": 0, "write": 0, "other": 1, "ignored": 0}
    store = Store(":memory:")
    store.append_counters("redis", "lab", [before], round_ts=before.ts)
    store.append_counters("redis", "lab", [after], round_ts=after.ts)
    d = store.derive("redis", "lab")
    assert not d.intervals
    assert d.dropped[0].reason == "counter node/ignored went down (205 -> 0) without a restart"


# -------------------------------------------------------------------- Cassandra
def test_cassandra_samples_from_captured_views() -> None:
    data = views("cass2.json")
    local = data["system.local"]
    rows = {k: v for k, v in data.items() if k.startswith("coordinator_")}
    [node] = cassandra_samples("cass2", ts=5.0, local=local, views=rows)
    # system keyspaces (the driver's own metadata reads) are left out
    assert node.counters == {"read": 3667, "write": 3214, "scan": 0}
    assert node.scope == "node"
    assert node.started_at == float(local["gossip_generation"])
    assert node.instance == f"{local['host_id']}:{local['gossip_generation']}"
    tables = cassandra_samples("cass2", ts=5.0, local=local, views=rows, per_table=True)
    # The node's own sample first, as without per_table, then one per application table.
    assert tables[0] == node
    by_scope = {s.scope: s.counters for s in tables[1:]}
    assert by_scope == {
        "table:fixture.t": {"read": 0, "write": 0, "scan": 0},
        "table:kairos_app.events": {"read": 0, "write": 0, "scan": 0},
        "table:kairos_loadtest.usertable": {"read": 0, "write": 0, "scan": 0},
        "table:kairos_rollout.usertable": {"read": 3667, "write": 3214, "scan": 0},
    }
    only = cassandra_samples("cass2", ts=5.0, local=local, views=rows, keyspaces=["fixture"])
    assert only[0].counters == {"read": 0, "write": 0, "scan": 0}


def test_per_table_rounds_of_captured_rows_count_each_request_once() -> None:
    """Three rounds of cass2's captured rows, 60 s apart, kairos_rollout.usertable serving
    600 reads and 300 writes a round and kairos_app.events 120 writes: the cluster's series
    is the same with per_table as without (the node's sample, not the node's plus its
    tables'), and each table's series is its own."""
    data = views("cass2.json")
    local = data["system.local"]
    captured = {k: v for k, v in data.items() if k.startswith("coordinator_")}
    more = {("coordinator_read_latency", "kairos_rollout", "usertable"): 600,
            ("coordinator_write_latency", "kairos_rollout", "usertable"): 300,
            ("coordinator_write_latency", "kairos_app", "events"): 120}

    def rows(k: int) -> dict[str, list[dict[str, Any]]]:
        return {view: [{**row, "count": row["count"] + k * more.get(
            (view, row["keyspace_name"], row["table_name"]), 0)} for row in table]
            for view, table in captured.items()}

    t0 = float(local["gossip_generation"]) + 1000.0
    loads = {}
    for per_table in (False, True):
        store = Store(":memory:")
        for k in range(3):
            t = t0 + 60.0 * k
            store.append_counters("cassandra", "lab", cassandra_samples(
                "cass2", ts=t, local=local, views=rows(k), per_table=per_table), round_ts=t)
        loads[per_table] = store.cluster_series("cassandra", "lab").load.tolist()
    assert loads[True] == loads[False] == [pytest.approx((600 + 300 + 120) / 60.0)] * 2
    rollout = store.cluster_series("cassandra", "lab", table="kairos_rollout.usertable")
    events = store.cluster_series("cassandra", "lab", table="kairos_app.events")
    assert rollout.load.tolist() == [pytest.approx(900 / 60.0)] * 2
    assert rollout.mix["read"].tolist() == [pytest.approx(600 / 900)] * 2
    assert events.load.tolist() == [pytest.approx(2.0)] * 2
    assert events.mix["update"].tolist() == [1.0, 1.0]


def test_cassandra_samples_bad_rows() -> None:
    rows = {k: [] for k in ("coordinator_read_latency", "coordinator_write_latency")}
    with pytest.raises(ValidationError, match=r"no rows of system_views\.coordinator_scan_latency"):
        cassandra_samples("c", ts=1.0, local={"host_id": "h", "gossip_generation": 1}, views=rows)
    with pytest.raises(ValidationError, match="gossip_generation"):
        cassandra_samples("c", ts=1.0, local={}, views=rows)


def test_parse_targets() -> None:
    ts = parse_targets("cass1=127.0.0.1, 127.0.0.2,127.0.0.3:9043", default_port=9042)
    assert [(t.name, t.address, t.port) for t in ts] == [
        ("cass1", "127.0.0.1", 9042), ("127.0.0.2", "127.0.0.2", 9042),
        ("127.0.0.3:9043", "127.0.0.3", 9043)]
    with pytest.raises(ValidationError, match="port 'x' is not a number"):
        parse_targets(["a:x"], default_port=1)
    with pytest.raises(ValidationError, match="given twice"):
        parse_targets(["a=1.1.1.1", "a=1.1.1.2"], default_port=1)
    with pytest.raises(ValidationError, match="no node given"):
        parse_targets(" , ", default_port=1)


# -------------------------------------------------------------------------- CLI
def _fake_round(engine: str, hosts, **_: object) -> CollectResult:
    _fake_round.calls += 1  # type: ignore[attr-defined]
    n = _fake_round.calls  # type: ignore[attr-defined]
    t = 1000.0 + 10 * n
    res = CollectResult(engine, t)
    for i, name in enumerate(("cass1", "cass2")):
        res.samples.append(CounterSample(name, "node", t + i * 0.01,
                                         {"read": 300 * n, "write": 100 * n, "scan": 0},
                                         started_at=1.0, instance=f"{name}:1"))
    res.errors["cass3"] = "ConnectionRefusedError: refused"
    return res


def test_cli_collect_and_export(tmp_path, monkeypatch, capsys) -> None:
    import planner.workload.collect

    _fake_round.calls = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(planner.workload.collect, "collect", _fake_round)
    db = tmp_path / "k.db"
    rc = main(["collect", "--engine", "cassandra", "--hosts", "cass1=127.0.0.1",
               "--store", str(db), "--cluster", "lab", "--count", "4", "--interval", "0"])
    out = capsys.readouterr()
    assert rc == 0
    assert "cass3: ConnectionRefusedError" in out.err
    assert out.out.count("round") == 4
    trace = tmp_path / "trace.csv"
    rc = main(["collect", "--export", str(trace), "--engine", "cassandra", "--store", str(db),
               "--cluster", "lab"])
    assert rc == 0
    from planner.workload.series import load_trace

    s = load_trace(trace)
    assert s.engine == "cassandra" and len(s) == 3
    np.testing.assert_allclose(s.load, 80.0, rtol=0.01)
    np.testing.assert_allclose(s.mix["read"], 0.75, atol=1e-3)


def test_cli_exports_one_nodes_own_series(tmp_path, capsys) -> None:
    """--node: one node's own operations and mix (what --node-forecast plans it on), not
    the cluster's; an unknown node or --node without --export is refused by name."""
    from planner.workload.series import load_trace
    from planner.workload.store import Store

    db = tmp_path / "k.db"
    with Store(db) as store:
        for n in range(4):
            t = 1000.0 + 10 * n
            store.append_counters("cassandra", "lab", [
                CounterSample("cass1", "node", t, {"read": 270 * n, "write": 30 * n, "scan": 0},
                              started_at=1.0, instance="cass1:1"),
                CounterSample("cass2", "node", t + 0.01,
                              {"read": 10 * n, "write": 90 * n, "scan": 0},
                              started_at=1.0, instance="cass2:1")], round_ts=t)
    base = ["collect", "--engine", "cassandra", "--store", str(db), "--cluster", "lab"]
    for node, load, read in (("cass1", 30.0, 0.9), ("cass2", 10.0, 0.1)):
        trace = tmp_path / f"{node}.csv"
        assert main([*base, "--export", str(trace), "--node", node]) == 0
        assert f"point(s) of cassandra/lab node:{node}," in capsys.readouterr().out
        s = load_trace(trace)
        assert s.scope == f"node:{node}" and len(s) == 3
        np.testing.assert_allclose(s.load, load, rtol=0.01)
        np.testing.assert_allclose(s.mix["read"], read, atol=1e-3)
    assert main([*base, "--export", str(tmp_path / "x.csv"), "--node", "cass9"]) == 2
    assert "holds no samples of node 'cass9' (nodes: cass1, cass2)" in capsys.readouterr().err
    assert main([*base, "--hosts", "cass1=127.0.0.1", "--node", "cass1"]) == 2
    assert "--node: chooses what --export writes; give --export" in capsys.readouterr().err


def test_cli_collect_rounds_start_one_interval_apart(tmp_path, monkeypatch, capsys) -> None:
    """--interval is a sampling period: a round that takes 0.4 s of a 1-s interval is
    followed 1 s after it started, not 1 s after it ended (1.4 s); the bound leaves a
    busy machine 0.3 s of its own."""
    import time

    import planner.workload.collect

    starts: list[float] = []

    def slow_round(engine: str, hosts, **kw: object) -> CollectResult:
        starts.append(time.monotonic())
        time.sleep(0.4)
        return _fake_round(engine, hosts, **kw)

    _fake_round.calls = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(planner.workload.collect, "collect", slow_round)
    rc = main(["collect", "--engine", "cassandra", "--hosts", "cass1=127.0.0.1",
               "--store", str(tmp_path / "k.db"), "--cluster", "lab", "--count", "3",
               "--interval", "1"])
    capsys.readouterr()
    assert rc == 0
    gaps = np.diff(starts)
    assert len(gaps) == 2 and np.all(gaps >= 1.0) and np.all(gaps < 1.3), gaps


def test_cli_collect_all_nodes_fail_exits_non_zero(tmp_path, monkeypatch, capsys) -> None:
    import planner.workload.collect

    def failing(engine: str, hosts, **_: object) -> CollectResult:
        res = CollectResult(engine, 1.0)
        res.errors["127.0.0.1:7001"] = "ConnectionError: refused"
        return res

    monkeypatch.setattr(planner.workload.collect, "collect", failing)
    rc = main(["collect", "--engine", "redis", "--hosts", "127.0.0.1:7001",
               "--store", str(tmp_path / "k.db")])
    assert rc == 1
    assert "no node answered" in capsys.readouterr().err


def test_cli_export_with_empty_store_fails_clearly(tmp_path, capsys) -> None:
    rc = main(["collect", "--export", str(tmp_path / "t.csv"), "--engine", "redis",
               "--store", str(tmp_path / "k.db")])
    assert rc == 2
    assert "fewer than 2 usable intervals (0 collection round(s)" in capsys.readouterr().err


def test_cli_rejects_password_on_argv(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["collect", "--engine", "redis", "--hosts", "h:1", "--password", "x"])


def test_cassandra_restart_between_rounds_counts_since_the_restart() -> None:
    """A node restarted between two rounds: new gossip generation, counters from zero.

    The captured rows are the round before; the round after is the same node with a new
    generation (its start, inside the interval) and small counts. The store must count what
    the node served since it came back, not ``new - old`` (negative) nor its lifetime.
    """
    data = views("cass2.json")
    local = data["system.local"]
    rows = {k: v for k, v in data.items() if k.startswith("coordinator_")}
    generation = int(local["gossip_generation"])
    t0, t1 = generation + 1000.0, generation + 1100.0
    before = cassandra_samples("cass2", ts=t0, local=local, views=rows)
    restarted = {**local, "gossip_generation": generation + 1060}
    fresh = {
        view: [{**row, "count": 40 if (row["keyspace_name"], row["table_name"])
                == ("kairos_rollout", "usertable") else 0} for row in table]
        for view, table in rows.items()
    }
    after = cassandra_samples("cass2", ts=t1, local=restarted, views=fresh)
    store = Store(":memory:")
    store.append_counters("cassandra", "lab", before, round_ts=t0)
    store.append_counters("cassandra", "lab", after, round_ts=t1)
    d = store.derive("cassandra", "lab")
    [interval] = d.intervals
    assert interval.kind == "restart" and not d.dropped
    assert interval.ops["read"] == 40 and interval.ops["update"] == 40
    assert min(interval.ops.values()) >= 0


def test_the_printed_last_interval_counts_each_node_once() -> None:
    # Each node read 2 s after its round began, 10 s apart, 100 reads/s per node: the third
    # round's line says 200 ops/s, not the two last intervals of each node summed (400).
    from planner.commands.collect import _latest_rate

    store = Store(":memory:")
    for k, t0 in enumerate((1000.0, 1010.0, 1020.0)):
        store.append_counters("cassandra", "lab", [
            CounterSample(n, "node", t0 + 2, {"read": 1000 * k}, instance=n)
            for n in ("c1", "c2")], round_ts=t0)
    args = argparse.Namespace(engine="cassandra", cluster="lab")
    line = _latest_rate(store, args, store.rounds("cassandra", "lab"))
    assert line.startswith("; last interval 200.0 ops/s (read 100%")


# ----------------------------------------------------------------------- gauges
def test_redis_gauges_from_captured_latencystats_and_cpu() -> None:
    # Redis 7.0.15 after 200 SET, 200 GET and one INCR (INFO server replication
    # commandstats latencystats cpu, as read_redis_info asks).
    parsed = info("latencystats_cpu_7999.txt")
    sample = redis_sample(parsed, node="r", ts=10.0)
    # usec -> ms; the worst command of each class (SET p99 4.015 us vs INCR 23.039 us).
    assert sample.gauges["p99_ms_read"] == pytest.approx(0.001003)
    assert sample.gauges["p99_ms_write"] == pytest.approx(0.023039)
    # COMMAND DOCS (redis-cli's) is plumbing: no "ignored" gauge, and it sets no class.
    assert set(sample.gauges) == {"p99_ms_read", "p99_ms_write", "cpu_main_seconds"}
    assert sample.gauges["cpu_main_seconds"] == pytest.approx(
        parsed["used_cpu_user_main_thread"] + parsed["used_cpu_sys_main_thread"])


def test_redis_gauges_absent_sections_give_none() -> None:
    assert redis_sample(info("master_7002.txt"), node="r", ts=1.0).gauges == {}


def test_cassandra_gauges_worst_table_p99_and_request_stages() -> None:
    data = views("cass2.json")
    rows = {k: v for k, v in data.items() if k.startswith("coordinator_")}
    pools = views("thread_pools_cass2.json")["thread_pools"]
    [node] = cassandra_samples("cass2", ts=5.0, local=data["system.local"], views=rows,
                               pools=pools)
    # Only the application's tables that served requests (system.local's reads are left out),
    # in ms: the views print 0.061 and 0.043 (seconds, CASSANDRA_LATENCY_VIEW_TO_MS).
    assert node.gauges["p99_ms_read"] == pytest.approx(61.0)
    assert node.gauges["p99_ms_write"] == pytest.approx(43.0)
    assert "p99_ms_scan" not in node.gauges  # no application scan this capture
    # Captured idle: the request stages (CounterMutationStage exists once counters are
    # written) have nothing pending.
    names = {r["name"] for r in pools}
    assert {"Native-Transport-Requests", "ReadStage", "MutationStage"} <= names
    assert node.gauges["pending_tasks"] == 0 and node.gauges["blocked_tasks"] == 0
    assert node.gauges["active_requests"] == 1  # the capturing query itself
    # Queued requests count; a compaction backlog is not a request queue.
    busy = {"ReadStage": (12, 0), "Native-Transport-Requests": (30, 2),
            "CompactionExecutor": (9, 0)}
    loaded = [{**r, "pending_tasks": busy.get(r["name"], (r["pending_tasks"],))[0],
               "blocked_tasks": busy.get(r["name"], (0, r["blocked_tasks"]))[1]} for r in pools]
    [node] = cassandra_samples("cass2", ts=5.0, local=data["system.local"], views=rows,
                               pools=loaded)
    assert node.gauges["pending_tasks"] == 42 and node.gauges["blocked_tasks"] == 2
    assert node.gauges["active_requests"] == 1 + 30  # in flight: active + queued
    tables = cassandra_samples("cass2", ts=5.0, local=data["system.local"], views=rows,
                               pools=pools, per_table=True)
    by_scope = {s.scope: s.gauges for s in tables}
    assert by_scope["table:kairos_rollout.usertable"] == {
        "p99_ms_read": pytest.approx(61.0), "p99_ms_write": pytest.approx(43.0)}
    # The request stages are the node's, on its own sample alone.
    assert by_scope["node"]["active_requests"] == 1 and "pending_tasks" in by_scope["node"]
    assert by_scope["table:kairos_app.events"] == {}  # served nothing: no p99
    with pytest.raises(ValidationError, match="thread_pools: bad pending_tasks"):
        cassandra_samples("cass2", ts=5.0, local=data["system.local"], views=rows,
                          pools=[{"name": "ReadStage", "pending_tasks": -1, "blocked_tasks": 0}])


def test_store_keeps_gauges_and_summarises_each_round(tmp_path: Path) -> None:
    def sample(node: str, ts: float, instance: str, **gauges: float) -> CounterSample:
        return CounterSample(node=node, scope="node", ts=ts, counters={"read": 1, "write": 1,
                             "other": 0, "ignored": 0}, instance=instance, started_at=0.0,
                             role="master", gauges=gauges)

    with Store(tmp_path / "k.db") as store:
        store.append_counters("redis", "lab", [
            sample("a", 10.0, "i1", p99_ms_read=0.5, cpu_main_seconds=1.0),
            sample("b", 10.0, "j1", p99_ms_read=2.0, p99_ms_write=1.0, cpu_main_seconds=5.0)],
            round_ts=10.0)
        store.append_counters("redis", "lab", [
            sample("a", 20.0, "i1", p99_ms_read=0.5, cpu_main_seconds=3.0),   # 0.2 busy
            sample("b", 20.0, "j2", p99_ms_read=0.1, cpu_main_seconds=0.5)],   # restarted
            round_ts=20.0)
        first, second = store.gauge_rounds("redis", "lab")
        assert first.values == {"p99_ms_read": 2.0, "p99_ms_write": 1.0}  # no rate yet
        assert second.values == {"p99_ms_read": 0.5, "cpu_main_utilisation": pytest.approx(0.2)}
        assert store.samples("redis", "lab")[0].gauges == {"p99_ms_read": 0.5,
                                                           "cpu_main_seconds": 1.0}
        with pytest.raises(ValidationError, match="unknown redis gauge 'pending_tasks'"):
            store.append_counters("redis", "lab", [sample("a", 30.0, "i1", pending_tasks=1.0)])
        with pytest.raises(ValidationError, match="gauge p99_ms_read must be a finite"):
            store.append_counters("redis", "lab", [sample("a", 30.0, "i1",
                                                          p99_ms_read=float("nan"))])
        store.append_counters("cassandra", "lab", [
            CounterSample(node=n, scope="node", ts=5.0, counters={"read": 0, "write": 0,
                          "scan": 0}, gauges={"pending_tasks": p, "blocked_tasks": 0.0})
            for n, p in (("c1", 3.0), ("c2", 4.0))])
        [round_] = store.gauge_rounds("cassandra", "lab")
        assert round_.values == {"pending_tasks": 7.0, "blocked_tasks": 0.0}


def test_a_round_sums_redis_signals_and_gives_the_ratios(tmp_path: Path) -> None:
    """Two primaries over two rounds 10 s apart: rates per node, summed over the cluster;
    the hit ratio and commands per read from the sums; the fullest node's memory share."""
    from planner.workload.store import redis_signals_text

    def sample(node: str, ts: float, **gauges: float) -> CounterSample:
        return CounterSample(node=node, scope="node", ts=ts, counters={"read": 1, "write": 1,
                             "other": 0, "ignored": 0}, instance=node, started_at=0.0,
                             role="master", gauges=gauges)

    first = {"keyspace_hits": 100.0, "keyspace_misses": 100.0, "evicted_keys": 0.0,
             "total_commands_processed": 1000.0, "total_reads_processed": 500.0}
    with Store(tmp_path / "k.db") as store:
        store.append_counters("redis", "lab", [
            sample("a", 10.0, **first), sample("b", 10.0, **first)], round_ts=10.0)
        store.append_counters("redis", "lab", [
            sample("a", 20.0, keyspace_hits=900.0, keyspace_misses=300.0, evicted_keys=50.0,
                   total_commands_processed=5000.0, total_reads_processed=1000.0,
                   used_memory=900.0, maxmemory=1000.0, mem_fragmentation_ratio=1.1,
                   connected_clients=10.0, sampled_aggregates=20.0, sampled_compact=5.0),
            sample("b", 20.0, keyspace_hits=500.0, keyspace_misses=100.0, evicted_keys=0.0,
                   total_commands_processed=3000.0, total_reads_processed=1000.0,
                   used_memory=500.0, maxmemory=1000.0, mem_fragmentation_ratio=1.6,
                   connected_clients=6.0, sampled_aggregates=12.0, sampled_compact=3.0)],
            round_ts=20.0)
        _, second = store.gauge_rounds("redis", "lab")
    v = second.values
    assert v["hits_per_second"] == pytest.approx(80 + 40)
    assert v["misses_per_second"] == pytest.approx(20 + 0)
    assert v["hit_ratio"] == pytest.approx(120 / 140)
    assert v["evictions_per_second"] == pytest.approx(5.0)
    assert v["commands_per_read"] == pytest.approx((400 + 200) / (50 + 50))
    assert v["memory_share"] == pytest.approx(0.9) and v["mem_fragmentation_ratio"] == 1.6
    assert v["connected_clients"] == 16.0 and v["compact_share"] == pytest.approx(8 / 32)
    assert redis_signals_text(v) == (
        "hit ratio 0.86, evictions 5.0/s, fullest node at 90% of maxmemory, fragmentation "
        "1.60, 16 clients, 6.0 commands per read, 25% of 32 sampled aggregates compact")


def test_a_version_1_store_is_upgraded_and_keeps_its_samples(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with Store(path) as store:
        store.append_counters("cassandra", "lab", [CounterSample(
            node="c1", scope="node", ts=5.0, counters={"read": 1, "write": 2, "scan": 0})])
    # As a version-1 Kairos left it: no gauges column.
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE counter_samples DROP COLUMN gauges")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with Store(path) as store:
        [old] = store.samples("cassandra", "lab")
        assert old.counters == {"read": 1, "write": 2, "scan": 0} and old.gauges == {}
        store.append_counters("cassandra", "lab", [CounterSample(
            node="c1", scope="node", ts=6.0, counters={"read": 2, "write": 2, "scan": 0},
            gauges={"p99_ms_read": 1.5})])
        assert store.gauge_rounds("cassandra", "lab")[-1].values == {"p99_ms_read": 1.5}
    version = sqlite3.connect(path).execute(
        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    assert version == "2"


# ------------------------------------------------ Redis configuration signals (issue 41)
def test_redis_signals_are_read_from_info_stats_memory_keyspace_clients() -> None:
    """A real Redis 7.0 (tests/unit/fixtures/redis_info/signals_7998.txt: maxmemory 3 MB,
    allkeys-lru, filled past it) gives every signal as INFO reads it."""
    from planner.workload.collect import redis_signals

    info_ = info("signals_7998.txt")
    assert redis_signals(info_) == {
        "keyspace_hits": 1249.0, "keyspace_misses": 952.0, "evicted_keys": 4363.0,
        "expired_keys": 50.0, "total_commands_processed": 8786.0,
        "total_reads_processed": 467.0, "used_memory": 3147320.0, "maxmemory": 3145728.0,
        "mem_fragmentation_ratio": 4.85, "connected_clients": 1.0, "keys": 2167.0}
    sample = redis_sample(info_, node="r1", ts=1000.0)
    assert sample.gauges["evicted_keys"] == 4363.0 and "p99_ms_read" in sample.gauges
    # Without the sections (an older caller's INFO), no signal, and no error.
    assert redis_signals(info("master_7002.txt")) == {}


def test_a_sample_of_encodings_counts_the_compact_aggregates() -> None:
    """64 RANDOMKEYs on a real Redis 7.0 holding small and big hashes, sets, sorted sets,
    lists and strings (fixtures/redis_info/encodings_7998.json): 25 listpack and 8 intset
    are compact; 6 quicklist, 3 skiplist and 2 hashtable large; 19 strings not counted."""
    import json

    from planner.workload.collect import encoding_counts

    encodings = json.loads((FIXTURES / "redis_info" / "encodings_7998.json").read_text())
    assert encoding_counts(encodings) == {"sampled_aggregates": 44.0, "sampled_compact": 33.0}
    assert encoding_counts([]) == {"sampled_aggregates": 0.0, "sampled_compact": 0.0}


def test_kairos_own_sampling_commands_are_not_workload() -> None:
    for command in ("cmdstat_randomkey", "cmdstat_object|encoding"):
        assert redis_command_class(command) == "ignored"
    assert redis_command_class("cmdstat_type") == "read"  # applications' TYPE still counts
