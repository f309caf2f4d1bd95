#!/usr/bin/python
"""Run one read-only CQL statement against one Cassandra node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_cql_query
short_description: Run a read-only CQL statement on one node and return its rows
description:
  - Connects with cassandra-driver to exactly one node (a white-list load-balancing
    policy, so the answer is that node's), runs I(query) and returns the rows.
  - Only SELECT statements are accepted; the module never changes anything.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_cql, kairos.tls]
options:
  query:
    description: A SELECT statement.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Ask the node its version
  cassandra_cql_query:
    host: 127.0.0.1
    query: SELECT release_version FROM system.local
"""

RETURN = r"""
rows:
  description: The rows, as dicts of column name to value (non-JSON values as strings).
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import connect_one, cql_argument_spec, jsonable


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(query=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    params = module.params
    if not params["query"].lstrip().lower().startswith("select"):
        module.fail_json(msg="cassandra_cql_query runs SELECT statements only")
    cluster, session = connect_one(module, params)
    try:
        rows = [
            {key: jsonable(value) for key, value in row._asdict().items()}
            for row in session.execute(params["query"], timeout=params["timeout"])
        ]
    except Exception as exc:
        module.fail_json(msg=f"{params['host']}: query failed: {exc}")
    finally:
        cluster.shutdown()
    module.exit_json(changed=False, rows=rows)


if __name__ == "__main__":
    main()
