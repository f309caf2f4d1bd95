#!/usr/bin/python
"""Read-only facts of a Redis Cluster or replication set: roles, offsets, links, slots."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: redis_replication_facts
short_description: Roles, offsets, link status, cluster_state and slot coverage of Redis nodes
description:
  - Reads INFO replication from every node of I(nodes) (and CLUSTER INFO / CLUSTER NODES
    when cluster mode is on) and joins them by inventory name.
  - Reports which nodes did not answer, and the sync-gate conditions that do not hold
    now (I(unmet), same rules as M(redis_sync_gate), one look, no waiting).
  - Read-only, never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_redis.nodes, kairos_redis,
                                 kairos.tls]
"""

EXAMPLES = r"""
- name: Read the live topology
  redis_replication_facts:
    nodes: {redis1: "127.0.0.1:7001", redis2: "127.0.0.1:7002", redis3: "127.0.0.1:7003",
            redis4: "127.0.0.1:7004", redis5: "127.0.0.1:7005", redis6: "127.0.0.1:7006"}
  register: topology
"""

RETURN = r"""
nodes:
  description: >-
    Per node: up, role (primary | replica), primary (inventory name), replicas, offset,
    repl_offset, link, sync_in_progress; in a cluster also cluster_state, slots_ok,
    slots (served by this node), known_nodes, id, failing_seen.
  returned: always
  type: dict
primaries:
  description: Primary -> its replicas (inventory names).
  returned: always
  type: dict
down:
  description: Nodes that did not answer (or are loading).
  returned: always
  type: list
  elements: str
cluster_enabled:
  description: Whether the nodes run Redis Cluster.
  returned: always
  type: bool
cluster_state:
  description: >-
    C(ok) when every answering node says cluster_state:ok, else the first other state;
    C(n/a) without cluster mode.
  returned: always
  type: str
unmet:
  description: Sync-gate conditions that do not hold now (condition -> details); empty when in sync.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_redis import (
    cluster_endpoints,
    credentials,
    gate_once,
    public_topology,
    redis_argument_spec,
)


def main():
    module = AnsibleModule(
        argument_spec=redis_argument_spec(cluster=True),
        supports_check_mode=True,
    )
    topology, unmet = gate_once(cluster_endpoints(module), *credentials(module))
    states = [f.get("cluster_state") for f in topology["nodes"].values() if f.get("up")]
    bad = [s for s in states if s != "ok"]
    result = public_topology(topology)
    module.exit_json(
        changed=False,
        unmet=unmet,
        cluster_state=(bad[0] if bad else "ok") if topology["cluster_enabled"] else "n/a",
        **result,
    )


if __name__ == "__main__":
    main()
