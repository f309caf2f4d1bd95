#!/usr/bin/python
"""The sync gate between batches, checked from one peer: is the node back and caught up?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_node_gate
short_description: Wait until a restarted node is UN, schemas agree and its hints are delivered
description:
  - Runs on a peer of the restarted node (delegate to every peer to prove that every
    peer sees it). Polls until all of these hold, or fails when I(timeout) passes naming
    the node and every unmet condition.
  - C(up_normal) the peer's C(nodetool status) shows the node UN.
  - C(schema) the peer's C(nodetool describecluster) lists one schema version and no
    unreachable node.
  - C(hints) the peer holds at most I(max_hint_files) hint files for the node in
    I(hints_directory) (files C(<host id>-*.hints); delivered hints are deleted).
  - Read-only: never reports changed.
options:
  nodetool:
    description: The peer's nodetool launcher.
    type: path
    required: true
  node:
    description: Listen address of the restarted node.
    type: str
    required: true
  hints_directory:
    description: The peer's hints_directory; empty skips the hints condition.
    type: path
    default: ""
  max_hint_files:
    description: Hint files for the node the peer may still hold.
    type: int
    default: 0
  timeout:
    description: Seconds before failing.
    type: int
    default: 180
  interval:
    description: Seconds between polls.
    type: float
    default: 1
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author: Kairos
"""

EXAMPLES = r"""
- name: Every peer sees cass2 back and has delivered its hints
  cassandra_node_gate:
    nodetool: "{{ hostvars[item].cassandra_base_dir }}/bin/nodetool"
    node: 127.0.0.2
    hints_directory: "{{ hostvars[item].cassandra_hints_directory }}"
  delegate_to: "{{ item }}"
  loop: "{{ groups['cassandra'] | difference([inventory_hostname]) }}"
"""

RETURN = r"""
waited_seconds:
  description: Seconds until every condition held.
  returned: always
  type: float
conditions:
  description: The last state of each condition (true when met).
  returned: always
  type: dict
"""

import glob
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_nodetool import parse_schema_versions, parse_status, run_nodetool


def check(module, params):
    """One poll: (conditions, details) for the node as this peer sees it."""
    node = params["node"]
    conditions, details = {}, {}
    rc, out, err, _ = run_nodetool(module, params["nodetool"], ["status"], check_rc=False)
    nodes = {n["address"]: n for n in parse_status(out)} if rc == 0 else {}
    seen = nodes.get(node)
    conditions["up_normal"] = bool(seen and seen["code"] == "UN")
    details["up_normal"] = (
        (seen or {}).get("code", "absent") if rc == 0 else (err or out).strip()[-200:]
    )

    rc, out, err, _ = run_nodetool(module, params["nodetool"], ["describecluster"], check_rc=False)
    versions = parse_schema_versions(out) if rc == 0 else {}
    conditions["schema"] = rc == 0 and len(versions) == 1 and "UNREACHABLE" not in versions
    details["schema"] = versions if rc == 0 else (err or out).strip()[-200:]

    if params["hints_directory"]:
        host_id = (seen or {}).get("host_id")
        files = (
            glob.glob(os.path.join(params["hints_directory"], f"{host_id}-*.hints"))
            if host_id
            else []
        )
        conditions["hints"] = host_id is not None and len(files) <= params["max_hint_files"]
        details["hints"] = f"{len(files)} hint file(s) for {node}" if host_id else "host id unknown"
    return conditions, details


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodetool=dict(type="path", required=True),
            node=dict(type="str", required=True),
            hints_directory=dict(type="path", default=""),
            max_hint_files=dict(type="int", default=0),
            timeout=dict(type="int", default=180),
            interval=dict(type="float", default=1),
        ),
        supports_check_mode=True,
    )
    params = module.params
    began = time.monotonic()
    while True:
        conditions, details = check(module, params)
        elapsed = round(time.monotonic() - began, 1)
        if all(conditions.values()):
            module.exit_json(changed=False, waited_seconds=elapsed, conditions=conditions)
        if elapsed >= params["timeout"]:
            unmet = "; ".join(f"{k}: {details[k]}" for k, ok in conditions.items() if not ok)
            module.fail_json(
                msg=f"node {params['node']} not caught up after {elapsed}s "
                f"(seen from this peer): {unmet}",
                waited_seconds=elapsed,
                conditions=conditions,
            )
        time.sleep(params["interval"])


if __name__ == "__main__":
    main()
