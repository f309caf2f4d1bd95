#!/usr/bin/env python3
"""Who binds the lab under a load: each envelope's CPU, throttling and reads, and the ops/s.

Runs a closed-loop Cassandra load in the lab's load envelope (this script joins the control
envelope, as the tests do), waits ``--warmup`` seconds, then reads every envelope's counters
from the kernel at the start and the end of ``--seconds`` and prints, per envelope, the CPU
it used (cores), its throttled time (seconds per second, summed over CPUs), its read IOPS and
its page cache, then the served ops/s. A node at its quota and throttled, with the client
below what the nodes leave of the machine, means the nodes bind; a client using all that is
left, with the nodes below their quota, means the client binds (docs/envelopes.md).

    .venv/bin/python bench/envelope_probe.py [--concurrency 128] [--processes 2]
        [--mix read=0.9,update=0.1] [--cl QUORUM] [--keys 5000] [--keyspace kairos_probe]
        [--distribution zipfian] [--value-size 100]      # `make lab-up` first
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))  # after library/ in tests: names overlap

import kairos_cgroup  # noqa: E402  (module_utils: plain Python, no Ansible imports)
from lab_load import add_load_arguments, lab_login  # noqa: E402

from planner.loadgen import BackgroundLoad, envelope  # noqa: E402

ENVELOPES = ("lab-cass1", "lab-cass2", "lab-cass3", "lab-load", "lab-control")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(p, mix="read=0.9,update=0.1", keys=5000, concurrency=128, warmup=15.0)
    p.add_argument("--keyspace", default="kairos_probe")
    p.add_argument("--distribution", default="zipfian")
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args()
    kind, folders = kairos_cgroup.layout()
    if kind is None:
        print(f"envelope_probe: no envelopes here: {folders}", file=sys.stderr)
        return 2
    lab_login()
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))
    served: list[tuple[float, int]] = []
    load = BackgroundLoad(
        engine="cassandra", contact_points=["127.0.0.1", "127.0.0.2", "127.0.0.3"],
        cl=args.cl, keyspace=args.keyspace, keys=args.keys, mix=args.mix,
        distribution=args.distribution, value_size=args.value_size,
        concurrency=args.concurrency, processes=args.processes,
        max_seconds=args.warmup + args.seconds + 60, seed=1,
        on_progress=lambda _e, ops, failed: served.append((time.monotonic(), ops - failed)),
    )
    with load:
        time.sleep(args.warmup)
        first = {n: kairos_cgroup.read(kind, folders, n) for n in ENVELOPES}
        t0, ops0 = time.monotonic(), served[-1][1]
        time.sleep(args.seconds)
        last = {n: kairos_cgroup.read(kind, folders, n) for n in ENVELOPES}
        t1, ops1 = time.monotonic(), served[-1][1]
        load.stop()
    span = t1 - t0
    for name in ENVELOPES:
        if first[name] is None or last[name] is None:
            print(f"{name}: no envelope")
            continue
        a, b = first[name]["usage"], last[name]["usage"]
        print(f"{name}: {kairos_cgroup.describe(last[name]['limits'])}; cpu "
              f"{(b['cpu_seconds'] - a['cpu_seconds']) / span:.2f} cores, throttled "
              f"{(b['throttled_seconds'] - a['throttled_seconds']) / span:.2f} s/s, read IOPS "
              f"{(b['read_ios'] - a['read_ios']) / span:.0f}, page cache "
              f"{b['page_cache_bytes'] / 2**20:.0f} MiB")
    result = load.result()
    print(f"served {(ops1 - ops0) / span:.0f} ops/s over {span:.0f} s; failures "
          f"{dict(result.failures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
