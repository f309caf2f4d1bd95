"""Each node's resource use as gauges of a collection round (planner/workload/resources.py).

The fixtures (tests/unit/fixtures/envelopes/) are the files playbooks/tasks/
collect_resources.yml wrote on the enveloped lab (2026-11-27, under a load): every node's
kairos_envelope read, Ansible's keys included. ``cassandra_round1/2`` and ``redis_round1/2``
are two rounds about 50 s apart; ``cassandra_not_read`` the four ways a node gives none:
read (cass1), skipped as systemd-managed (cass4), unreachable over SSH (cass5), and no
envelope of its name (cass6).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import ValidationError
from planner.workload.collect import CollectResult
from planner.workload.resources import describe, load_resources, with_resources
from planner.workload.store import CounterSample, Store

FIXTURES = Path(__file__).parent / "fixtures" / "envelopes"
CASSANDRA = ("cass1", "cass2", "cass3")
REDIS = tuple(f"redis{i}" for i in range(1, 7))
#: When the playbook wrote each round's file (the reads ended a fraction of a second before).
CASSANDRA_TS = (1795784916.731, 1795784966.612)
REDIS_TS = (1795784929.230, 1795784977.920)


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.json"


def counters(engine: str, n: int) -> dict[str, int]:
    if engine == "cassandra":
        return {"read": 100 * n, "write": 50 * n, "scan": 0}
    return {"read": 100 * n, "write": 50 * n, "other": 0, "ignored": 3 * n}


def round_samples(engine: str, nodes: tuple[str, ...], ts: float, n: int,
                  instance: str = "i1") -> list[CounterSample]:
    return [CounterSample(node, "node", ts, counters(engine, n), started_at=1.0,
                          instance=f"{node}:{instance}",
                          role="master" if engine == "redis" else None)
            for node in nodes]


# ------------------------------------------------------------------- the file
def test_a_lab_read_gives_each_node_its_gauges() -> None:
    res = load_resources(fixture("cassandra_round1"), nodes=CASSANDRA)
    assert res.missing == {}
    assert res.gauges["cass1"] == {
        "cpu_seconds": 101.41, "cpu_throttled_seconds": 243.221,
        "memory_bytes": 1609666560.0, "page_cache_bytes": 535826432.0, "read_ios": 8455.0,
        "cpu_limit_cores": 0.4, "memory_limit_bytes": 1610612736.0, "read_iops_limit": 1500.0,
    }
    for node in CASSANDRA:  # the envelope holds the page cache: it never exceeds the cap
        g = res.gauges[node]
        assert g["page_cache_bytes"] <= g["memory_bytes"] <= g["memory_limit_bytes"]
    redis = load_resources(fixture("redis_round1"), nodes=REDIS)
    # 0.25 CPU, 256 MiB, no read cap: no read_iops_limit gauge rather than a zero
    assert redis.gauges["redis1"]["cpu_limit_cores"] == 0.25
    assert redis.gauges["redis1"]["memory_limit_bytes"] == 256 * 2**20
    assert "read_iops_limit" not in redis.gauges["redis1"]


def test_nodes_without_an_envelope_give_no_gauges_and_say_why() -> None:
    nodes = ("cass1", "cass4", "cass5", "cass6", "cass7")
    res = load_resources(fixture("cassandra_not_read"), nodes=nodes)
    assert set(res.gauges) == {"cass1"}
    assert res.missing["cass4"].startswith("not read: skipped (only a node under Kairos's")
    assert res.missing["cass5"] == ("not read: unreachable (ssh: connect to host 127.0.0.1 "
                                    "port 1: Connection refused)")
    assert res.missing["cass6"] == "no envelope named lab-cass9"
    assert res.missing["cass7"] == f"not in {fixture('cassandra_not_read')}"
    text = res.missing_text()
    assert text.count("cass6") == 1 and "cass1" not in text


def test_unusable_cgroups_and_a_failed_read_are_reasons_too(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({
        "a": {"changed": False, "usable": False, "exists": False,
              "reason": "no cgroup v1 cpu/memory/blkio hierarchies and no cgroup v2 with "
                        "controllers"},
        "b": {"changed": False, "usable": False, "exists": False,
              "reason": "no cgroup v1 cpu/memory/blkio hierarchies and no cgroup v2 with "
                        "controllers"},
        "c": {"failed": False, "failed_when_result": False, "msg": "envelope x: boom"},
    }))
    res = load_resources(path, nodes=("a", "b", "c"))
    assert res.gauges == {}
    assert res.missing_text() == ("a, b: no envelope: no cgroup v1 cpu/memory/blkio hierarchies "
                                  "and no cgroup v2 with controllers; c: not read: envelope x: "
                                  "boom")


def _lab_entry() -> dict:
    return json.loads(fixture("cassandra_round1").read_text())["cass1"]


def _with(**changes: object) -> dict:
    entry = _lab_entry()
    for dotted, value in changes.items():
        *path, key = dotted.split("__")
        target = entry
        for part in path:
            target = target[part]
        if value is None:
            del target[key]
        else:
            target[key] = value
    return {"cass1": entry}


@pytest.mark.parametrize(("content", "match"), [
    (None, r"--resources file .*/r\.json: no such file"),
    ("{not json", r"--resources file .*/r\.json: not valid JSON at line 1, column 2"),
    ("[]", r"--resources file .*/r\.json: the file \(node -> kairos_envelope's result\): "
           r"expected a mapping, got a list"),
    ({"cass9": {"exists": False}}, r"r\.json: node 'cass9' is not one of the round's nodes "
                                   r"\(cass1, cass2, cass3\)"),
    ({"cass1": []}, r"r\.json: cass1: expected a mapping, got a list"),
    ({"cass1": {"changed": False}}, r"r\.json: cass1\.exists: missing"),
    ({"cass1": {"exists": "yes"}}, r"r\.json: cass1\.exists: expected true/false, got 'yes'"),
    ({"cass1": {"exists": True}}, r"r\.json: cass1\.usage: expected a mapping, got nothing"),
    (_with(usage__page_cache_bytes=-1),
     r"r\.json: cass1\.usage\.page_cache_bytes: -1 is out of range: must be >= 0"),
    (_with(usage__read_ios="many"),
     r"r\.json: cass1\.usage\.read_ios: expected a number, got a string 'many'"),
    (_with(usage__cpu_seconds=True), r"cass1\.usage\.cpu_seconds: expected a number, got true"),
    (_with(usage__throttled_seconds=None), r"r\.json: cass1\.usage\.throttled_seconds: missing"),
    (_with(limits__memory=-5), r"r\.json: cass1\.limits\.memory: -5 is out of range"),
])
def test_bad_resource_files_are_refused_naming_file_field_and_problem(
    tmp_path: Path, content: object, match: str
) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ValidationError, match=match):
        load_resources(path, nodes=CASSANDRA)


# ------------------------------------------------------------------ the store
def test_two_lab_rounds_round_trip_through_the_store_with_rates() -> None:
    store = Store(":memory:")
    for n, ts in enumerate(CASSANDRA_TS, start=1):
        res = load_resources(fixture(f"cassandra_round{n}"), nodes=CASSANDRA)
        samples = with_resources(round_samples("cassandra", CASSANDRA, ts, n), res)
        assert store.append_counters("cassandra", "lab", samples, round_ts=ts) == 3
    rounds = store.node_gauges("cassandra", "lab")
    assert [(g.ts, g.node) for g in rounds] == [(t, n) for t in CASSANDRA_TS for n in CASSANDRA]
    first, second = rounds[0], rounds[3]
    assert "cpu_cores" not in first.values and "read_iops" not in first.values  # no rate yet
    span = CASSANDRA_TS[1] - CASSANDRA_TS[0]
    assert second.values["cpu_cores"] == pytest.approx((121.32 - 101.41) / span)
    assert second.values["cpu_throttled_share"] == pytest.approx((288.28 - 243.221) / span)
    assert second.values["read_iops"] == pytest.approx((16773 - 8455) / span)
    assert second.values["page_cache_bytes"] == 539426816.0
    for g in rounds[3:]:  # each node at its 0.4-core quota, throttled, reading from disk
        assert 0.35 < g.values["cpu_cores"] <= g.values["cpu_limit_cores"] * 1.01
        assert 0.5 < g.values["cpu_throttled_share"] < 1.2
        assert 100 < g.values["read_iops"] < g.values["read_iops_limit"]
    assert describe(second.values) == ("0.40 of 0.4 CPU (throttled 0.90 s/s), memory 1.50 of "
                                       "1.50 GiB (page cache 0.50), 167 read IOPS of 1500")
    assert describe(first.values) == "memory 1.50 of 1.50 GiB (page cache 0.50)"
    # The cluster summary per round (learning's saturation signals) is unchanged by them.
    assert all(not set(g.values) & {"cpu_seconds", "cpu_cores"}
               for g in store.gauge_rounds("cassandra", "lab"))


def test_redis_rounds_give_a_small_cpu_rate_and_no_throttling() -> None:
    store = Store(":memory:")
    for n, ts in enumerate(REDIS_TS, start=1):
        res = load_resources(fixture(f"redis_round{n}"), nodes=REDIS)
        store.append_counters("redis", "lab", with_resources(
            round_samples("redis", REDIS, ts, n), res), round_ts=ts)
    latest = [g for g in store.node_gauges("redis", "lab", since=REDIS_TS[1])
              if g.ts == REDIS_TS[1]]
    assert [g.node for g in latest] == list(REDIS)
    for g in latest:
        assert 0 < g.values["cpu_cores"] < 0.01
        assert g.values["cpu_throttled_share"] == 0.0 and g.values["read_iops"] == 0.0


def test_a_restart_or_a_count_that_went_down_gives_no_rate_never_a_zero() -> None:
    store = Store(":memory:")
    first, second = (load_resources(fixture(f"cassandra_round{n}"), nodes=CASSANDRA).gauges
                     for n in (1, 2))

    def sample(node: str, ts: float, reading: dict, instance: str = "i1") -> CounterSample:
        return CounterSample(node, "node", ts, counters("cassandra", 1), started_at=1.0,
                             instance=instance, gauges=reading[node])

    store.append_counters("cassandra", "lab", [
        sample("cass1", 100.0, first), sample("cass2", 100.0, first),
        sample("cass3", 100.0, first)], round_ts=100.0)
    store.append_counters("cassandra", "lab", [
        sample("cass1", 160.0, second, instance="i2"),  # restarted
        sample("cass2", 160.0, first),  # the same reading again: a true zero
        sample("cass3", 160.0, second)], round_ts=160.0)
    store.append_counters("cassandra", "lab", [
        sample("cass3", 220.0, first)], round_ts=220.0)  # its counts went down
    by = {(g.ts, g.node): g.values for g in store.node_gauges("cassandra", "lab")}
    assert "cpu_cores" not in by[(160.0, "cass1")]  # the readings, no rate
    assert by[(160.0, "cass1")]["memory_bytes"] == 1610579968.0
    assert by[(160.0, "cass2")]["cpu_cores"] == 0.0
    assert by[(160.0, "cass3")]["cpu_cores"] > 0.3
    assert not {"cpu_cores", "cpu_throttled_share", "read_iops"} & set(by[(220.0, "cass3")])
    assert by[(220.0, "cass3")]["page_cache_bytes"] == 519921664.0


def test_the_store_refuses_a_negative_resource_reading() -> None:
    bad = CounterSample("cass1", "node", 1.0, counters("cassandra", 1),
                        gauges={"page_cache_bytes": -1.0})
    with pytest.raises(ValidationError, match="gauge page_cache_bytes must be a finite non-neg"):
        Store(":memory:").append_counters("cassandra", "lab", [bad])


# ---------------------------------------------------------------------- CLI
def _fake(ts: tuple[float, ...]):
    calls = iter(enumerate(ts, start=1))

    def collect(engine: str, hosts: object, **_: object) -> CollectResult:
        n, t = next(calls)
        res = CollectResult(engine, t)
        res.samples.extend(round_samples(engine, ("cass1", "cass2"), t, n))
        res.errors["cass3"] = "ConnectionRefusedError: refused"
        return res

    return collect


def test_cli_stores_and_prints_each_nodes_resources(tmp_path, monkeypatch, capsys) -> None:
    import planner.workload.collect

    monkeypatch.setattr(planner.workload.collect, "collect", _fake(CASSANDRA_TS))
    db = tmp_path / "k.db"
    hosts = "cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3,cass4=127.0.0.4"
    outs = []
    for n in (1, 2):
        rc = main(["collect", "--engine", "cassandra", "--hosts", hosts, "--store", str(db),
                   "--cluster", "lab", "--resources", str(fixture(f"cassandra_round{n}"))])
        assert rc == 0
        outs.append(capsys.readouterr())
    assert outs[0].out.splitlines()[1] == (
        "  resources: cass1 memory 1.50 of 1.50 GiB (page cache 0.50); cass2 memory 1.50 of "
        "1.50 GiB (page cache 0.62)")
    assert outs[1].out.splitlines()[1].startswith(
        "  resources: cass1 0.40 of 0.4 CPU (throttled 0.90 s/s), memory 1.50 of 1.50 GiB")
    # cass3's reading has no sample to go on (it did not answer); cass4 is not in the file
    assert outs[0].err.count("no resource use") == 1
    assert f"no resource use for cass4: not in {fixture('cassandra_round1')}" in outs[0].err
    with Store(db) as store:
        first = next(s for s in store.samples("cassandra", "lab") if s.node == "cass2")
        assert first.gauges["read_ios"] == 10242.0


def test_cli_resources_with_more_than_one_round_cannot_work(tmp_path, capsys) -> None:
    rc = main(["collect", "--engine", "cassandra", "--hosts", "cass1=127.0.0.1", "--store",
               str(tmp_path / "k.db"), "--resources", str(fixture("cassandra_round1")),
               "--count", "2"])
    assert rc == 2
    assert ("--resources: one reading of each node, for one round; got --count 2"
            in capsys.readouterr().err)


def test_cli_per_table_keeps_the_resources_on_the_node_s_own_sample(
        tmp_path, monkeypatch, capsys) -> None:
    """``--per-table --resources`` (the autopilot's round with kairos_autopilot_per_table):
    each node's resource use goes on its own sample, its tables' samples are kept beside
    it, and the printed rate counts each request once."""
    import planner.workload.collect

    asked = []

    def collect(engine: str, hosts: object, **kw: object) -> CollectResult:
        asked.append(kw["per_table"])
        n, ts = len(asked), CASSANDRA_TS[len(asked) - 1]
        res = CollectResult(engine, ts)
        for node in CASSANDRA:
            res.samples += [
                CounterSample(node, "node", ts, counters(engine, n), started_at=1.0,
                              instance=f"{node}:i1"),
                CounterSample(node, "table:shop.orders", ts, counters(engine, n),
                              started_at=1.0, instance=f"{node}:i1")]
        return res

    monkeypatch.setattr(planner.workload.collect, "collect", collect)
    db = tmp_path / "k.db"
    hosts = "cass1=127.0.0.1,cass2=127.0.0.2,cass3=127.0.0.3"
    lines = []
    for n in (1, 2):
        rc = main(["collect", "--engine", "cassandra", "--hosts", hosts, "--store", str(db),
                   "--cluster", "lab", "--per-table",
                   "--resources", str(fixture(f"cassandra_round{n}"))])
        assert rc == 0
        lines.append(capsys.readouterr().out.splitlines())
    assert asked == [True, True]
    assert ", 6 new sample(s)" in lines[0][0]
    span = CASSANDRA_TS[1] - CASSANDRA_TS[0]
    # 3 nodes x 150 requests over the span: the node's samples, not node + table (twice).
    assert f"last interval {3 * 150 / span:.1f} ops/s" in lines[1][0], lines[1]
    assert lines[1][1].startswith("  resources: cass1 0.40 of 0.4 CPU")
    with Store(db) as store:
        kept = {(s.node, s.scope): s.gauges for s in store.samples("cassandra", "lab")
                if s.ts == CASSANDRA_TS[1]}
    assert set(kept) == {(n, scope) for n in CASSANDRA for scope in ("node", "table:shop.orders")}
    assert all(kept[(n, "node")]["read_ios"] > 0 and kept[(n, "table:shop.orders")] == {}
               for n in CASSANDRA)


def test_cli_bad_resource_file_exits_2_before_asking_any_node(tmp_path, monkeypatch,
                                                             capsys) -> None:
    import planner.workload.collect

    def never(*_: object, **__: object) -> CollectResult:
        raise AssertionError("a node was asked despite a bad --resources file")

    monkeypatch.setattr(planner.workload.collect, "collect", never)
    path = tmp_path / "r.json"
    shutil.copy(fixture("cassandra_round1"), path)
    path.write_text(path.read_text().replace('"read_ios": 8455', '"read_ios": -8455'))
    rc = main(["collect", "--engine", "cassandra", "--hosts", ",".join(
        f"{n}=127.0.0.{i}" for i, n in enumerate(CASSANDRA, start=1)), "--store",
        str(tmp_path / "k.db"), "--resources", str(path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (f"kairos collect: error: --resources file {path}: cass1.usage.read_ios: "
                   "-8455 is out of range: must be >= 0\n")
