"""Topology and availability: safe batches, pre-flight checks, ring descriptions."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.cli import main
from planner.errors import ValidationError
from planner.topology.batching import safe_batches
from planner.topology.ring import (
    Ring,
    UnsafeBatchError,
    check_batch,
    load_ring,
    replica_neighbours,
    requirements,
)


def lab_ring_description() -> dict:
    """The lab as cassandra-driver's token map describes it: 3 nodes, RF 3, one token each."""
    tokens = [-9223372036854775808, -3074457345618258603, 3074457345618258602]
    hosts = [("cass1", "127.0.0.1"), ("cass2", "127.0.0.2"), ("cass3", "127.0.0.3")]
    ranges = []
    for i, end in enumerate(tokens):
        start = tokens[i - 1]
        # replicas by address, as token_map.get_replicas returns Host objects
        replicas = [hosts[(i + k) % 3][1] for k in range(3)]
        ranges.append({"start": start, "end": end, "replicas": {"kairos": replicas}})
    return {
        "nodes": [
            {"host": h, "address": a, "dc": "datacenter1", "rack": "rack1"} for h, a in hosts
        ],
        "keyspaces": {
            "kairos": {"replication": {"class": "NetworkTopologyStrategy", "datacenter1": 3}}
        },
        "token_ranges": ranges,
    }


def test_lab_ring_from_driver_shape_resolves_addresses_to_hosts() -> None:
    ring = Ring.from_dict(lab_ring_description())
    assert ring.hosts == ("cass1", "cass2", "cass3")
    assert len(ring.replica_sets) == 1  # all three ranges share the same replica set
    assert set(ring.replica_sets[0].replicas) == {"cass1", "cass2", "cass3"}


@pytest.mark.parametrize(
    ("cl", "expected"),
    [("ONE", 2), ("TWO", 3), ("QUORUM", 3), ("LOCAL_QUORUM", 3), ("LOCAL_ONE", 2)],
)
def test_lab_batches(cl: str, expected: int) -> None:
    plan = safe_batches(Ring.from_dict(lab_ring_description()), consistency_level=cl)
    assert len(plan.batches) == expected
    assert plan.exact
    assert sorted(h for b in plan.batches for h in b) == ["cass1", "cass2", "cass3"]


def test_rf_equal_cl_is_refused_with_a_clear_message() -> None:
    ring = Ring.from_dict(lab_ring_description())
    with pytest.raises(UnsafeBatchError, match=r"no safe batch for ALL.*RF = CL.*aggressive"):
        safe_batches(ring, consistency_level="ALL")


def test_rf_equal_cl_aggressive_takes_everything_at_once() -> None:
    ring = Ring.from_dict(lab_ring_description())
    plan = safe_batches(ring, consistency_level="ALL", aggressive=True)
    assert plan.aggressive
    assert plan.batches == (("cass1", "cass2", "cass3"),)


def test_tolerated_failure_on_rf3_quorum_is_refused() -> None:
    ring = Ring.simple(["a", "b", "c"], rf=3)
    with pytest.raises(UnsafeBatchError, match=r"host 'a'.*QUORUM needs 2 plus 1 spare"):
        safe_batches(ring, consistency_level="QUORUM", tolerated_failures=1)


def test_tolerated_failure_on_rf5_quorum_means_one_at_a_time() -> None:
    ring = Ring.synthetic(10, rf=5)
    plan = safe_batches(ring, consistency_level="QUORUM", tolerated_failures=1)
    # cap per replica set = 5 - 1 - 3 = 1: no two neighbours within 5 positions together
    assert len(plan.batches) == 5 and plan.exact


@pytest.mark.parametrize(
    ("rf", "cl", "n"),
    [(3, "ONE", 6), (3, "ONE", 12), (3, "TWO", 9), (3, "QUORUM", 9), (3, "QUORUM", 12),
     (4, "ONE", 8), (4, "TWO", 8), (4, "THREE", 8), (5, "ONE", 10), (5, "TWO", 10),
     (5, "QUORUM", 15), (2, "ONE", 8), (6, "QUORUM", 12)],
)
def test_sophia_closed_form_for_one_token_per_node(rf: int, cl: str, n: int) -> None:
    """SOPHIA: N_minCL = CL*N/RF, R = N - N_minCL, steps = N/R = RF/(RF-CL) (rounded up)."""
    cl_count = {"ONE": 1, "TWO": 2, "THREE": 3, "QUORUM": rf // 2 + 1}[cl]
    plan = safe_batches(Ring.synthetic(n, rf=rf), consistency_level=cl)
    assert len(plan.batches) == math.ceil(rf / (rf - cl_count))
    assert plan.exact and plan.lower_bound == len(plan.batches)


def test_whole_racks_go_together_when_replicas_span_racks() -> None:
    ring = Ring.synthetic(30, vnodes=8, rf=3, racks=3, seed=4)
    plan = safe_batches(ring, consistency_level="QUORUM")
    assert len(plan.batches) == 3 and plan.exact
    for batch in plan.batches:
        assert len({ring.node(h).rack for h in batch}) == 1
        assert len(batch) == 10


def test_local_quorum_batches_datacenters_independently() -> None:
    ring = Ring.synthetic(24, vnodes=4, rf=3, dcs=2, racks=3, seed=2)
    plan = safe_batches(ring, consistency_level="LOCAL_QUORUM")
    assert len(plan.batches) == 3
    assert all({ring.node(h).dc for h in b} == {"dc1", "dc2"} for b in plan.batches)


def test_large_ring_reports_a_lower_bound_and_a_safe_answer() -> None:
    ring = Ring.synthetic(200, vnodes=16, rf=3, racks=1, seed=3)
    plan = safe_batches(ring, consistency_level="QUORUM", search_moves=3_000)
    assert plan.lower_bound <= len(plan.batches)
    for batch in plan.batches:
        check_batch(ring, batch, consistency_level="QUORUM")


def test_check_batch_names_host_and_replica_set() -> None:
    ring = Ring.from_dict(lab_ring_description())
    with pytest.raises(
        UnsafeBatchError,
        match=r"taking down cass1, cass2 leaves 1 of 3 replica\(s\) up .*replicas \[cass1, "
        r"cass2, cass3\]; QUORUM needs 2",
    ):
        check_batch(ring, ["cass1", "cass2"], consistency_level="QUORUM")


def test_check_batch_counts_nodes_already_down() -> None:
    ring = Ring.from_dict(lab_ring_description())
    check_batch(ring, ["cass1"], consistency_level="QUORUM")
    with pytest.raises(UnsafeBatchError, match=r"with cass3 already down"):
        check_batch(ring, ["cass1"], down=["cass3"], consistency_level="QUORUM")


def test_check_batch_unknown_host() -> None:
    ring = Ring.from_dict(lab_ring_description())
    with pytest.raises(ValidationError, match=r"batch\[1\]: unknown host 'cass9'"):
        check_batch(ring, ["cass1", "cass9"], consistency_level="ONE")


def test_replica_neighbours_are_the_hosts_sharing_a_replica_set_with_the_batch() -> None:
    lab = Ring.from_dict(lab_ring_description())
    assert replica_neighbours(lab, ["cass1"], consistency_level="QUORUM") == ["cass2", "cass3"]
    # One token per node, RF 3: a node's ranges are replicated on its two ring successors,
    # and it replicates its two predecessors' ranges: four neighbours of 12, whatever their
    # number.
    ring = Ring.synthetic(12, rf=3, seed=1)
    hosts = list(ring.hosts)
    near = replica_neighbours(ring, [hosts[5]], consistency_level="QUORUM")
    assert near == sorted(near, key=hosts.index) and len(near) == 4
    sharing = {h for rs in ring.replica_sets if hosts[5] in rs.replicas for h in rs.replicas}
    assert set(near) == sharing - {hosts[5]}
    # LOCAL_QUORUM counts a DC's replicas only: the other DC's are no neighbours.
    two_dcs = Ring.synthetic(12, rf=3, dcs=2, seed=1)
    node = two_dcs.hosts[0]
    local = replica_neighbours(two_dcs, [node], consistency_level="LOCAL_QUORUM")
    every = replica_neighbours(two_dcs, [node], consistency_level="QUORUM")
    same_dc = [h for h in every if two_dcs.node(h).dc == two_dcs.node(node).dc]
    assert local == same_dc and len(every) > len(local)
    with pytest.raises(ValidationError, match=r"batch\[0\]: unknown host 'cass9'"):
        replica_neighbours(lab, ["cass9"], consistency_level="QUORUM")


def test_a_large_vnode_ring_gives_a_node_a_fraction_of_the_ring_as_neighbours() -> None:
    ring = Ring.synthetic(1000, vnodes=16, rf=3, seed=3)
    near = replica_neighbours(ring, [ring.hosts[0]], consistency_level="QUORUM")
    assert 16 <= len(near) <= 4 * 16  # at most two successors and two predecessors per token


def test_unknown_consistency_level() -> None:
    with pytest.raises(ValidationError, match=r"unknown 'MOST'"):
        safe_batches(Ring.simple(["a", "b", "c"], rf=3), consistency_level="MOST")


def test_cl_needing_more_than_rf() -> None:
    with pytest.raises(ValidationError, match=r"THREE needs 3 replicas but keyspace .* RF 2"):
        requirements(Ring.simple(["a", "b", "c"], rf=2), consistency_level="THREE")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["token_ranges"][0]["replicas"].update(kairos=["cass1", "cass9"]),
         r"token_ranges\[0\]\.replicas\.kairos\[1\]: unknown host 'cass9'"),
        (lambda d: d["nodes"].append({"host": "cass1"}), r"nodes\[3\]\.host: duplicate"),
        (lambda d: d["keyspaces"]["kairos"]["replication"].update(dc9=3),
         r"unknown datacenter 'dc9'"),
        (lambda d: d["token_ranges"][1]["replicas"].update(other=["cass1"]),
         r"token_ranges\[1\]\.replicas: unknown keyspace 'other'"),
    ],
)
def test_bad_ring_descriptions_are_refused(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = lab_ring_description()
    mutate(data)
    with pytest.raises(ValidationError, match=message):
        Ring.from_dict(data)


def test_ring_round_trips_through_yaml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import yaml

    ring = Ring.synthetic(12, vnodes=2, rf=3, racks=2, seed=1)
    path = tmp_path / "ring.yml"
    path.write_text(yaml.safe_dump(ring.to_dict()))
    again = load_ring(path)
    assert again.hosts == ring.hosts
    assert {frozenset(r.replicas) for r in again.replica_sets} == {
        frozenset(r.replicas) for r in ring.replica_sets
    }


def test_cli_batches_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batches", "--hosts", "cass1,cass2,cass3", "--rf", "3", "--cl", "QUORUM",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batches"] == [["cass1"], ["cass2"], ["cass3"]] and out["exact"]


def test_cli_batches_refuses_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batches", "--hosts", "cass1,cass2,cass3", "--cl", "ALL"]) == 2
    assert "RF = CL" in capsys.readouterr().err


# ----------------------------------------------------------------- properties
CLS = ["ONE", "TWO", "THREE", "QUORUM", "LOCAL_ONE", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"]


@st.composite
def rings(draw: st.DrawFn) -> tuple[Ring, str, int]:
    dcs = draw(st.integers(1, 2))
    nodes = draw(st.integers(dcs, 14))
    vnodes = draw(st.integers(1, 4))
    racks = draw(st.integers(1, 3))
    rf = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 10_000))
    ring = Ring.synthetic(nodes, vnodes=vnodes, rf=rf, dcs=dcs, racks=racks, seed=seed)
    cl = draw(st.sampled_from(CLS))
    tolerate = draw(st.integers(0, 2))
    return ring, cl, tolerate


def _replicas_up_ok(ring: Ring, batch: set[str], cl: str, tolerate: int) -> bool:
    """Independent re-statement of the rule, straight from the replica sets."""
    for rs in ring.replica_sets:
        rf_by_dc = ring.replication[rs.keyspace]
        if cl in ("LOCAL_ONE", "LOCAL_QUORUM", "EACH_QUORUM"):
            groups = [([h for h in rs.replicas if ring.node(h).dc == dc], rf)
                      for dc, rf in rf_by_dc.items()]
        else:
            groups = [(list(rs.replicas), sum(rf_by_dc.values()))]
        for members, rf in groups:
            need = {"ONE": 1, "LOCAL_ONE": 1, "TWO": 2, "THREE": 3, "ALL": rf}.get(cl, rf // 2 + 1)
            up = sum(1 for h in members if h not in batch)
            if up - tolerate < need:
                return False
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rings())
def test_property_no_batch_leaves_a_replica_set_below_the_cl(case) -> None:  # type: ignore[no-untyped-def]
    ring, cl, tolerate = case
    try:
        plan = safe_batches(ring, consistency_level=cl, tolerated_failures=tolerate)
    except ValidationError:
        return  # CL needs more replicas than RF: refused up front
    except UnsafeBatchError:
        # refused: then some single node really cannot go down
        assert any(
            not _replicas_up_ok(ring, {h}, cl, tolerate) for h in ring.hosts
        )
        return
    assert sorted(h for b in plan.batches for h in b) == sorted(ring.hosts)
    assert plan.lower_bound <= len(plan.batches)
    for batch in plan.batches:
        assert _replicas_up_ok(ring, set(batch), cl, tolerate)
        check_batch(ring, batch, consistency_level=cl, tolerated_failures=tolerate)


def _set_partitions(items: list[str]):  # type: ignore[no-untyped-def]
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]
        yield [[first], *part]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 7), st.integers(1, 3), st.integers(2, 4), st.sampled_from(["ONE", "QUORUM"]),
       st.integers(0, 1000))
def test_property_exact_mode_is_minimal(n: int, vnodes: int, rf: int, cl: str, seed: int) -> None:
    ring = Ring.synthetic(n, vnodes=vnodes, rf=rf, seed=seed)
    try:
        plan = safe_batches(ring, consistency_level=cl)
    except UnsafeBatchError:
        return
    best = min(
        len(p) for p in _set_partitions(list(ring.hosts))
        if all(_replicas_up_ok(ring, set(b), cl, 0) for b in p)
    )
    assert plan.exact and len(plan.batches) == best
