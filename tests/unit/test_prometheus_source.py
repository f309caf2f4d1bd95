"""The Prometheus workload source on answers captured from a real Prometheus scraping the lab
(tests/unit/fixtures/prometheus/README.md), and its bad inputs against real sockets."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import ValidationError
from planner.workload.prometheus import (
    PrometheusError,
    check_selector,
    check_url,
    collect_prometheus,
    parse_nodes,
    query,
    round_query,
    samples_from_result,
    scrape_errors,
)
from planner.workload.store import Store

FIXTURES = Path(__file__).parent / "fixtures" / "prometheus"
CASSANDRA = "cass1=127.0.0.1:7070,cass2=127.0.0.2:7070,cass3=127.0.0.3:7070"
REDIS = ",".join(f"redis{i}=127.0.0.1:{7000 + i}" for i in range(1, 7))
REFUSING = "127.0.0.6"  # nothing listens there (tests/unit/test_kairos_net.py)


def answer(name: str) -> dict:
    """A captured ``/api/v1/query`` answer's ``data``."""
    return json.loads((FIXTURES / name).read_text())["data"]


def nodes(hosts: str) -> list:
    return parse_nodes(hosts)


# ------------------------------------------------------------------- the samples
def test_cassandra_samples_from_a_captured_round() -> None:
    got = samples_from_result("cassandra", answer("cassandra-round1.json"), nodes(CASSANDRA))
    assert got.errors == {}
    assert [s.node for s in got.samples] == ["cass1", "cass2", "cass3"]
    for s in got.samples:
        assert set(s.counters) == {"read", "write", "scan"}
        assert sum(s.counters.values()) > 0
        assert s.instance.endswith(f":{s.started_at:.0f}")
        assert s.started_at > 1.7e9 and s.ts > s.started_at
        # Under the capture's load every class was served: its p99, and the request stages.
        assert {"p99_ms_read", "p99_ms_write", "p99_ms_scan", "pending_tasks",
                "blocked_tasks", "active_requests"} <= set(s.gauges), s.gauges
        assert all(0 < s.gauges[f"p99_ms_{c}"] < 10_000 for c in ("read", "write", "scan"))


def test_redis_samples_from_a_captured_round() -> None:
    got = samples_from_result("redis", answer("redis-round1.json"), nodes(REDIS))
    assert got.errors == {}
    roles = sorted(s.role for s in got.samples)
    assert roles == ["master"] * 3 + ["replica"] * 3
    for s in got.samples:
        assert set(s.counters) == {"read", "write", "other", "ignored"}
        assert len(s.instance) == 40  # the run_id
        assert s.gauges["cpu_main_seconds"] > 0
    primaries = [s for s in got.samples if s.role == "master"]
    assert all(s.counters["write"] > 0 and "p99_ms_write" in s.gauges for s in primaries)


@pytest.mark.parametrize("engine", ["cassandra", "redis"])
def test_two_captured_rounds_give_a_rate_through_the_store(engine: str, tmp_path: Path) -> None:
    hosts = CASSANDRA if engine == "cassandra" else REDIS
    store = Store(tmp_path / "k.db")
    for n in (1, 2):
        got = samples_from_result(engine, answer(f"{engine}-round{n}.json"), nodes(hosts))
        assert got.errors == {}
        assert got.round_ts == min(s.ts for s in got.samples)
        store.append_counters(engine, "lab", got.samples, round_ts=got.round_ts)
    d = store.derive(engine, "lab")
    assert not d.dropped
    # One interval per node, between its two scrapes; the capture ran under load (80 ops/s
    # on Cassandra, 150 on Redis).
    assert sorted(iv.node for iv in d.intervals) == sorted(n.name for n in nodes(hosts))
    rate = sum(sum(iv.ops.values()) / (iv.end - iv.start) for iv in d.intervals)
    assert rate > 50, rate
    assert all(10 <= iv.end - iv.start <= 20 for iv in d.intervals)


def test_a_node_prometheus_does_not_know_is_named() -> None:
    got = samples_from_result("redis", answer("redis-round1.json"),
                              nodes("redis9=127.0.0.1:7999"))
    assert got.samples == []
    assert got.errors["redis9"].startswith(
        "instance=127.0.0.1:7999: no redis_commands_total in the last 60 s:")


def test_a_target_whose_last_scrape_failed_is_named() -> None:
    data = answer("redis-round1.json")
    for item in data["result"]:
        if item["metric"]["__name__"] == "up" and item["metric"]["instance"] == "127.0.0.1:7001":
            item["values"][-1][1] = "0"
    got = samples_from_result("redis", data, nodes(REDIS))
    assert "redis1" in got.errors and "up 0" in got.errors["redis1"]
    assert len(got.samples) == 5


def test_an_answer_that_is_not_a_matrix_is_refused() -> None:
    with pytest.raises(PrometheusError, match="expected a matrix"):
        samples_from_result("redis", {"resultType": "vector", "result": []}, nodes(REDIS))


# ---------------------------------------------------------------------- inputs
def test_the_query_names_the_engines_metrics_and_the_selector() -> None:
    q = round_query("redis", lookback=30, selector='job="redis"')
    assert q.startswith('{__name__=~"') and q.endswith(',job="redis"}[30s]')
    assert "redis_commands_total" in q and ("|up" in q or "up|" in q)


@pytest.mark.parametrize(("url", "match"), [
    ("localhost:9090", "not an http"),
    ("ftp://h/", "not an http"),
    ("http://user:secret@h:9090", "holds a login"),
])
def test_bad_urls_are_refused(url: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        check_url(url)


@pytest.mark.parametrize("selector", ['job="a"}[1s]) or vector(1', "job=a", 'job="a\\"'])
def test_a_selector_that_could_end_the_query_is_refused(selector: str) -> None:
    with pytest.raises(ValidationError, match="not a list of label matchers"):
        check_selector(selector)


def test_hosts_items() -> None:
    assert [(n.name, n.value) for n in parse_nodes("a=1:2, 3:4")] == [("a", "1:2"), ("3:4", "3:4")]
    with pytest.raises(ValidationError, match="given twice"):
        parse_nodes("a=1,a=2")
    with pytest.raises(ValidationError, match="no node"):
        parse_nodes(" , ")


# --------------------------------------------------------------- real sockets
def test_an_unreachable_prometheus_is_named() -> None:
    with pytest.raises(PrometheusError, match=rf"prometheus http://{REFUSING}:9/api/v1/query: "
                                              "cannot reach it"):
        query(f"http://{REFUSING}:9", "up", timeout=2)


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers every GET with one status and body, or the body of its path when ``body`` is
    a mapping of paths (a real HTTP server on loopback)."""

    def __init__(self, *args: object, status: int, body: bytes | dict[str, bytes],
                 **kw: object) -> None:
        self.status, self.body = status, body
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        body = self.body
        if isinstance(body, dict):
            body = body.get(self.path.split("?")[0], b"")
        self.send_response(self.status if body else 404)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[object]:
    servers = []

    def serve(status: int, body: bytes | dict[str, bytes]) -> str:
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(_Canned, status=status, body=body))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for s in servers:
        s.shutdown()
        s.server_close()


def test_prometheus_refusing_the_query_gives_its_error(canned) -> None:  # type: ignore[no-untyped-def]
    body = (FIXTURES / "bad-query.json").read_bytes()  # Prometheus' own 400 answer
    url = canned(400, body)
    with pytest.raises(PrometheusError, match="HTTP 400: bad_data: invalid parameter"):
        query(url, "up{")


def test_a_server_that_is_not_prometheus_is_named(canned) -> None:  # type: ignore[no-untyped-def]
    url = canned(200, b"<html>hello</html>")
    with pytest.raises(PrometheusError, match=r"not JSON \(is this Prometheus' API"):
        collect_prometheus("redis", REDIS, url=url)


def test_the_cli_prints_the_error_without_a_traceback(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    rc = main(["collect", "--engine", "redis", "--source", "prometheus", "--prometheus-url",
               f"http://{REFUSING}:9", "--hosts", REDIS, "--store", str(tmp_path / "k.db"),
               "--timeout", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot reach it" in err and "Traceback" not in err
    rc = main(["collect", "--engine", "redis", "--source", "prom", "--hosts", REDIS,
               "--store", str(tmp_path / "k.db")])
    err = capsys.readouterr().err
    assert rc == 2 and "kairos_workload_source" in err and "'prom' is not a source" in err
    rc = main(["collect", "--engine", "redis", "--source", "prometheus", "--hosts", REDIS,
               "--store", str(tmp_path / "k.db")])
    assert rc == 2 and "--prometheus-url: required" in capsys.readouterr().err


def test_exporter_nodes_from_the_collect_hosts() -> None:
    """The playbook passes the built-in collector's hosts: a Cassandra address gets its JMX
    exporter's port, a Redis address:port stays, an inventory instance replaces either."""
    from planner.workload.prometheus import exporter_nodes

    got = exporter_nodes("cass1=127.0.0.1,cass2=127.0.0.2", port=7070,
                         instances="cass2=node2.example:9500,")
    assert [(n.name, n.value) for n in got] == [("cass1", "127.0.0.1:7070"),
                                                 ("cass2", "node2.example:9500")]
    got = exporter_nodes("redis1=127.0.0.1:7001", port=7070)
    assert [(n.name, n.value) for n in got] == [("redis1", "127.0.0.1:7001")]
    with pytest.raises(ValidationError, match="prometheus instances: 'cass9' is not one of"):
        exporter_nodes("cass1=127.0.0.1", port=7070, instances="cass9=x:1")



def test_a_down_target_is_named_with_the_error_of_its_last_scrape(canned) -> None:  # type: ignore[no-untyped-def]
    """Prometheus' /api/v1/targets (captured: tests/unit/fixtures/prometheus/README.md) says
    why a target is down; a round whose node's up is 0 adds it to that node's error."""
    targets = (FIXTURES / "targets-down.json").read_bytes()
    refused = ('Get "http://127.0.0.11:9121/scrape?target=rediss%3A%2F%2F127.0.0.1%3A7001": '
               "dial tcp 127.0.0.11:9121: connect: connection refused")
    assert scrape_errors(canned(200, targets)) == {
        "127.0.0.11:7070": 'Get "http://127.0.0.11:7070/metrics": dial tcp 127.0.0.11:7070: '
                           "connect: connection refused",
        "127.0.0.1:7001": refused}
    data = json.loads((FIXTURES / "redis-round1.json").read_text())
    for item in data["data"]["result"]:
        if item["metric"]["__name__"] == "up" and item["metric"]["instance"] == "127.0.0.1:7001":
            item["values"][-1][1] = "0"
    url = canned(200, {"/api/v1/query": json.dumps(data).encode(), "/api/v1/targets": targets})
    got = collect_prometheus("redis", REDIS, url=url)
    assert got.errors == {"redis1": "instance=127.0.0.1:7001: Prometheus' last scrape of it "
                                    f"failed (up 0): {refused}"}
    # Without the targets' answer the node is named all the same.
    url = canned(200, {"/api/v1/query": json.dumps(data).encode()})
    assert collect_prometheus("redis", REDIS, url=url).errors == {
        "redis1": "instance=127.0.0.1:7001: Prometheus' last scrape of it failed (up 0)"}
