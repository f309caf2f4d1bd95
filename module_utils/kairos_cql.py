"""What the Cassandra modules that speak CQL share: their options and the driver helpers.

:func:`cql_argument_spec` builds each module's argument_spec from the connection options
(documented once, in doc_fragments/kairos_cql.py); the password travels in the module's
arguments (no_log) and the CQL handshake, never on a command line.
"""

from __future__ import annotations

import datetime
import decimal
import time
import uuid

from ansible.module_utils import kairos_tls
from ansible.module_utils.kairos_driverlog import route_driver_log

try:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    HAS_DRIVER = True
except ImportError:  # pragma: no cover - reported by connect_one
    HAS_DRIVER = False

# The connection options of every CQL module (doc fragment kairos_cql).
CQL_CONNECTION_ARGS = dict(
    host=dict(type="str", required=True),
    port=dict(type="int", default=9042),
    username=dict(type="str"),
    password=dict(type="str", no_log=True),
    timeout=dict(type="float", default=20),
    tls=dict(type="dict", default={}),
)


def cql_argument_spec(**options):
    """A CQL module's argument_spec: the connection options, then the module's ``options``.

    An option that is also a connection option changes only the keys given, e.g.
    ``timeout=dict(default=30)`` keeps the type float; ``password`` stays no_log.
    """
    spec = {name: dict(option) for name, option in CQL_CONNECTION_ARGS.items()}
    for name, option in options.items():
        spec[name] = {**spec.get(name, {}), **option}
    return spec


def build_cluster(
    hosts, *, port=9042, timeout=20, username=None, password=None, metadata=True, tls=None,
    **profile
):
    """A cassandra-driver Cluster (not connected) that sends every request to ``hosts`` only.

    ``metadata=False`` skips reading the schema and token map at connect (a gate polling
    virtual tables needs neither); ``metadata="tokens"`` reads the token map only: the
    schema (every table, column and type of every keyspace) is the costly part, and grows
    with the cluster's tables. ``profile``: extra ExecutionProfile settings, e.g.
    consistency_level. The driver's own log (its tracebacks of refused connections) goes to
    the driver log file, never to the operator's output (kairos_driverlog). ``tls``: the
    connection's TLS settings (kairos_tls; verified, raises TLSConfigError naming the problem).
    """
    route_driver_log()
    auth = PlainTextAuthProvider(username=username, password=password or "") if username else None
    tls = kairos_tls.normalise(tls, where="tls")
    return Cluster(
        hosts,
        port=port,
        auth_provider=auth,
        protocol_version=5,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=WhiteListRoundRobinPolicy(hosts),
                request_timeout=timeout,
                **profile,
            )
        },
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        schema_metadata_enabled=metadata is True,
        token_metadata_enabled=bool(metadata),
        ssl_context=kairos_tls.client_context(tls) if tls else None,
    )


def connect_one(module, params, *, metadata=True):
    """Connect to params['host'] only (an address or a list); return (cluster, session).

    ``metadata=False``: a module that only runs queries skips the driver's schema and token
    map read; ``"tokens"``: the token map only (build_cluster).
    """
    if not HAS_DRIVER:
        module.fail_json(msg="cassandra-driver is required on the host running this module")
    hosts = params["host"] if isinstance(params["host"], list) else [params["host"]]
    host = ", ".join(hosts)
    try:
        cluster = build_cluster(
            hosts,
            port=params.get("port", 9042),
            timeout=params.get("timeout", 20),
            username=params.get("username"),
            password=params.get("password"),
            metadata=metadata,
            tls=params.get("tls"),
        )
    except (kairos_tls.TLSConfigError, OSError) as exc:  # a CA or key file that cannot be used
        module.fail_json(msg=str(exc))
    try:
        session = cluster.connect()
    except Exception as exc:
        cluster.shutdown()
        module.fail_json(msg=f"cannot connect to {host}:{params.get('port', 9042)} over CQL: {exc}")
    wait_for_pools(cluster, session, hosts, params.get("timeout", 20))
    return cluster, session


def wait_for_pools(cluster, session, addresses, timeout):
    """Wait until the session has a pool to every address that is up.

    connect() returns once the first pools are up; with authentication the others are still
    in their handshake, and a query sent to such a host fails as "marked down".
    """
    deadline = time.monotonic() + timeout
    wanted = set(addresses)
    while time.monotonic() < deadline:
        pooled = {host.address for host in session.get_pool_state()}
        down = {h.address for h in cluster.metadata.all_hosts() if not h.is_up}
        if wanted <= pooled | down:
            return
        time.sleep(0.05)


def wanted_replication(hosts, replication_factor):
    """DC -> min(replication_factor, nodes in the DC), from the driver's view of the ring."""
    per_dc = {}
    for host in hosts:
        if host.datacenter:
            per_dc[host.datacenter] = per_dc.get(host.datacenter, 0) + 1
    return {dc: min(replication_factor, count) for dc, count in sorted(per_dc.items())}


def jsonable(value):
    """A value Ansible can return as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (uuid.UUID, decimal.Decimal, datetime.date, datetime.datetime)):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)
