"""Per-table overrides in the plan file (issue 42): a table's own compaction, checked as
``per_node`` overrides are, and held for its step only."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.errors import ValidationError
from planner.plan import plan_from_dict

from .test_plan import HOSTS, good_plan

LCS, STCS, UCS = ("LeveledCompactionStrategy", "SizeTieredCompactionStrategy",
                  "UnifiedCompactionStrategy")


def per_table_plan() -> dict[str, Any]:
    """s2 keeps STCS cluster-wide and gives the read-heavy table LCS; s3 changes a live
    setting only, so the read table returns to STCS there."""
    doc = good_plan()
    s2 = doc["steps"][1]
    s2["target"] = {"concurrent_writes": 48}
    s2["until"] = "2026-11-21T12:25:00+00:00"
    s2["tables"] = ["shop.profiles", "shop.events"]
    s2["per_table"] = {"shop.profiles": {"compaction": LCS}}
    s2["live"] = ["compaction", "concurrent_writes"]
    doc["steps"].append({
        "id": "s3", "due": "2026-11-21T12:25:00+00:00", "until": "2026-11-21T12:30:00+00:00",
        "target": {"concurrent_writes": 40}, "tables": ["shop.profiles"],
        "live": ["compaction", "concurrent_writes"], "restart": [], "batches": [],
        "expected": {"benefit_ops": 1.0, "cost_ops": 0.0, "net_ops": 1.0},
    })
    return doc


def test_a_table_override_is_parsed_and_written_back() -> None:
    plan = plan_from_dict(per_table_plan(), known_hosts=HOSTS)
    s2 = plan.steps[1]
    assert s2.per_table == {"shop.profiles": {"compaction": LCS}}
    assert s2.tables == ("shop.profiles", "shop.events")
    assert "compaction" in s2.live
    again = plan_from_dict(plan.to_dict(), known_hosts=HOSTS)
    assert again.steps[1].per_table == s2.per_table
    assert "per_table" not in plan.to_dict()["steps"][0]  # written only where there is one


def test_an_override_alone_is_a_table_change_that_must_be_listed_live() -> None:
    doc = per_table_plan()
    doc["steps"][1]["live"] = ["concurrent_writes"]
    with pytest.raises(ValidationError, match=r"steps\[1\].*'compaction' is in neither"):
        plan_from_dict(doc, known_hosts=HOSTS)


def test_a_table_returning_to_the_cluster_value_is_a_change() -> None:
    doc = per_table_plan()
    doc["steps"][2]["live"] = ["concurrent_writes"]
    doc["steps"][2].pop("tables")
    with pytest.raises(ValidationError, match=r"steps\[2\].*'compaction' is in neither"):
        plan_from_dict(doc, known_hosts=HOSTS)
    doc["steps"][2]["live"] = ["compaction", "concurrent_writes"]
    with pytest.raises(ValidationError, match=r"steps\[2\]\.tables: none given"):
        plan_from_dict(doc, known_hosts=HOSTS)
    doc["steps"][2]["tables"] = ["shop.events"]
    with pytest.raises(ValidationError, match=r"steps\[2\]\.tables: 'shop.profiles' is in the "
                                              r"previous step's per_table but not in tables"):
        plan_from_dict(doc, known_hosts=HOSTS)


def test_an_override_the_next_step_repeats_changes_nothing_there() -> None:
    doc = per_table_plan()
    s3 = doc["steps"][2]
    s3["per_table"] = {"shop.profiles": {"compaction": LCS}}
    s3.pop("tables")
    s3["live"] = ["concurrent_writes"]
    plan = plan_from_dict(doc, known_hosts=HOSTS)
    assert plan.steps[2].per_table == {"shop.profiles": {"compaction": LCS}}
    assert plan.steps[2].tables == ()


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda s: s["per_table"].update({"shop.events": {"concurrent_writes": 8}}),
     r"steps\[1\]\.per_table\.shop\.events\.concurrent_writes: not a table setting.*compaction"),
    (lambda s: s["per_table"].update({"shop.events": {"compaction": "Nope"}}),
     r"steps\[1\]\.per_table\.shop\.events"),
    (lambda s: s["per_table"].update({"shop.events": {}}),
     r"steps\[1\]\.per_table\.shop\.events: empty"),
    (lambda s: s["per_table"].update({"shop-events": {"compaction": UCS}}),
     r"steps\[1\]\.per_table\[1\]: 'shop-events' is not keyspace\.table"),
    (lambda s: s.update(tables=["shop.events"]),
     r"steps\[1\]\.tables: 'shop.profiles' is in per_table but not in tables"),
    (lambda s: s.update(per_table=["shop.profiles"]), r"steps\[1\]\.per_table: expected a mapping"),
])
def test_bad_overrides_name_the_field(mutate: Any, message: str) -> None:
    doc = per_table_plan()
    mutate(doc["steps"][1])
    with pytest.raises(ValidationError, match=message):
        plan_from_dict(doc, known_hosts=HOSTS)


def test_a_table_setting_per_node_points_to_per_table() -> None:
    doc = copy.deepcopy(per_table_plan())
    doc["steps"][1]["per_node"] = {"cass1": {"compaction": UCS}}
    with pytest.raises(ValidationError, match=r"per_node\.cass1\.compaction: .*per_table"):
        plan_from_dict(doc, known_hosts=HOSTS)


# ------------------------------------------------------------------ the executor's side
def test_the_rollout_carries_each_table_s_own_options() -> None:
    from planner.executor.rollout import decide

    plan = plan_from_dict(per_table_plan(), known_hosts=HOSTS)
    applied = {"steps": {"s1": {"status": "applied"}}}
    s2 = decide(plan, applied, index=1, hosts=HOSTS)
    assert s2.status == "due"
    assert s2.table == {"compaction": STCS}  # the cluster-wide value, for shop.events
    assert s2.table_options == {"shop.profiles": {"compaction": LCS}}
    assert s2.tables == ("shop.profiles", "shop.events")
    assert s2.to_dict()["table_options"] == {"shop.profiles": {"compaction": LCS}}
    # s3 has no override: shop.profiles returns to the cluster-wide value.
    applied["steps"]["s2"] = {"status": "applied"}
    s3 = decide(plan, applied, index=2, hosts=HOSTS)
    assert s3.table == {"compaction": STCS} and s3.table_options == {}
    assert s3.tables == ("shop.profiles",)
    assert s3.fingerprint != s2.fingerprint


def test_an_unchanged_override_alters_nothing() -> None:
    from planner.executor.rollout import decide

    doc = per_table_plan()
    s3 = doc["steps"][2]
    s3.update(per_table={"shop.profiles": {"compaction": LCS}}, live=["concurrent_writes"])
    s3.pop("tables")
    plan = plan_from_dict(doc, known_hosts=HOSTS)
    rollout = decide(plan, {"steps": {"s1": {"status": "applied"}, "s2": {"status": "applied"}}},
                     index=2, hosts=HOSTS)
    assert rollout.table == {} and rollout.table_options == {} and rollout.tables == ()
    assert rollout.live == {"concurrent_writes": 40}


def test_drift_expects_each_table_s_own_compaction() -> None:
    from planner.executor.drift import compare, drifted, expected_values

    plan = plan_from_dict(per_table_plan(), known_hosts=HOSTS)
    state = {"steps": {"s1": {"status": "applied"}, "s2": {"status": "applied"}}}
    expected = expected_values(plan, state, HOSTS)
    assert expected.table_overrides == {"shop.profiles": {"compaction": LCS}}
    tables = {"shop.profiles": {"compaction": LCS}, "shop.events": {"compaction": STCS}}
    observed = {h: {"tables": tables} for h in HOSTS}
    assert drifted(compare(expected, observed)) == []
    swapped = {"shop.profiles": {"compaction": STCS}, "shop.events": {"compaction": STCS}}
    found = drifted(compare(expected, {h: {"tables": swapped} for h in HOSTS}))
    assert {(f.source, f.expected, f.observed) for f in found} == {
        ("table shop.profiles", LCS, STCS)}


def test_the_modules_want_each_table_s_own_options() -> None:
    from planner._module_utils import kairos_settings

    wants = kairos_settings.table_wants(
        ["shop.events", "shop.profiles"], STCS, {},
        {"shop.profiles": {"compaction": f"org.apache.cassandra.db.compaction.{LCS}"}})
    assert wants == {"shop.events": (STCS, {}), "shop.profiles": (LCS, {})}
    with pytest.raises(ValueError, match=r"per_table: shop\.other is not one of tables"):
        kairos_settings.table_wants(["shop.events"], STCS, {}, {"shop.other": {"compaction": LCS}})
    with pytest.raises(ValueError, match=r"per_table.shop.events: unknown option 'gc_grace'"):
        kairos_settings.table_wants(["shop.events"], STCS, {}, {"shop.events": {"gc_grace": 1}})
