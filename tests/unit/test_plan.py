"""The plan file: validator, load/save round trip, validate-plan CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.cli import main
from planner.errors import ValidationError
from planner.plan import load_plan, plan_from_dict, save_plan, validate_plan

HOSTS = ["cass1", "cass2", "cass3"]


def good_plan() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "kind": "kairos-plan",
        "cluster": "lab",
        "engine": "cassandra",
        "created_at": "2026-11-21T12:00:00+00:00",
        "horizon": {"start": "2026-11-21T12:00:00+00:00", "step_seconds": 60, "steps": 30},
        "provenance": {
            "forecast": {"model": "ets", "source": "traces/lab.csv"},
            "performance_model": {"name": "cassandra-prior", "version": 1},
            "optimiser": {"method": "ga", "seed": 7, "population": 64, "generations": 40},
        },
        "availability": {"consistency_level": "QUORUM", "tolerated_failures": 0,
                         "aggressive": False},
        "current_config": {"concurrent_writes": 32, "compaction": "SizeTieredCompactionStrategy"},
        "steps": [
            {
                "id": "s1",
                "due": "2026-11-21T12:05:00+00:00",
                "until": "2026-11-21T12:20:00+00:00",
                "target": {"concurrent_writes": 64, "trickle_fsync": True},
                "per_node": {},
                "live": ["concurrent_writes"],
                "restart": ["trickle_fsync"],
                "batches": [["cass1"], ["cass2"], ["cass3"]],
                "expected": {"benefit_ops": 1.2e6, "cost_ops": 3.0e5, "net_ops": 9.0e5},
            },
            {
                "id": "s2",
                "due": "2026-11-21T12:20:00+00:00",
                "until": "2026-11-21T12:30:00+00:00",
                "target": {"compaction": "LeveledCompactionStrategy"},
                "tables": ["kairos_load.usertable"],
                "live": ["compaction"],
                "restart": [],
                "batches": [],
                "expected": {"benefit_ops": 5.0e5, "cost_ops": 0.0, "net_ops": 5.0e5},
            },
        ],
    }


def test_good_plan_is_valid_and_parsed() -> None:
    plan = plan_from_dict(good_plan(), known_hosts=HOSTS)
    assert [s.id for s in plan.steps] == ["s1", "s2"]
    assert plan.steps[0].batches == (("cass1",), ("cass2",), ("cass3",))
    assert plan.steps[0].restart == ("trickle_fsync",)
    assert plan.expected_net_ops == pytest.approx(1.4e6)
    assert plan.provenance["optimiser"]["seed"] == 7


def test_round_trip(tmp_path: Path) -> None:
    plan = plan_from_dict(good_plan())
    path = save_plan(plan, tmp_path / "p.yml", known_hosts=HOSTS)
    again = load_plan(path, known_hosts=HOSTS)
    assert again == plan


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    for k in keys[:-1]:
        doc = doc[k]
    if value is _DELETE:
        del doc[keys[-1]]
    else:
        doc[keys[-1]] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("schema_version", 2, r"^schema_version: unsupported version 2"),
        ("kind", "plan", r"^kind: expected 'kairos-plan'"),
        ("engine", "mongodb", r"^engine: unknown engine 'mongodb'"),
        ("created_at", "yesterday", r"^created_at: not an ISO 8601 time"),
        ("created_at", "2026-11-21T12:00:00", r"^created_at: .* has no UTC offset"),
        ("horizon.steps", 0, r"^horizon\.steps: must be >= 1"),
        ("horizon.step_seconds", -5, r"^horizon\.step_seconds: must be > 0"),
        ("availability.consistency_level", "MOST", r"^availability\.consistency_level: unknown"),
        ("availability.tolerated_failures", -1, r"tolerated_failures: must be >= 0"),
        ("provenance.optimiser.seed", "seven", r"^provenance\.optimiser\.seed: expected an integ"),
        ("current_config.concurrent_writes", "many", r"^current_config: concurrent_writes"),
        ("steps.0.target.concurrent_writes", -3, r"^steps\[0\]\.target: concurrent_writes"),
        ("steps.0.target.no_such_knob", 1, r"^steps\[0\]\.target: no_such_knob: unknown"),
        ("steps.1.id", "s1", r"^steps\[1\]\.id: duplicate step id 's1'"),
        ("steps.1.due", "2026-11-21T12:05:00+00:00", r"^steps\[1\]\.due: .* not after"),
        ("steps.0.due", "2026-11-21T11:00:00+00:00", r"^steps\[0\]\.due: .* outside the horizon"),
        ("steps.0.until", "2026-11-21T12:25:00+00:00", r"^steps\[0\]\.until: .* must equal the n"),
        ("steps.1.until", "2026-11-21T12:29:00+00:00", r"^steps\[1\]\.until: .* end of the hor"),
        ("steps.0.live", ["concurrent_writes", "trickle_fsync"],
         r"^steps\[0\]\.live: 'trickle_fsync' is listed as both"),
        ("steps.0.restart", ["trickle_fsync", "concurrent_writes"],
         r"^steps\[0\]\.live: 'concurrent_writes' is listed as both"),
        ("steps.0.live", [], r"^steps\[0\]: changed parameter 'concurrent_writes' is in neither"),
        ("steps.1.live", ["compaction", "heap_size"],
         r"^steps\[1\]\.live\[1\]: 'heap_size' does not change"),
        ("steps.0.batches", [], r"^steps\[0\]\.batches: empty, but the step restarts"),
        ("steps.1.batches", [["cass1"]], r"^steps\[1\]\.batches: must be empty"),
        ("steps.0.batches", [["cass1"], ["cass2", "cass9"], ["cass3"]],
         r"^steps\[0\]\.batches\[1\]\[1\]: unknown host 'cass9'"),
        ("steps.0.batches", [["cass1"], ["cass2", "cass1"], ["cass3"]],
         r"^steps\[0\]\.batches\[1\]\[1\]: host 'cass1' already appears at "
         r"steps\[0\]\.batches\[0\]\[0\]"),
        ("steps.0.batches", [["cass1"], ["cass2"]], r"^steps\[0\]\.batches: host 'cass3' is in no"),
        ("steps.0.batches", [["cass1"], [], ["cass3", "cass2"]],
         r"^steps\[0\]\.batches\[1\]: expected a non-empty list"),
        ("steps.0.expected.net_ops", 1.0, r"^steps\[0\]\.expected\.net_ops: .* benefit_ops - cost"),
        ("steps.0.expected.cost_ops", -1.0, r"^steps\[0\]\.expected\.cost_ops: must be >= 0"),
        ("steps.0.expected", _DELETE, r"^steps\[0\]\.expected: missing"),
        ("steps.0.per_node", {"cass9": {"concurrent_writes": 16}},
         r"^steps\[0\]\.per_node\.cass9: unknown host 'cass9'"),
        ("steps", "none", r"^steps: expected a list"),
    ],
)
def test_malformed_plans_name_the_field(path: str, value: Any, message: str) -> None:
    doc = copy.deepcopy(good_plan())
    _set(doc, path, value)
    with pytest.raises(ValidationError, match=message):
        validate_plan(doc, known_hosts=HOSTS)


def test_restart_parameter_listed_live_is_refused() -> None:
    doc = good_plan()
    doc["steps"][0]["live"] = ["concurrent_writes", "trickle_fsync"]
    doc["steps"][0]["restart"] = []
    doc["steps"][0]["batches"] = []
    with pytest.raises(ValidationError, match=r"steps\[0\]\.live\[1\]: 'trickle_fsync' needs a re"):
        validate_plan(doc)


def test_live_parameter_listed_restart_is_refused() -> None:
    doc = good_plan()
    doc["steps"][1]["live"] = []
    doc["steps"][1]["restart"] = ["compaction"]
    doc["steps"][1]["batches"] = [["cass1"], ["cass2"], ["cass3"]]
    with pytest.raises(
        ValidationError, match=r"steps\[1\]\.restart\[0\]: 'compaction' changes live"
    ):
        validate_plan(doc)


def test_step_that_changes_nothing_is_refused() -> None:
    doc = good_plan()
    doc["steps"][1]["target"] = {"concurrent_writes": 64}
    with pytest.raises(ValidationError, match=r"steps\[1\]\.target: changes nothing"):
        validate_plan(doc)


def test_loose_values_compare_canonically() -> None:
    """'64MiB' and '64' are the same size: not a change, and the plan stores the canonical form."""
    doc = good_plan()
    doc["current_config"]["row_cache_size"] = "64"
    doc["steps"][1]["target"]["row_cache_size"] = "64MiB"
    plan = plan_from_dict(doc)
    assert plan.steps[1].live == ("compaction",)


def test_unknown_hosts_unchecked_without_inventory() -> None:
    doc = good_plan()
    doc["steps"][0]["batches"] = [["x1"], ["x2"]]
    validate_plan(doc)  # no known_hosts: any names are accepted
    with pytest.raises(ValidationError, match=r"batches\[0\]\[0\]: unknown host 'x1'"):
        validate_plan(doc, known_hosts=HOSTS)


def test_not_a_mapping() -> None:
    with pytest.raises(ValidationError, match=r"^plan: expected a mapping"):
        validate_plan([1, 2])


def test_load_plan_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    path.write_text("steps: [unclosed\n")
    with pytest.raises(ValidationError, match=r"bad\.yml: not valid YAML"):
        load_plan(path)


def test_cli_validate_plan_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump(good_plan()))
    assert main(["validate-plan", str(path), "--hosts", "cass1,cass2,cass3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] and out["steps"] == 2 and out["hosts"] == HOSTS


def test_cli_validate_plan_refuses_with_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = good_plan()
    doc["steps"][0]["batches"][2] = ["cass9"]
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate-plan", str(path), "--hosts", "cass1,cass2,cass3"]) == 2
    assert "steps[0].batches[2][0]: unknown host 'cass9'" in capsys.readouterr().err
    assert main(["validate-plan", str(path), "--hosts", "cass1,cass2,cass3", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert not out["valid"] and "unknown host 'cass9'" in out["error"]


class FakeSpace:
    """A two-parameter space: 'a' is live, 'b' needs a restart."""

    def validate(self, config: Any) -> None:
        for k, v in config.items():
            if k not in ("a", "b"):
                raise ValidationError(f"{k}: unknown parameter")
            if not isinstance(v, int):
                raise ValidationError(f"{k}: {v!r} is not an integer")

    def defaults(self) -> dict[str, int]:
        return {"a": 0, "b": 0}

    def restart_params(self, keys: Any) -> list[str]:
        return [k for k in keys if k == "b"]

    def live_params(self, keys: Any) -> list[str]:
        return [k for k in keys if k == "a"]


def test_validator_works_with_any_space_like_object() -> None:
    doc = good_plan()
    doc["current_config"] = {"a": 1}
    doc["steps"] = [doc["steps"][0]]
    st = doc["steps"][0]
    st["until"] = "2026-11-21T12:30:00+00:00"
    st["target"] = {"a": 2, "b": 5}
    st["live"], st["restart"] = ["a"], ["b"]
    plan = plan_from_dict(doc, space=FakeSpace(), known_hosts=HOSTS)
    assert plan.steps[0].restart == ("b",)
    st["target"]["b"] = "x"
    with pytest.raises(ValidationError, match=r"steps\[0\]\.target: b: 'x' is not an integer"):
        validate_plan(doc, space=FakeSpace())
