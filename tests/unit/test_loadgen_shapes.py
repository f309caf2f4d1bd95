"""kairos load --shape (issue 41 part 2): the shapes' key and command choice, their
validation, the eviction accounting of the read-back, and the Redis worker's shaped
operations against an in-memory stand-in for the cluster client."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

from planner.cli import build_parser
from planner.commands.load import config_from_args, format_result
from planner.errors import ValidationError
from planner.loadgen import (
    DEFAULT_MIX,
    SHAPES,
    LoadConfig,
    ShapeChooser,
    WorkerStats,
    _RedisWorker,
    aggregate,
    hash_fields,
)
from planner.loadgen.clients import EvictionMeter
from planner.loadgen.shapes import (
    BURST_PERIOD,
    BURST_SECONDS,
    BURST_VALUE_SIZE,
    HASH_FIELDS,
    HMGET_FIELDS,
    HMGET_SHARE,
    HSET_MAX_FIELDS,
    MARKER_FIELD,
    in_burst,
)


def chooser(shape: str, *, slot: int = 2, writers: int = 8, keys: int = 10_000,
            max_keys: int = 20_000, distribution: str = "zipfian",
            scan_length: int = 10) -> ShapeChooser:
    return ShapeChooser(shape, slot=slot, writers=writers, keys=keys, max_keys=max_keys,
                        distribution=distribution, scan_length=scan_length)


# ----------------------------------------------------------------- key choice
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_key_a_shape_touches_is_the_writers_own(shape: str) -> None:
    rng = random.Random(1)
    c = chooser(shape)
    for i in range(3000):
        op = c.next(("read", "write", "other")[i % 3], rng, elapsed=i * 0.01)
        for key in (op.key, *op.keys):
            assert key % 8 == 2, (shape, op)
            assert 0 <= key < 20_000
        if op.kind != "burst" and op.kind != "scan":
            assert key < 10_000, op  # the hot keys


def test_cache_hot_reads_are_skewed_like_the_zipf_law() -> None:
    rng = random.Random(3)
    c = chooser("cache-hot", slot=0, writers=4, keys=40_000)
    draws = Counter(c.next("read", rng).key for _ in range(100_000))
    owned = 10_000
    top = draws.most_common(1)[0][1] / 100_000
    zeta = float(np.sum(np.arange(1, owned + 1, dtype=float) ** -0.99))
    assert top == pytest.approx(1 / zeta, rel=0.1)
    uniform = chooser("cache-hot", slot=0, writers=4, keys=40_000, distribution="uniform")
    flat = Counter(uniform.next("read", rng).key for _ in range(100_000))
    # The hottest 1 % of the keys: most of a zipfian load, about 1 % of a uniform one.
    hot = sum(n for _, n in draws.most_common(owned // 100)) / 100_000
    assert hot > 0.4 and sum(n for _, n in flat.most_common(owned // 100)) / 100_000 < 0.05


def test_cache_scan_reads_consecutive_cold_keys_and_wraps() -> None:
    rng = random.Random(5)
    c = chooser("cache-scan", slot=1, writers=4, keys=100, max_keys=140, scan_length=3)
    cold = [k for k in range(100, 140) if k % 4 == 1]
    seen: list[int] = []
    for _ in range(8):
        op = c.next("other", rng)
        assert op.kind == "scan" and op.cls == "other" and len(op.keys) == 3
        seen.extend(op.keys)
    start = cold.index(seen[0])  # a random start, then in order
    assert seen == [cold[(start + i) % len(cold)] for i in range(24)]
    starts = {chooser("cache-scan", slot=1, writers=4, keys=100, max_keys=140)
              .next("other", random.Random(s)).key for s in range(40)}
    assert len(starts) > 3
    assert {c.next("read", rng).kind, c.next("write", rng).kind} == {"get", "set"}


def test_cache_hot_classes_map_to_get_set_and_eval() -> None:
    rng = random.Random(2)
    c = chooser("cache-hot")
    assert [c.next(cls, rng).kind for cls in ("read", "write", "other")] == ["get", "set", "eval"]
    assert [c.next(cls, rng).cls for cls in ("read", "write", "other")] == [
        "read", "write", "other"]


def test_hash_shapes_read_and_write_fields_of_the_hash() -> None:
    rng = random.Random(9)
    c = chooser("hash-read", keys=2_000, max_keys=2_000)
    kinds: Counter[str] = Counter()
    for _ in range(4000):
        op = c.next("read", rng)
        kinds[op.kind] += 1
        assert op.fields and max(op.fields) < hash_fields(op.key)
        assert len(op.fields) == (HMGET_FIELDS if op.kind == "hmget" else 1)
        w = c.next("write", rng)
        assert w.kind == "hset" and 1 <= len(w.fields) <= HSET_MAX_FIELDS
        assert len(set(w.fields)) == len(w.fields) and max(w.fields) < hash_fields(w.key)
    assert set(kinds) == {"hget", "hmget"}
    assert kinds["hmget"] / 4000 == pytest.approx(HMGET_SHARE, abs=0.03)
    assert c.next("other", rng).kind == "hgetall"


def test_hash_sizes_straddle_the_listpack_entry_threshold() -> None:
    sizes = [hash_fields(k) for k in range(2000)]
    assert min(sizes) >= HASH_FIELDS[0] and max(sizes) <= HASH_FIELDS[1]
    # Redis' default hash-max-listpack-entries is 512 (the marker field adds one): about
    # half the hashes under it, half over; redis.conf's example 128 puts them all over.
    under = sum(s + 1 <= 512 for s in sizes) / len(sizes)
    assert 0.35 < under < 0.65 and min(sizes) + 1 > 128
    assert len(set(sizes)) > 300


def test_evict_burst_writes_large_cold_keys_only_in_its_bursts() -> None:
    rng = random.Random(4)
    c = chooser("evict-burst", slot=0, writers=2, keys=100, max_keys=110)
    assert in_burst(0.0) and in_burst(BURST_SECONDS - 0.01) and not in_burst(BURST_SECONDS)
    assert in_burst(BURST_PERIOD + 0.5) and BURST_VALUE_SIZE > 32 * 1024
    inside = [c.next(cls, rng, elapsed=0.5) for cls in ("read", "write", "other")]
    assert all(op.kind == "burst" and op.cls == "write" for op in inside)
    burst = [k for k in range(100, 110) if k % 2 == 0]
    first = burst.index(inside[0].key)
    assert [op.key for op in inside] == [burst[(first + i) % 5] for i in range(3)]
    outside = c.next("read", rng, elapsed=BURST_SECONDS + 1)
    assert outside.kind == "get" and outside.key < 100


# ----------------------------------------------------------------- validation
def test_shape_validation_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"^shape: unknown 'cache-cold'; known: cache-hot"):
        LoadConfig(engine="redis", shape="cache-cold")
    with pytest.raises(ValidationError, match=r"^shape: 'cache-hot' is a Redis shape"):
        LoadConfig(engine="cassandra", shape="cache-hot")
    with pytest.raises(ValidationError, match=r"^max_keys: shape cache-scan .* >= keys \+ "
                       r"writers \(108\), got 100"):
        LoadConfig(engine="redis", shape="cache-scan", keys=100, max_keys=100, concurrency=8)
    assert LoadConfig(engine="redis", shape="cache-scan", keys=100, max_keys=108,
                      concurrency=8).max_keys == 108
    assert LoadConfig(engine="redis", shape="hash-read", keys=100, max_keys=100).keys == 100


def test_a_shape_sets_the_default_mix_and_a_given_mix_wins() -> None:
    for name, spec in SHAPES.items():
        mix = LoadConfig(engine="redis", shape=name).mix
        assert mix is not None
        assert {c: f for c, f in mix.items() if f} == pytest.approx(spec.mix)
    assert LoadConfig(engine="redis", shape="cache-hot", mix="read=1").mix == {
        "read": 1.0, "write": 0.0, "other": 0.0}
    assert {c: f for c, f in (LoadConfig(engine="redis").mix or {}).items() if f} == (
        DEFAULT_MIX["redis"])
    assert LoadConfig(engine="redis").shape is None


def test_cli_takes_the_shapes_defaults_unless_given() -> None:
    def cfg(*extra: str) -> LoadConfig:
        args = build_parser().parse_args(["load", "--engine", "redis", *extra])
        return config_from_args(args)

    plain = cfg()
    assert (plain.shape, plain.keys, plain.value_size) == (None, 10_000, 100)
    for name, spec in SHAPES.items():
        shaped = cfg("--shape", name)
        assert (shaped.shape, shaped.keys, shaped.value_size) == (name, spec.keys,
                                                                   spec.value_size)
    assert cfg("--shape", "hash-read", "--keys", "50", "--value-size", "70").keys == 50
    with pytest.raises(SystemExit):
        build_parser().parse_args(["load", "--engine", "redis", "--shape", "nope"])


# --------------------------------------------------------- eviction accounting
def _payload(**extra: Any) -> dict[str, Any]:
    p = WorkerStats(("read", "write", "other")).payload()
    p.update(verified=True, **extra)
    return p


def test_missing_keys_are_put_down_to_eviction_only_up_to_the_measured_count() -> None:
    cfg = LoadConfig(engine="redis", shape="cache-hot", keys=100, max_keys=200)
    two = [_payload(lost={"missing": 5, "stale": 1}, evicted_keys=3),
           _payload(lost={"missing": 2}, evicted_keys=1)]
    r = aggregate(cfg, two, seconds=1)
    # 7 missing, the larger window saw 3 evictions: 3 covered, 4 missing + 1 stale lost.
    assert (r.evicted_keys, r.missing_evicted) == (3, 3)
    assert r.lost_by_kind == {"missing": 4, "stale": 1} and r.lost_acknowledged_writes == 5
    plenty = aggregate(cfg, [_payload(lost={"missing": 5, "stale": 1}, evicted_keys=50)],
                       seconds=1)
    assert plenty.lost_by_kind == {"stale": 1} and plenty.missing_evicted == 5
    unread = aggregate(cfg, [_payload(lost={"missing": 5}, evicted_keys=9),
                             _payload(lost={}, evicted_keys=None)], seconds=1)
    assert unread.evicted_keys is None and unread.lost_by_kind == {"missing": 5}
    plain = aggregate(LoadConfig(engine="redis", keys=100),
                      [_payload(lost={"missing": 5}, evicted_keys=9)], seconds=1)
    assert plain.evicted_keys is None and plain.lost_acknowledged_writes == 5
    text = format_result(unread)
    assert "not measured" in text and "every missing key counts as lost" in text


def test_hits_and_misses_are_merged_per_class() -> None:
    cfg = LoadConfig(engine="redis", shape="cache-scan", keys=100, max_keys=200)
    a = _payload(hits={"read": 30}, misses={"read": 10, "other": 5}, evicted_keys=0)
    b = _payload(hits={"read": 10, "other": 5}, misses={"read": 10}, evicted_keys=0)
    r = aggregate(cfg, [a, b], seconds=1)
    assert r.hits_by_class == {"read": 40, "other": 5}
    assert r.hit_ratio("read") == pytest.approx(40 / 60) and r.hit_ratio("other") == 0.5
    assert r.hit_ratio() == pytest.approx(45 / 70) and r.hit_ratio("write") is None
    d = r.to_dict()
    assert d["hit_ratio_by_class"] == {"other": 0.5, "read": pytest.approx(0.6667)}
    assert "hits read       40 of 60 lookups (66.7 %)" in format_result(r)


# ------------------------------------------- the worker, on an in-memory cluster
class _Pipe:
    def __init__(self, store: dict[str, Any]) -> None:
        self.store = store
        self.results: list[Any] = []

    def set(self, name: str, value: str) -> None:
        self.store[name] = value

    def hset(self, name: str, mapping: dict[str, str]) -> None:
        self.store.setdefault(name, {}).update(mapping)

    def hget(self, name: str, field: str) -> None:
        self.results.append(self.store.get(name, {}).get(field))

    def execute(self) -> list[Any]:
        out, self.results = self.results, []
        return out


class _FakeCluster:
    """The commands the shaped worker sends, on a dict (strings and hashes)."""

    def __init__(self) -> None:
        self.store: dict[str, Any] = {}
        self.sent: Counter[str] = Counter()

    def get(self, name: str) -> Any:
        self.sent["GET"] += 1
        return self.store.get(name)

    def mget_nonatomic(self, names: list[str]) -> list[Any]:
        self.sent["MGET"] += 1
        return [self.store.get(n) for n in names]

    def eval(self, *_args: Any) -> int:
        self.sent["EVAL"] += 1
        return 1

    def hget(self, name: str, field: str) -> Any:
        self.sent["HGET"] += 1
        return self.store.get(name, {}).get(field)

    def hmget(self, name: str, fields: list[str]) -> list[Any]:
        self.sent["HMGET"] += 1
        return [self.store.get(name, {}).get(f) for f in fields]

    def hgetall(self, name: str) -> dict[str, str]:
        self.sent["HGETALL"] += 1
        return dict(self.store.get(name, {}))

    def pipeline(self) -> _Pipe:
        return _Pipe(self.store)


def _worker(shape: str, **options: Any) -> tuple[_RedisWorker, _FakeCluster]:
    cfg = LoadConfig(engine="redis", shape=shape, concurrency=2, seed=11, **options)
    worker = _RedisWorker(cfg, 0, "t1", threading.Event())
    fake = _FakeCluster()
    worker.rc = fake

    def acked_write(name: str, queue: Any) -> bool:
        fake.sent["WRITE+WAIT"] += 1
        queue(_Pipe(fake.store), name)
        return True

    worker.acked_write = acked_write  # type: ignore[method-assign]
    worker.read_evictions = lambda: None  # type: ignore[method-assign]
    worker.meter = EvictionMeter()
    worker.meter.readings = 2  # what connect() and the end read: nothing evicted
    return worker, fake


def test_a_cache_miss_is_filled_and_the_fill_is_verified() -> None:
    worker, fake = _worker("cache-scan", keys=200, max_keys=400, scan_length=4)
    for i in range(600):
        worker._one(i % 2, ("read", "write", "other")[i % 3], None)
    payload = worker.payload()
    lookups = payload["hits"].get("read", 0) + payload["misses"]["read"]
    assert lookups == payload["ops"]["read"] == fake.sent["GET"]
    assert payload["misses"]["other"] + payload["hits"].get("other", 0) == 4 * fake.sent["MGET"]
    # Every miss was filled, and every write (fill or SET) acknowledged and logged.
    misses = payload["misses"]["read"] + payload["misses"]["other"]
    sets = payload["ops"]["write"] - misses
    assert sets > 0 and fake.sent["WRITE+WAIT"] == payload["ops"]["write"]
    assert payload["acknowledged"] == payload["ops"]["write"]
    assert worker.verify()["lost"] == {}
    # A read of a filled key hits; the read-back sees a deleted key and an older value.
    acked = sorted(k for w in worker.writers for k, _ in w.acks.items())
    del fake.store[f"{worker.config.prefix}:{acked[0]}"]
    w1 = worker.writers[acked[1] % 2]
    fake.store[f"{worker.config.prefix}:{acked[1]}"] = f"t1.{w1.slot}.0.old"
    result = worker.verify()
    assert result["lost"] == {"missing": 1, "stale": 1}
    assert result["verified_keys"] == len(acked) and worker.evictions() == {"evicted_keys": 0}


def test_hash_writes_set_the_marker_in_the_same_command_and_are_verified() -> None:
    worker, fake = _worker("hash-write", keys=20, max_keys=20)
    for i in range(300):
        worker._one(i % 2, ("read", "write")[i % 2], None)
    payload = worker.payload()
    assert fake.sent["HGET"] + fake.sent["HMGET"] == payload["ops"]["read"]
    hashes = {int(k.rsplit(":", 1)[1]): v for k, v in fake.store.items()
              if k.startswith("kairos_load:h:")}
    assert hashes and all(MARKER_FIELD in h for h in hashes.values())
    # A read that missed filled its whole hash: every field, and the marker.
    full = [k for k, h in hashes.items() if len(h) == hash_fields(k) + 1]
    assert full and payload["misses"]["read"] > 0
    assert all(set(h) <= {f"f{i}" for i in range(hash_fields(k))} | {MARKER_FIELD}
               for k, h in hashes.items())
    assert worker.verify()["lost"] == {}
    name = next(k for k in fake.store if k.startswith("kairos_load:h:"))
    fake.store[name][MARKER_FIELD] = "other-run.0.99.x"
    assert worker.verify()["lost"] == {"foreign": 1}


def test_evictions_are_counted_on_every_node_through_failovers_and_restarts() -> None:
    def node(run_id: str, evicted: int) -> dict[str, Any]:
        return {"run_id": run_id, "evicted_keys": evicted}

    meter = EvictionMeter()
    meter.add({"a:1": node("A", 10), "b:2": node("B", 0)})
    assert meter.total == 0  # the first reading is the baseline
    # a evicts 5 more, then fails over (a replica now: it evicts nothing), b evicts 3
    meter.add({"a:1": node("A", 15), "b:2": node("B", 3)})
    # a restarts (a new run id, its counter from 0) and, a primary again, evicts 4; b is down
    meter.add({"a:1": node("A2", 4)})
    # a new run id whose count is above the old one is still a restart: its whole count
    meter.add({"a:1": node("A3", 20), "b:2": node("B", 7)})
    assert meter.total == 5 + 3 + 4 + 20 + 4 and meter.readings == 4


def test_a_worker_reads_every_node_and_an_unreadable_count_is_unknown() -> None:
    worker, _fake = _worker("cache-hot", keys=100)
    del worker.read_evictions  # the real method again (the helper stubbed it)
    worker.meter = EvictionMeter()

    class Node:
        def __init__(self, name: str) -> None:
            self.name = name

    class Info:
        def __init__(self, replies: dict[str, Any]) -> None:
            self.replies = replies

        def get_nodes(self) -> list[Node]:
            return [Node(n) for n in self.replies]

        def info(self, *sections: str, target_nodes: Any = None) -> Any:
            assert sections == ("server", "stats")
            reply = self.replies[target_nodes.name]
            if isinstance(reply, Exception):
                raise reply
            return reply

    worker.rc = Info({"n1": {"run_id": "x", "evicted_keys": 3},
                      "n2": {"n2": {"run_id": "y", "evicted_keys": 4}}})  # either reply shape
    worker.read_evictions()
    worker.rc = Info({"n1": {"run_id": "x", "evicted_keys": 5},
                      "n2": ConnectionError("restarting")})  # read again next time
    assert worker.evictions() == {"evicted_keys": 2}
    worker.rc = Info({"n1": PermissionError("NOPERM this user has no permissions to run 'info'"),
                      "n2": {"run_id": "y", "evicted_keys": 4}})
    assert worker.evictions() == {"evicted_keys": None}
    worker.meter = EvictionMeter()
    worker.rc = Info({"n1": {"keyspace_hits": 1}})
    assert worker.evictions() == {"evicted_keys": None}


def test_a_wait_a_failover_ends_is_written_again_and_other_error_replies_fail() -> None:
    from redis.exceptions import ResponseError

    worker = _RedisWorker(LoadConfig(engine="redis", concurrency=1, seed=1), 0, "t1",
                          threading.Event())
    calls: list[tuple[Any, ...]] = []
    replies: list[Any] = [ResponseError("UNBLOCKED force unblock from blocking operation, "
                                        "instance state changed (master -> replica?)"),
                          ["OK", 1]]

    class Pipe:
        def execute_command(self, *args: Any) -> None:
            calls.append(args)

        def execute(self) -> Any:
            reply = replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return reply

    class Cluster:
        class nodes_manager:
            @staticmethod
            def initialize() -> None:
                calls.append(("refresh",))

        def get_node_from_key(self, name: str) -> str:
            return "node"

        def get_redis_connection(self, node: str) -> Any:
            return type("Conn", (), {"pipeline": lambda self, transaction: Pipe()})()

    worker.rc = Cluster()

    def write(pipe: Any, name: str) -> None:
        pipe.execute_command("SET", name, "v")

    assert worker.acked_write("k", write)
    assert [c[0] for c in calls] == ["SET", "WAIT", "refresh", "SET", "WAIT"]
    # The WAIT that reaches the primary just after it turned replica (the SET before it done).
    calls.clear()
    replies[:] = [ResponseError("WAIT cannot be used with replica instances. Please also note "
                                "that since Redis 4.0 if a replica is configured to be "
                                "writable (which is not the default) writes to replicas are "
                                "just local and are not propagated."), ["OK", 1]]
    assert worker.acked_write("k", write)
    assert [c[0] for c in calls] == ["SET", "WAIT", "refresh", "SET", "WAIT"]
    replies[:] = [ResponseError("WRONGTYPE Operation against a key holding the wrong kind")]
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        worker.acked_write("k", write)


def test_the_result_says_what_the_first_failures_of_each_kind_said() -> None:
    stats = WorkerStats(("read", "write"))
    for _ in range(5):
        stats.failure("write", ValueError("UNBLOCKED force unblock"))
    stats.failure("read", KeyError("gone"))
    payload = stats.payload()
    assert payload["failure_messages"] == {"ValueError": ["UNBLOCKED force unblock"],
                                           "KeyError": ["'gone'"]}
    result = aggregate(LoadConfig(engine="redis"), [payload], seconds=1.0)
    text = format_result(result)
    assert "  ValueError: UNBLOCKED force unblock" in text and "  KeyError: 'gone'" in text
    assert text.index("failures          6") < text.index("ValueError: UNBLOCKED")
