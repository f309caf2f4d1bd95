"""The Prometheus workload source (issue 40 part 1): the nodes' counters from Prometheus.

Where the nodes are already watched by Prometheus, Kairos can read its workload there
instead of asking every node itself (planner.workload.collect, the default). One call of
:func:`collect_prometheus` is one collection round, as :func:`planner.workload.collect.collect` is:
it returns :class:`planner.workload.store.CounterSample` rows of the same raw counters, the same
gauges and the same restart identity, and the store derives the rate and the operation mix
from consecutive rounds exactly as it does for the built-in collector (restarts, counter
resets and all). Nothing here computes a rate.

Each round is one PromQL query over Prometheus' HTTP API (``GET /api/v1/query``): a
range-vector selector of the engine's metrics over the last ``lookback`` seconds, so each
series comes back with its raw samples and their scrape timestamps. A node's sample is the
last scrape of its target, stamped with that scrape's time (not the time Kairos asked): two
rounds' counters are then exactly ``Δt`` apart, as the exporter read them.

Cassandra: the JMX exporter agent (``io.prometheus.jmx:jmx_prometheus_javaagent``; the role
installs it with ``cassandra_jmx_exporter_enabled``, rules in
roles/cassandra/templates/jmx-exporter.yml.j2) exports the MBeans the built-in collector
reads as virtual tables: per table, the ``Count`` and ``99thPercentile`` of
``CoordinatorReadLatency``/``CoordinatorWriteLatency``/``CoordinatorScanLatency``, and the
request stages' tasks; the JVM's ``process_start_time_seconds`` is the node's start.

Redis: ``prometheus-redis-exporter`` (Debian, 1.45) exports ``INFO``: each command's
``calls`` as ``redis_commands_total{cmd}``, classed by the built-in collector's own
:func:`planner.workload.collect.redis_command_class`; ``redis_instance_info{run_id, role}``; the
start time; the main thread's CPU seconds; ``latencystats`` p99 per command.

Nodes are named by a label of their series (``instance`` by default): ``hosts`` maps each
node's name in the store to that label's value (``cass1=127.0.0.1:7070``).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.engines import get_engine
from planner.errors import KairosError, ValidationError
from planner.workload.collect import SYSTEM_KEYSPACES, CollectResult, redis_command_class
from planner.workload.store import CounterSample

__all__ = [
    "METRICS",
    "PrometheusError",
    "collect_prometheus",
    "parse_nodes",
    "query",
    "samples_from_result",
]

#: Environment variables of a Prometheus behind a login (never the command line):
#: a bearer token, or a user and password for basic authentication.
TOKEN_ENV = "KAIROS_PROMETHEUS_TOKEN"
USER_ENV = "KAIROS_PROMETHEUS_USERNAME"
PASSWORD_ENV = "KAIROS_PROMETHEUS_PASSWORD"

#: Each engine's metrics (the names the exporters write), keyed by the engine's name.
METRICS: dict[str, dict[str, str]] = {
    "cassandra": {
        "requests": "cassandra_coordinator_requests_total",
        "p99": "cassandra_coordinator_latency_p99_seconds",
        "pending": "cassandra_threadpool_pending_tasks",
        "active": "cassandra_threadpool_active_tasks",
        "blocked": "cassandra_threadpool_blocked_tasks",
        "start": "process_start_time_seconds",
    },
    "redis": {
        "requests": "redis_commands_total",
        "p99": "redis_latency_percentiles_usec",
        "info": "redis_instance_info",
        "start": "redis_start_time_seconds",
        "cpu_user": "redis_cpu_user_main_thread_seconds_total",
        "cpu_sys": "redis_cpu_sys_main_thread_seconds_total",
    },
}
#: What the message of a node without counters suggests, per engine.
EXPORTER_HINT: dict[str, str] = {
    "cassandra": "is the JMX exporter agent on the node (cassandra_jmx_exporter_enabled) and "
                 "its target scraped?",
    "redis": "is prometheus-redis-exporter scraping the node, and Prometheus the exporter?",
}
#: Cassandra's request stages (planner.workload.collect), as the JMX rules name their pools.
_STAGES = ("Native-Transport-Requests", "ReadStage", "MutationStage", "CounterMutationStage",
           "RequestResponseStage")
_CLIENT_STAGE = "Native-Transport-Requests"
#: A label value as Prometheus accepts it in a selector (no quotes, backslashes or newlines).
_SAFE_SELECTOR = re.compile(r'^(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"[^"\\\n]*"\s*,?)*$')


class PrometheusError(KairosError):
    """Prometheus could not be asked, or refused the query; the message names the URL."""


# ---------------------------------------------------------------------------- input
@dataclass(frozen=True)
class Node:
    """A node: its name in the store and its label's value in Prometheus."""

    name: str
    value: str


def parse_nodes(hosts: Sequence[str] | str) -> list[Node]:
    """``[name=]value`` items (a list or comma-separated text); the value is the label's.

    Without a name, the node is named by the value.
    """
    items = hosts.split(",") if isinstance(hosts, str) else list(hosts)
    out: list[Node] = []
    for raw in (i.strip() for i in items):
        if not raw:
            continue
        name, sep, value = raw.partition("=")
        if not sep:
            name, value = raw, raw
        if not name or not value:
            raise ValidationError(f"hosts: {raw!r}: expected name=label-value")
        if any(n.name == name for n in out):
            raise ValidationError(f"hosts: {name!r} is given twice")
        out.append(Node(name, value))
    if not out:
        raise ValidationError("hosts: no node given")
    return out


def exporter_nodes(
    hosts: Sequence[str] | str, *, port: int | None = None,
    instances: Sequence[str] | str = (),
) -> list[Node]:
    """The nodes of :func:`parse_nodes`, each value the label value of its exporter's series:
    ``port`` is added to a value given without one (a Cassandra node's address: its JMX
    exporter agent's port), and ``instances`` (``name=value`` items) replace the value of
    the nodes they name (the inventory's ``kairos_prometheus_instance``)."""
    nodes = parse_nodes(hosts)
    known = {n.name for n in nodes}
    given = {n.name: n.value for n in parse_nodes(instances)} if instances else {}
    for name in given:
        if name not in known:
            raise ValidationError(f"prometheus instances: {name!r} is not one of the hosts "
                                  f"({', '.join(sorted(known))})")
    out = []
    for n in nodes:
        value = given.get(n.name, n.value)
        if n.name not in given and port is not None and ":" not in value:
            value = f"{value}:{port}"
        out.append(Node(n.name, value))
    return out


def check_url(url: str) -> str:
    """The API's base URL, checked: http(s), a host, no login in it (argv is public)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(
            f"prometheus url: {url!r} is not an http(s) URL with a host "
            "(the inventory's kairos_prometheus_url, `kairos collect --prometheus-url`)"
        )
    if parts.username or parts.password:
        raise ValidationError(
            "prometheus url: holds a login; give it in the environment instead "
            f"({TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV})"
        )
    return url.rstrip("/")


def check_selector(selector: str) -> str:
    """Extra label matchers (``job="cassandra"``), checked so none can end the selector."""
    if not _SAFE_SELECTOR.match(selector):
        raise ValidationError(
            f"prometheus selector: {selector!r} is not a list of label matchers like "
            'job="cassandra",env=~"prod.*" (kairos_prometheus_selector)'
        )
    return selector.strip().rstrip(",")


# --------------------------------------------------------------------------- HTTP API
def _auth_header() -> dict[str, str]:
    token = os.environ.get(TOKEN_ENV)
    if token:
        return {"Authorization": f"Bearer {token}"}
    user = os.environ.get(USER_ENV)
    if user:
        pair = f"{user}:{os.environ.get(PASSWORD_ENV, '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {}


def query(url: str, promql: str, *, at: float | None = None, timeout: float = 10.0) -> Any:
    """One instant query (``/api/v1/query``): the response's ``data``.

    Raises
    ------
    PrometheusError
        Prometheus cannot be reached, answers with an HTTP error, refuses the query, or
        answers something that is not its API's JSON; the message names the URL.
    """
    params = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    return _api_get(url, "/api/v1/query", params, timeout=timeout)


def scrape_errors(url: str, *, label: str = "instance", timeout: float = 10.0) -> dict[str, str]:
    """``label``'s value -> the last scrape's error, for each active target that is down
    (``/api/v1/targets``): why its ``up`` is 0 (a refused connection, a timeout, ...)."""
    data = _api_get(url, "/api/v1/targets", {"state": "active"}, timeout=timeout)
    targets = data.get("activeTargets", []) if isinstance(data, dict) else []
    return {str(t["labels"][label]): str(t["lastError"]) for t in targets
            if isinstance(t, dict) and t.get("health") == "down" and t.get("lastError")
            and isinstance(t.get("labels"), dict) and label in t["labels"]}


def _api_get(url: str, path: str, params: Mapping[str, str], *, timeout: float) -> Any:
    """GET Prometheus' API ``path``: the answer's ``data`` (PrometheusError as ``query``)."""
    endpoint = f"{check_url(url)}{path}"
    request = urllib.request.Request(
        endpoint + "?" + urllib.parse.urlencode(params),
        headers={"Accept": "application/json", **_auth_header()},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        detail = _api_error(body) or exc.reason
        raise PrometheusError(f"prometheus {endpoint}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PrometheusError(f"prometheus {endpoint}: cannot reach it: {reason}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise PrometheusError(
            f"prometheus {endpoint}: the answer is not JSON (is this Prometheus' API?)"
        ) from None
    if not isinstance(answer, dict) or answer.get("status") != "success" or "data" not in answer:
        detail = _api_error(body) or "no data"
        raise PrometheusError(f"prometheus {endpoint}: query refused: {detail}")
    return answer["data"]


def _api_error(body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return ""
    if isinstance(answer, dict) and answer.get("error"):
        return f"{answer.get('errorType', 'error')}: {answer['error']}"
    return ""


#: A node whose target's last scrape failed; :func:`collect_prometheus` adds the scrape's error.
UP_0 = "Prometheus' last scrape of it failed (up 0)"


def round_query(engine: str, *, lookback: float, selector: str = "") -> str:
    """The round's PromQL: the engine's metrics and ``up`` with their raw samples."""
    names = sorted({*METRICS[get_engine(engine).name].values(), "up"})
    matchers = f'__name__=~"{"|".join(names)}"' + (f",{selector}" if selector else "")
    return f"{{{matchers}}}[{max(1, math.ceil(lookback))}s]"


# ------------------------------------------------------------------------ the samples
@dataclass
class _Series:
    metric: dict[str, str]
    ts: float
    value: float


def _latest(result: Any) -> list[_Series]:
    """Each series of a matrix answer with its last raw sample."""
    if not isinstance(result, dict) or result.get("resultType") != "matrix":
        raise PrometheusError(f"prometheus: expected a matrix, got {str(result)[:200]!r}")
    out = []
    for item in result.get("result", []):
        values = item.get("values") or []
        if not values:
            continue
        ts, text = values[-1]
        value = float(text)
        if math.isfinite(value):
            out.append(_Series(dict(item.get("metric", {})), float(ts), value))
    return out


def samples_from_result(
    engine: str, result: Any, nodes: Sequence[Node], *, label: str = "instance",
    lookback: float = 60.0,
) -> CollectResult:
    """The round's samples from a ``query(round_query(...))`` answer; errors per node.

    A node has a sample when its target's last scrape succeeded (``up`` 1) and its request
    counters were in it; its timestamp is that scrape's, and the round's is the earliest.
    """
    spec = get_engine(engine)
    metrics = METRICS[spec.name]
    by_node: dict[str, list[_Series]] = defaultdict(list)
    for series in _latest(result):
        by_node[series.metric.get(label, "")].append(series)
    out = CollectResult(spec.name, time.time())
    for node in nodes:
        rows = by_node.get(node.value, [])
        up = [s for s in rows if s.metric.get("__name__") == "up"]
        if up and max(up, key=lambda s: s.ts).value != 1:
            out.errors[node.name] = f"{label}={node.value}: {UP_0}"
            continue
        requests = [s for s in rows if s.metric.get("__name__") == metrics["requests"]]
        starts = [s for s in rows if s.metric.get("__name__") == metrics["start"]]
        if not requests or not starts:
            missing = metrics["requests"] if not requests else metrics["start"]
            out.errors[node.name] = (
                f"{label}={node.value}: no {missing} in the last {lookback:g} s: "
                + EXPORTER_HINT[spec.name]
            )
            continue
        try:
            out.samples.append(_SAMPLERS[spec.name](node.name, rows, metrics))
        except ValidationError as exc:
            out.errors[node.name] = f"{label}={node.value}: {exc}"
    if out.samples:
        # The round is when its earliest scrape was made (the built-in collector's round
        # begins before it asks the first node): the store's bins are the rounds.
        out.round_ts = min(s.ts for s in out.samples)
    return out


def _named(rows: Sequence[_Series], name: str) -> list[_Series]:
    return [s for s in rows if s.metric.get("__name__") == name]


def _cassandra_sample(node: str, rows: Sequence[_Series], m: Mapping[str, str]) -> CounterSample:
    counters = {"read": 0, "write": 0, "scan": 0}
    served: set[str] = set()
    requests = _named(rows, m["requests"])
    for s in requests:
        if s.metric.get("keyspace", "") in SYSTEM_KEYSPACES:
            continue
        op = s.metric.get("operation", "").lower()
        if op not in counters:
            raise ValidationError(f"{m['requests']}: unknown operation {op!r}")
        counters[op] += int(s.value)
        if s.value > 0:
            served.add(f"{op}/{s.metric.get('keyspace')}.{s.metric.get('table')}")
    gauges: dict[str, float] = {}
    for s in _named(rows, m["p99"]):
        op = s.metric.get("operation", "").lower()
        if f"{op}/{s.metric.get('keyspace')}.{s.metric.get('table')}" in served and s.value >= 0:
            key = f"p99_ms_{op}"
            gauges[key] = max(gauges.get(key, 0.0), s.value * 1000.0)
    pools = {kind: {s.metric.get("pool"): s.value for s in _named(rows, m[kind])
                    if s.metric.get("pool") in _STAGES}
             for kind in ("pending", "active", "blocked")}
    if pools["pending"]:
        gauges["pending_tasks"] = float(sum(pools["pending"].values()))
        gauges["blocked_tasks"] = float(sum(pools["blocked"].values()))
        if _CLIENT_STAGE in pools["active"]:
            gauges["active_requests"] = pools["active"][_CLIENT_STAGE] + \
                pools["pending"].get(_CLIENT_STAGE, 0.0)
    start = max(_named(rows, m["start"]), key=lambda s: s.ts)
    ts = max(s.ts for s in requests)
    return CounterSample(node=node, scope="node", ts=ts, counters=counters,
                         started_at=round(start.value, 3),
                         instance=f"{start.metric.get('instance', node)}:{start.value:.0f}",
                         gauges=gauges)


def _redis_sample(node: str, rows: Sequence[_Series], m: Mapping[str, str]) -> CounterSample:
    counters = dict.fromkeys(("read", "write", "other", "ignored"), 0)
    requests = _named(rows, m["requests"])
    for s in requests:
        counters[redis_command_class(s.metric.get("cmd", ""))] += int(s.value)
    info = _named(rows, m["info"])
    if not info:
        raise ValidationError(f"no {m['info']} (its run_id and role)")
    labels = max(info, key=lambda s: s.ts).metric
    gauges: dict[str, float] = {}
    for s in _named(rows, m["p99"]):
        if s.metric.get("quantile") not in ("99", "99.0", "0.99"):
            continue
        cls = redis_command_class(s.metric.get("cmd", ""))
        if cls != "ignored" and s.value >= 0:
            key = f"p99_ms_{cls}"
            gauges[key] = max(gauges.get(key, 0.0), s.value / 1000.0)
    cpu = [_named(rows, m["cpu_user"]), _named(rows, m["cpu_sys"])]
    if all(cpu):
        gauges["cpu_main_seconds"] = float(sum(max(c, key=lambda s: s.ts).value for c in cpu))
    start = max(_named(rows, m["start"]), key=lambda s: s.ts)
    role = labels.get("role", "")
    return CounterSample(node=node, scope="node", ts=max(s.ts for s in requests),
                         counters=counters, started_at=round(start.value, 3),
                         instance=labels.get("run_id", ""),
                         role="replica" if role in ("slave", "replica") else role,
                         gauges=gauges)


_SAMPLERS = {"cassandra": _cassandra_sample, "redis": _redis_sample}


# ------------------------------------------------------------------------------ entry
def collect_prometheus(
    engine: str,
    hosts: Sequence[str] | str,
    *,
    url: str,
    label: str = "instance",
    selector: str = "",
    lookback: float = 60.0,
    timeout: float = 10.0,
    port: int | None = None,
    instances: Sequence[str] | str = (),
) -> CollectResult:
    """One collection round of ``engine``'s nodes from the Prometheus at ``url``.

    Parameters
    ----------
    hosts
        ``[name=]value``: each node's name in the store and its ``label``'s value (see
        :func:`exporter_nodes` for ``port`` and ``instances``).
    label
        The label that tells the nodes apart (``instance``).
    selector
        Extra label matchers for every series (``job="cassandra"``).
    lookback
        How far back a node's last scrape may be (seconds); older nodes are errors.

    Raises
    ------
    ValidationError
        A bad URL, selector, label or hosts item.
    PrometheusError
        Prometheus cannot be asked (the whole round fails, naming the URL).
    """
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label):
        raise ValidationError(f"prometheus label: {label!r} is not a label name")
    if not lookback > 0:
        raise ValidationError(f"prometheus lookback: must be > 0, got {lookback}")
    nodes = exporter_nodes(hosts, port=port, instances=instances)
    promql = round_query(engine, lookback=lookback, selector=check_selector(selector))
    data = query(check_url(url), promql, timeout=timeout)
    result = samples_from_result(engine, data, nodes, label=label, lookback=lookback)
    down = [n for n in nodes if result.errors.get(n.name, "").endswith(UP_0)]
    if down:
        # Why the scrapes failed, as Prometheus saw it; without it the node is still named.
        try:
            why = scrape_errors(url, label=label, timeout=timeout)
        except PrometheusError:
            why = {}
        for n in down:
            if n.value in why:
                result.errors[n.name] += f": {why[n.value]}"
    return result
