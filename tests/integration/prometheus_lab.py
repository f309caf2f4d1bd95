"""A real Prometheus scraping the lab, for the tests: its own process, config and data dir.

Debian's ``prometheus`` package is installed for promtool and its service never runs
(`make setup`). This starts the same binary as a child process on 127.0.0.10, with the
Redis exporter (Debian's ``prometheus-redis-exporter``, multi-target) beside it and a static
server for Kairos' textfile, and stops each by its pid. Nothing is left behind.

Scrape jobs:

``cassandra``
    the JMX exporter agent of each lab node (``<listen address>:7070``,
    roles/cassandra/templates/jmx-exporter.yml.j2);
``redis``
    each Redis node through the exporter's ``/scrape?target=``, relabelled so that the
    ``instance`` label is the node's own address (the exporter's documented recipe);
``kairos``
    ``kairos metrics --textfile`` output (what node-exporter's textfile collector would
    serve), with docs/prometheus/kairos-alerts.yml loaded as rules.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ADDRESS = "127.0.0.10"
PROMETHEUS_PORT = 9090
REDIS_EXPORTER_PORT = 9121
TEXTFILE_PORT = 9100
ALERT_RULES = REPO / "docs" / "prometheus" / "kairos-alerts.yml"
PROMETHEUS = shutil.which("prometheus")
REDIS_EXPORTER = shutil.which("prometheus-redis-exporter")


class _TextfileHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {".prom": "text/plain; version=0.0.4"}  # noqa: RUF012 (the base's API)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Stack:
    """The running processes (by pid) and where they answer."""

    url: str
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def query(self, promql: str) -> Any:
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=10
        ) as r:
            return json.loads(r.read())["data"]["result"]

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as r:
            return json.loads(r.read())["data"]

    def wait_targets_up(self, jobs: Sequence[str], *, timeout: float = 60) -> dict[str, int]:
        """Until every target of ``jobs`` was scraped successfully; their count per job."""
        deadline = time.monotonic() + timeout
        last: list[Any] = []
        while time.monotonic() < deadline:
            last = self.get("/api/v1/targets")["activeTargets"]
            mine = [t for t in last if t["labels"]["job"] in jobs]
            if mine and all(t["health"] == "up" for t in mine) and \
                    {t["labels"]["job"] for t in mine} == set(jobs):
                return {j: sum(t["labels"]["job"] == j for t in mine) for j in jobs}
            time.sleep(1)
        raise AssertionError(
            "targets not up: " + "; ".join(
                f"{t['labels'].get('job')}/{t['labels'].get('instance')}: {t['health']} "
                f"{t.get('lastError', '')}" for t in last))


def config(*, cassandra: Sequence[str], redis: Sequence[str], interval: str = "1s") -> dict:
    """The Prometheus configuration of the stack."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": [
            # Each scrape costs a node 45-65 ms of CPU in the agent (docs/prometheus.md): every
            # 5 s, about 3 % of a lab node's 0.4 core.
            {"job_name": "cassandra", "scrape_interval": "5s",
             "static_configs": [{"targets": list(cassandra)}]},
            {
                "job_name": "redis",
                "metrics_path": "/scrape",
                # rediss: the lab's Redis speaks TLS only (docs/security.md, "TLS").
                "static_configs": [{"targets": [f"rediss://{t}" for t in redis]}],
                "relabel_configs": [
                    {"source_labels": ["__address__"], "target_label": "__param_target"},
                    {"source_labels": ["__param_target"], "regex": "rediss?://(.*)",
                     "target_label": "instance"},
                    {"target_label": "__address__",
                     "replacement": f"{ADDRESS}:{REDIS_EXPORTER_PORT}"},
                ],
            },
            {"job_name": "kairos", "metrics_path": "/kairos.prom",
             "static_configs": [{"targets": [f"{ADDRESS}:{TEXTFILE_PORT}"]}]},
        ],
    }


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


#: The lab's CA and the clients' certificate (`make lab-up`), which the exporter presents.
TLS_DIR = Path(__file__).resolve().parents[2] / ".lab" / "tls"


def _exporter_env() -> dict[str, str]:
    """The exporter's Redis login (the lab's ACL user ``exporter``), in its environment
    (REDIS_USER / REDIS_PASSWORD), never its argv."""
    secret = Path(__file__).resolve().parents[2] / ".lab" / "secrets" / "redis-exporter-password"
    env = dict(os.environ)
    if secret.exists():
        env.update(REDIS_USER="exporter", REDIS_PASSWORD=secret.read_text().strip())
    return env


@contextmanager
def running(workdir: Path, *, cassandra: Sequence[str], redis: Sequence[str],
            textfile_dir: Path) -> Iterator[Stack]:
    """Start the Redis exporter, the textfile server and Prometheus; stop them by pid."""
    assert PROMETHEUS and REDIS_EXPORTER, "prometheus / prometheus-redis-exporter: `make setup`"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(
        config(cassandra=cassandra, redis=redis)))
    stack = Stack(f"http://{ADDRESS}:{PROMETHEUS_PORT}", workdir)
    server = http.server.ThreadingHTTPServer(
        (ADDRESS, TEXTFILE_PORT),
        functools.partial(_TextfileHandler, directory=str(textfile_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    logs = []
    try:
        for name, argv in (
            ("redis-exporter", [REDIS_EXPORTER, "-web.listen-address",
                                f"{ADDRESS}:{REDIS_EXPORTER_PORT}", "-redis-only-metrics",
                                "-tls-ca-cert-file", str(TLS_DIR / "ca.pem"),
                                "-tls-client-cert-file", str(TLS_DIR / "kairos.pem"),
                                "-tls-client-key-file", str(TLS_DIR / "kairos.key")]),
            ("prometheus", [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}",
                            f"--storage.tsdb.path={workdir / 'data'}",
                            f"--web.listen-address={ADDRESS}:{PROMETHEUS_PORT}",
                            "--storage.tsdb.retention.time=1h", "--log.level=warn"]),
        ):
            log = (workdir / f"{name}.log").open("wb")
            logs.append(log)
            stack.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                     env=_exporter_env() if name == "redis-exporter"
                                                     else None)
        _wait_ready(stack)
        yield stack
    finally:
        for proc in reversed(list(stack.processes.values())):
            _stop(proc)
        for log in logs:
            log.close()
        server.shutdown()
        server.server_close()


def _wait_ready(stack: Stack, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in stack.processes.items():
            if proc.poll() is not None:
                log = (stack.workdir / f"{name}.log").read_text()
                raise AssertionError(f"{name} exited {proc.returncode}: {log[-2000:]}")
        try:
            with urllib.request.urlopen(f"{stack.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"Prometheus not ready after {timeout} s")


def capture(out: Path, *, gap: float = 12.0) -> None:
    """Capture the unit tests' fixtures (tests/unit/fixtures/prometheus/README.md): two
    rounds' answers per engine under a load, ``gap`` seconds apart, and Prometheus' own
    answer to a malformed query. Needs the lab up."""
    import tempfile

    from planner.loadgen import BackgroundLoad
    from planner.workload.prometheus import round_query

    nodes = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    ports = range(7001, 7007)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, running(
        Path(tmp), cassandra=[f"{a}:7070" for a in nodes],
        redis=[f"127.0.0.1:{p}" for p in ports], textfile_dir=Path(tmp),
    ) as stack:
        stack.wait_targets_up(["cassandra", "redis"])
        loads = [
            BackgroundLoad(engine="cassandra", verify=False, contact_points=nodes,
                           keyspace="kairos_promtest", cl="QUORUM", keys=300, seed=7,
                           mix={"read": 0.6, "update": 0.3, "scan": 0.1}, rate=80.0,
                           concurrency=4, max_seconds=60),
            BackgroundLoad(engine="redis", verify=False, prefix="kairos_promtest",
                           contact_points=tuple(f"127.0.0.1:{p}" for p in ports), keys=300,
                           seed=7, mix={"read": 0.5, "write": 0.45, "other": 0.05},
                           rate=150.0, concurrency=2, max_seconds=60),
        ]
        for load in loads:
            load.start()
        try:
            time.sleep(8)
            for n in (1, 2):
                if n == 2:
                    time.sleep(gap)
                for engine in ("cassandra", "redis"):
                    q = round_query(engine, lookback=6, selector=f'job="{engine}"')
                    with urllib.request.urlopen(f"{stack.url}/api/v1/query?" +
                                                urllib.parse.urlencode({"query": q})) as r:
                        (out / f"{engine}-round{n}.json").write_bytes(r.read())
        finally:
            for load in loads:
                load.stop()
        try:
            urllib.request.urlopen(f"{stack.url}/api/v1/query?query=up%7B")
        except urllib.error.HTTPError as exc:
            (out / "bad-query.json").write_bytes(exc.read())


if __name__ == "__main__":
    import sys

    capture(Path(sys.argv[1]))
