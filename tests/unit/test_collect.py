"""Collectors: parsing captured Redis INFO and Cassandra virtual-table rows; the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from planner.cli import main
from planner.collect import (
    CollectResult,
    cassandra_samples,
    parse_info,
    parse_targets,
    redis_command_class,
    redis_counters,
    redis_sample,
)
from planner.errors import ValidationError
from planner.store import CounterSample, Store

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
    by_scope = {s.scope: s.counters for s in tables}
    assert by_scope["table:kairos_rollout.usertable"] == {"read": 3667, "write": 3214, "scan": 0}
    assert not any(s.startswith("table:system") for s in by_scope)
    only = cassandra_samples("cass2", ts=5.0, local=local, views=rows, keyspaces=["fixture"])
    assert only[0].counters == {"read": 0, "write": 0, "scan": 0}


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
    import planner.collect

    _fake_round.calls = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(planner.collect, "collect", _fake_round)
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
    from planner.workload import load_trace

    s = load_trace(trace)
    assert s.engine == "cassandra" and len(s) == 3
    np.testing.assert_allclose(s.load, 80.0, rtol=0.01)
    np.testing.assert_allclose(s.mix["read"], 0.75, atol=1e-3)


def test_cli_collect_all_nodes_fail_exits_non_zero(tmp_path, monkeypatch, capsys) -> None:
    import planner.collect

    def failing(engine: str, hosts, **_: object) -> CollectResult:
        res = CollectResult(engine, 1.0)
        res.errors["127.0.0.1:7001"] = "ConnectionError: refused"
        return res

    monkeypatch.setattr(planner.collect, "collect", failing)
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
    assert _latest_rate(store, args).startswith("; last interval 200.0 ops/s (read 100%")
