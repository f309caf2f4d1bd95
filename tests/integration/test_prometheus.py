"""The Prometheus workload source against a real Prometheus scraping the lab (issue 40 part 1).

One test, several checks, to stay short (one Prometheus start, one load window):

* the JMX exporter agent answers on every Cassandra node (the lab runs it:
  inventories/local/group_vars/cassandra.yml); Prometheus scrapes it and, through Debian's
  ``prometheus-redis-exporter``, every Redis node;
* under a load on both engines, the Prometheus source and the built-in collector, each
  into its own store at the same moments, give the same rate and operation mix within 5 %
  (planner.workload.store derives both from the counters, so the two differ only in where the
  counters were read and when);
* the p99 per class arrives as gauges from both;
* Kairos' own metrics (``kairos metrics --textfile``, of a state directory whose step the
  executor's ``kairos rollout record`` recorded failed) are scraped, and the example rule
  ``KairosStepFailed`` (docs/prometheus/kairos-alerts.yml) fires on the live server;
* bad input: an unreachable Prometheus URL and a node Prometheus does not know give clear
  errors from ``kairos collect``, not tracebacks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from planner.loadgen import BackgroundLoad
from planner.workload.collect import collect
from planner.workload.prometheus import collect_prometheus
from planner.workload.store import Store

from . import prometheus_lab
from .conftest import run_playbook

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        prometheus_lab.PROMETHEUS is None or prometheus_lab.REDIS_EXPORTER is None,
        reason="prometheus / prometheus-redis-exporter absent (`make setup` installs them)"),
]

BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures"
CASSANDRA = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
REDIS_PORTS = range(7001, 7007)
BUILTIN_HOSTS = {
    "cassandra": ",".join(f"cass{i + 1}={a}" for i, a in enumerate(CASSANDRA)),
    "redis": ",".join(f"redis{i + 1}=127.0.0.1:{p}" for i, p in enumerate(REDIS_PORTS)),
}
PROM_HOSTS = {
    "cassandra": ",".join(f"cass{i + 1}={a}:7070" for i, a in enumerate(CASSANDRA)),
    "redis": BUILTIN_HOSTS["redis"],
}
LOADS: dict[str, dict[str, Any]] = {
    "cassandra": {"contact_points": CASSANDRA, "keyspace": "kairos_promtest", "cl": "QUORUM",
                  "mix": {"read": 0.6, "update": 0.3, "scan": 0.1}, "rate": 80.0,
                  "concurrency": 4},
    "redis": {"contact_points": tuple(f"127.0.0.1:{p}" for p in REDIS_PORTS),
              "prefix": "kairos_promtest", "mix": {"read": 0.5, "write": 0.45, "other": 0.05},
              "rate": 150.0, "concurrency": 2},
}
ROUNDS, GAP = 3, 12.0  # three rounds of both sources, 12 s apart: two intervals, 24 s


def _failed_step_state(state_dir: Path) -> None:
    """The demo's recorded state directory (tests/unit/fixtures/metrics), its step s1 then
    recorded failed by the executor's own command."""
    src = FIXTURES / "metrics"
    plan = "lab-cassandra-20261127T152000Z.yml"
    (state_dir / "plans").mkdir(parents=True)
    shutil.copytree(src / "models", state_dir / "models")
    shutil.copy(src / plan, state_dir / "plans" / plan)
    ap = json.loads((src / "lab-cassandra-autopilot.json").read_text())
    ap.update(plan=str(state_dir / "plans" / plan), forecast=None)
    (state_dir / "lab-cassandra-autopilot.json").write_text(json.dumps(ap))
    subprocess.run(
        [str(BIN / "kairos"), "rollout", "record", "--state",
         str(state_dir / "plans" / (plan + ".state.json")), "--step", "s1", "--status",
         "failed", "--error", "cass2 did not come back"],
        check=True, capture_output=True, text=True)


def _rates(store: Store, engine: str) -> tuple[float, dict[str, float], Any]:
    """The cluster's ops/s (each node's operations over its own span between its first and
    last sample, summed over the nodes) and each class's share.

    Each node's span is its own: Prometheus scraped the nodes at different moments."""
    d = store.derive(engine, "lab")
    assert not d.dropped, d.dropped
    per_node: dict[str, list[Any]] = {}
    for iv in d.intervals:
        per_node.setdefault(iv.node, []).append(iv)
    rates: dict[str, float] = {}
    for ivs in per_node.values():
        span = max(iv.end for iv in ivs) - min(iv.start for iv in ivs)
        assert span > GAP, ivs
        for iv in ivs:
            for c, v in iv.ops.items():
                rates[c] = rates.get(c, 0.0) + v / span
    total = sum(rates.values())
    return total, {c: v / total for c, v in rates.items()}, store.gauge_rounds(engine, "lab")


def _kairos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kairos"), *args], capture_output=True, text=True,
                          check=False, timeout=60)


def test_prometheus_source_against_the_builtin_collector(lab: object, tmp_path: Path) -> None:
    began = time.monotonic()
    for address in CASSANDRA:  # the agent runs on every lab node
        with urllib.request.urlopen(f"http://{address}:7070/metrics", timeout=10) as r:
            assert b"cassandra_coordinator_requests_total" in r.read(), address
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    state = tmp_path / "state"
    _failed_step_state(state)
    out = _kairos("metrics", "--state-dir", str(state), "--engine", "cassandra",
                  "--textfile", str(textfiles / "kairos.prom"))
    assert out.returncode == 0, out.stderr

    with prometheus_lab.running(
        tmp_path / "prometheus", cassandra=[f"{a}:7070" for a in CASSANDRA],
        redis=[f"127.0.0.1:{p}" for p in REDIS_PORTS], textfile_dir=textfiles,
    ) as stack:
        targets = stack.wait_targets_up(["cassandra", "redis", "kairos"])
        assert targets == {"cassandra": 3, "redis": 6, "kairos": 1}, targets
        print(f"targets up after {time.monotonic() - began:.1f} s")

        stores = {src: Store(tmp_path / f"{src}.db") for src in ("builtin", "prometheus")}
        loads = [BackgroundLoad(engine=e, verify=False, keys=300, seed=7, max_seconds=90,
                                **LOADS[e]) for e in LOADS]
        for load in loads:
            load.start()
        try:
            time.sleep(7)  # every node scraped once under the load (Cassandra every 5 s)
            for n in range(ROUNDS):
                if n:
                    time.sleep(GAP)
                for engine in LOADS:
                    b = collect(engine, BUILTIN_HOSTS[engine], timeout=10)
                    p = collect_prometheus(engine, PROM_HOSTS[engine], url=stack.url,
                                           selector=f'job="{engine}"')
                    assert not b.errors and not p.errors, (b.errors, p.errors)
                    stores["builtin"].append_counters(engine, "lab", b.samples,
                                                      round_ts=b.round_ts)
                    stores["prometheus"].append_counters(engine, "lab", p.samples,
                                                         round_ts=p.round_ts)
        finally:
            results = [load.stop() for load in loads]
        print("loads", [r.to_dict() for r in results])

        for engine in LOADS:
            rate_b, mix_b, gauges_b = _rates(stores["builtin"], engine)
            rate_p, mix_p, gauges_p = _rates(stores["prometheus"], engine)
            diff = (rate_p - rate_b) / rate_b
            shares = {c: round(mix_p.get(c, 0) - mix_b.get(c, 0), 4)
                      for c in sorted(set(mix_b) | set(mix_p))}
            print(f"{engine}: built-in {rate_b:.1f} ops/s {mix_b}; prometheus {rate_p:.1f} "
                  f"ops/s {mix_p}; rate {diff:+.2%}, share differences {shares}")
            assert abs(diff) <= 0.05, (engine, rate_b, rate_p)
            assert rate_b > 0.5 * LOADS[engine]["rate"]
            for c, d in shares.items():  # each class's share within 5 % of the built-in's
                assert abs(d) <= 0.05 * max(mix_b.get(c, 0), 0.01) + 0.005, (engine, c, d)
            # The p99 per class and the saturation signals arrive from both sources, every
            # round: the same gauges, the p99s positive. (Redis's configuration signals, the
            # hit ratio, memory and encodings, are the built-in collector's only so far.)
            assert len(gauges_p) == len(gauges_b) == ROUNDS
            for g_b, g_p in zip(gauges_b, gauges_p, strict=True):
                assert set(g_p.values) <= set(g_b.values), (engine, g_b.values, g_p.values)
                assert {k for k in g_b.values if k.startswith("p99_ms_")} == {
                    k for k in g_p.values if k.startswith("p99_ms_")}, (engine, g_b, g_p)
                assert all(v > 0 for k, v in g_p.values.items() if k.startswith("p99_ms_"))
                # In the same unit: Cassandra's virtual tables print seconds in *_ms columns
                # (planner.workload.collect.CASSANDRA_LATENCY_VIEW_TO_MS), 1000x off before.
                for key in (k for k in g_p.values if k.startswith("p99_ms_")):
                    ratio = g_b.values[key] / g_p.values[key]
                    assert 0.5 <= ratio <= 2, (engine, key, g_b.values[key], g_p.values[key])
            print(f"{engine} p99 ms, built-in {gauges_b[-1].values}; "
                  f"prometheus {gauges_p[-1].values}")

        # Kairos' own metrics are scraped; the example alert fires on the failed step.
        scraped = stack.query('kairos_plan_step_status{status="failed",step="s1"}')
        assert [float(s["value"][1]) for s in scraped] == [1.0], scraped
        deadline = time.monotonic() + 30
        firing: list[Any] = []
        while time.monotonic() < deadline and not firing:
            firing = [a for a in stack.get("/api/v1/alerts")["alerts"]
                      if a["labels"]["alertname"] == "KairosStepFailed"
                      and a["state"] == "firing"]
            time.sleep(1)
        assert firing and firing[0]["labels"]["step"] == "s1", stack.get("/api/v1/alerts")

        # Selected per inventory: playbooks/collect.yml with kairos_workload_source.
        store = tmp_path / "playbook.db"
        chosen = run_playbook(
            "playbooks/collect.yml", "-e", json.dumps({
                "kairos_workload_source": "prometheus", "kairos_prometheus_url": stack.url,
                "kairos_prometheus_selectors": {"cassandra": 'job="cassandra"'},
                "kairos_store": str(store)}))
        assert chosen.rc == 0, chosen.output[-3000:]
        assert "cassandra/lab" in chosen.output and "redis/lab" in chosen.output
        assert "3 node(s)" in chosen.output and "6 node(s)" in chosen.output
        bad = run_playbook("playbooks/collect.yml", "-e", json.dumps({
            "kairos_workload_source": "prom", "kairos_store": str(store),
            "kairos_collect_engines": ["redis"]}))
        assert bad.rc != 0
        assert "kairos_workload_source" in bad.output
        assert "is not a source; known: builtin, prometheus" in bad.output
        assert "Traceback" not in bad.output

        # Bad input: a node Prometheus does not know; Prometheus unreachable. Clear errors.
        unknown = _kairos("collect", "--engine", "redis", "--source", "prometheus",
                          "--prometheus-url", stack.url, "--hosts", "redis9=127.0.0.1:7999",
                          "--store", str(tmp_path / "bad.db"))
        assert unknown.returncode == 1, unknown
        assert "redis9: instance=127.0.0.1:7999: no redis_commands_total" in unknown.stderr
        assert "Traceback" not in unknown.stderr
    gone = _kairos("collect", "--engine", "redis", "--source", "prometheus",
                   "--prometheus-url", stack.url, "--hosts", PROM_HOSTS["redis"],
                   "--store", str(tmp_path / "bad.db"))
    assert gone.returncode == 2, gone
    assert f"prometheus {stack.url}/api/v1/query: cannot reach it" in gone.stderr
    assert "Traceback" not in gone.stderr
    assert all(p.poll() is not None for p in stack.processes.values())
    print(f"test took {time.monotonic() - began:.1f} s")
