"""Do the Redis shapes of ``kairos load --shape`` move the optimum? (issue 41 part 2)

Starts its own scratch one-node Redis Cluster (``redis-server`` on 127.0.0.1:``--port``, a
temporary directory, no persistence, ``--maxmemory``), and for every shape, every value of
the varied setting (``--vary NAME=V1,V2``, set with CONFIG SET between runs) and every
repeat: FLUSHALL, CONFIG SET, CONFIG RESETSTAT, a warm-up run (the cache fills up to
maxmemory), then the measured run; both runs verify their acknowledged writes. Prints one
line per measured run and a summary per shape and value; ``--json FILE`` keeps them all.
The server is stopped by the PID this script started; it never touches another server.

    PYTHONPATH=. nice -n 10 .venv/bin/python bench/redis_shapes.py \\
        --shapes cache-hot,cache-scan --vary maxmemory-policy=allkeys-lru,allkeys-lfu \\
        --repeats 3 --warmup 20 --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Iterator
from typing import Any

from planner.lab.scratch_redis import NoFreePortError, ScratchRedisError, scratch_redis
from planner.loadgen import SHAPES, LoadConfig, run_load

#: Ports this script may use: the lab's 7001-7006 are never touched.
PORTS = range(7400, 7410)


@contextlib.contextmanager
def scratch_server(port: int, maxmemory: str) -> Iterator[Any]:
    """A one-node Redis Cluster on 127.0.0.1:``port`` started here, stopped by its PID."""
    try:
        # Only a free port is taken: never FLUSHALL a server this script did not start.
        with scratch_redis(ports=(port,), extra_args=("--maxmemory", maxmemory)) as server:
            print(f"# scratch redis-server pid {server.pid} on {server.address}, maxmemory "
                  f"{maxmemory}", file=sys.stderr)
            client = server.client()
            try:
                yield client
            finally:
                client.close()
    except NoFreePortError as exc:
        raise SystemExit(f"{exc}: pick a free --port") from None
    except ScratchRedisError as exc:
        raise SystemExit(str(exc)) from None


def one_run(client: Any, port: int, shape: str, setting: str, value: str,
            args: argparse.Namespace) -> dict[str, Any]:
    """Flush, set ``setting``, warm up, measure; the measured run's figures."""
    client.flushall()
    client.config_set(setting, value)
    client.config_resetstat()
    base = {"engine": "redis", "contact_points": (f"127.0.0.1:{port}",), "shape": shape,
            "wait_replicas": 0, "wait_timeout_ms": 0, "concurrency": args.concurrency,
            "request_timeout": 10.0}
    # The CLI's defaults for the shape (kairos load --shape) unless given.
    base["keys"] = args.keys or SHAPES[shape].keys
    base["value_size"] = args.value_size or SHAPES[shape].value_size
    if args.mix:
        base["mix"] = args.mix
    if args.distribution:
        base["distribution"] = args.distribution
    # Warm up until the cache is full (the server has evicted), at most --warmup-runs runs.
    warm_lost = warm_failed = 0
    warm_verified = True
    for _ in range(args.warmup_runs):
        warm = run_load(LoadConfig(seconds=args.warmup, **base), startup_timeout=60)
        warm_lost += warm.lost_acknowledged_writes
        warm_failed += warm.failed
        warm_verified = warm_verified and warm.verified
        if client.info("stats")["evicted_keys"] > 0:
            break
    before = client.info("stats")
    result = run_load(LoadConfig(seconds=args.seconds, **base), startup_timeout=60)
    after = client.info("stats")
    memory = client.info("memory")
    return {
        "shape": shape, "setting": setting, "value": value,
        "hit_ratio": result.hit_ratio("read"),
        "scan_hit_ratio": result.hit_ratio("other"),
        "ops_per_s": result.ops_per_s,
        "p99_ms": result.latency_ms["p99"],
        "evicted_keys": result.evicted_keys,
        "server_keyspace_hits": after["keyspace_hits"] - before["keyspace_hits"],
        "server_keyspace_misses": after["keyspace_misses"] - before["keyspace_misses"],
        "used_memory_mb": round(memory["used_memory"] / 2**20, 1),
        "acknowledged": result.acknowledged_writes,
        "missing_evicted": result.missing_evicted,
        "lost": result.lost_acknowledged_writes,
        "warmup_lost": warm_lost,
        "failed": result.failed + warm_failed,
        "verified": result.verified and warm_verified,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:5.1f} %"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=7400, choices=PORTS)
    p.add_argument("--maxmemory", default="32mb")
    p.add_argument("--shapes", default="cache-hot,cache-scan")
    p.add_argument("--vary", default="maxmemory-policy=allkeys-lru,allkeys-lfu",
                   help="NAME=V1,V2,...: the setting changed between runs")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=float, default=20.0)
    p.add_argument("--warmup-runs", type=int, default=8,
                   help="at most this many warm-up runs, until the server has evicted")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--keys", type=int)
    p.add_argument("--value-size", type=int)
    p.add_argument("--mix", help="override the shapes' mix, e.g. read=0.9,write=0.05,other=0.05")
    p.add_argument("--distribution", choices=("uniform", "zipfian", "latest"))
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    setting, _, values = args.vary.partition("=")
    rows: list[dict[str, Any]] = []
    with scratch_server(args.port, args.maxmemory) as client:
        for shape in args.shapes.split(","):
            for r in range(args.repeats):
                for value in values.split(","):  # interleaved: drift hits both alike
                    row = one_run(client, args.port, shape, setting, value, args)
                    row["repeat"] = r
                    rows.append(row)
                    print(f"{shape:<11} {setting}={value:<12} #{r}: read hits "
                          f"{_pct(row['hit_ratio'])}, other hits {_pct(row['scan_hit_ratio'])},"
                          f" {row['ops_per_s']:7.0f} ops/s, p99 {row['p99_ms']} ms, used "
                          f"{row['used_memory_mb']} MB, evicted {row['evicted_keys']}, "
                          f"missing-evicted {row['missing_evicted']}, lost {row['lost']} "
                          f"(warm-up {row['warmup_lost']}), failed {row['failed']}",
                          flush=True)
    print("\nshape        value           read hit ratio (mean, runs)        ops/s   MB")
    for shape in args.shapes.split(","):
        for value in values.split(","):
            sel = [r for r in rows if r["shape"] == shape and r["value"] == value]
            ratios = [r["hit_ratio"] for r in sel if r["hit_ratio"] is not None]
            mean = statistics.fmean(ratios) if ratios else None
            print(f"{shape:<12} {value:<15} {_pct(mean)}  ("
                  + ", ".join(_pct(x).strip() for x in ratios) + ")  "
                  f"{statistics.fmean(r['ops_per_s'] for r in sel):7.0f}  "
                  f"{statistics.fmean(r['used_memory_mb'] for r in sel):5.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    bad = [r for r in rows if r["lost"] or r["warmup_lost"] or not r["verified"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
