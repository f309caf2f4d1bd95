"""``kairos validate-plan`` / ``kairos explain`` check every batch on a ring (exact messages).

A plan whose batches break QUORUM used to pass both and be refused only by the live
pre-flight; given a ring (``--ring``, ``--hosts --rf``, ``--inventory --rf``) both now
refuse it, naming the step, the batch, the nodes and the replica set left short.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.cli import main
from planner.topology.inventory import inventory_nodes, inventory_ring
from planner.topology.ring import Ring, check_batch

from .test_plan import good_plan

HOSTS = "cass1,cass2,cass3"
SIMPLE = f"the ring {HOSTS} (RF 3, one token per node)"
#: cass1 and cass2 together leave one of three replicas: QUORUM needs two.
WHY = (
    "batch unsafe for QUORUM with 0 tolerated failure(s): taking down cass1, cass2 leaves "
    "1 of 3 replica(s) up for keyspace 'kairos' range (3074457345618258602, "
    "-9223372036854775808] replicas [cass1, cass2, cass3]; QUORUM needs 2"
)


def write(tmp: Path, doc: dict[str, Any], name: str = "plan.yml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(doc))
    return path


def quorum_breaking_plan() -> dict[str, Any]:
    doc = good_plan()
    doc["steps"][0]["batches"] = [["cass1", "cass2"], ["cass3"]]
    return doc


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(command: str, path: Path, ring: str) -> str:
    """What ``command`` prints refusing the quorum-breaking plan at ``path`` on ``ring``."""
    return (
        f"kairos {command}: error: {path}: 1 unsafe batch(es) on {ring}:\n"
        f"  step s1 batch 1 of 2 [cass1, cass2]: {WHY}\n"
    )


def accepted(path: Path, safety: str) -> str:
    """What validate-plan prints accepting the two-step plan at ``path``; ``safety`` ends it."""
    return f"{path}: valid cassandra plan for 'lab': 2 step(s), 1 with restarts; {safety}\n"


# ----------------------------------------------------------------- validate-plan
def test_validate_plan_refuses_a_quorum_breaking_batch_on_a_3_node_rf3_ring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, quorum_breaking_plan())
    rc, out, err = run(capsys, "validate-plan", str(path), "--hosts", HOSTS, "--rf", "3")
    assert rc == 2 and out == ""
    assert err == refused("validate-plan", path, SIMPLE)


def test_without_a_ring_validate_plan_says_safety_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, quorum_breaking_plan())
    rc, out, _ = run(capsys, "validate-plan", str(path), "--hosts", HOSTS)
    assert rc == 0
    assert out == accepted(path, "batch safety not checked: no ring given")


def test_validate_plan_on_a_ring_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring = tmp_path / "ring.json"
    ring.write_text(json.dumps(Ring.simple(["cass1", "cass2", "cass3"], rf=3).to_dict()))
    bad = write(tmp_path, quorum_breaking_plan(), "bad.yml")
    rc, _, err = run(capsys, "validate-plan", str(bad), "--ring", str(ring))
    assert rc == 2
    assert err == refused("validate-plan", bad, f"the ring {ring}")
    good = write(tmp_path, good_plan(), "good.yml")
    rc, out, _ = run(capsys, "validate-plan", str(good), "--ring", str(ring))
    assert rc == 0
    assert out == accepted(good, f"3 batch(es) safe for QUORUM on the ring {ring}")


def test_validate_plan_json_lists_the_unsafe_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, quorum_breaking_plan())
    rc, out, _ = run(capsys, "validate-plan", str(path), "--hosts", HOSTS, "--rf", "3", "--json")
    assert rc == 1
    verdict = json.loads(out)
    assert verdict["valid"] is False
    assert verdict["unsafe_batches"] == [
        {"step": "s1", "batch": 1, "hosts": ["cass1", "cass2"], "reason": WHY}
    ]
    good = write(tmp_path, good_plan(), "good.yml")
    rc, out, _ = run(capsys, "validate-plan", str(good), "--hosts", HOSTS, "--rf", "3", "--json")
    assert rc == 0
    assert json.loads(out)["batch_safety"] == f"3 batch(es) safe for QUORUM on {SIMPLE}"


def test_every_unsafe_batch_is_named_and_tolerated_failures_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = good_plan()
    doc["availability"]["consistency_level"] = "ONE"
    doc["availability"]["tolerated_failures"] = 1
    doc["steps"][0]["batches"] = [["cass1"], ["cass2", "cass3"]]
    path = write(tmp_path, doc)
    rc, _, err = run(capsys, "validate-plan", str(path), "--hosts", HOSTS, "--rf", "3")
    assert rc == 2
    assert err.splitlines()[1:] == [
        "  step s1 batch 2 of 2 [cass2, cass3]: batch unsafe for ONE with 1 tolerated "
        "failure(s): taking down cass2, cass3 leaves 1 of 3 replica(s) up for keyspace "
        "'kairos' range (3074457345618258602, -9223372036854775808] replicas "
        "[cass1, cass2, cass3]; ONE needs 1 plus 1 spare",
    ]


def test_an_aggressive_plan_is_not_checked_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = quorum_breaking_plan()
    doc["availability"]["aggressive"] = True
    path = write(tmp_path, doc)
    rc, out, _ = run(capsys, "validate-plan", str(path), "--hosts", HOSTS, "--rf", "3")
    assert rc == 0
    assert out.endswith(
        "; batch safety not checked: the plan is AGGRESSIVE (availability may drop)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rf", "3"], "--rf: give the hosts it replicates over (--hosts or --inventory)"),
        (["--hosts", HOSTS, "--rf", "0"], "--rf: must be at least 1, got 0"),
        (["--ring", "r.json", "--rf", "3"],
         "--rf: the ring file gives the replication; drop --rf or --ring"),
    ],
)
def test_contradictory_ring_options_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = write(tmp_path, good_plan())
    rc, _, err = run(capsys, "validate-plan", str(path), *args)
    assert rc == 2
    assert err == f"kairos validate-plan: error: {message}\n"


def test_an_unreadable_ring_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, good_plan())
    rc, out, err = run(capsys, "validate-plan", str(path), "--ring", "/nonexistent/ring.json")
    assert rc == 2 and out == ""
    assert err.startswith("kairos validate-plan: error: ") and "/nonexistent/ring.json" in err


def test_a_ring_for_a_redis_plan_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = {**copy.deepcopy(good_plan()), "engine": "redis", "current_config": {},
           "steps": []}  # fmt: skip
    path = write(tmp_path, doc)
    rc, out, _ = run(capsys, "validate-plan", str(path), "--hosts", "r1,r2")
    assert rc == 0 and "batch safety" not in out
    rc, _, err = run(capsys, "validate-plan", str(path), "--hosts", "r1,r2", "--rf", "2")
    assert rc == 2
    assert err == (
        "kairos validate-plan: error: --ring/--rf/--inventory: batch safety is checked for "
        "Cassandra plans, this is a redis plan\n"
    )


# ------------------------------------------------------------------ inventory
def two_dc_inventory(tmp: Path) -> Path:
    """The shape of inventories/example: DC per child group, rack per host, group_vars."""
    inv = tmp / "inventory"
    (inv / "group_vars" / "cassandra_dc2").mkdir(parents=True)
    (inv / "host_vars").mkdir()
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "cassandra": {"children": {
            "cassandra_dc1": {"vars": {"cassandra_dc": "dc1"}, "hosts": {
                "a1": {"cassandra_rack": "ra"}, "b1": {"cassandra_rack": "rb"},
                "c1": {"cassandra_rack": "rc"}}},
            "cassandra_dc2": {"hosts": {"a2": {"cassandra_rack": "ra"},
                                        "b2": {"cassandra_rack": "rb"}, "c2": None}},
        }},
        "redis": {"hosts": {"r1": None}},
    }}}, sort_keys=False))  # fmt: skip
    (inv / "group_vars" / "cassandra_dc2" / "main.yml").write_text("cassandra_dc: dc2\n")
    (inv / "group_vars" / "all.yml").write_text(
        "cassandra_rack: rack1\nsecret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n"
    )
    (inv / "host_vars" / "c2.yml").write_text("cassandra_rack: rc\n")
    return inv


def test_the_inventory_gives_hosts_dcs_and_racks(tmp_path: Path) -> None:
    nodes = inventory_nodes(two_dc_inventory(tmp_path))
    assert nodes == [
        {"host": "a1", "dc": "dc1", "rack": "ra"}, {"host": "b1", "dc": "dc1", "rack": "rb"},
        {"host": "c1", "dc": "dc1", "rack": "rc"}, {"host": "a2", "dc": "dc2", "rack": "ra"},
        {"host": "b2", "dc": "dc2", "rack": "rb"}, {"host": "c2", "dc": "dc2", "rack": "rc"},
    ]  # fmt: skip
    ring = inventory_ring(nodes, rf=3)
    assert ring.replication == {"kairos": {"dc1": 3, "dc2": 3}}
    check_batch(ring, ["a1", "a2"], consistency_level="LOCAL_QUORUM")


def test_the_shipped_inventories_are_readable() -> None:
    repo = Path(__file__).resolve().parents[2]
    assert [n["host"] for n in inventory_nodes(repo / "inventories" / "local")] == [
        "cass1", "cass2", "cass3"]  # fmt: skip
    example = inventory_nodes(repo / "inventories" / "example")
    assert {(n["dc"], n["rack"]) for n in example} == {
        (dc, f"rack-{r}") for dc in ("dc1", "dc2") for r in "abc"}  # fmt: skip


def test_validate_plan_on_the_inventory_ring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = two_dc_inventory(tmp_path)
    doc = good_plan()
    doc["availability"]["consistency_level"] = "LOCAL_QUORUM"
    doc["steps"][0]["batches"] = [["a1", "a2"], ["b1", "c1"], ["b2", "c2"]]
    path = write(tmp_path, doc)
    rc, _, err = run(capsys, "validate-plan", str(path), "--inventory", str(inv), "--rf", "3")
    assert rc == 2
    source = f"the ring of the inventory {inv} (RF 3 in dc1, dc2, one token per node)"
    lines = err.splitlines()
    assert lines[0] == f"kairos validate-plan: error: {path}: 2 unsafe batch(es) on {source}:"
    assert lines[1].startswith(
        "  step s1 batch 2 of 3 [b1, c1]: batch unsafe for LOCAL_QUORUM with 0 tolerated "
        "failure(s): taking down b1, c1 leaves 1 of 3 replica(s) in dc1 up for keyspace 'kairos'"
    )
    assert lines[2].startswith("  step s1 batch 3 of 3 [b2, c2]: ")
    doc["steps"][0]["batches"] = [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]
    path = write(tmp_path, doc)
    rc, out, _ = run(capsys, "validate-plan", str(path), "--inventory", str(inv), "--rf", "3")
    assert rc == 0
    assert out.endswith(f"; 3 batch(es) safe for LOCAL_QUORUM on {source}\n")
    # The inventory's hosts are the known hosts: a plan for other hosts is refused.
    rc, _, err = run(capsys, "validate-plan", str(write(tmp_path, good_plan())),
                     "--inventory", str(inv))  # fmt: skip
    assert rc == 2 and "steps[0].batches[0][0]: unknown host 'cass1'" in err


def test_a_templated_dc_is_refused(tmp_path: Path) -> None:
    inv = two_dc_inventory(tmp_path)
    (inv / "host_vars" / "c2.yml").write_text("cassandra_dc: \"{{ site }}\"\n")
    with pytest.raises(Exception, match=r"--inventory: c2: cassandra_dc is '\{\{ site \}\}', "
                       r"not a plain name; give the ring with --ring instead"):
        inventory_nodes(inv)


# --------------------------------------------------------------------- explain
@pytest.mark.parametrize(
    ("plan", "rc", "summary", "restart", "safety"),
    [
        (quorum_breaking_plan, 2, "1 of 2 batch(es) UNSAFE", "2 batch(es): cass1 cass2 | cass3",
         f"UNSAFE step s1 batch 1 of 2 [cass1, cass2]: {WHY}"),
        (good_plan, 0, "3 batch(es) checked, all safe", "3 batch(es): cass1 | cass2 | cass3",
         "all 3 batch(es) safe for QUORUM"),
    ],
    ids=["refuses-an-unsafe-batch", "a-safe-plan"],
)  # fmt: skip
def test_explain_shows_each_step_s_batch_safety_on_a_ring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: Callable[[], dict[str, Any]],
    rc: int, summary: str, restart: str, safety: str,
) -> None:
    path = write(tmp_path, plan())
    code, out, err = run(capsys, "explain", str(path), "--hosts", HOSTS, "--rf", "3")
    assert code == rc
    lines = out.splitlines()
    assert f"Batch safety on {SIMPLE}: {summary}" in lines
    i = lines.index(f"      rolling restart in {restart}")
    assert lines[i + 1] == f"      batch safety: {safety}"
    if rc:
        assert err == refused("explain", path, SIMPLE)


def test_explain_says_why_each_safe_batch_is_safe_on_the_ring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, quorum_breaking_plan())
    _, out, _ = run(capsys, "explain", str(path), "--hosts", HOSTS, "--rf", "3")
    lines = out.splitlines()
    i = lines.index("      rolling restart in 2 batch(es): cass1 cass2 | cass3")
    assert lines[i + 1].startswith("      batch safety: UNSAFE step s1 batch 1 of 2")
    assert lines[i + 2] == (
        "        batch 2: tightest replica set keeps 2 of 3 replicas up; QUORUM needs 2"
    )


def test_explain_without_a_ring_says_batch_safety_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, quorum_breaking_plan())
    rc, out, _ = run(capsys, "explain", str(path))
    assert rc == 0
    assert (
        "batch safety not checked: no ring given (give --ring FILE, --hosts H1,H2,... --rf N, "
        "or --inventory DIR --rf N)"
    ) in out.splitlines()
    assert "UNSAFE" not in out
