#!/usr/bin/env python3
"""The autopilot plans per table on the lab (issue 42): with ``kairos_autopilot_per_table``
on, one tick collects per table, forecasts each table from its own history, plans with
those forecasts and applies the plan's per-table step under load. A script that owns the
lab while it runs, not a test.

1. A fresh keyspace ``--keyspace`` with bench/per_table_lab.py's two tables (``updates``,
   ``scans``; ``--mix`` as there), ``--keys`` rows of ``--value-size`` bytes each, on
   size-tiered compaction.
2. Both tables' closed loops at ``--cl`` for the whole run; while they run, per-table
   collection rounds (``kairos collect --per-table``'s, as the tick's own collection makes
   them) every ``--collect-interval`` seconds for ``--history`` seconds, into the
   autopilot's store: the tables' history a tick would have gathered over its earlier runs.
3. One autopilot tick (playbooks/autopilot.yml, Cassandra only): per_table on, the two
   tables as ``kairos_tables``, the lab's compaction model, ``--step`` seconds a point,
   horizon ``--horizon`` points. It collects its own round, re-plans (no plan is in force),
   and applies the step due now through the executor.
4. What the tick did, read back: its log line (``outcome``, ``per_table``), the plan's
   steps and ``provenance.per_table``, each table's compaction class on every node
   (system_schema.tables, each node asked alone), and the loads' failures and lost
   acknowledged writes. The keyspace and its snapshots are removed at the end (``--keep``
   leaves them). Exit 1 unless the tick applied a step, each table runs on every node what
   the plan's first step gives it, and no operation failed or acknowledged write was lost.

    make lab-up && .venv/bin/python bench/autopilot_per_table_lab.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "module_utils"))

import per_table_lab as ptl  # noqa: E402
import yaml  # noqa: E402
from lab_load import lab_login  # noqa: E402

from planner.errors import KairosError  # noqa: E402
from planner.loadgen import BackgroundLoad, envelope  # noqa: E402
from planner.loadgen.check import LoadResult  # noqa: E402

MODEL = REPO / "inventories/local/calibration/cassandra-compaction-model.json"


def say(msg: str) -> None:
    print(f"[autopilot-per-table {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    ptl.add_table_arguments(p, keyspace="kairos_autopilot_pertable", keys=20_000,
                            value_size=1000)
    p.add_argument("--collect-interval", type=float, default=10.0,
                   help="seconds between the history's collection rounds")
    p.add_argument("--history", type=float, default=300.0,
                   help="seconds of per-table history collected before the tick")
    p.add_argument("--step", type=int, default=20,
                   help="the autopilot's step (kairos_autopilot_step_seconds)")
    p.add_argument("--horizon", type=int, default=30, help="the plan's horizon in steps")
    p.add_argument("--forecast-model", default="ets", help="kairos_autopilot_forecast_model")
    p.add_argument("--compaction-seconds", type=float, default=30.0,
                   help="what a strategy change costs the plan")
    p.add_argument("--model", type=Path, default=MODEL)
    p.add_argument("--keep", action="store_true", help="leave the keyspace on the lab")
    p.add_argument("--out", type=Path, help="also write the JSON result here")
    args = ptl.parse_with_mixes(p, argv)
    if args.history < 10 * args.step:
        p.error(f"--history {args.history:g}: at least 10 steps of {args.step} s are needed "
                "for the forecast")
    return args


def tick(args: argparse.Namespace, work: Path, store: Path) -> subprocess.CompletedProcess[str]:
    """One autopilot run, Cassandra only, planning per table."""
    tables = ptl.table_names(args)
    (work / "current.yml").write_text(f"compaction: {ptl.STCS}\n")
    extra = {
        "kairos_autopilot_engines": ["cassandra"],
        "kairos_autopilot_dir": str(work),
        "kairos_autopilot_lock_file": str(work / "autopilot.lock"),
        "kairos_autopilot_store": str(store),
        "kairos_autopilot_step_seconds": args.step,
        "kairos_autopilot_history": "1h",
        "kairos_autopilot_horizon": args.horizon,
        "kairos_autopilot_forecast_model": args.forecast_model,
        "kairos_autopilot_current": str(work / "current.yml"),
        "kairos_autopilot_per_table": True,
        "kairos_tables": tables,
        "kairos_cassandra_model_file": str(args.model),
        "kairos_autopilot_plan_options": {"method": "dp",
                                          "compaction_seconds": args.compaction_seconds},
    }
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/autopilot.yml",
         "-e", json.dumps(extra)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)


def compaction_on_every_node(tables: list[str]) -> dict[str, dict[str, str | None]]:
    """Table -> node -> the compaction class its system_schema.tables holds."""
    from planner._module_utils import kairos_settings
    from planner.calibrate.bench import node_session

    out: dict[str, dict[str, str | None]] = {t: {} for t in tables}
    for i, address in enumerate(ptl.NODES):
        with node_session(address, 9042, timeout=30.0) as session:
            # The executor's read-back reader: the short class name, None without the table.
            for t, options in kairos_settings.read_table_options(session, tables).items():
                out[t][f"cass{i + 1}"] = options["compaction"] if options else None
    return out


def verdict(args: argparse.Namespace, work: Path, run: subprocess.CompletedProcess[str],
            loads: dict[str, LoadResult]) -> dict[str, Any]:
    """What the tick did, read back, and whether it is what was asked."""
    result: dict[str, Any] = {"rc": run.returncode, "output_tail": run.stdout[-4000:]}
    log = work / "autopilot.log.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    line = lines[-1] if lines else {}
    result["log_line"] = {k: line.get(k) for k in
                          ("outcome", "step", "plan", "per_table", "message", "apply_error")}
    tables = ptl.table_names(args)
    wanted: dict[str, str] = {}
    if line.get("plan"):
        doc = yaml.safe_load(Path(str(line["plan"])).read_text())
        result["steps"] = [{k: s.get(k) for k in ("id", "at", "target", "per_table", "tables",
                                                   "live", "restart")} for s in doc["steps"]]
        result["provenance_per_table"] = doc["provenance"].get("per_table")
        wanted = {f"{args.keyspace}.{t}": s for t, s in
                  ptl.plan_tables(Path(str(line["plan"])), args.keyspace).items()}
    result["wanted"] = wanted
    result["running"] = compaction_on_every_node(tables)
    result["loads"] = {t: {"ops": r.ops, "ops_per_s": round(r.ops_per_s, 1),
                           "failed": r.failed, "failures": dict(r.failures),
                           "acknowledged_writes": r.acknowledged_writes,
                           "lost_acknowledged_writes": r.lost_acknowledged_writes,
                           "verified": r.verified} for t, r in loads.items()}
    problems = []
    if line.get("outcome") != "applied":
        problems.append(f"the tick's outcome is {line.get('outcome')!r}, not 'applied'")
    for t, strategy in wanted.items():
        differ = {n: c for n, c in result["running"][t].items() if c != strategy}
        if differ:
            problems.append(f"{t}: the plan gives {strategy}, the nodes run {differ}")
    for t, r in loads.items():
        if r.failed or r.lost_acknowledged_writes or not r.verified:
            problems.append(f"{t}: {r.failed} failed, {r.lost_acknowledged_writes} lost")
    result["problems"] = problems
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lab_login()
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))
    work = REPO / ".kairos" / "autopilot-per-table"
    shutil.rmtree(work, ignore_errors=True)  # the last run's plans, store and log
    work.mkdir(parents=True, exist_ok=True)
    store = work / "kairos.db"
    result: dict[str, Any] = {"script": "bench/autopilot_per_table_lab.py",
                              "argv": argv or sys.argv[1:], "mixes": args.mixes,
                              "started": datetime.now(UTC).isoformat()}
    code = 1
    try:
        ptl.drop_keyspace(args.keyspace)
        for t in ptl.MIXES:
            ptl.preload(args, t)
        seconds = args.history + 900  # the loads outlast the tick; stopped when it ends
        loads = {t: BackgroundLoad(ptl.table_config(args, t, seconds),
                                   max_seconds=seconds + 60, max_requests=None)
                 for t in ptl.MIXES}
        for load in loads.values():
            load.start()
        try:
            say(f"both loads run; {args.history:.0f} s of per-table history into {store}")
            # The autopilot's store: its cluster is the inventory's (lab).
            with ptl.Collector(args.keyspace, store, args.collect_interval, args.history,
                               cluster="lab") as history:
                history.thread.join(timeout=args.history + 60)
            if history.errors:
                raise KairosError(f"the collector: {'; '.join(history.errors[:3])}")
            say(f"{history.rounds} rounds collected; the autopilot's tick")
            run = tick(args, work, store)
            print(run.stdout[-6000:], run.stderr[-2000:], sep="\n")
        finally:
            results = {t: load.stop(timeout=120 + args.keys / 400) for t, load in loads.items()}
        result.update(verdict(args, work, run, results))
        code = 1 if result["problems"] else 0
    except KairosError as exc:
        say(f"stopped: {exc}")
        result["error"] = str(exc)
    finally:
        if not args.keep:
            ptl.drop_keyspace(args.keyspace)
    text = json.dumps(result, indent=2, sort_keys=True, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    for p in result.get("problems", []):
        say(f"problem: {p}")
    return code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
