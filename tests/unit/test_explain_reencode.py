"""`kairos explain` on a live Redis step that changes a compact-encoding threshold says
that the data already held keeps its encoding until refilled or reloaded; a step that
changes no threshold says nothing of it (docs/redis-executor.md, "A reload re-encodes")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.cli import main
from planner.model.spaces import get_space

T0 = "2026-12-02T12:00:00+00:00"


def redis_plan(target: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A hand-written Redis plan: one live step at minute 5 until minute 30."""
    return {
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "redis",
        "created_at": T0, "horizon": {"start": T0, "step_seconds": 60, "steps": 30},
        "availability": {"consistency_level": "ONE"}, "current_config": current,
        "provenance": {},
        "steps": [{"id": "s1", "due": "2026-12-02T12:05:00+00:00",
                   "until": "2026-12-02T12:30:00+00:00", "target": target, "per_node": {},
                   "live": sorted(target), "restart": [], "batches": [],
                   "expected": {"benefit_ops": 1.0, "cost_ops": 0.0, "net_ops": 1.0}}],
    }


def explained(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any]) -> str:
    path = tmp_path / "plan.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert main(["explain", str(path)]) == 0
    return capsys.readouterr().out


def test_the_redis_encoding_thresholds_and_only_they_are_reencode_parameters() -> None:
    flagged = {k for k, p in get_space("redis").parameters.items() if p.reencode}
    assert {"hash-max-listpack-entries", "set-max-intset-entries"} <= flagged
    assert all("max" in k for k in flagged) and "maxmemory-policy" not in flagged
    assert not any(p.reencode for p in get_space("cassandra").parameters.values())


def test_a_live_threshold_change_is_said_to_leave_the_held_data_encoded_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    current = {"hash-max-listpack-entries": 512, "maxmemory-policy": "allkeys-lfu"}
    text = explained(tmp_path, capsys, redis_plan(
        {"hash-max-listpack-entries": 1024, "maxmemory-policy": "allkeys-lru"}, current))
    assert "applied live, no restart" in text
    assert ("hash-max-listpack-entries: encodes only what is written after the change" in text
            and "kairos_restart_all=true" in text), text
    # A step that changes no threshold (or keeps it) says nothing of encodings.
    text = explained(tmp_path, capsys, redis_plan({"maxmemory-policy": "allkeys-lru"}, current))
    assert "encodes only" not in text
