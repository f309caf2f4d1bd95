"""``kairos validate-plan PLAN``: check a plan file before anything touches a node.

The Ansible executor runs it first; a non-zero exit carries the failing field and why.

Given a ring (``--ring FILE``, ``--hosts H1,H2,... --rf N`` or ``--inventory DIR --rf N``),
every batch of every step of a Cassandra plan is also checked statically for safety at the
plan's consistency level and tolerated failures (:func:`planner.topology.check_batch`, the
check the executor's live pre-flight runs): an unsafe batch is refused here, naming the
step, the batch, the nodes it takes down and the replica set it leaves short.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

#: What explain and validate-plan say when there is no ring to check the batches on.
NO_RING = "batch safety not checked: no ring given"
#: How to give one (the ring options of validate-plan and explain).
RING_HINT = "--ring FILE, --hosts H1,H2,... --rf N, or --inventory DIR --rf N"


def register(subparsers: Any) -> None:
    """Add the ``validate-plan`` sub-command."""
    p = subparsers.add_parser(
        "validate-plan",
        help="check a plan file against the plan-file contract (and its batches against a ring)",
        description="Validate a plan file (docs/plan-file.md). With a ring (--ring, --hosts with "
        "--rf, or --inventory with --rf) also check that every batch of every step is safe at "
        "the plan's consistency level and tolerated failures. Exit 0 when valid; otherwise "
        "print the failing field path (or the step, batch and replica set) and exit 2 (1 with "
        "--json).",
    )
    p.add_argument("plan", metavar="PLAN", help="the plan file (YAML)")
    add_ring_arguments(p)
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    p.set_defaults(func=run)


def add_ring_arguments(p: argparse.ArgumentParser) -> None:
    """The host and ring options shared by ``validate-plan`` and ``explain``."""
    p.add_argument(
        "--hosts",
        help="comma-separated inventory hosts of the engine: every batch host must be one of "
        "them and each must appear in exactly one batch of a restarting step; with --rf, also "
        "the ring (ring order, one DC, one token per node) the batches are checked on",
    )
    p.add_argument(
        "--rf", type=int,
        help="replication factor (per datacenter) of the ring built from --hosts or --inventory",
    )
    p.add_argument(
        "--ring",
        help="ring description (YAML or JSON, e.g. the live ring cassandra_cluster_facts "
        "writes) to check every batch on",
    )
    p.add_argument(
        "--inventory", metavar="DIR",
        help="Ansible inventory (directory or YAML file): the cassandra group's hosts with "
        "their cassandra_dc / cassandra_rack (one token per node); with --rf, the ring the "
        "batches are checked on",
    )


def parse_hosts(value: str | None) -> list[str] | None:
    """Split a ``--hosts`` value (``h1,h2,...``) into names; None when not given."""
    if value is None:
        return None
    return [h.strip() for h in value.split(",") if h.strip()]


# ------------------------------------------------------------------ the ring
@dataclass(frozen=True)
class RingChoice:
    """The ring the batches are checked on (None: not checked) and the known hosts."""

    ring: Any  # planner.topology.Ring | None
    source: str | None
    known_hosts: list[str] | None


def ring_from_args(args: argparse.Namespace, *, engine: str) -> RingChoice:
    """The ring and inventory hosts the ring options describe.

    Raises
    ------
    ValidationError
        Contradictory options (``--rf`` with ``--ring``, ``--rf`` alone, a ring for a
        Redis plan) or an unreadable ring or inventory.
    """
    from planner.errors import ValidationError
    from planner.topology import Ring, load_ring

    hosts = parse_hosts(args.hosts)
    ring_file = getattr(args, "ring", None)
    inventory = getattr(args, "inventory", None)
    rf = getattr(args, "rf", None)
    if rf is not None and rf < 1:
        raise ValidationError(f"--rf: must be at least 1, got {rf}")
    if ring_file and rf is not None:
        raise ValidationError("--rf: the ring file gives the replication; drop --rf or --ring")
    if rf is not None and hosts is None and not inventory:
        raise ValidationError("--rf: give the hosts it replicates over (--hosts or --inventory)")
    if engine != "cassandra" and (ring_file or rf is not None or inventory):
        raise ValidationError(
            f"--ring/--rf/--inventory: batch safety is checked for Cassandra plans, "
            f"this is a {engine} plan"
        )
    inv_nodes = inventory_nodes(inventory) if inventory else None
    known = hosts if hosts is not None else (
        [n["host"] for n in inv_nodes] if inv_nodes is not None else None
    )
    if ring_file:
        ring = load_ring(ring_file)
        return RingChoice(ring, f"the ring {ring_file}",
                          known if known is not None else list(ring.hosts))
    if inv_nodes is not None and rf is not None:
        ring = inventory_ring(inv_nodes, rf=rf)
        dcs = sorted({n.dc for n in ring.nodes})
        return RingChoice(
            ring, f"the ring of the inventory {inventory} (RF {rf} in {', '.join(dcs)}, "
            "one token per node)", known,
        )
    if hosts is not None and rf is not None:
        if not hosts:
            raise ValidationError("--hosts: expected at least one host")
        return RingChoice(
            Ring.simple(hosts, rf=rf),
            f"the ring {','.join(hosts)} (RF {rf}, one token per node)", known,
        )
    return RingChoice(None, None, known)


# ------------------------------------------------------------- the inventory
def _inventory_loader() -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that reads ``!vault`` and other tagged values as None."""

    def ignore(loader: Any, suffix: str, node: Any) -> None:
        return None

    Loader.add_multi_constructor("!", ignore)
    return Loader


def _read_yaml(path: Path) -> Any:
    import yaml

    from planner import inputs
    from planner.errors import ValidationError

    text = inputs.read_text(path, kind=inputs.CONFIG)
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        return None  # a vaulted file: secrets, not topology
    try:
        return yaml.load(text, Loader=_inventory_loader())  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ValidationError(f"{path}: not valid YAML: {exc}") from None


def _vars_files(base: Path) -> dict[str, Any]:
    """``group_vars/<name>{,.yml,.yaml}`` or ``group_vars/<name>/*.yml`` merged (host_vars too)."""
    out: dict[str, Any] = {}
    candidates = [base.with_name(base.name + ext) for ext in ("", ".yml", ".yaml")]
    for cand in candidates:
        if cand.is_dir():
            files = sorted(p for p in cand.iterdir() if p.suffix in (".yml", ".yaml", ""))
        elif cand.is_file():
            files = [cand]
        else:
            continue
        for f in files:
            if f.is_file():
                data = _read_yaml(f)
                if isinstance(data, Mapping):
                    out.update(data)
    return out


def inventory_nodes(path: str | Path, *, group: str = "cassandra") -> list[dict[str, str]]:
    """The hosts of ``group`` in a YAML inventory with their ``cassandra_dc``/``cassandra_rack``.

    ``path`` is an inventory directory (its ``*.yml``/``*.yaml`` files, ``group_vars/``,
    ``host_vars/``) or one YAML inventory file (with those directories beside it). Variables
    follow Ansible's order: ``all``, then groups from the outermost, then the host's own.
    Missing values are the role's defaults (``datacenter1``, ``rack1``).

    Raises
    ------
    ValidationError
        An unreadable inventory, no such group or no host in it, or a DC/rack that is a
        Jinja template (give ``--ring`` then).
    """
    from planner.errors import ValidationError

    p = Path(path)
    files, base = _inventory_files(p)
    inv = _Inventory()
    for f in files:
        inv.read(f)
    hosts = inv.members.get(group, [])
    if not hosts:
        raise ValidationError(f"--inventory: {p}: no host in the group {group!r}")
    return [_inventory_node(host, inv.host_vars_merged(host, base)) for host in hosts]


def _inventory_files(p: Path) -> tuple[list[Path], Path]:
    """The inventory's YAML files and the folder its group_vars/ and host_vars/ are in."""
    from planner.errors import ValidationError

    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".yml", ".yaml"))
        base = p
    elif p.is_file():
        files, base = [p], p.parent
    else:
        raise ValidationError(f"--inventory: {p}: no such file or directory")
    if not files:
        raise ValidationError(f"--inventory: {p}: no YAML inventory file (hosts.yml) in it")
    return files, base


@dataclass
class _Inventory:
    """Groups, hosts and inline variables read from YAML inventory files."""

    depth: dict[str, int] = field(default_factory=lambda: {"all": 0})
    group_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: group -> hosts, inventory order, children included
    members: dict[str, list[str]] = field(default_factory=dict)
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_groups: dict[str, set[str]] = field(default_factory=dict)

    def read(self, f: Path) -> None:
        """Add one inventory file's groups."""
        from planner.errors import ValidationError

        data = _read_yaml(f)
        if data is None:
            return
        if not isinstance(data, Mapping):
            raise ValidationError(f"--inventory: {f}: expected a YAML inventory (groups)")
        for name, spec in data.items():
            top = name == "all"
            self.walk(str(name), spec, 0 if top else 1, () if top else ("all",))

    def walk(self, name: str, spec: Any, level: int, ancestors: tuple[str, ...]) -> list[str]:
        """Record group ``name`` (its vars, hosts and children); returns its hosts."""
        from planner.errors import ValidationError

        self.depth[name] = max(self.depth.get(name, 0), level)
        if spec is None:
            spec = {}
        if not isinstance(spec, Mapping):
            raise ValidationError(f"--inventory: group {name!r}: expected a mapping")
        self.group_vars.setdefault(name, {}).update(dict(spec.get("vars") or {}))
        found: list[str] = []
        for host, hv in dict(spec.get("hosts") or {}).items():
            host = str(host)
            self.host_vars.setdefault(host, {}).update(dict(hv or {}))
            self.host_groups.setdefault(host, set()).update((name, *ancestors))
            found.append(host)
        for child, cspec in dict(spec.get("children") or {}).items():
            found += self.walk(str(child), cspec, level + 1, (name, *ancestors))
        have = self.members.setdefault(name, [])
        have += [h for h in found if h not in have]
        return found

    def host_vars_merged(self, host: str, base: Path) -> dict[str, Any]:
        """The host's variables in Ansible's order: all, outer groups first, the host's own."""
        groups = sorted(
            self.host_groups.get(host, set()) | {"all"}, key=lambda g: (self.depth[g], g)
        )
        merged: dict[str, Any] = {}
        for g in groups:
            merged.update(_vars_files(base / "group_vars" / g))
            merged.update(self.group_vars.get(g, {}))
        merged.update(_vars_files(base / "host_vars" / host))
        merged.update(self.host_vars.get(host, {}))
        return merged


def _inventory_node(host: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """``{"host", "dc", "rack"}`` from the host's variables (the role's defaults if unset)."""
    from planner.errors import ValidationError

    node = {"host": host}
    for key, var, default in (("dc", "cassandra_dc", "datacenter1"),
                              ("rack", "cassandra_rack", "rack1")):
        value = hostvars.get(var, default)
        if not isinstance(value, str | int) or "{{" in str(value) or "{%" in str(value):
            raise ValidationError(
                f"--inventory: {host}: {var} is {value!r}, not a plain name; "
                "give the ring with --ring instead"
            )
        node[key] = str(value)
    return node


def inventory_ring(nodes: Sequence[Mapping[str, str]], *, rf: int) -> Any:
    """A one-token-per-node ring over inventory nodes: RF ``rf`` in each of their DCs.

    Within a datacenter the tokens are evenly spaced in inventory order (each DC offset by
    its index, as Cassandra's token allocation for several DCs does), so NetworkTopology-
    Strategy walks each DC's nodes in inventory order, racks taken into account.
    """
    from planner.topology import Ring

    by_dc: dict[str, list[Mapping[str, str]]] = {}
    for n in nodes:
        by_dc.setdefault(n["dc"], []).append(n)
    tokens: dict[str, int] = {}
    for d, members in enumerate(by_dc.values()):
        step = 2**64 // len(members)
        for i, n in enumerate(members):
            tokens[n["host"]] = -(2**63) + i * step + d
    described = [{**n, "tokens": [tokens[n["host"]]]} for n in nodes]
    return Ring.from_dict({
        "nodes": described,
        "keyspaces": {"kairos": {"replication": {
            dc: min(rf, len(members)) for dc, members in by_dc.items()
        }}},
    })


# ------------------------------------------------------------- batch safety
@dataclass(frozen=True)
class BatchVerdict:
    """One batch of one step, checked on a ring (``problem`` None: safe)."""

    step: str
    index: int  # 1-based
    of: int
    hosts: tuple[str, ...]
    problem: str | None
    #: Why the batch is safe (planner.topology.batch_reasons); empty when it is not.
    reason: str = ""

    def describe(self) -> str:
        """``step s1 batch 2 of 3 [cass1, cass2]: <why>``."""
        return (f"step {self.step} batch {self.index} of {self.of} [{', '.join(self.hosts)}]: "
                f"{self.problem or 'safe'}")


def batch_safety(plan: Any, ring: Any) -> list[BatchVerdict]:
    """Check every batch of every step of ``plan`` on ``ring``, as the pre-flight does.

    The plan's consistency level and tolerated failures apply; no node is assumed down.
    An AGGRESSIVE plan's batches are not checked (the pre-flight does not either): the
    result is empty.
    """
    from planner.errors import ValidationError
    from planner.topology import UnsafeBatchError, batch_reasons, check_batch

    av = plan.availability
    if av.aggressive:
        return []
    out: list[BatchVerdict] = []
    for step in plan.steps:
        verdicts: list[BatchVerdict] = []
        for i, batch in enumerate(step.batches):
            problem: str | None = None
            missing = [h for h in batch if h not in ring]
            if missing:
                problem = f"host {missing[0]!r} is not in the ring"
            else:
                try:
                    check_batch(ring, batch, consistency_level=av.consistency_level,
                                tolerated_failures=av.tolerated_failures)
                except (UnsafeBatchError, ValidationError) as exc:
                    problem = str(exc)
            verdicts.append(BatchVerdict(step.id, i + 1, len(step.batches), tuple(batch),
                                         problem))
        safe = [v for v in verdicts if not v.problem]
        reasons = batch_reasons(ring, [v.hosts for v in safe],
                                consistency_level=av.consistency_level,
                                tolerated_failures=av.tolerated_failures) if safe else ()
        why = dict(zip((v.index for v in safe), reasons, strict=True))
        out += [replace(v, reason=why.get(v.index, "")) for v in verdicts]
    return out


def unsafe_message(plan_path: str, source: str, unsafe: Sequence[BatchVerdict]) -> str:
    """The refusal for the unsafe batches of a plan (one line per batch)."""
    lines = [f"{plan_path}: {len(unsafe)} unsafe batch(es) on {source}:"]
    lines += [f"  {v.describe()}" for v in unsafe]
    return "\n".join(lines)


# ------------------------------------------------------------------ command
def run(args: argparse.Namespace) -> int:
    """Validate ``args.plan``; return 0 when valid; raise (exit 2) or, with --json, return 1."""
    from planner.errors import KairosError
    from planner.plan import load_plan
    from planner.topology import UnsafeBatchError

    verdicts: list[BatchVerdict] = []
    try:
        engine = load_plan(args.plan).engine
        choice = ring_from_args(args, engine=engine)
        plan = load_plan(args.plan, known_hosts=choice.known_hosts)
        if choice.ring is not None:
            verdicts = batch_safety(plan, choice.ring)
            unsafe = [v for v in verdicts if v.problem]
            if unsafe:
                raise UnsafeBatchError(unsafe_message(args.plan, str(choice.source), unsafe))
    except KairosError as exc:
        if not args.json:
            raise
        out: dict[str, Any] = {"valid": False, "plan": args.plan, "error": str(exc)}
        if verdicts:
            out["unsafe_batches"] = [
                {"step": v.step, "batch": v.index, "hosts": list(v.hosts), "reason": v.problem}
                for v in verdicts if v.problem
            ]
        print(json.dumps(out))
        return 1
    if choice.ring is None:
        safety = NO_RING if plan.engine == "cassandra" else None
    elif plan.availability.aggressive:
        safety = "batch safety not checked: the plan is AGGRESSIVE (availability may drop)"
    else:
        safety = (f"{len(verdicts)} batch(es) safe for {plan.availability.consistency_level} "
                  f"on {choice.source}")
    summary: dict[str, Any] = {
        "valid": True,
        "plan": args.plan,
        "engine": plan.engine,
        "cluster": plan.cluster,
        "steps": len(plan.steps),
        "restart_steps": sum(1 for s in plan.steps if s.restart),
        "hosts": sorted({h for s in plan.steps for b in s.batches for h in b}),
        "batch_safety": safety,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{args.plan}: valid {plan.engine} plan for {plan.cluster!r}: "
            f"{summary['steps']} step(s), {summary['restart_steps']} with restarts"
            + (f"; {safety}" if safety else "")
        )
    return 0
