"""Each node's resource use, read where the node runs, as gauges of a collection round.

``kairos collect --resources FILE`` adds to each node's sample of the round the use its
envelope holds (docs/envelopes.md): the file maps a node's name (as in ``--hosts``) to what
``kairos_envelope`` (state ``read``) returned for it on its own host.
playbooks/tasks/collect_resources.yml writes it before each round: Ansible's result per
node, so its own keys (``item``, ``changed``, ``invocation``...) are there too and ignored.

What is kept, as gauges of the node's sample (:data:`planner.workload.store.RESOURCE_GAUGES`):

============================  ==================================  ==========================
gauge                         from the read                       the store gives
============================  ==================================  ==========================
``cpu_seconds``               ``usage.cpu_seconds`` (the node's   ``cpu_cores``: its rate
                              processes, user + system)
``cpu_throttled_seconds``     ``usage.throttled_seconds`` (the    ``cpu_throttled_share``:
                              cgroup's, per CPU)                  its rate
``memory_bytes``              ``usage.memory_bytes`` (page cache  the reading
                              included)
``page_cache_bytes``          ``usage.page_cache_bytes``          the reading
``read_ios``                  ``usage.read_ios`` (the cgroup's)   ``read_iops``: its rate
``cpu_limit_cores``           ``limits.cpu``                      the reading (when capped)
``memory_limit_bytes``        ``limits.memory``                   the reading (when capped)
``read_iops_limit``           ``limits.read_iops``                the reading (when capped)
============================  ==================================  ==========================

A node without an envelope gives no resource gauges, never zeros: the playbook skipped it
(not run by Kairos's process manager: a systemd unit is not read yet), it was unreachable,
the module failed, or it found no envelope (``exists: false``, with the reason when
cgroups are unusable there). :attr:`Resources.missing` says which and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner import inputs
from planner.errors import ValidationError
from planner.workload.store import CounterSample

#: The file ``--resources`` reads (a few KiB per node).
RESOURCES = inputs.FileKind(what="--resources file", max_bytes=16 * inputs.MiB)
#: kairos_envelope's ``usage`` key -> gauge (all required when the envelope exists).
USAGE_GAUGES: dict[str, str] = {
    "cpu_seconds": "cpu_seconds",
    "throttled_seconds": "cpu_throttled_seconds",
    "memory_bytes": "memory_bytes",
    "page_cache_bytes": "page_cache_bytes",
    "read_ios": "read_ios",
}
#: kairos_envelope's ``limits`` key -> gauge (null: not capped, no gauge).
LIMIT_GAUGES: dict[str, str] = {
    "cpu": "cpu_limit_cores",
    "memory": "memory_limit_bytes",
    "read_iops": "read_iops_limit",
}
GIB = float(1 << 30)


@dataclass(frozen=True)
class Resources:
    """What a resource file gave: each node's resource gauges, and why the other nodes of
    the round gave none (node -> reason)."""

    gauges: Mapping[str, Mapping[str, float]]
    missing: Mapping[str, str]

    def missing_text(self) -> str:
        """One line naming the nodes without resource gauges, grouped by reason ("" if none)."""
        by_reason: dict[str, list[str]] = {}
        for node, reason in sorted(self.missing.items()):
            by_reason.setdefault(reason, []).append(node)
        return "; ".join(f"{', '.join(nodes)}: {reason}" for reason, nodes in by_reason.items())


def load_resources(path: str | Path, *, nodes: Sequence[str]) -> Resources:
    """Read a resource file for the round's ``nodes`` (their names in ``--hosts``).

    Raises
    ------
    ValidationError
        Naming the file, the node and the field: a missing or unreadable file, text that is
        not JSON, a node not in ``nodes``, an entry that is not kairos_envelope's result, or
        a reading that is not a non-negative number.
    """
    data = inputs.load_json(path, kind=RESOURCES)
    where = f"{RESOURCES.what} {path}"
    with inputs.in_file(where):
        entries = inputs.mapping(data, "the file (node -> kairos_envelope's result)")
        unknown = sorted(set(entries) - set(nodes))
        if unknown:
            raise ValidationError(
                f"node {unknown[0]!r} is not one of the round's nodes ({', '.join(nodes)})"
            )
        gauges: dict[str, dict[str, float]] = {}
        missing: dict[str, str] = {}
        for node, entry in entries.items():
            read = read_entry(inputs.mapping(entry, node), node)
            if isinstance(read, str):
                missing[node] = read
            else:
                gauges[node] = read
    for node in nodes:
        if node not in entries:
            missing[node] = f"not in {path}"
    return Resources(gauges=gauges, missing=missing)


def read_entry(entry: Mapping[str, Any], node: str) -> dict[str, float] | str:
    """One node's resource gauges from its kairos_envelope result, or why it has none."""
    if entry.get("skipped"):
        return ("not read: skipped (only a node under Kairos's process manager has an "
                "envelope; systemd units are not read)")
    if entry.get("unreachable"):
        return f"not read: unreachable ({_last_line(entry.get('msg'))})"
    if "exists" not in entry:
        if "msg" in entry:
            return f"not read: {_last_line(entry['msg'])}"
        raise ValidationError(f"{node}.exists: missing (is this kairos_envelope's result?)")
    exists = entry["exists"]
    if not isinstance(exists, bool):
        raise ValidationError(f"{node}.exists: expected true/false, got {exists!r}")
    if not exists:
        if entry.get("reason"):
            return f"no envelope: {_last_line(entry['reason'])}"
        invocation = entry.get("invocation")
        args = invocation.get("module_args") if isinstance(invocation, Mapping) else None
        name = args.get("name") if isinstance(args, Mapping) else None
        return f"no envelope named {name}" if name else "no envelope"
    usage = inputs.mapping(entry.get("usage"), f"{node}.usage")
    out = {}
    for key, gauge in USAGE_GAUGES.items():
        if key not in usage:
            raise ValidationError(f"{node}.usage.{key}: missing")
        out[gauge] = inputs.number(usage[key], f"{node}.usage.{key}", lo=0)
    limits = inputs.mapping(entry.get("limits", {}), f"{node}.limits")
    for key, gauge in LIMIT_GAUGES.items():
        if limits.get(key) is not None:
            out[gauge] = inputs.number(limits[key], f"{node}.limits.{key}", lo=0)
    return out


def _last_line(text: Any) -> str:
    """The last non-empty line of a message (an SSH failure's cause comes last)."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def with_resources(samples: Iterable[CounterSample], resources: Resources) -> list[CounterSample]:
    """``samples`` with each node's resource gauges added to its node-scope sample."""
    return [
        dataclasses.replace(s, gauges={**s.gauges, **resources.gauges[s.node]})
        if s.scope == "node" and s.node in resources.gauges else s
        for s in samples
    ]


def describe(values: Mapping[str, float]) -> str:
    """One node's resource use at a round, for a person (:meth:`Store.node_gauges` values):
    ``0.40 of 0.4 CPU (throttled 0.90 s/s), memory 1.50 of 1.50 GiB (page cache 0.50),
    166 read IOPS of 1500``; rates appear from a node's second round on."""
    parts = []
    if "cpu_cores" in values:
        cpu = f"{values['cpu_cores']:.2f}"
        if "cpu_limit_cores" in values:
            cpu += f" of {values['cpu_limit_cores']:g}"
        share = values.get("cpu_throttled_share")
        parts.append(f"{cpu} CPU" + (f" (throttled {share:.2f} s/s)" if share is not None else ""))
    if "memory_bytes" in values:
        memory = f"memory {values['memory_bytes'] / GIB:.2f}"
        if "memory_limit_bytes" in values:
            memory += f" of {values['memory_limit_bytes'] / GIB:.2f}"
        parts.append(f"{memory} GiB (page cache {values.get('page_cache_bytes', 0.0) / GIB:.2f})")
    if "read_iops" in values:
        iops = f"{values['read_iops']:.0f} read IOPS"
        if "read_iops_limit" in values:
            iops += f" of {values['read_iops_limit']:.0f}"
        parts.append(iops)
    return ", ".join(parts)
