"""Drift: what each node runs against what Kairos recorded applied (issue 40, part 4).

The expected values are the configuration composed up to the last step recorded applied in
``<plan>.state.json`` (:func:`planner.executor.rollout.applied_composition`), rendered the way the
templates and live commands write them (:func:`planner.model.spaces.render_settings`). The
observed values are what a node reports, per source:

``running``
    Cassandra: its ``system_views.settings`` rows (which show values changed live with
    nodetool: compaction throughput, concurrent compactors, the stages' threads), the
    caches' sizes from ``system_views.caches``; Redis: ``CONFIG GET``.
``file``
    The rendered cassandra.yaml / redis.conf on the node, when a reader supplied it.
``tables``
    Cassandra: each table's compaction class (``system_schema.tables``).

Values compare the way the rollout's read-back compares them, with the same code:
module_utils/kairos_settings.py for Cassandra (``64MiB/s`` equals ``64MiB/s``, ``0.33``
equals ``0.33333334``, ``false`` equals False) and module_utils/kairos_redis.py for Redis
(``64mb`` equals ``67108864``, yes/no). Everything here is pure; reading the nodes is
:mod:`planner.executor.drift_read`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from planner._module_utils import kairos_redis, kairos_settings
from planner.engines import get_engine
from planner.errors import ValidationError
from planner.executor.rollout import applied_composition, applied_index
from planner.model.spaces import render_settings
from planner.plan import Plan

#: The sources a node's value is read from (the order of the report).
SOURCES = ("running", "file", "table")
DRIFT_REPORT_VERSION = 1


@dataclass(frozen=True)
class Expected:
    """Per node, the values Kairos applied, as the engine writes them.

    ``settings``: cassandra.yaml key or redis.conf directive -> value (``memtable`` as its
    mapping); ``tables``: Cassandra table option -> value (``compaction``: the class);
    ``table_overrides``: ``keyspace.table`` -> the options that differ for that table (the
    last applied step's ``per_table``).
    """

    engine: str
    applied_through: str | None
    settings: Mapping[str, Mapping[str, Any]]
    tables: Mapping[str, Any]
    table_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    """One compared value: a node's parameter read from one source."""

    node: str
    parameter: str
    source: str  # running | file | table <keyspace.table>
    expected: Any
    observed: Any
    drifted: bool


def expected_values(plan: Plan, state: Mapping[str, Any], hosts: Iterable[str]) -> Expected:
    """The values each of ``hosts`` must run after the steps recorded applied (the plan's
    current_config when none is)."""
    hosts = list(hosts)
    composed = applied_composition(plan, state, hosts=hosts)
    index = applied_index(plan, state)
    settings: dict[str, dict[str, Any]] = {}
    tables: dict[str, Any] = {}
    for host in hosts:
        rendered = render_settings(plan.engine, composed.nodes[host])
        settings[host] = dict(rendered.get("cassandra.yaml", rendered.get("redis.conf", {})))
        tables.update(_table_options(plan.engine, composed.nodes[host]))
    overrides = {
        table: _table_options(plan.engine, {**composed.cluster, **own})
        for table, own in composed.tables.items()
    }
    return Expected(
        engine=plan.engine,
        applied_through=plan.steps[index].id if index >= 0 else None,
        settings=settings,
        tables=tables,
        table_overrides={t: o for t, o in overrides.items() if o != tables},
    )


def _table_options(engine: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The table options of ``config`` as the schema shows them (``compaction``: the class)."""
    table = render_settings(engine, config).get("table", {})
    return {"compaction": table["compaction"]["class"]} if "compaction" in table else {}


def rendered_keys(plan: Plan, state: Mapping[str, Any]) -> list[str]:
    """The cassandra.yaml keys / redis.conf directives the applied configuration writes
    (``memtable`` for memtable_implementation; no table option, no JVM flag)."""
    rendered = render_settings(plan.engine, applied_composition(plan, state).cluster)
    return sorted(rendered.get(get_engine(plan.engine).config_file, {}))


def same(engine: str, expected: Any, observed: Any) -> bool:
    """Whether ``observed`` is ``expected`` by the engine's read-back comparison (the
    registry's ``same_setting``, planner.engines)."""
    return bool(get_engine(engine).same_setting.get()(expected, observed))


def same_cassandra(expected: Any, observed: Any) -> bool:
    """:func:`same` for Cassandra: module_utils/kairos_settings.py's comparison."""
    return bool(kairos_settings.same_setting(expected, observed))


def same_redis(expected: Any, observed: Any) -> bool:
    """:func:`same` for Redis: module_utils/kairos_redis.py's comparison; a directive not
    read is not the value."""
    return observed is not None and bool(kairos_redis.same_value(expected, observed))


def compare(expected: Expected, observed: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Every expected value against what each node reported, per source.

    ``observed``: node -> ``{"running": {key: value}, "file": {key: value}, "tables":
    {keyspace.table: {"compaction": class, ...} or None}}``; a source left out was not read
    and is not compared, a key missing from a source that was read is drift (``None``).
    A node of ``expected`` missing from ``observed`` is reported as not read (every value
    ``None``), so a node that cannot be read is never taken for one that agrees.
    """
    findings: list[Finding] = []
    for node in sorted(expected.settings):
        seen = observed.get(node, {"running": {}})
        for source in ("running", "file"):
            values = seen.get(source)
            if values is None:
                continue
            for key, want in sorted(expected.settings[node].items()):
                got = values.get(key)
                findings.append(Finding(node, key, source, want, got,
                                        not same(expected.engine, want, got)))
        for table, options in sorted((seen.get("tables") or {}).items()):
            wanted = {**expected.tables, **expected.table_overrides.get(table, {})}
            for key, want in sorted(wanted.items()):
                got = None if options is None else options.get(key)
                findings.append(Finding(node, key, f"table {table}", want, got,
                                        not same(expected.engine, want, got)))
    return findings


def drifted(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.drifted]


# ------------------------------------------------------------------ what nodes report
def cassandra_running(
    keys: Iterable[str], settings_rows: Mapping[str, Any], cache_sizes: Mapping[str, str]
) -> dict[str, Any]:
    """cassandra.yaml keys as a node runs them, from its ``system_views.settings`` rows
    (name -> value) and its caches' sizes (:func:`kairos_settings.read_cache_sizes`).

    The rows are read with the read-back's code (the dotted row of a nested key, the memtable
    map read into the file's shape); a key with no row is left out (drift: not running).
    """
    out: dict[str, Any] = {}
    for key in keys:
        if key in kairos_settings.CACHE_ROWS and key in cache_sizes:
            out[key] = cache_sizes[key]
            continue
        row = kairos_settings.settings_row(key)
        if row in settings_rows:
            out[key] = kairos_settings.running_value(key, settings_rows[row])
    return out


def redis_running(replies: Mapping[str, Any]) -> dict[str, Any]:
    """Directive -> value from CONFIG GET replies (directive -> the raw reply: a flat
    ``[name, value]`` list, or a RESP3 map), read as :meth:`kairos_redis.Node.config_get`
    reads them; a directive the server does not know is None."""
    return {key: kairos_redis.config_get_value(key, reply) for key, reply in replies.items()}


# ---------------------------------------------------------------------- the report
def report(
    expected: Expected, findings: Sequence[Finding], *, cluster: str, now: str,
    errors: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The drift report (JSON): what `kairos drift --json` prints and `--report` writes,
    and what `kairos metrics` exports (docs/drift.md)."""
    bad = drifted(findings)
    nodes = sorted(expected.settings)
    return {
        "version": DRIFT_REPORT_VERSION,
        "cluster": cluster,
        "engine": expected.engine,
        "checked_at": now,
        "applied_through": expected.applied_through,
        "nodes": {n: {"compared": sum(f.node == n for f in findings),
                      "drifted": sum(f.node == n for f in bad),
                      "error": (errors or {}).get(n)} for n in nodes},
        "drift": [asdict(f) for f in bad],
    }


def _cell(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return "-" if value is None else str(value)


def render_table(findings: Sequence[Finding], *, all_rows: bool = False) -> str:
    """A plain-text table, one line per drifted value (every value with ``all_rows``)."""
    rows = [f for f in findings if all_rows or f.drifted]
    header = ("node", "parameter", "source", "expected", "running", "")
    cells = [header] + [(f.node, f.parameter, f.source, _cell(f.expected), _cell(f.observed),
                         "DRIFT" if f.drifted else "ok") for f in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


def load_observed(doc: Any, what: str) -> dict[str, dict[str, Any]]:
    """An observed-values file (node -> {running, file, tables}) checked at the boundary."""
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
        raise ValidationError(f"{what}: expected {{'nodes': {{NODE: {{'running': {{...}}}}}}}}")
    return {str(k): dict(v) for k, v in nodes.items()}
