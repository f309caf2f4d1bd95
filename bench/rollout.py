#!/usr/bin/env python3
"""Orchestration overhead of a Cassandra rollout on the local lab (a script, not a test).

Runs playbooks/rolling_restart.yml (or reads an earlier run's state file), then prints one
JSON line: the rollout's wall time, the nodes' own drain/stop/start/sync time (per batch,
the slowest node of the batch, since a batch's nodes restart together), and the difference:
what Ansible, the lock, pre-flight and the gates' polling add on top.

    .venv/bin/python bench/rollout.py [--cl QUORUM]      # needs `make lab-up`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cl", default="QUORUM", help="consistency level the batches keep")
    args = parser.parse_args()
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    began = time.monotonic()
    proc = subprocess.run(
        ["ansible-playbook", "playbooks/rolling_restart.yml", "-e", f"cl={args.cl}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - began
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], file=sys.stderr)
        return 1
    rollout = json.loads((REPO / ".kairos" / "rollout-lab-cassandra.json").read_text())
    state = json.loads(Path(rollout["state"]).read_text())
    nodes = state["steps"][rollout["step_id"]]["nodes"]
    node_seconds = sum(max(nodes[h]["total"] for h in batch) for batch in rollout["batches"])
    print(
        json.dumps(
            {
                "case": "rolling_restart",
                "consistency_level": args.cl,
                "nodes": len(nodes),
                "batches": len(rollout["batches"]),
                "wall_seconds": round(wall, 1),
                "node_seconds": round(node_seconds, 1),
                "overhead_seconds": round(wall - node_seconds, 1),
                "per_node": nodes,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
