#!/usr/bin/python
"""Read back what a node runs after a rollout: a step is recorded applied only after this."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_settings_readback
short_description: Read a node's running settings, files, heap and tables back and compare
description:
  - Runs on the node. Reads every setting in I(settings) from the node's running
    configuration (CQL C(system_views.settings) of this node only, which also shows values
    changed live with nodetool, except the caches' sizes, which come from
    C(system_views.caches)) and from its I(config_file) (cassandra.yaml), the JVM's
    maximum heap from C(nodetool info) when I(heap) is given, and the compaction class and
    caching of each of I(tables) from C(system_schema.tables).
  - A nested key is read from its dotted row and compared as a mapping - C(memtable) from
    C(memtable.configurations), e.g. C({default=trie+, skiplist=SkipListMemtable,
    trie=TrieMemtable}).
  - Fails, naming every key, source and value, when anything read back differs from what
    was expected. Read-only - never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_cql, kairos.tls]
options:
  host:
    description: The node's CQL address (queries go to this node only).
  settings:
    description: cassandra.yaml keys and the values the node must run and its file must hold.
    type: dict
    default: {}
  file_settings:
    description:
      - More cassandra.yaml keys and values its file must hold, not compared with the running
        values (a live-only step rewrites the whole file but changes only its live keys).
    type: dict
    default: {}
  config_file:
    description: The node's cassandra.yaml; empty skips the file comparison.
    type: path
    default: ""
  heap:
    description: The maximum heap the JVM must run with (e.g. C(1G), C(512M)); empty skips it.
    type: str
    default: ""
  nodetool:
    description: The node's nodetool launcher (needed with I(heap), unless Jolokia answers).
    type: path
    default: ""
  jolokia_config:
    description:
      - The node's Jolokia agent properties (as cassandra_drain takes them); with the agent
        listening, the heap is read over HTTP (java.lang Memory) instead of nodetool info.
    type: path
    default: ""
  tables:
    description: Tables (C(keyspace.table)) whose compaction and caching are read back.
    type: list
    elements: str
    default: []
  compaction:
    description: The compaction class the I(tables) must have (short or full name); empty
      does not compare it.
    type: str
    default: ""
  caching:
    description: "The C(caching) entries the I(tables) must have (e.g. C({rows_per_partition:
      ALL})); empty does not compare it."
    type: dict
    default: {}
  per_table:
    description:
      - "Table (one of I(tables)) -> its own C(compaction) and/or C(caching), compared in place
        of I(compaction) and I(caching) for that table (a plan step's per_table)."
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Read back what the node runs
  cassandra_settings_readback:
    host: 127.0.0.1
    settings: {memtable_flush_writers: 4, concurrent_reads: 64}
    config_file: /etc/cassandra/cassandra.yaml
    username: kairos
    password: "{{ cassandra_cql_password }}"
"""

RETURN = r"""
readback:
  description: What was read, by source (running, file, heap_mb, tables).
  returned: always
  type: dict
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import connect_one, cql_argument_spec
from ansible.module_utils.kairos_jolokia import JolokiaError, listening_agent, read_attribute
from ansible.module_utils.kairos_nodetool import run_nodetool
from ansible.module_utils.kairos_settings import (
    CACHE_ROWS,
    caching_differs,
    mismatches,
    read_cache_sizes,
    read_table_options,
    running_value,
    same_setting,
    settings_row,
    table_wants,
)

_HEAP = re.compile(r"^Heap Memory \(MB\)\s*:\s*[\d.]+\s*/\s*([\d.]+)", re.M)
_JVM_SIZE = re.compile(r"^\s*(\d+)\s*([KMG])?\s*$", re.I)


def heap_mb(text):
    """``-Xmx``-style size (``1G``, ``512M``) in MiB."""
    match = _JVM_SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a JVM size: {text!r}")
    factor = {"k": 1 / 1024, "m": 1, "g": 1024, "": 1 / 1048576}[(match.group(2) or "").lower()]
    return int(match.group(1)) * factor


def read_cql(module, params):
    """(running settings of this node, table -> {compaction class, caching})."""
    cluster, session = connect_one(module, params, metadata=False)
    try:
        rows = {row.name: row.value
                for row in session.execute("SELECT name, value FROM system_views.settings")}
        running = {key: running_value(key, rows[settings_row(key)])
                   for key in params["settings"] if settings_row(key) in rows}
        if any(key in CACHE_ROWS for key in params["settings"]):
            sizes = read_cache_sizes(session)
            running.update({k: sizes[k] for k in params["settings"] if k in sizes})
        tables = read_table_options(session, params["tables"])
    except Exception as exc:
        module.fail_json(msg=f"{params['host']}: cannot read the settings back: {exc}")
    finally:
        cluster.shutdown()
    return running, tables


def table_problems(params, tables, readback):
    """Compare the tables' compaction and caching with what was asked; publish what was read.

    ``readback["tables"]``: table -> what was compared, e.g. ``LeveledCompactionStrategy;
    caching keys=ALL, rows_per_partition=ALL``.
    """
    wants = table_wants(list(tables), params["compaction"], params["caching"],
                        params["per_table"])
    problems, shown = [], {}
    for table, options in sorted(tables.items()):
        want, caching = wants[table]
        if options is None:
            shown[table] = None
            problems.append(f"table {table}: not found")
            continue
        parts = []
        if want:
            parts.append(options["compaction"])
            if not same_setting(want, options["compaction"]):
                problems.append(f"table {table}: expected compaction {want}, "
                                f"reads {options['compaction']}")
        if caching:
            now = options["caching"]
            parts.append("caching " + ", ".join(f"{k}={v}" for k, v in sorted(now.items())))
            if caching_differs(now, caching):
                problems.append(f"table {table}: expected caching {caching}, reads {now}")
        shown[table] = "; ".join(parts)
    if tables:
        readback["tables"] = shown
    return problems


def read_file(module, path, keys):
    try:
        import yaml
    except ImportError:
        module.fail_json(msg="PyYAML is required on the node to read cassandra.yaml back")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError) as exc:
        module.fail_json(msg=f"cannot read {path}: {exc}")
    return {k: data.get(k) for k in keys}


def max_heap_mb(module, params):
    """The JVM's maximum heap in MiB, as nodetool info prints it (the heap's MemoryUsage
    max): through the node's Jolokia agent when it listens, else nodetool (a JVM start)."""
    config = listening_agent(module, params["jolokia_config"])
    if config is not None:
        try:
            usage = read_attribute(config, "java.lang:type=Memory", "HeapMemoryUsage")
        except JolokiaError as exc:
            module.fail_json(msg=f"heap: {exc}")
        return round(usage["max"] / 1048576, 2)
    _, out, _, _ = run_nodetool(module, params["nodetool"], ["info"])
    match = _HEAP.search(out)
    return float(match.group(1)) if match else None


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(
            settings=dict(type="dict", default={}),
            file_settings=dict(type="dict", default={}),
            config_file=dict(type="path", default=""),
            heap=dict(type="str", default=""),
            nodetool=dict(type="path", default=""),
            jolokia_config=dict(type="path", default=""),
            tables=dict(type="list", elements="str", default=[]),
            compaction=dict(type="str", default=""),
            caching=dict(type="dict", default={}),
            per_table=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        table_wants(params["tables"], "", {}, params["per_table"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    expected = params["settings"]
    readback, problems = {}, []
    if expected or params["tables"]:
        running, tables = read_cql(module, params)
        readback["running"] = running
        problems += [f"running {p}" for p in mismatches(expected, running)]
        problems += table_problems(params, tables, readback)
    in_file = {**params["file_settings"], **expected}
    if params["config_file"] and in_file:
        readback["file"] = read_file(module, params["config_file"], in_file)
        problems += [f"{params['config_file']} {p}" for p in mismatches(in_file, readback["file"])]
    if params["heap"]:
        readback["heap_mb"] = runs = max_heap_mb(module, params)
        want_mb = heap_mb(params["heap"])
        if runs is None or abs(runs - want_mb) > 0.01 * want_mb:
            problems.append(f"heap: expected {params['heap']}, the JVM runs {runs} MB")
    if problems:
        module.fail_json(
            msg=f"{params['host']} does not run what was applied: " + "; ".join(problems),
            readback=readback,
        )
    module.exit_json(changed=False, readback=readback)


if __name__ == "__main__":
    main()
