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
    I(hints_directory) (files C(<host id>-*.hints); delivered hints are deleted). The
    directory shows the file a peer is still writing, which its C(pending_hints) table does
    not list (it lists closed files only), so this is the check that hints were delivered.
    Hints still in the peer's memory buffer reach a file only at its next flush
    (C(hints_flush_period)), so run it after M(cassandra_sync_gate) with I(settle_flush).
  - With I(checks) C([hints]) alone and I(host_ids) given, no nodetool runs, and the
    peer's liveness is its storage port (I(peer_port)).
  - Fails fast, without waiting for I(timeout), when a node outside the batch is down for
    I(down_grace) seconds in a row - at once when it is the peer itself (it does not answer),
    else as soon as the peer sees the node UN (another node is DN, not I(node), not in
    I(expected_down)). Waiting on would only delay the rescue, and the message names the
    dead node.
  - Read-only, never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_nodetool]
options:
  nodetool:
    description: The peer's nodetool launcher (the gate runs on the peer).
  node:
    description: Listen address of the restarted node.
    type: str
    required: true
  hints_directory:
    description: The peer's hints_directory; empty skips the hints condition.
    type: path
    default: ""
  host_ids:
    description:
      - Host IDs whose hint files count (the batch's nodes); empty, the node's host ID as
        the peer's nodetool status shows it.
    type: list
    elements: str
    default: []
  peer_port:
    description: The peer's storage port, probed for its liveness when no nodetool runs.
    type: int
    default: 7000
  max_hint_files:
    description: Hint files for the node the peer may still hold.
    type: int
    default: 0
  peer:
    description: Listen address of the peer this runs on (to tell a dead peer from a slow one).
    type: str
    default: ""
  expected_down:
    description:
      - Listen addresses whose being down is expected - the batch being restarted, and the
        nodes the batch's guard already counted as down.
    type: list
    elements: str
    default: []
  down_grace:
    description: Seconds a node outside the batch may look down before the gate fails fast.
    type: float
    default: 5
  checks:
    description:
      - The conditions to wait for; C(up_normal) alone costs one nodetool call per poll
        (after M(cassandra_sync_gate) has seen the rest over CQL).
    type: list
    elements: str
    choices: [up_normal, schema, hints]
    default: [up_normal, schema, hints]
  timeout:
    description: Seconds before failing.
    type: int
    default: 180
  interval:
    description: Seconds between polls.
    type: float
    default: 1
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
down:
  description: Addresses of nodes outside the batch seen down (set when the gate failed fast).
  returned: failure
  type: list
  elements: str
"""

import glob
import os
import time

from ansible.module_utils.kairos_net import not_accepting
from ansible.module_utils.kairos_nodetool import (
    nodetool_module,
    parse_schema_versions,
    parse_status,
    run_nodetool,
)


def check(module, params):
    """One poll: (conditions, details, down) for the node as this peer sees it.

    ``down`` lists the nodes outside the batch this peer sees down now (the peer itself
    when its nodetool does not answer).
    """
    node = params["node"]
    conditions, details = {}, {}
    if params["checks"] == ["hints"] and params["host_ids"]:
        conditions["hints"], details["hints"] = hints_held(params, params["host_ids"])
        silent = params["peer"] and not_accepting([params["peer"]], params["peer_port"])
        return conditions, details, [params["peer"]] if silent else []
    rc, out, err, _ = run_nodetool(module, params["nodetool"], ["status"], check_rc=False)
    nodes = {n["address"]: n for n in parse_status(out)} if rc == 0 else {}
    expected = set(params["expected_down"]) | {node}
    if rc != 0:
        down = [params["peer"]] if params["peer"] and params["peer"] not in expected else []
    else:
        down = sorted(a for a, n in nodes.items() if a not in expected and n["code"][0] == "D")
    seen = nodes.get(node)
    conditions["up_normal"] = bool(seen and seen["code"] == "UN")
    details["up_normal"] = (
        (seen or {}).get("code", "absent") if rc == 0 else (err or out).strip()[-200:]
    )

    if "schema" in params["checks"]:
        rc, out, err, _ = run_nodetool(
            module, params["nodetool"], ["describecluster"], check_rc=False
        )
        versions = parse_schema_versions(out) if rc == 0 else {}
        conditions["schema"] = rc == 0 and len(versions) == 1 and "UNREACHABLE" not in versions
        details["schema"] = versions if rc == 0 else (err or out).strip()[-200:]

    if params["hints_directory"] and "hints" in params["checks"]:
        host_ids = params["host_ids"] or [(seen or {}).get("host_id")]
        if None in host_ids:
            conditions["hints"], details["hints"] = False, "host id unknown"
        else:
            conditions["hints"], details["hints"] = hints_held(params, host_ids)
    return conditions, details, down


def hints_held(params, host_ids):
    """(met, detail) of the hints condition: the peer's hint files for ``host_ids``, the one
    it still writes included, at most max_hint_files."""
    files = [f for h in host_ids
             for f in glob.glob(os.path.join(params["hints_directory"], f"{h}-*.hints"))]
    return len(files) <= params["max_hint_files"], f"{len(files)} hint file(s) for {params['node']}"


def main():
    module = nodetool_module(
        node=dict(type="str", required=True),
        hints_directory=dict(type="path", default=""),
        host_ids=dict(type="list", elements="str", default=[]),
        peer_port=dict(type="int", default=7000),
        max_hint_files=dict(type="int", default=0),
        peer=dict(type="str", default=""),
        expected_down=dict(type="list", elements="str", default=[]),
        down_grace=dict(type="float", default=5),
        checks=dict(type="list", elements="str", choices=["up_normal", "schema", "hints"],
                    default=["up_normal", "schema", "hints"]),
        timeout=dict(type="int", default=180),
        interval=dict(type="float", default=1),
    )
    params = module.params
    began = time.monotonic()
    down_since = {}  # node -> when it was first seen down in this run of polls
    while True:
        conditions, details, down = check(module, params)
        now = time.monotonic()
        down_since = {a: down_since.get(a, now) for a in down}
        elapsed = round(now - began, 1)
        dead = sorted(a for a, since in down_since.items() if now - since >= params["down_grace"])
        # A dead peer cannot tell whether the node is back: fail at once. Another dead node:
        # first let this peer see the node UN (or time out), so the rescue finds it serving.
        if dead and (params["peer"] in dead or conditions["up_normal"]):
            module.fail_json(
                msg=f"{', '.join(dead)} down outside the batch (seen from this peer for "
                f"{params['down_grace']:g}s or more) while waiting for node {params['node']}",
                waited_seconds=elapsed,
                conditions=conditions,
                down=dead,
            )
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
