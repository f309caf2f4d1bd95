#!/usr/bin/python
"""Read (and optionally wait for) the ring as one Cassandra node sees it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_ring_status
short_description: The ring as one node sees it, optionally waiting until nodes are UN
description:
  - Runs C(nodetool status) on the node and returns every node's status and state.
  - With I(expect_up_normal) and I(timeout) > 0 it polls until every listed address is
    UN (up, normal) in this node's view, and fails naming the addresses that are not and
    what they are, when the timeout passes. Read-only, never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_nodetool]
options:
  expect_up_normal:
    description: Addresses that must be UN.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for I(expect_up_normal); 0 reads once and does not fail on it.
    type: int
    default: 0
  interval:
    description: Seconds between polls.
    type: float
    default: 2
"""

EXAMPLES = r"""
- name: Wait until this node sees all three lab nodes UN
  cassandra_ring_status:
    nodetool: /srv/lab/cass1/bin/nodetool
    expect_up_normal: [127.0.0.1, 127.0.0.2, 127.0.0.3]
    timeout: 120
"""

RETURN = r"""
nodes:
  description: Every node in this node's view.
  returned: always
  type: list
  elements: dict
  sample: [{address: 127.0.0.1, code: UN, status: U, state: N, dc: datacenter1, rack: rack1,
            tokens: 1, owns: "66.7%", load: "114 KiB", host_id: "f71e..."}]
up_normal:
  description: Addresses that are UN.
  returned: always
  type: list
  elements: str
waited_seconds:
  description: Seconds spent polling.
  returned: always
  type: float
"""

import time

from ansible.module_utils.kairos_nodetool import nodetool_module, parse_status, run_nodetool


def main():
    module = nodetool_module(
        expect_up_normal=dict(type="list", elements="str", default=[]),
        timeout=dict(type="int", default=0),
        interval=dict(type="float", default=2),
    )
    params = module.params
    expected = params["expect_up_normal"]
    began = time.monotonic()
    last_error = ""
    while True:
        rc, out, err, _ = run_nodetool(module, params["nodetool"], ["status"], check_rc=False)
        nodes = parse_status(out) if rc == 0 else []
        last_error = "" if rc == 0 else (err or out).strip()[-300:]
        up_normal = [n["address"] for n in nodes if n["code"] == "UN"]
        missing = [a for a in expected if a not in up_normal]
        elapsed = round(time.monotonic() - began, 1)
        if not missing or (params["timeout"] <= 0 and rc == 0):
            module.exit_json(
                changed=False, nodes=nodes, up_normal=up_normal, waited_seconds=elapsed
            )
        if elapsed >= params["timeout"]:
            seen = {n["address"]: n["code"] for n in nodes}
            detail = ", ".join(f"{a} is {seen.get(a, 'absent')}" for a in missing)
            reason = f"nodetool status failed: {last_error}" if rc != 0 else detail
            module.fail_json(
                msg=f"after {elapsed}s not every node is UN in this node's view: {reason}",
                nodes=nodes,
                up_normal=up_normal,
                waited_seconds=elapsed,
            )
        time.sleep(params["interval"])


if __name__ == "__main__":
    main()
