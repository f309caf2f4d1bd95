"""``kairos load``: drive a Cassandra or Redis cluster, count failures, verify acked writes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from planner import inputs
from planner.engines import ENGINES, get_engine

CLS = ("ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")


#: Target rate: at most MAX_LOAD_OPS, the planner's bound on any load.
RATE = inputs.bounded_float(0.0, inputs.MAX_LOAD_OPS, lo_open=True, why="ops/s")
#: Record counts: a billion keys is beyond what a load generator run touches.
KEYS = inputs.bounded_int(1, 10**9, why="records")
#: Bytes per value: 32 carries the id; Redis and Cassandra refuse values over ~512 MiB and
#: 16 MiB is far past what a benchmark value should be.
VALUE_SIZE = inputs.bounded_int(32, 16 * 1024 * 1024, why="bytes per value")
#: Requests in flight per process.
CONCURRENCY = inputs.bounded_int(1, 4096, why="requests in flight per process")
#: Trace load multiplier.
TRACE_SCALE = inputs.bounded_float(0.0, 1e6, lo_open=True, why="load multiplier")


def register(subparsers: Any) -> None:
    """Add the ``load`` sub-command."""
    p = subparsers.add_parser(
        "load",
        help="generate load on Cassandra or Redis, count failures, verify acknowledged writes",
        description="Run a bounded YCSB-style load (read/update/insert/scan on Cassandra, "
        "read/write/other on Redis) at a fixed rate, unthrottled, or following a workload "
        "trace; count every operation and every failure by exception type; then read back "
        "every acknowledged write and report the lost ones. Exit status 0 when nothing failed "
        "and nothing acknowledged was lost, 1 otherwise. Logins come from the environment, "
        "never the command line: KAIROS_LOAD_{REDIS,CASSANDRA}_{USERNAME,PASSWORD} (the "
        "application's), else Kairos' own (KAIROS_REDIS_USERNAME, KAIROS_REDIS_PASSWORD or "
        "REDISCLI_AUTH; KAIROS_CASSANDRA_USERNAME/PASSWORD). "
        "See docs/load-generator.md.",
    )
    p.add_argument("--engine", choices=ENGINES, required=True)
    p.add_argument("--hosts", help="comma-separated contact points, host or host:port "
                   "(default: the local lab)")
    p.add_argument("--port", type=inputs.PORT, help="default port (Cassandra 9042, Redis 6379)")
    p.add_argument("--seconds", type=inputs.POSITIVE_DURATION,
                   help="run length (default 30; with --trace, the "
                   "trace's replay length)")
    p.add_argument("--rate", type=RATE, help="target ops/s over all processes "
                   "(default: unthrottled)")
    p.add_argument("--max-requests", type=inputs.bounded_int(1, 10**12),
                   help="stop after this many requests")
    p.add_argument("--mix", help="operation mix, e.g. read=0.5,update=0.4,insert=0.05,scan=0.05 "
                   "(cassandra) or read=0.8,write=0.2 (redis); default 50/50 read/write")
    p.add_argument("--distribution", choices=("uniform", "zipfian", "latest"), default="zipfian",
                   help="key popularity (YCSB; default zipfian)")
    p.add_argument("--keys", type=KEYS, help="record count (default 10000; with --shape, "
                   "the shape's: cache-hot 100000, cache-scan and evict-burst 20000, hash-* 1000 "
                   "hashes)")
    p.add_argument("--max-keys", type=KEYS, default=1_000_000,
                   help="key-space bound including inserts (default 1000000)")
    p.add_argument("--value-size", type=VALUE_SIZE,
                   help="bytes per value (default 100; with --shape, the shape's: 1000, or "
                   "40 per hash field)")
    p.add_argument("--concurrency", type=CONCURRENCY, help="per process: requests in flight "
                   "(cassandra, default 64) or client threads (redis, default 8)")
    p.add_argument("--processes", type=inputs.PROCESSES, default=1,
                   help="worker processes (default 1)")
    p.add_argument("--preload", action="store_true",
                   help="write every record once before the run (not counted as operations)")
    p.add_argument("--seed", type=inputs.SEED, help="seed of the key and mix choices")
    p.add_argument("--timeout", type=inputs.POSITIVE_DURATION, default=10.0,
                   help="per-request timeout in seconds (default 10)")
    cass = p.add_argument_group("cassandra")
    cass.add_argument("--cl", type=str.upper, choices=CLS, default="QUORUM",
                      help="consistency level (default QUORUM)")
    cass.add_argument("--verify-cl", type=str.upper, choices=CLS,
                      help="read-back consistency level (default: QUORUM for QUORUM/ALL writes, "
                      "ALL for weaker ones)")
    cass.add_argument("--keyspace", default="kairos_load")
    cass.add_argument("--table", default="usertable")
    cass.add_argument("--rf", type=inputs.RF, default=3,
                      help="replication factor when the keyspace "
                      "is created (an existing keyspace is not altered)")
    cass.add_argument("--replication-class", default="SimpleStrategy",
                      choices=("SimpleStrategy", "NetworkTopologyStrategy"))
    cass.add_argument("--local-dc", help="the client's datacenter (default: inferred)")
    cass.add_argument("--scan-length", type=inputs.bounded_int(1, 10_000), default=10,
                      help="rows per scan (default 10)")
    _redis_options(p)
    tr = p.add_argument_group("trace replay")
    tr.add_argument("--trace", help="workload trace (CSV or JSON, see planner/workload/series.py)")
    tr.add_argument("--trace-scope", help="which scope of a multi-scope trace")
    tr.add_argument("--step-seconds", type=inputs.STEP_SECONDS, default=5.0,
                    help="real seconds per trace row (time compression; default 5)")
    tr.add_argument("--trace-scale", type=TRACE_SCALE, default=1.0,
                    help="multiply the trace's load by this to get ops/s (default 1)")
    out = p.add_argument_group("output")
    out.add_argument("--no-verify", action="store_true", help="skip the read-back")
    out.add_argument("--json", action="store_true", help="print the result as JSON")
    out.add_argument("--out", metavar="FILE", help="also write the result as JSON to FILE")
    out.add_argument("--progress-interval", type=inputs.DURATION, default=5.0,
                     help="seconds between progress lines on stderr (0 = none; default 5)")
    p.set_defaults(func=run)


def _redis_options(p: Any) -> None:
    """The Redis-only options of ``kairos load``."""
    red = p.add_argument_group("redis")
    red.add_argument("--prefix", default="kairos_load", help="key prefix (default kairos_load)")
    red.add_argument("--shape", choices=tuple(_shapes()),
                     help="a named workload shape that makes Redis' configuration matter: "
                     "cache-hot, cache-scan, hash-read, hash-write, evict-burst "
                     "(docs/load-generator.md); default: plain GET / SET+WAIT / EVAL")
    red.add_argument("--miss-penalty-ms", type=inputs.bounded_float(0, 10_000), default=0.0,
                     help="with --shape: milliseconds the client waits on each miss before it "
                     "fills the key, as a cache-aside application fetches from its backing "
                     "store (default 0)")
    red.add_argument("--wait-replicas", type=inputs.bounded_int(0, 64), default=1,
                     help="replicas WAIT must report for a write to count as acknowledged")
    red.add_argument("--wait-timeout-ms", type=inputs.bounded_int(0, 3_600_000),
                     default=1000, help="WAIT timeout (ms)")


#: LoadConfig fields given as they are by the option of the same name.
_PASSED_AS_IS = (
    "engine", "port", "cl", "verify_cl", "keyspace", "table", "replication_class", "local_dc",
    "prefix", "mix", "distribution", "max_keys", "scan_length", "rate",
    "max_requests", "processes", "preload", "wait_replicas", "wait_timeout_ms", "seed", "shape",
    "miss_penalty_ms",
)


def _shapes() -> dict[str, Any]:
    """The Redis workload shapes (planner.loadgen.shapes.SHAPES), imported when asked."""
    from planner.loadgen.shapes import SHAPES

    return SHAPES


def config_from_args(args: argparse.Namespace) -> Any:
    """The LoadConfig the arguments describe (validated)."""
    from planner.loadgen import LoadConfig, TraceSchedule
    from planner.workload.series import load_trace

    trace = None
    if args.trace:
        series = load_trace(args.trace, scope=args.trace_scope)
        if series.engine != args.engine:
            from planner.errors import ValidationError

            raise ValidationError(f"trace: {args.trace} is a {series.engine} trace, not "
                                  f"{args.engine}")
        trace = TraceSchedule.from_series(series, step_seconds=args.step_seconds,
                                          scale=args.trace_scale)
    seconds = args.seconds
    if seconds is None:
        seconds = trace.duration if trace is not None else 30.0
    hosts = tuple(h.strip() for h in args.hosts.split(",") if h.strip()) if args.hosts else ()
    concurrency = args.concurrency or get_engine(args.engine).load_concurrency
    spec = _shapes()[args.shape] if args.shape else None
    return LoadConfig(
        **{name: getattr(args, name) for name in _PASSED_AS_IS},
        keys=args.keys or (spec.keys if spec else 10_000),
        value_size=args.value_size or (spec.value_size if spec else 100),
        contact_points=hosts,
        replication_factor=args.rf,
        seconds=seconds,
        concurrency=concurrency,
        trace=trace,
        request_timeout=args.timeout,
        verify=not args.no_verify,
    )


class _Progress:
    """Prints ``[  10.0s] 1234 ops/s, 12345 ops, 0 failures`` every ``interval`` seconds."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last_t = 0.0
        self.last_ops = 0

    def __call__(self, elapsed: float, ops: int, failures: int) -> None:
        if self.interval <= 0 or elapsed - self.last_t < self.interval:
            return
        rate = (ops - self.last_ops) / max(1e-9, elapsed - self.last_t)
        self.last_t, self.last_ops = elapsed, ops
        print(f"[{elapsed:7.1f}s] {rate:8.0f} ops/s, {ops} ops, {failures} failures",
              file=sys.stderr, flush=True)


def format_result(result: Any) -> str:
    """A readable table of a LoadResult."""
    d = result.to_dict()
    lat = d["latency_ms"]

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [
        f"engine            {d['engine']}"
        + (f" (CL {d['consistency_level']})" if d["consistency_level"] else ""),
        f"duration          {d['seconds']:.1f} s (ended by {d['stopped_by']})",
        f"operations        {d['ops']}  ({d['ops_per_s']:.0f} ops/s)",
        "  by class        " + ", ".join(f"{c} {n}" for c, n in d["ops_by_class"].items()),
        f"failures          {d['failed']}"
        + (" (" + ", ".join(f"{k} {v}" for k, v in d["failures"].items()) + ")"
           if d["failures"] else ""),
    ]
    for kind, said in d.get("failure_messages", {}).items():  # what the first ones said
        lines += [f"  {kind}: {message}" for message in said]
    lines.append(f"latency ms        p50 {ms(lat['p50'])}  p95 {ms(lat['p95'])}  "
                 f"p99 {ms(lat['p99'])}  max {ms(lat['max'])}")
    for cls, s in d["latency_ms_by_class"].items():
        lines.append(f"  {cls:<15} p50 {ms(s['p50'])}  p95 {ms(s['p95'])}  p99 {ms(s['p99'])}")
    lines.append(f"acknowledged      {d['acknowledged_writes']} writes"
                 + (f" ({d['unacknowledged_writes']} not acknowledged)"
                    if d["unacknowledged_writes"] else ""))
    if d["verified_keys"] or d["verify_errors"] or d["verified"]:
        lines.append(f"verified          {d['verified_keys']} keys, "
                     f"{d['lost_acknowledged_writes']} lost"
                     + (" (" + ", ".join(f"{k} {v}" for k, v in d["lost_by_kind"].items()) + ")"
                        if d["lost_by_kind"] else "")
                     + ("" if d["verified"] else "  [verification INCOMPLETE: "
                        + (", ".join(f"{k} {v}" for k, v in d["verify_errors"].items())
                           or "not run") + "]"))
    else:
        lines.append("verified          no (read-back skipped)")
    lines.extend(_shape_lines(d))
    for s in d["steps"]:
        lines.append(f"  step {s['step']:>4}: target {s['target_rate']:>10.1f} ops/s, "
                     f"achieved {s['ops_per_s']:>8.1f} ops/s, {s['failed']} failed")
    return "\n".join(lines)


def _shape_lines(d: dict[str, Any]) -> list[str]:
    """A shaped run's lines: hit ratio per class, and the evictions the server counted."""
    if not d.get("shape"):
        return []
    lines = [f"shape             {d['shape']}"]
    for cls, ratio in d["hit_ratio_by_class"].items():
        lines.append(f"  hits {cls:<10} {d['hits'].get(cls, 0)} of "
                     f"{d['hits'].get(cls, 0) + d['misses'].get(cls, 0)} lookups"
                     f" ({'-' if ratio is None else f'{100 * ratio:.1f} %'})")
    evicted = d["evicted_keys"]
    lines.append("evicted keys      " + (
        "not measured (INFO refused or a counter reset): every missing key counts as lost"
        if evicted is None else f"{evicted} on the primaries during the run; "
        f"{d['missing_evicted']} missing acknowledged key(s) put down to them"))
    return lines


def run(args: argparse.Namespace) -> int:
    """Run the load; print the result; exit 1 on any failure or lost acknowledged write."""
    from planner.loadgen import run_load

    config = config_from_args(args)
    pace = (f"trace of {config.trace.steps} steps x {config.trace.step_seconds:g} s"
            if config.trace else f"rate {config.rate or 'unthrottled'}")
    print(f"kairos load: {config.engine} {','.join(config.contact_points)} for "
          f"{config.seconds:g} s, {pace}, {config.processes} process(es) x "
          f"{config.concurrency}", file=sys.stderr, flush=True)
    if config.preload:
        # Written before the timed run starts, with no progress of its own: say what the
        # silence is (2,000,000 1-KB records took 18 min on the lab).
        print(f"kairos load: writing every one of {config.keys:,} record(s) once first "
              "(--preload); the run starts when all are written", file=sys.stderr, flush=True)
    result = run_load(config, on_progress=_Progress(args.progress_interval),
                      ctrl_c_ends_run=True)
    doc = result.to_dict()
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc) if args.json else format_result(result))
    failed = result.failed > 0 or result.lost_acknowledged_writes > 0
    return 1 if failed or (config.verify and not result.verified) else 0
