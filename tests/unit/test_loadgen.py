"""The load generator's pure parts: distributions, mix, histogram, trace, ack log, results."""

from __future__ import annotations

import random
import threading
import zlib
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from planner.cli import build_parser
from planner.commands.load import config_from_args, format_result
from planner.errors import ValidationError
from planner.loadgen import (
    HIST_BUCKETS,
    AckLog,
    KeyChooser,
    LatencyHistogram,
    LoadConfig,
    OpMix,
    Pacer,
    TraceSchedule,
    WorkerStats,
    ZipfianGenerator,
    _Plan,
    _Writer,
    aggregate,
    check_value,
    default_verify_cl,
    fnv1a64,
    make_value,
    owned_key,
    parse_mix,
    split_host_port,
)
from planner.workload.series import WorkloadSeries


def zeta(n: int, theta: float = 0.99) -> float:
    return float(np.sum(np.arange(1, n + 1, dtype=float) ** -theta))


# ------------------------------------------------------------------ distributions
def test_zipfian_matches_the_zipf_law() -> None:
    rng = random.Random(7)
    gen = ZipfianGenerator(1000)
    draws = Counter(gen.next(rng) for _ in range(200_000))
    assert min(draws) >= 0 and max(draws) < 1000
    share0 = draws[0] / 200_000
    assert share0 == pytest.approx(1 / zeta(1000), rel=0.05)
    # P(0)/P(1) = 2**theta for the exact law.
    assert draws[0] / draws[1] == pytest.approx(2**0.99, rel=0.08)
    # Popularity decreases with rank.
    assert draws[0] > draws[1] > draws[10] > draws[500]


def test_zipfian_growth_extends_zeta_incrementally() -> None:
    gen = ZipfianGenerator(1000)
    gen.next(random.Random(1), 2500)
    assert gen.items == 2500
    assert gen.zetan == pytest.approx(zeta(2500), rel=1e-12)


def test_zipfian_draws_over_one_or_two_items_then_grows() -> None:
    # A writer slot may own two keys (keys=100 over 64 threads): that once divided by zero.
    rng = random.Random(3)
    for items in (1, 2):
        gen = ZipfianGenerator(items)
        draws = Counter(gen.next(rng) for _ in range(20_000))
        assert set(draws) == set(range(items))
    assert draws[0] / draws[1] == pytest.approx(2**0.99, rel=0.08)
    gen.next(rng, 1000)  # grows past two: the general law again
    assert gen.eta > 0 and gen.zetan == pytest.approx(zeta(1000), rel=1e-12)


def test_zipfian_rejects_bad_arguments() -> None:
    with pytest.raises(ValidationError, match="items"):
        ZipfianGenerator(0)
    with pytest.raises(ValidationError, match="theta"):
        ZipfianGenerator(10, theta=1.0)


def test_uniform_keys_pass_a_chi_square_test() -> None:
    rng = random.Random(11)
    chooser = KeyChooser("uniform", 100)
    counts = np.bincount([chooser.next(rng, 100) for _ in range(100_000)], minlength=100)
    assert stats.chisquare(counts).pvalue > 0.001


def test_scrambled_zipfian_spreads_the_hot_keys() -> None:
    rng = random.Random(3)
    chooser = KeyChooser("zipfian", 10_000)
    draws = Counter(chooser.next(rng, 10_000) for _ in range(100_000))
    top = [k for k, _ in draws.most_common(10)]
    # The hottest key carries about the Zipf share of rank 0 ...
    assert draws.most_common(1)[0][1] / 100_000 == pytest.approx(1 / zeta(10_000), rel=0.1)
    # ... and the hot keys are scattered over the key space, not 0..9.
    assert set(top) != set(range(10))
    assert max(top) - min(top) > 1000


def test_latest_prefers_the_newest_keys_and_follows_inserts() -> None:
    rng = random.Random(5)
    chooser = KeyChooser("latest", 1000)
    draws = Counter(chooser.next(rng, 1000) for _ in range(50_000))
    assert draws.most_common(1)[0][0] == 999
    assert sum(n for k, n in draws.items() if k >= 900) > 0.5 * 50_000
    later = Counter(chooser.next(rng, 1500) for _ in range(50_000))
    assert later.most_common(1)[0][0] == 1499


def test_unknown_distribution_is_rejected() -> None:
    with pytest.raises(ValidationError, match="distribution: unknown 'pareto'"):
        KeyChooser("pareto", 10)


def test_fnv1a64_matches_the_byte_definition() -> None:
    def reference(value: int) -> int:
        h = 0xCBF29CE484222325
        for byte in value.to_bytes(8, "little"):
            h = ((h ^ byte) * 0x100000001B3) % 2**64
        return h

    for v in (0, 1, 255, 123456789, 2**63 - 1):
        assert fnv1a64(v) == reference(v)


# ------------------------------------------------------------------------- mix
def test_parse_mix_normalises_and_fills_missing_classes() -> None:
    assert parse_mix("read=3, update=1", "cassandra") == {
        "read": 0.75, "update": 0.25, "insert": 0.0, "scan": 0.0,
    }
    assert parse_mix({"write": 2}, "redis") == {"read": 0.0, "write": 1.0, "other": 0.0}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("read=0.5,write=0.5", r"unknown cassandra class\(es\) \['write'\]"),
        ("read=-1,update=2", r"mix\[read\]: must be a non-negative"),
        ("read=0", "sum to 0"),
        ("read", "not class=fraction"),
        ("read=x", r"mix\[read\]: 'x' is not a number"),
    ],
)
def test_parse_mix_names_the_problem(text: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        parse_mix(text, "cassandra")


def test_op_mix_frequencies_follow_the_mix() -> None:
    rng = random.Random(2)
    mix = OpMix({"read": 0.5, "update": 0.3, "insert": 0.0, "scan": 0.2})
    counts = Counter(mix.choose(rng) for _ in range(100_000))
    assert "insert" not in counts
    assert counts["read"] / 100_000 == pytest.approx(0.5, abs=0.01)
    assert counts["update"] / 100_000 == pytest.approx(0.3, abs=0.01)
    assert counts["scan"] / 100_000 == pytest.approx(0.2, abs=0.01)


# ------------------------------------------------------------------- histogram
def test_histogram_percentiles_within_two_percent() -> None:
    h = LatencyHistogram()
    for ms in range(1, 1001):
        h.record(ms / 1000.0)
    assert h.total == 1000
    assert h.percentile_ms(50) == pytest.approx(500, rel=0.02)
    assert h.percentile_ms(99) == pytest.approx(990, rel=0.02)
    assert h.percentile_ms(100) == pytest.approx(1000, rel=1e-9)
    # Never under-reported: the bucket's upper bound is used.
    assert h.percentile_ms(50) >= 500


def test_histogram_merge_and_state_round_trip() -> None:
    a, b = LatencyHistogram(), LatencyHistogram()
    for _ in range(90):
        a.record(0.001)
    for _ in range(10):
        b.record(0.100)
    a.merge(b)
    restored = LatencyHistogram.from_state(a.state())
    assert restored.counts == a.counts and len(restored.counts) == HIST_BUCKETS
    assert restored.percentile_ms(50) == pytest.approx(1.0, rel=0.02)
    assert restored.percentile_ms(95) == pytest.approx(100.0, rel=0.02)
    assert LatencyHistogram().percentile_ms(50) is None
    assert LatencyHistogram().summary_ms() == {"p50": None, "p95": None, "p99": None,
                                               "max": None}


# ----------------------------------------------------------------------- trace
def _series(engine: str = "cassandra") -> WorkloadSeries:
    if engine == "cassandra":
        mix = {"read": [1.0, 0.5, 0.0], "update": [0.0, 0.5, 0.5], "insert": [0.0, 0.0, 0.5],
               "scan": [0.0, 0.0, 0.0]}
    else:
        mix = {"read": [1.0, 0.5, 0.0], "write": [0.0, 0.5, 1.0], "other": [0.0, 0.0, 0.0]}
    return WorkloadSeries(engine=engine, timestamps=np.array([0.0, 300.0, 600.0]),
                          load=np.array([1000.0, 0.0, 4000.0]), mix=mix, step_seconds=300.0)


def test_trace_schedule_compresses_time_and_scales_load() -> None:
    sched = TraceSchedule.from_series(_series(), step_seconds=2.0, scale=0.1)
    assert sched.rates == (100.0, 0.0, 400.0)
    assert sched.duration == 6.0
    assert [sched.step_at(t) for t in (0.0, 1.99, 2.0, 5.9, 6.0, -1.0)] == [0, 0, 1, 2, None, 0]
    assert sched.mixes[2]["insert"] == 0.5


def test_trace_caps_the_run_and_drives_rate_and_mix_per_step() -> None:
    sched = TraceSchedule.from_series(_series(), step_seconds=2.0)
    cfg = LoadConfig(engine="cassandra", trace=sched, seconds=100, processes=2, keys=10)
    assert cfg.seconds == 6.0
    plan = _Plan(cfg, 0, threading.Event())
    rate, mix = plan.target(0)
    assert rate == 500.0 and mix is not None and mix.classes == ("read",)
    assert plan.target(1) == (0.0, None)  # an idle step
    rate, mix = plan.target(2)
    assert rate == 2000.0 and mix is not None and set(mix.classes) == {"update", "insert"}


def test_trace_rejects_bad_schedules() -> None:
    with pytest.raises(ValidationError, match="step_seconds"):
        TraceSchedule.from_series(_series(), step_seconds=0)
    with pytest.raises(ValidationError, match="trace_scale"):
        TraceSchedule.from_series(_series(), step_seconds=1, scale=-1)
    sched = TraceSchedule.from_series(_series("redis"), step_seconds=1)
    with pytest.raises(ValidationError, match="trace: step 0: mix: unknown cassandra"):
        LoadConfig(engine="cassandra", trace=sched)


def test_pacer_holds_the_rate_and_restarts_on_a_new_rate() -> None:
    pacer = Pacer()
    now, issued = 1000.0, 0
    while now < 1010.0:
        wait = pacer.delay(50.0, now)
        if wait == 0:
            issued += 1
        else:
            now += wait
    assert issued == pytest.approx(500, abs=2)
    # After an idle spell, a new rate does not burst out the backlog.
    now += 30.0
    burst = sum(1 for _ in range(1000) if pacer.delay(100.0, now) == 0)
    assert burst == 1
    assert pacer.delay(None, now) == 0.0


# -------------------------------------------------------------- acknowledged writes
def test_ack_log_keeps_the_latest_sequence_per_owned_key() -> None:
    log = AckLog(slot=1, writers=4, capacity=2)
    log.record(1, 5)
    log.record(1, 3)  # acknowledged out of order: the later-issued write wins
    log.record(41, 7)  # beyond the capacity: grows
    assert log.latest(1) == 5 and log.latest(41) == 7 and log.latest(5) == -1
    assert sorted(log.items()) == [(1, 5), (41, 7)]
    assert len(log) == 2 and log.acknowledged == 3
    with pytest.raises(ValueError, match="not owned"):
        log.record(2, 1)


def test_values_are_incompressible_and_reproducible() -> None:
    # A data set larger than the memtables must be larger on disk too: SSTables are
    # compressed, and a padding of one repeated character shrank 1-KB rows 100-fold.
    values = [make_value("ab12", 1, seq, 1000) for seq in range(64)]
    packed = zlib.compress("".join(values).encode())
    assert len(packed) > 0.7 * sum(map(len, values))
    assert values[5] == make_value("ab12", 1, 5, 1000) and values[5] != values[6]
    assert len(make_value("ab12", 1, 0, 3 << 20)) == 3 << 20


def test_check_value_classifies_read_backs() -> None:
    value = make_value("ab12", 3, 10, 64)
    assert len(value) == 64
    assert check_value(value, tag="ab12", slot=3, acked_seq=10) == "ok"
    assert check_value(value.encode(), tag="ab12", slot=3, acked_seq=10) == "ok"
    # A later write (acknowledged or not) legitimately superseded the acknowledged one.
    assert check_value(make_value("ab12", 3, 11, 64), tag="ab12", slot=3, acked_seq=10) == "ok"
    assert check_value(make_value("ab12", 3, 9, 64), tag="ab12", slot=3, acked_seq=10) == "stale"
    assert check_value(None, tag="ab12", slot=3, acked_seq=10) == "missing"
    assert check_value(make_value("ffff", 3, 99, 64), tag="ab12", slot=3,
                       acked_seq=10) == "foreign"
    assert check_value("garbage", tag="ab12", slot=3, acked_seq=10) == "foreign"


def test_owned_keys_partition_the_key_space() -> None:
    for writers in (1, 3, 8):
        for slot in range(writers):
            for key in range(0, 200):
                k = owned_key(key, slot, writers)
                assert k % writers == slot
                assert k <= key or k == slot


def test_writer_inserts_owned_new_keys_and_wraps_below_max_keys() -> None:
    cfg = LoadConfig(engine="cassandra", keys=10, max_keys=30, processes=3)
    w = _Writer(cfg, 1, "t", random.Random(0))
    inserted = [w.insert_key() for _ in range(12)]
    assert all(k % 3 == 1 and 10 <= k < 30 for k in inserted)
    assert inserted[:7] == [10, 13, 16, 19, 22, 25, 28]
    assert inserted[7] == 10  # wrapped: the key space stays bounded
    assert all(w.update_key() % 3 == 1 for _ in range(100))


# ------------------------------------------------------------------ aggregation
def _payload(ops: dict[str, int], **extra: object) -> dict[str, object]:
    s = WorkerStats(("read", "update", "insert", "scan"), steps=3)
    for cls, n in ops.items():
        for _ in range(n):
            s.success(cls, 0.002, step=0)
    payload = s.payload()
    payload.update(extra)
    return payload


def test_aggregate_merges_workers() -> None:
    sched = TraceSchedule.from_series(_series(), step_seconds=2.0)
    cfg = LoadConfig(engine="cassandra", processes=2, trace=sched, keys=10)
    a = _payload({"read": 30, "update": 10}, acknowledged=10, verified=True, verified_keys=8)
    b = _payload({"read": 20}, acknowledged=0, verified=True, verified_keys=0,
                 lost={"stale": 1})
    b["failures"] = {"OperationTimedOut": 2}
    b["ops"]["read"] += 2  # the failed ops are counted as finished operations too
    result = aggregate(cfg, [a, b], seconds=10.0)
    assert result.ops == 62 and result.ops_by_class["read"] == 52
    assert result.ops_per_s == pytest.approx(6.2)
    assert result.failures == {"OperationTimedOut": 2} and result.failed == 2
    assert result.acknowledged_writes == 10 and result.verified_keys == 8
    assert result.lost_acknowledged_writes == 1 and result.lost_by_kind == {"stale": 1}
    assert result.verified and not result.ok
    assert result.latency_ms["p50"] == pytest.approx(2.0, rel=0.02)
    assert result.steps[0]["ops_per_s"] == 30.0 and len(result.steps) == 3
    d = result.to_dict()
    assert d["failed"] == 2 and d["consistency_level"] == "QUORUM"
    assert "lost" in format_result(result)


def test_aggregate_is_unverified_when_a_read_back_failed() -> None:
    cfg = LoadConfig(engine="redis", keys=100)
    good = _payload({}, verified=True)
    bad = _payload({}, verified=False, verify_errors={"ConnectionError": 3})
    assert aggregate(cfg, [good], seconds=1).verified
    result = aggregate(cfg, [good, bad], seconds=1)
    assert not result.verified and result.verify_errors == {"ConnectionError": 3}
    assert result.consistency_level is None


# ---------------------------------------------------------------------- config
def test_config_defaults_and_validation() -> None:
    cfg = LoadConfig(engine="cassandra", cl="quorum")
    assert cfg.cl == "QUORUM" and cfg.verify_cl == "QUORUM"
    assert cfg.contact_points == ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    assert cfg.mix == {"read": 0.5, "update": 0.5, "insert": 0.0, "scan": 0.0}
    assert default_verify_cl("ONE") == "ALL" and default_verify_cl("ALL") == "QUORUM"
    assert LoadConfig(engine="redis", concurrency=4, processes=2).writers == 8
    with pytest.raises(ValidationError, match="engine: unknown 'mongo'"):
        LoadConfig(engine="mongo")
    with pytest.raises(ValidationError, match="cl: unknown 'most'"):
        LoadConfig(engine="cassandra", cl="most")
    with pytest.raises(ValidationError, match="keys: must be >= the number of writers"):
        LoadConfig(engine="redis", keys=3, concurrency=4)
    with pytest.raises(ValidationError, match="seconds"):
        LoadConfig(engine="redis", seconds=1e9)
    with pytest.raises(ValidationError, match="rate"):
        LoadConfig(engine="redis", rate=0)
    assert split_host_port("127.0.0.1:7001", 6379) == ("127.0.0.1", 7001)
    assert split_host_port("10.0.0.1", 9042) == ("10.0.0.1", 9042)


def test_password_never_appears_in_repr() -> None:
    cfg = LoadConfig(engine="redis", password="s3cret-pw")
    assert "s3cret-pw" not in repr(cfg)


def test_max_requests_is_split_exactly_over_processes() -> None:
    cfg = LoadConfig(engine="cassandra", processes=3, max_requests=10, keys=10)
    shares = [_Plan(cfg, i, threading.Event()).max_requests for i in range(3)]
    assert shares == [4, 3, 3]


def test_plan_stops_at_max_requests() -> None:
    cfg = LoadConfig(engine="redis", max_requests=5, keys=100)
    plan = _Plan(cfg, 0, threading.Event())
    slots = list(plan.slots())  # what both engines' issue loops iterate over
    assert len(slots) == 5 and plan.stopped_by == "max_requests"
    assert all(step is None and mix.classes == ("read", "write") for step, mix in slots)


# ------------------------------------------------------------------------- CLI
def test_cli_builds_the_config(tmp_path: object) -> None:
    args = build_parser().parse_args(
        ["load", "--engine", "redis", "--hosts", "127.0.0.1:7001,127.0.0.1:7002",
         "--mix", "read=0.8,write=0.2", "--rate", "100", "--seconds", "5"]
    )
    cfg = config_from_args(args)
    assert cfg.contact_points == ("127.0.0.1:7001", "127.0.0.1:7002")
    assert cfg.concurrency == 8 and cfg.rate == 100 and cfg.seconds == 5
    assert cfg.mix == {"read": 0.8, "write": 0.2, "other": 0.0}


def test_cli_says_what_a_preload_is_doing_before_its_silent_minutes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import planner.loadgen
    from planner.commands import load

    class Started(Exception):
        pass

    def run_load(config: LoadConfig, **_kw: object) -> None:
        assert config.preload and config.keys == 2_000_000
        raise Started

    monkeypatch.setattr(planner.loadgen, "run_load", run_load)
    args = build_parser().parse_args(
        ["load", "--engine", "cassandra", "--keys", "2000000", "--max-keys", "2000000",
         "--preload", "--seconds", "1"])
    with pytest.raises(Started):
        load.run(args)
    assert "writing every one of 2,000,000 record(s) once first" in capsys.readouterr().err


def test_cli_rejects_a_trace_of_the_other_engine(tmp_path: object) -> None:
    from pathlib import Path

    from planner.workload.series import save_trace

    path = Path(str(tmp_path)) / "redis.csv"
    save_trace(_series("redis"), path)
    args = build_parser().parse_args(
        ["load", "--engine", "cassandra", "--trace", str(path), "--step-seconds", "1"]
    )
    with pytest.raises(ValidationError, match="is a redis trace, not cassandra"):
        config_from_args(args)
    args = build_parser().parse_args(
        ["load", "--engine", "redis", "--trace", str(path), "--step-seconds", "1"]
    )
    assert config_from_args(args).seconds == 3.0
