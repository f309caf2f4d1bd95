#!/usr/bin/env python3
"""What a compaction-strategy change costs under load on the lab, measured (a script, not a test).

Under a saturating closed-loop load of ``--mix`` on a preloaded table (``--processes`` x
``--concurrency`` in flight, no rate limit, ``--cl``), after ``--warmup`` unmeasured and
``--baseline`` measured seconds, the executor applies ``--to`` (playbooks/change_settings.yml,
as a plan step does: ALTER TABLE, read back on every node); the load runs on while every
node rewrites its SSTables, until no node has run or queued a compaction for 15 s, and
``--steady`` seconds more. From the served operations second by second,
planner/model/change_cost.py computes ``change_seconds``: the seconds of the new strategy's full
throughput lost from the change until the rewrite ended. ``--back`` then measures the
change back to the strategy that ran before, in the same way.

It prints one JSON line per change and, with ``--out``, merges each into the file
``kairos plan --change-costs`` reads (with the envelopes read back from the kernel, and the
load, as its environment). The lab must hold the table (docs/calibration.md, "On the
enveloped lab", has the preload command).

    .venv/bin/python bench/change_cost.py --back \\
        [--out inventories/local/calibration/change-costs.json]   # `make lab-up` first
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))  # after library/ in tests: names overlap

import kairos_cgroup  # noqa: E402  (module_utils: plain Python, no Ansible imports)
from lab_load import add_load_arguments, lab_login  # noqa: E402

from planner.calibrate.bench import (  # noqa: E402
    ExecutorBench,
    read_running_config,
    wait_for_compactions,
)
from planner.errors import KairosError, ValidationError  # noqa: E402
from planner.loadgen import (  # noqa: E402
    BackgroundLoad,
    LoadConfig,
    envelope,
)
from planner.model.change_cost import ChangeCost, change_cost, merge_entry  # noqa: E402

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
#: A node whose backlog stayed at zero this long has settled (wait_for_compactions).
QUIET_SECONDS = 15.0


def say(msg: str) -> None:
    print(f"change_cost: {msg}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--to", default="LeveledCompactionStrategy",
                   help="the compaction strategy to change to (default leveled)")
    p.add_argument("--back", action="store_true",
                   help="then change back to the strategy that ran before, measured too")
    add_load_arguments(p, mix="update=0.5,scan=0.5", keys=250_000, concurrency=64, warmup=60.0)
    p.add_argument("--keyspace", default="kairos_effect")
    p.add_argument("--table", default="usertable")
    p.add_argument("--value-size", type=int, default=4000)
    p.add_argument("--distribution", default="uniform")
    p.add_argument("--baseline", type=float, default=60.0)
    p.add_argument("--steady", type=float, default=60.0,
                   help="seconds observed after the rewrite (the new strategy's own rate)")
    p.add_argument("--timeout", type=float, default=1200.0,
                   help="give up when the rewrite has not ended after this many seconds")
    p.add_argument("--inventory", default="inventories/local/hosts.yml")
    p.add_argument("--playbook", default="playbooks/change_settings.yml")
    p.add_argument("--out", type=Path, help="merge the figures into this file, as kairos plan "
                                            "--change-costs reads it")
    return p.parse_args()


def measure(args: argparse.Namespace, bench: ExecutorBench, clock: Callable[[], float],
            before: str, after: str, baseline: tuple[float, float],
            points: list[tuple[float, float]]) -> ChangeCost:
    """Apply ``after`` under the running load and observe until the rewrite has settled."""
    say(f"applying compaction {after} through the executor, under load")
    c0 = clock()
    bench.apply({"compaction": after})
    c1 = clock()
    say(f"applied in {c1 - c0:.0f} s; waiting for every node's rewrite to end")
    wait_for_compactions(HOSTS, port=9042, timeout=args.timeout, quiet_seconds=QUIET_SECONDS,
                         log=say)
    settled = max(c1, clock() - QUIET_SECONDS)
    say(f"rewrite ended {settled - c0:.0f} s after the change; observing {args.steady:.0f} s")
    time.sleep(args.steady)
    end = clock()
    environment = {
        **dict(kairos_cgroup.held([f"lab-{h}" for h in ("cass1", "cass2", "cass3")])),
        "load": {"cl": args.cl, "concurrency": args.concurrency, "processes": args.processes,
                 "mix": args.mix, "keys": args.keys, "value_size": args.value_size,
                 "distribution": args.distribution, "table": f"{args.keyspace}.{args.table}",
                 "closed_loop": True},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/change_cost.py " + " ".join(sys.argv[1:]),
    }
    return change_cost(list(points), baseline=baseline, changed=(c0, c1), settled=settled,
                       end=end, parameter="compaction", before=before, after=after,
                       environment=environment)


def main() -> int:
    args = parse_args()
    lab_login()
    # This script is the control host, its load the application's machines.
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))
    running, _version = read_running_config(["compaction"], hosts=HOSTS, port=9042,
                                            keyspace=args.keyspace, table=args.table)
    before = str(running["compaction"])
    if before == args.to:
        raise ValidationError(f"--to: the table already runs {before}; nothing to measure")
    config = LoadConfig(engine="cassandra", contact_points=HOSTS, cl=args.cl,
                        keyspace=args.keyspace, table=args.table, keys=args.keys,
                        max_keys=max(args.keys, 1_000_000), value_size=args.value_size,
                        distribution=args.distribution, mix=args.mix,
                        concurrency=args.concurrency, processes=args.processes,
                        seconds=3 * 3600, verify=False, seed=13)
    bench = ExecutorBench(load=config, warmup_seconds=0.0, measure_seconds=0.0,
                          playbook=REPO / args.playbook, inventory=REPO / args.inventory,
                          rollout_cl=args.cl, log_path=REPO / ".kairos" / "change-cost.log",
                          log=say)
    points: list[tuple[float, float]] = []

    def progress(_elapsed: float, ops: int, failures: int) -> None:
        points.append((time.monotonic(), ops - failures))

    load = BackgroundLoad(config, max_seconds=3 * 3600, max_requests=None,
                          on_progress=progress)
    results: list[ChangeCost] = []
    try:
        load.start()
        say(f"load running ({args.mix}); warm-up {args.warmup:.0f} s, baseline "
            f"{args.baseline:.0f} s")
        time.sleep(args.warmup)
        b0 = time.monotonic()
        time.sleep(args.baseline)
        results.append(measure(args, bench, time.monotonic, before, args.to,
                               (b0, time.monotonic()), points))
        print(json.dumps(results[-1].to_json()), flush=True)
        if args.back:
            # The steady window after the first change is the way back's baseline.
            b0 = time.monotonic()
            time.sleep(args.baseline)
            results.append(measure(args, bench, time.monotonic, args.to, before,
                                   (b0, time.monotonic()), points))
            print(json.dumps(results[-1].to_json()), flush=True)
    except KairosError as exc:
        say(f"stopped: {exc}")
        return 1
    finally:
        result = load.stop()
    say(f"load: {result.ops} operations, {result.failed} failed, "
        f"{result.lost_acknowledged_writes} lost acknowledged writes")
    if args.out:
        for entry in results:
            merge_entry(args.out, entry)
        say(f"wrote {args.out}")
    return 0 if result.failed == 0 and result.lost_acknowledged_writes == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
