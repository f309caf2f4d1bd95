"""JMX over HTTP(S) through a node's Jolokia agent, for the modules that would otherwise start a
nodetool JVM per call (2 s of CPU each on the lab; seconds of wall time on a busy node).

The agent reads its address, port and login from a properties file the cassandra role
writes (jolokia.properties, 0600); a module reads the same file on the node, so the
password never travels in a module's arguments or a command line. Only what the role's
policy file allows can be called (docs/executor.md). With ``protocol=https`` the module
verifies the agent against the file's ``caCert`` and presents the node's certificate
(``serverCert``/``serverKey``): the agent requires a client certificate of the CA.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from ansible.module_utils import kairos_tls
from ansible.module_utils.kairos_net import accepts_connections

STORAGE_SERVICE = "org.apache.cassandra.db:type=StorageService"


class JolokiaError(Exception):
    """A call that did not return a value: the agent's status and error, never the login."""


def read_config(path):
    """The agent's host, port, user and password from its properties file (key=value lines,
    ``#`` comments, ``\\\\`` for a backslash). Raises OSError or ValueError naming the file."""
    values = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: not a key=value line: {key.strip()[:40]!r}")
            values[key.strip()] = value.strip().replace("\\\\", "\\")
    try:
        port = int(values.get("port", ""))
    except ValueError:
        raise ValueError(f"{path}: port must be an integer") from None
    protocol = values.get("protocol", "http")
    if protocol not in ("http", "https"):
        raise ValueError(f"{path}: protocol must be http or https, not {protocol!r}")
    tls = {}
    if protocol == "https":
        # The agent's own CA and certificate: on the node, the module is the node's client.
        tls = {"ca_file": values.get("caCert", ""), "cert_file": values.get("serverCert", ""),
               "key_file": values.get("serverKey", "")}
        if not tls["ca_file"]:
            raise ValueError(f"{path}: protocol https needs caCert (the CA to verify the agent)")
    return {
        "host": values.get("host", "127.0.0.1"),
        "port": port,
        "user": values.get("user", ""),
        "password": values.get("password", ""),
        "tls": tls,
    }


def listening_agent(module, path):
    """The agent's config from ``path`` when it is given and the agent listens (the node
    runs with it), else None: the caller then uses nodetool. An unreadable file fails the
    module, naming it."""
    if not path:
        return None
    try:
        config = read_config(path)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"jolokia_config: cannot read {path}: {exc}")
    return config if accepts_connections(config["host"], config["port"]) else None


def call(config, request, timeout=30.0):
    """POST one Jolokia request (a dict: type, mbean, attribute or operation); its value."""
    tls = config.get("tls") or {}
    url = f"{'https' if tls else 'http'}://{config['host']}:{config['port']}/jolokia/"
    http = urllib.request.Request(
        url, data=json.dumps(request).encode(), headers={"Content-Type": "application/json"}
    )
    if config["user"]:
        login = f"{config['user']}:{config['password']}".encode()
        http.add_header("Authorization", "Basic " + base64.b64encode(login).decode())
    what = request.get("operation") or request.get("attribute") or request.get("type")
    try:
        context = kairos_tls.client_context(kairos_tls.normalise(tls)) if tls else None
        with urllib.request.urlopen(http, timeout=timeout, context=context) as response:
            answer = json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        exc.close()  # its response holds the connection
        raise JolokiaError(f"{url} {what}: HTTP {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise JolokiaError(f"{url} {what}: {exc}") from None
    if answer.get("status") != 200:
        raise JolokiaError(
            f"{url} {what}: status {answer.get('status')}: {answer.get('error', 'no error given')}"
        )
    return answer.get("value")


def exec_operation(config, mbean, operation, timeout=30.0):
    return call(config, {"type": "exec", "mbean": mbean, "operation": operation}, timeout)


def read_attribute(config, mbean, attribute, timeout=30.0):
    return call(config, {"type": "read", "mbean": mbean, "attribute": attribute}, timeout)


CACHES = "org.apache.cassandra.db:type=Caches"
_MIB = 1048576


def _stage_setting(stage):
    """A thread-pool stage's maximum size: getConcurrency/setConcurrency, as nodetool's
    getconcurrency/setconcurrency call them (the core size left as it is: -1)."""
    return (
        {"type": "exec", "mbean": STORAGE_SERVICE, "operation": "getConcurrency",
         "arguments": [[stage]]},
        lambda value: int(value[stage][1]),
        lambda n: {"type": "exec", "mbean": STORAGE_SERVICE, "operation": "setConcurrency",
                   "arguments": [stage, -1, n]},
    )


def _attribute_setting(mbean, attribute):
    """A read-write attribute (an MBean getter with its setter)."""
    return (
        {"type": "read", "mbean": mbean, "attribute": attribute},
        int,
        lambda n: {"type": "write", "mbean": mbean, "attribute": attribute, "value": n},
    )


def _cache_setting(scope, attribute):
    """A cache's capacity: read from its Capacity metric (bytes, as nodetool info shows it),
    set through CacheService's write-only ``*CapacityInMB`` (one cache, the others kept)."""
    return (
        {"type": "read", "mbean": f"org.apache.cassandra.metrics:type=Cache,scope={scope},"
                                  "name=Capacity", "attribute": "Value"},
        lambda value: round(int(value) / _MIB),
        lambda mib: {"type": "write", "mbean": CACHES, "attribute": attribute, "value": mib},
    )


#: cassandra.yaml key -> (read request, parse(value) -> int in the units of
#: kairos_nodetool.LIVE_SETTERS, set request(int)); the same keys as LIVE_SETTERS, and only
#: what the role's jolokia-access.xml allows.
LIVE_SETTINGS = {
    "concurrent_reads": _stage_setting("ReadStage"),
    "concurrent_writes": _stage_setting("MutationStage"),
    "concurrent_counter_writes": _stage_setting("CounterMutationStage"),
    "concurrent_compactors": _attribute_setting(STORAGE_SERVICE, "ConcurrentCompactors"),
    "compaction_throughput": _attribute_setting(STORAGE_SERVICE, "CompactionThroughputMbPerSec"),
    "row_cache_size": _cache_setting("RowCache", "RowCacheCapacityInMB"),
    "key_cache_size": _cache_setting("KeyCache", "KeyCacheCapacityInMB"),
}


def read_live_settings(config, keys):
    """key -> running value of each of ``keys`` (LIVE_SETTINGS), one call each."""
    values = {}
    for key in keys:
        request, parse, _ = LIVE_SETTINGS[key]
        value = call(config, request)
        try:
            values[key] = parse(value)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise JolokiaError(f"cannot read {key} from {request['mbean']}: {value!r} ({exc})") \
                from None
    return values


def set_live_setting(config, key, value):
    call(config, LIVE_SETTINGS[key][2](value))
