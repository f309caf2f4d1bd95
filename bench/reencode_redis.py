#!/usr/bin/env python3
"""What a listpack threshold change yields live, and after a rolling reload (a script, not a test).

Keys written under one ``hash-max-listpack-entries`` keep their encoding when it changes:
raised live, a hash the cache already holds as a hashtable stays one until it is evicted
and filled again (docs/payoff.md, "Redis": the live change paid a fifth of its gain). A
restart reloads the data, and a loaded hash is encoded under the threshold in force.

On the lab's Redis Cluster, under the hash-read closed loop of the calibration's data
(``--keys`` hashes of 256-768 fields, uniform, ``--concurrency`` threads), it measures:

1. ``before``: ``--measure`` s at ``--from`` after a ``--warmup`` that filled the cache;
2. ``live``: ``--measure`` s after ``--to`` is set live (playbooks/change_settings_redis.yml:
   CONFIG SET, the conf file, read back), then ``--measure`` s more (the control: what the
   refills alone re-encode in that time);
3. ``reloaded``: ``--measure`` s after every node restarts on it through the failover path
   (the same playbook with ``kairos_restart_all``: replicas first, each primary after a
   coordinated failover, a sync gate after each).

Each phase prints the load's figures (ops/s, read hit ratio, evictions, failed commands,
lost WAIT-acknowledged writes) and the primaries' memory and sampled compact-encoding
share, and the rollouts their durations; the last line is a Markdown table. At the end
``--from`` is set back live and the load's keys are unlinked.

    . bench/lab_env.sh && .venv/bin/python bench/reencode_redis.py   # `make lab-up` first
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from planner import loadgen  # noqa: E402
from planner.calibrate.bench import ExecutorBench  # noqa: E402
from planner.loadgen import BackgroundLoad, LoadConfig, envelope  # noqa: E402
from planner.workload import collect  # noqa: E402

KEY = "hash-max-listpack-entries"
NODES = ",".join(f"redis{i}=127.0.0.1:{7000 + i}" for i in range(1, 7))
CONTACT = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="start", type=int, default=512, help="threshold to start at")
    p.add_argument("--to", type=int, default=1024, help="threshold to change to")
    p.add_argument("--keys", type=int, default=7000, help="hashes (the calibration's 7,000)")
    p.add_argument("--concurrency", type=int, default=8, help="client threads")
    p.add_argument("--warmup", type=float, default=60.0, help="seconds filling the cache")
    p.add_argument("--measure", type=float, default=120.0, help="seconds of each phase")
    p.add_argument("--prefix", default="kairos_reencode", help="the load's key prefix")
    p.add_argument("--log", type=Path, default=REPO / ".kairos" / "reencode-redis.log",
                   help="the executor's output")
    return p.parse_args(argv)


def apply(executor: ExecutorBench, settings: Mapping[str, Any], *,
          reload: bool = False) -> float:
    """Carry ``settings`` out with the Redis change-settings playbook (every node restarted
    through the failover path when ``reload``); the seconds it took. KairosError on a
    failure, naming the executor's log."""
    began = time.monotonic()
    executor.apply(settings, restart_all=reload)
    return time.monotonic() - began


def primaries() -> dict[str, Any]:
    """The primaries' used memory (MB) and the compact share of the hashes sampled on them."""
    result = collect.collect_redis(NODES)
    if result.errors:
        sys.exit(f"reencode_redis: {result.errors}")
    on = [s for s in result.samples if s.role == "master"]
    compact = sum(s.gauges.get("sampled_compact", 0.0) for s in on)
    sampled = sum(s.gauges.get("sampled_aggregates", 0.0) for s in on)
    return {"used_memory_mb": round(sum(s.gauges.get("used_memory", 0.0) for s in on)
                                    / len(on) / 2**20, 1),
            "compact_share": round(compact / sampled, 3) if sampled else None,
            "nodes_read": len(on)}


def phase(config: LoadConfig, seconds: float, name: str) -> dict[str, Any]:
    say(f"{name}: the hash-read load for {seconds:g} s")
    with BackgroundLoad(config, max_seconds=seconds + 600) as load:
        time.sleep(seconds)
    got = load.result().to_dict()
    row = {"phase": name, "ops_per_s": round(float(got["ops_per_s"]), 1),
           "hit_ratio": got.get("hit_ratio"), "evicted_keys": got.get("evicted_keys"),
           "failed": int(got["failed"]),
           "lost_acknowledged_writes": got.get("lost_acknowledged_writes"), **primaries()}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))  # this script: the control host
    config = LoadConfig(engine="redis", contact_points=CONTACT, prefix=args.prefix,
                        shape="hash-read", keys=args.keys, max_keys=args.keys,
                        value_size=40, distribution="uniform", concurrency=args.concurrency,
                        processes=1, seconds=3600, seed=41)
    # Redis has no consistency level: the rollout's batches are one node at a time.
    executor = ExecutorBench(load=config, warmup_seconds=0.0, measure_seconds=0.0,
                             playbook=REPO / "playbooks" / "change_settings_redis.yml",
                             inventory=REPO / "inventories" / "local" / "hosts.yml",
                             rollout_cl="ONE", log_path=args.log, log=say)
    say(f"{KEY} {args.start} live on every node; the load's keys unlinked")
    apply(executor, {KEY: args.start})
    loadgen.unlink_load_keys(config)
    rows: list[dict[str, Any]] = []
    try:
        phase(config, args.warmup, f"warm-up at {args.start}")
        rows.append(phase(config, args.measure, f"before ({args.start})"))
        took = apply(executor, {KEY: args.to})
        say(f"{KEY} {args.to} set live in {took:.0f} s")
        rows.append(phase(config, args.measure, f"live ({args.to})") | {"rollout_s": round(took)})
        # The control: as long again without a reload (the refills go on re-encoding).
        rows.append(phase(config, args.measure, f"live, {args.measure:g} s later"))
        took = apply(executor, {KEY: args.to}, reload=True)
        say(f"every node restarted on {args.to} in {took:.0f} s")
        rows.append(phase(config, args.measure, f"reloaded ({args.to})")
                    | {"rollout_s": round(took)})
    finally:
        apply(executor, {KEY: args.start})
        removed = loadgen.unlink_load_keys(config)
        say(f"{KEY} {args.start} back live; unlinked {removed} keys")
    cols = ("phase", "ops_per_s", "hit_ratio", "evicted_keys", "used_memory_mb",
            "compact_share", "failed", "lost_acknowledged_writes", "rollout_s")
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row.get(c, "")) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
