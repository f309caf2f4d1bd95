#!/usr/bin/env python3
"""Per-node targets on the lab's Redis Cluster, where each primary serves its own pattern
(issue 42; a script, not a test: it owns the lab while it runs, `make lab-up` first).

MeT (seeds/001) configures each node for the pattern its data sees. Here the pattern is
pinned to a node by a per-node hot spot: every key of a load carries one hash tag, so a
load's keys live in one slot, on one primary.

- ``read``: hash-read (read 0.9, write 0.1) over ``--read-keys`` hashes of 256-768 fields
  on one primary: more than its maxmemory holds as hashtables, what it holds as listpacks;
- ``write``: hash-write (write 0.9, read 0.1) over ``--write-keys`` such hashes on another,
  a data set that fits either way.

The calibration of this pair (``--model``, inventories/local/calibration/redis-pernode-*)
found a listpack threshold of 1024 +150 % for the first and +11 % for the second: the same
sign, and a threshold that takes a restart in a plan, so the plans it made had no per-node
target (docs/planning.md, "Per-node choices on the lab"). The bench:

1. starts both loads (closed loops; every write acknowledged by WAIT on a replica, every
   acknowledged write read back at the end) and, after ``--warmup`` s, collects
   ``--rounds`` rounds of every node's counters into a store of its own (``kairos
   collect``, ``--interval`` s apart);
2. exports the cluster's series and each primary's own (``kairos collect --export
   --node``), forecasts each (``kairos forecast``), and plans (``kairos plan --engine redis
   --node-forecast PRIMARY=FILE ... --replica-of REPLICA=PRIMARY ...``; the replicas as
   ``INFO replication`` names them);
3. carries the plan out under the loads (``playbooks/apply_plan_redis.yml``), reads
   :data:`KEYS` back from every node (``CONFIG GET``), collects as many rounds again;
4. stops the loads (their failed operations and lost acknowledged writes), sets what it
   found back on every node through the executor, unlinks the loads' keys.

With ``--policy-effect READ,WRITE`` the plan is made with a stated test model: ``--model``
plus log-effects of allkeys-lru on reads and writes (standard error 0.05). No calibration
on this lab has found a node-level live effect that changes sign between the two patterns
(docs/planning.md, "Per-node choices on the lab"); this shows what the planner and the
executor do with a model that has one: the plan's ``per_node`` targets, carried out live
under both loads, read back from every node, replicas following their primaries.

The threshold and the eviction policy (:data:`KEYS`) are read from every node before, put in
the plan's current configuration, read back after the plan and set back at the end.

Output: progress lines, the plan's per-node provenance, a JSON record (``--out``) and a
Markdown table of each node's operations before and after, what was planned and read back.

    . bench/lab_env.sh && .venv/bin/python bench/per_node_redis_lab.py --out run.json
    .venv/bin/python bench/per_node_redis_lab.py --policy-effect 0.3,-0.6 --read-keys 330
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import yaml  # noqa: E402
from lab_load import lab_login  # noqa: E402

from planner import loadgen  # noqa: E402
from planner.calibrate.bench import ExecutorBench  # noqa: E402
from planner.executor.drift_read import read_nodes  # noqa: E402
from planner.loadgen import BackgroundLoad, LoadConfig, envelope  # noqa: E402
from planner.workload import collect  # noqa: E402

#: The node-level settings read back from every node, put in the plan's current
#: configuration and set back at the end: the calibrated pair's threshold, and the eviction
#: policy a --policy-effect test model decides on.
KEYS = ("hash-max-listpack-entries", "maxmemory-policy")
NAMES = {7000 + i: f"redis{i}" for i in range(1, 7)}
NODES = ",".join(f"{name}=127.0.0.1:{port}" for port, name in NAMES.items())
CONTACT = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")
KAIROS = str(REPO / ".venv" / "bin" / "kairos")
MODEL = REPO / "inventories" / "local" / "calibration" / "redis-pernode-model.json"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--read-keys", type=int, default=2300,
                   help="hashes of the read load (one primary's third of the calibration's 7,000)")
    p.add_argument("--write-keys", type=int, default=330, help="hashes of the write load")
    p.add_argument("--write-value-size", type=int, default=60,
                   help="bytes of a write-load field (under hash-max-listpack-value 64)")
    p.add_argument("--concurrency", type=int, default=8, help="client threads per load")
    p.add_argument("--warmup", type=float, default=60.0, help="seconds before collecting")
    p.add_argument("--rounds", type=int, default=13, help="collection rounds before and after")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between rounds")
    p.add_argument("--horizon", type=int, default=60,
                   help="the forecasts' and the plan's points of --interval s (default 60)")
    p.add_argument("--model", type=Path, default=MODEL, help="the calibrated Redis model")
    p.add_argument("--policy-effect", metavar="READ,WRITE",
                   help="plan with a stated test model: --model plus these log-effects of "
                        "allkeys-lru on reads and writes (e.g. 0.3,-0.6); the lab has "
                        "measured no such effect (docs/planning.md)")
    p.add_argument("--start-policy", metavar="POLICY",
                   help="the eviction policy every node runs for the run (set through the "
                        "executor first; what the nodes ran is set back at the end)")
    p.add_argument("--plan-args", default="",
                   help="more kairos plan options, e.g. '--confidence 0.8' (shell words)")
    p.add_argument("--out", type=Path, help="write the run's record as JSON")
    p.add_argument("--log", type=Path, default=REPO / ".kairos" / "per-node-redis.log",
                   help="the executor's output")
    return p.parse_args(argv)


def kairos(*args: str) -> str:
    """Run ``kairos ARGS``; its stdout. Exits naming the command on a failure."""
    run = subprocess.run([KAIROS, *args], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"per_node_redis_lab: kairos {args[0]} failed (rc {run.returncode}):\n"
                 f"{run.stderr.strip()[-2000:]}")
    return run.stdout


def topology() -> tuple[dict[str, str], dict[str, int]]:
    """``(replica -> primary, name -> port)`` from each node's ``INFO replication``, read
    with Kairos' own login and TLS (the collector's reader)."""
    user, password = collect.redis_login()
    replicas: dict[str, str] = {}
    for target in collect.parse_targets(NODES, default_port=6379):
        text, _ = collect.read_redis_info(target, password=password, username=user,
                                          timeout=5.0)
        info = collect.parse_info(text)
        if info["role"] in ("slave", "replica"):
            replicas[target.name] = NAMES[int(info["master_port"])]
    return replicas, {name: port for port, name in NAMES.items()}


def tag_on(primary_port: int) -> str:
    """A hash tag whose slot the primary on ``primary_port`` serves (the app's view)."""
    from redis.cluster import RedisCluster

    user, password = collect.redis_login(application=True)
    rc = RedisCluster(host="127.0.0.1", port=7001, username=user, password=password,
                      **collect.redis_tls_kwargs())
    try:
        for i in range(10_000):
            if rc.get_node_from_key(f"x{{pn{i}}}").port == primary_port:
                return f"pn{i}"
    finally:
        rc.close()
    sys.exit(f"per_node_redis_lab: no tag found on port {primary_port}")


def settings() -> dict[str, dict[str, int | str]]:
    """Every node's :data:`KEYS`, read back with CONFIG GET (the drift check's reader)."""
    observed, errors, names = read_nodes("redis", NODES, list(KEYS))
    if errors:
        sys.exit(f"per_node_redis_lab: cannot read {', '.join(KEYS)}: {errors}")
    return {name: {k: _typed(str(observed[name]["running"][k])) for k in KEYS}
            for name in sorted(names)}


def _typed(value: str) -> int | str:
    """A CONFIG GET value as the plan's configuration takes it: a count as an integer."""
    return int(value) if value.isdigit() else value


def policy_test_model(base: Path, path: Path, effect: str) -> Path:
    """``base`` (the lab's calibration) plus a stated effect of allkeys-lru: ``READ,WRITE``
    log-effects on reads and writes, standard error 0.05 (a test model, as
    tests/integration/test_learning_loop.py's: no lab calibration has found such an effect).
    """
    from dataclasses import replace

    import numpy as np

    from planner.model.performance import Feature, load_model, save_model

    try:
        effects = [float(x) for x in effect.split(",")]
        read, write = effects
    except ValueError:
        sys.exit(f"per_node_redis_lab: --policy-effect: {effect!r} is not READ,WRITE numbers")
    lab = load_model(base)
    classes, width = list(lab.classes), lab.coef.shape[1]

    def widened(coef: np.ndarray, cov: np.ndarray, column: np.ndarray,
                variance: float) -> tuple[np.ndarray, np.ndarray]:
        """One more feature column, and the flattened (class-major) covariance with it."""
        old = [c * (width + 1) + k for c in range(len(classes)) for k in range(width)]
        wide = np.zeros((coef.size + len(classes),) * 2)
        wide[np.ix_(old, old)] = cov
        for c in range(len(classes)):
            wide[c * (width + 1) + width, c * (width + 1) + width] = variance
        return np.column_stack([coef, column]), wide

    column = np.zeros(len(classes))
    column[classes.index("read")], column[classes.index("write")] = read, write
    coef, cov = widened(lab.coef, lab.cov, column, 0.05 ** 2)
    latency = lab.latency  # the p99 terms: no effect of the policy on the tail
    if latency is not None:
        lat_coef, lat_cov = widened(latency.coef, latency.cov, np.zeros(len(classes)), 0.0)
        latency = replace(latency, coef=lat_coef, cov=lat_cov)
    feature = Feature(param="maxmemory-policy", kind="level", level="allkeys-lru")
    save_model(replace(lab, name=f"{lab.name}+policy-test", features=(*lab.features, feature),
                       coef=coef, cov=cov, latency=latency,
                       provenance=f"bench/per_node_redis_lab.py --policy-effect {effect}: "
                                  f"{base.name} plus a stated allkeys-lru effect (a test "
                                  "model: the lab has measured none)"), path)
    return path


def collect_rounds(store: Path, rounds: int, interval: float) -> None:
    kairos("collect", "--engine", "redis", "--hosts", NODES, "--store", str(store),
           "--cluster", "lab", "--count", str(rounds), "--interval", f"{interval:g}")


def per_node_rates(store: Path, primaries: list[str], since: float, step: float,
                   work: Path) -> dict[str, dict[str, float]]:
    """Each primary's mean ops/s and read share since ``since`` (from the store)."""
    from planner.workload.series import load_trace

    out = {}
    for name in primaries:
        trace = work / f"{name}-{since:.0f}.json"
        kairos("collect", "--engine", "redis", "--store", str(store), "--cluster", "lab",
               "--export", str(trace), "--node", name, "--since", f"{since:.0f}",
               "--step", f"{step:g}")
        s = load_trace(trace)
        out[name] = {"ops_per_s": round(float(s.load.mean()), 1),
                     "read_share": round(float((s.mix["read"] * s.load).sum()
                                               / max(s.load.sum(), 1e-9)), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lab_login()
    args.log.parent.mkdir(parents=True, exist_ok=True)
    envelope.enter_lab(str(REPO / ".lab" / "envelopes.json"))  # this script: the control host
    replicas, ports = topology()
    primaries = sorted(set(ports) - set(replicas))
    if len(primaries) < 2:
        sys.exit(f"per_node_redis_lab: needs two primaries, found {primaries}")
    found = settings()
    start = found[primaries[0]]
    if any(v != start for v in found.values()):
        sys.exit(f"per_node_redis_lab: the nodes run different {', '.join(KEYS)}: {found}; "
                 "set one first")
    read_on, write_on = primaries[0], primaries[1]
    tags = {"read": tag_on(ports[read_on]), "write": tag_on(ports[write_on])}
    say(f"topology: primaries {', '.join(primaries)}; replicas "
        f"{', '.join(f'{r} of {p}' for r, p in sorted(replicas.items()))}; {start} "
        f"on every node; read load on {read_on} (tag {tags['read']}), write "
        f"load on {write_on} (tag {tags['write']})")
    loads = {
        "read": LoadConfig(engine="redis", contact_points=CONTACT, shape="hash-read",
                           prefix=f"kairos_pn{{{tags['read']}}}", keys=args.read_keys,
                           max_keys=args.read_keys, mix={"read": 0.9, "write": 0.1},
                           value_size=40, distribution="uniform", concurrency=args.concurrency,
                           processes=1, seconds=7200, seed=42),
        "write": LoadConfig(engine="redis", contact_points=CONTACT, shape="hash-write",
                            prefix=f"kairos_pn{{{tags['write']}}}", keys=args.write_keys,
                            max_keys=args.write_keys, mix={"read": 0.1, "write": 0.9},
                            value_size=args.write_value_size, distribution="uniform",
                            concurrency=args.concurrency, processes=1, seconds=7200, seed=43),
    }
    executor = ExecutorBench(load=loads["read"], warmup_seconds=0.0, measure_seconds=0.0,
                             playbook=REPO / "playbooks" / "change_settings_redis.yml",
                             inventory=REPO / "inventories" / "local" / "hosts.yml",
                             rollout_cl="ONE", log_path=args.log, log=say)
    work = Path(tempfile.mkdtemp(prefix="kairos-per-node-"))
    if args.policy_effect:
        args.model = policy_test_model(args.model, work / "policy-test-model.json",
                                       args.policy_effect)
    record: dict[str, Any] = {"topology": {"primaries": primaries, "replicas": replicas},
                              "tags": tags, "found": found, "model": str(args.model),
                              "policy_effect": args.policy_effect}
    store = work / "store.db"
    results: dict[str, Any] = {}
    try:
        record["running"] = with_start_policy(executor, args.start_policy, found)
        with BackgroundLoad(loads["read"], max_seconds=7200) as read_load, \
                BackgroundLoad(loads["write"], max_seconds=7200) as write_load:
            say(f"both loads running; warming up {args.warmup:g} s")
            time.sleep(args.warmup)
            began = time.time()
            say(f"collecting {args.rounds} rounds, {args.interval:g} s apart")
            collect_rounds(store, args.rounds, args.interval)
            record["before"] = per_node_rates(store, primaries, began, args.interval, work)
            say(f"before: {record['before']}")
            plan = make_plan(args, store, primaries, replicas, work)
            record["plan"] = plan
            if plan["steps"]:
                record["apply"] = apply_plan(work / "plan.yml", args.log)
            else:
                record["apply"] = {"refused": "the plan has no step: nothing to apply"}
                say("the plan has no step: nothing applied")
            record["read_back"] = settings()
            say(f"read back: {record['read_back']}")
            # A restart step fails over every primary: the loads follow their slots to the
            # replicas promoted, so the rates after are the primaries' after.
            replicas_after, _ = topology()
            record["topology_after"] = {"primaries": sorted(set(ports) - set(replicas_after)),
                                        "replicas": replicas_after}
            after = time.time()
            collect_rounds(store, args.rounds, args.interval)
            record["after"] = per_node_rates(store, record["topology_after"]["primaries"],
                                             after, args.interval, work)
            say(f"after: {record['after']}")
        for name, load in (("read", read_load), ("write", write_load)):
            got = load.result().to_dict()
            results[name] = {k: got.get(k) for k in (
                "ops", "ops_per_s", "failed", "acknowledged_writes",
                "lost_acknowledged_writes", "hit_ratio")}
        record["loads"] = results
        say(f"loads: {results}")
    finally:
        executor.apply(dict(start))
        back = settings()
        removed = sum(loadgen.unlink_load_keys(c) for c in loads.values())
        say(f"{start} set back on every node (read back {back}); unlinked {removed} keys")
    if args.out:
        args.out.write_text(json.dumps(record, indent=2, default=str) + "\n")
        say(f"wrote {args.out}")
    print_table(record, {read_on: "read", write_on: "write"})
    applied = record["apply"].get("rc", 0) == 0  # no step: nothing to apply, not a failure
    if not applied:
        say(f"the plan was not applied (rc {record['apply']['rc']}; log {args.log})")
    return 0 if applied and all(r["failed"] == 0 and not r["lost_acknowledged_writes"]
                                for r in results.values()) else 1


def with_start_policy(executor: ExecutorBench, policy: str | None,
                      found: dict[str, dict[str, int | str]]) -> dict[str, dict[str, int | str]]:
    """What every node runs for the run: ``found``, or with ``policy`` set first (read back)."""
    if not policy or all(v["maxmemory-policy"] == policy for v in found.values()):
        return found
    say(f"setting maxmemory-policy {policy} on every node for the run")
    executor.apply({"maxmemory-policy": policy})
    running = settings()
    if any(v["maxmemory-policy"] != policy for v in running.values()):
        sys.exit(f"per_node_redis_lab: maxmemory-policy {policy} not read back: {running}")
    return running


def print_table(record: dict[str, Any], loads: dict[str, str]) -> None:
    """A Markdown row per node: its role and load before and after the plan, its rates as a
    primary, and what was planned for it and read back."""
    planned, cluster = record["plan"]["per_node"], record["plan"]["cluster"]
    before = record["topology"]["replicas"]
    after = record.get("topology_after", record["topology"])["replicas"]

    # a load follows its slots: after a failover, to the replica promoted
    moved = {after.get(p, p): what for p, what in loads.items()}

    def role(replicas: dict[str, str], name: str, held: dict[str, str]) -> str:
        primary = replicas.get(name, name)
        what = held.get(primary, "idle")
        return what if name == primary else f"replica of {primary} ({what})"

    print("| node | before | after | ops/s before | after | planned | read back |\n"
          "|---|---|---|---|---|---|---|")
    for name in sorted(record["read_back"]):
        rates = [record[w].get(name, {}).get("ops_per_s", "") for w in ("before", "after")]
        want = {**record["running"][name], **cluster, **planned.get(name, {})}
        print(f"| {name} | {role(before, name, loads)} | {role(after, name, moved)} | "
              f"{rates[0]} | {rates[1]} | {want} | {record['read_back'][name]} |")


def apply_plan(plan: Path, log: Path) -> dict[str, Any]:
    """Carry ``plan`` out with ``playbooks/apply_plan_redis.yml``; its rc, seconds and the
    steps' state as the executor recorded it (each node's read-back included)."""
    began = time.time()
    say("applying the plan under the loads (playbooks/apply_plan_redis.yml)")
    run = subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i",
         str(REPO / "inventories" / "local" / "hosts.yml"),
         str(REPO / "playbooks" / "apply_plan_redis.yml"), "-e", f"plan={plan}"],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
             "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    log.write_text(run.stdout + run.stderr)
    out: dict[str, Any] = {"rc": run.returncode, "seconds": round(time.time() - began, 1)}
    say(f"apply_plan_redis.yml rc {run.returncode} in {out['seconds']:g} s (log {log})")
    state = plan.with_name(plan.name + ".state.json")
    if state.exists():
        out["state"] = json.loads(state.read_text()).get("steps")
    return out


def make_plan(args: argparse.Namespace, store: Path, primaries: list[str],
              replicas: dict[str, str], work: Path) -> dict[str, Any]:
    """Export, forecast and plan; the plan's per-node provenance and first step."""
    step = f"{args.interval:g}"
    horizon = str(args.horizon)
    files = {}
    for name in (None, *primaries):
        trace = work / f"trace-{name or 'cluster'}.json"
        extra = ["--node", name] if name else []
        kairos("collect", "--engine", "redis", "--store", str(store), "--cluster", "lab",
               "--export", str(trace), "--step", step, *extra)
        fc = work / f"forecast-{name or 'cluster'}.json"
        kairos("forecast", "--trace", str(trace), "--horizon", horizon, "--model", "naive",
               "--out", str(fc))
        files[name] = fc
    # Every parameter of the space as the nodes run it (CONFIG GET on every node): the
    # executor refuses a plan whose current values differ from what the nodes run.
    from planner.calibrate.redis_bench import read_running_redis
    from planner.model.spaces import get_space

    values, _ = read_running_redis(list(get_space("redis").parameters),
                                   hosts=NODES.split(","))
    current = work / "current.yml"
    current.write_text(yaml.safe_dump(values))
    hosts = ",".join(sorted(NAMES.values()))
    cmd = ["plan", "--engine", "redis", "--forecast", str(files[None]), "--model",
           str(args.model), "--current", str(current), "--hosts", hosts, "--cl", "ONE",
           "--horizon", horizon,
           "-o", str(work / "plan.yml"),
           *(a for n in primaries for a in ("--node-forecast", f"{n}={files[n]}")),
           *(a for r, p in sorted(replicas.items()) for a in ("--replica-of", f"{r}={p}")),
           *args.plan_args.split()]
    out = kairos(*cmd)
    say("kairos plan: " + out.strip().replace("\n", "\n  "))
    plan = yaml.safe_load((work / "plan.yml").read_text())
    for name, entry in (plan["provenance"].get("per_node", {}).get("nodes") or {}).items():
        say(f"  {name}: {json.dumps(entry)}")
    first = plan["steps"][0] if plan["steps"] else {}
    return {"summary": out.strip(), "per_node": first.get("per_node", {}),
            "cluster": first.get("target", {}),
            "steps": plan["steps"], "provenance_per_node": plan["provenance"].get("per_node")}


if __name__ == "__main__":
    sys.exit(main())
