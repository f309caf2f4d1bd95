"""The payoff experiment on Redis (issue 41, "Redis plans that act"): the hash day, the
decisions the lab's Redis model makes over it, and bench/payoff.py --engine redis on fakes
(its options, --plan-only, the executor, the load and the read-back)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.errors import ValidationError
from planner.lab import payoff as po
from planner.model.performance import PerformanceModel, load_model
from tests.unit.test_payoff import Clock, FakeLoad, FakeResult, Lab, fake_bench
from tests.unit.test_payoff import model as cassandra_model

REPO = Path(__file__).resolve().parents[2]
REDIS_MODEL = REPO / "inventories" / "local" / "calibration" / "redis-model.json"
WRITE_HEAVY = {"read": 0.2, "write": 0.8, "other": 0.0}
READ_HEAVY = {"read": 0.9, "write": 0.1, "other": 0.0}
DEFAULT = {"maxmemory-policy": "allkeys-lfu", "hash-max-listpack-entries": 512}
BEST = {"maxmemory-policy": "allkeys-lru", "hash-max-listpack-entries": 1024}
NODES = tuple(f"127.0.0.1:{port}" for port in range(7001, 7007))


@pytest.fixture(scope="module")
def redis_model() -> PerformanceModel:
    return load_model(REDIS_MODEL)


# ------------------------------------------------------------------ the hash day
def test_the_hash_day_alternates_write_heavy_and_read_heavy_hashes() -> None:
    s = po.make_schedule("hashes", minutes=8)
    assert s.engine == "redis" and s.seconds == 480 and s.steps == 96
    assert s.durations() == [120.0] * 4 and s.shifts == (120.0, 240.0, 360.0)
    assert [dict(seg.mix) for seg in s.segments] == [WRITE_HEAVY, READ_HEAVY] * 2
    assert [seg.shape for seg in s.segments] == ["hash-write", "hash-read"] * 2
    assert s.step_rates() == (po.UNTHROTTLED_RATE,) * 96  # a closed loop
    assert po.load_shape(s) == "hash-write"  # one load, its mix set step by step
    assert s.to_dict()["segments"][1]["shape"] == "hash-read"
    assert po.make_schedule("hashes", minutes=8, seed=7) == s  # no trace to draw


def test_the_hash_day_has_a_segment_per_shift_and_two_at_least() -> None:
    short = po.make_schedule("hashes", minutes=1)
    assert short.durations() == [30.0, 30.0]
    often = po.make_schedule("hashes", minutes=8, shift_seconds=60)
    assert len(often.segments) == 8 and all(d == 60.0 for d in often.durations())
    odd = po.make_schedule("hashes", minutes=5, shift_seconds=90)  # 300 s in 3, on steps
    assert [seg.start for seg in odd.segments] == [0.0, 100.0, 200.0]
    open_loop = po.make_schedule("hashes", minutes=2, peak_rate=3000.0)
    assert set(open_loop.step_rates()) == {3000.0}
    assert "an open loop at 3000 ops/s throughout" in open_loop.source


def test_each_engine_has_its_shapes_and_a_shape_names_its_engine() -> None:
    assert po.shapes_for("redis") == ("hashes",)
    assert po.shapes_for("cassandra") == ("bus", "hpc", "mgrast", "reporting", "warehouse")
    assert tuple(po.SHAPES) == (*po.shapes_for("cassandra"), *po.shapes_for("redis"))
    assert [po.shape_engine(s) for s in ("bus", "hashes")] == ["cassandra", "redis"]
    with pytest.raises(ValidationError, match=r"^engine: unknown engine 'mysql'"):
        po.shapes_for("mysql")
    with pytest.raises(ValidationError, match=r"^--shape: unknown 'tpcc'; known: .*hashes"):
        po.make_schedule("tpcc", minutes=4)


def test_a_schedule_s_mixes_and_load_shapes_are_its_engine_s() -> None:
    with pytest.raises(ValidationError, match=r"'update' is no redis class"):
        po.Schedule("x", 60, 5, (po.Segment(0, {"update": 1.0}),), engine="redis")
    with pytest.raises(ValidationError, match=r"'hash-read' is no cassandra load shape"):
        po.Schedule("x", 60, 5, (po.Segment(0, {"read": 1.0}, shape="hash-read"),))
    with pytest.raises(ValidationError, match=r"'tpcc' is no redis load shape"):
        po.Schedule("x", 60, 5, (po.Segment(0, READ_HEAVY, shape="tpcc"),), engine="redis")
    with pytest.raises(ValidationError, match=r"^engine: unknown engine 'mysql'"):
        po.Schedule("x", 60, 5, (po.Segment(0, READ_HEAVY),), engine="mysql")


def test_one_load_replays_only_shapes_that_send_the_same_commands() -> None:
    plain = po.Schedule("x", 60, 5, (po.Segment(0, READ_HEAVY), po.Segment(30, WRITE_HEAVY)),
                        engine="redis")
    assert po.load_shape(plain) is None
    mixed = po.Schedule("x", 60, 5, (po.Segment(0, READ_HEAVY, shape="hash-read"),
                                     po.Segment(30, READ_HEAVY, shape="cache-hot")),
                        engine="redis")
    with pytest.raises(ValidationError, match=r"cache-hot, hash-read are not one load"):
        po.load_shape(mixed)


# ------------------------------------------------------ decisions, the lab's model
def test_the_lab_s_redis_model_puts_lru_and_1024_entries_first_under_both_mixes(
    redis_model: PerformanceModel,
) -> None:
    """The model's optimum does not move between the mixes it was calibrated on: the listpack
    threshold's effect (+137 % read-heavy, +46 % write-heavy) dwarfs the policy's. So the
    three policies that change reach the same configuration on the hash day."""
    default = po.default_config(redis_model, po.model_params(redis_model))
    assert default == DEFAULT  # what the nodes ran when it was calibrated
    cands = po.candidate_grid(redis_model, default)
    assert len(cands) == 4 and cands[0] == DEFAULT and BEST in cands
    cap, _ = redis_model.predict_matrix([WRITE_HEAVY, READ_HEAVY], cands)
    best = cands.index(BEST)
    assert [int(cap[i].argmax()) for i in range(2)] == [best, best]
    assert cap[0, best] / cap[0, 0] == pytest.approx(1.46, abs=0.01)
    assert cap[1, best] / cap[1, 0] == pytest.approx(2.37, abs=0.01)


def test_on_the_hash_day_every_policy_but_default_runs_lru_and_1024_entries(
    redis_model: PerformanceModel,
) -> None:
    sched = po.make_schedule("hashes", minutes=8)
    cands = po.candidate_grid(redis_model, DEFAULT)
    plans = {p: po.decide(p, model=redis_model, schedule=sched, candidates=cands)
             for p in po.POLICIES}
    assert plans["default"].start == DEFAULT and plans["default"].changes == ()
    assert plans["static-best"].start == BEST and plans["static-best"].changes == ()
    assert plans["static-best"].info["predicted_gain_over_default"] == pytest.approx(
        0.82, abs=0.01)
    for policy in ("naive", "kairos"):  # at once, a reload: the threshold re-encodes
        plan = plans[policy]
        assert plan.start == DEFAULT
        assert [(c.at, dict(c.settings), c.restart) for c in plan.changes] == [
            (0.0, BEST, True)]
        assert po.expected_final(plan.start, plan.changes) == BEST
    assert plans["kairos"].info["steps"] == 1
    assert plans["kairos"].changes[0].reason.startswith("plan step s1")
    predicted = {p: plan.predicted_ops for p, plan in plans.items()}
    assert predicted["kairos"] == pytest.approx(predicted["static-best"])
    assert predicted["kairos"] / predicted["default"] == pytest.approx(1.82, abs=0.01)


def test_a_redis_schedule_is_refused_with_a_cassandra_model() -> None:
    with pytest.raises(ValidationError, match=r"^--model: payoff-test is a cassandra model; "
                                              r"the schedule hashes is a redis workload"):
        po.decide("default", model=cassandra_model(),
                  schedule=po.make_schedule("hashes", minutes=1),
                  candidates=[{"concurrent_reads": 32}])


def test_a_restart_is_the_engine_s() -> None:
    # A threshold is CONFIG SET, but a plan changes it by a reload; the policy alone is live.
    assert po.needs_restart(DEFAULT, BEST, engine="redis")
    assert not po.needs_restart(DEFAULT, {"maxmemory-policy": "allkeys-lru"}, engine="redis")
    assert po.needs_restart({"io-threads": 1}, {"io-threads": 2}, engine="redis")
    assert not po.needs_restart({}, {"concurrent_reads": 64}, engine="cassandra")


def test_a_shaped_load_s_figures_keep_its_hits_and_evictions() -> None:
    load = {"ops": 1000, "failed": 0, "seconds": 10.0, "latency_ms": {"p99": 3.0},
            "lost_acknowledged_writes": 0, "verified": True, "steps": [], "shape": "hash-read",
            "hit_ratio": 0.97, "evicted_keys": 120, "missing_evicted": 4}
    f = po.figures(load, step_seconds=5.0)
    assert (f["hit_ratio"], f["evicted_keys"], f["missing_evicted"]) == (0.97, 120, 4)
    assert "hit_ratio" not in po.figures({**load, "shape": None}, step_seconds=5.0)


# ------------------------------------------------------------ the driver, on fakes
class RedisResult(FakeResult):
    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "shape": self.config.shape, "hit_ratio": 0.9,
                "evicted_keys": 10, "missing_evicted": 0}


class RedisLab(Lab):
    """The fake lab with Redis nodes; what the executor was called with, the keys unlinked."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.nodes = dict(DEFAULT)
        self.playbooks: list[str] = []
        self.read_hosts: list[tuple[str, ...]] = []
        self.unlinked: list[tuple[str, int]] = []  # (prefix, loads started so far)
        self.unlink_error: Exception | None = None

    def apply(self, bench: Any, changes: Any, *, restart_all: bool = False) -> None:
        self.playbooks.append(Path(bench.playbook).name)
        super().apply(bench, changes, restart_all=restart_all)

    def read(self, params: Any, **kw: Any) -> tuple[dict[str, Any], str]:
        self.read_hosts.append(tuple(kw["hosts"]))
        return {k: self.nodes[k] for k in params}, "7.0.15"

    def unlink(self, config: Any) -> int:
        if self.unlink_error is not None:
            raise self.unlink_error
        self.unlinked.append((config.prefix, len(self.loads)))
        return 7000


class RedisLoad(FakeLoad):
    def stop(self) -> RedisResult:
        self.stopped = True
        return RedisResult(self.config, self.config.seconds)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, RedisLab]]:
    import planner.calibrate.redis_bench as rb
    import planner.loadgen as lg

    lab = RedisLab(Clock())
    module = fake_bench(monkeypatch, "payoff_bench_redis", lab, RedisLoad, _no_cql, _no_cql)
    monkeypatch.setattr(rb, "read_running_redis", lab.read)
    monkeypatch.setattr(lg, "unlink_load_keys", lab.unlink)
    yield module, lab


def _no_cql(*_: Any, **__: Any) -> Any:
    raise AssertionError("a Redis experiment asked Cassandra")


def test_redis_defaults_are_the_lab_s_redis_and_its_calibration_s_data(
    bench: tuple[Any, RedisLab]
) -> None:
    module = bench[0]
    args = module.parse_args(["--engine", "redis"])
    assert args.model == "inventories/local/calibration/redis-model.json"
    assert args.playbook == "playbooks/change_settings_redis.yml"
    assert args.shapes == "hashes" and args.hosts == ",".join(NODES) and args.port == 6379
    assert (args.keys, args.value_size, args.distribution, args.concurrency) == (
        7000, 40, "uniform", 8)
    assert module.parse_args(["--engine", "redis", "--short"]).keys == 7000
    cassandra = module.parse_args([])
    assert (cassandra.model, cassandra.shapes, cassandra.keys) == (
        "inventories/local/calibration/cassandra-model.json", "bus", 100_000)


@pytest.mark.parametrize(
    ("option", "what"),
    [(["--cl", "ONE"], "--cl: an option of an engine with consistency levels (cassandra)"),
     (["--keyspace", "ks"], "--keyspace: an option of an engine with tables (cassandra)"),
     (["--table", "t"], "--table: an option of an engine with tables"),
     (["--layout", "x"], "--layout: an option of an engine with tables"),
     (["--save-layout"], "--save-layout: an option of an engine with tables"),
     (["--lab-dir", "x"], "--lab-dir: an option of an engine with tables"),
     (["--settle-timeout", "0"], "--settle-timeout: an option of an engine with tables"),
     (["--preloaded"], "--preloaded: an option of an engine with tables"),
     (["--precondition", "30"], "--precondition: an option of an engine with tables"),
     (["--precondition-mix", "update=1"], "--precondition-mix: an option of an engine with"),
     (["--compaction-seconds", "30"], "--compaction-seconds: an option of an engine with"),
     (["--change-costs", "x.json"], "--change-costs: an option of an engine with tables")],
)
def test_a_cassandra_option_is_refused_with_redis_naming_it(
    bench: tuple[Any, RedisLab], capsys: pytest.CaptureFixture[str], option: list[str],
    what: str,
) -> None:
    module, lab = bench
    assert module.main(["--engine", "redis", *option, "--plan-only"]) == 2
    assert f"payoff: {what}" in capsys.readouterr().err
    assert lab.applied == [] and lab.loads == [] and lab.unlinked == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--engine", "mysql"], "--engine: unknown engine 'mysql'; known: cassandra, redis"),
     (["--prefix", "p"], "--prefix: an option of an engine without tables (redis), not of "
                         "cassandra"),
     (["--engine", "redis", "--shapes", "bus"], "--shapes: unknown 'bus' for redis; known: "
                                                "hashes"),
     (["--shapes", "hashes"], "--shapes: unknown 'hashes' for cassandra"),
     (["--engine", "redis", "--model", "inventories/local/calibration/cassandra-model.json"],
      "--model: inventories/local/calibration/cassandra-model.json is a cassandra model, not "
      "for --engine redis"),
     (["--engine", "redis", "--params", "maxmemory-policy,concurrent_reads"],
      "concurrent_reads")],
)
def test_bad_redis_options_are_refused_naming_the_option(
    bench: tuple[Any, RedisLab], capsys: pytest.CaptureFixture[str], argv: list[str],
    message: str,
) -> None:
    module, lab = bench
    assert module.main([*argv, "--plan-only"]) == 2
    assert message in capsys.readouterr().err
    assert lab.applied == [] and lab.loads == []


def test_plan_only_prints_every_policy_s_decisions_on_the_hash_day(
    bench: tuple[Any, RedisLab], capsys: pytest.CaptureFixture[str]
) -> None:
    module, lab = bench
    assert module.main(["--engine", "redis", "--plan-only"]) == 0
    out, err = capsys.readouterr()
    plans = json.loads(out)["hashes"]
    assert {p: (plans[p]["start"], [(c["at"], c["settings"]) for c in plans[p]["changes"]])
            for p in po.POLICIES} == {
        "default": (DEFAULT, []), "static-best": (BEST, []),
        "naive": (DEFAULT, [(0.0, BEST)]), "kairos": (DEFAULT, [(0.0, BEST)])}
    assert "redis-calibrated (fitted); 4 candidate configurations over maxmemory-policy, " \
           "hash-max-listpack-entries" in err
    assert "hashes: hash-write (read 0.2, write 0.8) and hash-read (read 0.9, write 0.1) in " \
           "turn, 4 segments of 120 s in 8 min, a closed loop" in err
    assert "kairos: start {'maxmemory-policy': 'allkeys-lfu', 'hash-max-listpack-entries': " \
           "512}; 0 s {'maxmemory-policy': 'allkeys-lru', 'hash-max-listpack-entries': 1024}" \
           in err
    assert lab.applied == [] and lab.loads == [] and lab.unlinked == []


def test_the_nodes_get_back_what_they_ran_before_the_bench_not_the_model_s_default(
    bench: tuple[Any, RedisLab], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lab runs allkeys-lru (its inventory), the model's default is allkeys-lfu: every run
    starts from the default, and the end puts back what the nodes ran (session 53's payoff
    left the lab's Redis on allkeys-lfu)."""
    module, lab = bench
    lab.nodes = {**DEFAULT, "maxmemory-policy": "allkeys-lru"}
    rc = module.main(["--engine", "redis", "--minutes", "1", "--policies", "default",
                      "--repetitions", "1", "--warmup", "0", "--restart-warmup", "0",
                      "--out", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["initial_config"]["maxmemory-policy"] == "allkeys-lru"
    assert lab.applied == [{"maxmemory-policy": "allkeys-lfu"}, {"maxmemory-policy": "allkeys-lru"}]
    assert results["restored"] == {"maxmemory-policy": "allkeys-lru"}
    assert lab.nodes == {**DEFAULT, "maxmemory-policy": "allkeys-lru"}
    assert "restoring what the nodes ran before the bench" in capsys.readouterr().err


def test_the_driver_runs_redis_through_its_executor_load_and_config_get(
    bench: tuple[Any, RedisLab], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, lab = bench
    out = tmp_path / "out"
    # T_r 1 s: the reload pays within the minute (at 60 s a node it does not: dropped).
    rc = module.main(["--engine", "redis", "--minutes", "1", "--policies",
                      "default,static-best,kairos", "--repetitions", "1", "--warmup", "0",
                      "--restart-warmup", "0", "--restart-seconds", "1", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["engine"] == "redis"
    runs = results["runs"]
    assert [(r["policy"], r["status"]) for r in runs] == [
        ("default", "ok"), ("static-best", "ok"), ("kairos", "ok")]
    # static-best before its load; kairos back to the default first, then its change at 0 s;
    # the default restored at the end; all through the Redis executor, each a reload (the
    # threshold changes every time: only a restart re-encodes the hashes held)
    assert lab.applied == [BEST, DEFAULT, BEST, DEFAULT]
    assert lab.restart_all == [True] * 4
    assert set(lab.playbooks) == {"change_settings_redis.yml"}
    assert runs[2]["changes"][0]["started"] == 0.0 and runs[2]["changes_made"] == 1
    assert [r["restarts"] for r in runs] == [0, 0, 1]
    # every run starts from an empty cache: its keys unlinked before its load; and at the end
    assert lab.unlinked == [("kairos_payoff", 0), ("kairos_payoff", 1), ("kairos_payoff", 2),
                            ("kairos_payoff", 3)]
    assert [r["unlinked_keys"] for r in runs] == [7000] * 3
    assert results["unlinked_at_end"] == 7000
    for load in lab.loads:
        c = load.config
        assert (c.engine, c.shape, c.prefix, c.keys, c.concurrency, c.verify) == (
            "redis", "hash-write", "kairos_payoff", 7000, 8, True)
        assert c.contact_points == NODES and c.distribution == "uniform"
        assert c.trace.mixes[0] == WRITE_HEAVY and c.trace.mixes[-1] == READ_HEAVY
        assert load.stopped and not load.aborted
    # read back with CONFIG GET on every node, before the runs and after each
    assert set(lab.read_hosts) == {NODES}
    assert runs[1]["readback"]["read"] == BEST and runs[1]["readback"]["mismatches"] == {}
    assert [r["hit_ratio"] for r in runs] == [0.9] * 3
    header = (out / "series.csv").read_text().splitlines()[0]
    assert header.endswith("mix_read,mix_write,mix_other")
    assert lab.nodes == DEFAULT


def test_keys_that_cannot_be_unlinked_fail_the_run_before_its_load(
    bench: tuple[Any, RedisLab], tmp_path: Path
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    module, lab = bench
    lab.unlink_error = RedisConnectionError("Connection refused")
    out = tmp_path / "out"
    rc = module.main(["--engine", "redis", "--minutes", "1", "--policies", "default",
                      "--repetitions", "1", "--out", str(out)])
    assert rc == 1
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["status"] == "failed" and run["error"] == (
        "the load's keys (kairos_payoff:*) could not be unlinked: ConnectionError: "
        "Connection refused")
    assert lab.loads == []


def test_an_executor_failure_on_redis_fails_the_run_and_stops_its_load(
    bench: tuple[Any, RedisLab], tmp_path: Path
) -> None:
    module, lab = bench
    lab.fail_on = BEST
    out = tmp_path / "out"
    rc = module.main(["--engine", "redis", "--minutes", "1", "--policies", "naive",
                      "--repetitions", "1", "--warmup", "0", "--out", str(out)])
    assert rc == 1
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["error"].startswith("the executor failed at 0 s applying")
    assert lab.loads[0].stopped and not lab.loads[0].aborted
