"""Shared code of the Redis modules: options, parsers, topology, gate and ordering rules, client.

The parsers and the decisions (failover target, restart order, sync-gate conditions,
value comparison) are pure functions over text and dicts, so unit tests feed them real
captured output (tests/unit/fixtures/redis/). Only :class:`Node` and :func:`read_views`
talk to servers, through redis-py: the password travels in the module's arguments
(no_log) and the AUTH command, never on a command line.
"""

from __future__ import annotations

import re
import time

from ansible.module_utils import kairos_tls
from ansible.module_utils.kairos_driverlog import route_driver_log

try:
    import redis as _redis

    HAS_REDIS = True
    REDIS_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - depends on the host
    _redis = None
    HAS_REDIS = False
    REDIS_IMPORT_ERROR = _exc

CLUSTER_SLOTS = 16384

# Connection options shared by every Redis module (doc fragment kairos_redis).
CONNECTION_ARGS = dict(
    password=dict(type="str", default="", no_log=True),
    username=dict(type="str", default=""),
    connect_timeout=dict(type="float", default=5.0),
    tls=dict(type="dict", default={}),
)
# The option of the modules that read the whole cluster (doc fragment kairos_redis.nodes).
NODES_ARG = dict(nodes=dict(type="dict", required=True))
# How long the modules that wait for the cluster wait, and how often they look
# (doc fragment kairos_redis.wait).
WAIT_ARGS = dict(timeout=dict(type="float", default=120), interval=dict(type="float", default=0.5),
                 down_grace=dict(type="float", default=0))

# Secrets: never compared, returned or printed.
SECRET_DIRECTIVES = frozenset({"requirepass", "masterauth"})

_MEMORY = re.compile(r"^(\d+)(b|k|kb|m|mb|g|gb)$")
_MEMORY_FACTOR = {
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000**2,
    "mb": 1024**2,
    "g": 1000**3,
    "gb": 1024**3,
}


class RedisModuleError(Exception):
    """A condition a person must act on; the message says which and where."""


# ------------------------------------------------------------------ parsers (pure)
def _lines(text):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return [line.rstrip("\r") for line in (text or "").splitlines()]


def _number(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return float(value)
        except (TypeError, ValueError):
            return value


def parse_info(text):
    """Parse INFO output (any sections) into a flat dict of strings.

    ``slaveN`` lines (``ip=..,port=..,state=..,offset=..,lag=..``) become dicts.
    """
    out = {}
    for line in _lines(text):
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, value = line.split(":", 1)
        if re.match(r"^slave\d+$", key):
            out[key] = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        else:
            out[key] = value
    return out


def replication_state(info):
    """The replication facts of one node from its parsed INFO replication.

    Returns a dict: ``role`` (primary | replica), ``primary_endpoint`` (``host:port`` or
    None), ``link`` (up | down | None for a primary), ``sync_in_progress``, ``offset`` (the
    replica's processed offset, or the primary's master_repl_offset), ``repl_offset``
    (master_repl_offset), ``failover_state``, ``replicas`` (list of ``host:port``, state,
    offset, lag as the primary sees them).
    """
    role = info.get("role")
    if role not in ("master", "slave"):
        raise RedisModuleError(f"INFO replication has no usable role: {role!r}")
    state = {
        "role": "primary" if role == "master" else "replica",
        "primary_endpoint": None,
        "link": None,
        "sync_in_progress": False,
        "repl_offset": int(info.get("master_repl_offset", 0)),
        "failover_state": info.get("master_failover_state", "no-failover"),
        "replicas": [],
    }
    if role == "slave":
        state["primary_endpoint"] = f"{info.get('master_host')}:{info.get('master_port')}"
        state["link"] = info.get("master_link_status", "down")
        state["sync_in_progress"] = info.get("master_sync_in_progress", "0") != "0"
        state["offset"] = int(info.get("slave_repl_offset", 0))
    else:
        state["offset"] = state["repl_offset"]
    for key in sorted(k for k in info if re.match(r"^slave\d+$", k)):
        rep = info[key]
        state["replicas"].append(
            {
                "endpoint": f"{rep.get('ip')}:{rep.get('port')}",
                "state": rep.get("state"),
                "offset": int(rep.get("offset", 0)),
                "lag": int(rep.get("lag", 0)),
            }
        )
    return state


def parse_cluster_info(text):
    """CLUSTER INFO -> dict (numbers as int)."""
    return {k: _number(v) for k, v in parse_info(text).items()}


def parse_cluster_nodes(text):
    """CLUSTER NODES -> list of dicts, one per node line.

    Keys: ``id``, ``endpoint`` (``host:port``), ``flags`` (list), ``myself``, ``role``
    (primary | replica), ``primary_id`` (None for a primary), ``link_state``, ``epoch``,
    ``failing`` (flags fail, fail?, handshake or noaddr), ``slots`` (list of [start, end]).
    """
    nodes = []
    for line in _lines(text):
        parts = line.split()
        if len(parts) < 8:
            continue
        node_id, address, flags, primary = parts[0], parts[1], parts[2].split(","), parts[3]
        endpoint = address.split(",", 1)[0].split("@", 1)[0]
        slots = []
        for item in parts[8:]:
            if item.startswith("["):
                continue  # importing / migrating marker
            start, _, end = item.partition("-")
            slots.append([int(start), int(end or start)])
        nodes.append(
            {
                "id": node_id,
                "endpoint": endpoint,
                "flags": flags,
                "myself": "myself" in flags,
                "role": "primary" if "master" in flags else "replica",
                "primary_id": None if primary == "-" else primary,
                "epoch": int(parts[6]),
                "link_state": parts[7],
                "failing": bool({"fail", "fail?", "handshake", "noaddr"} & set(flags)),
                "slots": slots,
            }
        )
    return nodes


def slot_count(ranges):
    return sum(end - start + 1 for start, end in ranges)


def parse_conf(text):
    """A redis.conf as directive -> value (repeated directives joined by a space).

    Quotes around a value are removed; ``save ""`` gives ``""`` -> ``""`` (empty string).
    """
    out = {}
    for line in _lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        directive, _, value = stripped.partition(" ")
        directive = directive.lower()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[directive] = f"{out[directive]} {value}".strip() if directive in out else value
    return out


# -------------------------------------------------------------- comparison (pure)
def normalise_value(value):
    """A redis.conf / CONFIG GET value in a comparable form.

    Booleans -> yes/no, memory sizes with a unit -> bytes (k=1000, kb=1024, ...), case and
    runs of spaces folded, surrounding quotes dropped.
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = " ".join(str(value).strip().split()).lower()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    match = _MEMORY.match(text)
    if match:
        return str(int(match.group(1)) * _MEMORY_FACTOR[match.group(2)])
    return text


def config_get_value(key, reply):
    """The value of ``key`` in a CONFIG GET reply (a flat ``[name, value, ...]`` list, or a
    RESP3 map); None when the server does not know the directive (an empty reply)."""
    if isinstance(reply, dict):
        pairs = reply
    else:
        pairs = dict(zip(reply[::2], reply[1::2], strict=False)) if reply else {}
    return pairs.get(key)


def same_value(a, b):
    return normalise_value(a) == normalise_value(b)


def differing(wanted, running):
    """Keys of ``wanted`` whose normalised value differs from ``running`` (sorted)."""
    return sorted(k for k, v in wanted.items() if not same_value(v, running.get(k)))


def config_set_args(changes):
    """The argument list of one atomic ``CONFIG SET k v [k v ...]`` (Redis >= 7.0)."""
    args = ["CONFIG", "SET"]
    for key in sorted(changes):
        value = changes[key]
        args += [key, normalise_value(value) if isinstance(value, bool) else str(value)]
    return args


# ------------------------------------------------------------------ topology (pure)
def build_topology(endpoints, views):
    """Join per-node views into one picture of the cluster or replication set.

    Parameters
    ----------
    endpoints : dict
        Inventory name -> ``host:port``.
    views : dict
        Inventory name -> ``{"info": INFO replication text, "cluster_info": text or None,
        "cluster_nodes": text or None}``, or ``{"error": message}`` for a node that did
        not answer.

    Returns
    -------
    dict
        ``nodes``: name -> facts (role, primary, replicas, offset, link, cluster_state,
        slots_ok, known_nodes, id, failing_seen); ``down``: names that did not answer;
        ``primaries``: primary name -> replica names; ``cluster_enabled``.
    """
    by_endpoint = {ep: name for name, ep in endpoints.items()}
    nodes = {}
    down = []
    cluster_enabled = False
    ids = {}
    for name in endpoints:
        view = views.get(name) or {"error": "not read"}
        if "error" in view:
            down.append(name)
            nodes[name] = {"up": False, "error": view["error"]}
            continue
        fact = _replication_fact(endpoints[name], view["info"], by_endpoint)
        if view.get("cluster_info") is not None:
            cluster_enabled = True
            me = _add_cluster_facts(fact, view, by_endpoint)
            if me:
                ids[me["id"]] = name
        nodes[name] = fact
    primaries = _link_replicas(nodes)
    for fact in nodes.values():
        for peer in (fact.get("view") or {}).values():
            peer["primary"] = ids.get(peer.pop("primary_id"))
    return {
        "nodes": nodes,
        "down": sorted(down),
        "primaries": {k: sorted(v) for k, v in sorted(primaries.items())},
        "cluster_enabled": cluster_enabled,
    }


def _replication_fact(endpoint, info_text, by_endpoint):
    """A node's facts from its ``INFO replication`` (:func:`build_topology`)."""
    state = replication_state(parse_info(info_text))
    fact = {
        "up": True,
        "endpoint": endpoint,
        "role": state["role"],
        "primary": None,
        "primary_endpoint": state["primary_endpoint"],
        "link": state["link"],
        "sync_in_progress": state["sync_in_progress"],
        "offset": state["offset"],
        "repl_offset": state["repl_offset"],
        "failover_state": state["failover_state"],
        "replicas": [],
    }
    if state["primary_endpoint"]:
        fact["primary"] = by_endpoint.get(state["primary_endpoint"])
    return fact


def _add_cluster_facts(fact, view, by_endpoint):
    """Add what ``CLUSTER INFO`` / ``CLUSTER NODES`` show to ``fact``; the node's own entry.

    ``view`` maps each peer (inventory name, else its endpoint) to its role and its
    primary's node id, which :func:`build_topology` turns into a name once every id is known.
    """
    info = parse_cluster_info(view["cluster_info"])
    seen = parse_cluster_nodes(view.get("cluster_nodes") or "")
    me = next((n for n in seen if n["myself"]), None)
    fact.update(
        cluster_state=info.get("cluster_state"),
        slots_assigned=info.get("cluster_slots_assigned", 0),
        slots_ok=info.get("cluster_slots_ok", 0),
        slots_pfail=info.get("cluster_slots_pfail", 0),
        slots_fail=info.get("cluster_slots_fail", 0),
        known_nodes=info.get("cluster_known_nodes", 0),
        id=me["id"] if me else None,
        slots=slot_count(me["slots"]) if me else 0,
        failing_seen=sorted(
            by_endpoint.get(n["endpoint"], n["endpoint"]) for n in seen if n["failing"]
        ),
        view={
            by_endpoint.get(n["endpoint"], n["endpoint"]): {
                "role": n["role"],
                "primary_id": n["primary_id"],
            }
            for n in seen
        },
    )
    return me


def _link_replicas(nodes):
    """Primary name -> its replicas' names; each live primary's ``replicas`` filled in."""
    primaries = {}
    for name, fact in nodes.items():
        if fact.get("up") and fact["role"] == "primary":
            primaries.setdefault(name, [])
    for name, fact in nodes.items():
        if fact.get("up") and fact["role"] == "replica" and fact["primary"]:
            primaries.setdefault(fact["primary"], []).append(name)
            if fact["primary"] in nodes and nodes[fact["primary"]].get("up"):
                nodes[fact["primary"]]["replicas"].append(name)
    return primaries


def caught_up(replica_offset, primary_offset, max_lag=0):
    """A replica read *after* its primary is caught up when it reached the primary's offset."""
    return replica_offset + max_lag >= primary_offset


def choose_failover_target(topology, primary, primary_offset=None):
    """The most caught-up healthy replica of ``primary`` (ties: inventory name order).

    Raises RedisModuleError naming why there is none.
    """
    nodes = topology["nodes"]
    if primary not in nodes or not nodes[primary].get("up"):
        raise RedisModuleError(f"{primary} does not answer: cannot choose a failover target")
    if nodes[primary]["role"] != "primary":
        raise RedisModuleError(f"{primary} is not a primary (it is a {nodes[primary]['role']})")
    replicas = [
        name
        for name, fact in nodes.items()
        if fact.get("up") and fact["role"] == "replica" and fact["primary"] == primary
    ]
    if not replicas:
        raise RedisModuleError(
            f"{primary} has no replica: a failover would leave its data unserved; refusing"
        )
    healthy = [r for r in replicas if nodes[r]["link"] == "up" and not nodes[r]["sync_in_progress"]]
    if not healthy:
        detail = ", ".join(f"{r} link {nodes[r]['link']}" for r in sorted(replicas))
        raise RedisModuleError(f"no replica of {primary} is in sync ({detail}); refusing")
    best = sorted(healthy, key=lambda r: (-nodes[r]["offset"], r))[0]
    if primary_offset is not None and not caught_up(nodes[best]["offset"], primary_offset):
        # Not fatal: a coordinated failover pauses the primary until the replica catches up.
        pass
    return best


def restart_order(topology, hosts):
    """Order ``hosts`` for restarts: replicas first, then primaries (each after a failover).

    The order within each class follows ``hosts``. Returns a list of dicts ``{host, role,
    primary, failover}``. Raises RedisModuleError when a host is unknown or down, or a
    primary has no healthy replica to take over its data.
    """
    nodes = topology["nodes"]
    unknown = [h for h in hosts if h not in nodes]
    if unknown:
        raise RedisModuleError(f"unknown Redis nodes: {', '.join(unknown)}")
    down = [h for h in hosts if not nodes[h].get("up")]
    if down:
        raise RedisModuleError(f"nodes do not answer: {', '.join(down)}; restart nothing")
    replicas = [h for h in hosts if nodes[h]["role"] == "replica"]
    primaries = [h for h in hosts if nodes[h]["role"] == "primary"]
    order = [
        {"host": h, "role": "replica", "primary": nodes[h]["primary"], "failover": False}
        for h in replicas
    ]
    for h in primaries:
        choose_failover_target(topology, h)  # raises when no replica can take over
        order.append({"host": h, "role": "primary", "primary": None, "failover": True})
    return order


def unmet_conditions(topology, offsets=None, node=None, role=None, max_lag=0, expected_nodes=None):
    """Why the cluster is not in sync yet: a dict condition -> list of details (empty = in sync).

    Conditions: ``reachable`` every node answers; ``link_up`` every replica's link is up and
    not syncing; ``caught_up`` every replica reached the offset its primary had just before
    (``offsets``: primary name -> master_repl_offset read before the replicas); ``role``
    ``node`` has ``role``; cluster only: ``cluster_state`` ok everywhere, ``slots`` every
    node sees all 16384 slots ok, ``agreement`` every node knows every node, flags none as
    failing and agrees on who replicates whom.
    """
    nodes = topology["nodes"]
    unmet = {}

    def add(condition, detail):
        unmet.setdefault(condition, []).append(detail)

    for name in topology["down"]:
        add("reachable", f"{name}: {nodes[name].get('error')}")
    up = {n: f for n, f in nodes.items() if f.get("up")}
    for name, fact in sorted(up.items()):
        if fact["role"] != "replica":
            continue
        if fact["link"] != "up" or fact["sync_in_progress"]:
            syncing = ", sync in progress" if fact["sync_in_progress"] else ""
            add("link_up", f"{name}: master_link_status:{fact['link']}{syncing}")
            continue
        if fact["primary"] is None:
            add("link_up", f"{name}: replicates {fact['primary_endpoint']}, not a known node")
            continue
        target = (offsets or {}).get(fact["primary"])
        if target is not None and not caught_up(fact["offset"], target, max_lag):
            add("caught_up", f"{name}: offset {fact['offset']} < {fact['primary']}'s {target}")
    if node is not None and role is not None and node in up and up[node]["role"] != role:
        add("role", f"{node}: is a {up[node]['role']}, waiting for {role}")
    if topology["cluster_enabled"]:
        total = expected_nodes or len(nodes)
        for name, fact in sorted(up.items()):
            if fact.get("cluster_state") != "ok":
                add("cluster_state", f"{name}: cluster_state:{fact.get('cluster_state')}")
            if fact.get("slots_ok") != CLUSTER_SLOTS or fact.get("slots_assigned") != CLUSTER_SLOTS:
                add(
                    "slots",
                    f"{name}: {fact.get('slots_ok')}/{CLUSTER_SLOTS} slots ok "
                    f"(pfail {fact.get('slots_pfail')}, fail {fact.get('slots_fail')})",
                )
            if fact.get("known_nodes") != total:
                add("agreement", f"{name}: knows {fact.get('known_nodes')} of {total} nodes")
            if fact.get("failing_seen"):
                add("agreement", f"{name}: flags {', '.join(fact['failing_seen'])} as failing")
            for peer, seen in sorted((fact.get("view") or {}).items()):
                own = up.get(peer)
                if own is None:
                    continue
                if seen["role"] != own["role"] or (
                    own["role"] == "replica" and seen["primary"] != own["primary"]
                ):
                    add(
                        "agreement",
                        f"{name}: sees {peer} as {seen['role']} of {seen['primary']}, "
                        f"it is {own['role']} of {own['primary']}",
                    )
    return unmet


def describe_unmet(unmet):
    return "; ".join(f"{cond}: {', '.join(details)}" for cond, details in sorted(unmet.items()))


# ------------------------------------------------------------- module arguments
def redis_argument_spec(*, cluster=False, **options):
    """A Redis module's argument_spec: ``nodes`` (with ``cluster``), ``options``, the connection."""
    return {**(NODES_ARG if cluster else {}), **options, **CONNECTION_ARGS}


def credentials(module):
    """``(password, username, timeout, tls)`` from a module's params, as :class:`Node` takes
    them; TLS settings that cannot be used fail the module, naming the setting."""
    params = module.params
    try:
        tls = kairos_tls.normalise(params.get("tls"), where="tls")
    except kairos_tls.TLSConfigError as exc:
        module.fail_json(msg=str(exc))
    return params["password"], params["username"], params["connect_timeout"], tls


def cluster_endpoints(module):
    """Inventory name -> ``host:port`` from the ``nodes`` option (fails without redis-py)."""
    if not HAS_REDIS:
        module.fail_json(msg=f"the redis Python package is required: {REDIS_IMPORT_ERROR}")
    return {str(name): str(endpoint) for name, endpoint in module.params["nodes"].items()}


# -------------------------------------------------------------------- I/O (redis-py)
def split_endpoint(endpoint):
    host, _, port = str(endpoint).rpartition(":")
    if not host or not port.isdigit():
        raise RedisModuleError(f"not a host:port endpoint: {endpoint!r}")
    return host, int(port)


class Node:
    """One Redis server reached with redis-py; commands return raw text (parsed here)."""

    def __init__(self, endpoint, password="", username="", timeout=5.0, tls=None):
        if not HAS_REDIS:
            raise RedisModuleError(f"the redis Python package is required: {REDIS_IMPORT_ERROR}")
        route_driver_log()  # redis-py's own log: to the driver log file (kairos_driverlog)
        self.endpoint = endpoint
        host, port = split_endpoint(endpoint)
        self.client = _redis.Redis(
            host=host,
            port=port,
            password=password or None,
            username=username or None,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=True,
            **kairos_tls.redis_kwargs(kairos_tls.normalise(tls)),
        )

    def raw(self, *args):
        """Send one command, return the reply without redis-py's response parsing."""
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    def info(self, section="replication"):
        return self.raw("INFO", section)

    def config_get(self, keys):
        """CONFIG GET for each key: key -> value, or None for a key the server does not know."""
        return {key: config_get_value(key, self.raw("CONFIG", "GET", key)) for key in keys}

    def close(self):
        self.client.close()


def error_text(exc):
    """An exception as text, without anything that might carry a secret."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) < 300 else text[:297] + "..."


def read_view(endpoint, password="", username="", timeout=5.0, tls=None):
    """INFO replication (+ CLUSTER INFO / NODES when cluster mode is on) of one node."""
    node = Node(endpoint, password, username, timeout, tls)
    try:
        info = node.info("replication")
        server = parse_info(node.info("cluster"))
        view = {"info": info, "cluster_info": None, "cluster_nodes": None}
        loading = parse_info(node.info("persistence")).get("loading", "0")
        if loading != "0":
            return {"error": "loading its dataset"}
        if server.get("cluster_enabled") == "1":
            view["cluster_info"] = node.raw("CLUSTER", "INFO")
            view["cluster_nodes"] = node.raw("CLUSTER", "NODES")
        return view
    except Exception as exc:  # any connection / auth / protocol problem makes it "down"
        return {"error": error_text(exc)}
    finally:
        node.close()


def read_topology(endpoints, password="", username="", timeout=5.0, tls=None, first=None):
    """Read every node (``first`` names read before the others) and build the topology.

    Primaries are read before replicas when ``first`` lists them, so a replica's offset can
    be compared with the offset its primary had just before (see :func:`caught_up`).
    """
    order = list(first or []) + [n for n in endpoints if n not in (first or [])]
    views = {n: read_view(endpoints[n], password, username, timeout, tls) for n in order}
    return build_topology(endpoints, views)


def lease_primary(endpoints, key, password="", username="", timeout=5.0, tls=None):
    """A :class:`Node` on the primary that serves ``key`` (the one whose slot holds it in a
    Redis Cluster; the replication set's primary otherwise), or None when none answers.
    A refused login (redis-py's AuthenticationError) is raised, not taken for a node down."""
    for endpoint in endpoints.values():
        node = Node(endpoint, password, username, timeout, tls)
        try:
            primary = _primary_of(node, key)
        except Exception as exc:  # a node down: try the next; a refused login is raised
            node.close()
            if "Authentication" in type(exc).__name__:
                raise
            primary = None
        if primary != endpoint:
            node.close()
        if primary:
            return node if primary == endpoint else Node(primary, password, username, timeout, tls)
    return None


def _primary_of(node, key):
    """The endpoint of the primary that serves ``key``, as ``node`` sees it (None: unknown)."""
    if parse_info(node.info("cluster")).get("cluster_enabled") != "1":
        role = parse_info(node.info("replication")).get("role")
        return node.endpoint if role == "master" else None
    slot = int(node.raw("CLUSTER", "KEYSLOT", key))
    for other in parse_cluster_nodes(node.raw("CLUSTER", "NODES")):
        if other["role"] == "primary" and not other["failing"] and any(
                start <= slot <= end for start, end in other["slots"]):
            return other["endpoint"]
    return None


def primary_offsets(topology):
    return {
        name: fact["repl_offset"]
        for name, fact in topology["nodes"].items()
        if fact.get("up") and fact["role"] == "primary"
    }


def gate_once(endpoints, password="", username="", timeout=5.0, tls=None, **conditions):
    """Read primaries, then everyone, and evaluate :func:`unmet_conditions` once."""
    before = read_topology(endpoints, password, username, timeout, tls)
    offsets = primary_offsets(before)
    after = read_topology(endpoints, password, username, timeout, tls)
    # Only primaries that are still primaries count (a failover may be under way).
    offsets = {
        p: o for p, o in offsets.items() if after["nodes"].get(p, {}).get("role") == "primary"
    }
    return after, unmet_conditions(after, offsets=offsets, **conditions)


def refuses_connections(fact):
    """Whether a node's last read was refused at connect: no process listens (a busy or
    slow node times out instead, and a refused login is another error)."""
    return "Connection refused" in str(fact.get("error") or "")


class DownWatch:
    """Nodes that have refused every connection for ``grace`` seconds in a row: their process
    is gone, and no wait brings it back. ``spared`` nodes (one being restarted) are not
    watched; a ``grace`` of 0 finds none."""

    def __init__(self, grace, spared=()):
        self.grace, self.spared, self.since = grace, set(spared), {}

    def gone(self, topology, now):
        """name -> seconds refusing, of the nodes gone as of this read of ``topology``."""
        for name, fact in topology["nodes"].items():
            if name not in self.spared and refuses_connections(fact):
                self.since.setdefault(name, now)
            else:
                self.since.pop(name, None)
        return {n: now - since for n, since in sorted(self.since.items())
                if self.grace and now - since >= self.grace}


def describe_gone(gone):
    return [f"{name}: refused every connection for {seconds:.0f} s"
            for name, seconds in gone.items()]


def wait_in_sync(endpoints, password, username, timeout, tls, deadline_s, interval,
                 down_grace=0.0, **conditions):
    """Poll :func:`gate_once` until nothing is unmet or ``deadline_s`` seconds pass.

    With ``down_grace``, stop sooner when a node other than ``conditions["node"]`` (the one
    just restarted) is gone (:class:`DownWatch`); ``unmet`` then has ``down``, naming it."""
    began = time.monotonic()
    watch = DownWatch(down_grace, [conditions.get("node")])
    while True:
        topology, unmet = gate_once(endpoints, password, username, timeout, tls, **conditions)
        now = time.monotonic()
        gone = watch.gone(topology, now)
        if gone:
            unmet["down"] = describe_gone(gone)
        if not unmet or now - began >= deadline_s or gone:
            return topology, unmet, round(now - began, 2)
        time.sleep(interval)


def public_topology(topology):
    """The topology without the per-node cluster views (kept small for return values)."""
    nodes = {
        name: {k: v for k, v in fact.items() if k != "view"}
        for name, fact in topology["nodes"].items()
    }
    return {**topology, "nodes": nodes}
