#!/usr/bin/python
"""Set a table's compaction strategy with CQL ALTER TABLE (a live, schema-level change)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_table_compaction
short_description: Set the compaction strategy of tables (read, compare, ALTER TABLE, re-read)
description:
  - "Reads each table's compaction class from system_schema.tables and, when it differs,
    runs C(ALTER TABLE ks.t WITH compaction = {'class': ...}), then waits for schema
    agreement and reads the classes again. Run it once per cluster (run_once), not per node."
extends_documentation_fragment: [kairos, kairos.check_diff, kairos_cql]
options:
  tables:
    description: Tables as keyspace.table.
    type: list
    elements: str
    required: true
  strategy:
    description: Compaction class, short name (e.g. LeveledCompactionStrategy) or fully qualified.
    type: str
    required: true
  timeout:
    description: Seconds for the connection, each statement and the schema agreement after it.
    default: 30
"""

EXAMPLES = r"""
- name: Leveled compaction for a read-heavy phase
  cassandra_table_compaction:
    host: 127.0.0.1
    tables: [shop.orders]
    strategy: LeveledCompactionStrategy
  run_once: true
"""

RETURN = r"""
before:
  description: Table -> compaction class before.
  returned: always
  type: dict
after:
  description: Table -> compaction class after.
  returned: always
  type: dict
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import connect_one, cql_argument_spec

NAME = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+$")


def short(cls):
    return str(cls).rsplit(".", 1)[-1]


def read(session, tables):
    out = {}
    for table in tables:
        ks, name = table.split(".")
        row = session.execute(
            "SELECT compaction FROM system_schema.tables WHERE keyspace_name=%s AND table_name=%s",
            (ks, name),
        ).one()
        out[table] = short(row.compaction["class"]) if row else None
    return out


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(
            tables=dict(type="list", elements="str", required=True),
            strategy=dict(type="str", required=True),
            timeout=dict(default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    bad = [t for t in params["tables"] if not NAME.match(t)]
    if bad:
        module.fail_json(msg=f"tables must be keyspace.table: {', '.join(bad)}")
    strategy = short(params["strategy"])
    if not re.match(r"^[A-Za-z]+CompactionStrategy$", strategy):
        module.fail_json(msg=f"strategy: not a compaction strategy class: {params['strategy']!r}")
    cluster, session = connect_one(module, params)
    try:
        before = read(session, params["tables"])
        missing = [t for t, cls in before.items() if cls is None]
        if missing:
            module.fail_json(msg=f"no such table: {', '.join(missing)}")
        todo = [t for t, cls in before.items() if cls != strategy]
        if not todo or module.check_mode:
            after = {**before, **{t: strategy for t in todo}}
            module.exit_json(
                changed=bool(todo),
                before=before,
                after=after,
                diff={"before": before, "after": after},
            )
        for table in todo:
            session.execute(
                f"ALTER TABLE {table} WITH compaction = {{'class': '{strategy}'}}",
                timeout=params["timeout"],
            )
        if not cluster.control_connection.wait_for_schema_agreement(wait_time=params["timeout"]):
            module.fail_json(msg="schema did not agree after ALTER TABLE", before=before)
        after = read(session, params["tables"])
    finally:
        cluster.shutdown()
    module.exit_json(
        changed=True, before=before, after=after, diff={"before": before, "after": after}
    )


if __name__ == "__main__":
    main()
