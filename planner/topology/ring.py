"""Ring topology and availability: which nodes may be down at the same time.

A :class:`Ring` holds the nodes (host, address, datacenter, rack), the keyspaces with
their replication and, per keyspace, the replica set of every token range -- the shape
cassandra-driver's token map gives (``cluster.metadata.token_map.get_replicas``) or
``nodetool describering`` prints.

A batch of nodes is *safe* for a consistency level when, for every replica set, the
replicas outside the batch (and outside the nodes already down) minus the extra
failures the operator wants to tolerate still meet what the consistency level needs:

========================  =============================================  =========
consistency level         need (per replica set)                         scope
========================  =============================================  =========
ONE / TWO / THREE         1 / 2 / 3                                      whole set
QUORUM, SERIAL            floor(RF_total / 2) + 1                        whole set
ALL                       RF_total                                       whole set
LOCAL_ONE                 1                                              every DC
LOCAL_QUORUM, EACH_QUORUM floor(RF_dc / 2) + 1                           every DC
LOCAL_SERIAL              floor(RF_dc / 2) + 1                           every DC
========================  =============================================  =========

``LOCAL_*`` levels are checked in every datacenter the keyspace replicates to, since a
client may be local to any of them; tolerated failures are counted against each
scope separately (the adversary may concentrate them where it hurts most).

The batches themselves (the fewest safe ones, and why each is safe) are
:mod:`planner.topology.batching`'s.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import inputs
from planner.errors import KairosError, ValidationError

__all__ = [
    "CONSISTENCY_LEVELS",
    "Node",
    "ReplicaSet",
    "Ring",
    "UnsafeBatchError",
    "check_batch",
    "load_ring",
    "requirements",
]

#: Consistency levels understood, mapped to their scope ("global" or "dc").
CONSISTENCY_LEVELS: Mapping[str, str] = {
    "ONE": "global",
    "TWO": "global",
    "THREE": "global",
    "QUORUM": "global",
    "SERIAL": "global",
    "ALL": "global",
    "LOCAL_ONE": "dc",
    "LOCAL_QUORUM": "dc",
    "LOCAL_SERIAL": "dc",
    "EACH_QUORUM": "dc",
}



class UnsafeBatchError(KairosError):
    """A batch (or the ring as it stands) cannot meet the consistency level."""


@dataclass(frozen=True)
class Node:
    """One ring member: the inventory host name, its address, datacenter and rack."""

    host: str
    address: str
    dc: str
    rack: str


@dataclass(frozen=True)
class ReplicaSet:
    """The replicas (host names, ring order) of one token range of one keyspace."""

    keyspace: str
    start: int | None
    end: int | None
    replicas: tuple[str, ...]

    def describe(self) -> str:
        """Return a short human description: keyspace, range and replicas."""
        rng = "" if self.start is None else f" range ({self.start}, {self.end}]"
        return f"keyspace {self.keyspace!r}{rng} replicas [{', '.join(self.replicas)}]"


@dataclass(frozen=True)
class Ring:
    """A Cassandra ring: nodes, keyspace replication and the replica sets.

    Parameters
    ----------
    nodes
        The members, in a stable order (host names unique).
    replication
        ``{keyspace: {dc: rf}}``.
    replica_sets
        Every distinct replica set, each tagged with one keyspace and token range
        where it occurs (used in error messages).
    """

    nodes: tuple[Node, ...]
    replication: Mapping[str, Mapping[str, int]]
    replica_sets: tuple[ReplicaSet, ...]
    _index: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.host in index:
                raise ValidationError(f"nodes[{i}].host: duplicate host {node.host!r}")
            index[node.host] = i
        object.__setattr__(self, "_index", index)
        for r, rs in enumerate(self.replica_sets):
            for host in rs.replicas:
                if host not in index:
                    raise ValidationError(
                        f"replica_sets[{r}]: unknown host {host!r} in {rs.describe()}"
                    )

    # ------------------------------------------------------------------ access
    @property
    def hosts(self) -> tuple[str, ...]:
        """Host names in ring-description order."""
        return tuple(n.host for n in self.nodes)

    def node(self, host: str) -> Node:
        """Return the node called ``host`` (ValidationError if unknown)."""
        try:
            return self.nodes[self._index[host]]
        except KeyError:
            raise ValidationError(f"unknown host {host!r}") from None

    def __contains__(self, host: object) -> bool:
        return host in self._index

    # ----------------------------------------------------------- constructors
    @classmethod
    def from_dict(cls, data: Any) -> Ring:
        """Build a ring from a ring description (the YAML form).

        The description has ``nodes`` (list of ``{host, address, dc, rack}``),
        ``keyspaces`` (``{name: {replication: {dc: rf}}}``; a ``class`` key and
        SimpleStrategy's ``replication_factor`` are accepted) and ``token_ranges``
        (list of ``{start, end, replicas: {keyspace: [host or address, ...]}}``).
        If ``token_ranges`` is absent, each node's ``tokens`` are used and replicas
        are computed with the keyspaces' strategies. The schema is closed (an unknown
        key is refused), host names and addresses are unique, and a keyspace's RF in a
        datacenter may not exceed that datacenter's nodes (Cassandra could not place
        the replicas; writes at QUORUM would fail).
        """
        if not isinstance(data, Mapping):
            raise ValidationError("ring: expected a mapping with nodes, keyspaces, token_ranges")
        inputs.closed_keys(data, "", allowed=("nodes", "keyspaces", "token_ranges"),
                           required=("nodes", "keyspaces"))
        nodes, tokens = _parse_nodes(data.get("nodes"))
        hosts_in_dc: dict[str, int] = {}
        for node in nodes:
            hosts_in_dc[node.dc] = hosts_in_dc.get(node.dc, 0) + 1
        replication = _parse_keyspaces(data.get("keyspaces"), hosts_in_dc)
        by_name: dict[str, str] = {}
        for n in nodes:
            by_name[n.host] = n.host
            by_name.setdefault(n.address, n.host)
        raw_ranges = data.get("token_ranges")
        if raw_ranges is None:
            if len(tokens) != len(nodes):
                missing = next(n.host for n in nodes if n.host not in tokens)
                raise ValidationError(
                    f"token_ranges: missing, and node {missing!r} lists no tokens"
                )
            return cls._from_tokens(nodes, replication, tokens)
        sets = _parse_ranges(raw_ranges, replication, by_name)
        return cls(nodes=tuple(nodes), replication=replication, replica_sets=tuple(sets))

    @classmethod
    def _from_tokens(
        cls,
        nodes: Sequence[Node],
        replication: Mapping[str, Mapping[str, int]],
        tokens: Mapping[str, Sequence[int]],
    ) -> Ring:
        ring = sorted((t, h) for h, ts in tokens.items() for t in ts)
        if len({t for t, _ in ring}) != len(ring):
            raise ValidationError("nodes[].tokens: a token is owned twice")
        by_host = {n.host: n for n in nodes}
        racks_in_dc: dict[str, set[str]] = {}
        hosts_in_dc: dict[str, int] = {}
        for node in nodes:
            racks_in_dc.setdefault(node.dc, set()).add(node.rack)
            hosts_in_dc[node.dc] = hosts_in_dc.get(node.dc, 0) + 1
        sets: list[ReplicaSet] = []
        for ks, rf_by_dc in replication.items():
            seen: set[tuple[str, ...]] = set()
            want = {dc: min(rf, hosts_in_dc.get(dc, 0)) for dc, rf in rf_by_dc.items()}
            for i, (tok, _owner) in enumerate(ring):
                replicas = _nts_replicas(ring, i, want, by_host, racks_in_dc)
                key = tuple(sorted(replicas))
                if key in seen:
                    continue
                seen.add(key)
                prev = ring[i - 1][0]
                sets.append(ReplicaSet(keyspace=ks, start=prev, end=tok, replicas=replicas))
        return cls(nodes=tuple(nodes), replication=replication, replica_sets=tuple(sets))

    @classmethod
    def simple(
        cls,
        hosts: Sequence[str],
        *,
        rf: int,
        dc: str = "datacenter1",
        rack: str = "rack1",
        keyspace: str = "kairos",
    ) -> Ring:
        """A one-token-per-node ring over ``hosts`` (ring order), one DC and rack.

        This is the ``--hosts cass1,cass2,cass3 --rf 3`` shortcut; each node's address
        is its host name.
        """
        if not hosts:
            raise ValidationError("hosts: expected at least one host")
        if rf < 1:
            raise ValidationError(f"rf: must be at least 1, got {rf}")
        n = len(hosts)
        if len(set(hosts)) != n:
            dup = next(h for h in hosts if list(hosts).count(h) > 1)
            raise ValidationError(f"hosts: duplicate host {dup!r} (--hosts)")
        # Refused, not clipped: the plan would otherwise assume replicas that do not exist.
        if rf > n:
            raise ValidationError(
                f"rf: replication factor {rf} is more than the {n} host(s) given (--rf, --hosts)"
            )
        step = 2**64 // n
        data = {
            "nodes": [
                {"host": h, "address": h, "dc": dc, "rack": rack, "tokens": [-(2**63) + i * step]}
                for i, h in enumerate(hosts)
            ],
            "keyspaces": {keyspace: {"replication": {dc: rf}}},
        }
        return cls.from_dict(data)

    @classmethod
    def synthetic(
        cls,
        nodes: int,
        *,
        vnodes: int = 1,
        rf: int | Mapping[str, int] = 3,
        dcs: int = 1,
        racks: int = 1,
        seed: int = 0,
    ) -> Ring:
        """A synthetic ring for tests and benchmarks.

        Nodes ``n0001...`` are dealt round-robin to datacenters ``dc1...`` and, within a
        DC, to racks ``rack1...``. With one token per node the tokens are evenly spaced
        in dealing order; with vnodes they are drawn at random (seeded). One keyspace
        ``ks`` replicates ``rf`` in every DC (NetworkTopologyStrategy, rack aware), clipped
        to the DC's node count.
        """
        if nodes < 1 or vnodes < 1 or dcs < 1 or racks < 1:
            raise ValidationError("synthetic ring: nodes, vnodes, dcs and racks must be >= 1")
        rng = random.Random(seed)
        dc_names = [f"dc{d + 1}" for d in range(dcs)]
        node_list: list[dict[str, Any]] = []
        per_dc_count = dict.fromkeys(dc_names, 0)
        for i in range(nodes):
            dc = dc_names[i % dcs]
            rack = f"rack{per_dc_count[dc] % racks + 1}"
            per_dc_count[dc] += 1
            node_list.append(
                {"host": f"n{i + 1:04d}", "address": f"10.0.{i // 250}.{i % 250 + 1}",
                 "dc": dc, "rack": rack}
            )
        if vnodes == 1:
            step = 2**64 // nodes
            for i, raw in enumerate(node_list):
                raw["tokens"] = [-(2**63) + i * step]
        else:
            used: set[int] = set()
            for raw in node_list:
                toks: list[int] = []
                while len(toks) < vnodes:
                    t = rng.randrange(-(2**63), 2**63)
                    if t not in used:
                        used.add(t)
                        toks.append(t)
                raw["tokens"] = toks
        rf_map = dict.fromkeys(dc_names, rf) if isinstance(rf, int) else dict(rf)
        # Test rings may ask for more replicas than a DC has nodes: clip here, on purpose
        # (a ring description with such an RF is refused by from_dict).
        rf_map = {dc: min(r, per_dc_count.get(dc, r)) for dc, r in rf_map.items()}
        return cls.from_dict({"nodes": node_list, "keyspaces": {"ks": {"replication": rf_map}}})

    def to_dict(self) -> dict[str, Any]:
        """The ring description (YAML form) of this ring."""
        return {
            "nodes": [
                {"host": n.host, "address": n.address, "dc": n.dc, "rack": n.rack}
                for n in self.nodes
            ],
            "keyspaces": {
                ks: {"replication": dict(rf)} for ks, rf in self.replication.items()
            },
            "token_ranges": [
                {"start": rs.start, "end": rs.end, "replicas": {rs.keyspace: list(rs.replicas)}}
                for rs in self.replica_sets
            ],
        }


def load_ring(path: str | Path) -> Ring:
    """Read a ring description (YAML or JSON) from ``path`` through :mod:`planner.inputs`."""
    data = inputs.load_yaml(path, kind=inputs.RING)
    with inputs.in_file(path):
        return Ring.from_dict(data)


#: Murmur3Partitioner tokens are signed 64-bit integers.
TOKEN_MIN, TOKEN_MAX = -(2**63), 2**63 - 1
_NODE_KEYS = ("host", "address", "dc", "datacenter", "rack", "tokens")


def _parse_nodes(raw_nodes: Any) -> tuple[list[Node], dict[str, list[int]]]:
    """The nodes of a ring description and the tokens of those that list them."""
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ValidationError("nodes: expected a non-empty list")
    nodes: list[Node] = []
    tokens: dict[str, list[int]] = {}
    first_at: dict[str, int] = {}
    address_at: dict[str, int] = {}
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, Mapping) or not raw.get("host"):
            raise ValidationError(f"nodes[{i}]: expected a mapping with 'host'")
        inputs.closed_keys(raw, f"nodes[{i}]", allowed=_NODE_KEYS)
        host = str(raw["host"])
        # A repeated host would otherwise surface later as "missing tokens" or a
        # replica set that names one machine twice.
        if host in first_at:
            raise ValidationError(
                f"nodes[{i}].host: duplicate host {host!r} (also nodes[{first_at[host]}])"
            )
        first_at[host] = i
        node = Node(
            host=host,
            address=str(raw.get("address", host)),
            dc=str(raw.get("dc", raw.get("datacenter", "datacenter1"))),
            rack=str(raw.get("rack", "rack1")),
        )
        if node.address in address_at:
            raise ValidationError(
                f"nodes[{i}].address: duplicate address {node.address!r} "
                f"(also nodes[{address_at[node.address]}])"
            )
        address_at[node.address] = i
        nodes.append(node)
        if "tokens" in raw:
            toks = inputs.sequence(raw["tokens"], f"nodes[{i}].tokens", min_len=1)
            tokens[host] = [
                inputs.integer(t, f"nodes[{i}].tokens[{k}]", lo=TOKEN_MIN, hi=TOKEN_MAX)
                for k, t in enumerate(toks)
            ]
    return nodes, tokens


def _parse_ranges(
    raw_ranges: Any, replication: Mapping[str, Any], by_name: Mapping[str, str]
) -> list[ReplicaSet]:
    """The distinct replica sets of a ring description's ``token_ranges``."""
    if not isinstance(raw_ranges, list) or not raw_ranges:
        raise ValidationError("token_ranges: expected a non-empty list")
    sets: list[ReplicaSet] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for i, raw in enumerate(raw_ranges):
        if not isinstance(raw, Mapping) or not isinstance(raw.get("replicas"), Mapping):
            raise ValidationError(
                f"token_ranges[{i}].replicas: expected a mapping keyspace -> hosts"
            )
        inputs.closed_keys(raw, f"token_ranges[{i}]", allowed=("start", "end", "replicas"))
        start, end = (
            None if raw.get(k) is None
            else inputs.integer(raw[k], f"token_ranges[{i}].{k}", lo=TOKEN_MIN, hi=TOKEN_MAX)
            for k in ("start", "end")
        )
        for ks, hosts in raw["replicas"].items():
            if ks not in replication:
                raise ValidationError(f"token_ranges[{i}].replicas: unknown keyspace {ks!r}")
            if not isinstance(hosts, list) or not hosts:
                raise ValidationError(
                    f"token_ranges[{i}].replicas.{ks}: expected a non-empty host list"
                )
            resolved: list[str] = []
            for j, h in enumerate(hosts):
                if str(h) not in by_name:
                    raise ValidationError(
                        f"token_ranges[{i}].replicas.{ks}[{j}]: unknown host {h!r}"
                    )
                resolved.append(by_name[str(h)])
            if len(set(resolved)) != len(resolved):
                raise ValidationError(f"token_ranges[{i}].replicas.{ks}: a host appears twice")
            key = (str(ks), tuple(sorted(resolved)))
            if key in seen:
                continue
            seen.add(key)
            sets.append(
                ReplicaSet(keyspace=str(ks), start=start, end=end, replicas=tuple(resolved))
            )
    return sets


def _parse_keyspaces(raw: Any, hosts_in_dc: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``{keyspace: {dc: rf}}`` with every RF in [0, hosts of the DC]."""
    if not isinstance(raw, Mapping) or not raw:
        raise ValidationError("keyspaces: expected a mapping {name: {replication: {dc: rf}}}")
    dcs = set(hosts_in_dc)
    out: dict[str, dict[str, int]] = {}
    for ks, spec in raw.items():
        rep = spec.get("replication") if isinstance(spec, Mapping) else None
        if not isinstance(rep, Mapping):
            raise ValidationError(f"keyspaces.{ks}.replication: expected a mapping dc -> rf")
        inputs.closed_keys(spec, f"keyspaces.{ks}", allowed=("replication",))
        rf_by_dc: dict[str, int] = {}
        for key, value in rep.items():
            if key == "class":
                continue
            where = f"keyspaces.{ks}.replication.{key}"
            rf = _rf_value(value, where)
            if key == "replication_factor":
                if len(dcs) != 1:
                    raise ValidationError(
                        f"keyspaces.{ks}.replication: replication_factor needs a single-DC ring"
                    )
                dc = next(iter(dcs))
            elif key not in dcs:
                raise ValidationError(f"keyspaces.{ks}.replication: unknown datacenter {key!r}")
            else:
                dc = str(key)
            # Refused, not clipped: Cassandra would accept the keyspace but could not
            # place the replicas, so writes at QUORUM would fail on the real cluster.
            if rf > hosts_in_dc[dc]:
                raise ValidationError(
                    f"{where}: RF {rf} is more than the {hosts_in_dc[dc]} host(s) of "
                    f"datacenter {dc!r}"
                )
            rf_by_dc[dc] = rf
        if not any(rf_by_dc.values()):
            raise ValidationError(f"keyspaces.{ks}.replication: no datacenter with RF > 0")
        out[str(ks)] = {dc: rf for dc, rf in rf_by_dc.items() if rf > 0}
    return out


def _rf_value(value: Any, where: str) -> int:
    # Strings are accepted: cassandra-driver reports replication options as strings.
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValidationError(f"{where}: expected an integer, got {value!r}") from None
    try:
        return inputs.integer(value, where, lo=0)
    except ValidationError as exc:
        if "out of range" in str(exc):
            raise ValidationError(f"{where}: negative RF {value}") from None
        raise


def _nts_replicas(
    ring: Sequence[tuple[int, str]],
    start: int,
    want: Mapping[str, int],
    by_host: Mapping[str, Node],
    racks_in_dc: Mapping[str, set[str]],
) -> tuple[str, ...]:
    """Replicas of the range ending at ``ring[start]`` (NetworkTopologyStrategy).

    ``want`` is the number of replicas per DC (RF capped at the DC's node count).
    """
    chosen: list[str] = []
    chosen_set: set[str] = set()
    count = dict.fromkeys(want, 0)
    seen_racks: dict[str, set[str]] = {dc: set() for dc in want}
    skipped: dict[str, list[str]] = {dc: [] for dc in want}
    n = len(ring)
    for k in range(n):
        if all(count[dc] >= want[dc] for dc in want):
            break
        host = ring[(start + k) % n][1]
        if host in chosen_set:
            continue
        node = by_host[host]
        dc = node.dc
        if dc not in want or count[dc] >= want[dc]:
            continue
        if node.rack not in seen_racks[dc]:
            seen_racks[dc].add(node.rack)
            chosen.append(host)
            chosen_set.add(host)
            count[dc] += 1
            if seen_racks[dc] == racks_in_dc[dc]:
                while skipped[dc] and count[dc] < want[dc]:
                    h = skipped[dc].pop(0)
                    chosen.append(h)
                    chosen_set.add(h)
                    count[dc] += 1
        elif seen_racks[dc] == racks_in_dc[dc]:
            chosen.append(host)
            chosen_set.add(host)
            count[dc] += 1
        elif host not in skipped[dc]:
            skipped[dc].append(host)
    return tuple(chosen)


# ---------------------------------------------------------------- requirements
@dataclass(frozen=True)
class Requirement:
    """One availability constraint: at most ``cap`` of ``members`` in a batch."""

    members: tuple[int, ...]  # node indices
    need: int
    rf: int
    scope: str  # "all" or a DC name
    source: ReplicaSet


def _need(cl: str, rf: int) -> int:
    if cl in ("ONE", "LOCAL_ONE"):
        return 1
    if cl == "TWO":
        return 2
    if cl == "THREE":
        return 3
    if cl == "ALL":
        return rf
    return rf // 2 + 1  # QUORUM, SERIAL, LOCAL_QUORUM, LOCAL_SERIAL, EACH_QUORUM


def normalise_cl(consistency_level: str) -> str:
    cl = str(consistency_level).upper()
    if cl not in CONSISTENCY_LEVELS:
        raise ValidationError(
            f"consistency_level: unknown {consistency_level!r}; "
            f"expected one of {', '.join(CONSISTENCY_LEVELS)}"
        )
    return cl


def requirements(
    ring: Ring, *, consistency_level: str, keyspaces: Iterable[str] | None = None
) -> list[Requirement]:
    """The distinct (replica set, scope, need) constraints of ``ring`` for a CL.

    Raises
    ------
    ValidationError
        For an unknown consistency level or keyspace, or a CL that needs more replicas
        than a keyspace has (e.g. THREE with RF 2).
    """
    cl = normalise_cl(consistency_level)
    if keyspaces is not None:
        wanted = list(keyspaces)
        for ks in wanted:
            if ks not in ring.replication:
                raise ValidationError(f"keyspaces: unknown keyspace {ks!r}")
        selected = set(wanted)
    else:
        selected = set(ring.replication)
    index = ring._index
    out: dict[tuple[tuple[int, ...], int], Requirement] = {}
    for rs in ring.replica_sets:
        if rs.keyspace not in selected:
            continue
        rf_by_dc = ring.replication[rs.keyspace]
        members = [index[h] for h in rs.replicas]
        if CONSISTENCY_LEVELS[cl] == "global":
            groups = {"all": (members, sum(rf_by_dc.values()))}
        else:
            groups = {
                dc: ([m for m in members if ring.nodes[m].dc == dc], rf)
                for dc, rf in rf_by_dc.items()
            }
        for scope, (group, rf) in groups.items():
            need = _need(cl, rf)
            if need > rf:
                raise ValidationError(
                    f"consistency_level: {cl} needs {need} replicas but keyspace "
                    f"{rs.keyspace!r} has RF {rf}" + ("" if scope == "all" else f" in {scope}")
                )
            key = (tuple(sorted(group)), need)
            if key not in out:
                out[key] = Requirement(
                    members=key[0], need=need, rf=rf, scope=scope, source=rs
                )
    return list(out.values())


# -------------------------------------------------------------------- checks
def check_batch(
    ring: Ring,
    batch: Iterable[str],
    *,
    down: Iterable[str] = (),
    consistency_level: str,
    tolerated_failures: int = 0,
    keyspaces: Iterable[str] | None = None,
) -> None:
    """Raise unless taking ``batch`` down (with ``down`` already down) is safe.

    This is the pre-flight re-check the executor runs against the live ring.

    Parameters
    ----------
    ring
        The ring as it is now.
    batch
        Hosts about to be taken down.
    down
        Hosts already down (they count as unavailable).
    consistency_level, tolerated_failures, keyspaces
        As for :func:`safe_batches`.

    Raises
    ------
    ValidationError
        An unknown host or consistency level, or negative tolerated failures.
    UnsafeBatchError
        Naming the host(s) of the batch and the replica set left below the CL.
    """
    if tolerated_failures < 0:
        raise ValidationError(f"tolerated_failures: must be >= 0, got {tolerated_failures}")
    batch_hosts = list(batch)
    down_hosts = list(down)
    for label, hosts in (("batch", batch_hosts), ("down", down_hosts)):
        for i, h in enumerate(hosts):
            if h not in ring:
                raise ValidationError(f"{label}[{i}]: unknown host {h!r}")
    cl = normalise_cl(consistency_level)
    index = ring._index
    batch_idx = {index[h] for h in batch_hosts}
    down_idx = {index[h] for h in down_hosts}
    for req in requirements(ring, consistency_level=cl, keyspaces=keyspaces):
        members = set(req.members)
        in_batch = members & batch_idx
        already = members & down_idx - batch_idx
        up = len(members) - len(in_batch) - len(already)
        if up - tolerated_failures >= req.need:
            continue
        scope = "" if req.scope == "all" else f" in {req.scope}"
        names = ", ".join(ring.nodes[i].host for i in sorted(in_batch)) or "none"
        downs = ", ".join(ring.nodes[i].host for i in sorted(already))
        raise UnsafeBatchError(
            f"batch unsafe for {cl} with {tolerated_failures} tolerated failure(s): "
            f"taking down {names}"
            + (f" (with {downs} already down)" if downs else "")
            + f" leaves {up} of {len(members)} replica(s){scope} up for "
            f"{req.source.describe()}; {cl} needs {req.need}"
            + (f" plus {tolerated_failures} spare" if tolerated_failures else "")
        )


def replica_neighbours(
    ring: Ring,
    batch: Iterable[str],
    *,
    consistency_level: str,
    keyspaces: Iterable[str] | None = None,
) -> list[str]:
    """The hosts outside ``batch`` that share a replica set with it, within the scope the
    consistency level counts (LOCAL_QUORUM: the same DC), in ring-description order.

    Only their death can leave one of the batch's replica sets short while it is down:
    what a draining node watches, a handful of peers on a large vnode ring rather than all.
    """
    index = ring._index
    batch_idx = set()
    for i, host in enumerate(batch):
        if host not in ring:
            raise ValidationError(f"batch[{i}]: unknown host {host!r}")
        batch_idx.add(index[host])
    near: set[int] = set()
    for req in requirements(ring, consistency_level=consistency_level, keyspaces=keyspaces):
        if batch_idx.intersection(req.members):
            near.update(req.members)
    return [ring.nodes[i].host for i in sorted(near - batch_idx)]
