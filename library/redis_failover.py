#!/usr/bin/python
"""Coordinated failover of a Redis primary to its most caught-up replica."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: redis_failover
short_description: Hand a Redis primary's role to its most caught-up replica, without losing writes
description:
  - When I(node) is a primary, chooses its healthy replica with the highest replication
    offset (or I(target)) and hands over with a coordinated failover - Redis Cluster
    C(CLUSTER FAILOVER) sent to the replica (the primary pauses its clients until the
    replica has every write, then the replica takes over), or C(FAILOVER TO host port)
    sent to the primary of a replication set. Never C(FORCE) or C(TAKEOVER).
  - Then waits until the roles have swapped (the target is primary, I(node) replicates the
    target) and the whole cluster is back in sync (M(redis_sync_gate) conditions). A manual
    failover that Redis aborted (its own 5 s limit) is asked again, up to I(attempts) times.
  - Idempotent - a I(node) that is already a replica is left alone (changed=false).
  - Fails, naming the reason, when the node has no replica in sync, or the roles did not
    swap within I(timeout), or, with I(down_grace), at once when a node is gone.
extends_documentation_fragment: [kairos, kairos.check_diff, kairos_redis.nodes,
                                 kairos_redis.wait, kairos_redis, kairos.tls]
options:
  node:
    description: The primary to demote (inventory name).
    type: str
    required: true
  target:
    description: The replica to promote; default the most caught-up healthy replica.
    type: str
  timeout:
    description: Seconds to wait for the roles to swap and the cluster to be in sync.
  attempts:
    description: How many times to ask for the failover if Redis aborts it.
    type: int
    default: 3
"""

EXAMPLES = r"""
- name: Fail redis1 over to its most caught-up replica before restarting it
  redis_failover:
    nodes: "{{ kairos_redis_nodes }}"
    node: redis1
  register: failover
"""

RETURN = r"""
target:
  description: The replica promoted (or that would be); null when nothing was to do.
  returned: always
  type: str
mode:
  description: C(cluster) (CLUSTER FAILOVER) or C(replication) (FAILOVER TO).
  returned: always
  type: str
attempts:
  description: Failover requests sent.
  returned: always
  type: int
waited_seconds:
  description: Seconds from the first request until the roles swapped and the cluster was in sync.
  returned: always
  type: float
before:
  description: Primary -> replicas before.
  returned: always
  type: dict
after:
  description: Primary -> replicas after.
  returned: always
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_redis import (
    WAIT_ARGS,
    DownWatch,
    Node,
    RedisModuleError,
    choose_failover_target,
    cluster_endpoints,
    credentials,
    describe_gone,
    describe_unmet,
    error_text,
    gate_once,
    read_topology,
    redis_argument_spec,
    split_endpoint,
)

# Redis aborts a manual failover it could not finish in CLUSTER_MF_TIMEOUT (5 s).
_ASK_AGAIN_AFTER = 6.0


def _failover_target(module, topology, node, wanted, result):
    """The replica to promote: ``wanted`` if it is one of ``node``'s, else the most caught up."""
    try:
        target = choose_failover_target(topology, node)
    except RedisModuleError as exc:
        module.fail_json(msg=str(exc), **result)
    if wanted is not None:
        if wanted not in topology["primaries"].get(node, []):
            module.fail_json(msg=f"{wanted} is not a replica of {node}", **result)
        target = wanted
    return target


def _ask_failover(module, mode, endpoints, auth, node, target, result):
    """One failover request (counted in ``result``): CLUSTER FAILOVER on the replica in a
    cluster, FAILOVER TO on the primary otherwise; a refusal fails the module."""
    result["attempts"] += 1
    try:
        if mode == "cluster":
            Node(endpoints[target], *auth).raw("CLUSTER", "FAILOVER")
        else:
            host, port = split_endpoint(endpoints[target])
            Node(endpoints[node], *auth).raw("FAILOVER", "TO", host, str(port), "TIMEOUT",
                                             str(int(module.params["timeout"] * 1000)))
    except Exception as exc:
        module.fail_json(msg=f"failover of {node} to {target} refused: {error_text(exc)}",
                         **result)


def main():
    module = AnsibleModule(
        argument_spec=redis_argument_spec(
            cluster=True,
            node=dict(type="str", required=True),
            target=dict(type="str"),
            attempts=dict(type="int", default=3),
            **WAIT_ARGS,
        ),
        supports_check_mode=True,
    )
    p = module.params
    endpoints = cluster_endpoints(module)
    node = p["node"]
    for name in (node, p["target"]):
        if name is not None and name not in endpoints:
            module.fail_json(msg=f"{name} is not one of nodes ({', '.join(endpoints)})")
    auth = credentials(module)
    topology = read_topology(endpoints, *auth)
    mode = "cluster" if topology["cluster_enabled"] else "replication"
    result = dict(mode=mode, attempts=0, waited_seconds=0.0, before=topology["primaries"],
                  after=topology["primaries"], target=None)
    fact = topology["nodes"][node]
    if not fact.get("up"):
        module.fail_json(msg=f"{node} does not answer ({fact.get('error')}); no failover", **result)
    if fact["role"] == "replica":
        module.exit_json(changed=False, msg=f"{node} is already a replica of {fact['primary']}",
                         **result)
    target = _failover_target(module, topology, node, p["target"], result)
    result["target"] = target
    diff = {"before": {node: "primary", target: "replica"},
            "after": {node: "replica", target: "primary"}}
    if module.check_mode:
        module.exit_json(changed=True, diff=diff, **result)

    began = time.monotonic()
    _ask_failover(module, mode, endpoints, auth, node, target, result)
    asked = began
    watch = DownWatch(p["down_grace"])
    while True:
        after, unmet = gate_once(endpoints, *auth, node=node, role="replica")
        swapped = (after["nodes"][target].get("role") == "primary"
                   and after["nodes"][node].get("primary") == target)
        if swapped and not unmet:
            break
        now = time.monotonic()
        gone = watch.gone(after, now)
        if gone or now - began >= p["timeout"]:
            why = describe_unmet(unmet) if swapped or gone else (
                f"{target} is {after['nodes'][target].get('role')}, {node} is "
                f"{after['nodes'][node].get('role')}")
            stopped = (f"stopped after {now - began:.0f} s, a node down: "
                       f"{'; '.join(describe_gone(gone))};" if gone
                       else f"not complete within {p['timeout']:g} s:")
            module.fail_json(
                msg=f"failover of {node} to {target} {stopped} {why}",
                after=after["primaries"], **{k: v for k, v in result.items() if k != "after"})
        if (mode == "cluster" and not swapped and after["nodes"][target].get("role") == "replica"
                and now - asked >= _ASK_AGAIN_AFTER):
            if result["attempts"] >= p["attempts"]:
                module.fail_json(
                    msg=f"Redis did not complete the failover of {node} to {target} after "
                    f"{result['attempts']} requests; roles are unchanged", **result)
            _ask_failover(module, mode, endpoints, auth, node, target, result)
            asked = now
        time.sleep(p["interval"])
    result.update(after=after["primaries"], waited_seconds=round(time.monotonic() - began, 2))
    module.exit_json(changed=True, diff=diff, **result)


if __name__ == "__main__":
    main()
