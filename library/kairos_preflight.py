#!/usr/bin/python
"""Judge a rollout's pre-flight from what the engine's role read: the refusals, each named."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_preflight
short_description: Judge a rollout's pre-flight from the reads the engine's role registered
description:
  - Takes what an engine's C(rollout_preflight) read (the results it registered, skipped
    or not) and returns why the rollout must not go on, as refusals each named
    (module_utils/kairos_preflight.py, which the unit tests call directly). Empty means go on.
  - Judges a read on the module's own keys, never on C(failed), which C(failed_when) false
    keeps false on a read whose module failed.
  - Cassandra's reads - C(ring) (M(cassandra_cluster_facts)), C(batches) (C(kairos rollout
    preflight) through M(kairos_command)), C(hints) (M(cassandra_sync_gate)), C(hint_files)
    (M(cassandra_node_gate)), C(view) (M(cassandra_ring_status)) - give the refusals
    C(ring_unreadable), C(unsafe_batch), C(down), C(hints), C(hint_file), C(schema), C(view).
  - Redis's reads - C(topology) (M(redis_replication_facts)), C(config) (M(redis_live_config)
    in check mode), C(order) (M(redis_restart_order)) - give C(down), C(not_in_sync),
    C(drift), C(config), C(order).
  - Fails when I(reads) are not exactly the engine's (a read a role renamed would otherwise
    go unjudged). Touches nothing, never reports changed; meant for the control host.
extends_documentation_fragment: [kairos, kairos.read_only]
options:
  engine:
    description: The engine whose pre-flight this is.
    type: str
    choices: [cassandra, redis]
    required: true
  host:
    description: The inventory name of the node whose reads these are (named in its refusals).
    type: str
    required: true
  reads:
    description: Read name -> the result its task registered (a skipped read included).
    type: dict
    required: true
  cluster_size:
    description: Cassandra - the number of nodes each node must see UN.
    type: int
"""

EXAMPLES = r"""
- name: Judge the pre-flight from what was read
  kairos_preflight:
    engine: redis
    host: "{{ inventory_hostname }}"
    reads:
      topology: "{{ __redis_preflight_facts }}"
      config: "{{ __redis_preflight_config }}"
      order: "{{ __redis_preflight_order }}"
  delegate_to: localhost
  register: __redis_preflight_judged
"""

RETURN = r"""
refusals:
  description: Why not to go on, in reading order, each {name, message}; empty to go on.
  returned: always
  type: list
  elements: dict
  sample: [{name: down, message: "down: cass3"}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_preflight import PreflightError, judge


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine=dict(type="str", choices=["cassandra", "redis"], required=True),
            host=dict(type="str", required=True),
            reads=dict(type="dict", required=True),
            cluster_size=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        refusals = judge(p["engine"], p["reads"], host=p["host"], cluster_size=p["cluster_size"])
    except PreflightError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, refusals=refusals)


if __name__ == "__main__":
    main()
