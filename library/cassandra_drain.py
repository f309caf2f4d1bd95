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
  - With I(jolokia_config) and the node's Jolokia agent listening, the same two steps are
    JMX operations over HTTP (StorageService stopGossiping and drain), then the node's
    operation mode is read back and must be C(DRAINED); no nodetool JVM is started (2 s
    of CPU each). Without the agent (a node started before it was enabled), nodetool;
    I(via) says which.
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
  jolokia_config:
    description:
      - The node's Jolokia agent properties (host, port, user, password), as the cassandra
        role writes them; empty, or an agent that does not listen, means nodetool.
    type: path
    default: ""
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
via:
  description: C(jolokia) or C(nodetool), what carried the calls (absent when nothing ran).
  returned: when drained
  type: str
"""

import time

from ansible.module_utils.kairos_jolokia import (
    STORAGE_SERVICE,
    JolokiaError,
    exec_operation,
    listening_agent,
    read_attribute,
)
from ansible.module_utils.kairos_net import accepts_connections
from ansible.module_utils.kairos_nodetool import nodetool_module, run_nodetool

# A drain flushes every memtable: minutes on a big node, like nodetool drain's own wait.
DRAIN_TIMEOUT = 900


def timed(step):
    began = time.monotonic()
    step()
    return round(time.monotonic() - began, 2)


def main():
    module = nodetool_module(
        jmx_port=dict(type="int", required=True),
        jmx_host=dict(type="str", default="127.0.0.1"),
        quiesce_seconds=dict(type="float", default=2),
        jolokia_config=dict(type="path", default=""),
    )
    params = module.params
    if not accepts_connections(params["jmx_host"], params["jmx_port"]):
        module.exit_json(changed=False, drained=False, phases=[0.0, 0.0, 0.0],
                         msg=f"JMX port {params['jmx_port']} closed: the node is not running")
    if module.check_mode:
        module.exit_json(changed=True, drained=False, phases=[0.0, 0.0, 0.0])
    jolokia = listening_agent(module, params["jolokia_config"])
    if jolokia is None:
        def leave_gossip():
            run_nodetool(module, params["nodetool"], ["disablegossip"])

        def drain_node():
            run_nodetool(module, params["nodetool"], ["drain"])
    else:
        def leave_gossip():
            exec_operation(jolokia, STORAGE_SERVICE, "stopGossiping")

        def drain_node():
            exec_operation(jolokia, STORAGE_SERVICE, "drain", timeout=DRAIN_TIMEOUT)
            # Done means verified: the node says it is drained.
            mode = read_attribute(jolokia, STORAGE_SERVICE, "OperationMode")
            if mode != "DRAINED":
                raise JolokiaError(f"the drain returned, yet the node's operation mode is {mode}")
    try:
        leave = timed(leave_gossip)
        pause = timed(lambda: time.sleep(params["quiesce_seconds"]))  # as it happened
        drain = timed(drain_node)
    except JolokiaError as exc:
        module.fail_json(msg=f"drain through Jolokia failed: {exc}")
    module.exit_json(changed=True, drained=True, phases=[leave, pause, drain],
                     via="nodetool" if jolokia is None else "jolokia")


if __name__ == "__main__":
    main()
