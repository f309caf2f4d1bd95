"""Read what each node runs, for `kairos drift` (planner/executor/drift.py compares it).

From the control host, as `kairos collect` reads the counters: Cassandra over CQL, one
session per node (virtual tables are per node), with the read-back's readers of
module_utils/kairos_settings.py (``system_views.settings``, the caches' sizes, the tables'
options); Redis with ``CONFIG GET`` through module_utils/kairos_redis.py's ``Node``. A node
that cannot be read is an error of its own, never an agreeing node. The rendered files are
on the nodes: a playbook reads them (``file`` of an observed file, docs/drift.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from planner._module_utils import kairos_redis, kairos_settings
from planner.engines import get_engine
from planner.executor.drift import cassandra_running
from planner.workload import collect


def read_cassandra(
    targets: Sequence[collect.Target], keys: Iterable[str], *, tables: Sequence[str],
    timeout: float,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(node -> {"running": ..., "tables": ...}, node -> error) over CQL (the registry's
    ``drift_reader``, planner.engines)."""
    keys = list(keys)
    observed: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for target in targets:
        cluster = collect._cassandra_cluster([target.address], port=target.port, timeout=timeout)
        try:
            session = cluster.connect()
            rows = {r.name: r.value
                    for r in session.execute("SELECT name, value FROM system_views.settings")}
            caches = (kairos_settings.read_cache_sizes(session)
                      if any(k in kairos_settings.CACHE_ROWS for k in keys) else {})
            observed[target.name] = {
                "running": cassandra_running(keys, rows, caches),
                "tables": kairos_settings.read_table_options(session, list(tables)),
            }
        except Exception as exc:  # the driver raises many types; one node failing is data
            errors[target.name] = f"{type(exc).__name__}: {exc}"
        finally:
            cluster.shutdown()
    return observed, errors


def read_redis(
    targets: Sequence[collect.Target], keys: Iterable[str], *, tables: Sequence[str] = (),
    timeout: float, password: str | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(node -> {"running": directive -> CONFIG GET value}, node -> error) (the registry's
    ``drift_reader``, planner.engines). Redis has no tables (``tables`` is not read); the
    password is :func:`planner.workload.collect.redis_password`'s unless given."""
    keys = [k for k in keys if k not in kairos_redis.SECRET_DIRECTIVES]
    username, login_password = collect.redis_login()
    tls = collect.tls_settings("redis")
    if password is None:
        password = login_password
    observed: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for target in targets:
        node = None
        try:
            node = kairos_redis.Node(f"{target.address}:{target.port}", password or "",
                                     username or "", timeout=timeout, tls=tls)
            observed[target.name] = {"running": node.config_get(keys)}
        except Exception as exc:  # redis-py's errors and OSError: one node failing is data
            errors[target.name] = kairos_redis.error_text(exc)
        finally:
            if node is not None:
                node.close()
    return observed, errors


def read_nodes(
    engine: str, hosts: Sequence[str] | str, keys: Iterable[str], *,
    tables: Sequence[str] = (), timeout: float = 10.0,
) -> tuple[dict[str, dict[str, Any]], dict[str, str], list[str]]:
    """(observed, errors, node names) of ``hosts`` (``[name=]address[:port]``)."""
    spec = get_engine(engine)
    targets = collect.parse_targets(hosts, default_port=spec.default_port)
    names = [t.name for t in targets]
    observed, errors = spec.drift_reader.get()(targets, keys, tables=tables, timeout=timeout)
    return observed, errors, names


def merge_files(observed: dict[str, dict[str, Any]], files: Mapping[str, Any]) -> None:
    """Add each node's rendered-file values (node -> key -> value) as its ``file`` source."""
    for node, values in files.items():
        observed.setdefault(node, {})["file"] = dict(values or {})
