"""The executor's decisions (planner.executor.rollout): composition, per-node, tables, resume.

Every plan here is written by hand, so each expected value is exact.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from planner.cli import main
from planner.errors import ValidationError
from planner.executor.rollout import (
    ROLLOUT_CONTRACT,
    RolloutRefused,
    adhoc,
    compose,
    decide,
    fingerprint,
    load_rollout,
    load_state,
    normalise_timings,
    prepare,
    record_step,
)
from planner.plan import load_plan, plan_from_dict

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
HOSTS = ["cass1", "cass2", "cass3"]
ONE_BY_ONE = [["cass1"], ["cass2"], ["cass3"]]
LCS = "LeveledCompactionStrategy"
STCS = "SizeTieredCompactionStrategy"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def step(
    sid: str,
    due: int,
    target: dict[str, Any],
    *,
    live: list[str] | None = None,
    restart: list[str] | None = None,
    batches: list[list[str]] | None = None,
    per_node: dict[str, dict[str, Any]] | None = None,
    tables: list[str] | None = None,
) -> dict[str, Any]:
    """A plan step due at minute ``due``; ``until`` is filled in by :func:`plan_doc`."""
    doc: dict[str, Any] = {
        "id": sid,
        "due": at(due).isoformat(),
        "target": target,
        "per_node": per_node or {},
        "live": live or [],
        "restart": restart or [],
        "batches": batches or [],
        "expected": {"benefit_ops": 10.0, "cost_ops": 0.0, "net_ops": 10.0},
    }
    if tables is not None:
        doc["tables"] = tables
    return doc


def plan_doc(
    steps: list[dict[str, Any]],
    *,
    current: dict[str, Any] | None = None,
    engine: str = "cassandra",
) -> dict[str, Any]:
    """A plan over 30 one-minute intervals from T0; each step lasts until the next."""
    for i, s in enumerate(steps):
        s["until"] = steps[i + 1]["due"] if i + 1 < len(steps) else at(30).isoformat()
    return {
        "schema_version": 1,
        "kind": "kairos-plan",
        "cluster": "lab",
        "engine": engine,
        "created_at": T0.isoformat(),
        "horizon": {"start": T0.isoformat(), "step_seconds": 60, "steps": 30},
        "availability": {"consistency_level": "QUORUM"},
        "current_config": current if current is not None else {"concurrent_reads": 32},
        "steps": steps,
    }


def write(tmp_path: Path, doc: dict[str, Any], name: str = "plan.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def restart_then_live() -> dict[str, Any]:
    """s1 (minute 5) restarts memtable_flush_writers; s2 (minute 10) is live-only."""
    return plan_doc(
        [
            step("s1", 5, {"memtable_flush_writers": 4}, restart=["memtable_flush_writers"],
                 batches=ONE_BY_ONE),
            step("s2", 10, {"concurrent_reads": 64}, live=["concurrent_reads"]),
        ]
    )


def settings(rollout: Any) -> dict[str, dict[str, Any]]:
    return {h: dict(n.settings) for h, n in rollout.nodes.items()}


# ------------------------------------------------------------------ per_node
def test_per_node_override_keyerror_regression(tmp_path: Path) -> None:
    """A valid per_node override crashed prepare with KeyError: 'concurrent_reads'."""
    doc = plan_doc(
        [
            step("s1", 5, {"concurrent_writes": 64}, per_node={"cass1": {"concurrent_reads": 64}},
                 live=["concurrent_writes", "concurrent_reads"]),
        ]
    )
    got = prepare(write(tmp_path, doc), hosts=HOSTS, now=at(6))
    assert got.status == "due"
    assert got.live == {"concurrent_reads": 32, "concurrent_writes": 64}
    assert got.restart == {} and got.table == {} and got.batches == ()
    assert got.node_live == {
        "cass1": {"concurrent_reads": 64, "concurrent_writes": 64},
        "cass2": {"concurrent_reads": 32, "concurrent_writes": 64},
        "cass3": {"concurrent_reads": 32, "concurrent_writes": 64},
    }
    assert settings(got) == {
        "cass1": {"concurrent_reads": 64, "concurrent_writes": 64},
        "cass2": {"concurrent_reads": 32, "concurrent_writes": 64},
        "cass3": {"concurrent_reads": 32, "concurrent_writes": 64},
    }


def test_per_node_restart_override_restarts_with_the_steps_batches(tmp_path: Path) -> None:
    doc = plan_doc(
        [
            step("s1", 5, {"heap_size": "2G"}, per_node={"cass3": {"heap_size": "1536M"}},
                 restart=["heap_size"], batches=ONE_BY_ONE),
        ]
    )
    got = prepare(write(tmp_path, doc), hosts=HOSTS, now=at(6))
    assert got.restart == {"heap_size": "2G"}
    assert got.batches == (("cass1",), ("cass2",), ("cass3",))
    assert {h: dict(n.jvm) for h, n in got.nodes.items()} == {
        "cass1": {"heap_size": "2G"}, "cass2": {"heap_size": "2G"},
        "cass3": {"heap_size": "1536M"},
    }
    assert got.node_live == {"cass1": {}, "cass2": {}, "cass3": {}}


def test_per_node_override_of_a_table_setting_is_refused() -> None:
    doc = plan_doc(
        [
            step("s1", 5, {"concurrent_reads": 64}, per_node={"cass2": {"compaction": LCS}},
                 live=["concurrent_reads", "compaction"], tables=["ks.t1"]),
        ]
    )
    with pytest.raises(ValidationError, match=r"^steps\[0\]\.per_node\.cass2\.compaction: "
                       r"a table setting is cluster-wide"):
        plan_from_dict(doc, known_hosts=HOSTS)


def test_per_node_holds_for_its_step_only(tmp_path: Path) -> None:
    """s2 does not override cass1: cass1 returns to the cluster-wide concurrent_reads."""
    doc = plan_doc(
        [
            step("s1", 5, {"concurrent_writes": 64}, per_node={"cass1": {"concurrent_reads": 64}},
                 live=["concurrent_writes", "concurrent_reads"]),
            step("s2", 10, {"concurrent_writes": 48},
                 live=["concurrent_writes", "concurrent_reads"]),
        ]
    )
    path = write(tmp_path, doc)
    record_step(tmp_path / "plan.yml.state.json", step_id="s1", status="applied")
    got = prepare(path, hosts=HOSTS, now=at(11))
    assert got.live == {"concurrent_reads": 32, "concurrent_writes": 48}
    assert got.node_live["cass1"] == {"concurrent_reads": 32, "concurrent_writes": 48}
    assert settings(got)["cass1"] == {"concurrent_reads": 32, "concurrent_writes": 48}


# --------------------------------------------------------------- composition
def test_two_due_steps_compose_earlier_step_lost_regression(tmp_path: Path) -> None:
    """Both steps due at once: the latest alone was carried out and s1's restart was lost."""
    got = prepare(write(tmp_path, restart_then_live()), hosts=HOSTS, now=at(15))
    assert (got.step_id, got.status) == ("s2", "due")
    assert got.live == {"concurrent_reads": 64}
    assert got.restart == {"memtable_flush_writers": 4}
    # s2 has no batches: the latest composed step with batches (s1) gives them
    assert got.batches == (("cass1",), ("cass2",), ("cass3",))
    assert got.superseded == ("s1",)
    assert got.applied_through is None
    assert settings(got)["cass2"] == {"concurrent_reads": 64, "memtable_flush_writers": 4}
    assert got.reason == (
        "step s2 is due since 2026-11-21T12:10:00+00:00; it supersedes s1 "
        "(not applied: their changes are part of it)"
    )


def test_live_only_step_rewrote_earlier_restart_value_regression(tmp_path: Path) -> None:
    """After s1 applied, live-only s2 rendered memtable_flush_writers back to current_config."""
    path = write(tmp_path, restart_then_live())
    record_step(tmp_path / "plan.yml.state.json", step_id="s1", status="applied", now=at(6))
    got = prepare(path, hosts=HOSTS, now=at(11))
    assert got.live == {"concurrent_reads": 64}
    assert got.restart == {} and got.batches == () and got.superseded == ()
    assert got.applied_through == "s1"
    assert settings(got) == {
        h: {"concurrent_reads": 64, "memtable_flush_writers": 4} for h in HOSTS
    }


def test_step_option_composes_up_to_that_step(tmp_path: Path) -> None:
    got = prepare(write(tmp_path, restart_then_live()), hosts=HOSTS, step_id="s1", now=at(15))
    assert got.step_id == "s1" and got.superseded == ()
    assert got.live == {} and got.restart == {"memtable_flush_writers": 4}
    assert settings(got)["cass1"] == {"concurrent_reads": 32, "memtable_flush_writers": 4}


def test_change_set_is_classified_by_the_space_not_the_step_lists(tmp_path: Path) -> None:
    """s2's row-cache resize is live on its own, but 0 -> 128MiB from what runs needs a restart
    and the tables' caching (turning the row cache on names the tables; a resize does not)."""
    doc = plan_doc([step("s1", 5, {"row_cache_size": "64MiB"}, restart=["row_cache_size"],
                         batches=ONE_BY_ONE, tables=["app.events"]),
                    step("s2", 10, {"row_cache_size": "128MiB"}, live=["row_cache_size"])])
    path = write(tmp_path, doc)
    got = prepare(path, hosts=HOSTS, now=at(11))
    assert got.live == {} and got.restart == {"row_cache_size": "128MiB"}
    assert got.table == {"caching": {"keys": "ALL", "rows_per_partition": "ALL"}}
    assert got.tables == ("app.events",)
    assert got.batches == (("cass1",), ("cass2",), ("cass3",))
    record_step(tmp_path / "plan.yml.state.json", step_id="s1", status="applied")
    after_s1 = prepare(path, hosts=HOSTS, now=at(11))
    assert after_s1.live == {"row_cache_size": "128MiB"} and after_s1.restart == {}
    assert after_s1.table == {} and after_s1.tables == ()
    assert after_s1.batches == ()


def test_turning_the_row_cache_on_or_off_needs_the_tables(tmp_path: Path) -> None:
    on = step("s1", 5, {"row_cache_size": "64MiB"}, restart=["row_cache_size"],
              batches=ONE_BY_ONE)
    with pytest.raises(ValidationError, match=(
        r"steps\[0\]\.tables: none given: row_cache_size changes a table setting \(turning "
        r"the row cache on or off sets the tables' caching\); name the tables")):
        load_plan(write(tmp_path, plan_doc([on])), known_hosts=HOSTS)
    off = step("s2", 10, {"row_cache_size": "0MiB"}, restart=["row_cache_size"],
               batches=ONE_BY_ONE)
    path = write(tmp_path, plan_doc([{**on, "tables": ["app.events"]},
                                     {**off, "tables": ["app.events"]}]))
    record_step(tmp_path / "plan.yml.state.json", step_id="s1", status="applied")
    got = prepare(path, hosts=HOSTS, now=at(11))
    assert got.step_id == "s2"
    assert got.table == {"caching": {"keys": "ALL", "rows_per_partition": "NONE"}}


def test_a_row_cache_on_one_node_caches_the_tables_rows(tmp_path: Path) -> None:
    """The caching is schema, one value for all: rows are cached when any node has a cache."""
    doc = plan_doc([step("s1", 5, {"concurrent_reads": 64}, live=["concurrent_reads"],
                         per_node={"cass2": {"row_cache_size": "64MiB"}},
                         restart=["row_cache_size"], batches=ONE_BY_ONE,
                         tables=["app.events"])])
    got = prepare(write(tmp_path, doc), hosts=HOSTS, now=at(11))
    assert got.table == {"caching": {"keys": "ALL", "rows_per_partition": "ALL"}}


def test_adhoc_sets_the_caching_with_the_row_cache_and_needs_tables(tmp_path: Path) -> None:
    kw = {"engine": "cassandra", "hosts": HOSTS, "ring": None, "consistency_level": "ONE",
          "state_path": tmp_path / "s.json", "now": at(11)}
    with pytest.raises(ValidationError, match=(
        r"^tables: none given: caching sets the tables' options \(a row_cache_size sets their "
        r"caching\); name them \(--tables ks\.t1,ks\.t2\)$")):
        adhoc(settings={"row_cache_size": "0MiB", "concurrent_reads": 64}, **kw)
    live = adhoc(settings={"concurrent_reads": 64}, **kw)
    assert live.table == {} and live.tables == ()


def test_restart_without_any_batches_is_refused_naming_the_steps(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, restart_then_live()), known_hosts=HOSTS)
    no_batches = dataclasses.replace(
        plan, steps=tuple(dataclasses.replace(s, batches=()) for s in plan.steps)
    )
    with pytest.raises(RolloutRefused, match=r"^step s2: memtable_flush_writers need a restart, "
                       r"but none of the steps it composes \(s1, s2\) has restart batches"):
        decide(no_batches, {"steps": {}}, index=1, hosts=HOSTS)


def test_recording_applied_supersedes_the_earlier_steps(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    state = tmp_path / "plan.yml.state.json"
    got = prepare(path, hosts=HOSTS, now=at(15))
    record_step(state, step_id="s2", status="applied", superseded=got.superseded, now=at(16))
    steps = load_state(state)["steps"]
    assert steps["s1"] == {"status": "superseded", "superseded_by": "s2",
                           "finished_at": at(16).isoformat()}
    assert steps["s2"]["status"] == "applied"
    again = prepare(path, hosts=HOSTS, now=at(17))
    assert (again.status, again.live, again.restart) == ("applied", {}, {})
    assert settings(again)["cass1"] == {"concurrent_reads": 64, "memtable_flush_writers": 4}
    s1 = prepare(path, hosts=HOSTS, step_id="s1", now=at(17))
    assert s1.status == "applied"
    assert s1.reason == (
        "step s1 was superseded by s2 at 2026-11-21T12:16:00+00:00: its changes are applied"
    )


def test_an_applied_step_is_never_superseded(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    record_step(state, step_id="s1", status="applied", now=at(6))
    with pytest.raises(ValidationError, match=r"^superseded: step s1 was applied at"):
        record_step(state, step_id="s2", status="applied", superseded=["s1"])
    assert "s2" not in load_state(state)["steps"]


def test_a_step_before_the_last_applied_one_has_nothing_to_do(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    record_step(tmp_path / "plan.yml.state.json", step_id="s2", status="applied", now=at(11))
    got = prepare(path, hosts=HOSTS, step_id="s1", now=at(12))
    assert (got.status, got.live, got.restart, got.batches) == ("applied", {}, {}, ())
    assert got.reason.startswith("step s1 comes before s2, applied at")


def test_an_earlier_failed_step_refuses_the_later_one(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    state = tmp_path / "plan.yml.state.json"
    record_step(state, step_id="s1", status="failed", error="cass2: no CQL", now=at(7))
    got = prepare(path, hosts=HOSTS, now=at(15))
    assert (got.step_id, got.status) == ("s2", "failed")
    assert got.reason == (
        "step s1 failed at 2026-11-21T12:07:00+00:00: cass2: no CQL (step s2 would carry its "
        "changes); a person must resume or roll it back"
    )
    retried = prepare(path, hosts=HOSTS, now=at(15), retry_failed=True)
    assert retried.status == "due" and retried.superseded == ("s1",)


# -------------------------------------------------------------------- tables
def test_table_change_names_its_tables(tmp_path: Path) -> None:
    doc = plan_doc(
        [
            step("s1", 5, {"compaction": LCS}, live=["compaction"],
                 tables=["kairos_load.usertable", "app.events"]),
            step("s2", 10, {"concurrent_reads": 64}, live=["concurrent_reads"]),
        ],
        current={"compaction": STCS},
    )
    got = prepare(write(tmp_path, doc), hosts=HOSTS, now=at(11))
    assert got.table == {"compaction": LCS} and got.live == {"concurrent_reads": 64}
    assert got.tables == ("kairos_load.usertable", "app.events")
    assert got.to_dict()["tables"] == ["kairos_load.usertable", "app.events"]
    assert settings(got)["cass1"] == {"concurrent_reads": 64}  # compaction is no yaml key


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        (None, r"^steps\[0\]\.tables: none given: compaction changes a table setting; "
               r"name the tables"),
        ([], r"^steps\[0\]\.tables: none given: compaction"),
        (["usertable"], r"^steps\[0\]\.tables\[0\]: 'usertable' is not keyspace\.table"),
        (["ks.t1", "ks.t1"], r"^steps\[0\]\.tables: 'ks\.t1' listed twice"),
        ("ks.t1", r"^steps\[0\]\.tables: expected a list"),
    ],
)
def test_bad_tables_are_refused(tables: Any, message: str) -> None:
    doc = plan_doc([step("s1", 5, {"compaction": LCS}, live=["compaction"], tables=tables)])
    with pytest.raises(ValidationError, match=message):
        plan_from_dict(doc)


def test_tables_on_a_step_without_a_table_change_are_refused() -> None:
    doc = plan_doc([step("s1", 5, {"concurrent_reads": 64}, live=["concurrent_reads"],
                         tables=["ks.t1"])])
    with pytest.raises(ValidationError, match=r"^steps\[0\]\.tables: the step changes no table"):
        plan_from_dict(doc)


def test_tables_survive_the_round_trip(tmp_path: Path) -> None:
    from planner.plan import save_plan

    doc = plan_doc([step("s1", 5, {"compaction": LCS}, live=["compaction"], tables=["ks.t1"])])
    plan = plan_from_dict(doc)
    assert plan.steps[0].tables == ("ks.t1",)
    assert load_plan(save_plan(plan, tmp_path / "p.yml")) == plan


def evaluation(changes_compaction: bool) -> SimpleNamespace:
    switch = SimpleNamespace(source=0, target=1, t=2, benefit_ops=100.0, cost_ops=0.0)
    return SimpleNamespace(switches=[switch]) if changes_compaction else SimpleNamespace(
        switches=[]
    )


def test_kairos_plan_writes_tables_into_table_steps() -> None:
    from planner.commands.plan import steps_from_evaluation

    common: dict[str, Any] = {
        "engine": "cassandra", "evaluation": evaluation(True),
        "candidates": [{"compaction": STCS}, {"compaction": LCS, "concurrent_reads": 64}],
        "batches": [], "start": T0, "step_seconds": 60.0, "n_steps": 10,
    }
    with pytest.raises(ValidationError, match=r"^--tables: step s1 changes compaction, which "
                       r"sets the tables' options; name the tables it applies to"):
        steps_from_evaluation(**common)
    steps = steps_from_evaluation(**common, tables=["ks.t1", "ks.t2"])
    assert steps[0]["tables"] == ["ks.t1", "ks.t2"]
    assert steps[0]["live"] == ["compaction", "concurrent_reads"]


def test_kairos_plan_refuses_bad_tables(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--forecast", "/nonexistent.json", "--tables", "ks", "-o", "/tmp/x.yml"])
    assert rc == 2
    assert "--tables[0]: 'ks' is not keyspace.table" in capsys.readouterr().err


# -------------------------------------------------------------------- resume
def test_resume_from_the_first_node_not_verified(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    state = tmp_path / "plan.yml.state.json"
    first = prepare(path, hosts=HOSTS, step_id="s1", now=at(6))
    record_step(state, step_id="s1", status="verified", node="cass1",
                fingerprint=first.fingerprint, readback={"memtable_flush_writers": 4},
                nodes={"cass1": {"drain": 5, "stop": "0:00:00.400000", "start": 9}}, now=at(7))
    got = prepare(path, hosts=HOSTS, step_id="s1", now=at(8))
    assert got.status == "due"
    assert got.batches == (("cass2",), ("cass3",))
    assert got.verified_hosts == ("cass1",)
    assert got.reason.startswith("resuming step s1: cass1 already verified; ")
    assert load_state(state)["steps"]["s1"]["verified"]["cass1"] == {
        "verified_at": at(7).isoformat(),
        "readback": {"memtable_flush_writers": 4},
        "timings": {"drain": 5.0, "stop": 0.4, "start": 9.0, "total": 14.4},
    }


def test_resume_drops_batches_all_verified(tmp_path: Path) -> None:
    doc = plan_doc([step("s1", 5, {"trickle_fsync": True}, restart=["trickle_fsync"],
                         batches=[["cass1", "cass2"], ["cass3"]])])
    path = write(tmp_path, doc)
    digest = prepare(path, hosts=HOSTS, now=at(6)).fingerprint
    for host in ("cass2", "cass1"):
        record_step(tmp_path / "plan.yml.state.json", step_id="s1", status="verified",
                    node=host, fingerprint=digest)
    got = prepare(path, hosts=HOSTS, now=at(6))
    assert got.batches == (("cass3",),) and got.batch_sizes == [1]
    assert got.verified_hosts == ("cass1", "cass2")


def test_a_changed_plan_does_not_resume(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    old = prepare(path, hosts=HOSTS, step_id="s1", now=at(6))
    record_step(tmp_path / "plan.yml.state.json", step_id="s1", status="verified",
                node="cass1", fingerprint=old.fingerprint)
    doc = restart_then_live()
    doc["steps"][0]["target"] = {"memtable_flush_writers": 6}
    write(tmp_path, doc)
    got = prepare(path, hosts=HOSTS, step_id="s1", now=at(6))
    assert got.fingerprint != old.fingerprint
    assert got.batches == (("cass1",), ("cass2",), ("cass3",)) and got.verified_hosts == ()
    assert got.reason.startswith("not resuming step s1: its 1 verified node(s) were verified "
                                 "for another target")


def test_verified_without_fingerprint_counts_but_does_not_resume(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    state = tmp_path / "plan.yml.state.json"
    record_step(state, step_id="s1", status="verified", node="cass1")
    got = prepare(path, hosts=HOSTS, step_id="s1", now=at(6))
    assert got.batches == (("cass1",), ("cass2",), ("cass3",)) and got.verified_hosts == ()
    assert got.reason.startswith("not resuming step s1: its 1 verified node(s) were recorded "
                                 "without the rollout's fingerprint; every node is done again")
    record_step(state, step_id="s1", status="applied", require_verified=["cass1"])
    assert load_state(state)["steps"]["s1"]["status"] == "applied"


def test_fingerprint_is_the_composed_targets_digest(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    plan = load_plan(path, known_hosts=HOSTS)
    got = prepare(path, hosts=HOSTS, now=at(15))
    assert got.fingerprint == fingerprint("cassandra", compose(plan, through=1, hosts=HOSTS))
    assert len(got.fingerprint) == 16
    assert got.fingerprint != fingerprint("cassandra", compose(plan, through=0, hosts=HOSTS))


def test_a_failed_step_resumes_only_when_retried(tmp_path: Path) -> None:
    path = write(tmp_path, restart_then_live())
    state = tmp_path / "plan.yml.state.json"
    digest = prepare(path, hosts=HOSTS, step_id="s1", now=at(6)).fingerprint
    record_step(state, step_id="s1", status="verified", node="cass1", fingerprint=digest,
                nodes={"cass1": {"drain": 5, "start": 9}})
    record_step(state, step_id="s1", status="failed", error="cass2: sync gate timed out",
                nodes={"cass2": {"drain": 4}})
    refused = prepare(path, hosts=HOSTS, step_id="s1", now=at(8))
    assert refused.status == "failed" and refused.verified_hosts == ()
    retried = prepare(path, hosts=HOSTS, step_id="s1", now=at(8), retry_failed=True)
    assert retried.status == "due" and retried.verified_hosts == ("cass1",)
    assert retried.batches == (("cass2",), ("cass3",))


def test_applied_requires_every_named_host_verified(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    record_step(state, step_id="s1", status="verified", node="cass1", fingerprint="f1",
                nodes={"cass1": {"drain": 5, "start": 9}})
    record_step(state, step_id="s1", status="failed", error="cass2: no CQL",
                nodes={"cass2": {"drain": 4}})
    with pytest.raises(RolloutRefused, match=r"^step s1: not recorded applied: cass2, cass3 "
                       r"not verified"):
        record_step(state, step_id="s1", status="applied", require_verified=HOSTS)
    for host, start in (("cass2", 11), ("cass3", 12)):
        record_step(state, step_id="s1", status="verified", node=host, fingerprint="f1",
                    nodes={host: {"drain": 3, "start": start}})
    with pytest.raises(RolloutRefused, match=r"cass1, cass2, cass3 not verified"):
        record_step(state, step_id="s1", status="applied", require_verified=HOSTS,
                    fingerprint="f2")
    record_step(state, step_id="s1", status="applied", require_verified=HOSTS,
                fingerprint="f1", nodes={"cass3": {"drain": 2, "start": 10, "sync": 1}})
    entry = load_state(state)["steps"]["s1"]
    assert entry["status"] == "applied" and entry["attempts"] == 2 and "error" not in entry
    # merged over the attempts: verified timings, then this call's
    assert entry["nodes"] == {
        "cass1": {"drain": 5.0, "start": 9.0, "total": 14.0},
        "cass2": {"drain": 3.0, "start": 11.0, "total": 14.0},
        "cass3": {"drain": 2.0, "start": 10.0, "sync": 1.0, "total": 13.0},
    }


def test_verifying_for_a_new_fingerprint_drops_the_old_verifications(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    record_step(state, step_id="s1", status="verified", node="cass1", fingerprint="old")
    record_step(state, step_id="s1", status="verified", node="cass2", fingerprint="new")
    entry = load_state(state)["steps"]["s1"]
    assert entry["fingerprint"] == "new" and sorted(entry["verified"]) == ["cass2"]
    assert "status" not in entry and "attempts" not in entry


def test_concurrent_verified_records_are_all_kept(tmp_path: Path) -> None:
    """The hosts of one batch record at the same time; none may overwrite another."""
    from concurrent.futures import ThreadPoolExecutor

    state = tmp_path / "s.json"
    hosts = [f"cass{i}" for i in range(1, 13)]

    def verify(host: str) -> None:
        record_step(state, step_id="s1", status="verified", node=host, fingerprint="f1")

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(verify, hosts))
    assert sorted(load_state(state)["steps"]["s1"]["verified"]) == sorted(hosts)
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # no temp or lock file left


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": "verified", "fingerprint": "f"}, r"^node: --status verified names the node"),
        ({"status": "verified", "node": "cass1", "fingerprint": "f",
          "nodes": {"cass2": {"drain": 1}}}, r"^nodes: with --status verified give cass1's"),
        ({"status": "applied", "node": "cass1"}, r"^node: --node and --readback go with"),
        ({"status": "failed", "superseded": ["s0"]}, r"^superseded: --superseded and"),
        ({"status": "done"}, r"^status: must be one of applied, failed, verified"),
        ({"status": "applied", "nodes": {"cass1": {"drain": "soon"}}},
         r"^nodes: not a duration: 'soon'"),
    ],
)
def test_record_refuses_bad_arguments(tmp_path: Path, kwargs: dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        record_step(tmp_path / "s.json", step_id="s1", **kwargs)
    assert not (tmp_path / "s.json").exists()


# ------------------------------------------------------------ files and CLI
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"^rollout state .*s\.json: not valid JSON at line 1, column 2"),
        ("", r"^rollout state .*s\.json: the file is empty"),
        ('{"steps": []}', r"s\.json: rollout state must be an object with 'steps'"),
        ('{"steps": {"s1": 3}}', r"s\.json: steps\.s1: expected an object, got int"),
        ('{"steps": {"s1": {"status": "done"}}}', r"s\.json: steps\.s1\.status: unknown status"),
        ('{"steps": {"s1": {"verified": ["cass1"]}}}', r"s\.json: steps\.s1\.verified: expected"),
        ('{"steps": {"s1": {"attempts": "2"}}}', r"s\.json: steps\.s1\.attempts: expected a count"),
    ],
)
def test_a_malformed_state_file_names_the_file_and_field(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / "s.json").write_text(content)
    with pytest.raises(ValidationError, match=message):
        load_state(tmp_path / "s.json")


def test_an_unreadable_rollout_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"^rollout .*r\.json: no such file"):
        load_rollout(tmp_path / "r.json")
    (tmp_path / "r.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValidationError, match=r"^rollout .*r\.json: not a text file"):
        load_rollout(tmp_path / "r.json")


def test_rollout_json_round_trips(tmp_path: Path) -> None:
    got = prepare(write(tmp_path, restart_then_live()), hosts=HOSTS, now=at(15))
    out = tmp_path / "rollout.json"
    out.write_text(json.dumps(got.to_dict()))
    assert load_rollout(out) == got


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": None}, r"r\.json: status: missing"),
        ({"batches": "cass1"}, r"r\.json: batches: expected a list of host lists"),
        ({"batches": [["cass1", 2]]}, r"r\.json: batches\[0\]: expected a list of strings"),
        ({"nodes": {"cass1": {"settings": 1}}}, r"r\.json: nodes\.cass1: expected"),
        ({"live": []}, r"r\.json: live: expected an object"),
        ({"superseded": "s1"}, r"r\.json: superseded: expected a list of strings"),
    ],
)
def test_a_malformed_rollout_file_names_the_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    data = prepare(write(tmp_path, restart_then_live()), hosts=HOSTS, now=at(15)).to_dict()
    data.update(change)
    data = {k: v for k, v in data.items() if v is not None}
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ValidationError, match=message):
        load_rollout(tmp_path / "r.json")


def test_cli_verified_then_applied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, restart_then_live())
    out = tmp_path / "rollout.json"
    assert main(["rollout", "prepare", str(path), "--hosts", ",".join(HOSTS),
                 "--now", at(15).isoformat(), "--out", str(out)]) == 0
    rollout = json.loads(capsys.readouterr().out)
    assert rollout["superseded"] == ["s1"] and rollout["tables"] == []
    assert rollout["node_live"] == {h: {"concurrent_reads": 64} for h in HOSTS}
    base = ["rollout", "record", str(path), "--step", "s2"]
    assert main([*base, "--status", "verified", "--node", "cass1",
                 "--fingerprint", rollout["fingerprint"],
                 "--nodes", '{"cass1": {"drain": "0:00:05.000000", "start": 9}}',
                 "--readback", '{"concurrent_reads": 64}']) == 0
    capsys.readouterr()
    assert main([*base, "--status", "applied", "--require-verified", "cass1,cass2",
                 "--superseded", "s1"]) == 2
    assert "step s2: not recorded applied: cass2 not verified" in capsys.readouterr().err
    assert main([*base, "--status", "verified", "--node", "cass2", "--readback", "[1]",
                 "--fingerprint", rollout["fingerprint"]]) == 2
    assert "--readback: expected a JSON object, got list" in capsys.readouterr().err
    assert main([*base, "--status", "verified", "--node", "cass2",
                 "--fingerprint", rollout["fingerprint"]]) == 0
    assert main([*base, "--status", "applied", "--require-verified", "cass1,cass2",
                 "--fingerprint", rollout["fingerprint"], "--superseded", "s1"]) == 0
    state = load_state(tmp_path / "plan.yml.state.json")["steps"]
    assert state["s1"]["status"] == "superseded" and state["s1"]["superseded_by"] == "s2"
    assert state["s2"]["nodes"] == {"cass1": {"drain": 5.0, "start": 9.0, "total": 14.0}}


# ----------------------------------------------------------- adhoc and Redis
def test_adhoc_settings_change_still_works(tmp_path: Path) -> None:
    got = adhoc(engine="cassandra", hosts=HOSTS, settings={"concurrent_reads": 64,
                "compaction": LCS}, ring=None, consistency_level="QUORUM",
                state_path=tmp_path / "a.json", tables=["ks.t1"], now=T0)
    assert got.step_id == "adhoc-20261121T120000Z"
    assert got.live == {"concurrent_reads": 64} and got.table == {"compaction": LCS}
    assert got.batches == () and got.tables == ("ks.t1",)
    assert got.node_live == {h: {"concurrent_reads": 64} for h in HOSTS}
    assert len(got.fingerprint) == 16


def test_adhoc_redis_restart_one_node_at_a_time(tmp_path: Path) -> None:
    got = adhoc(engine="redis", hosts=["r1", "r2"], settings={"io-threads": 2}, ring=None,
                consistency_level="QUORUM", state_path=tmp_path / "a.json", now=T0)
    assert got.restart == {"io-threads": 2} and got.batches == (("r1",), ("r2",))
    assert settings(got) == {"r1": {"io-threads": "2"}, "r2": {"io-threads": "2"}}
    assert got.live_hosts == []  # restart only: the live play has nothing to do


def test_live_hosts_are_the_hosts_the_live_play_has_work_on(tmp_path: Path) -> None:
    kw = {"hosts": HOSTS, "ring": None, "consistency_level": "QUORUM", "now": T0}
    # (Redis batches without a ring; the rule is the engines'.)
    restart = adhoc(engine="redis", settings={"io-threads": 2}, state_path=tmp_path / "r.json",
                    **kw)
    assert restart.hosts_in_order == HOSTS and restart.live_hosts == []
    # A host left out of the batches (verified by an earlier attempt): nothing for it either.
    assert dataclasses.replace(restart, batches=(("cass1",), ("cass2",))).live_hosts == []
    live_only = adhoc(engine="cassandra", settings={"concurrent_reads": 64},
                      state_path=tmp_path / "l.json", **kw)
    assert live_only.batches == () and live_only.live_hosts == HOSTS  # files written live
    # A restart of every node with nothing to change: a host left out gets its files live,
    # as every host does when nothing restarts.
    restart_all = adhoc(engine="redis", settings={}, restart_all=True,
                        state_path=tmp_path / "a.json", **kw)
    assert restart_all.restart == {} and restart_all.live_hosts == []
    assert dataclasses.replace(restart_all, batches=(("cass1",), ("cass2",))).live_hosts == [
        "cass3"]
    # Per-node live values: only the hosts that have some.
    per_node = dataclasses.replace(
        restart, node_live={"cass1": {}, "cass2": {"concurrent_reads": 48}, "cass3": {}})
    assert per_node.live_hosts == ["cass2"]
    table = dataclasses.replace(restart, table={"compaction": LCS})
    assert table.live_hosts == HOSTS  # set once, from any host


def test_redis_plan_composes_too(tmp_path: Path) -> None:
    doc = plan_doc(
        [
            step("s1", 5, {"io-threads": 4}, restart=["io-threads"], batches=[["r1"], ["r2"]]),
            step("s2", 10, {"appendonly": True}, live=["appendonly"]),
        ],
        current={"maxmemory-policy": "allkeys-lru"},
        engine="redis",
    )
    got = prepare(write(tmp_path, doc), hosts=["r1", "r2"], now=at(11))
    assert got.live == {"appendonly": True} and got.restart == {"io-threads": 4}
    assert got.batches == (("r1",), ("r2",)) and got.superseded == ("s1",)
    assert settings(got)["r2"] == {"appendonly": "yes", "io-threads": "4",
                                   "maxmemory-policy": "allkeys-lru"}


def test_a_plan_for_another_engine_is_refused_naming_its_playbook(tmp_path: Path) -> None:
    doc = plan_doc([step("s1", 5, {"io-threads": 4}, restart=["io-threads"],
                         batches=[["r1"], ["r2"]])],
                   current={"maxmemory-policy": "allkeys-lru"}, engine="redis")
    plan = write(tmp_path, doc)
    with pytest.raises(ValidationError, match=(
            r"plan.yml: engine: the plan is for redis, this rollout applies cassandra: use "
            r"playbooks/apply_plan_redis.yml")):
        prepare(plan, hosts=["r1", "r2"], now=at(11), engine="cassandra")
    assert prepare(plan, hosts=["r1", "r2"], now=at(11), engine="redis").engine == "redis"


# ------------------------------------------------------------ the rollout contract
REPO = Path(__file__).resolve().parents[2]
#: How the playbooks and roles read the rollout: kairos_rollout (a fact on the control host,
#: a play variable on the nodes), or the stdout of the command that printed it.
PLAYBOOK_READ = re.compile(
    r"(?:\bkairos_rollout|\((?:apply_prepare|change_adhoc)\.stdout \| from_json\))"
    r"\.(\w+)"
)


def fields_the_playbooks_read() -> set[str]:
    """The fields read by the playbooks and by the roles' rollout entry points."""
    files = [*(REPO / "playbooks").rglob("*.yml"), *(REPO / "roles").glob("*/tasks/rollout_*.yml")]
    return {field for path in files for field in PLAYBOOK_READ.findall(path.read_text())}


def documented_fields() -> set[str]:
    text = (REPO / "docs" / "rollout-contract.md").read_text()
    return set(re.findall(r"^\| `([\w.<>]+)` \|", text, re.M))


def prepared_json(tmp_path: Path, doc: dict[str, Any], hosts: list[str], minute: int,
                  capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The rollout exactly as the playbooks get it: ``kairos rollout prepare``'s stdout."""
    out = tmp_path / "rollout.json"
    assert main(["rollout", "prepare", str(write(tmp_path, doc)), "--hosts", ",".join(hosts),
                 "--now", at(minute).isoformat(), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    return printed


def test_every_field_the_playbooks_read_is_documented_and_emitted(tmp_path: Path) -> None:
    read = fields_the_playbooks_read()
    assert {"status", "step_id", "nodes", "batch_sizes"} <= read  # the scan works
    assert read - documented_fields() == set(), "document them in docs/rollout-contract.md"
    emitted = set(prepare(write(tmp_path, restart_then_live()), hosts=HOSTS,
                          now=at(15)).to_dict())
    assert read - emitted == set()
    assert {"contract", "nodes.<host>.settings", "nodes.<host>.jvm"} <= documented_fields()


def test_the_rollout_json_carries_its_contract_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = prepared_json(tmp_path, restart_then_live(), HOSTS, 15, capsys)
    assert got["contract"] == ROLLOUT_CONTRACT == 1
    assert load_rollout(tmp_path / "rollout.json").to_dict()["contract"] == ROLLOUT_CONTRACT
    nothing = prepared_json(tmp_path, restart_then_live(), HOSTS, 1, capsys)
    assert nothing["contract"] == ROLLOUT_CONTRACT and nothing["status"] == "nothing-due"
    assert nothing["step_id"] is None


def test_cassandra_rollout_fields_as_the_playbooks_read_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = plan_doc(
        [
            step("s1", 5, {"memtable_flush_writers": 4, "heap_size": "512M"},
                 restart=["memtable_flush_writers", "heap_size"],
                 batches=[["cass1", "cass2"], ["cass3"]]),
            step("s2", 10, {"concurrent_reads": 64, "compaction": LCS},
                 per_node={"cass3": {"concurrent_reads": 48}}, live=["concurrent_reads",
                 "compaction"], tables=["kairos_app.events"]),
        ]
    )
    got = prepared_json(tmp_path, doc, HOSTS, 11, capsys)
    assert got["engine"] == "cassandra" and got["status"] == "due"
    assert got["reason"].startswith("step s2 is due since") and "supersedes s1" in got["reason"]
    assert got["step_id"] == "s2" and got["superseded"] == ["s1"]
    assert got["state"] == str(tmp_path / "plan.yml.state.json")
    assert re.fullmatch(r"[0-9a-f]{16}", got["fingerprint"])
    assert got["live"] == {"concurrent_reads": 64}
    assert got["node_live"] == {"cass1": {"concurrent_reads": 64},
                                "cass2": {"concurrent_reads": 64},
                                "cass3": {"concurrent_reads": 48}}
    assert got["restart"] == {"memtable_flush_writers": 4, "heap_size": "512M"}
    assert got["table"] == {"compaction": LCS} and got["tables"] == ["kairos_app.events"]
    assert got["batches"] == [["cass1", "cass2"], ["cass3"]] and got["batch_sizes"] == [2, 1]
    assert got["hosts_in_order"] == ["cass1", "cass2", "cass3"]
    assert got["live_hosts"] == ["cass1", "cass2", "cass3"]  # live values and a table change
    assert set(got["nodes"]) == set(HOSTS)
    assert got["nodes"]["cass3"] == {
        "settings": {"concurrent_reads": 48, "memtable_flush_writers": 4},
        "jvm": {"heap_size": "512M"},
    }
    assert got["nodes"]["cass1"]["settings"]["concurrent_reads"] == 64


def test_redis_rollout_fields_as_the_playbooks_read_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = plan_doc(
        [step("s1", 5, {"io-threads": 4, "hz": 20}, restart=["io-threads"], live=["hz"],
              batches=[["r1"], ["r2"]])],
        current={"hz": 10},
        engine="redis",
    )
    got = prepared_json(tmp_path, doc, ["r1", "r2"], 6, capsys)
    assert got["engine"] == "redis" and got["status"] == "due" and got["step_id"] == "s1"
    assert got["live"] == {"hz": 20} and got["restart"] == {"io-threads": 4}
    assert got["table"] == {} and got["tables"] == [] and got["superseded"] == []
    assert got["hosts_in_order"] == ["r1", "r2"] and got["batch_sizes"] == [1, 1]
    assert got["live_hosts"] == ["r1", "r2"]  # hz is set live on both
    assert got["nodes"] == {h: {"settings": {"hz": "20", "io-threads": "4"}, "jvm": {}}
                            for h in ("r1", "r2")}


def test_a_phase_measured_in_parts_is_recorded_as_their_sum() -> None:
    # The drain is disablegossip + the pause + drain: three durations.
    parts = ["0:00:02.000000", 2, "0:00:03.000000"]
    timings = normalise_timings({"cass1": {"drain": parts, "stop": 1.5}})
    assert timings == {"cass1": {"drain": 7.0, "stop": 1.5, "total": 8.5}}
    with pytest.raises(ValidationError, match="not a duration"):
        normalise_timings({"cass1": {"drain": ["0:00:01", "soon"]}})


def test_prepare_picks_a_step_due_at_the_plans_start_from_the_bin_before(tmp_path: Path) -> None:
    """What the autopilot decides (planner.plan.Horizon.has_come_due): a step at the horizon's start
    is due from one step before it; a later step only at its own time."""
    doc = plan_doc([step("s1", 0, {"concurrent_reads": 64}, live=["concurrent_reads"]),
                    step("s2", 10, {"concurrent_reads": 96}, live=["concurrent_reads"])])
    path = write(tmp_path, doc)
    assert prepare(path, hosts=HOSTS, now=at(-0.5)).step_id == "s1"
    assert prepare(path, hosts=HOSTS, now=at(-1.5)).status == "nothing-due"
    assert prepare(path, hosts=HOSTS, now=at(9.5)).step_id == "s1"
