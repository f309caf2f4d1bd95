#!/usr/bin/env python3
"""The memory split on the lab's Cassandra: a measured key-cache curve decides
``key_cache_size``, applied live under load (issue 43; a script that owns the lab while it
runs, not a test).

Under a running load (planner.loadgen at ``--cl``: zipfian reads and updates over
``--keys`` partitions written first, every acknowledged write read back at the end):

1. the nodes start from ``--start`` through the executor (playbooks/change_settings.yml: what
   an operator runs, read back by nodetool); the written partitions are flushed and
   compacted to one SSTable a node, so that reads go through an SSTable's partition index,
   which the key cache skips, and no compaction runs on through the measurements; then
   ``--warmup`` seconds of load;
2. seeds/004's error-driven refinement (planner.model.memory_split.refine) picks
   ``--measurements`` sizes on the grid ``--grid-mib``, the two ends first, then where the
   fitted curve may be most wrong; at each, every node's key cache is resized (``nodetool
   setcachecapacity``, the row and counter caches as they are; read back from
   ``system_views.caches``) and, once the hit ratio has settled, a window measures the key
   cache's hit ratio (``system_views.caches``), the reads served, and the disk reads the
   envelopes count;
3. the measured curve file (planner.model.memory_curve; ``--curve-out`` writes it, for
   ``kairos plan --memory-curve``): the points, what a miss costs (fit_miss_cost: ``1/reads``
   against the miss ratio over the windows), and the node's budget: its envelope's memory as
   the kernel holds it, the JVM's resident memory beyond its heap, the heap the key cache
   lives on, and the collector's cost beside it (``nodetool gcstats`` over the
   refinement, the live set from the smallest heap in use ``nodetool info`` read beside the
   key cache);
4. memory_curve.advise (optimise_split, the heap held) decides the key cache; the window at
   ``--start`` is measured again (the "before"), the executor applies the split live and
   reads it back on every node, and after it settles the "after" window is measured beside
   the prediction;
5. the load stops: its failures and lost acknowledged writes are counted; the nodes go back
   to the key cache they ran before the run, through the executor (``--keep`` leaves the
   split).

It prints each step and one JSON document (``--out`` writes it too).

    make lab-up && .venv/bin/python bench/memory_split_cassandra.py [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))  # after library/ in tests: names overlap

import kairos_cgroup  # noqa: E402  (module_utils: plain Python, no Ansible imports)
import memory_split_lab as lab  # noqa: E402
from kairos_nodetool import parse_cache_capacities  # noqa: E402
from lab_load import lab_login  # noqa: E402

from planner.calibrate.bench import cache_window, read_caches  # noqa: E402
from planner.errors import KairosError, ValidationError  # noqa: E402
from planner.lab.sstable_layout import LabNode, lab_nodes  # noqa: E402
from planner.loadgen import BackgroundLoad, LoadConfig, envelope  # noqa: E402
from planner.model import memory_split as ms  # noqa: E402

NODES = {"cass1": "127.0.0.1", "cass2": "127.0.0.2", "cass3": "127.0.0.3"}
PORT = 9042
KEYSPACE = "kairos_split"
MIX = {"read": 0.9, "update": 0.1}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=100_000,
                   help="partitions written first and read (default 100000: about 8 MiB of "
                   "key cache a node holds them all)")
    p.add_argument("--value-size", type=int, default=200, help="bytes a partition holds")
    p.add_argument("--cl", default="QUORUM")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight a process")
    p.add_argument("--processes", type=int, default=2)
    lab.add_split_arguments(p, parameter="key_cache_size", start="2MiB", grid="1:16:1",
                            unit_mib=1, settle_max=180.0)
    p.add_argument("--warmup", type=float, default=60.0,
                   help="seconds of load before the first size (the JIT, the page cache)")
    # setcachecapacity takes whole MiB.
    return lab.parse_split_arguments(p, argv, whole_mib=True)


# ----------------------------------------------------------------------- the nodes
def key_cache_capacities() -> dict[str, int]:
    """Each node's key cache capacity in bytes, as ``system_views.caches`` shows it."""
    return {name: read_caches([address], port=PORT)["keys"]["capacity_bytes"]
            for name, address in NODES.items()}


def set_key_cache(nodes: list[LabNode], others: Mapping[str, Mapping[str, int]],
                  size: int) -> None:
    """A probe: ``nodetool setcachecapacity`` on every node (its row and counter caches as
    they were), read back from ``system_views.caches`` (not written to cassandra.yaml: the
    run ends with the executor, which writes and reads back)."""
    mib = size // ms.MIB
    for node in nodes:
        keep = others[node.name]
        node.nodetool("setcachecapacity", str(mib), str(keep["row"]), str(keep["counter"]))
    got = key_cache_capacities()
    wrong = {n: b for n, b in got.items() if b != mib * ms.MIB}
    if wrong:
        raise KairosError(f"the key cache reads back {wrong} bytes, not {mib} MiB")


def gc_seconds(nodes: list[LabNode]) -> float:
    """Seconds of collection since the node's previous ``nodetool gcstats``, summed over the
    nodes (the command starts a new interval on each call)."""
    return sum(gc_total_ms(node.nodetool("gcstats")) for node in nodes) / 1000.0


def gc_total_ms(gcstats: str) -> float:
    """``Total GC Elapsed (ms)`` of ``nodetool gcstats`` (a header, then one row of figures:
    interval, max, total, ...)."""
    rows = [ln.split() for ln in gcstats.splitlines() if ln.strip()]
    try:
        return float(rows[-1][2])
    except (IndexError, ValueError):
        raise KairosError(f"nodetool gcstats printed no figures: {gcstats[-200:]!r}") from None


def heap_mib(info: str) -> tuple[float, float]:
    """(used, max) MiB of ``Heap Memory (MB)`` in ``nodetool info``."""
    m = re.search(r"^Heap Memory \(MB\)\s*:\s*([\d.]+)\s*/\s*([\d.]+)", info, re.MULTILINE)
    if m is None:
        raise KairosError("nodetool info printed no 'Heap Memory (MB)'")
    return float(m.group(1)), float(m.group(2))


def envelopes() -> dict[str, dict[str, Any]]:
    """Every node's envelope as the kernel holds it."""
    kind, folders = kairos_cgroup.layout()
    out = {n: kairos_cgroup.read(kind, folders, f"lab-{n}") if kind else None for n in NODES}
    if any(not (e or {}).get("limits", {}).get("memory") for e in out.values()):
        raise ValidationError("the Cassandra nodes have no memory envelope to split (make "
                              "lab-up sets one: docs/envelopes.md)")
    return out  # type: ignore[return-value]  # checked above


# ----------------------------------------------------------------------- measuring
class Meter(lab.SettlingMeter):
    """The key cache's hits from system_views.caches, disk reads from the envelopes."""

    def window(self, seconds: float) -> dict[str, Any]:
        c0, e0, t0 = read_caches(list(NODES.values()), port=PORT), envelopes(), time.monotonic()
        time.sleep(seconds)
        c1, e1, t1 = read_caches(list(NODES.values()), port=PORT), envelopes(), time.monotonic()
        keys = cache_window(c0, c1)["keys"]
        if not keys["requests"] or keys["hit_ratio"] is None:
            raise KairosError(f"a {seconds:.0f}-s window saw no reads (is the load running?)")
        ops = self.ops_per_s(t0, t1, seconds)
        disk = sum(e1[n]["usage"]["read_ios"] - e0[n]["usage"]["read_ios"] for n in NODES)
        return {"hit_ratio": keys["hit_ratio"], "ops_per_s": ops, "fill": keys["entries"],
                "reads_per_s": ops * MIX["read"],
                "key_lookups_per_s": keys["requests"] / (t1 - t0),
                "disk_reads_per_s": disk / (t1 - t0),
                "page_cache_mib": min(e1[n]["usage"]["page_cache_bytes"] for n in NODES) / ms.MIB}


def describe(w: Mapping[str, Any]) -> str:
    return (f"key cache hit ratio {w['hit_ratio']:.1%}, {w['reads_per_s']:.0f} reads/s "
            f"({w['ops_per_s']:.0f} ops/s; {w['disk_reads_per_s']:.0f} disk reads/s; "
            f"{lab.settle_note(w)})")


# ----------------------------------------------------------------------- the decision
def budget_figures(nodes: list[LabNode], gc_s: float, ops: float, heap_used: list[float],
                   key_cache_mib: float) -> dict[str, float]:
    """The node's envelope, the JVM's memory beyond its heap, the heap and the collector's
    cost: the largest over the nodes (the smallest envelope). ``key_cache_mib``: the key
    cache's mean size while the collections were counted."""
    infos = [node.nodetool("info") for node in nodes]
    heap = max(heap_mib(i)[1] for i in infos)
    held = envelopes()
    rss = max(e["usage"]["rss_bytes"] for e in held.values()) / ms.MIB
    # The smallest heap in use beside the key cache: at most the live set (plus garbage).
    live = max(min(heap_used), 1.0)
    seconds_per_op = gc_s / max(ops, 1.0)
    # PressureCost sees the heap the key cache leaves; its free room while measured:
    free = max(heap - key_cache_mib - live, 1.0)
    return {"envelope_mib": min(e["limits"]["memory"] for e in held.values()) / ms.MIB,
            "overhead_mib": max(rss - heap, 0.0), "heap_mib": heap, "gc_live_mib": live,
            "gc_seconds_per_op": seconds_per_op,
            # PressureCost: seconds_at_double x live / (free) = the measured seconds per op.
            "gc_seconds_at_double": seconds_per_op * free / live}


def measured_curve(windows: list[dict[str, Any]], figures: Mapping[str, float],
                   args: argparse.Namespace) -> dict[str, Any]:
    """The memory curve file of the windows (planner.model.memory_curve)."""
    unit = args.unit_mib
    return lab.curve_document(
        windows, script="memory_split_cassandra.py", engine="cassandra",
        parameter="key_cache_size", size_key="key_cache_mib", share=MIX["read"],
        miss="a key cache miss", envelope_mib=int(figures["envelope_mib"]),
        overhead_mib=int(-(-figures["overhead_mib"] // unit) * unit), unit_mib=unit,
        heap_mib=int(figures["heap_mib"]), gc_live_mib=figures["gc_live_mib"],
        gc_seconds_at_double=figures["gc_seconds_at_double"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lab_login()
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))  # this script: the control host
    nodes = lab_nodes(REPO / ".lab" / "cassandra", list(NODES.values()))
    infos = {node.name: node.nodetool("info") for node in nodes}
    others = {name: parse_cache_capacities(info) for name, info in infos.items()}
    running = {name: f"{c['key']}MiB" for name, c in others.items()}
    original = next(iter(running.values()))
    lab.say(f"the nodes run key_cache_size {running}, heap "
            f"{ {n: heap_mib(i)[1] for n, i in infos.items()} } MiB")
    config = LoadConfig(engine="cassandra", contact_points=tuple(NODES.values()), cl=args.cl,
                        keyspace=KEYSPACE, mix=MIX, keys=args.keys, max_keys=args.keys,
                        value_size=args.value_size, distribution="zipfian",
                        concurrency=args.concurrency, processes=args.processes,
                        seconds=3600, seed=43, preload=True)
    executor = lab.lab_executor(config, playbook="change_settings.yml", rollout_cl=args.cl,
                                log_name="memory-split-cassandra.log")
    lab.say(f"the nodes to key_cache_size {args.start} (the executor)")
    executor.apply({"key_cache_size": args.start})
    start_bytes = ms.config_bytes("cassandra", {"key_cache_size": args.start})["key_cache_size"]
    meter = Meter()
    load = BackgroundLoad(config, max_seconds=3600, max_requests=None,
                          on_progress=meter.progress)
    change = lab.LiveChange(executor, "key_cache_size")

    def restore() -> None:
        if not (change.applied and args.keep):
            lab.say(f"back to key_cache_size {original} through the executor")
            executor.apply({"key_cache_size": original})

    def measure(result: dict[str, Any]) -> None:
        measure_and_apply(args, nodes, others, start_bytes, meter, change, result)
        result["running_before_run"] = running

    # Every acknowledged write is read back at the end: on the enveloped nodes at about 500
    # a second, far slower than the load's own default allows.
    return lab.run_under_load("memory_split_cassandra.py", argv, load, measure, out=args.out,
                              report=report, restore=restore, timeout=120 + args.keys / 400)


def measure_and_apply(args: argparse.Namespace, nodes: list[LabNode],
                      others: Mapping[str, Mapping[str, int]], start_bytes: int,
                      meter: Meter, change: lab.LiveChange, result: dict[str, Any]) -> None:
    """Under the running load: the partitions written and compacted, the refinement's
    windows, the curve and the split it advises, applied live (from ``start_bytes``, probed
    by hand); what was found goes into ``result``. ``others``: each node's row and counter
    cache capacities, kept."""
    lab.say(f"writing {args.keys} partitions of {args.value_size} B, then zipfian reads and "
            f"updates at {args.cl}, {args.processes} x {args.concurrency} in flight")
    deadline = time.monotonic() + 120 + args.keys / 200  # the writes, at 0.4 CPU a node
    while not meter.points or meter.points[-1][1] <= 0:
        if time.monotonic() > deadline:
            raise KairosError(f"the load served nothing within {120 + args.keys / 200:.0f} s "
                              f"of writing {args.keys} partitions")
        time.sleep(1)
    for node in nodes:  # the reads go through the SSTables' partition index
        node.nodetool("flush", KEYSPACE)
        # One SSTable a node: the compactions of the written data would otherwise go on
        # through the refinement, each one making the key cache's entries of the tables
        # it replaces useless (the first run's hit ratio rose with time, not with size).
        node.nodetool("compact", KEYSPACE)
    lab.say("written, flushed and compacted; the load runs")
    warm = meter.window(args.warmup)
    lab.say(f"warm-up {args.warmup:g} s: {warm['ops_per_s']:.0f} ops/s")
    windows: list[dict[str, Any]] = []
    heap_used: list[float] = []
    gc_seconds(nodes)  # starts the interval the refinement's collections are counted in
    ops_before, began = meter.points[-1][1], time.monotonic()

    def measure(size: float) -> float:
        set_key_cache(nodes, others, int(size))
        w = {"key_cache_mib": size / ms.MIB, **meter.settled_window(args)}
        # the heap in use beside the key cache (it lives on the heap, up to its capacity)
        heap_used.append(min(heap_mib(n.nodetool("info"))[0] for n in nodes) - size / ms.MIB)
        windows.append(w)
        lab.say(f"key cache {size / ms.MIB:g} MiB: {describe(w)}")
        return float(w["hit_ratio"])

    refinement = ms.refine(measure, grid_bytes=args.grid, budget=args.measurements)
    gc_s, ops = gc_seconds(nodes), meter.points[-1][1] - ops_before
    figures = budget_figures(nodes, gc_s, ops, heap_used,
                             sum(w["key_cache_mib"] for w in windows) / len(windows))
    lab.say(f"collections: {gc_s:.1f} s over {time.monotonic() - began:.0f} s and {ops} "
            f"operations ({figures['gc_seconds_per_op'] * 1e6:.1f} us an operation); heap "
            f"{figures['heap_mib']:.0f} MiB, live set at most {figures['gc_live_mib']:.0f} MiB; "
            f"the JVM beyond its heap {figures['overhead_mib']:.0f} MiB")
    result.update(lab.conclude(
        change, meter, args, doc=measured_curve(windows, figures, args), mix=MIX,
        measured={"windows": windows, "refinement": refinement, "figures": figures},
        nodes=NODES, back_to_start=lambda: set_key_cache(nodes, others, start_bytes),
        before_line=describe, after_line=describe))


def report(result: dict[str, Any]) -> None:
    b, a = result["before"], result["after"]
    lab.say(f"key_cache_size {result['start']} -> {result['chosen']}: hit ratio "
            f"{lab.served_change(result)}; disk reads "
            f"{b['disk_reads_per_s']:.0f} -> {a['disk_reads_per_s']:.0f}/s")


if __name__ == "__main__":
    sys.exit(main())
