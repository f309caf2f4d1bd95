"""planner.model.durability: the order on Redis durability and the floor's parsing."""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import ValidationError
from planner.model.durability import (
    DurabilityFloor,
    floor_of,
    parse_floor,
    parse_save,
    save_meets,
)

AOF_EVERYSEC = {"appendonly": "yes", "appendfsync": "everysec"}


@pytest.mark.parametrize(("config", "below"), [
    ({"appendonly": True, "appendfsync": "always"}, []),
    ({"appendonly": True, "appendfsync": "everysec"}, []),
    ({"appendonly": True, "appendfsync": "no"}, ["appendfsync"]),
    ({"appendonly": False, "appendfsync": "everysec"}, ["appendonly"]),
    ({"appendonly": "no", "appendfsync": "always"}, ["appendonly"]),
    ({}, ["appendonly"]),  # Redis' defaults: no AOF
])
def test_the_floor_orders_appendonly_then_appendfsync(
    config: dict[str, Any], below: list[str]
) -> None:
    floor = parse_floor(AOF_EVERYSEC)
    assert [v.field for v in floor.violations(config)] == below


def test_a_violation_names_the_value_the_floor_and_the_order() -> None:
    (v,) = parse_floor(AOF_EVERYSEC).violations({"appendonly": True, "appendfsync": "no"})
    assert v.field == "appendfsync"
    assert v.problem == ("'no' is below the durability floor 'everysec' "
                         "(--durability-floor; always > everysec > no)")


def test_a_floor_without_the_aof_leaves_appendfsync_free() -> None:
    floor = parse_floor({"appendonly": "no"})
    for fsync in ("always", "everysec", "no"):
        assert not floor.excludes({"appendonly": False, "appendfsync": fsync})
        assert not floor.excludes({"appendonly": True, "appendfsync": fsync})


@pytest.mark.parametrize(("policy", "floor", "missed"), [
    ("3600 1 300 100 60 10000", "3600 1 300 100 60 10000", None),
    ("900 1", "3600 1", None),  # sooner, same changes
    ("3600 1", "3600 10", None),  # fewer changes
    ("3600 1", "900 1", (900, 1)),  # an hour is slower than 15 minutes
    ("60 10000", "3600 1", (3600, 1)),  # a single write in an hour is never snapshotted
    ("3600 1 60 100", "300 100 3600 1", None),  # each floor rule by its own policy rule
    ("", "3600 1", (3600, 1)),  # RDB off
    ("", "", None),
])
def test_save_policies_cover_the_floors_rules(
    policy: str, floor: str, missed: tuple[int, int] | None
) -> None:
    assert save_meets(parse_save(policy), parse_save(floor)) == missed


def test_save_is_checked_only_on_a_configuration_that_sets_it() -> None:
    floor = parse_floor({"save": "900 1"})
    assert not floor.excludes({"appendonly": False})  # Kairos' candidates keep the nodes' own
    (v,) = floor.violations({"save": "3600 1"})
    assert v.field == "save" and "no rule snapshots at least as often as '900 1'" in v.problem


@pytest.mark.parametrize("value", ["3600 1 300 100", ["3600 1", "300 100"],
                                   [[3600, 1], [300, 100]], '"3600 1 300 100"'])
def test_save_reads_redis_conf_and_yaml_spellings(value: Any) -> None:
    assert parse_save(value) == ((3600, 1), (300, 100))


@pytest.mark.parametrize(("data", "match"), [
    ({"appendfsync": "sometimes", "appendonly": "yes"},
     r"^--durability-floor\.appendfsync: 'sometimes' is not one of always, everysec, no$"),
    ({"appendonly": "maybe"}, r"^--durability-floor\.appendonly: 'maybe' is not yes or no$"),
    ({"appendfsync": "always"},
     r"^--durability-floor\.appendfsync: a floor on appendfsync needs appendonly: yes"),
    ({"maxmemory": "1gb"}, r"^--durability-floor\.maxmemory: not a durability setting; "
                           r"a floor names appendonly, appendfsync, save$"),
    ({"save": "3600"}, r"^--durability-floor\.save: '3600' is not pairs of <seconds> <changes>"),
    ({"save": "3600 x"}, r"^--durability-floor\.save: rule '3600 x' is not two whole numbers$"),
    ({"save": "0 1"}, r"^--durability-floor\.save: rule '0 1': seconds and changes must be >= 1"),
    ({"save": 5}, r"^--durability-floor\.save: 5 is not a save policy"),
    ("appendonly yes", r"^--durability-floor: expected a mapping"),
])
def test_a_bad_floor_is_refused_naming_the_field_and_the_problem(data: Any, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        parse_floor(data)


def test_the_default_floor_is_what_the_configuration_runs() -> None:
    assert floor_of({"appendonly": False, "appendfsync": "no"}) == DurabilityFloor(
        source="the running configuration")
    running = floor_of({"appendonly": True, "appendfsync": "everysec"})
    assert running.to_dict() == {"appendonly": "yes", "appendfsync": "everysec"}
    assert running.excludes({"appendonly": True, "appendfsync": "no"})
    assert not running.excludes({"appendonly": True, "appendfsync": "always"})


def test_the_recorded_floor_reads_back_as_the_same_floor() -> None:
    floor = parse_floor({"appendonly": True, "appendfsync": "always", "save": "300 10 900 1"})
    assert parse_floor(floor.to_dict()) == floor
    assert floor.describe() == "appendonly yes, appendfsync >= always, save covers '900 1 300 10'"
