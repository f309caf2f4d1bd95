"""A Redis compact-encoding threshold changes in a plan by a reload (docs/redis-executor.md,
"A reload re-encodes"): a step listing it live is refused naming the field and why, and
`kairos explain` says what the restart of a step that changes one is for; a step that
changes no threshold says nothing of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.cli import main
from planner.model.spaces import change_kind, get_space

T0 = "2026-12-02T12:00:00+00:00"


#: One node a batch, replicas first (a Redis plan's restart batches).
BATCHES = [["redis4"], ["redis5"], ["redis6"], ["redis1"], ["redis2"], ["redis3"]]


def redis_plan(target: dict[str, Any], current: dict[str, Any],
               restart: tuple[str, ...] = ()) -> dict[str, Any]:
    """A hand-written Redis plan: one step at minute 5 until minute 30, ``restart`` the keys
    it restarts for (the others live)."""
    return {
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "redis",
        "created_at": T0, "horizon": {"start": T0, "step_seconds": 60, "steps": 30},
        "availability": {"consistency_level": "ONE"}, "current_config": current,
        "provenance": {},
        "steps": [{"id": "s1", "due": "2026-12-02T12:05:00+00:00",
                   "until": "2026-12-02T12:30:00+00:00", "target": target, "per_node": {},
                   "live": sorted(k for k in target if k not in restart),
                   "restart": list(restart), "batches": BATCHES if restart else [],
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


def test_a_threshold_changes_by_a_reload_and_explain_says_why_the_nodes_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    current = {"hash-max-listpack-entries": 512, "maxmemory-policy": "allkeys-lfu"}
    target = {"hash-max-listpack-entries": 1024, "maxmemory-policy": "allkeys-lru"}
    assert change_kind("redis", "hash-max-listpack-entries", 512, 1024) == "restart"
    assert get_space("redis")["hash-max-listpack-entries"].change == "live"  # CONFIG SET takes it
    # Listed live, it is refused before anything is read, naming the field and why.
    path = tmp_path / "live.yml"
    path.write_text(yaml.safe_dump(redis_plan(target, current), sort_keys=False))
    assert main(["explain", str(path)]) == 2
    err = capsys.readouterr().err
    assert ("steps[0].live[0]: 'hash-max-listpack-entries' re-encodes the data only at a "
            "restart" in err), err
    text = explained(tmp_path, capsys,
                     redis_plan(target, current, restart=("hash-max-listpack-entries",)))
    assert "hash-max-listpack-entries: 512 -> 1024  [restart]" in text
    assert "maxmemory-policy: 'allkeys-lfu' -> 'allkeys-lru'  [live]" in text
    assert "rolling restart in 6 batch(es)" in text
    # No consistency level applies to Redis: the line says how its executor restarts.
    assert ("Availability: restarts one node at a time, replicas first, a coordinated "
            "failover before each primary" in text), text
    assert "tolerated failure" not in text
    assert ("hash-max-listpack-entries: a reload; each node restarts and encodes the data it "
            "holds under the new value" in text), text
    # A step that changes no threshold (or keeps it) says nothing of encodings.
    text = explained(tmp_path, capsys, redis_plan({"maxmemory-policy": "allkeys-lru"}, current))
    assert "applied live, no restart" in text and "a reload" not in text


def test_the_planner_prices_a_threshold_change_as_a_restart_and_a_policy_change_live() -> None:
    from planner.planning.pipeline import restart_matrix

    candidates = [
        {"maxmemory-policy": p, "hash-max-listpack-entries": n}
        for p in ("allkeys-lfu", "allkeys-lru") for n in (512, 1024)
    ]
    restarts = restart_matrix("redis", candidates)
    for a, before in enumerate(candidates):
        for b, after in enumerate(candidates):
            threshold = before["hash-max-listpack-entries"] != after["hash-max-listpack-entries"]
            assert restarts[a, b] == threshold, (before, after)
