#!/usr/bin/python
"""Set tables' compaction and caching options with CQL ALTER TABLE (a live schema change)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_table_options
short_description: Set the compaction strategy and caching of tables (read, compare, ALTER, re-read)
description:
  - "Reads each table's compaction class and caching from system_schema.tables and, for a
    table where either differs, runs C(ALTER TABLE ks.t WITH compaction = {'class': ...} AND
    caching = {...}), waits for schema agreement and reads the options again. Fails when
    what it reads back is not what was asked. Run it once per cluster (run_once), not per
    node."
  - A table caches rows in the row cache only with C(rows_per_partition) other than
    C(NONE), whatever C(row_cache_size) is; the planner sets I(caching) when the row cache
    turns on or off.
extends_documentation_fragment: [kairos, kairos.check_diff, kairos_cql, kairos.tls]
options:
  tables:
    description: Tables as keyspace.table.
    type: list
    elements: str
    required: true
  compaction:
    description:
      - Compaction class, short name (e.g. LeveledCompactionStrategy) or fully qualified.
      - Empty leaves the compaction as it is.
    type: str
    default: ""
  caching:
    description:
      - "The C(caching) map, e.g. C({keys: ALL, rows_per_partition: ALL}). C(keys) is ALL or
        NONE; C(rows_per_partition) ALL, NONE or a number of rows."
      - Empty leaves the caching as it is. One of I(compaction), I(caching) and
        I(per_table) is required.
    type: dict
    default: {}
  per_table:
    description:
      - "Table (one of I(tables)) -> its own C(compaction) and/or C(caching), in place of
        I(compaction) and I(caching) for that table (a plan step's per_table)."
    type: dict
    default: {}
  timeout:
    description: Seconds for the connection, each statement and the schema agreement after it.
    default: 30
"""

EXAMPLES = r"""
- name: Leveled compaction and cached rows for a read-heavy phase
  cassandra_table_options:
    host: 127.0.0.1
    tables: [shop.orders]
    compaction: LeveledCompactionStrategy
    caching: {keys: ALL, rows_per_partition: ALL}
  run_once: true

- name: A read-heavy table on leveled compaction, the others on size-tiered
  cassandra_table_options:
    host: 127.0.0.1
    tables: [shop.events, shop.profiles]
    compaction: SizeTieredCompactionStrategy
    per_table: {shop.profiles: {compaction: LeveledCompactionStrategy}}
  run_once: true
"""

RETURN = r"""
before:
  description: Table -> {compaction (short class name), caching} before.
  returned: always
  type: dict
after:
  description: Table -> {compaction, caching} read back after the change.
  returned: always
  type: dict
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import connect_one, cql_argument_spec
from ansible.module_utils.kairos_settings import (
    caching_differs,
    read_table_options,
    table_wants,
    wanted_caching,
)

NAME = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")
ROWS = re.compile(r"^(ALL|NONE|[1-9][0-9]*)$")


def short(cls):
    return str(cls).rsplit(".", 1)[-1]


def differs(current, compaction, caching):
    """What of the wanted options ``current`` lacks: {option: wanted value}."""
    out = {}
    if compaction and current["compaction"] != compaction:
        out["compaction"] = compaction
    if caching and caching_differs(current["caching"], caching):
        out["caching"] = caching
    return out


def cql_map(mapping):
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in sorted(mapping.items())) + "}"


def check_compaction(module, value, field):
    """The short class name of ``value``, or fail naming ``field``."""
    compaction = short(value) if value else ""
    if compaction and not re.match(r"^[A-Za-z]+CompactionStrategy$", compaction):
        module.fail_json(msg=f"{field}: not a compaction strategy class: {value!r}")
    return compaction


def check_caching(module, value, field):
    """``value`` as the schema writes it, or fail naming ``field`` and the entry."""
    caching = wanted_caching(value)
    unknown = sorted(set(caching) - {"keys", "rows_per_partition"})
    if unknown:
        module.fail_json(msg=f"{field}: unknown option {unknown[0]!r} "
                             "(keys, rows_per_partition)")
    if caching.get("keys", "ALL") not in ("ALL", "NONE"):
        module.fail_json(msg=f"{field}.keys: expected ALL or NONE, got {caching['keys']!r}")
    if not ROWS.match(caching.get("rows_per_partition", "ALL")):
        module.fail_json(msg=f"{field}.rows_per_partition: expected ALL, NONE or a number of "
                             f"rows, got {caching['rows_per_partition']!r}")
    return caching


def check_arguments(module, params):
    """Table -> (compaction short name, caching with string values) it must end with, or
    fail naming the argument."""
    bad = [t for t in params["tables"] if not NAME.match(t)]
    if bad:
        module.fail_json(msg=f"tables must be keyspace.table: {', '.join(bad)}")
    compaction = check_compaction(module, params["compaction"], "compaction")
    caching = check_caching(module, params["caching"], "caching")
    per_table = params["per_table"] or {}
    for table, own in per_table.items():
        if not isinstance(own, dict):
            module.fail_json(msg=f"per_table.{table}: expected a mapping, got {own!r}")
        check_compaction(module, own.get("compaction"), f"per_table.{table}.compaction")
        check_caching(module, own.get("caching"), f"per_table.{table}.caching")
    try:
        wants = table_wants(params["tables"], compaction, caching, per_table)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not any(c or ca for c, ca in wants.values()):
        module.fail_json(msg="give compaction, caching or both")
    return wants


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(
            tables=dict(type="list", elements="str", required=True),
            compaction=dict(type="str", default=""),
            caching=dict(type="dict", default={}),
            per_table=dict(type="dict", default={}),
            timeout=dict(default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    wants = check_arguments(module, params)
    cluster, session = connect_one(module, params)
    try:
        before = read_table_options(session, params["tables"])
        missing = [t for t, options in before.items() if options is None]
        if missing:
            module.fail_json(msg=f"no such table: {', '.join(missing)}")
        todo = {t: d for t, o in before.items() if (d := differs(o, *wants[t]))}
        if not todo or module.check_mode:
            after = {t: {**o, **todo.get(t, {})} for t, o in before.items()}
            module.exit_json(
                changed=bool(todo), before=before, after=after,
                diff={"before": before, "after": after},
            )
        for table, options in todo.items():
            clauses = []
            if "compaction" in options:
                clauses.append(f"compaction = {{'class': '{options['compaction']}'}}")
            if "caching" in options:
                clauses.append(f"caching = {cql_map(options['caching'])}")
            session.execute(f"ALTER TABLE {table} WITH {' AND '.join(clauses)}",
                            timeout=params["timeout"])
        if not cluster.control_connection.wait_for_schema_agreement(wait_time=params["timeout"]):
            module.fail_json(msg="schema did not agree after ALTER TABLE", before=before)
        after = read_table_options(session, params["tables"])
    finally:
        cluster.shutdown()
    unmet = {t: d for t, o in after.items() if (d := differs(o, *wants[t]))}
    if unmet:
        module.fail_json(
            msg="ALTER TABLE did not take: "
            + "; ".join(f"{t} reads {after[t]}, wanted {d}" for t, d in unmet.items()),
            before=before, after=after,
        )
    module.exit_json(
        changed=True, before=before, after=after, diff={"before": before, "after": after}
    )


if __name__ == "__main__":
    main()
