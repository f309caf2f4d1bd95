"""planner.planning.per_node: each node's live settings by the mix it serves (MeT, seeds/001).

The shipped prior gives concurrent_reads and concurrent_writes no effect for any class (the
seeds report none: coefficient 0, s.d. 0.05), so under it no node is worth its own values.
A model that gives them class-dependent effects (as a calibration could fit: more read
threads help reads and cost writes, and the other way round) makes a read-heavy node and a
write-heavy node want different values; the tests use such a model, built from the prior.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.forecast.results import Forecast, save_forecast
from planner.model.performance import PerformanceModel, load_default_model, save_model
from planner.model.spaces import get_space
from planner.plan import load_plan
from planner.planning.explain import explain_text
from planner.planning.per_node import (
    NodeWorkload,
    choose_per_node,
    min_capacity,
    node_class,
    shard_capacity,
    with_per_node,
)
from planner.planning.pipeline import NO_NODE_KEYS

T = 6
STEP = 300.0
PRIOR = load_default_model("cassandra")
CONFIG = get_space("cassandra").complete({})
KEYS = ("concurrent_reads", "concurrent_writes")
HOSTS = ("cass1", "cass2", "cass3")


def _column(model: PerformanceModel, param: str) -> int:
    """The coefficient column of ``param``'s (linear) feature."""
    return 1 + [f.param for f in model.features].index(param)


def _threads_model(own: float = 0.3, cross: float = -0.35) -> PerformanceModel:
    """The prior with class-dependent thread effects at 64 threads (x = 1): ``own`` for a
    class's own stage (reads: concurrent_reads; updates, inserts: concurrent_writes),
    ``cross`` for the other's; the memtable threshold's effect (a restart) taken out so the
    optimiser has no restart to plan."""
    coef = PRIOR.coef.copy()
    reads, writes = _column(PRIOR, "concurrent_reads"), _column(PRIOR, "concurrent_writes")
    for c, cls in enumerate(PRIOR.classes):
        coef[c, reads], coef[c, writes] = (own, cross) if cls in ("read", "scan") else (cross, own)
    coef[:, _column(PRIOR, "memtable_cleanup_threshold")] = 0.0
    return replace(PRIOR, name="threads-test", model_type="fitted", coef=coef)


MODEL = _threads_model()


def _node(load: float | np.ndarray, read: float, scan: float = 0.0) -> NodeWorkload:
    """A node's forecast: ``read`` of its operations reads, ``scan`` scans, the rest update."""
    return NodeWorkload(np.broadcast_to(np.asarray(load, dtype=float), (T,)).copy(),
                        np.tile([read, 1 - read - scan, 0.0, scan], (T, 1)))


def _choose(nodes: dict[str, NodeWorkload], **kw: Any) -> Any:
    base: dict[str, Any] = {
        "model": MODEL, "configs": [CONFIG] * T, "running": CONFIG, "nodes": nodes,
        "step_seconds": STEP, "keys": KEYS, "served": "offered",
    }
    return choose_per_node(**(base | kw))


#: Saturated (~2,000-2,600 ops/s per node): the read node bounds the cluster in the first
#: half, the write node in the second, so each one's values add served work.
SHIFTING = {
    "cass1": _node(np.r_[[30_000.0] * 3, [10_000.0] * 3], 0.95),
    "cass2": _node(np.r_[[10_000.0] * 3, [30_000.0] * 3], 0.05),
    "cass3": _node(10_000.0, 0.5),
}


def test_under_the_shipped_prior_no_node_gets_its_own_thread_counts() -> None:
    # The prior's thread effects are 0 for every class, so no value beats the cluster's.
    for param in KEYS:
        assert np.all(PRIOR.coef[:, _column(PRIOR, param)] == 0.0)
    found = _choose(SHIFTING, model=PRIOR)
    assert all(not c.override for c in found.nodes.values())
    reasons = {c.reason for c in found.nodes.values()}
    assert reasons == {"the cluster-wide value is already its best"}
    assert found.overrides(0) == {} and found.gain_ops == 0.0


def test_a_read_heavy_and_a_write_heavy_node_get_different_thread_counts() -> None:
    found = _choose(SHIFTING)
    reader, writer, mixed = (found.nodes[h] for h in HOSTS)
    assert reader.override and reader.values == ({"concurrent_reads": 64, "concurrent_writes": 32},)
    assert writer.override and writer.values == ({"concurrent_reads": 32, "concurrent_writes": 64},)
    assert reader.capacity_chosen > reader.capacity_cluster
    assert reader.gain_ops > 0 and writer.gain_ops > 0
    # the mixed node loses with either change (0.5 x 0.3 - 0.5 x 0.35 < 0)
    assert not mixed.override and mixed.reason == "the cluster-wide value is already its best"
    assert found.overrides(0) == {"cass1": {"concurrent_reads": 64},
                                  "cass2": {"concurrent_writes": 64}}
    assert found.changes(0) == KEYS
    assert [(g.name, g.hosts) for g in found.groups] == [("R", ("cass1",)), ("W", ("cass2",)),
                                                         ("RW", ("cass3",))]


def test_the_separable_argmax_is_the_best_of_every_assignment() -> None:
    # 3 nodes x 4 options: 64 assignments, each valued by the min-over-nodes capacity.
    options = [dict(zip(KEYS, v, strict=True)) for v in itertools.product((32, 64), repeat=2)]
    own = {h: [float(MODEL.predict_matrix(
        [dict(zip(MODEL.classes, w.mix[0].tolist(), strict=True))],
        [{**CONFIG, **o}])[0][0, 0]) for o in options] for h, w in SHIFTING.items()}
    loads = np.stack([w.load for w in SHIFTING.values()])

    def capacity(assignment: tuple[int, ...]) -> float:
        caps = np.stack([np.full(T, own[h][v]) for h, v in zip(SHIFTING, assignment, strict=True)])
        return float(np.sum(min_capacity(loads, caps)))

    brute = max(capacity(a) for a in itertools.product(range(len(options)), repeat=len(HOSTS)))
    argmax = tuple(int(np.argmax(own[h])) for h in SHIFTING)
    assert capacity(argmax) == pytest.approx(brute, rel=1e-12)
    found = _choose(SHIFTING, served="capacity", values={k: (32, 64) for k in KEYS})
    assert tuple(options.index(dict(c.best[0])) for c in found.nodes.values()) == argmax
    stay = capacity((options.index({"concurrent_reads": 32, "concurrent_writes": 32}),) * 3)
    assert found.gain_ops == pytest.approx((brute - stay) * STEP, rel=1e-9)


def test_a_node_that_never_bounds_the_cluster_gets_no_override() -> None:
    # Equal loads: the read node (the slowest) bounds the cluster throughout.
    found = _choose({h: _node(20_000, r) for h, r in zip(HOSTS, (0.95, 0.05, 0.5), strict=True)})
    assert found.nodes["cass1"].override
    writer = found.nodes["cass2"]
    assert writer.best == ({"concurrent_reads": 32, "concurrent_writes": 64},)
    assert not writer.override and writer.gain_ops == 0.0
    assert writer.reason is not None and "add no served work" in writer.reason


def test_an_override_is_kept_only_with_confidence_over_the_model_s_draws() -> None:
    # A thread effect of 0.02 against the prior's s.d. 0.05 wins in ~2/3 of the draws.
    weak = _choose(SHIFTING, model=_threads_model(own=0.02, cross=-0.1), scenarios=200,
                   confidence=0.9, seed=(0, 17))
    reader = weak.nodes["cass1"]
    assert reader.best == ({"concurrent_reads": 64, "concurrent_writes": 32},)
    assert not reader.override and reader.gain_ops > 0
    assert reader.p_gain is not None and reader.p_gain < 0.9
    assert reader.reason is not None and "below the confidence 0.9" in reader.reason
    assert weak.overrides(0) == {}
    strong = _choose(SHIFTING, scenarios=200, confidence=0.9, seed=(0, 17))
    assert strong.nodes["cass1"].override
    assert strong.nodes["cass1"].p_gain is not None and strong.nodes["cass1"].p_gain >= 0.9
    assert strong.nodes["cass1"].to_dict()["p_gain"] == pytest.approx(
        strong.nodes["cass1"].p_gain)


@pytest.mark.parametrize(("read", "scan", "update", "expected"), [
    (0.95, 0.0, 0.05, "R"), (0.05, 0.0, 0.95, "W"), (0.2, 0.6, 0.2, "Scan"),
    (0.5, 0.0, 0.5, "RW"), (0.7, 0.0, 0.3, "RW"),  # the thresholds are strict
])
def test_a_node_is_named_by_its_dominant_class(read: float, scan: float, update: float,
                                               expected: str) -> None:
    mix = np.tile([read, update, 0.0, scan], (T, 1))
    assert node_class(np.full(T, 100.0), mix, PRIOR.classes) == expected


def test_a_node_without_a_forecast_keeps_the_cluster_values() -> None:
    found = _choose(SHIFTING, fixed=("cass1",))
    assert not found.nodes["cass1"].override
    assert "no forecast of its own" in (found.nodes["cass1"].reason or "")


# ------------------------------------------------------------------ the plan's steps
START = datetime(2025, 1, 1, tzinfo=UTC)


def _iso(t: int) -> str:
    return (START + timedelta(seconds=t * STEP)).isoformat()


def test_an_override_that_pays_in_the_hold_gets_a_step_that_changes_only_the_nodes() -> None:
    found = _choose(SHIFTING)
    (step,) = with_per_node([], found, start=START, step_seconds=STEP, n_steps=T)
    assert (step["id"], step["due"], step["until"], step["target"]) == ("s1", _iso(0), _iso(T),
                                                                       {})
    assert step["per_node"] == found.overrides(0)
    assert step["live"] == list(KEYS) and step["restart"] == []
    assert step["expected"]["benefit_ops"] == pytest.approx(found.gain_ops)
    assert step["expected"]["net_ops"] == pytest.approx(found.gain_ops)


def test_an_override_holds_for_its_step_only_so_the_next_step_repeats_it() -> None:
    # The cluster goes to 64 read threads at time point 3: the read node's override is
    # needed only before it; the write node keeps 32 read threads, so the next step
    # repeats its override, now against the new cluster value, and no node's writes change.
    reads = {**CONFIG, "concurrent_reads": 64}
    found = _choose(SHIFTING, configs=[CONFIG] * 3 + [reads] * 3)
    assert found.starts == (0, 3)
    opt = {"id": "s1", "due": _iso(3), "until": _iso(T), "target": {"concurrent_reads": 64},
           "per_node": {}, "live": ["concurrent_reads"], "restart": [], "batches": [],
           "expected": {"benefit_ops": 10.0, "cost_ops": 0.0, "net_ops": 10.0}}
    first, second = with_per_node([opt], found, start=START, step_seconds=STEP, n_steps=T)
    assert first["per_node"]["cass1"] == {"concurrent_reads": 64}
    assert second["per_node"] == {"cass2": {"concurrent_reads": 32, "concurrent_writes": 64}}
    assert second["live"] == ["concurrent_reads"]
    assert second["expected"]["benefit_ops"] == pytest.approx(10.0 + found.segment_gain_ops[1])


# ------------------------------------------------------------------ kairos plan
def _forecast_file(path: Path, *, load: float | np.ndarray, read: float, start: float = 1.7e9,
                   step: float = STEP, n: int = 12) -> Path:
    t = start + step * np.arange(n)
    mix = {"read": np.full(n, read), "update": np.full(n, 1 - read), "insert": np.zeros(n),
           "scan": np.zeros(n)}
    level = np.broadcast_to(np.asarray(load, dtype=float), (n,)).copy()
    save_forecast(Forecast("cassandra", t, level, 0.9 * level, 1.1 * level, mix, mix, mix,
                           level=0.9, model="naive", step_seconds=step), path)
    return path


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    save_model(MODEL, tmp_path / "model.json")
    high_low = np.r_[[30_000.0] * 6, [10_000.0] * 6]
    return {
        "model": tmp_path / "model.json",
        "main": _forecast_file(tmp_path / "main.json", load=50_000, read=0.5),
        "reader": _forecast_file(tmp_path / "reader.json", load=high_low, read=0.95),
        "writer": _forecast_file(tmp_path / "writer.json", load=high_low[::-1], read=0.05),
        "mixed": _forecast_file(tmp_path / "mixed.json", load=10_000, read=0.5),
        "late": _forecast_file(tmp_path / "late.json", load=100, read=0.5, start=1.7e9 + STEP),
        "short": _forecast_file(tmp_path / "short.json", load=100, read=0.5, n=6),
    }


def _plan(files: dict[str, Path], *node_forecast: str) -> list[str]:
    out = ["plan", "--forecast", str(files["main"]), "--model", str(files["model"]),
           "--horizon", "12", "--method", "dp", "--served", "offered", "--scenarios", "0",
           "--confidence", "0", "-o", str(files["main"].parent / "plan.yml")]
    for item in node_forecast:
        out += ["--node-forecast", item]
    return out


def test_kairos_plan_writes_per_node_overrides_the_plan_loader_accepts(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _plan(files, f"cass1={files['reader']}", f"cass2={files['writer']}",
                 f"cass3={files['mixed']}")
    assert main(argv) == 0, capsys.readouterr().err
    assert "per-node overrides for 2 of 3 node(s)" in capsys.readouterr().out
    path = files["main"].parent / "plan.yml"
    doc = yaml.safe_load(path.read_text())
    (first,) = doc["steps"]  # the cluster holds: the step changes only the nodes
    assert first["target"] == {}
    assert first["per_node"] == {"cass1": {"concurrent_reads": 64},
                                 "cass2": {"concurrent_writes": 64}}
    assert sorted(first["live"]) == sorted(KEYS)
    prov = doc["provenance"]["per_node"]
    assert prov["nodes"]["cass1"]["class"] == "R" and prov["nodes"]["cass1"]["override"]
    assert prov["nodes"]["cass3"]["reason"] == "the cluster-wide value is already its best"
    assert [g["name"] for g in prov["groups"]] == ["R", "W", "RW"]
    expected = doc["provenance"]["expected"]
    assert expected["per_node_net_ops"] == pytest.approx(prov["gain_ops"], abs=0.1)
    assert prov["gain_ops"] > 0
    plan = load_plan(path, known_hosts=list(HOSTS))
    assert dict(plan.steps[0].per_node["cass2"]) == {"concurrent_writes": 64}
    assert "node groups: R: cass1; W: cass2; RW: cass3" in explain_text(plan)


def test_kairos_plan_without_node_forecasts_has_no_per_node(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_plan(files)) == 0, capsys.readouterr().err
    doc = yaml.safe_load((files["main"].parent / "plan.yml").read_text())
    assert "per_node" not in doc["provenance"] and doc["steps"] == []
    assert "node groups" not in explain_text(load_plan(files["main"].parent / "plan.yml"))


@pytest.mark.parametrize(("items", "expected"), [
    (["cass1"], r"--node-forecast: 'cass1' is not HOST=FILE"),
    (["cass9={reader}"], r"--node-forecast cass9=.*reader.json: 'cass9' is not one of the "
                         r"plan's hosts \(cass1, cass2, cass3"),
    (["cass1={dir}/absent.json"], r"--node-forecast cass1=.*absent.json: .*absent"),
    (["cass1={late}"], r"--node-forecast cass1=.*late.json: starts at 1700000300"),
    (["cass1={short}"], r"--node-forecast cass1=.*short.json: covers 6 steps, the plan's "
                        r"horizon 12"),
    (["cass1={reader}", "cass1={writer}"], r"--node-forecast cass1: given twice"),
])
def test_bad_node_forecast_input_is_refused_naming_the_flag_host_and_problem(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], items: list[str],
    expected: str,
) -> None:
    args = [i.format(dir=files["main"].parent, **files) for i in items]
    assert main(_plan(files, *args)) == 2
    err = capsys.readouterr().err
    assert re.search(expected, err), err
    assert "Traceback" not in err


# ------------------------------------------------------- Redis: replicas follow primaries
# The lab's calibration of a pattern pair (PROVENANCE.md there: a listpack threshold of 1024
# +150 % for hash reads on data that does not fit, +11 % for hash writes on data that does).
REPO = Path(__file__).resolve().parents[2]
REDIS_MODEL = REPO / "inventories" / "local" / "calibration" / "redis-pernode-model.json"


def _redis_test_model(path: Path) -> Path:
    """A test model: the Redis prior with allkeys-lru +0.3 for reads and -0.6 for writes
    (as the Cassandra test model above: no lab has measured such an effect)."""
    prior = load_default_model("redis")
    col = 1 + next(i for i, f in enumerate(prior.features)
                   if f.param == "maxmemory-policy")
    coef = prior.coef.copy()
    coef[prior.classes.index("read"), col] = 0.3
    coef[prior.classes.index("write"), col] = -0.6
    save_model(replace(prior, name="policy-test", coef=coef), path)
    return path
REDIS_HOSTS = ",".join(f"redis{i}" for i in range(1, 7))
REPLICAS = ("redis4=redis2", "redis5=redis3", "redis6=redis1")


def _redis_forecast(path: Path, *, load: float, read: float, n: int = 12) -> Path:
    t = 1.7e9 + STEP * np.arange(n)
    mix = {"read": np.full(n, read), "write": np.full(n, 1 - read), "other": np.zeros(n)}
    level = np.full(n, load)
    save_forecast(Forecast("redis", t, level, 0.9 * level, 1.1 * level, mix, mix, mix,
                           level=0.9, model="naive", step_seconds=STEP), path)
    return path


def _redis_plan(tmp_path: Path, *extra: str, forecasts: bool = True,
                model: Path | None = None) -> list[str]:
    """The lab's set-up (bench/per_node_redis_lab.py): reads on redis1's slots, writes on
    redis2's, redis3 idle, each primary with one replica; the Redis test model unless
    ``model``."""
    main_fc = _redis_forecast(tmp_path / "main.json", load=60_000.0, read=0.59)
    model = model or _redis_test_model(tmp_path / "policy-test.json")
    out = ["plan", "--engine", "redis", "--forecast", str(main_fc), "--model",
           str(model), "--hosts", REDIS_HOSTS, "--cl", "ONE", "--horizon", "12",
           "--method", "dp", "--scenarios", "0", "--confidence", "0", "--served", "offered",
           "--current", str(_current(tmp_path)), "-o", str(tmp_path / "plan.yml")]
    if forecasts:
        for host, load, read in (("redis1", 36_000.0, 0.95), ("redis2", 24_000.0, 0.05),
                                 ("redis3", 1.0, 0.5)):
            out += ["--node-forecast",
                    f"{host}={_redis_forecast(tmp_path / f'{host}.json', load=load, read=read)}"]
    return out + list(extra)


def _current(tmp_path: Path) -> Path:
    path = tmp_path / "current.yml"
    path.write_text("hash-max-listpack-entries: 512\n")
    return path


def test_a_redis_replica_runs_its_primarys_per_node_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The read primary bounds the cluster and gains from allkeys-lru, which the
    write-heavy cluster as a whole does not (the test model): it gets an override, its
    replica follows it, the other replicas keep the cluster-wide value; the gain is counted
    once."""
    argv = _redis_plan(tmp_path, *(a for r in REPLICAS for a in ("--replica-of", r)))
    assert main(argv) == 0, capsys.readouterr().err
    doc = yaml.safe_load((tmp_path / "plan.yml").read_text())
    first = doc["steps"][0]
    assert first["target"] == {}
    assert first["per_node"] == {"redis1": {"maxmemory-policy": "allkeys-lru"},
                                 "redis6": {"maxmemory-policy": "allkeys-lru"}}
    nodes = doc["provenance"]["per_node"]["nodes"]
    assert nodes["redis6"]["follows"] == "redis1" and nodes["redis6"]["gain_ops"] == 0
    assert nodes["redis1"]["gain_ops"] > 0 and "follows" not in nodes["redis1"]
    assert doc["provenance"]["per_node"]["gain_ops"] == pytest.approx(
        nodes["redis1"]["gain_ops"], abs=0.1)
    groups = {tuple(g["hosts"]) for g in doc["provenance"]["per_node"]["groups"]}
    assert ("redis1", "redis6") in groups
    load_plan(tmp_path / "plan.yml", known_hosts=REDIS_HOSTS.split(","))


def test_on_the_labs_calibration_every_node_takes_1024_and_none_an_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The lab's calibration has 1024 gain for both classes, and a listpack threshold takes
    a restart in a plan: the cluster moves there with batches, no node gets values of its
    own, and the plan says why."""
    argv = _redis_plan(tmp_path, *(a for r in REPLICAS for a in ("--replica-of", r)),
                       model=REDIS_MODEL)
    assert main(argv) == 0, capsys.readouterr().err
    doc = yaml.safe_load((tmp_path / "plan.yml").read_text())
    (first,) = doc["steps"]
    assert first["target"] == {"hash-max-listpack-entries": 1024} and first["per_node"] == {}
    assert first["restart"] == ["hash-max-listpack-entries"] and first["batches"]
    assert doc["provenance"]["per_node"] == {"keys": [], "reason": NO_NODE_KEYS}
    assert "plan: no per-node overrides: the model has no effect for any node-level" in (
        capsys.readouterr().err)


@pytest.mark.parametrize(("extra", "expected"), [
    (["--replica-of", "redis4"], r"--replica-of: 'redis4' is not REPLICA=PRIMARY, e\.g\. "
                                 r"--replica-of redis4=redis1"),
    (["--replica-of", "redis4=redis2", "--replica-of", "redis4=redis1"],
     r"--replica-of redis4: given twice \(redis2, redis1\)"),
    (["--replica-of", "redis9=redis2"], r"--replica-of redis9=redis2: 'redis9' is not one of"),
    (["--replica-of", "redis4=redis5", "--replica-of", "redis5=redis3"],
     r"--replica-of redis4=redis5: redis5 is itself a replica"),
    (["--replica-of", "redis1=redis2"], r"--node-forecast redis1=.*: redis1 is a replica of "
                                        r"redis2 \(--replica-of\)"),
])
def test_bad_replica_of_is_refused_naming_the_flag_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str,
) -> None:
    assert main(_redis_plan(tmp_path, *extra)) == 2
    assert re.search(expected, capsys.readouterr().err)
    assert not (tmp_path / "plan.yml").exists()


def test_replica_of_without_node_forecasts_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _redis_plan(tmp_path, "--replica-of", "redis4=redis2", forecasts=False)
    assert main(argv) == 2
    assert "--replica-of: says whom a replica follows in the per-node choice; give " \
        "--node-forecast" in capsys.readouterr().err
    assert not (tmp_path / "plan.yml").exists()


def test_replica_of_is_refused_for_cassandra(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*_plan(files, f"cass1={files['reader']}"), "--replica-of", "cass2=cass1"]
    assert main(argv) == 2
    assert "--replica-of: cassandra has no replica nodes (Redis' replicas only)" in (
        capsys.readouterr().err)


# ---------------------------------------------- Redis: each node serves its own keys alone
def test_shard_capacity_is_what_the_nodes_serve_once_one_saturates() -> None:
    caps = np.array([[800.0, 800.0], [1600.0, 1600.0]])  # cap_n: own capacity cap_n / 2
    loads = np.array([[500.0, 100.0], [700.0, 200.0]])
    # point 0: node 0 is past its own 400: it serves 400, node 1 its 700; under a min the
    # first node to saturate would bound the cluster at 400 / (500 / 1200) = 960
    # point 1: none saturates: the load at which the first would (both at 1200)
    np.testing.assert_allclose(shard_capacity(loads, caps), [1100.0, 1200.0])
    np.testing.assert_allclose(min_capacity(loads, caps), [960.0, 1200.0])


def test_a_redis_node_that_saturates_alone_gains_from_its_own_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """The write primary (redis2) would saturate first, so under Cassandra's rule nothing the
    read primary does adds served work; in a Redis Cluster each primary serves its own keys,
    and redis1, past its own capacity, serves more with allkeys-lru (the test model)."""
    argv = _redis_plan(tmp_path, *(a for r in REPLICAS for a in ("--replica-of", r)))
    for host, load, read in (("redis1", 22_000.0, 0.95), ("redis2", 40_000.0, 0.05)):
        at = argv.index(next(a for a in argv if a.startswith(f"{host}=")))
        fc = _redis_forecast(tmp_path / f"{host}-alone.json", load=load, read=read)
        argv[at] = f"{host}={fc}"
    main_fc = argv.index("--forecast") + 1
    argv[main_fc] = str(_redis_forecast(tmp_path / "main-alone.json", load=62_001.0, read=0.36))
    assert main(argv) == 0, capsys.readouterr().err
    doc = yaml.safe_load((tmp_path / "plan.yml").read_text())
    assert doc["steps"][0]["per_node"] == {"redis1": {"maxmemory-policy": "allkeys-lru"},
                                           "redis6": {"maxmemory-policy": "allkeys-lru"}}
    per_node = doc["provenance"]["per_node"]
    assert "each node serves its own keys" in per_node["rule"]
    nodes = per_node["nodes"]
    own, chosen = (nodes["redis1"][k] for k in ("capacity_cluster_wide", "capacity_chosen"))
    assert own < 22_000 < chosen  # saturated, then not
    assert nodes["redis1"]["override"] and nodes["redis1"]["gain_ops"] == pytest.approx(
        (22_000 - own) * STEP * 12, rel=1e-3)
    # redis2 would saturate first: under a min, redis1's values would add nothing
    loads, other = np.array([[22_000.0], [40_000.0]]), nodes["redis2"]["capacity_chosen"]
    assert min_capacity(loads, 2 * np.array([[own], [other]])) == pytest.approx(
        min_capacity(loads, 2 * np.array([[chosen], [other]])))
