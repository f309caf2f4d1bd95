"""A plan made on a ring passes the pre-flight of that ring (2 DCs, 16 vnodes per node).

The ring is built the way ``cassandra_cluster_facts`` writes the live ring: cassandra-driver's
own NetworkTopologyStrategy gives every token range's replicas (``token_map.get_replicas``),
nodes named by their inventory names, replication as ``system_schema.keyspaces`` has it
(strings, with the class). ``kairos plan --ring`` (in-process, small GA) plans on it; every
batch of every step must then pass ``planner.executor.rollout.preflight`` on the same ring file, as
``kairos rollout preflight`` runs it, and ``kairos validate-plan``/``explain --ring`` agree.

The plan the autopilot used to make (``--hosts ... --rf 3``: one DC, one token per node) is
refused on that ring: 2 of its 4 batches are unsafe at LOCAL_QUORUM (the measured failure).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cassandra.metadata import Murmur3Token, NetworkTopologyStrategy
from cassandra.policies import SimpleConvictionPolicy
from cassandra.pool import Host

from planner.cli import main
from planner.executor.rollout import RolloutRefused, preflight, prepare
from planner.plan import load_plan
from planner.topology.ring import check_batch, load_ring
from planner.workload.series import WorkloadSeries, save_trace

#: Two DCs of four nodes, one rack each, RF 3 per DC, 16 vnodes per node.
NODES = [(f"cass-dc{d}-{i}", f"10.{d}.0.{i}", f"dc{d}", "rack1")
         for d in (1, 2) for i in range(1, 5)]  # fmt: skip
RF = {"dc1": "3", "dc2": "3"}
VNODES = 16
GA = ["--method", "ga", "--population", "8", "--generations", "3", "--searches", "1"]


def live_ring_json(seed: int = 1) -> dict[str, Any]:
    """The ring description cassandra_cluster_facts writes for NODES (driver's replicas)."""
    rng = random.Random(seed)
    owner: dict[Any, Host] = {}
    by_address: dict[str, str] = {}
    for name, address, dc, rack in NODES:
        host = Host(address, SimpleConvictionPolicy, datacenter=dc, rack=rack)
        by_address[address] = name
        for _ in range(VNODES):
            owner[Murmur3Token(rng.randrange(-(2**63), 2**63))] = host
    ring = sorted(owner)
    replicas = NetworkTopologyStrategy(RF).make_token_replica_map(owner, ring)
    return {
        "nodes": [{"host": n, "address": a, "dc": dc, "rack": r}
                  for n, a, dc, r in sorted(NODES, key=lambda x: x[1])],
        "keyspaces": {"shop": {"replication": {
            "class": "org.apache.cassandra.locator.NetworkTopologyStrategy", **RF}}},
        "token_ranges": [
            {"start": ring[i - 1].value, "end": token.value,
             "replicas": {"shop": [by_address[str(h.address)] for h in replicas[token]]}}
            for i, token in enumerate(ring)
        ],
    }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("live-ring")
    ring = tmp / "live-ring.json"
    ring.write_text(json.dumps(live_ring_json(), indent=1, sort_keys=True))
    n, step = 40, 20.0
    read = np.where(np.arange(n) < 20, 0.1, 0.9)  # write-heavy, then read-heavy
    save_trace(
        WorkloadSeries(
            engine="cassandra", timestamps=1.8e9 + step * np.arange(n), load=np.full(n, 300.0),
            mix={"read": read, "update": 1 - read, "insert": np.zeros(n), "scan": np.zeros(n)},
            step_seconds=step,
        ),
        tmp / "trace.csv",
    )  # fmt: skip
    forecast = tmp / "forecast.json"
    assert main(["forecast", "--trace", str(tmp / "trace.csv"), "--horizon", "30", "--model",
                 "naive", "--out", str(forecast)]) == 0  # fmt: skip
    return {"dir": tmp, "ring": ring, "forecast": forecast}


def make_plan(inputs: dict[str, Path], name: str, *ring_args: str, cl: str) -> Path:
    out = inputs["dir"] / f"{name}.yml"
    # A compaction change names its tables (the autopilot passes the inventory's).
    assert main(["plan", "--forecast", str(inputs["forecast"]), *ring_args, "--cl", cl,
                 "--horizon", "30", "--restart-seconds", "45", *GA, "--tables", "shop.orders",
                 "-o", str(out)]) == 0  # fmt: skip
    return out


def test_the_ring_is_what_the_facts_module_writes_and_load_ring_reads(
    inputs: dict[str, Path],
) -> None:
    ring = load_ring(inputs["ring"])
    assert ring.hosts == tuple(n for n, *_ in sorted(NODES, key=lambda x: x[1]))
    assert ring.replication == {"shop": {"dc1": 3, "dc2": 3}}
    assert {n.dc for n in ring.nodes} == {"dc1", "dc2"}
    assert len(json.loads(inputs["ring"].read_text())["token_ranges"]) == len(NODES) * VNODES
    assert all(len(rs.replicas) == 6 for rs in ring.replica_sets)


@pytest.mark.parametrize("cl", ["LOCAL_QUORUM", "QUORUM"])
def test_a_plan_made_on_the_live_ring_passes_that_ring_s_preflight(
    inputs: dict[str, Path], cl: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_plan(inputs, f"live-{cl}", "--ring", str(inputs["ring"]), cl=cl)
    plan = load_plan(path)
    ring = load_ring(inputs["ring"])  # as `kairos rollout preflight --ring` reads it
    restarting = [s for s in plan.steps if s.batches]
    assert restarting, "the plan has no restart step: nothing was checked"
    assert plan.availability.consistency_level == cl
    for step in plan.steps:
        assert sorted(h for b in step.batches for h in b) == (
            sorted(ring.hosts) if step.restart else []
        )
        for batch in step.batches:
            check_batch(ring, batch, consistency_level=cl,
                        tolerated_failures=plan.availability.tolerated_failures)
        rollout = prepare(path, hosts=ring.hosts, step_id=step.id)
        preflight(rollout, ring)  # raises RolloutRefused on an unsafe batch
    capsys.readouterr()
    assert main(["validate-plan", str(path), "--ring", str(inputs["ring"])]) == 0
    n = sum(len(s.batches) for s in plan.steps)
    assert capsys.readouterr().out.strip().endswith(
        f"; {n} batch(es) safe for {cl} on the ring {inputs['ring']}"
    )
    assert main(["explain", str(path), "--ring", str(inputs["ring"])]) == 0
    text = capsys.readouterr().out
    assert f"Batch safety on the ring {inputs['ring']}: {n} batch(es) checked, all safe" in text
    assert "UNSAFE" not in text


def test_the_invented_ring_s_plan_is_refused_on_the_live_ring(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = ",".join(n for n, *_ in NODES)
    path = make_plan(inputs, "invented", "--hosts", hosts, "--rf", "3", cl="LOCAL_QUORUM")
    plan = load_plan(path)
    ring = load_ring(inputs["ring"])
    (step,) = [s for s in plan.steps if s.batches]
    assert len(step.batches) == 4
    with pytest.raises(RolloutRefused, match=r"pre-flight: batch \d \["):
        preflight(prepare(path, hosts=ring.hosts, step_id=step.id), ring)
    capsys.readouterr()
    assert main(["validate-plan", str(path), "--ring", str(inputs["ring"])]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"kairos validate-plan: error: {path}: 2 unsafe batch(es) on the ring {inputs['ring']}:\n"
    ), err
    assert f"  step {step.id} batch 1 of 4 [cass-dc1-1, cass-dc1-4]: batch unsafe for " in err
    assert " in dc1 up for keyspace 'shop' range (" in err


def test_the_plan_records_why_its_batches_are_safe_and_explain_shows_it(
    inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """provenance.batching (issue 17): count, bound, and one reason per batch."""
    path = make_plan(inputs, "reasons", "--ring", str(inputs["ring"]), cl="LOCAL_QUORUM")
    batching = load_plan(path).provenance["batching"]
    assert batching["batches"] == len(batching["reasons"]) >= batching["lower_bound"]
    for reason in batching["reasons"]:
        assert re.fullmatch(r"tightest replica set keeps 2 of 3 replicas in dc[12] up; "
                            r"LOCAL_QUORUM needs 2", reason), reason
    capsys.readouterr()
    assert main(["explain", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    proof = "minimal" if batching["exact"] else "not proved minimal"
    i = lines.index(f"Batches when planned: {batching['batches']}, lower bound "
                    f"{batching['lower_bound']} ({proof})")
    assert lines[i + 1] == f"  batch 1: {batching['reasons'][0]}"
