"""cassandra-driver helpers shared by the Cassandra modules."""

from __future__ import annotations

import datetime
import decimal
import uuid

try:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    HAS_DRIVER = True
except ImportError:  # pragma: no cover - reported by connect_one
    HAS_DRIVER = False


def connect_one(module, params):
    """Connect to exactly params['host'] (white-list policy); return (cluster, session)."""
    if not HAS_DRIVER:
        module.fail_json(msg="cassandra-driver is required on the host running this module")
    host = params["host"]
    auth = None
    if params.get("username"):
        auth = PlainTextAuthProvider(username=params["username"], password=params.get("password") or "")
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([host]),
        request_timeout=params.get("timeout", 20),
    )
    cluster = Cluster(
        [host],
        port=params.get("port", 9042),
        auth_provider=auth,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=params.get("timeout", 20),
        control_connection_timeout=params.get("timeout", 20),
    )
    try:
        session = cluster.connect()
    except Exception as exc:  # noqa: BLE001 - NoHostAvailable and friends
        cluster.shutdown()
        module.fail_json(msg=f"cannot connect to {host}:{params.get('port', 9042)} over CQL: {exc}")
    return cluster, session


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
