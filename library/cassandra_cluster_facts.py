#!/usr/bin/python
"""The live ring, replication and schema agreement, through cassandra-driver."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cassandra_cluster_facts
short_description: Ring, replicas per keyspace, schema versions and node liveness of a cluster
description:
  - Connects with cassandra-driver to I(host) and reads the token map, the keyspaces'
    replication (system_schema.keyspaces), every node's schema version (system.local and
    system.peers_v2) and which nodes the driver sees down.
  - Returns the ring in the planner's ring-description form (planner/topology/ring.py), with
    nodes named by their inventory host names, and can write it to I(dest) for
    C(kairos rollout preflight). Read-only apart from I(dest).
extends_documentation_fragment: [kairos, kairos.check_only, kairos_cql, kairos.tls]
options:
  host:
    description: Addresses of the nodes to ask (the first that answers is used).
    type: list
    elements: str
  hosts:
    description: Map of node address to inventory host name; unknown addresses keep the address.
    type: dict
    default: {}
  keyspaces:
    description:
      - Keyspaces whose replica sets matter (the application's).
      - Default, every non-system keyspace.
    type: list
    elements: str
  dest:
    description: Write the ring description (JSON) to this file.
    type: path
"""

EXAMPLES = r"""
- name: Read the live ring
  cassandra_cluster_facts:
    host: 127.0.0.1
    hosts: {127.0.0.1: cass1, 127.0.0.2: cass2, 127.0.0.3: cass3}
    keyspaces: [shop]
    dest: /tmp/ring.json
"""

RETURN = r"""
ring:
  description: Ring description (nodes, keyspaces, token_ranges with replicas per keyspace).
  returned: success
  type: dict
schema_versions:
  description: Schema version -> hosts that report it.
  returned: success
  type: dict
schema_agreement:
  description: Whether every live node reports the same schema version.
  returned: success
  type: bool
generations:
  description: Listen address -> gossip generation of each node, as the node asked knows it.
  returned: success
  type: dict
host_ids:
  description: Listen address -> host ID of each node (its hint files' names begin with it).
  returned: success
  type: dict
down:
  description: Inventory names of the nodes the driver sees down.
  returned: success
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import connect_one, cql_argument_spec

try:
    from cassandra.metadata import ReplicationStrategy
except ImportError:  # pragma: no cover - connect_one reports the missing driver
    ReplicationStrategy = None

SYSTEM_KEYSPACES = (
    "system",
    "system_auth",
    "system_schema",
    "system_distributed",
    "system_traces",
    "system_views",
    "system_virtual_schema",
)


def replica_map(token_map, replication):
    """Token -> replica hosts of a keyspace with this replication (a system_schema map)."""
    options = dict(replication)
    strategy = ReplicationStrategy.create(options.pop("class", None), options)
    if strategy is None:
        return {}
    return strategy.make_token_replica_map(token_map.token_to_host_owner, token_map.ring)


def _nodes(all_hosts, name):
    """The driver's hosts, by address: inventory name, address, DC, rack, up, host ID."""
    return [
        {
            "host": name(h.address),
            "address": str(h.address),
            "dc": h.datacenter,
            "rack": h.rack,
            "up": bool(h.is_up),
            "host_id": str(h.host_id) if h.host_id else None,
        }
        for h in sorted(all_hosts, key=lambda h: str(h.address))
    ]


def _token_ranges(token_map, replication, keyspaces, name):
    """Each range of the ring, (previous token, token], with its replicas per keyspace.

    Raises ValueError naming each keyspace the driver cannot place.
    """
    ring = sorted(token_map.ring)
    placed = {ks: replica_map(token_map, replication[ks]) for ks in keyspaces}
    unplaced = [ks for ks in keyspaces if not placed[ks]]
    if unplaced:
        raise ValueError("no replica placement for " + ", ".join(
            f"keyspace {ks} (replication {replication[ks]})" for ks in unplaced))
    ranges = []
    for i, token in enumerate(ring):
        start = ring[i - 1].value
        replicas = {ks: [name(h.address) for h in placed[ks].get(token, ())] for ks in keyspaces}
        ranges.append({"start": start, "end": token.value, "replicas": replicas})
    return ranges


def _schema_versions(session, name):
    """Schema version -> the nodes on it, this node first, as system.local and peers_v2 say."""
    local = session.execute("SELECT broadcast_address, schema_version FROM system.local").one()
    versions = {str(local.schema_version): [name(local.broadcast_address)]}
    for row in session.execute("SELECT peer, schema_version FROM system.peers_v2"):
        versions.setdefault(str(row.schema_version), []).append(name(row.peer))
    return versions


def _write_ring(dest, ring_description):
    """Write the ring description to ``dest`` unless it already holds the same text."""
    text = json.dumps(ring_description, indent=1, sort_keys=True)
    old = None
    if os.path.exists(dest):
        with open(dest, encoding="utf-8") as handle:
            old = handle.read()
    if old != text:
        with open(dest, "w", encoding="utf-8") as handle:
            handle.write(text)


def main():
    module = AnsibleModule(
        argument_spec=cql_argument_spec(
            host=dict(type="list", elements="str"),
            hosts=dict(type="dict", default={}),
            keyspaces=dict(type="list", elements="str"),
            dest=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    names = {str(k): str(v) for k, v in params["hosts"].items()}

    def name(address):
        return names.get(str(address), str(address))

    # The token map without the schema: the replicas come from each keyspace's replication
    # (read below) through the driver's own placement, as its schema read would give them.
    cluster, session = connect_one(module, params, metadata="tokens")
    try:
        replication = {
            row.keyspace_name: dict(row.replication)
            for row in session.execute(
                "SELECT keyspace_name, replication FROM system_schema.keyspaces"
            )
        }
        wanted = params["keyspaces"] or sorted(k for k in replication if k not in SYSTEM_KEYSPACES)
        missing = [k for k in wanted if k not in replication]
        if missing:
            module.fail_json(msg=f"keyspaces not in the cluster: {', '.join(missing)}")
        nodes = _nodes(cluster.metadata.all_hosts(), name)
        ranges = _token_ranges(cluster.metadata.token_map, replication, wanted, name)
        versions = _schema_versions(session, name)
        # Each node's gossip generation as this node knows it: a sync gate after a restart
        # asks every peer for a newer one (proof that the restart reached it).
        generations = {
            str(row.address): row.generation
            for row in session.execute("SELECT address, generation FROM system_views.gossip_info")
        }
    except Exception as exc:
        module.fail_json(msg=f"{params['host']}: cannot read the cluster's metadata: {exc}")
    finally:
        cluster.shutdown()

    down = [n["host"] for n in nodes if not n["up"]]
    ring_description = {
        "nodes": [{k: n[k] for k in ("host", "address", "dc", "rack")} for n in nodes],
        "keyspaces": {ks: {"replication": replication[ks]} for ks in wanted},
        "token_ranges": ranges,
    }
    live_versions = {v for v, hs in versions.items() if any(h not in down for h in hs)}
    if params["dest"] and not module.check_mode:
        _write_ring(params["dest"], ring_description)
    module.exit_json(
        changed=False,
        ring=ring_description,
        nodes=nodes,
        down=down,
        schema_versions=versions,
        schema_agreement=len(live_versions) == 1,
        generations=generations,
        host_ids={n["address"]: n["host_id"] for n in nodes if n["host_id"]},
    )


if __name__ == "__main__":
    main()
