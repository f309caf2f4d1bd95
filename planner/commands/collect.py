"""``kairos collect``: read the nodes' request counters into the store, or export a trace."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any

from planner import inputs
from planner.engines import ENGINES
from planner.errors import ValidationError
from planner.workload.store import parse_since  # re-exported: callers import it from here

__all__ = ["parse_since", "register", "run"]

def register(subparsers: Any) -> None:
    """Add the ``collect`` sub-command."""
    p = subparsers.add_parser(
        "collect",
        help="append the nodes' request counters to the workload store; export a trace",
        description="Read every node's cumulative request counters once per round and append "
        "them to the workload store (SQLite). Rates are derived from consecutive rounds, "
        "leaving out intervals where a node restarted without a known start time or its "
        "counters were reset. With --export, write the derived cluster series as a trace "
        "file that `kairos forecast` reads. Redis login: KAIROS_REDIS_USERNAME (an ACL "
        "user, optional) and KAIROS_REDIS_PASSWORD or REDISCLI_AUTH; Cassandra: "
        "KAIROS_CASSANDRA_USERNAME/KAIROS_CASSANDRA_PASSWORD. "
        "With --resources, each node's resource use (CPU, throttling, memory and page "
        "cache, read I/O) read from its envelope is stored with the round.",
    )
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument(
        "--hosts",
        help="comma-separated nodes: [name=]address[:port] (Cassandra port 9042, Redis 6379)",
    )
    p.add_argument("--store", help="store file (default: $KAIROS_STORE or .kairos/kairos.db)")
    p.add_argument("--cluster", default="default", help="cluster name in the store")
    p.add_argument("--count", type=inputs.COUNT, default=1, help="rounds to collect (default 1)")
    p.add_argument(
        "--interval", type=inputs.DURATION, default=60.0,
        help="seconds from one round's start to the next's (default 60); a round that takes "
        "longer is followed at once"
    )
    p.add_argument("--timeout", type=inputs.POSITIVE_DURATION, default=10.0,
                   help="per-node timeout in seconds")
    p.add_argument(
        "--per-table", action="store_true",
        help="Cassandra: also keep one sample per table, beside the node's own (which the "
        "cluster's series counts, so nothing is counted twice); --export --table then "
        "exports one table"
    )
    p.add_argument("--keyspaces", help="Cassandra: only these keyspaces (comma-separated)")
    p.add_argument(
        "--resources", metavar="FILE",
        help="JSON {node: kairos_envelope read result}: store each node's resource use with "
        "this round (one round; playbooks/collect.yml writes it)",
    )
    p.add_argument(
        "--source", default="builtin",
        help="where the counters come from: builtin (ask each node, the default) or prometheus "
        "(--prometheus-url; --hosts then maps each node to its series' label value, "
        "name=127.0.0.1:7070; docs/prometheus.md)",
    )
    p.add_argument("--prometheus-url", help="the Prometheus server (http://host:9090)")
    p.add_argument("--prometheus-label", default="instance",
                   help="the label telling the nodes' series apart (default instance)")
    p.add_argument("--prometheus-selector", default="",
                   help='extra label matchers for every series, e.g. job="cassandra"')
    p.add_argument("--prometheus-port", type=inputs.PORT,
                   help="the exporter's port, added to a --hosts value given without one (a "
                   "Cassandra node's address: its JMX exporter agent's port)")
    p.add_argument("--prometheus-instances", default="",
                   help="name=label-value items that replace those nodes' --hosts value (the "
                   "inventory's kairos_prometheus_instance)")
    p.add_argument("--export", metavar="TRACE", help="write the derived series (.csv or .json)")
    p.add_argument(
        "--since", help="export from: epoch seconds, ISO 8601, or an age like 90m, 6h, 7d"
    )
    p.add_argument("--step", type=inputs.STEP_SECONDS, metavar="SECONDS",
                   help="export on a regular grid")
    p.add_argument("--table", help="export one Cassandra table (<keyspace>.<table>)")
    p.add_argument("--node", help="export one node's own operations (as the store names it: "
                   "what it coordinates, for Cassandra; what it serves, for Redis): the "
                   "forecast kairos plan --node-forecast takes for it")
    p.add_argument(
        "--insert-fraction",
        type=inputs.FRACTION,
        default=0.0,
        help="Cassandra: share of writes counted as insert (default 0: all update)",
    )
    p.set_defaults(func=run)


def _mix_text(mix: dict[str, float]) -> str:
    return ", ".join(f"{c} {v:.0%}" for c, v in mix.items())


def run(args: argparse.Namespace) -> int:
    from planner.workload.store import Store

    with Store(args.store) as store:
        if args.export:
            return _export(store, args)
        for flag in ("table", "node"):
            if getattr(args, flag):
                raise ValidationError(f"--{flag}: chooses what --export writes; give --export")
        if not args.hosts:
            raise ValidationError("--hosts: required to collect (or give --export)")
        if args.count < 1:
            raise ValidationError(f"--count: must be >= 1, got {args.count}")
        if args.interval < 0:
            raise ValidationError(f"--interval: must be >= 0, got {args.interval}")
        return _collect(store, args)


def _collect(store: Any, args: argparse.Namespace) -> int:
    keyspaces = [k.strip() for k in args.keyspaces.split(",")] if args.keyspaces else None
    resources = _resources(args)
    rc = 0
    started = time.monotonic()
    for n in range(args.count):
        if n:
            # A sampling period, start to start: a round's own seconds (a few on a busy
            # control host) do not stretch the series' step.
            time.sleep(max(0.0, started + args.interval - time.monotonic()))
            started = time.monotonic()
        result = _round(args, keyspaces)
        for node, err in sorted(result.errors.items()):
            print(f"kairos collect: {node}: {err}", file=sys.stderr)
        if resources is not None and resources.missing:
            print(f"kairos collect: no resource use for {resources.missing_text()}",
                  file=sys.stderr)
        if not result.samples:
            print("kairos collect: no node answered this round", file=sys.stderr)
            rc = 1
            continue
        samples = result.samples
        if resources is not None:
            from planner.workload.resources import with_resources

            samples = with_resources(samples, resources)
        added = store.append_counters(
            args.engine, args.cluster, samples, round_ts=result.round_ts
        )
        stamp = datetime.fromtimestamp(result.round_ts, UTC).isoformat(timespec="seconds")
        line = (
            f"round {n + 1}: {args.engine}/{args.cluster} at {stamp}: "
            f"{len(result.nodes)} node(s), {added} new sample(s)"
        )
        rounds = store.rounds(args.engine, args.cluster)
        line += _latest_rate(store, args, rounds) + _latest_gauges(store, args, rounds)
        if resources is not None:
            line += _latest_resources(store, args, rounds)
        print(line, flush=True)
    return rc


def _round(args: argparse.Namespace, keyspaces: list[str] | None) -> Any:
    """One round from the chosen source (``--source``, the inventory's kairos_workload_source)."""
    from planner.workload import collect as collectors

    if args.source == "prometheus":
        from planner.workload.prometheus import collect_prometheus

        if not args.prometheus_url:
            raise ValidationError("--prometheus-url: required with --source prometheus "
                                  "(the inventory's kairos_prometheus_url)")
        if args.per_table or keyspaces:
            raise ValidationError("--per-table/--keyspaces: the built-in source only "
                                  "(the inventory's kairos_workload_source: builtin)")
        return collect_prometheus(args.engine, args.hosts, url=args.prometheus_url,
                                  label=args.prometheus_label,
                                  selector=args.prometheus_selector, timeout=args.timeout,
                                  port=args.prometheus_port,
                                  instances=args.prometheus_instances)
    if args.source != "builtin":
        raise ValidationError(f"--source (the inventory's kairos_workload_source): "
                              f"{args.source!r} is not a source; known: "
                              f"{', '.join(collectors.SOURCES)}")
    return collectors.collect(args.engine, args.hosts, per_table=args.per_table,
                              keyspaces=keyspaces, timeout=args.timeout)


def _resources(args: argparse.Namespace) -> Any:
    """The round's resource file (``--resources``), checked before any node is asked."""
    if not args.resources:
        return None
    from planner.workload import collect as collectors
    from planner.workload.resources import load_resources

    if args.count != 1:
        raise ValidationError(
            f"--resources: one reading of each node, for one round; got --count {args.count}"
        )
    port = collectors.DEFAULT_PORTS[args.engine]
    nodes = [t.name for t in collectors.parse_targets(args.hosts, default_port=port)]
    return load_resources(args.resources, nodes=nodes)


def _latest_resources(store: Any, args: argparse.Namespace, rounds: list[float]) -> str:
    """Each node's resource use at this round (store.node_gauges), on a line of its own."""
    from planner.workload.resources import describe

    latest = [g for g in store.node_gauges(args.engine, args.cluster, since=rounds[-1])
              if g.ts == rounds[-1]]
    parts = [f"{g.node} {text}" for g in latest if (text := describe(g.values))]
    return "\n  resources: " + "; ".join(parts) if parts else ""


def _latest_gauges(store: Any, args: argparse.Namespace, rounds: list[float]) -> str:
    """This round's p99 per class and saturation signal (store.gauge_rounds)."""
    gauges = store.gauge_rounds(args.engine, args.cluster, since=rounds[-1] if rounds else None)
    if not gauges or gauges[-1].ts != rounds[-1]:
        return ""
    values = gauges[-1].values
    p99 = ", ".join(f"{k.removeprefix('p99_ms_')} {v:.1f}" for k, v in sorted(values.items())
                    if k.startswith("p99_ms_"))
    parts = [f"p99 ms: {p99}"] if p99 else []
    if "pending_tasks" in values:
        pending, blocked = values["pending_tasks"], values.get("blocked_tasks", 0.0)
        busiest = values.get("active_requests")
        parts.append(f"request stages: {pending:.0f} pending, {blocked:.0f} blocked"
                     + (f", busiest node {busiest:.0f} in flight" if busiest is not None else ""))
    if "cpu_main_utilisation" in values:
        parts.append(f"main thread busiest {values['cpu_main_utilisation']:.0%}")
    from planner.workload.store import redis_signals_text

    if signals := redis_signals_text(values):
        parts.append(signals)
    return "; " + "; ".join(parts) if parts else ""


def _latest_rate(store: Any, args: argparse.Namespace, rounds: list[float]) -> str:
    """The last interval's rate, when there are two rounds (``rounds``, oldest first)."""
    if len(rounds) < 2:
        return ""
    d = store.derive(args.engine, args.cluster, since=rounds[-2])
    if d.dropped:
        why = "; ".join(f"{x.node}: {x.reason}" for x in d.dropped)
        return f"; last interval left out ({why})"
    # derive() also returns the interval that ends at the second-last round (it starts one
    # sample earlier): counted too, every node's rate would be summed twice.
    last = [iv for iv in d.intervals if iv.start >= rounds[-2]]
    if not last:
        return ""
    span = max(iv.end for iv in last) - min(iv.start for iv in last)
    if span <= 0:
        return ""
    totals: dict[str, float] = {}
    for iv in last:
        for c, v in iv.ops.items():
            totals[c] = totals.get(c, 0.0) + v / (iv.end - iv.start)
    total = sum(totals.values())
    mix = _mix_text({c: v / total for c, v in totals.items()}) if total else "idle"
    return f"; last interval {total:.1f} ops/s ({mix})"


def _export(store: Any, args: argparse.Namespace) -> int:
    from planner.workload.series import save_trace

    since = parse_since(args.since)
    series = store.cluster_series(
        args.engine,
        args.cluster,
        since=since,
        step_seconds=args.step,
        table=args.table,
        insert_fraction=args.insert_fraction,
        node=args.node,
    )
    save_trace(series, args.export)
    store.refresh_cluster_samples(args.engine, args.cluster, step_seconds=args.step)
    step = f"step {series.step_seconds:g}s" if series.step_seconds else "irregular (gaps)"
    print(
        f"wrote {args.export}: {len(series)} point(s) of {args.engine}/{args.cluster}"
        f"{'' if series.scope == 'cluster' else ' ' + series.scope}, {step}, "
        f"mean {float(series.load.mean()):.1f} ops/s"
    )
    return 0
