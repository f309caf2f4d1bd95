#!/usr/bin/python
"""Drain a running node in one step: leave gossip, let requests finish, drain."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_drain
short_description: Leave gossip, pause, then drain a Cassandra node (the process stays up)
description:
  - C(nodetool drain) leaves gossip and shuts messaging down at once, so a read a peer sent
    just before it heard the news is never answered (a ReadTimeout at QUORUM under load).
    This module first runs C(nodetool disablegossip) so peers route around the node, waits
    I(quiesce_seconds) for requests already sent to finish, then runs C(nodetool drain)
    (clients' connections close, memtables flush).
  - One module run instead of one task per step, as each task costs an Ansible module start.
  - Does nothing (C(drained=false)) when the node's JMX port is closed - the node is not
    running, so there is nothing to drain.
extends_documentation_fragment: [kairos, kairos.check_only, kairos_nodetool]
options:
  jmx_port:
    description: The node's JMX port, to tell a running node from a stopped one.
    type: int
    required: true
  jmx_host:
    description: Address the JMX port listens on.
    type: str
    default: 127.0.0.1
  quiesce_seconds:
    description: Seconds between leaving gossip and draining.
    type: float
    default: 2
"""

EXAMPLES = r"""
- name: Drain the node
  cassandra_drain:
    nodetool: /srv/lab/cass1/bin/nodetool
    jmx_port: 7199
"""

RETURN = r"""
drained:
  description: Whether the node was running and is drained now.
  returned: always
  type: bool
phases:
  description: Seconds of each part - leaving gossip, the pause, the drain.
  returned: always
  type: list
  elements: float
"""

import time

from ansible.module_utils.kairos_net import accepts_connections
from ansible.module_utils.kairos_nodetool import nodetool_module, run_nodetool


def main():
    module = nodetool_module(
        jmx_port=dict(type="int", required=True),
        jmx_host=dict(type="str", default="127.0.0.1"),
        quiesce_seconds=dict(type="float", default=2),
    )
    params = module.params
    if not accepts_connections(params["jmx_host"], params["jmx_port"]):
        module.exit_json(changed=False, drained=False, phases=[0.0, 0.0, 0.0],
                         msg=f"JMX port {params['jmx_port']} closed: the node is not running")
    if module.check_mode:
        module.exit_json(changed=True, drained=False, phases=[0.0, 0.0, 0.0])
    _, _, _, leave = run_nodetool(module, params["nodetool"], ["disablegossip"])
    paused = time.monotonic()
    time.sleep(params["quiesce_seconds"])
    pause = round(time.monotonic() - paused, 2)  # the pause as it happened, not as asked
    _, _, _, drain = run_nodetool(module, params["nodetool"], ["drain"])
    module.exit_json(changed=True, drained=True, phases=[leave, pause, drain])


if __name__ == "__main__":
    main()
