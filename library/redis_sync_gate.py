#!/usr/bin/python
"""The sync gate between Redis restarts: links up, offsets caught up, every slot served."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: redis_sync_gate
short_description: Wait until Redis replicas are linked and caught up and every slot is served
description:
  - Polls every node of I(nodes) until all of these hold, or fails when I(timeout) passes,
    naming every unmet condition and the node it concerns.
  - C(reachable) every node answers and has loaded its dataset.
  - C(link_up) every replica's master_link_status is up and no sync is in progress.
  - C(caught_up) every replica reached (within I(max_lag) bytes) the replication offset its
    primary had just before the replica was read.
  - C(role) I(node), if given, has I(role).
  - Cluster only - C(cluster_state) is ok on every node; C(slots) every node sees all
    16384 slots assigned and ok; C(agreement) every node knows every node, flags none as
    failing, and agrees with each node about its role and primary.
  - With I(down_grace), fails without waiting for I(timeout) when a node other than
    I(node) is gone - C(down) names it.
  - Read-only, never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_redis.nodes,
                                 kairos_redis.wait, kairos_redis, kairos.tls]
options:
  node:
    description: The node just restarted or failed over (used in messages and with I(role)).
    type: str
  role:
    description: The role I(node) must have.
    type: str
    choices: [primary, replica]
  max_lag:
    description: Bytes of replication offset a replica may be behind.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Wait until redis4 is back in sync and the cluster is ok
  redis_sync_gate:
    nodes: "{{ kairos_redis_nodes }}"
    node: redis4
    role: replica
    timeout: 120
"""

RETURN = r"""
waited_seconds:
  description: Seconds until every condition held (or until the timeout).
  returned: always
  type: float
unmet:
  description: The conditions still unmet at the last poll (empty on success).
  returned: always
  type: dict
primaries:
  description: Primary -> replicas at the last poll.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_redis import (
    WAIT_ARGS,
    cluster_endpoints,
    credentials,
    describe_unmet,
    redis_argument_spec,
    wait_in_sync,
)


def main():
    module = AnsibleModule(
        argument_spec=redis_argument_spec(
            cluster=True,
            node=dict(type="str"),
            role=dict(type="str", choices=["primary", "replica"]),
            max_lag=dict(type="int", default=0),
            **WAIT_ARGS,
        ),
        supports_check_mode=True,
    )
    p = module.params
    endpoints = cluster_endpoints(module)
    if p["node"] is not None and p["node"] not in endpoints:
        module.fail_json(msg=f"node {p['node']} is not one of nodes ({', '.join(endpoints)})")
    topology, unmet, waited = wait_in_sync(
        endpoints,
        *credentials(module),
        p["timeout"],
        p["interval"],
        down_grace=p["down_grace"],
        node=p["node"],
        role=p["role"],
        max_lag=p["max_lag"],
    )
    result = dict(changed=False, waited_seconds=waited, unmet=unmet,
                  primaries=topology["primaries"])
    if unmet:
        about = f" after {p['node']}" if p["node"] else ""
        why = (f" after {waited:g} s, a node down" if "down" in unmet
               else f" within {p['timeout']:g} s")
        module.fail_json(msg=f"not in sync{about}{why}: {describe_unmet(unmet)}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
