"""Collectors: read each node's cumulative request counters into the workload store.

One call of :func:`collect` is one *round*: every node is asked once, and the counters it
reports are returned as :class:`planner.workload.store.CounterSample` rows (the caller appends them
with :meth:`planner.workload.store.Store.append_counters`). Rates are never computed here: the
store derives them from consecutive rounds, handling restarts and counter resets.

Cassandra
---------
For each node, with cassandra-driver (a white-list load-balancing policy over the given
nodes; every query is sent to the one node it is about with ``host=``):

* ``system_views.coordinator_read_latency``, ``coordinator_write_latency`` and
  ``coordinator_scan_latency``: per table, the ``count`` of requests the node coordinated
  since it started (single-partition reads, writes, range scans). Each client request is
  coordinated by exactly one node, so summing the nodes gives the cluster's requests; the
  ``local_*_latency`` tables count replica work (about RF times as much) and are not used.
  Tables of the system keyspaces are left out (the driver's own metadata queries land
  there). The node's sample (scope ``node``) sums the tables; ``per_table`` adds one
  sample per table (scope ``table:<ks>.<table>``) beside it, from the same rows.
* ``system.local``: ``host_id`` and ``gossip_generation`` (the node's start time in epoch
  seconds, renewed at each start): the instance id ``<host_id>:<generation>`` changes on a
  restart, which is how the store recognises counters that restarted from zero.

Raw counters ``read``, ``write``, ``scan``. **Cassandra cannot tell an insert from an update**
(both are mutations): the store maps ``write`` to the classes ``update`` and ``insert`` by
a configured ``insert_fraction``, by default 0 (every write is an ``update``). Batches
count once per statement's table; lightweight transactions count as the read/write they
perform.

Redis
-----
For each node, ``INFO server replication commandstats latencystats cpu`` with redis-py
(password from ``KAIROS_REDIS_PASSWORD`` or ``REDISCLI_AUTH``, never from the command line):
``run_id`` is the instance id, ``now - uptime_in_seconds`` the start time, ``role`` says
master or replica, and each ``cmdstat_<command>`` line's ``calls`` is summed into the
raw counters ``read``, ``write``, ``other`` or ``ignored`` by :func:`redis_command_class`
(the table is :data:`REDIS_READ`, :data:`REDIS_WRITE`, :data:`REDIS_IGNORED`; anything
else is ``other``). ``ignored`` holds connection and replication plumbing and introspection
(AUTH, HELLO, PING, INFO, CLUSTER ..., WAIT, REPLCONF, CONFIG GET ...): traffic of clients'
libraries, monitoring and Kairos itself rather than the application's workload.

Caveats: commands a Lua script or function runs are counted by Redis too, so a script
counts once as ``other`` (EVAL/EVALSHA/FCALL) plus once per command inside it; replicas
count every write their master replicates to them, which is why the store counts only the
``read`` calls of replicas.

Gauges
------
Beside the counters, each node's readings (:data:`planner.workload.store.GAUGES`): the p99 latency
per class in ms and a saturation signal. Cassandra: the worst ``p99th_ms`` of the tables in
the views above (Cassandra keeps a reservoir of the last minutes; 5.0 prints it in seconds,
:data:`CASSANDRA_LATENCY_VIEW_TO_MS`); the pending and blocked
tasks of the request stages (``system_views.thread_pools``): requests arriving faster than
the node serves them; and the client requests in flight on the node (Native-Transport-
Requests' active and pending tasks), which rose on the saturated lab where the queues
mostly did not (bench/saturation.sh). Redis: the worst p99 of the class's commands in
``INFO latencystats`` (since the start or CONFIG RESETSTAT, so a slow start stays visible),
and the main thread's CPU seconds, whose rate the store gives as ``cpu_main_utilisation``
(Redis serves commands on one thread: near 1 it is saturated). Redis's configuration
signals (issue 41; :data:`REDIS_SIGNALS`): from ``INFO stats memory keyspace clients`` the
keyspace hits and misses, evicted and expired keys, commands processed and read events (their
rates give the hit ratio and the commands per read event, a pipelining depth), used memory
against ``maxmemory``, the fragmentation ratio, the clients and the keys; and from a sample
of :data:`REDIS_SAMPLE_KEYS` random keys (``RANDOMKEY``, then ``OBJECT
ENCODING``, two pipelined round trips; both commands are counted as ``ignored``) how many
hashes, sets, sorted sets and lists are in their compact encoding (listpack, intset)
rather than the large one, which the ``*-max-listpack-*`` and ``set-max-intset-entries``
thresholds decide.

Resource use
------------
The collectors ask the nodes' servers, which cannot say what the machine gave them. Each
node's CPU (throttled time included), memory and page cache, and read I/O are read from its
envelope on its own host (kairos_envelope, delegated by playbooks/tasks/collect_resources.yml)
and handed to ``kairos collect --resources``, which adds them to the node's sample
(:mod:`planner.workload.resources`).
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planner._module_utils import kairos_driverlog, kairos_tls
from planner.engines import REGISTRY, get_engine
from planner.errors import KairosError, ValidationError
from planner.workload.store import CounterSample

#: Each engine's client port, for a node given without one.
DEFAULT_PORTS: dict[str, int] = {e.name: e.default_port for e in REGISTRY.values()}
#: Where `kairos collect --source` reads the counters: the nodes themselves, or Prometheus.
SOURCES = ("builtin", "prometheus")
#: Environment variables read (in order) for the Redis password.
REDIS_PASSWORD_ENV: tuple[str, ...] = ("KAIROS_REDIS_PASSWORD", "REDISCLI_AUTH")
#: The Redis ACL user of that password (empty: the default user).
REDIS_USER_ENV = "KAIROS_REDIS_USERNAME"
CASSANDRA_USER_ENV = "KAIROS_CASSANDRA_USERNAME"
CASSANDRA_PASSWORD_ENV = "KAIROS_CASSANDRA_PASSWORD"
#: The application's logins, which loads use (they write and read the application's data,
#: which Kairos' own role and ACL user may not: docs/security.md).
LOAD_CASSANDRA_USER_ENV = "KAIROS_LOAD_CASSANDRA_USERNAME"
LOAD_CASSANDRA_PASSWORD_ENV = "KAIROS_LOAD_CASSANDRA_PASSWORD"
LOAD_REDIS_USER_ENV = "KAIROS_LOAD_REDIS_USERNAME"
LOAD_REDIS_PASSWORD_ENV = "KAIROS_LOAD_REDIS_PASSWORD"


def cassandra_login(application: bool = False) -> tuple[str, str] | None:
    """(user, password) from the environment, or None (no authentication).

    ``application``: the load's login (``KAIROS_LOAD_CASSANDRA_*``) when it is set, else
    Kairos' own (``KAIROS_CASSANDRA_*``)."""
    names = [(CASSANDRA_USER_ENV, CASSANDRA_PASSWORD_ENV)]
    if application:
        names.insert(0, (LOAD_CASSANDRA_USER_ENV, LOAD_CASSANDRA_PASSWORD_ENV))
    for user_env, password_env in names:
        if user := os.environ.get(user_env):
            return user, os.environ.get(password_env, "")
    return None


def redis_login(application: bool = False) -> tuple[str | None, str | None]:
    """(ACL user or None for the default user, password or None) from the environment.

    ``application``: the load's (``KAIROS_LOAD_REDIS_*``) when its password is set, else
    Kairos' own (``KAIROS_REDIS_USERNAME``, ``KAIROS_REDIS_PASSWORD`` or ``REDISCLI_AUTH``)."""
    if application and os.environ.get(LOAD_REDIS_PASSWORD_ENV):
        return (os.environ.get(LOAD_REDIS_USER_ENV) or None,
                os.environ[LOAD_REDIS_PASSWORD_ENV])
    return os.environ.get(REDIS_USER_ENV) or None, redis_password()

def tls_settings(engine: str) -> dict[str, str]:
    """The TLS of Kairos' connections to ``engine`` from ``KAIROS_<ENGINE>_TLS_CA`` / ``_CERT``
    / ``_KEY`` (module_utils/kairos_tls.py; ``{}``: plaintext). Unusable settings are a
    ValidationError naming the variable, raised before any connection."""
    try:
        return dict(kairos_tls.from_env(engine))
    except kairos_tls.TLSConfigError as exc:
        raise ValidationError(str(exc)) from None


def cassandra_ssl_context() -> Any:
    """The driver's ``ssl_context`` for Kairos' CQL connections: None for plaintext."""
    tls = tls_settings("cassandra")
    return kairos_tls.client_context(tls) if tls else None


def redis_tls_kwargs(*, connection: bool = False) -> dict[str, Any]:
    """redis-py's TLS arguments for Kairos' Redis connections (kairos_tls.redis_kwargs)."""
    return dict(kairos_tls.redis_kwargs(tls_settings("redis"), connection=connection))


#: Keyspaces whose tables are not the application's workload.
SYSTEM_KEYSPACES: frozenset[str] = frozenset(
    {
        "system",
        "system_schema",
        "system_auth",
        "system_distributed",
        "system_traces",
        "system_views",
        "system_virtual_schema",
        "system_cluster_metadata",
    }
)
#: Cassandra 5.0's latency virtual tables print seconds in their ``*_ms`` columns: they scale
#: the reservoir's microseconds by NS_TO_MS (db/virtual/TableMetricTables.java) as if they
#: were nanoseconds. Measured on the lab under a 300 ops/s QUORUM load: coordinator reads
#: p99th_ms 0.152 and max_ms 0.263 where the client saw a p99 of 160 ms and a max of 302 ms.
CASSANDRA_LATENCY_VIEW_TO_MS = 1000.0
#: Virtual table -> raw counter.
CASSANDRA_VIEWS: dict[str, str] = {
    "coordinator_read_latency": "read",
    "coordinator_write_latency": "write",
    "coordinator_scan_latency": "scan",
}
#: The thread pools (system_views.thread_pools) that serve client requests: tasks pending
#: there mean the node takes requests faster than it serves them (saturation).
CASSANDRA_REQUEST_STAGES: tuple[str, ...] = (
    "Native-Transport-Requests", "ReadStage", "MutationStage", "CounterMutationStage",
    "RequestResponseStage",
)
#: The stage every client request passes through: its active plus pending tasks are the
#: requests in flight on the node (about 1 idle, the collector's own; tens under saturation).
CASSANDRA_CLIENT_STAGE = "Native-Transport-Requests"

#: Redis commands that only read data.
REDIS_READ: frozenset[str] = frozenset(
    {
        "get", "mget", "getrange", "substr", "strlen", "exists", "type", "ttl", "pttl",
        "expiretime", "pexpiretime", "touch", "dump", "lcs", "hget", "hmget", "hgetall", "hkeys",
        "hvals", "hlen", "hexists", "hstrlen", "hrandfield", "lrange", "lindex", "llen", "lpos",
        "scard", "smembers", "sismember", "smismember", "srandmember", "sinter", "sunion", "sdiff",
        "sintercard", "zrange", "zrangebyscore", "zrevrange", "zrevrangebyscore", "zrangebylex",
        "zrevrangebylex", "zscore", "zmscore", "zrank", "zrevrank", "zcard", "zcount", "zlexcount",
        "zrandmember", "zinter", "zunion", "zdiff", "zintercard", "xrange", "xrevrange", "xlen",
        "xread", "xpending", "xinfo", "getbit", "bitcount", "bitpos", "bitfield_ro", "pfcount",
        "geopos", "geodist", "geohash", "georadius_ro", "georadiusbymember_ro", "geosearch",
        "sort_ro", "json.get", "json.mget", "json.type", "json.strlen", "json.arrlen",
        "json.objkeys", "json.objlen",
    }
)
#: Redis commands that modify data.
REDIS_WRITE: frozenset[str] = frozenset(
    {
        "set", "setnx", "setex", "psetex", "mset", "msetnx", "append", "incr", "incrby",
        "incrbyfloat", "decr", "decrby", "getset", "getdel", "getex", "setrange", "del", "unlink",
        "expire", "pexpire", "expireat", "pexpireat", "persist", "rename", "renamenx", "copy",
        "move", "restore", "hset", "hsetnx", "hmset", "hincrby", "hincrbyfloat", "hdel", "lpush",
        "rpush", "lpushx", "rpushx", "lpop", "rpop", "lset", "linsert", "lrem", "ltrim", "lmove",
        "rpoplpush", "blpop", "brpop", "blmove", "brpoplpush", "lmpop", "blmpop", "sadd", "srem",
        "spop", "smove", "sinterstore", "sunionstore", "sdiffstore", "zadd", "zincrby", "zrem",
        "zremrangebyscore", "zremrangebyrank", "zremrangebylex", "zpopmin", "zpopmax", "bzpopmin",
        "bzpopmax", "zmpop", "bzmpop", "zunionstore", "zinterstore", "zdiffstore", "zrangestore",
        "xadd", "xdel", "xtrim", "xack", "xclaim", "xautoclaim", "xgroup", "xsetid", "xreadgroup",
        "setbit", "bitfield", "bitop", "pfadd", "pfmerge", "geoadd", "georadius",
        "georadiusbymember", "geosearchstore", "sort", "flushdb", "flushall", "swapdb", "json.set",
        "json.del", "json.arrappend", "json.numincrby",
    }
)
#: Not workload: connection/protocol, replication and cluster plumbing, introspection.
REDIS_IGNORED: frozenset[str] = frozenset(
    {
        "auth", "hello", "ping", "echo", "select", "quit", "reset", "asking", "readonly",
        "readwrite", "wait", "waitaof", "replconf", "psync", "sync", "info", "cluster", "client",
        "command", "config|get", "config|help", "slowlog", "latency", "memory", "role", "dbsize",
        "lastsave", "time", "lolwut", "module|list", "acl|whoami", "acl|cat", "acl|list",
        "acl|users", "acl|getuser",
        # Kairos's own sample of encodings (sample_encodings): RANDOMKEY is rare in
        # applications, and OBJECT is introspection.
        "randomkey", "object",
    }
)


def redis_command_class(command: str) -> str:
    """The class of a ``commandstats`` command name (``get``, ``cluster|info``...).

    Returns ``read``, ``write``, ``other`` or ``ignored`` (see the module docstring).
    """
    name = command.lower()
    if name.startswith("cmdstat_"):
        name = name[len("cmdstat_"):]
    parent = name.split("|", 1)[0]
    for candidate in (name, parent):
        if candidate in REDIS_IGNORED:
            return "ignored"
        if candidate in REDIS_READ:
            return "read"
        if candidate in REDIS_WRITE:
            return "write"
    return "other"


class CollectError(KairosError):
    """No node answered (or the request was malformed)."""


@dataclass
class CollectResult:
    """One round: the samples read and the nodes that failed (node -> error)."""

    engine: str
    round_ts: float
    samples: list[CounterSample] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return sorted({s.node for s in self.samples})


# ------------------------------------------------------------------ host parsing
@dataclass(frozen=True)
class Target:
    """A node to collect from: its name in the store, address and port."""

    name: str
    address: str
    port: int


def parse_targets(hosts: Sequence[str] | str, *, default_port: int) -> list[Target]:
    """``name=address[:port]`` or ``address[:port]`` items (a list or a comma-separated text).

    Without a name, the node is named ``address`` (port = default) or ``address:port``.
    """
    items = hosts.split(",") if isinstance(hosts, str) else list(hosts)
    out: list[Target] = []
    seen: set[str] = set()
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        name, _, where = item.rpartition("=")
        address, sep, port_text = where.rpartition(":")
        if not sep:
            address, port_text = where, ""
        if not address:
            raise ValidationError(f"hosts: {item!r}: no address")
        try:
            port = int(port_text) if port_text else default_port
        except ValueError:
            raise ValidationError(f"hosts: {item!r}: port {port_text!r} is not a number") from None
        if not 0 < port < 65536:
            raise ValidationError(f"hosts: {item!r}: port {port} is out of range")
        if not name:
            name = address if port == default_port and not port_text else f"{address}:{port}"
        if name in seen:
            raise ValidationError(f"hosts: {name!r} is given twice")
        seen.add(name)
        out.append(Target(name, address, port))
    if not out:
        raise ValidationError("hosts: no node given")
    return out


# ------------------------------------------------------------------------- Redis
def parse_info(text: str) -> dict[str, Any]:
    """Parse the text of Redis ``INFO``: ``{key: value}`` over all sections.

    ``cmdstat_*`` (and other ``k=v,k=v`` values) become dicts of numbers; integers and
    floats become numbers; the rest stay strings.
    """
    out: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        if "=" in value and all("=" in part for part in value.split(",")):
            fields: dict[str, Any] = {}
            for part in value.split(","):
                k, _, v = part.partition("=")
                fields[k] = _number(v)
            out[key] = fields
        else:
            out[key] = _number(value)
    return out


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def redis_counters(info: Mapping[str, Any]) -> dict[str, int]:
    """Sum ``INFO commandstats`` calls into the raw Redis counters."""
    counters = dict.fromkeys(("read", "write", "other", "ignored"), 0)
    for key, value in info.items():
        if not key.startswith("cmdstat_") or not isinstance(value, Mapping):
            continue
        calls = value.get("calls", 0)
        if not isinstance(calls, int) or calls < 0:
            raise ValidationError(f"{key}: calls is not a count: {calls!r}")
        counters[redis_command_class(key)] += calls
    return counters


def redis_gauges(info: Mapping[str, Any]) -> dict[str, float]:
    """Gauges from ``INFO latencystats cpu`` (none where the sections are absent).

    Per class, the worst p99 (in ms) of its commands (``latency_percentiles_usec_<cmd>``;
    Redis keeps them since the start or CONFIG RESETSTAT); ``cpu_main_seconds``, the main
    thread's user + system CPU seconds, cumulative (the store derives its utilisation).
    """
    out: dict[str, float] = {}
    for key, value in info.items():
        if not key.startswith("latency_percentiles_usec_") or not isinstance(value, Mapping):
            continue
        cls = redis_command_class(key[len("latency_percentiles_usec_"):])
        p99 = value.get("p99")
        if cls == "ignored" or not isinstance(p99, int | float) or not math.isfinite(p99) \
                or p99 < 0:
            continue
        name = f"p99_ms_{cls}"
        out[name] = max(out.get(name, 0.0), float(p99) / 1000.0)
    cpu = [info.get("used_cpu_user_main_thread"), info.get("used_cpu_sys_main_thread")]
    if all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in cpu):
        out["cpu_main_seconds"] = float(sum(cpu))  # type: ignore[arg-type]
    return out


#: INFO fields stored as they are (gauges of the same name): cumulative counts, whose rates
#: the store gives (planner.workload.store.GAUGE_RATES), and readings.
REDIS_SIGNALS: tuple[str, ...] = (
    "keyspace_hits", "keyspace_misses", "evicted_keys", "expired_keys",
    "total_commands_processed", "total_reads_processed",
    "used_memory", "maxmemory", "mem_fragmentation_ratio", "connected_clients",
)
#: Random keys sampled each round for their encodings (0: none).
REDIS_SAMPLE_KEYS = 32
#: The encodings of hashes, sets, sorted sets and lists (OBJECT ENCODING names the type's
#: encoding; strings are int, embstr or raw): compact (listpack, intset; ziplist before 7.0)
#: below the *-max-listpack-* / set-max-intset-entries thresholds, large above them. Redis
#: 7.0's lists are always quicklists (7.2 keeps small ones as listpacks): counted as large.
REDIS_COMPACT: frozenset[str] = frozenset({"listpack", "intset", "ziplist"})
REDIS_LARGE: frozenset[str] = frozenset({"hashtable", "skiplist", "quicklist", "linkedlist"})


def redis_signals(info: Mapping[str, Any]) -> dict[str, float]:
    """The configuration signals of ``INFO stats memory keyspace clients`` (none where the
    sections are absent): :data:`REDIS_SIGNALS` as read, and ``keys``, summed over the
    databases of ``INFO keyspace``."""
    out: dict[str, float] = {}
    for key in REDIS_SIGNALS:
        value = info.get(key)
        if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
            out[key] = float(value)
    dbs = [v for k, v in info.items() if k.startswith("db") and k[2:].isdigit()
           and isinstance(v, Mapping)]
    if dbs:
        out["keys"] = float(sum(int(db.get("keys", 0)) for db in dbs))
    return out


def encoding_counts(encodings: Sequence[str]) -> dict[str, float]:
    """``sampled_aggregates`` (sampled keys that are hashes, sets, sorted sets or lists) and
    ``sampled_compact`` (those in a compact encoding), from their ``OBJECT ENCODING``."""
    compact = sum(e in REDIS_COMPACT for e in encodings)
    return {"sampled_aggregates": float(compact + sum(e in REDIS_LARGE for e in encodings)),
            "sampled_compact": float(compact)}


def sample_encodings(conn: Any, keys: int) -> list[str]:
    """``OBJECT ENCODING`` of ``keys`` random keys (``RANDOMKEY``, each distinct key once),
    in two pipelined round trips on a redis-py ``Connection``; a key gone between the two
    (expired, evicted) is left out."""
    import redis

    if keys <= 0:
        return []
    conn.send_packed_command(conn.pack_commands([("RANDOMKEY",)] * keys))
    names = sorted({k for k in (conn.read_response() for _ in range(keys)) if k is not None})
    conn.send_packed_command(conn.pack_commands([("OBJECT", "ENCODING", k) for k in names]))
    out = []
    for _ in names:
        try:
            reply = conn.read_response()
        except redis.ResponseError:  # no such key any more
            continue
        if isinstance(reply, str):
            out.append(reply)
    return out


def redis_sample(info: Mapping[str, Any], *, node: str, ts: float) -> CounterSample:
    """A store sample from parsed ``INFO server replication commandstats latencystats cpu``."""
    for key in ("run_id", "uptime_in_seconds", "role"):
        if key not in info:
            raise ValidationError(
                f"{node}: INFO has no {key!r} (need sections server, replication)"
            )
    role = "replica" if info["role"] in ("slave", "replica") else str(info["role"])
    return CounterSample(
        node=node,
        scope="node",
        ts=ts,
        counters=redis_counters(info),
        started_at=round(ts - float(info["uptime_in_seconds"]), 3),
        instance=str(info["run_id"]),
        role=role,
        gauges={**redis_gauges(info), **redis_signals(info)},
    )


def redis_password() -> str | None:
    for name in REDIS_PASSWORD_ENV:
        value = os.environ.get(name)
        if value:
            return value
    return None


def read_redis_info(
    target: Target, *, password: str | None, timeout: float, sample_keys: int = 0,
    username: str | None = None, tls: dict[str, Any] | None = None,
) -> tuple[str, list[str]]:
    """The raw text of ``INFO server replication commandstats latencystats cpu stats memory
    keyspace clients`` from one node, and ``sample_keys`` random keys' encodings
    (:func:`sample_encodings`). ``tls``: :func:`redis_tls_kwargs` of a connection, read from
    the environment when not given."""
    import redis

    kairos_driverlog.route_driver_log()  # redis-py's own log: to its file, not stderr
    if tls is None:
        tls = redis_tls_kwargs(connection=True)
    conn = (redis.SSLConnection if tls else redis.Connection)(
        **tls,
        host=target.address,
        port=target.port,
        username=username,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        decode_responses=True,
    )
    try:
        conn.connect()
        conn.send_command("INFO", "server", "replication", "commandstats", "latencystats", "cpu",
                          "stats", "memory", "keyspace", "clients")
        reply = conn.read_response()
        pairs = sample_encodings(conn, sample_keys)
    finally:
        conn.disconnect()
    if isinstance(reply, bytes):
        reply = reply.decode()
    return str(reply), pairs


def collect_redis(
    hosts: Sequence[str] | str, *, password: str | None = None, timeout: float = 5.0
) -> CollectResult:
    """One round over Redis nodes (``[name=]address:port``, default port 6379)."""
    import redis

    targets = parse_targets(hosts, default_port=DEFAULT_PORTS["redis"])
    user, secret = redis_login()
    secret = password if password is not None else secret
    tls = redis_tls_kwargs(connection=True)  # once a round: unusable files refused first
    result = CollectResult("redis", time.time())
    for t in targets:
        began = time.time()
        try:
            text, encodings = read_redis_info(t, password=secret, timeout=timeout, tls=tls,
                                              sample_keys=REDIS_SAMPLE_KEYS, username=user)
        except (redis.RedisError, OSError) as exc:
            result.errors[t.name] = f"{type(exc).__name__}: {exc}"
            continue
        ts = (began + time.time()) / 2
        try:
            sample = redis_sample(parse_info(text), node=t.name, ts=ts)
        except ValidationError as exc:
            result.errors[t.name] = str(exc)
            continue
        result.samples.append(
            replace(sample, gauges={**sample.gauges, **encoding_counts(encodings)}))
    return result


# --------------------------------------------------------------------- Cassandra
def cassandra_samples(
    node: str,
    *,
    ts: float,
    local: Mapping[str, Any],
    views: Mapping[str, Sequence[Mapping[str, Any]]],
    per_table: bool = False,
    keyspaces: Sequence[str] | None = None,
    pools: Sequence[Mapping[str, Any]] = (),
) -> list[CounterSample]:
    """Store samples from one node's ``system.local`` row and virtual-table rows.

    Parameters
    ----------
    node
        The node's name in the store.
    ts
        When the rows were read.
    local
        ``system.local`` with ``host_id`` and ``gossip_generation``.
    views
        Virtual table name (:data:`CASSANDRA_VIEWS`) -> rows with ``keyspace_name``,
        ``table_name`` and ``count``.
    per_table
        Also one sample per table (scope ``table:<ks>.<table>``), beside the node's own
        (scope ``node``, always there: it carries the node's gauges and, later, its
        resources). The store's series of the cluster counts the node's sample only
        (:func:`planner.workload.store.node_intervals`), so keeping both counts nothing
        twice.
    keyspaces
        Only these keyspaces (default: every non-system keyspace).
    pools
        ``system_views.thread_pools`` rows (``name``, ``active_tasks``, ``pending_tasks``,
        ``blocked_tasks``).

    A sample's gauges: per class, the worst ``p99th_ms`` (a reservoir of the last minutes;
    in ms once :data:`CASSANDRA_LATENCY_VIEW_TO_MS` has scaled it) of its tables that served
    requests; the node-scope sample also has the request stages'
    (:data:`CASSANDRA_REQUEST_STAGES`) pending and blocked tasks and the client requests in
    flight (``active_requests``).

    Returns the node's sample first, then its tables' (by name) when ``per_table``.
    """
    generation = local.get("gossip_generation")
    host_id = local.get("host_id")
    if generation is None or host_id is None:
        raise ValidationError(f"{node}: system.local has no gossip_generation/host_id")
    wanted = set(keyspaces) if keyspaces else None
    per: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(CASSANDRA_VIEWS.values(), 0))
    gauges: dict[str, dict[str, float]] = defaultdict(dict)
    per["node"] = dict.fromkeys(CASSANDRA_VIEWS.values(), 0)  # an idle node counts zeros
    for view, counter in CASSANDRA_VIEWS.items():
        if view not in views:
            raise ValidationError(f"{node}: no rows of system_views.{view}")
        for row in views[view]:
            ks, table = str(row["keyspace_name"]), str(row["table_name"])
            if ks in SYSTEM_KEYSPACES or (wanted is not None and ks not in wanted):
                continue
            count = row["count"]
            if count is None or int(count) < 0:
                raise ValidationError(f"{node}: {view} {ks}.{table}: bad count {count!r}")
            scopes = ("node", f"table:{ks}.{table}") if per_table else ("node",)
            p99 = row.get("p99th_ms")
            for scope in scopes:
                per[scope][counter] += int(count)
                if int(count) > 0 and p99 is not None and math.isfinite(float(p99)) \
                        and p99 >= 0:
                    key = f"p99_ms_{counter}"
                    ms = float(p99) * CASSANDRA_LATENCY_VIEW_TO_MS
                    gauges[scope][key] = max(gauges[scope].get(key, 0.0), ms)
    gauges["node"].update(_stage_gauges(node, pools))
    return [
        CounterSample(node=node, scope=scope, ts=ts, counters=per[scope],
                      started_at=float(generation), instance=f"{host_id}:{generation}",
                      gauges=gauges.get(scope, {}))
        for scope in ["node", *sorted(s for s in per if s != "node")]
    ]


def _stage_gauges(node: str, pools: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The request stages' pending and blocked tasks, summed, and the client requests in
    flight (:data:`CASSANDRA_CLIENT_STAGE`); none without pool rows."""
    stages = [r for r in pools if r.get("name") in CASSANDRA_REQUEST_STAGES]
    if not stages:
        return {}
    out: dict[str, float] = {}
    for column in ("pending_tasks", "blocked_tasks"):
        values = [r.get(column) for r in stages]
        if not all(isinstance(v, int) and v >= 0 for v in values):
            raise ValidationError(f"{node}: thread_pools: bad {column} {values!r}")
        out[column] = float(sum(values))  # type: ignore[arg-type]
    for r in stages:
        if r.get("name") == CASSANDRA_CLIENT_STAGE and isinstance(r.get("active_tasks"), int):
            out["active_requests"] = float(r["active_tasks"] + r["pending_tasks"])
    return out


def collect_cassandra(
    hosts: Sequence[str] | str,
    *,
    per_table: bool = False,
    keyspaces: Sequence[str] | None = None,
    timeout: float = 10.0,
) -> CollectResult:
    """One round over Cassandra nodes (``[name=]address[:port]``, default port 9042)."""
    targets = parse_targets(hosts, default_port=DEFAULT_PORTS["cassandra"])
    ports = {t.port for t in targets}
    if len(ports) != 1:
        raise ValidationError("hosts: Cassandra nodes must share one CQL port")
    addresses = [t.address for t in targets]
    cluster = _cassandra_cluster(addresses, port=ports.pop(), timeout=timeout)
    result = CollectResult("cassandra", time.time())
    try:
        try:
            # Every node's pool: connect() alone returns after the first, and with
            # authentication a query sent to a node still in its handshake fails "marked down".
            session = cluster.connect(wait_for_all_pools=True)
        except Exception as exc:  # NoHostAvailable, auth, timeouts: every node failed
            for t in targets:
                result.errors[t.name] = f"{type(exc).__name__}: {exc}"
            return result
        for t in targets:
            began = time.time()
            try:
                local, views, pools = _read_cassandra_node(cluster, session, t.address)
            except Exception as exc:  # the driver raises many types; one node failing is data
                result.errors[t.name] = f"{type(exc).__name__}: {exc}"
                continue
            ts = (began + time.time()) / 2
            rows = {v: [r._asdict() for r in rs] for v, rs in views.items()}
            try:
                result.samples.extend(
                    cassandra_samples(
                        t.name, ts=ts, local=local._asdict(), views=rows, per_table=per_table,
                        keyspaces=keyspaces, pools=[r._asdict() for r in pools],
                    )
                )
            except ValidationError as exc:
                result.errors[t.name] = str(exc)
    finally:
        cluster.shutdown()
    return result


def _cassandra_cluster(addresses: Sequence[str], *, port: int, timeout: float) -> Any:
    """A driver Cluster that queries only ``addresses``, logged in from the environment."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    kairos_driverlog.route_driver_log()  # the driver's tracebacks: to its file, not stderr
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy(addresses), request_timeout=timeout
    )
    login = cassandra_login()
    auth = PlainTextAuthProvider(username=login[0], password=login[1]) if login else None
    return Cluster(
        contact_points=addresses,
        # Cassandra 5.0 speaks v5: negotiating down from the driver's newest version
        # defuncts connections, and with authentication a host could be marked down.
        protocol_version=5,
        port=port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        auth_provider=auth,
        connect_timeout=timeout,
        schema_metadata_enabled=False,
        token_metadata_enabled=False,
        ssl_context=cassandra_ssl_context(),
    )


def _read_cassandra_node(
    cluster: Any, session: Any, address: str
) -> tuple[Any, dict[str, list[Any]], list[Any]]:
    """One node's ``system.local`` row, its counter views' rows and its thread pools' rows
    (driver rows)."""
    host = _driver_host(cluster, address)
    local = session.execute(
        "SELECT host_id, gossip_generation FROM system.local", host=host
    ).one()
    views = {
        view: list(
            session.execute(
                f"SELECT keyspace_name, table_name, count, p99th_ms FROM system_views.{view}",
                host=host,
            )
        )
        for view in CASSANDRA_VIEWS
    }
    pools = list(session.execute(
        "SELECT name, active_tasks, pending_tasks, blocked_tasks FROM system_views.thread_pools",
        host=host,
    ))
    return local, views, pools


def _driver_host(cluster: Any, address: str) -> Any:
    for host in cluster.metadata.all_hosts():
        if host.address == address:
            if not host.is_up:
                raise CollectError(f"{address} is down (as the driver sees it)")
            return host
    raise CollectError(f"{address} is not a node of the cluster the driver connected to")


# ------------------------------------------------------------------------- entry
def collect(
    engine: str,
    hosts: Sequence[str] | str,
    *,
    per_table: bool = False,
    keyspaces: Sequence[str] | None = None,
    timeout: float = 10.0,
) -> CollectResult:
    """One collection round for ``engine`` (``cassandra`` or ``redis``): the registry's
    ``collector`` (planner.engines); ``per_table`` and ``keyspaces`` for an engine with
    tables."""
    spec = get_engine(engine)
    by_table: dict[str, Any] = {}
    if spec.tables:
        by_table = {"per_table": per_table, "keyspaces": keyspaces}
    elif per_table or keyspaces:
        raise ValidationError("per_table/keyspaces: Cassandra only")
    result: CollectResult = spec.collector.get()(hosts, timeout=timeout, **by_table)
    return result
