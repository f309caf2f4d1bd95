#!/usr/bin/python
"""Order the Redis nodes a rollout restarts, from their live roles."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: redis_restart_order
short_description: Decide the order of Redis restarts from the live roles (replicas first)
description:
  - Reads the live topology of I(nodes) and orders I(restart) so that every replica comes
    first (in the given order), then every primary (in the given order), each of which must
    be failed over (M(redis_failover)) to a caught-up replica before its restart.
  - Fails, naming the node, when a host is unknown or does not answer, or a primary has no
    replica in sync that could take over its data.
  - In a replication set (no cluster) the conf files name a fixed primary (C(replicaof)),
    so a restarted old primary would come back as a second, empty primary, so the module
    refuses to restart the primary of a replication set.
  - Read-only, never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_redis.nodes, kairos_redis,
                                 kairos.tls]
options:
  restart:
    description: Inventory names of the nodes to restart (the plan's batches, flattened).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Order the restarts
  redis_restart_order:
    nodes: "{{ kairos_redis_nodes }}"
    restart: [redis1, redis2, redis3, redis4, redis5, redis6]
  register: order
"""

RETURN = r"""
hosts:
  description: The nodes in restart order.
  returned: always
  type: list
  elements: str
order:
  description: Per node, in order, {host, role, primary, failover}.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_redis import (
    RedisModuleError,
    cluster_endpoints,
    credentials,
    read_topology,
    redis_argument_spec,
    restart_order,
)


def main():
    module = AnsibleModule(
        argument_spec=redis_argument_spec(
            cluster=True, restart=dict(type="list", elements="str", required=True)
        ),
        supports_check_mode=True,
    )
    p = module.params
    topology = read_topology(cluster_endpoints(module), *credentials(module))
    try:
        order = restart_order(topology, list(dict.fromkeys(p["restart"])))
    except RedisModuleError as exc:
        module.fail_json(msg=f"cannot order the restarts: {exc}", primaries=topology["primaries"])
    if not topology["cluster_enabled"]:
        primaries = [o["host"] for o in order if o["role"] == "primary"]
        if primaries:
            module.fail_json(
                msg=f"replication set: refusing to restart the primary {', '.join(primaries)} "
                "(its conf file names it primary; after a failover it would restart as a second "
                "primary). Restart it after moving redis_replication_primary.",
                order=order,
            )
    module.exit_json(changed=False, order=order, hosts=[o["host"] for o in order])


if __name__ == "__main__":
    main()
