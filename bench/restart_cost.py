#!/usr/bin/env python3
"""What a rolling restart costs on the enveloped lab, measured (a script, not a test).

Under a saturating closed-loop load (``--processes`` x ``--concurrency`` in flight, no rate
limit, ``--cl``),
after ``--warmup`` unmeasured and ``--baseline`` measured seconds, the executor restarts
every node (playbooks/rolling_restart.yml, batches from the live ring for ``--cl``); the
load runs on ``--after`` seconds past the last node's return. A watcher polls every node's
CQL port four times a second: a closed port is a node down. From the served operations
second by second, planner/model/restart_impact.py computes:

- ``down_share``: served ops/s while a batch was down, over the baseline;
- ``survivor_penalty``: what the nodes that stayed up lost beyond the batch's own share;
- ``warmup_seconds``: full-capacity seconds lost while restarted nodes were up again (cold
  JIT and caches), beyond the baseline's own noise;
- ``recovery_seconds``: from the last return until the 10-s mean is back to 95 %.

It prints one JSON line and, with ``--out``, writes the file ``kairos plan --restart-costs``
reads (with the envelopes read back from the kernel, and the load, as its environment).

    .venv/bin/python bench/restart_cost.py [--out inventories/local/calibration/restart-costs.json]
        # `make lab-up` first
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))  # after library/ in tests: names overlap

import kairos_cgroup  # noqa: E402  (module_utils: plain Python, no Ansible imports)
from kairos_net import accepts_connections  # noqa: E402
from lab_load import add_load_arguments, lab_login  # noqa: E402

from planner.loadgen import BackgroundLoad, envelope  # noqa: E402
from planner.model.restart_impact import restart_impact  # noqa: E402

NODES = {"cass1": "127.0.0.1", "cass2": "127.0.0.2", "cass3": "127.0.0.3"}


class PortWatch(threading.Thread):
    """Every node's CQL port, four times a second: the windows in which each was closed."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.windows: list[tuple[str, float, float]] = []
        self._closed: dict[str, float] = {}

    def run(self) -> None:
        while not self.stop.wait(0.25):
            now = time.monotonic()
            for host, address in NODES.items():
                up = accepts_connections(address, 9042, timeout=0.2)
                if not up and host not in self._closed:
                    self._closed[host] = now
                elif up and host in self._closed:
                    self.windows.append((host, self._closed.pop(host), now))


def lab_environment() -> dict[str, Any]:
    return dict(kairos_cgroup.held([f"lab-{host}" for host in NODES]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 2 x 128 in flight saturates the enveloped nodes (bench/envelope_probe.py): a loop that
    # does not would measure its own latency, not the capacity left while a node is down.
    add_load_arguments(p, mix="read=0.5,update=0.5", keys=20_000, concurrency=128, warmup=30.0)
    p.add_argument("--baseline", type=float, default=60.0)
    p.add_argument("--after", type=float, default=90.0)
    p.add_argument("--out", type=Path, help="write the figures, as kairos plan --restart-costs "
                                            "reads them, to this file")
    args = p.parse_args()
    lab_login()
    # This script is the control host, its load the application's machines.
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))
    points: list[tuple[float, float]] = []

    def progress(_elapsed: float, ops: int, failures: int) -> None:
        points.append((time.monotonic(), ops - failures))

    load = BackgroundLoad(
        engine="cassandra", contact_points=list(NODES.values()), cl=args.cl,
        keyspace="kairos_restart_cost", keys=args.keys, mix=args.mix, concurrency=args.concurrency,
        processes=args.processes,
        max_seconds=1800, seed=11, on_progress=progress, preload=True,
    )
    watch = PortWatch()
    try:
        load.start()
        print(f"restart_cost: load running; warm-up {args.warmup:.0f} s, baseline "
              f"{args.baseline:.0f} s", file=sys.stderr)
        time.sleep(args.warmup)
        b0 = time.monotonic()
        time.sleep(args.baseline)
        b1 = time.monotonic()
        watch.start()
        print("restart_cost: rolling restart (playbooks/rolling_restart.yml)", file=sys.stderr)
        began = time.monotonic()
        proc = subprocess.run(
            [str(REPO / ".venv" / "bin" / "ansible-playbook"), "playbooks/rolling_restart.yml",
             "-e", f"cl={args.cl}"], cwd=REPO, capture_output=True, text=True, check=False)
        rollout_seconds = time.monotonic() - began
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-2000:], file=sys.stderr)
            return 1
        print(f"restart_cost: rollout {rollout_seconds:.0f} s; observing {args.after:.0f} s",
              file=sys.stderr)
        time.sleep(args.after)
        end = time.monotonic()
    finally:
        watch.stop.set()
        result = load.stop()
    record = json.loads((REPO / ".kairos" / "rollout-lab-cassandra.json").read_text())
    batches = record["batches"]
    share = max(len(b) for b in batches) / sum(len(b) for b in batches)
    environment = {
        **lab_environment(),
        "load": {"cl": args.cl, "concurrency": args.concurrency, "processes": args.processes,
                 "mix": args.mix, "keys": args.keys, "closed_loop": True},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/restart_cost.py " + " ".join(sys.argv[1:]),
        "rollout_seconds": round(rollout_seconds, 1),
        "batches": batches,
        "failures": dict(result.failures),
        "lost_acknowledged_writes": result.lost_acknowledged_writes,
    }
    impact = restart_impact(points, baseline=(b0, b1),
                            down=[(lo, hi) for _h, lo, hi in watch.windows], end=end,
                            batch_share=share, environment=environment)
    line = impact.to_json()
    line["down_windows"] = [(h, round(lo - began, 1), round(hi - began, 1))
                            for h, lo, hi in watch.windows]
    print(json.dumps(line))
    if args.out:
        args.out.write_text(json.dumps(impact.to_json(), indent=2) + "\n")
    return 0 if result.failed == 0 and result.lost_acknowledged_writes == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
