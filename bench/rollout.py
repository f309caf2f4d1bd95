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
        [--floor] [--watch-hints] [-e cassandra_jolokia_enabled=false]  # `make lab-up` first

The overhead is also split into what each batch adds (its span, from the lock's heartbeat to
its last record, minus its slowest node's own time) and what the run costs once (everything
outside the batches: Ansible's start, the lock, the decision, the pre-flight, the final
record). ``--floor`` then also times bench/floor.yml under the same load: Ansible's start,
Mitogen's start and a task on every node, with nothing decided or restarted - the part of
the run-once cost no change to Kairos' playbooks can remove.

``--watch-hints`` polls every node's ``system_views.pending_hints`` during the rollout and
prints, per batch, which nodes still held hint files for the batch's nodes after its sync gate
had judged them delivered, and until when (``hints_after_gate``).

``ANSIBLE_STRATEGY=linear`` in the environment runs the playbook with Ansible's own strategy
instead of Mitogen's (ansible.cfg), for a comparison on the same code.
"""

from __future__ import annotations

import argparse
import contextlib
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


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of an ansible-playbook run: this checkout's ansible.cfg, and this
    Python's bin directory first on PATH."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), **extra)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def run_rollout(
    cl: str, extra: list[str], cpu_tasks: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], float, float, float]:
    """The run, its wall time, its CPU time (ansible-playbook and every process it waited
    for: workers, module runs, nodetool JVMs; not the nodes it started, nor the load) and
    the wall-clock stamp of its launch."""
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    if cpu_tasks is not None:
        env.update(ANSIBLE_CALLBACK_PLUGINS=str(REPO / "bench" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="kairos_cpu_per_task",
                   KAIROS_CPU_TASKS_OUT=str(cpu_tasks.resolve()))
    launched, began, cpu = time.time(), time.monotonic(), _children_cpu()
    proc = subprocess.run(
        ["ansible-playbook", "playbooks/rolling_restart.yml", "-e", f"cl={cl}",
         *(arg for value in extra for arg in ("-e", value))],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )
    return proc, time.monotonic() - began, _children_cpu() - cpu, launched


def run_floor() -> tuple[float, float]:
    """Wall and CPU seconds of bench/floor.yml (the part of a run no playbook change removes)."""
    began, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run(["ansible-playbook", "bench/floor.yml"], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench/floor.yml failed:\n{proc.stdout[-2000:]}{proc.stderr[-1000:]}")
    return time.monotonic() - began, _children_cpu() - cpu


#: The first task of each batch (rollout.yml's restart play) and the last of a batch's.
BATCH_FIRST, BATCH_RECORD = "Keep the lock's heartbeat", "Record the node verified"


def batch_spans(spans: list[tuple[str, float, float]]) -> list[tuple[float, float]]:
    """(start, end) stamps of each batch: from its heartbeat to the end of its last record."""
    out: list[tuple[float, float]] = []
    for name, began, seconds in spans:
        if name.startswith(BATCH_FIRST):
            out.append((began, began + seconds))
        elif out and name.startswith(BATCH_RECORD):
            out[-1] = (out[-1][0], max(out[-1][1], began + seconds))
    return out


def overhead_split(
    spans: list[tuple[str, float, float]], launched: float, wall: float,
    batches: list[list[str]], nodes: dict[str, dict[str, float]],
) -> dict[str, Any]:
    """The overhead each batch adds and the overhead the run pays once."""
    windows = batch_spans(spans)
    if len(windows) != len(batches):
        return {"error": f"{len(windows)} batch spans found for {len(batches)} batches"}
    per_batch: list[dict[str, Any]] = []
    added = owned = 0.0
    for (began, ended), batch in zip(windows, batches, strict=True):
        own = max(nodes[h]["total"] for h in batch)
        added, owned = added + ended - began - own, owned + own
        per_batch.append({"hosts": batch, "seconds": round(ended - began, 1),
                          "node_seconds": round(own, 1),
                          "overhead_seconds": round(ended - began - own, 1),
                          "overhead_ratio": round((ended - began - own) / own, 2)})
    in_batches = sum(b - a for a, b in windows)
    first_task = spans[0][1] if spans else launched
    return {
        "per_batch": per_batch,
        "batch_overhead_ratio": round(added / owned, 2) if owned else None,
        "once_seconds": round(wall - in_batches, 1),
        "start_to_first_task_seconds": round(first_task - launched, 1),
        "first_task_seconds": round(spans[0][2], 1) if spans else None,
    }


#: The sync gate's tasks, each batch's (the end of its last: the gate said the hints were
#: delivered).
GATE = "cassandra : Sync gate"
LAB_NODES = {"cass1": "127.0.0.1", "cass2": "127.0.0.2", "cass3": "127.0.0.3"}


def hints_after_gate(
    spans: list[tuple[str, float, float]], batches: list[list[str]],
    samples: list[tuple[float, str, str, int]],
) -> list[dict[str, Any]]:
    """Per batch: the hint files for its nodes that any node still listed after the batch's
    sync gate had passed. ``samples``: (stamp, node holding the hints, node they are for,
    files) from each node's system_views.pending_hints. A gate that judged the hints
    delivered should leave none; the seconds say how long after it they were still held."""
    gates = [max((b + d for n, b, d in spans if n.startswith(GATE) and first <= b <= last),
                 default=last) for first, last in batch_spans(spans)]
    out: list[dict[str, Any]] = []
    for passed, batch in zip(gates, batches, strict=False):
        late = [(t, holder, target) for t, holder, target, files in samples
                if target in batch and files > 0 and t > passed]
        out.append({"hosts": batch, "held_by": sorted({h for _, h, _ in late}),
                    "held_until_s_after_gate": round(max(t for t, _, _ in late) - passed, 1)
                    if late else None})
    return out


class HintWatch:
    """Polls every lab node's system_views.pending_hints every 0.5 s in a thread, while a
    rollout runs: (stamp, holder, target, files) for every row seen (node names)."""

    def __init__(self) -> None:
        import threading

        self.samples: list[tuple[float, str, str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HintWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        sys.path.append(str(REPO / "module_utils"))  # after library/ in tests: names overlap
        from kairos_cql import build_cluster

        names = {a: n for n, a in LAB_NODES.items()}
        from kairos_tls import from_env

        login = {"username": os.environ.get("KAIROS_CASSANDRA_USERNAME"),
                 "password": os.environ.get("KAIROS_CASSANDRA_PASSWORD"),
                 "tls": from_env("cassandra")}
        sessions: dict[str, Any] = {}
        while not self._stop.wait(0.5):
            for name, address in LAB_NODES.items():
                try:
                    if name not in sessions:
                        cluster = build_cluster([address], timeout=2, metadata=False, **login)
                        sessions[name] = (cluster, cluster.connect())
                    rows = sessions[name][1].execute(
                        "SELECT address, files FROM system_views.pending_hints", timeout=2)
                    stamp = time.time()
                    self.samples.extend((stamp, name, names.get(str(r.address), str(r.address)),
                                         int(r.files)) for r in rows)
                except Exception:  # a node restarting: a new session next round
                    if name in sessions:
                        sessions.pop(name)[0].shutdown()
        for cluster, _ in sessions.values():
            cluster.shutdown()


def summarise(
    wall: float, spans: list[tuple[str, float, float]], launched: float
) -> dict[str, Any]:
    rollout = json.loads((REPO / ".kairos" / "rollout-lab-cassandra.json").read_text())
    state = json.loads(Path(rollout["state"]).read_text())
    nodes = state["steps"][rollout["step_id"]]["nodes"]
    node_seconds = sum(max(nodes[h]["total"] for h in batch) for batch in rollout["batches"])
    phases: dict[str, float] = defaultdict(float)
    by_task: dict[str, float] = defaultdict(float)
    tasks = [(name, seconds) for name, _, seconds in spans]
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
        "overhead_split": overhead_split(spans, launched, wall, rollout["batches"], nodes),
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
    parser.add_argument("--floor", action="store_true",
                        help="after the rollout, under the same load, also time bench/floor.yml")
    parser.add_argument("--watch-hints", action="store_true",
                        help="poll every node's pending hints during the rollout and print, per "
                             "batch, who still held hint files for its nodes after its sync gate")
    args = parser.parse_args()
    background = None
    from lab_load import lab_login

    lab_login()  # the lab's logins, through the environment as for `kairos load`
    if args.load > 0:
        from planner.loadgen import BackgroundLoad

        background = BackgroundLoad(
            engine="cassandra", contact_points=["127.0.0.1", "127.0.0.2", "127.0.0.3"],
            cl=args.cl, keyspace="kairos_bench", keys=2000, rate=args.load, concurrency=16,
            max_seconds=1800, seed=5,
        ).start()
        time.sleep(3)
    floor = None
    try:
        with HintWatch() if args.watch_hints else contextlib.nullcontext() as watch:
            proc, wall, cpu, launched = run_rollout(args.cl, args.extra_vars, args.cpu_tasks)
        if proc.returncode == 0 and args.floor:
            floor = run_floor()
    finally:
        result = background.stop() if background is not None else None
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], file=sys.stderr)
        return 1
    line: dict[str, Any] = {"case": "rolling_restart", "consistency_level": args.cl}
    report = json.loads(proc.stdout)
    spans = task_spans(report)
    if args.tasks:
        # Start offsets show which per-host entries overlapped (ran in parallel).
        first = spans[0][1] if spans else 0.0
        args.tasks.write_text(json.dumps(
            [[n, round(b - first, 2), round(s, 2)] for n, b, s in spans], indent=0))
    line.update(summarise(wall, spans, launched))
    line["orchestration_cpu_seconds"] = round(cpu, 1)
    if floor is not None:
        line["floor"] = {"wall_seconds": round(floor[0], 1), "cpu_seconds": round(floor[1], 1)}
    line["drain_parts"] = drain_parts(report)
    if watch is not None:
        rollout = json.loads((REPO / ".kairos" / "rollout-lab-cassandra.json").read_text())
        line["hints_after_gate"] = hints_after_gate(spans, rollout["batches"], watch.samples)
    if result is not None:
        line["load"] = {"ops": result.ops, "ops_per_s": round(result.ops_per_s),
                        "failures": dict(result.failures),
                        "lost_acknowledged_writes": result.lost_acknowledged_writes}
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
