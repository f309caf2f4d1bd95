#!/usr/bin/env python3
"""Per-table compaction on the lab (issue 42): one plan gives a scan-heavy table and an
update-heavy table different compaction strategies; the gain over one strategy for both is
measured under load beside the prediction. A script that owns the lab while it runs, not a
test.

1. A fresh keyspace ``--keyspace`` with two tables, each ``--keys`` rows of
   ``--value-size`` bytes written at ONE (the load's preload), on size-tiered compaction
   (Cassandra's default); then ``--age-seconds`` of both loads (below), so that the
   size-tiered layout has the SSTables a table that has taken writes for a while has. The
   compactions are waited out and both tables' SSTables saved (planner.lab.sstable_layout).
2. The phases, each from the saved layout: both tables back on size-tiered compaction, the
   saved SSTables put back (TRUNCATE, ``nodetool import``, each node's count read back),
   the phase's strategies applied and their rewrite waited out, then both loads at once at
   ``--cl`` (``updates``: update 0.9, scan 0.1; ``scans``: scan 0.9, update 0.1; ``--mix``
   sets another, e.g. ``--mix updates=update:1``),
   ``--warmup`` seconds, then ``--seconds`` measured:

   - **STCS for both** (the default); while it measures, the collector reads each table's
     requests from the nodes every ``--collect-interval`` seconds (planner.workload.collect
     with ``per_table``, as ``kairos collect --per-table``) into a store of the run's own;
     the store derives each table's series and the cluster's, each is forecast (``kairos
     forecast --model ets``) and planned with ``kairos plan --table-forecast`` on
     ``--model`` (the lab's compaction model by default); ``kairos explain`` prints it;
   - **the plan**, applied through the executor (playbooks/apply_plan.yml: ALTER per
     table, read back per table on every node; its state file is removed before each
     phase, the cluster having been put back);
   - **LCS for both** through the executor (playbooks/change_settings.yml).

   The phases run in that order and then, with ``--mirror`` (the default), in the reverse
   order, so that a drift of the lab over the run weighs on every phase alike.
3. The predictions, from the same model: the cluster's capacity with each phase's
   strategies under the tables' measured shares (the harmonic rule of
   planner/planning/per_table.py), against the measured totals (the mean of a phase's
   runs). Every load's failures and lost acknowledged writes are counted. The keyspace, its
   snapshots and the saved layout are removed at the end (``--keep`` leaves them).

    make lab-up && .venv/bin/python bench/per_table_lab.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))  # kairos_cgroup; after library/: names overlap

import kairos_cgroup  # noqa: E402  (module_utils: plain Python, no Ansible imports)
import numpy as np  # noqa: E402
from lab_load import lab_login  # noqa: E402
from memory_split_lab import lab_executor  # noqa: E402

from planner.errors import KairosError  # noqa: E402
from planner.executor.rollout import state_path_for  # noqa: E402
from planner.loadgen import BackgroundLoad, LoadConfig, envelope  # noqa: E402
from planner.loadgen.check import LoadResult  # noqa: E402
from planner.model.performance import load_model  # noqa: E402
from planner.planning.per_table import harmonic_capacity  # noqa: E402

NODES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"
#: The tables and their default request mixes (``--mix`` sets another).
MIXES = {"updates": {"update": 0.9, "scan": 0.1}, "scans": {"scan": 0.9, "update": 0.1}}
CLASSES = ("read", "update", "insert", "scan")
KAIROS = str(Path(sys.executable).parent / "kairos")
#: The plan's horizon in collection intervals: long enough (an hour at 10 s) for its step to
#: stay due through every phase that applies it.
HORIZON = 360
PHASES = ("stcs_for_both", "per_table", "lcs_for_both")
TITLES = {"stcs_for_both": "STCS for both", "per_table": "per table (the plan)",
          "lcs_for_both": "LCS for both"}


def phase_order(mirror: bool) -> list[str]:
    """The phases in the order they run: once, or there and back (A B C C B A)."""
    return [*PHASES, *reversed(PHASES)] if mirror else list(PHASES)


def say(msg: str) -> None:
    print(f"[per-table {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_table_arguments(p, keyspace="kairos_pertable", keys=125_000, value_size=4000)
    p.add_argument("--warmup", type=float, default=60.0, help="seconds before each measure")
    p.add_argument("--seconds", type=float, default=150.0, help="seconds each phase measures")
    p.add_argument("--settle-timeout", type=float, default=900.0,
                   help="seconds to wait for the compactions a strategy change starts")
    p.add_argument("--model", type=Path,
                   default=REPO / "inventories/local/calibration/cassandra-compaction-model.json")
    p.add_argument("--compaction-seconds", type=float, default=30.0,
                   help="what a strategy change costs the plan (docs/calibration.md: 26-51 s "
                        "of rewrite for 1 GB a node)")
    p.add_argument("--age-seconds", type=float, default=300.0,
                   help="seconds of both loads before the layout is saved")
    p.add_argument("--mirror", action=argparse.BooleanOptionalAction, default=True,
                   help="run the phases again in reverse order (default: yes)")
    p.add_argument("--collect-interval", type=float, default=10.0,
                   help="seconds between the collector's rounds (the plan's step)")
    p.add_argument("--keep", action="store_true", help="leave the keyspace on the lab")
    p.add_argument("--out", type=Path, help="also write the JSON result here")
    return parse_with_mixes(p, argv)


def add_table_arguments(p: argparse.ArgumentParser, *, keyspace: str, keys: int,
                        value_size: int) -> None:
    """The two tables and their loads (this bench's and bench/autopilot_per_table_lab.py's)."""
    p.add_argument("--keyspace", default=keyspace)
    p.add_argument("--keys", type=int, default=keys, help="rows a table holds")
    p.add_argument("--value-size", type=int, default=value_size, help="bytes a row holds")
    p.add_argument("--cl", default="QUORUM")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight a table")
    p.add_argument("--mix", action="append", default=[], metavar="TABLE=CLASS:SHARE,...",
                   help="a table's request mix, shares summing to 1 (default: "
                        + "; ".join(f"{t}={format_mix(m)}" for t, m in MIXES.items()) + ")")


def parse_with_mixes(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``p``'s arguments, with ``mixes``: each table's mix, ``--mix`` checked."""
    args = p.parse_args(argv)
    try:
        args.mixes = parse_mixes(args.mix)
    except ValueError as e:
        p.error(str(e))
    return args


def format_mix(mix: dict[str, float]) -> str:
    return ",".join(f"{c}:{share:g}" for c, share in mix.items())


def parse_mixes(given: list[str]) -> dict[str, dict[str, float]]:
    """MIXES with each ``--mix TABLE=CLASS:SHARE,...`` in place of its table's."""
    mixes = {t: dict(m) for t, m in MIXES.items()}
    for text in given:
        table, _, spec = text.partition("=")
        if table not in MIXES:
            raise ValueError(f"--mix {text!r}: the table is one of {', '.join(MIXES)}")
        mix: dict[str, float] = {}
        for part in spec.split(","):
            cls, _, share = part.partition(":")
            if cls not in CLASSES:
                raise ValueError(f"--mix {text!r}: {cls!r} is not a class ({', '.join(CLASSES)})")
            try:
                mix[cls] = float(share)
            except ValueError:
                raise ValueError(f"--mix {text!r}: the share of {cls} is not a number") from None
            if not 0 <= mix[cls] <= 1:
                raise ValueError(f"--mix {text!r}: the share of {cls} is not in [0, 1]")
        if abs(sum(mix.values()) - 1) > 1e-6:
            raise ValueError(f"--mix {text!r}: the shares sum to {sum(mix.values()):g}, not 1")
        mixes[table] = mix
    return mixes


def table_config(args: argparse.Namespace, table: str, seconds: float,
                 preload: bool = False) -> LoadConfig:
    return LoadConfig(engine="cassandra", contact_points=NODES, cl="ONE" if preload else args.cl,
                      keyspace=args.keyspace, table=table, mix=args.mixes[table], keys=args.keys,
                      max_keys=args.keys, value_size=args.value_size, distribution="uniform",
                      concurrency=64 if preload else args.concurrency, processes=1,
                      seconds=seconds, preload=preload, verify=not preload,
                      seed=42 + len(table))


def run_both(args: argparse.Namespace, seconds: float) -> dict[str, LoadResult]:
    """Both tables' loads at once for ``seconds``; their results."""
    loads = {t: BackgroundLoad(table_config(args, t, seconds), max_seconds=seconds + 60,
                               max_requests=None) for t in MIXES}
    for load in loads.values():
        load.start()
    try:
        while not all(load.wait(1.0) for load in loads.values()):
            pass
    finally:
        results = {t: load.stop(timeout=120 + args.keys / 400) for t, load in loads.items()}
    return results


class Collector:
    """Per-table collection rounds into ``store`` every ``interval`` seconds for ``seconds``,
    on a thread of its own (the store's SQLite connection is made there), while the loads
    run. It stops when their window ends: the loads then read back every acknowledged
    write, reads the application never made."""

    def __init__(self, keyspace: str, store: Path, interval: float, seconds: float,
                 cluster: str = "pertable") -> None:
        self.keyspace, self.store, self.interval = keyspace, store, interval
        self.seconds, self.cluster = seconds, cluster
        self.stopped = threading.Event()
        self.rounds = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from planner.workload.collect import collect
        from planner.workload.store import Store

        store = Store(self.store)
        hosts = ",".join(f"cass{i + 1}={a}" for i, a in enumerate(NODES))
        deadline = time.monotonic() + self.seconds
        while not self.stopped.is_set() and time.monotonic() <= deadline:
            result = collect("cassandra", hosts, per_table=True, keyspaces=[self.keyspace],
                             timeout=10)
            self.errors += [f"{n}: {e}" for n, e in result.errors.items()]
            if result.samples:
                store.append_counters("cassandra", self.cluster, result.samples,
                                      round_ts=result.round_ts)
                self.rounds += 1
            self.stopped.wait(self.interval)

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=60)


def measure(args: argparse.Namespace, phase: str, store: Path | None = None) -> dict[str, Any]:
    """A warm-up, then a measured window of both loads; per table and in all. With
    ``store``, the collector reads the tables' requests into it while the window runs."""
    say(f"{phase}: {args.warmup:.0f} s warm-up")
    warm = run_both(args, args.warmup)
    say(f"{phase}: {args.seconds:.0f} s measured")
    e0, t0 = envelopes(), time.monotonic()
    if store is None:
        measured = run_both(args, args.seconds)
    else:
        with Collector(args.keyspace, store, args.collect_interval, args.seconds) as collector:
            measured = run_both(args, args.seconds)
        if collector.errors:
            raise KairosError(f"the collector: {'; '.join(collector.errors[:3])}")
    e1, t1 = envelopes(), time.monotonic()  # the read-back of the writes included
    out: dict[str, Any] = {"tables": {}}
    for t, r in measured.items():
        w = warm[t]
        out["tables"][t] = {
            "ops_per_s": round(r.ops_per_s, 1),
            "failed": r.failed + w.failed,
            "acknowledged_writes": r.acknowledged_writes + w.acknowledged_writes,
            "lost_acknowledged_writes":
                r.lost_acknowledged_writes + w.lost_acknowledged_writes,
            "mix": {c: round(n / max(r.ops, 1), 4) for c, n in r.ops_by_class.items()},
        }
    out["total_ops_per_s"] = round(sum(v["ops_per_s"] for v in out["tables"].values()), 1)
    if e0 and e1:
        # The page cache: a table just rewritten is read from memory, an older one maybe not.
        out["disk_reads_per_s"] = round(sum(
            e1[n]["usage"]["read_ios"] - e0[n]["usage"]["read_ios"] for n in e0) / (t1 - t0), 1)
        out["page_cache_mib"] = {n: round(e1[n]["usage"]["page_cache_bytes"] / 2**20)
                                 for n in e1}
    say(f"{phase}: " + ", ".join(f"{t} {v['ops_per_s']:.0f} ops/s" for t, v in
                                 out["tables"].items()) + f"; in all {out['total_ops_per_s']:.0f}")
    return out


def kairos(*argv: str) -> str:
    proc = subprocess.run([KAIROS, *argv], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KairosError(f"kairos {argv[0]} failed (rc {proc.returncode}): "
                          f"{proc.stderr.strip()[-1500:]}")
    return proc.stdout


def make_plan(args: argparse.Namespace, store: Path, work: Path) -> tuple[Path, dict[str, Any]]:
    """The plan from the collected requests: the store's series per table and for the
    cluster, forecast and planned on ``--model``; the plan and the collected rates."""
    from planner.workload.series import save_trace
    from planner.workload.store import Store

    db = Store(store)
    forecasts: dict[str, Path] = {}
    collected: dict[str, Any] = {}
    for name in ("cluster", *MIXES):
        table = None if name == "cluster" else f"{args.keyspace}.{name}"
        series = db.cluster_series("cassandra", "pertable", table=table,
                                   step_seconds=args.collect_interval)
        save_trace(series, work / f"{name}.json")
        collected[name] = {"ops_per_s": round(float(series.load.mean()), 1), "mix": {
            c: round(float(series.mix[c].mean()), 4) for c in series.classes}}
        forecasts[name] = work / f"{name}-forecast.json"
        # Exponential smoothing: a window of a few minutes is too short for the ensemble's
        # backtests, and the last bin alone (naive) is one 10-s window's noise.
        kairos("forecast", "--trace", str(work / f"{name}.json"), "--model", "ets",
               "--horizon", str(HORIZON), "--out", str(forecasts[name]))
    say("collected: " + ", ".join(f"{n} {c['ops_per_s']:.0f} ops/s {c['mix']}"
                                  for n, c in collected.items()))
    plan = work / "plan.yml"
    names = [f"{args.keyspace}.{t}" for t in MIXES]
    kairos("plan", "--forecast", str(forecasts["cluster"]), "--model", str(args.model),
           "--current", str(write_current(work)), "--hosts", "cass1,cass2,cass3",
           "--tables", ",".join(names), "--compaction-seconds", str(args.compaction_seconds),
           "--horizon", str(HORIZON), "--method", "dp", "-o", str(plan),
           *(x for t in MIXES for x in ("--table-forecast",
                                        f"{args.keyspace}.{t}={forecasts[t]}")))
    say("the plan:\n" + kairos("explain", str(plan)))
    return plan, collected


def envelopes() -> dict[str, dict[str, Any]] | None:
    """Every node's envelope as the kernel holds it (None without envelopes)."""
    kind, folders = kairos_cgroup.layout()
    if not kind:
        return None
    out = {n: kairos_cgroup.read(kind, folders, f"lab-{n}") for n in ("cass1", "cass2", "cass3")}
    return out if all(out.values()) else None


def write_current(work: Path) -> Path:
    path = work / "current.yml"
    path.write_text(f"compaction: {STCS}\n")
    return path


def predictions(model_path: Path, before: dict[str, Any],
                phases: dict[str, dict[str, str]]) -> dict[str, float]:
    """Each phase's predicted cluster capacity (ops/s) under the tables' measured shares."""
    model = load_model(model_path)
    tables = list(before["tables"])
    loads = [[before["tables"][t]["ops_per_s"]] for t in tables]
    out = {}
    for phase, strategies in phases.items():
        caps = [[model.predict(before["tables"][t]["mix"],
                               {"compaction": strategies[t]}).ops_per_s] for t in tables]
        out[phase] = round(float(harmonic_capacity(np.array(loads), np.array(caps))[0]), 1)
    return out


def drop_keyspace(keyspace: str) -> None:
    """As the application's login (it owns the data; Kairos' role may not drop it), when it
    exists; then the snapshot auto_snapshot takes of it."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    from planner.lab.sstable_layout import lab_nodes
    from planner.workload import collect

    login = collect.cassandra_login(application=True)
    auth = PlainTextAuthProvider(username=login[0], password=login[1]) if login else None
    cluster = Cluster(list(NODES), protocol_version=5, auth_provider=auth,
                      ssl_context=collect.cassandra_ssl_context())
    try:
        session = cluster.connect()
        if not session.execute("SELECT keyspace_name FROM system_schema.keyspaces "
                               "WHERE keyspace_name = %s", (keyspace,)).one():
            return
        session.execute(f"DROP KEYSPACE {keyspace}", timeout=120)
    finally:
        cluster.shutdown()
    for node in lab_nodes(REPO / ".lab" / "cassandra", list(NODES)):
        node.nodetool("clearsnapshot", "--all", "--", keyspace)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lab_login()
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))  # this script: the control host
    work = REPO / ".kairos" / "per-table"
    work.mkdir(parents=True, exist_ok=True)
    executor = lab_executor(table_config(args, "scans", 1), playbook="change_settings.yml",
                            rollout_cl=args.cl, log_name="per-table-lab.log")
    executor.settle_timeout = args.settle_timeout
    executor.log = say  # its lines carry this bench's name
    result: dict[str, Any] = {"script": "bench/per_table_lab.py", "argv": argv or sys.argv[1:],
                              "started": datetime.now(UTC).isoformat(),
                              "mixes": args.mixes,
                              "phases": {p: {"runs": []} for p in PHASES}}
    layout = work / "layout"
    try:
        prepare(args, executor, layout)
        plan: Path | None = None
        for phase in phase_order(args.mirror):
            put_back(args, executor, layout)
            if phase == "per_table":
                assert plan is not None  # made in the first phase, which runs first
                state_path_for(plan).unlink(missing_ok=True)  # the cluster was put back
                executor.apply_plan(plan)
            elif phase == "lcs_for_both":
                executor.apply({"compaction": LCS}, tables=table_names(args))
            store = work / "kairos.db" if plan is None else None
            if store is not None:
                store.unlink(missing_ok=True)
            result["phases"][phase]["runs"].append(measure(args, TITLES[phase], store))
            if store is not None:
                plan, result["collected"] = make_plan(args, store, work)
                result["plan"] = str(plan)
    except KairosError as exc:
        say(f"stopped: {exc}")
        result["error"] = str(exc)
    finally:
        if not args.keep:
            drop_keyspace(args.keyspace)
            shutil.rmtree(layout, ignore_errors=True)  # hard links: they hold the data's space
    return finish(args, result)


def table_names(args: argparse.Namespace) -> list[str]:
    return [f"{args.keyspace}.{t}" for t in MIXES]


def prepare(args: argparse.Namespace, executor: Any, layout: Path) -> None:
    """A fresh keyspace, written, aged under both loads, its layout saved."""
    from planner.lab.sstable_layout import lab_nodes, save

    say(f"a fresh {args.keyspace}: {len(MIXES)} tables of {args.keys} rows of "
        f"{args.value_size} B, written at ONE")
    drop_keyspace(args.keyspace)
    shutil.rmtree(layout, ignore_errors=True)
    for t in MIXES:
        preload(args, t)
    if args.age_seconds > 0:
        say(f"ageing the layout: {args.age_seconds:.0f} s of both loads")
        run_both(args, args.age_seconds)
    executor.wait_for_compactions()
    nodes = lab_nodes(REPO / ".lab" / "cassandra", list(NODES))
    for t in MIXES:
        save(nodes, keyspace=args.keyspace, table=t, dest=layout / t, log=say)


def put_back(args: argparse.Namespace, executor: Any, layout: Path) -> None:
    """Both tables on size-tiered compaction (the saved layout's), their saved SSTables
    put back (each node's count read back), the compactions waited out."""
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    from planner.calibrate.bench import node_session
    from planner.lab.sstable_layout import lab_nodes, restore

    def truncate(cql: str) -> None:
        # TRUNCATE is the application's to run: Kairos' role has no grant on its data.
        with node_session(NODES[0], 9042, timeout=120.0, application=True) as session:
            session.execute(SimpleStatement(cql, consistency_level=ConsistencyLevel.ALL))

    executor.apply({"compaction": STCS}, tables=table_names(args))
    nodes = lab_nodes(REPO / ".lab" / "cassandra", list(NODES))
    for t in MIXES:
        counts = restore(nodes, keyspace=args.keyspace, table=t, src=layout / t,
                         truncate=truncate, log=say)
        say(f"{t}: the saved layout is back ({counts} SSTables a node)")
    executor.wait_for_compactions()


def preload(args: argparse.Namespace, table: str) -> None:
    from planner.loadgen import run_load

    r = run_load(table_config(args, table, 1, preload=True))
    say(f"{table}: {args.keys} rows written ({r.failed} failed)")
    if r.failed:
        raise KairosError(f"{table}: {r.failed} writes of the preload failed")


def finish(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """The run's verdict: each phase's mean total beside its prediction, the gains of the
    plan over one strategy for both; exit 1 on an error, a failed operation or a lost
    acknowledged write."""
    phases = result["phases"]
    for ph in phases.values():
        totals = [r["total_ops_per_s"] for r in ph["runs"]]
        if totals:
            ph["total_ops_per_s"] = round(sum(totals) / len(totals), 1)
    if all("total_ops_per_s" in phases[p] for p in PHASES) and "plan" in result:
        before = phases["stcs_for_both"]["runs"][0]
        plan_strategies = plan_tables(Path(result["plan"]), args.keyspace)
        predicted = predictions(args.model, before, {
            "stcs_for_both": dict.fromkeys(MIXES, STCS),
            "per_table": plan_strategies,
            "lcs_for_both": dict.fromkeys(MIXES, LCS)})
        result["per_table_strategies"] = plan_strategies
        result["predicted_capacity"] = predicted
        for one in ("stcs_for_both", "lcs_for_both"):
            m = phases["per_table"]["total_ops_per_s"] / phases[one]["total_ops_per_s"] - 1
            p = predicted["per_table"] / predicted[one] - 1
            result[f"gain_over_{one}"] = {"measured": round(m, 4), "predicted": round(p, 4)}
            say(f"per table against {one}: measured {m:+.1%}, predicted {p:+.1%}")
    bad = {f"{ph}/{k}/{t}": (v["failed"], v["lost_acknowledged_writes"])
           for ph, r in phases.items() for k, run in enumerate(r["runs"])
           for t, v in run["tables"].items()
           if v["failed"] or v["lost_acknowledged_writes"]}
    result["failed_or_lost"] = bad
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 1 if "error" in result or bad else 0


def plan_tables(plan: Path, keyspace: str) -> dict[str, str]:
    """Each table's strategy after the plan's first step (its override or the target)."""
    import yaml

    doc = yaml.safe_load(plan.read_text())
    step = doc["steps"][0] if doc["steps"] else {"target": {}, "per_table": {}}
    cluster = {**doc["current_config"], **step["target"]}.get("compaction", STCS)
    own = step.get("per_table") or {}
    return {t: (own.get(f"{keyspace}.{t}") or {}).get("compaction", cluster) for t in MIXES}


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
