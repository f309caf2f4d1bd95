"""The workload store: synthetic counter sequences, restarts and resets."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ValidationError
from planner.workload.series import save_trace
from planner.workload.store import (
    CounterSample,
    Store,
    StoreError,
    default_path,
    node_intervals,
    to_classes,
)


def cass(node: str, ts: float, read: int, write: int, scan: int = 0, *,
         gen: float = 0.0, scope: str = "node") -> CounterSample:
    return CounterSample(node, scope, ts, {"read": read, "write": write, "scan": scan},
                         started_at=gen, instance=f"{node}-id:{gen:.0f}")


def redis(node: str, ts: float, read: int, write: int, other: int = 0, *, run_id: str = "a",
          uptime: float | None = None, role: str = "master", ignored: int = 0) -> CounterSample:
    started = None if uptime is None else ts - uptime
    return CounterSample(node, "node", ts,
                         {"read": read, "write": write, "other": other, "ignored": ignored},
                         started_at=started, instance=run_id, role=role)


@pytest.fixture
def store() -> Store:
    return Store(":memory:")


def steady(store: Store, rounds: int = 5, *, nodes: tuple[str, ...] = ("c1", "c2", "c3"),
           step: float = 10.0) -> None:
    """Each node serves 30 reads/s, 10 writes/s, 0 scans; rounds every ``step`` s."""
    for r in range(rounds):
        t = 1000.0 + r * step
        store.append_counters(
            "cassandra", "lab",
            [cass(n, t + 0.1 * i, int(30 * (t - 1000)), int(10 * (t - 1000)))
             for i, n in enumerate(nodes)],
            round_ts=t,
        )


def test_steady_rates_and_mix(store: Store) -> None:
    steady(store)
    s = store.cluster_series("cassandra", "lab")
    assert s.engine == "cassandra" and len(s) == 4
    assert s.step_seconds == pytest.approx(10.0)
    np.testing.assert_allclose(s.load, 120.0, rtol=0.02)
    np.testing.assert_allclose(s.mix["read"], 0.75, atol=1e-3)
    np.testing.assert_allclose(s.mix["update"], 0.25, atol=1e-3)
    np.testing.assert_allclose(s.mix["insert"], 0.0)
    np.testing.assert_allclose(s.timestamps, [1000, 1010, 1020, 1030])


def test_insert_fraction_splits_writes(store: Store) -> None:
    steady(store)
    s = store.cluster_series("cassandra", "lab", insert_fraction=0.4)
    np.testing.assert_allclose(s.mix["insert"], 0.1, atol=1e-3)
    np.testing.assert_allclose(s.mix["update"], 0.15, atol=1e-3)
    with pytest.raises(ValidationError, match="insert_fraction"):
        to_classes("cassandra", {"write": 1}, insert_fraction=1.5)


def test_regular_grid_and_since(store: Store) -> None:
    steady(store, rounds=7)
    s = store.cluster_series("cassandra", "lab", step_seconds=20.0)
    assert s.step_seconds == 20.0
    np.testing.assert_allclose(s.load, 120.0, rtol=0.02)
    later = store.cluster_series("cassandra", "lab", since=1020.0)
    assert later.timestamps[0] == 1020.0 and len(later) == 4


def test_counter_reset_without_restart_is_dropped_not_negative(store: Store) -> None:
    """Redis CONFIG RESETSTAT: counters fall to ~0, same run_id -> that interval is left out."""
    seq = [(0, 0, 0), (10, 1000, 500), (20, 2000, 1000), (30, 40, 20), (40, 1040, 520),
           (50, 2040, 1020)]
    for t, r, w in seq:
        store.append_counters("redis", "lab", [
            redis("m1", 1000 + t, r, w, uptime=500 + t),
            redis("m2", 1000 + t + 0.05, 100 * t, 50 * t, uptime=900 + t, run_id="b"),
        ], round_ts=1000 + t)
    d = store.derive("redis", "lab")
    assert [x.reason for x in d.dropped] == [
        "counter node/read went down (2000 -> 40) without a restart"
    ]
    s = d.series
    assert s is not None
    assert s.step_seconds is None  # a gap where the reset was
    assert 1020.0 not in s.timestamps.tolist()
    assert np.all(s.load > 0)
    np.testing.assert_allclose(s.load, 300.0, rtol=0.02)  # 2 nodes x (100 + 50)/s, no spike
    np.testing.assert_allclose(s.mix["read"], 2 / 3, atol=1e-3)


def test_restart_with_known_start_time_counts_since_restart() -> None:
    samples = [
        redis("m1", 1000, 0, 0, run_id="a", uptime=100),
        redis("m1", 1010, 1000, 0, run_id="a", uptime=110),
        # restarted at 1016: 4 s since then at 100 reads/s
        redis("m1", 1020, 400, 0, run_id="b", uptime=4),
    ]
    good, dropped = node_intervals("redis", samples)
    assert not dropped
    assert [iv.kind for iv in good] == ["delta", "restart"]
    assert good[1].ops["read"] == 400  # what it served since the restart, not 400 - 1000


def test_restart_detected_even_when_counters_grew_past_old_value() -> None:
    """A restart with more calls since than before must not be read as a plain delta."""
    samples = [cass("c1", 1000, 500, 0, gen=900), cass("c1", 1010, 800, 0, gen=1005)]
    good, _ = node_intervals("cassandra", samples)
    assert good[0].kind == "restart" and good[0].ops["read"] == 800


def test_restart_with_unknown_or_outside_start_time_is_dropped() -> None:
    unknown = [
        CounterSample("m1", "node", 1000, {"read": 10}, instance="a", role="master"),
        CounterSample("m1", "node", 1010, {"read": 3}, instance="b", role="master"),
    ]
    good, dropped = node_intervals("redis", unknown)
    assert not good and "start time unknown" in dropped[0].reason
    outside = [cass("c1", 1000, 500, 0, gen=900), cass("c1", 1010, 20, 0, gen=1500)]
    good, dropped = node_intervals("cassandra", outside)
    assert not good and "outside the interval" in dropped[0].reason


def test_restart_of_one_node_in_cluster_series(store: Store) -> None:
    """c2 restarts between rounds 2 and 3 (known generation): no negative or spiked rate."""
    for r in range(6):
        t = 1000.0 + 10 * r
        rows = []
        for i, n in enumerate(("c1", "c2", "c3")):
            since, gen = (1025.0, 1025.0) if n == "c2" and r >= 3 else (1000.0, 0.0)
            rows.append(cass(n, t + 0.01 * i, int(40 * (t - since)), 0, gen=gen))
        store.append_counters("cassandra", "lab", rows, round_ts=t)
    d = store.derive("cassandra", "lab")
    assert not d.dropped
    s = d.series
    assert s is not None and len(s) == 5
    assert np.all(s.load >= 0)
    assert s.load.max() <= 120.0 * 1.02
    # the restart interval counts c2's 5 s of service over 10 s: 40 + 20 + 40 reads/s
    np.testing.assert_allclose(s.load[2], 100.0, rtol=0.02)


def test_table_dropped_and_recreated_drops_the_interval() -> None:
    a = [cass("c1", 1000, 100, 50, scope="table:ks.t"), cass("c1", 1000, 5, 5, scope="table:ks.u")]
    b = [cass("c1", 1010, 3, 1, scope="table:ks.t"), cass("c1", 1010, 15, 15, scope="table:ks.u")]
    good, dropped = node_intervals("cassandra", a + b)
    assert not good and "table:ks.t/read went down" in dropped[0].reason


def test_new_table_counts_whole_value() -> None:
    a = [cass("c1", 1000, 100, 0, scope="table:ks.t")]
    b = [cass("c1", 1010, 150, 0, scope="table:ks.t"), cass("c1", 1010, 7, 3, scope="table:ks.n")]
    good, _ = node_intervals("cassandra", a + b)
    assert good[0].ops["read"] == 57 and good[0].ops["update"] == 3


def test_per_table_series_of_an_older_store_with_the_tables_alone(store: Store) -> None:
    """``collect --per-table`` before it kept the node's sample too: the cluster is the sum
    of the tables, as it was."""
    for r in range(3):
        t = 1000.0 + 10 * r
        store.append_counters("cassandra", "lab", [
            cass("c1", t, 10 * r * 10, 0, scope="table:ks.a"),
            cass("c1", t, 0, 5 * r * 10, scope="table:ks.b"),
        ], round_ts=t)
    whole = store.cluster_series("cassandra", "lab")
    np.testing.assert_allclose(whole.load, 15.0)
    b = store.cluster_series("cassandra", "lab", table="ks.b")
    assert b.scope == "table:ks.b"
    np.testing.assert_allclose(b.load, 5.0)
    np.testing.assert_allclose(b.mix["update"], 1.0)


def per_table_round(node: str, t: float, tables: dict[str, tuple[int, int]], *,
                    gen: float = 0.0, with_node: bool = True) -> list[CounterSample]:
    """One node's round as ``collect --per-table`` keeps it: the node's own sample (the sum
    of its tables, unless ``with_node`` is false: an older store) and one per table."""
    out = [cass(node, t, r, w, gen=gen, scope=f"table:{name}")
           for name, (r, w) in tables.items()]
    if with_node:
        out.append(cass(node, t, sum(r for r, _ in tables.values()),
                        sum(w for _, w in tables.values()), gen=gen))
    return out


def test_the_node_s_sample_beside_its_tables_is_counted_once(store: Store) -> None:
    # Two nodes, each 10 reads/s on ks.a and 5 writes/s on ks.b: the cluster serves 30
    # ops/s. Summing every scope would give 60.
    for r in range(4):
        t = 1000.0 + 10 * r
        store.append_counters("cassandra", "lab", [
            x for i, n in enumerate(("c1", "c2"))
            for x in per_table_round(n, t + 0.1 * i, {"ks.a": (100 * r, 0), "ks.b": (0, 50 * r)})
        ], round_ts=t)
    d = store.derive("cassandra", "lab")
    assert d.series is not None and not d.dropped
    np.testing.assert_allclose(d.series.load, 30.0, rtol=1e-6)
    np.testing.assert_allclose(d.series.mix["read"], 2 / 3, atol=1e-6)
    assert [iv.ops["read"] for iv in d.intervals if iv.node == "c1"] == [100.0] * 3
    a = store.cluster_series("cassandra", "lab", table="ks.a")
    b = store.cluster_series("cassandra", "lab", table="ks.b")
    np.testing.assert_allclose(a.load, 20.0, rtol=1e-6)
    np.testing.assert_allclose(b.load, 10.0, rtol=1e-6)
    np.testing.assert_allclose(a.load + b.load, d.series.load)  # the tables make the whole


def test_a_restart_with_the_tables_beside_counts_the_node_once(store: Store) -> None:
    store.append_counters("cassandra", "lab",
                          per_table_round("c1", 1000.0, {"ks.a": (500, 0), "ks.b": (0, 500)}),
                          round_ts=1000.0)
    # Restarted at 1005: since then 40 reads and 20 writes, counted once (not 120).
    store.append_counters("cassandra", "lab",
                          per_table_round("c1", 1010.0, {"ks.a": (40, 0), "ks.b": (0, 20)},
                                          gen=1005.0), round_ts=1010.0)
    [iv] = store.derive("cassandra", "lab").intervals
    assert iv.kind == "restart"
    assert (iv.ops["read"], iv.ops["update"]) == (40.0, 20.0)


def test_an_older_store_s_table_rounds_then_rounds_with_the_node_s_sample(
        store: Store) -> None:
    """The store of a ``collect --per-table`` that kept the tables alone, collected on by
    one that keeps the node's sample too: the interval between them counts the tables
    (the only counters both ends have), with no spike and nothing dropped."""
    for r in range(5):
        t = 1000.0 + 10 * r
        store.append_counters("cassandra", "lab", per_table_round(
            "c1", t, {"ks.a": (100 * r, 0), "ks.b": (0, 50 * r)}, with_node=r >= 2),
            round_ts=t)
    d = store.derive("cassandra", "lab")
    assert d.series is not None and not d.dropped
    np.testing.assert_allclose(d.series.load, 15.0, rtol=1e-6)


def test_rounds_with_no_counters_in_common_are_dropped_not_spiked(store: Store) -> None:
    # The node's sample alone (collect without --per-table), then the tables alone (an
    # older --per-table): the first tables' counts are every request since the start.
    store.append_counters("cassandra", "lab", [cass("c1", 1000.0, 100, 50)], round_ts=1000.0)
    store.append_counters("cassandra", "lab", per_table_round(
        "c1", 1010.0, {"ks.a": (200, 0), "ks.b": (0, 100)}, with_node=False), round_ts=1010.0)
    d = store.derive("cassandra", "lab")
    assert not d.intervals
    assert [x.reason for x in d.dropped] == [
        "no counters in common: scopes node -> 2 table(s)"]


def test_node_gauges_are_the_node_s_sample_s_not_its_tables(store: Store) -> None:
    for r in range(2):
        t = 1000.0 + 10 * r
        rows = per_table_round("c1", t, {"ks.a": (100 * r, 0), "ks.b": (0, 50 * r)})
        rows = [CounterSample(x.node, x.scope, x.ts, x.counters, x.started_at, x.instance,
                              gauges={"p99_ms_read": 7.0 if x.scope == "node" else 3.0,
                                      **({"pending_tasks": 2.0} if x.scope == "node" else {})})
                for x in rows]
        store.append_counters("cassandra", "lab", rows, round_ts=t)
    assert [(g.node, g.values) for g in store.node_gauges("cassandra", "lab")] == [
        ("c1", {"p99_ms_read": 7.0, "pending_tasks": 2.0})] * 2
    assert [g.values["pending_tasks"] for g in store.gauge_rounds("cassandra", "lab")] == [
        2.0, 2.0]  # once per node and round, not once per scope


def test_redis_replicas_count_reads_only_and_failover_is_dropped(store: Store) -> None:
    for r in range(4):
        t = 1000.0 + 10 * r
        role_m2 = "replica" if r < 2 else "master"
        store.append_counters("redis", "lab", [
            redis("m1", t, 100 * r * 10, 50 * r * 10, 10 * r * 10, uptime=t - 500,
                  ignored=999 * r),
            # replica: replicated writes counted by Redis, reads from READONLY clients
            redis("r1", t + 0.02, 20 * r * 10, 50 * r * 10, 5 * r * 10, uptime=t - 500,
                  role=role_m2, run_id="r"),
        ], round_ts=t)
    d = store.derive("redis", "lab")
    assert [x.reason for x in d.dropped] == ["role changed (replica -> master)"]
    s = d.series
    assert s is not None
    # first bin: master 160 ops/s + replica 20 reads/s; the failover bin is left out
    assert s.timestamps.tolist() == [1000.0, 1020.0]
    np.testing.assert_allclose(s.load[0], 180.0, rtol=0.01)
    np.testing.assert_allclose(s.mix["read"][0], 120 / 180, atol=1e-3)
    np.testing.assert_allclose(s.mix["other"][0], 10 / 180, atol=1e-3)
    # after the failover both are masters: everything counts
    np.testing.assert_allclose(s.load[1], 160 + 75, rtol=0.01)


def test_missing_round_for_one_node_spreads_its_ops(store: Store) -> None:
    """A node that did not answer one round: its longer interval covers both bins."""
    for r in range(4):
        t = 1000.0 + 10 * r
        rows = [cass("c1", t, int(20 * (t - 1000)), 0)]
        if r != 2:
            rows.append(cass("c2", t, int(20 * (t - 1000)), 0))
        store.append_counters("cassandra", "lab", rows, round_ts=t)
    s = store.cluster_series("cassandra", "lab")
    np.testing.assert_allclose(s.load, 40.0)


def test_idle_bin_keeps_previous_mix(store: Store) -> None:
    counts = [0, 100, 100, 200]
    for r, c in enumerate(counts):
        store.append_counters("cassandra", "lab", [cass("c1", 1000 + 10 * r, c, 0)],
                              round_ts=1000 + 10 * r)
    s = store.cluster_series("cassandra", "lab")
    assert s.load.tolist() == [10.0, 0.0, 10.0]
    assert s.mix["read"].tolist() == [1.0, 1.0, 1.0]


def test_too_few_rounds_says_so(store: Store) -> None:
    steady(store, rounds=2)
    with pytest.raises(ValidationError, match=r"fewer than 2 usable intervals \(2 collection"):
        store.cluster_series("cassandra", "lab")


def test_append_validates_and_is_idempotent(store: Store) -> None:
    rows = [cass("c1", 1000, 1, 1)]
    assert store.append_counters("cassandra", "lab", rows) == 1
    assert store.append_counters("cassandra", "lab", rows) == 0
    with pytest.raises(ValidationError, match="unknown cassandra counter 'gets'"):
        store.append_counters("cassandra", "lab", [CounterSample("c1", "node", 1, {"gets": 1})])
    with pytest.raises(ValidationError, match="non-negative integer"):
        store.append_counters("cassandra", "lab", [CounterSample("c1", "node", 1, {"read": -1})])
    with pytest.raises(ValidationError, match="unknown engine"):
        store.append_counters("mongo", "lab", rows)
    assert store.clusters() == [("cassandra", "lab")]


def test_file_store_round_trip_and_export(tmp_path, monkeypatch) -> None:
    path = tmp_path / "sub" / "k.db"
    with Store(path) as st:
        steady(st)
        assert st.refresh_cluster_samples("cassandra", "lab") == 4
    with Store(path) as st:
        cached = st.cached_cluster_samples("cassandra", "lab")
        assert len(cached) == 4 and cached[0][2]["read"] == pytest.approx(0.75, abs=1e-3)
        series = st.cluster_series("cassandra", "lab")
    out = tmp_path / "trace.csv"
    save_trace(series, out)
    from planner.workload.series import load_trace

    back = load_trace(out)
    np.testing.assert_allclose(back.load, series.load)
    monkeypatch.setenv("KAIROS_STORE", str(tmp_path / "env.db"))
    assert default_path() == tmp_path / "env.db"


def test_not_a_database(tmp_path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("this is not sqlite, " * 100)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        Store(bad)


def test_rollout_and_plan_history(store: Store) -> None:
    store.record_rollout("p.yml", "s1", {"cass1": {"drain": 5.0, "stop": 1.5}}, status="applied",
                         at=10.0)
    rows = store._db.execute("SELECT node, phase, seconds FROM rollout_events").fetchall()
    assert sorted(rows) == [("cass1", "drain", 5.0), ("cass1", "stop", 1.5)]


def test_a_bin_past_the_last_round_is_dropped_not_counted_on_the_nodes_read_last(
        store: Store) -> None:
    """The Redis demo's zero (a fresh-clone CI run, 2026-12-03): a round reads the six nodes
    0.1 s apart, and the last bin ended past the last round so that the 50 % coverage line
    fell between the nodes' reads. Only the replicas, read last, were expected there, and
    they count no writes and had no reads: the bin's load was 0 ops/s, which a naive
    forecast carried over the horizon. A node read in a round now counts as collected for
    the whole round: that bin is dropped, and every other bin keeps every node."""
    nodes = [("r1", "master"), ("r2", "master"), ("r3", "master"),
             ("r4", "replica"), ("r5", "replica"), ("r6", "replica")]
    # Rounds at 100, 110, 120 and 125.6: the last bin [120, 130) is covered from 125.6 +
    # 0.1 n on, so the 5-s line falls between the masters' reads and the replicas'.
    for k, start in enumerate((100.0, 110.0, 120.0, 124.55)):
        samples = [redis(node, start + 0.1 * n, read=100 * k if role == "master" else 0,
                         write=50 * k, role=role, run_id=node)
                   for n, (node, role) in enumerate(nodes)]
        store.append_counters("redis", "lab", samples, round_ts=start)
    derived = store.derive("redis", "lab", step_seconds=10.0)
    assert derived.series is not None
    assert list(derived.series.timestamps) == [100.0, 110.0]
    assert np.all(derived.series.load > 0), derived.series.load
    assert [(lo, hi) for lo, hi, _ in derived.dropped_bins] == [(120.0, 130.0)]
