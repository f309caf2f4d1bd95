"""Compare a setting as Kairos wrote it with what a node reports (read-back after a rollout).

cassandra.yaml says ``row_cache_size: 64MiB`` and ``memtable_cleanup_threshold: 0.33``;
``system_views.settings`` answers ``64MiB`` and ``0.33000001`` (a float), booleans as
``true``; a rate (``64MiB/s``) compares as its size. Equal means equal after reading both
as the same kind of value; a mapping (the nested ``memtable`` key) equals one with the same
keys and equal values.

Nested cassandra.yaml keys are shown in dotted rows: ``memtable`` in the row
``memtable.configurations`` (:func:`settings_row`), whose text :func:`running_value` reads
back into the file's shape.
"""

from __future__ import annotations

import json
import re

from ansible.module_utils.kairos_javamap import java_map, memtable_configuration

_SIZE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40}


def _as_number(value):
    """A number (sizes in bytes), or None when ``value`` is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    # a rate compares as its size per second: compaction_throughput 64MiB/s = 65536KiB/s
    match = _SIZE.match(text[:-2] if text.endswith("/s") else text)
    if not match:
        return None
    return float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def _as_bool(value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return {"true": True, "false": False}.get(text)


#: cassandra.yaml keys whose value is a mapping -> the system_views.settings row showing it.
#: Cassandra 5.0 flattens nested options into dotted rows; ``memtable`` has one field.
NESTED_ROWS = {"memtable": "memtable.configurations"}


#: cassandra.yaml cache sizes -> their ``system_views.caches`` row. ``nodetool
#: setcachecapacity`` resizes a cache live and ``system_views.settings`` keeps showing the
#: start-up size (Cassandra 5.0.6), so the size a node runs is the cache's capacity_bytes.
#: planner.model.spaces.CACHE_VIEW_ROWS is the same map for the control host.
CACHE_ROWS = {"key_cache_size": "keys", "row_cache_size": "rows"}


def read_cache_sizes(session):
    """{cassandra.yaml cache size key: the size the node's cache has, e.g. ``30MiB``}."""
    capacities = {row.name: int(row.capacity_bytes or 0) for row in
                  session.execute("SELECT name, capacity_bytes FROM system_views.caches")}
    sizes = {}
    for key, name in CACHE_ROWS.items():
        if name in capacities:
            mib, rest = divmod(capacities[name], 2**20)
            sizes[key] = f"{capacities[name]}B" if rest else f"{mib}MiB"
    return sizes


def settings_row(key):
    """The system_views.settings row that shows cassandra.yaml ``key``."""
    return NESTED_ROWS.get(key, key)


def _configuration(entry):
    """One memtable configuration in cassandra.yaml's shape, without its unset fields."""
    return {k: v for k, v in entry.items()
            if k in ("class_name", "inherits", "parameters") and v not in (None, "", {})}


def memtable_configurations(shown):
    """cassandra.yaml's ``memtable.configurations`` from the row's text, or None.

    Cassandra 5.0.6 prints the map as java.util.HashMap.toString():
    ``{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}`` is
    ``{"default": {"inherits": "trie"}, "skiplist": {"class_name": "SkipListMemtable"},
    "trie": {"class_name": "TrieMemtable"}}``; with
    -Dcassandra.virtual_table_complex_settings_format_json=true, as JSON. Each entry is
    an InheritingClass, ``[<inherits>+][<class_name>][<parameters map>]``, read by
    module_utils/kairos_javamap.py, the parser planner/model/spaces.py reads the same row with.
    """
    text = str(shown).strip()
    try:
        if text.startswith('{"'):
            data = json.loads(text)
            if not isinstance(data, dict):
                return None
            return {name: _configuration(conf or {}) for name, conf in data.items()}
        out = {}
        for name, value in java_map(text).items():
            entry = memtable_configuration(value)
            if entry["parameters"]:
                entry["parameters"] = java_map(entry["parameters"])
            out[name] = _configuration(entry)
        return out
    except (ValueError, AttributeError):
        return None


def running_value(key, shown):
    """cassandra.yaml ``key`` as its row (:func:`settings_row`) shows it, in the file's shape.

    Scalars are returned as shown; ``memtable`` becomes ``{"configurations": {...}}`` (the
    text itself when it cannot be read, so that the read-back names it).
    """
    if key == "memtable" and shown is not None:
        configurations = memtable_configurations(shown)
        return shown if configurations is None else {"configurations": configurations}
    return shown


def same_setting(expected, actual):
    """Whether a node's reported ``actual`` is the ``expected`` value Kairos wrote."""
    if actual is None:
        return expected is None
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and set(expected) == set(actual)
                and all(same_setting(want, actual[key]) for key, want in expected.items()))
    if isinstance(expected, bool) or _as_bool(expected) is not None:
        return _as_bool(expected) == _as_bool(actual)
    want, got = _as_number(expected), _as_number(actual)
    if want is not None and got is not None:
        # float32 on the node: 0.33 reads back as 0.33000001
        return abs(want - got) <= 1e-4 * max(abs(want), 1e-9)
    return str(expected).strip().lower() == str(actual).strip().lower()


def mismatches(expected, actual):
    """``key: expected X, reads Y`` for every key whose read-back differs."""
    return [
        f"{key}: expected {want!r}, reads {actual.get(key)!r}"
        for key, want in sorted(expected.items())
        if not same_setting(want, actual.get(key))
    ]


# ------------------------------------------------------------ tables' options
#: A table's compaction and caching (cassandra_table_options sets them, the read-back checks).
TABLE_OPTIONS = (
    "SELECT compaction, caching FROM system_schema.tables "
    "WHERE keyspace_name=%s AND table_name=%s"
)


def read_table_options(session, tables):
    """``keyspace.table`` -> {"compaction": short class name, "caching": map}; None for a
    table that does not exist."""
    out = {}
    for table in tables:
        keyspace, name = table.split(".", 1)
        row = session.execute(TABLE_OPTIONS, (keyspace, name)).one()
        out[table] = {"compaction": str(row.compaction["class"]).rsplit(".", 1)[-1],
                      "caching": dict(row.caching)} if row else None
    return out


def wanted_caching(caching):
    """A ``caching`` argument as the schema writes it: string keys, upper-case values."""
    return {str(k): str(v).upper() for k, v in (caching or {}).items()}


def table_wants(tables, compaction, caching, per_table):
    """``keyspace.table`` -> (compaction short name, caching map) that table must have: its
    ``per_table`` entry's options where it has them, else ``compaction`` and ``caching``.

    Raises ValueError naming the entry when ``per_table`` names a table outside ``tables``
    or an option other than compaction and caching.
    """
    per_table = per_table or {}
    outside = sorted(set(per_table) - set(tables))
    if outside:
        raise ValueError(f"per_table: {outside[0]} is not one of tables")
    out = {}
    for table in tables:
        own = per_table.get(table) or {}
        unknown = sorted(set(own) - {"compaction", "caching"})
        if unknown:
            raise ValueError(f"per_table.{table}: unknown option {unknown[0]!r} "
                             "(compaction, caching)")
        cls = own.get("compaction") or compaction or ""
        out[table] = (str(cls).rsplit(".", 1)[-1], wanted_caching(own.get("caching") or caching))
    return out


def caching_differs(current, wanted):
    """Whether a table's ``current`` caching map lacks any entry of ``wanted``."""
    return any(str(current.get(k)) != v for k, v in wanted.items())
