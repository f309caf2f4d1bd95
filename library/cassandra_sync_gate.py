#!/usr/bin/python
"""The sync gate between batches over CQL: is every restarted node back and caught up?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_sync_gate
short_description: Wait over CQL until every peer sees a batch back and caught up
description:
  - Runs once per batch on the control host. Holds one CQL session per peer (every node
    outside the batch) and polls each peer's own view in its virtual tables, every
    I(interval) seconds, until all of these hold, or fails when I(timeout) passes naming
    every unmet condition per peer.
  - C(up_normal) every peer's C(system_views.gossip_info) shows each batch node with a
    generation newer than I(generations) (the restart reached the peer), status NORMAL and
    its native transport ready; a peer holding hints for it does not see it DOWN
    (C(system_views.pending_hints)).
  - C(schema) every peer's C(system.local) schema version is the same and every peer's
    gossip shows it for each batch node.
  - C(hints) no peer holds more than I(max_hint_files) hint files for any node outside
    I(expected_down) (C(system_views.pending_hints)) - the batch's nodes have caught up, and
    no peer - the next batch among them - is still replaying hints to another node. With
    I(max_hint_files) 0 no peer's C(HintsDispatcher) pool has a task active or queued either
    (C(system_views.thread_pools)) - the file a peer is dispatching is off its queue, and
    C(pending_hints) does not list it. With
    no I(nodes) the gate checks only this and the schemas (before the first batch), and with
    I(cross_check) also that every peer sees every other peer as a batch node above.
  - C(failure_detector) with I(failure_detector), every peer's failure detector counts each
    batch node alive - the U of the peer's C(nodetool status), which no virtual table
    shows. Asked over CQL - a read at consistency ALL, sent to the peer, of a one-token range
    the node replicates first (C(system_distributed)) is refused with Unavailable while the
    peer counts the node down. Not asked when I(expected_down) is not empty (a read at ALL
    needs every replica) or when the login may not read C(system_distributed); then
    C(failure_detector_confirmed) is false and the caller confirms with one
    C(nodetool status) per peer (M(cassandra_node_gate) with I(checks=[up_normal])).
  - Fails fast, without waiting for I(timeout), when a node outside the batch and outside
    I(expected_down) is down for I(down_grace) seconds in a row (a peer whose CQL port
    refuses or fails the connection, or a node a peer holding hints for it sees DOWN) - once
    every live peer sees the batch back (so a rescue finds it serving), or at once when no
    peer answers. A peer whose requests only time out is busy, not down (a saturated node
    queues them behind its clients') - the gate waits for it, and fails at I(timeout) if it
    never answers; a hung node is still seen DOWN by a peer holding hints for it.
  - Read-only, never reports changed.
extends_documentation_fragment: [kairos, kairos.read_only, kairos_cql, kairos.tls]
options:
  host:
    description: CQL addresses of the peers (every node outside the batch), one session each.
    type: list
    elements: str
  peer_addresses:
    description: Listen addresses of the peers, in the order of I(host); default I(host).
    type: list
    elements: str
    default: []
  nodes:
    description: Listen addresses of the batch's restarted nodes; none before the first batch.
    type: list
    elements: str
    default: []
  generations:
    description:
      - Listen address -> gossip generation of each batch node before it went down
        (C(generations) of M(cassandra_cluster_facts)). A node missing here only needs
        status NORMAL and its native transport ready.
    type: dict
    default: {}
  failure_detector:
    description: Ask each peer's failure detector about each batch node over CQL.
    type: bool
    default: true
  cross_check:
    description:
      - Without I(nodes) (before the first batch) - each peer's view of every other peer is
        judged as a batch node's is (C(up_normal), C(schema), C(failure_detector)) - every
        node UN in every view, which one C(nodetool status) per node checked before.
    type: bool
    default: false
  expected_down:
    description: Listen addresses already counted as down by the batch's guard.
    type: list
    elements: str
    default: []
  max_hint_files:
    description: Hint files a peer may still hold for any one node outside I(expected_down).
    type: int
    default: 0
  settle_flush:
    description:
      - Once every condition holds, go on polling for the peers' longest
        C(hints_flush_period) (C(hints_flush_seconds)) before passing - hints a peer still
        held in its memory buffer when the batch was seen back are then in a file, where
        M(cassandra_node_gate) sees them. Timed on the control host alone, so no node's clock
        is compared with it.
    type: bool
    default: false
  down_grace:
    description: Seconds a node outside the batch may look down before the gate fails fast.
    type: float
    default: 5
  timeout:
    description: Seconds before failing; each CQL request waits at most 5 s of it.
    type: float
    default: 180
  interval:
    description: Seconds between polls.
    type: float
    default: 0.5
"""

EXAMPLES = r"""
- name: Every peer sees cass2 back, schemas agree, hints delivered
  cassandra_sync_gate:
    host: [127.0.0.1, 127.0.0.3]
    nodes: [127.0.0.2]
    generations: {127.0.0.2: 1795450588}
    username: kairos
    password: "{{ kairos_cql_password }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
waited_seconds:
  description: Seconds until every condition held (or until the gate failed).
  returned: always
  type: float
conditions:
  description: The last state of each condition (true when met on every peer).
  returned: always
  type: dict
unmet:
  description: Peer -> what that peer's view still lacks (empty when the gate passed).
  returned: always
  type: dict
failure_detector_confirmed:
  description: Whether every peer's failure detector was asked over CQL and counts the batch alive.
  returned: success
  type: bool
failure_detector:
  description: How the failure detector was judged, or why it was not asked.
  returned: always
  type: str
passed_at:
  description:
    - When every condition first held (seconds since the epoch). From then on no peer counts
      the batch down, so no peer writes new hints for it.
  returned: success
  type: float
hints_flush_seconds:
  description:
    - The longest C(hints_flush_period) among the peers that answered, in seconds, read from
      their C(system_views.settings) - hints a peer still holds
      in its memory buffer reach a file within this long of I(passed_at) (what
      I(settle_flush) waits out). Cassandra's default (10) when no peer showed it.
  returned: success
  type: float
down:
  description: Addresses of nodes outside the batch seen down (set when the gate failed fast).
  returned: failure
  type: list
  elements: str
"""

import re
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import HAS_DRIVER, build_cluster, cql_argument_spec
from ansible.module_utils.kairos_fd_probe import (
    CANNOT_PROBE,
    PEER_TOKENS,
    TOKEN_UNKNOWN,
    probe_alive,
    tokens_by_node,
)

GOSSIP = (
    "SELECT address, generation, status_with_port, status, rpc_ready, \"schema\" "
    "FROM system_views.gossip_info"
)
HINTS = "SELECT address, files, status FROM system_views.pending_hints"
DISPATCH = (
    "SELECT active_tasks, pending_tasks FROM system_views.thread_pools "
    "WHERE name = 'HintsDispatcher'"
)
LOCAL_SCHEMA = "SELECT schema_version FROM system.local"
FLUSH_PERIOD = "SELECT value FROM system_views.settings WHERE name = 'hints_flush_period'"
#: Cassandra's hints_flush_period when no peer shows its own.
DEFAULT_FLUSH_SECONDS = 10.0
#: cassandra.yaml duration units (DurationSpec) -> seconds.
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                   "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zµ]+)\s*$", re.IGNORECASE)
#: Seconds a single CQL request or connection attempt may take within the gate.
REQUEST_SECONDS = 5.0


def node_state(row, before):
    """'' when a peer's gossip row shows the node back, else what it shows instead."""
    if row is None:
        return "absent from gossip"
    status = (row.get("status_with_port") or row.get("status") or "?").split(",")[0]
    if before is not None and int(row.get("generation") or 0) <= int(before):
        return f"generation {row.get('generation')} not newer than {before} (not restarted yet)"
    if status != "NORMAL":
        return f"status {status}"
    if str(row.get("rpc_ready")).lower() != "true":
        return "native transport not ready"
    return ""


def judge_peer(view, nodes, generations, max_hint_files, expected=()):
    """One peer's answer -> (unmet conditions: name -> reasons, nodes it sees DOWN).

    ``view``: {"gossip": rows, "hints": rows, "schema": its schema version, "dispatch": the
    HintsDispatcher pool's row or None}, rows as dicts. Hints for a node in ``expected``
    (known down) cannot be delivered and are not counted; a dispatch in progress (which
    pending_hints does not list) holds the gate when no hint file is tolerated.
    """
    gossip = {str(r["address"]): r for r in view["gossip"]}
    hints = {str(r["address"]): r for r in view["hints"]}
    unmet = {}
    for node in nodes:
        state = node_state(gossip.get(node), generations.get(node))
        held = hints.get(node)
        if not state and held is not None and held.get("status") == "DOWN":
            state = "DOWN in its failure detector (pending hints)"
        refused = view["fd"].get(node, TOKEN_UNKNOWN) if "fd" in view else ""
        if state:
            unmet.setdefault("up_normal", []).append(f"{node}: {state}")
        elif refused:
            unmet.setdefault("failure_detector", []).append(f"{node}: {refused}")
        node_schema = (gossip.get(node) or {}).get("schema")
        if not state and str(node_schema) != str(view["schema"]):
            unmet.setdefault("schema", []).append(
                f"{node} has schema {node_schema}, this peer {view['schema']}"
            )
    for target, held in sorted(hints.items()):
        files = int(held.get("files") or 0)
        if target not in expected and files > max_hint_files:
            unmet.setdefault("hints", []).append(f"{files} hint file(s) for {target}")
    dispatch = view.get("dispatch") or {}
    busy = int(dispatch.get("active_tasks") or 0), int(dispatch.get("pending_tasks") or 0)
    if max_hint_files == 0 and any(busy):
        unmet.setdefault("hints", []).append(
            f"dispatching hints ({busy[0]} active, {busy[1]} queued HintsDispatcher tasks)"
        )
    seen_down = sorted(a for a, r in hints.items() if r.get("status") == "DOWN" and a not in nodes)
    return unmet, seen_down


#: A peer's view when its requests timed out: it is there, but too busy to answer in time.
BUSY = "busy"
_TIMEOUTS = ("OperationTimedOut", "ReadTimeout", "TimeoutError", "timeout")


def timed_out(exc):
    """True when ``exc`` is a timeout, also when every host's error of a NoHostAvailable is
    one: the peer accepted the connection but did not answer in time."""
    if type(exc).__name__ in _TIMEOUTS:
        return True
    errors = getattr(exc, "errors", None)
    return isinstance(errors, dict) and bool(errors) and all(
        isinstance(e, BaseException) and timed_out(e) for e in errors.values())


def judge(views, nodes, generations, max_hint_files, expected=()):
    """Every peer's answer -> (conditions, unmet per peer, nodes down outside the batch).

    ``views``: peer -> its view, None when it did not answer, or :data:`BUSY` when its
    requests timed out (not counted down). ``nodes``: the batch's
    nodes, or peer -> the nodes that peer's view is judged on (a cross-check).
    """
    unmet, down = {}, set()
    answered = {p: v for p, v in views.items() if isinstance(v, dict)}
    nodes_of = nodes if isinstance(nodes, dict) else {p: nodes for p in views}
    for peer, view in answered.items():
        peer_unmet, seen_down = judge_peer(
            view, nodes_of[peer], generations, max_hint_files, expected
        )
        down.update(seen_down)
        if peer_unmet:
            unmet[peer] = {k: "; ".join(v) for k, v in peer_unmet.items()}
    schemas = {str(v["schema"]) for v in answered.values()}
    if len(schemas) > 1:
        for peer in answered:
            unmet.setdefault(peer, {}).setdefault("schema", f"peers disagree: {sorted(schemas)}")
    for peer, view in views.items():
        if view == BUSY:
            unmet[peer] = {"up_normal": f"busy: no CQL answer within {REQUEST_SECONDS:g} s"}
        elif peer not in answered:
            unmet[peer] = {"up_normal": "does not answer CQL"}
            down.add(peer)
    conditions = {
        name: bool(answered) and not any(name in u for u in unmet.values())
        for name in ("up_normal", "schema", "hints")
        + (("failure_detector",) if any("fd" in v for v in answered.values()) else ())
    }
    return conditions, unmet, sorted(down)


def duration_seconds(text):
    """``10s``, ``2000ms`` (a cassandra.yaml duration as the settings table shows it) in
    seconds; None when ``text`` is not one."""
    match = _DURATION.match(str(text or ""))
    unit = match and _DURATION_UNITS.get(match.group(2).lower())
    return float(match.group(1)) * unit if unit else None


def _first(rows):
    """The first row as a dict, or None (an older Cassandra without the pool's row)."""
    for row in rows:
        return row._asdict()
    return None


class Peer:
    """One CQL session to one peer, reconnected when it drops."""

    def __init__(self, address, params, probe_nodes=()):
        self.address = address
        self.params = params
        self.probe_nodes = probe_nodes
        self.probe_error = None  # why this peer cannot be asked about its failure detector
        self.tokens = None
        self.flush_seconds = None  # the peer's hints_flush_period, read once
        self.cluster = self.session = None

    def view(self):
        """The peer's gossip, pending hints and schema version; None when it does not answer,
        :data:`BUSY` when it only timed out."""
        try:
            if self.session is None:
                self.cluster = build_cluster(
                    [self.address],
                    port=self.params["port"],
                    timeout=REQUEST_SECONDS,
                    username=self.params["username"],
                    password=self.params["password"],
                    metadata=False,
                    tls=self.params["tls"],
                )
                self.session = self.cluster.connect()
            if self.flush_seconds is None:
                self.flush_seconds = duration_seconds(
                    getattr(self.session.execute(FLUSH_PERIOD).one(), "value", None)
                )
            view = {
                "gossip": [r._asdict() for r in self.session.execute(GOSSIP)],
                "hints": [r._asdict() for r in self.session.execute(HINTS)],
                "dispatch": _first(self.session.execute(DISPATCH)),
                "schema": self.session.execute(LOCAL_SCHEMA).one().schema_version,
            }
            if self.probe_nodes and self.probe_error is None:
                if self.tokens is None:
                    rows = self.session.execute(PEER_TOKENS)
                    self.tokens = tokens_by_node(r._asdict() for r in rows)
                verdicts = self.ask_failure_detector()
                if verdicts is not None:
                    view["fd"] = verdicts
            return view
        except Exception as exc:  # no answer now: busy when it timed out, else down
            self.close()
            return BUSY if timed_out(exc) else None

    def ask_failure_detector(self):
        """Batch node -> '' when this peer's failure detector counts it alive, else why not;
        None when the probe cannot run on this peer (the caller falls back to nodetool)."""
        verdicts = {}
        for node in self.probe_nodes:
            if node not in self.tokens:
                verdicts[node] = TOKEN_UNKNOWN
                continue
            try:
                verdicts[node] = probe_alive(self.session, self.tokens[node])
            except CANNOT_PROBE as exc:  # not a liveness fact
                self.probe_error = f"{self.address}: {type(exc).__name__}: {exc}"
                return None
        return verdicts

    def close(self):
        if self.cluster is not None:
            self.cluster.shutdown()
        self.cluster = self.session = None


def not_probing(params, known_down):
    """Why the gate does not ask the peers' failure detectors, or '' when it does."""
    if not params["nodes"] and not params["cross_check"]:
        return "no batch nodes to ask about"
    if not params["failure_detector"]:
        return "not asked (failure_detector=false)"
    if known_down:
        return "not asked: nodes outside the batch are down (a read at ALL needs them)"
    return ""


def failure_detector_verdict(why_not, peers, conditions):
    """(confirmed, how) for the gate's result: was every peer's failure detector asked?"""
    if why_not:
        return False, why_not
    errors = sorted(p.probe_error for p in peers.values() if p.probe_error)
    if errors:
        return False, "not asked: " + "; ".join(errors)
    if conditions.get("failure_detector"):
        return True, "every peer counts the batch alive (a read at ALL, over CQL)"
    return False, "not asked: no peer answered"


def _options():
    """The gate's own options (cql_argument_spec adds the connection's)."""
    return dict(
        host=dict(type="list", elements="str"),
        peer_addresses=dict(type="list", elements="str", default=[]),
        nodes=dict(type="list", elements="str", default=[]),
        generations=dict(type="dict", default={}),
        failure_detector=dict(type="bool", default=True),
        cross_check=dict(type="bool", default=False),
        expected_down=dict(type="list", elements="str", default=[]),
        max_hint_files=dict(type="int", default=0),
        settle_flush=dict(type="bool", default=False),
        down_grace=dict(type="float", default=5),
        timeout=dict(type="float", default=180),
        interval=dict(type="float", default=0.5),
    )


def _peers_to_ask(module, params, expected, why_not):
    """(listen address -> Peer, listen address -> the nodes it is asked about).

    Every host but the batch and the nodes known down is asked; with ``cross_check`` each
    about all the others, else about the batch.
    """
    listen = params["peer_addresses"] or params["host"]
    if len(listen) != len(params["host"]):
        module.fail_json(msg="peer_addresses must name one listen address per host, in order")
    pairs = zip(listen, params["host"], strict=True)
    if params["cross_check"] and params["nodes"]:
        module.fail_json(msg="cross_check is for the gate before the first batch: no nodes")
    hosts = {a: h for a, h in pairs if a not in expected}
    nodes_of = {
        a: [o for o in hosts if o != a] if params["cross_check"] else params["nodes"]
        for a in hosts
    }
    peers = {a: Peer(h, params, () if why_not else nodes_of[a]) for a, h in hosts.items()}
    return peers, nodes_of


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(**_options()),
        supports_check_mode=True,
    )
    params = module.params
    if not HAS_DRIVER:
        module.fail_json(msg="cassandra-driver is required on the host running this module")
    known_down = set(params["expected_down"])
    expected = known_down | set(params["nodes"])
    why_not = not_probing(params, known_down)
    peers, nodes_of = _peers_to_ask(module, params, expected, why_not)
    generations = {str(k): v for k, v in params["generations"].items()}
    began = time.monotonic()
    held_since = None  # (monotonic, epoch) when every condition first held
    down_since = {}  # node -> when it was first seen down in this run of polls
    # Every peer is asked at once: a poll (and the first, which opens each peer's session)
    # takes as long as the slowest peer, not the sum of them.
    pool = ThreadPoolExecutor(max_workers=max(1, len(peers)))
    try:
        while True:
            views = dict(zip(peers, pool.map(Peer.view, peers.values()), strict=True))
            conditions, unmet, down = judge(
                views, nodes_of, generations, params["max_hint_files"], known_down
            )
            now = time.monotonic()
            elapsed = round(now - began, 1)
            down = [a for a in down if a not in expected]
            down_since = {a: down_since.get(a, now) for a in down}
            dead = sorted(a for a, t in down_since.items() if now - t >= params["down_grace"])
            live_back = all(
                "up_normal" not in unmet.get(a, {}) for a in peers if isinstance(views[a], dict)
            )
            if dead and (live_back or all(v is None for v in views.values())):
                module.fail_json(
                    msg=f"{', '.join(dead)} down outside the batch (for "
                    f"{params['down_grace']:g}s or more) while waiting for "
                    f"{', '.join(params['nodes']) or 'the hints to be delivered'}",
                    waited_seconds=elapsed, conditions=conditions, unmet=unmet, down=dead,
                )
            held = all(conditions.values())
            if held and held_since is None:
                held_since = (now, time.time())
            flush = max((p.flush_seconds for p in peers.values() if p.flush_seconds is not None),
                        default=DEFAULT_FLUSH_SECONDS)
            if held and (not params["settle_flush"] or now - held_since[0] >= flush):
                confirmed, how = failure_detector_verdict(why_not, peers, conditions)
                module.exit_json(
                    changed=False, waited_seconds=elapsed, conditions=conditions, unmet={},
                    failure_detector_confirmed=confirmed, failure_detector=how,
                    passed_at=held_since[1], hints_flush_seconds=flush,
                )
            if elapsed >= params["timeout"]:
                said = "; ".join(
                    f"{peer} sees {', '.join(f'{k}: {v}' for k, v in u.items())}"
                    for peer, u in sorted(unmet.items())
                )
                module.fail_json(
                    msg=f"{', '.join(params['nodes']) or 'the cluster'} not caught up after "
                    f"{elapsed}s: {said}",
                    waited_seconds=elapsed, conditions=conditions, unmet=unmet,
                )
            time.sleep(params["interval"])
    finally:
        pool.shutdown(wait=True)
        for peer in peers.values():
            peer.close()


if __name__ == "__main__":
    main()
