#!/usr/bin/python
"""Drain a running node in one step: leave gossip, let requests finish, drain."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_drain
short_description: Leave gossip, then drain a Cassandra node (the process stays up)
description:
  - C(nodetool drain) announces the node's shutdown, waits 2 s and shuts messaging down, but
    the peers flip a node back UP within a second of its first shutdown announce, so a peer
    could send it a read its messaging shutdown then cut (a ReadTimeout at QUORUM under
    load). This module first runs C(nodetool disablegossip), which takes that first
    announce, waits I(quiesce_seconds) (none by default), then runs C(nodetool drain),
    whose announce then holds for its wait (clients' connections close, memtables flush).
  - One module run instead of one task per step, as each task costs an Ansible module start.
  - With I(jolokia_config) and the node's Jolokia agent listening, the same two steps are
    JMX operations over HTTP (StorageService stopGossiping and drain), then the node's
    operation mode is read back and must be C(DRAINED); no nodetool JVM is started (2 s
    of CPU each). Without the agent (a node started before it was enabled), nodetool;
    I(via) says which.
  - Does nothing (C(drained=false)) when the node's JMX port is closed - the node is not
    running, so there is nothing to drain.
  - With I(peers), a peer that stops answering on its storage port (its process
    died; a host that does not answer within half a second counts too) before the drain has
    begun stops the module. Before leaving gossip, nothing is done; after it, during the
    pause, the node joins gossip again (StorageService startGossiping, or nodetool
    enablegossip) and reads back that its gossip runs. Either way the node serves as before
    and the module fails naming the peer, so a rollout's rescue leaves it running rather
    than drain a second replica of the dead node's ranges. Once the drain has begun, it is
    carried through (messaging is shut down; starting the node again is the way back).
extends_documentation_fragment: [kairos, kairos.check_only, kairos_nodetool,
                                 kairos_nodetool.jolokia]
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
    description: Seconds between leaving gossip and draining (the peers are watched meanwhile).
    type: float
    default: 0
  peers:
    description:
      - The up nodes outside the batch that share a replica set with it (name to address;
        the rollout guard's I(watch)), all probed at once until the drain begins; empty
        watches none.
    type: dict
    default: {}
  peer_port:
    description: The peers' storage (internode) port.
    type: int
    default: 7000
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
peers_down:
  description: The names of the watched peers that stopped answering before the drain began.
  returned: when the module stopped for them (a failure)
  type: list
  elements: str
rejoined:
  description: Whether the node left gossip and joined it again (read back as running).
  returned: when the module stopped for a peer (a failure)
  type: bool
"""

import time

from ansible.module_utils.kairos_jolokia import (
    STORAGE_SERVICE,
    JolokiaError,
    exec_operation,
    listening_agent,
    read_attribute,
)
from ansible.module_utils.kairos_net import accepts_connections, not_accepting
from ansible.module_utils.kairos_nodetool import nodetool_module, run_nodetool

# A drain flushes every memtable: minutes on a big node, like nodetool drain's own wait.
DRAIN_TIMEOUT = 900
#: A peer's storage port answers a connection in microseconds on a live node, and refuses
#: at once when its process died; a host that does not answer within this counts as down.
PEER_PROBE_TIMEOUT = 0.5
#: How often the peers are probed during the pause.
PEER_PROBE_EVERY = 0.2


def timed(step):
    began = time.monotonic()
    step()
    return round(time.monotonic() - began, 2)


def main():
    module = nodetool_module(
        jmx_port=dict(type="int", required=True),
        jmx_host=dict(type="str", default="127.0.0.1"),
        quiesce_seconds=dict(type="float", default=0),
        jolokia_config=dict(type="path", default=""),
        peers=dict(type="dict", default={}),
        peer_port=dict(type="int", default=7000),
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

    def peers_down():
        silent = not_accepting(params["peers"].values(), params["peer_port"],
                               timeout=PEER_PROBE_TIMEOUT)
        return sorted(name for name, address in params["peers"].items() if address in silent)

    dead = peers_down()
    if dead:
        module.fail_json(
            msg=f"not drained: {', '.join(dead)} stopped answering on its storage port before "
            "the drain began; nothing was done, the node serves as before",
            drained=False, peers_down=dead, rejoined=False, phases=[0.0, 0.0, 0.0])
    try:
        leave = timed(leave_gossip)
        began = time.monotonic()
        deadline = began + params["quiesce_seconds"]
        dead = peers_down()
        while not dead and time.monotonic() < deadline:
            time.sleep(max(0.0, min(PEER_PROBE_EVERY, deadline - time.monotonic())))
            dead = peers_down()
        pause = round(time.monotonic() - began, 2)  # as it happened
        if dead:
            rejoin(module, jolokia, dead, [leave, pause, 0.0])
        drain = timed(drain_node)
    except JolokiaError as exc:
        module.fail_json(msg=f"drain through Jolokia failed: {exc}")
    module.exit_json(changed=True, drained=True, phases=[leave, pause, drain],
                     via="nodetool" if jolokia is None else "jolokia")


def rejoin(module, jolokia, dead, phases):
    """A peer died while the node was out of gossip and not yet drained: join gossip again,
    read back that it runs, and fail naming the peer (the node serves as before)."""
    running, how = None, ""
    if jolokia is not None:
        try:
            exec_operation(jolokia, STORAGE_SERVICE, "startGossiping")
            running = read_attribute(jolokia, STORAGE_SERVICE, "GossipRunning") is True
            how = "StorageService startGossiping"
        except JolokiaError:  # a policy written before it allowed startGossiping: nodetool
            pass
    if running is None:
        running, how = rejoin_through_nodetool(module)
    named = ", ".join(dead)
    if not running:
        module.fail_json(
            msg=f"not drained: {named} stopped answering on its storage port during the "
            f"drain's pause, and after {how} the node's gossip is NOT running: it serves no "
            "peer; a person must look at it",
            drained=False, peers_down=dead, rejoined=False, changed=True, phases=phases)
    module.fail_json(
        msg=f"not drained: {named} stopped answering on its storage port during the drain's "
        f"pause; the node joined gossip again ({how}, read back running) and serves as before",
        drained=False, peers_down=dead, rejoined=True, changed=True, phases=phases)


def rejoin_through_nodetool(module):
    """(gossip running, how it was asked) through nodetool enablegossip and statusgossip.

    No check_rc: a nodetool failure must still fail the module with the peers named, which
    the rescue counts as down."""
    nodetool = module.params["nodetool"]
    rc, out, err, _ = run_nodetool(module, nodetool, ["enablegossip"], check_rc=False)
    if rc == 0:
        rc, out, err, _ = run_nodetool(module, nodetool, ["statusgossip"], check_rc=False)
    how = "nodetool enablegossip"
    if rc != 0:
        how = f"{how} (rc={rc}: {(err or out).strip()[-200:]})"
    return rc == 0 and out.strip() == "running", how


if __name__ == "__main__":
    main()
