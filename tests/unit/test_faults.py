"""The executor's fault model: what may be taken down, given the nodes down now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.executor.faults import LEAVE, RESTORE, decide_rescue, guard_batch
from planner.executor.rollout import RolloutRefused, RolloutStep, adhoc
from planner.topology.ring import Ring

HOSTS = ["cass1", "cass2", "cass3"]


def rollout(ring: Ring, cl: str = "QUORUM", tmp: Path | None = None) -> RolloutStep:
    return adhoc(
        engine="cassandra",
        hosts=list(ring.hosts),
        settings={"memtable_flush_writers": 4},
        ring=ring,
        consistency_level=cl,
        state_path=str(tmp or Path("/nonexistent/state.json")),
    )


def test_a_batch_is_refused_when_a_node_outside_it_is_down() -> None:
    ring = Ring.simple(hosts=HOSTS, rf=3)
    step = rollout(ring)
    guard_batch(step, ring, batch=["cass1"], down=[])
    guard_batch(step, ring, batch=["cass1"], down=["cass1"])  # the batch's own node
    with pytest.raises(RolloutRefused, match=r"^cass3 down outside the batch; taking cass1 down"):
        guard_batch(step, ring, batch=["cass1"], down=["cass3"])


def test_rf5_quorum_tolerates_one_dead_node_outside_the_batch() -> None:
    ring = Ring.simple(hosts=[f"n{i}" for i in range(5)], rf=5)
    step = rollout(ring)
    guard_batch(step, ring, batch=["n0"], down=["n4"])
    with pytest.raises(RolloutRefused, match="n3, n4 down outside the batch"):
        guard_batch(step, ring, batch=["n0"], down=["n3", "n4"])


def test_a_serving_node_is_left_running_when_restoring_it_would_break_the_cl() -> None:
    # The measured fault: cass3 killed while cass1 (just restarted) was in its sync gate;
    # the old rescue stopped cass1 too: two of three replicas down, 3,797 failed writes.
    ring = Ring.simple(hosts=HOSTS, rf=3)
    decision = decide_rescue(
        rollout(ring), ring, node="cass1", batch=["cass1"], down=["cass3"], serving=True
    )
    assert decision.action == LEAVE and not decision.drain
    assert decision.dead == ("cass3",)
    assert decision.reason.startswith(
        "cass3 down outside the batch; cass1 is serving and is left running on its new "
        "configuration: taking it down again would break QUORUM"
    )


def test_a_failure_before_the_files_changed_says_the_node_runs_its_previous_configuration() -> None:
    ring = Ring.simple(hosts=HOSTS, rf=3)
    decision = decide_rescue(
        rollout(ring), ring, node="cass1", batch=["cass1"], down=["cass2"], serving=True,
        files_changed=False,
    )
    assert decision.action == LEAVE
    assert "left running on its previous configuration" in decision.reason


def test_a_node_that_does_not_serve_is_brought_back_whoever_is_down() -> None:
    ring = Ring.simple(hosts=HOSTS, rf=3)
    decision = decide_rescue(
        rollout(ring), ring, node="cass1", batch=["cass1"], down=["cass1", "cass3"],
        serving=False,
    )
    assert (decision.action, decision.drain, decision.dead) == (RESTORE, False, ("cass3",))
    assert "starting a node takes nothing down" in decision.reason


def test_a_local_failure_with_every_other_node_up_is_restored_with_a_drain() -> None:
    ring = Ring.simple(hosts=HOSTS, rf=3)
    decision = decide_rescue(
        rollout(ring), ring, node="cass1", batch=["cass1"], down=[], serving=True
    )
    assert (decision.action, decision.drain, decision.dead) == (RESTORE, True, ())


def test_a_batch_partner_being_down_counts_at_cl_one() -> None:
    # CL ONE, batch {cass1, cass2}: restoring cass1 while cass2 is down leaves cass3 alone
    # for every range: still ONE. With cass3 dead too it would leave nothing.
    ring = Ring.simple(hosts=HOSTS, rf=3)
    step = rollout(ring, cl="ONE")
    ok = decide_rescue(step, ring, node="cass1", batch=["cass1", "cass2"], down=["cass2"],
                       serving=True)
    assert ok.action == RESTORE
    refused = decide_rescue(step, ring, node="cass1", batch=["cass1", "cass2"],
                            down=["cass2", "cass3"], serving=True)
    assert refused.action == LEAVE and refused.dead == ("cass3",)


def test_unknown_liveness_never_takes_a_serving_node_down() -> None:
    ring = Ring.simple(hosts=HOSTS, rf=3)
    step = rollout(ring)
    leave = decide_rescue(step, None, node="cass1", batch=["cass1"], down=None, serving=True)
    assert leave.action == LEAVE and "could not be read" in leave.reason
    back = decide_rescue(step, None, node="cass1", batch=["cass1"], down=None, serving=False)
    assert back.action == RESTORE and not back.drain


def test_the_cli_prints_the_decision_and_refuses_an_unsafe_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ring_file = tmp_path / "ring.yml"
    ring_file.write_text(
        "nodes: [{host: cass1, dc: dc1, tokens: [-6000]}, {host: cass2, dc: dc1, tokens: [0]},"
        " {host: cass3, dc: dc1, tokens: [6000]}]\n"
        "keyspaces: {app: {replication: {dc1: 3}}}\n"
    )
    out = tmp_path / "rollout.json"
    assert main(["rollout", "adhoc", "--engine", "cassandra", "--hosts", "cass1,cass2,cass3",
                 "--set", "memtable_flush_writers=4", "--ring", str(ring_file),
                 "--state", str(tmp_path / "s.json"), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["rollout", "guard", "--rollout", str(out), "--ring", str(ring_file),
                 "--down", "cass2", "--batch", "cass1"]) == 2
    assert "cass2 down outside the batch" in capsys.readouterr().err
    # Safe: the up peers sharing the batch's replica sets are the drain's watch.
    assert main(["rollout", "guard", "--rollout", str(out), "--ring", str(ring_file),
                 "--down", "cass1", "--batch", "cass1"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "safe": True, "batch": ["cass1"], "down": ["cass1"], "watch": ["cass2", "cass3"]}
    assert main(["rollout", "rescue", "--rollout", str(out), "--ring", str(ring_file),
                 "--down", "cass2", "--node", "cass1", "--batch", "cass1",
                 "--serving", "true"]) == 0
    assert '"action": "leave"' in capsys.readouterr().out
    assert main(["rollout", "rescue", "--rollout", str(out), "--node", "cass1",
                 "--batch", "cass1", "--serving", "true"]) == 0
    assert "could not be read" in capsys.readouterr().out
