#!/usr/bin/env python3
"""The memory split on the lab's Redis: a measured hit-ratio curve decides maxmemory, applied
live under load (issue 43; a script that owns the lab while it runs, not a test).

Under a running cache-aside load (``kairos load`` shape cache-hot: zipfian GETs, a miss filled
with SET + WAIT, every acknowledged write verified at the end):

1. the nodes start from ``--start`` (through the executor, playbooks/change_settings_redis.yml:
   the configuration an operator runs, in every conf file);
2. seeds/004's error-driven refinement (planner.model.memory_split.refine) picks
   ``--measurements`` sizes on the grid ``--grid-mib``, the two ends first, then where the
   fitted curve may be most wrong; at each, maxmemory is set on every node (CONFIG SET, read
   back with CONFIG GET) and, once the hit ratio has settled, a window measures the primaries'
   read hit ratio and reads served (INFO keyspace_hits/misses);
3. the measured curve file (planner.model.memory_curve; ``--curve-out`` writes it, for
   ``kairos plan --memory-curve``): the points, what a miss costs (fit_miss_cost: ``1/reads``
   against the miss ratio over the windows), and the node's budget: its envelope's memory as
   the kernel holds it, less the overhead INFO memory shows (the process beyond its data, the
   replication backlog, the clients' buffers), with a fork's copy-on-write room (the largest
   data set measured) left to the OS;
4. memory_curve.advise (optimise_split) decides maxmemory; the window at ``--start`` is
   measured again (the "before"), the executor applies the split live and reads it back on
   every node, and after it settles the "after" window is measured beside the prediction;
5. the load stops: its failures and lost acknowledged writes are counted; the nodes go back
   to the maxmemory they ran before the run, through the executor (``--keep`` leaves the
   split), and the load's keys are unlinked.

It prints each step and one JSON document (``--out`` writes it too).

    make lab-up && .venv/bin/python bench/memory_split_redis.py [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))  # after library/ in tests: names overlap

import kairos_cgroup  # noqa: E402  (module_utils: plain Python, no Ansible imports)
import memory_split_lab as lab  # noqa: E402
from lab_load import lab_login  # noqa: E402

from planner import loadgen  # noqa: E402
from planner.calibrate.redis_bench import read_running_redis  # noqa: E402
from planner.errors import KairosError, ValidationError  # noqa: E402
from planner.loadgen import BackgroundLoad, LoadConfig, envelope  # noqa: E402
from planner.model import memory_split as ms  # noqa: E402
from planner.workload import collect  # noqa: E402

#: Every node of the lab's Redis Cluster (the primaries take the reads; the replicas follow).
NODES = {f"redis{i}": f"127.0.0.1:{7000 + i}" for i in range(1, 7)}
#: Where the load connects (it discovers the cluster from them).
CONTACT = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")
PREFIX = "kairos_split"
MIX = {"read": 0.9, "write": 0.1}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=60_000, help="the cache's keys (default 60000)")
    p.add_argument("--value-size", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight (one process)")
    p.add_argument("--miss-penalty-ms", type=float, default=2.0,
                   help="what the application's backing store costs a miss before the fill "
                   "(kairos load --miss-penalty-ms; default 2)")
    lab.add_split_arguments(p, parameter="maxmemory", start="8mb", grid="4:48:4", unit_mib=2,
                            settle_max=120.0)
    return lab.parse_split_arguments(p, argv)


# ----------------------------------------------------------------------- the nodes
def node_info() -> dict[str, dict[str, Any]]:
    """INFO of every node, with Kairos' login."""
    user, password = collect.redis_login()
    out = {}
    for name, address in NODES.items():
        target = collect.parse_targets([f"{name}={address}"], default_port=6379)[0]
        text, _ = collect.read_redis_info(target, password=password, username=user, timeout=10)
        out[name] = collect.parse_info(text)
    return out


def primaries_counters() -> tuple[int, int, int]:
    """(keyspace hits, keyspace misses, keys) summed over the primaries (the replicas take no
    reads)."""
    hits = misses = keys = 0
    for info in node_info().values():
        if info.get("role") == "master":
            hits += int(info.get("keyspace_hits", 0))
            misses += int(info.get("keyspace_misses", 0))
            keys += int((info.get("db0") or {}).get("keys", 0))
    return hits, misses, keys


def set_maxmemory(size_bytes: int) -> None:
    """A probe: CONFIG SET maxmemory on every node, read back with CONFIG GET (not written to
    the conf files: the run ends with the executor, which writes and reads back)."""
    import redis

    user, password = collect.redis_login()
    for name, address in NODES.items():
        host, port = address.rsplit(":", 1)
        conn = redis.Redis(host=host, port=int(port), username=user, password=password,
                           socket_timeout=10, **collect.redis_tls_kwargs())
        try:
            conn.config_set("maxmemory", size_bytes)
            got = int(conn.config_get("maxmemory")["maxmemory"])
        finally:
            conn.close()
        if got != size_bytes:
            raise KairosError(f"{name}: maxmemory reads back {got}, not {size_bytes}")


def budget_figures(infos: dict[str, dict[str, Any]]) -> dict[str, int]:
    """The node's envelope as the kernel holds it, and what INFO memory shows outside the
    data set, the largest over the nodes."""
    kind, folders = kairos_cgroup.layout()
    limits = [((kairos_cgroup.read(kind, folders, f"lab-{n}") or {}).get("limits") or {})
              .get("memory") for n in NODES] if kind else []
    if not limits or any(not m for m in limits):
        raise ValidationError("the Redis nodes have no memory envelope to split (make lab-up "
                              "sets one: docs/envelopes.md)")

    def beyond(info: dict[str, Any]) -> int:
        data = int(info.get("used_memory_dataset", 0))
        return max(int(info.get("used_memory_rss", 0)) - data, int(info.get("used_memory", 0))
                   - data)

    return {
        "envelope_bytes": int(min(limits)),
        "overhead_bytes": max(beyond(i) for i in infos.values()),
        "dataset_bytes": max(int(i.get("used_memory_dataset", 0)) for i in infos.values()),
    }


# ----------------------------------------------------------------------- measuring
class Meter(lab.SettlingMeter):
    """The primaries' read hits from INFO."""

    def window(self, seconds: float) -> dict[str, float]:
        h0, m0, _ = primaries_counters()
        t0 = time.monotonic()
        time.sleep(seconds)
        h1, m1, keys = primaries_counters()
        t1 = time.monotonic()
        if h1 + m1 <= h0 + m0:
            raise KairosError(f"a {seconds:.0f}-s window saw no load (is it running?)")
        # The application's reads the primaries served (a miss's fill is the application's
        # second command for one read, so the client's ops/s count a miss twice).
        return {"hit_ratio": (h1 - h0) / ((h1 - h0) + (m1 - m0)),
                "reads_per_s": ((h1 - h0) + (m1 - m0)) / (t1 - t0),
                "ops_per_s": self.ops_per_s(t0, t1, seconds), "fill": keys}


def measure_at(meter: Meter, size: int, args: argparse.Namespace,
               windows: list[dict[str, Any]]) -> float:
    set_maxmemory(size)
    w = {"maxmemory_mib": size / ms.MIB, **meter.settled_window(args),
         "memory": budget_figures(node_info())}
    windows.append(w)
    lab.say(f"maxmemory {size / ms.MIB:g} MiB: read hit ratio {w['hit_ratio']:.1%}, "
            f"{w['reads_per_s']:.0f} reads/s ({w['ops_per_s']:.0f} commands/s; "
            f"{lab.settle_note(w)})")
    return float(w["hit_ratio"])


# ----------------------------------------------------------------------- the decision
def measured_curve(windows: list[dict[str, Any]], figures: dict[str, int],
                   args: argparse.Namespace) -> dict[str, Any]:
    """The memory curve file of the windows (planner.model.memory_curve): what a miss costs,
    fitted over them, and the budget; the overhead rounded up to the split's grid."""
    return lab.curve_document(
        windows, script="memory_split_redis.py", engine="redis", parameter="maxmemory",
        size_key="maxmemory_mib", share=MIX["read"], miss="a miss",
        envelope_mib=figures["envelope_bytes"] // ms.MIB,
        overhead_mib=-(-figures["overhead_bytes"] // (args.unit_mib * ms.MIB)) * args.unit_mib,
        fork_room_mib=figures["dataset_bytes"] / ms.MIB, unit_mib=args.unit_mib)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lab_login()
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))  # this script: the control host
    running, version = read_running_redis(["maxmemory"], hosts=list(NODES.values()))
    lab.say(f"Redis {version}; the nodes run maxmemory {running['maxmemory']}")
    config = LoadConfig(engine="redis", contact_points=CONTACT, prefix=PREFIX, shape="cache-hot",
                        mix=MIX, keys=args.keys, max_keys=args.keys,
                        value_size=args.value_size, distribution="zipfian",
                        concurrency=args.concurrency, processes=1, seconds=3600, seed=43,
                        miss_penalty_ms=args.miss_penalty_ms)
    executor = lab.lab_executor(config, playbook="change_settings_redis.yml", rollout_cl="ONE",
                                log_name="memory-split.log")
    start_bytes = _size_bytes(args.start)
    lab.say(f"the nodes to maxmemory {args.start} (the executor)")
    executor.apply({"maxmemory": args.start})
    loadgen.unlink_load_keys(config)
    meter = Meter()
    load = BackgroundLoad(config, max_seconds=3600, max_requests=None,
                          on_progress=meter.progress)
    change = lab.LiveChange(executor, "maxmemory")

    def restore() -> None:
        # A later run or test expects the lab as it was (a kept 24mb once cost the Redis
        # demo its gain).
        if not (change.applied and args.keep):
            original = running["maxmemory"]
            lab.say(f"back to maxmemory {original} through the executor")
            executor.apply({"maxmemory": original})
        loadgen.unlink_load_keys(config)

    return lab.run_under_load("memory_split_redis.py", argv, load,
                              partial(measure_and_apply, args, meter, change, start_bytes),
                              out=args.out, report=report, restore=restore)


def measure_and_apply(args: argparse.Namespace, meter: Meter, change: lab.LiveChange,
                      start_bytes: int, result: dict[str, Any]) -> None:
    """Under the running load: the refinement's windows, the curve and the split it
    advises, applied live (from ``start_bytes``, probed by hand); what was found goes into
    ``result``."""
    lab.say(f"cache-hot load running: {args.keys} keys of {args.value_size} B, zipfian, "
            f"{args.concurrency} in flight, {args.miss_penalty_ms:g} ms of backing store a miss")
    windows: list[dict[str, Any]] = []
    refinement = ms.refine(lambda s: measure_at(meter, int(s), args, windows),
                           grid_bytes=args.grid, budget=args.measurements)
    # The most each figure reached in any window: the fork copies the largest data set.
    figures = {k: max(w["memory"][k] for w in windows) for k in windows[0]["memory"]}
    result.update(lab.conclude(
        change, meter, args, doc=measured_curve(windows, figures, args), mix=MIX,
        measured={"windows": windows, "refinement": refinement, "figures": figures},
        nodes=NODES, back_to_start=lambda: set_maxmemory(start_bytes),
        before_line=lambda w: (f"read hit ratio {w['hit_ratio']:.1%}, "
                               f"{w['reads_per_s']:.0f} reads/s"),
        after_line=lambda w: (f"read hit ratio {w['hit_ratio']:.1%}, "
                              f"{w['reads_per_s']:.0f} reads/s "
                              f"({lab.settle_note(w)})")))


def report(result: dict[str, Any]) -> None:
    b, a = result["before"], result["after"]
    lab.say(f"maxmemory {result['start']} -> {result['chosen']}: read hit ratio "
            f"{lab.served_change(result)}; misses sent to the "
            f"backing store {b['reads_per_s'] * (1 - b['hit_ratio']):.0f} -> "
            f"{a['reads_per_s'] * (1 - a['hit_ratio']):.0f}/s")


def _size_bytes(text: str) -> int:
    return ms.config_bytes("redis", {"maxmemory": text})["maxmemory"]


if __name__ == "__main__":
    sys.exit(main())
