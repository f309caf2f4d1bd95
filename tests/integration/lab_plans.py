"""Lab plan helpers shared by the integration tests: what the Cassandra nodes run (their
rendered files) and hand-written one-step plans for the executor (the plan is the contract)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from .conftest import APP_TABLE, REPO

HOSTS = {"cass1": "127.0.0.1", "cass2": "127.0.0.2", "cass3": "127.0.0.3"}
LAB = REPO / ".lab" / "cassandra"


def node_pid(host: str) -> int:
    return int((LAB / host / "cassandra.pid").read_text())


def pids() -> dict[str, int]:
    return {h: node_pid(h) for h in HOSTS}


def yaml_setting(host: str, key: str) -> Any:
    return yaml.safe_load((LAB / host / "conf" / "cassandra.yaml").read_text()).get(key)


def toggle(current: Any, a: Any, b: Any) -> Any:
    return b if current == a else a


def current_config(target: dict[str, Any]) -> dict[str, Any]:
    """cass1's current values of the target's keys (cassandra.yaml, heap from the JVM options)."""
    current: dict[str, Any] = {}
    for key in target:
        if key == "heap_size":
            options = (LAB / "cass1" / "conf" / "jvm-server.options").read_text().split()
            current[key] = next(o[4:] for o in options if o.startswith("-Xmx"))
        elif key != "compaction" and yaml_setting("cass1", key) is not None:
            current[key] = yaml_setting("cass1", key)
    return current


def write_plan(
    path: Path,
    *,
    target: dict[str, Any],
    live: list[str],
    restart: list[str],
    batches: list[list[str]],
    cl: str = "QUORUM",
    current: dict[str, Any] | None = None,
    source: str = "tests/integration/test_apply_plan.py",
    tables: list[str] | None = None,
    per_table: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """A one-step plan due a minute ago; ``current`` defaults to what cass1 runs of the
    target's keys; a compaction change names ``tables`` (default: the application table)."""
    now = datetime.now(UTC)
    start = now - timedelta(minutes=5)
    plan = {
        "schema_version": 1,
        "kind": "kairos-plan",
        "cluster": "lab",
        "engine": "cassandra",
        "created_at": now.isoformat(),
        "horizon": {
            "start": start.isoformat(),
            "step_seconds": 60,
            "steps": 30,
        },
        "provenance": {"source": source},
        "availability": {"consistency_level": cl, "tolerated_failures": 0, "aggressive": False},
        # What the nodes run now, so the validator compares the target with reality.
        "current_config": current if current is not None else current_config(target),
        "steps": [
            {
                "id": "s1",
                "due": (now - timedelta(minutes=1)).isoformat(),
                "until": (start + timedelta(minutes=30)).isoformat(),
                "target": target,
                "per_node": {},
                "live": live,
                "restart": restart,
                "batches": batches if restart else [],
                "expected": {"benefit_ops": 1.0e6, "cost_ops": 1.0e4, "net_ops": 9.9e5},
                **({"tables": tables or [APP_TABLE]} if "compaction" in target else {}),
                **({"per_table": per_table} if per_table else {}),
            }
        ],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def flush_writers_plan(
    path: Path, batches: list[list[str]], cl: str = "QUORUM", **more: Any
) -> tuple[Path, int]:
    """A one-step plan flipping memtable_flush_writers (restart-class); the plan and the value."""
    # A value no node runs now (a failed rollout may leave the nodes on different values).
    running = {yaml_setting(h, "memtable_flush_writers") for h in HOSTS}
    writers = next(w for w in (2, 4, 3, 1) if w not in running)
    plan = write_plan(
        path,
        target={"memtable_flush_writers": writers},
        live=[],
        restart=["memtable_flush_writers"],
        batches=batches,
        cl=cl,
        **more,
    )
    return plan, writers
