#!/usr/bin/env python3
"""Where a Cassandra rollout's wall time goes on the local lab (a script, not a test).

Runs playbooks/rolling_restart.yml, optionally under a QUORUM load (``--load OPS``), with
Ansible's JSON callback, then prints one JSON line: the rollout's wall time; the nodes' own
drain/stop/start/sync time (per batch, the slowest node of the batch, since a batch's nodes
restart together); the orchestration overhead (wall minus the nodes' own time) and its ratio
to the nodes' time; the wall time per phase (pre-flight, per-batch checks, drain, restart
(stop, the files and start in one module run), gate, read-back, record, Ansible's own start
and between-task time); the slowest tasks; and each node's drain in its parts (leaving gossip,
the pause, the drain); the orchestration's CPU seconds (ansible-playbook and every process it
waited for: its workers, the module runs, the nodetool JVMs), which on the lab's shared CPUs
turn into wall time the nodes wait for. With ``--load``, the load's operations and failures.

    .venv/bin/python bench/rollout.py [--cl QUORUM] [--load 300] [--tasks FILE] [--cpu-tasks FILE]
        [-e cassandra_jolokia_enabled=false]  # `make lab-up` first

``ANSIBLE_STRATEGY=linear`` in the environment runs the playbook with Ansible's own strategy
instead of Mitogen's (ansible.cfg), for a comparison on the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Task-name fragments -> phase, first match wins (names as the playbooks and the role say).
PHASES = (
    ("restart (stop, files, start)", ("Restart the node on",)),
    ("gate", ("Sync gate",)),
    ("drain", ("Drain the node",)),
    ("stop", ("Stop the",)),
    ("start", ("Start the", "Wait for", "serves CQL", "launcher")),
    ("template", ("Template", "Render the", "Merge the rollout", "applied settings",
                  "JVM options")),
    ("read-back", ("Read back",)),
    ("record", ("Record the node", "Record ", "release", "Release")),
    ("batch checks", ("Re-read the live ring", "Refuse the batch", "heartbeat")),
)


def phase_of(task: str) -> str:
    for phase, fragments in PHASES:
        if any(f in task for f in fragments):
            return phase
    return "pre-flight and other"


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def task_spans(report: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(task name, start stamp, seconds) for every task the JSON callback reported, in order."""
    out = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            meta = task["task"]
            span = meta.get("duration") or {}
            if span.get("start") and span.get("end"):
                began = _stamp(span["start"])
                out.append((meta.get("name", "?"), began, _stamp(span["end"]) - began))
    return out


def drain_parts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Host -> the drain's parts in seconds (leave gossip, pause, drain), as cassandra_drain
    returned them (the rollout's record keeps only their sum), and what carried its calls
    (the node's Jolokia agent or nodetool JVMs)."""
    out = {}
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"].get("name") == "cassandra : Drain the node":
                for host, result in task.get("hosts", {}).items():
                    if result.get("phases"):
                        out[host] = {"parts": result["phases"], "via": result.get("via")}
    return out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_rollout(
    cl: str, extra: list[str], cpu_tasks: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """The run, its wall time and its CPU time: ansible-playbook and every process it waited
    for (workers, module runs, nodetool JVMs; not the nodes it started, nor the load)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    if cpu_tasks is not None:
        env.update(ANSIBLE_CALLBACK_PLUGINS=str(REPO / "bench" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="kairos_cpu_per_task",
                   KAIROS_CPU_TASKS_OUT=str(cpu_tasks.resolve()))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    began, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run(
        ["ansible-playbook", "playbooks/rolling_restart.yml", "-e", f"cl={cl}",
         *(arg for value in extra for arg in ("-e", value))],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )
    return proc, time.monotonic() - began, _children_cpu() - cpu


def summarise(wall: float, tasks: list[tuple[str, float]]) -> dict[str, Any]:
    rollout = json.loads((REPO / ".kairos" / "rollout-lab-cassandra.json").read_text())
    state = json.loads(Path(rollout["state"]).read_text())
    nodes = state["steps"][rollout["step_id"]]["nodes"]
    node_seconds = sum(max(nodes[h]["total"] for h in batch) for batch in rollout["batches"])
    phases: dict[str, float] = defaultdict(float)
    by_task: dict[str, float] = defaultdict(float)
    for name, seconds in tasks:
        phases[phase_of(name)] += seconds
        by_task[name] += seconds
    # Process start, playbook parsing and the time between tasks: in no task's span.
    phases["ansible (no task)"] = wall - sum(s for _, s in tasks)
    slowest = sorted(by_task.items(), key=lambda kv: -kv[1])[:8]
    return {
        "nodes": len(nodes),
        "batches": len(rollout["batches"]),
        "wall_seconds": round(wall, 1),
        "node_seconds": round(node_seconds, 1),
        "overhead_seconds": round(wall - node_seconds, 1),
        "overhead_ratio": round((wall - node_seconds) / node_seconds, 2) if node_seconds else None,
        "phase_seconds": {k: round(v, 1) for k, v in sorted(phases.items(), key=lambda kv: -kv[1])},
        "slowest_tasks": {k: round(v, 1) for k, v in slowest},
        "per_node": nodes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cl", default="QUORUM", help="consistency level the batches keep")
    parser.add_argument("--load", type=float, default=0.0, metavar="OPS",
                        help="run a load of OPS operations/s at the CL during the rollout")
    parser.add_argument("--tasks", type=Path, metavar="FILE",
                        help="also write every task's name, start (seconds after the first "
                             "task's) and seconds, in order, to FILE (JSON)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="passed to ansible-playbook, e.g. cassandra_jolokia_enabled=false "
                             "(the nodes restart without the Jolokia agent: nodetool JVMs)")
    parser.add_argument("--cpu-tasks", type=Path, metavar="FILE",
                        help="also write each task's CPU seconds over the controller's process "
                             "tree (bench/callback_plugins/kairos_cpu_per_task.py) to FILE")
    args = parser.parse_args()
    background = None
    if args.load > 0:
        from planner.loadgen import BackgroundLoad

        # The lab's login, through the environment as for `kairos load` (never argv).
        secret = REPO / ".lab" / "secrets" / "cassandra-cql-password"
        if "KAIROS_CASSANDRA_USERNAME" not in os.environ and secret.exists():
            os.environ["KAIROS_CASSANDRA_USERNAME"] = "kairos"
            os.environ["KAIROS_CASSANDRA_PASSWORD"] = secret.read_text().strip()

        background = BackgroundLoad(
            engine="cassandra", contact_points=["127.0.0.1", "127.0.0.2", "127.0.0.3"],
            cl=args.cl, keyspace="kairos_bench", keys=2000, rate=args.load, concurrency=16,
            max_seconds=1800, seed=5,
        ).start()
        time.sleep(3)
    try:
        proc, wall, cpu = run_rollout(args.cl, args.extra_vars, args.cpu_tasks)
    finally:
        result = background.stop() if background is not None else None
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], file=sys.stderr)
        return 1
    line: dict[str, Any] = {"case": "rolling_restart", "consistency_level": args.cl}
    report = json.loads(proc.stdout)
    spans = task_spans(report)
    tasks = [(name, seconds) for name, _, seconds in spans]
    if args.tasks:
        # Start offsets show which per-host entries overlapped (ran in parallel).
        first = spans[0][1] if spans else 0.0
        args.tasks.write_text(json.dumps(
            [[n, round(b - first, 2), round(s, 2)] for n, b, s in spans], indent=0))
    line.update(summarise(wall, tasks))
    line["orchestration_cpu_seconds"] = round(cpu, 1)
    line["drain_parts"] = drain_parts(report)
    if result is not None:
        line["load"] = {"ops": result.ops, "ops_per_s": round(result.ops_per_s),
                        "failures": dict(result.failures),
                        "lost_acknowledged_writes": result.lost_acknowledged_writes}
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
