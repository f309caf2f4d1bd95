"""The hosts of an Ansible YAML inventory and the one-token-per-node ring they describe.

``kairos validate-plan --inventory`` and ``kairos explain --inventory`` read the cassandra
group's hosts with their ``cassandra_dc`` / ``cassandra_rack`` (:func:`inventory_nodes`)
and, given an RF, check the plan's batches on :func:`inventory_ring`. Vaulted files and
``!vault`` values are secrets, not topology: they are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["inventory_nodes", "inventory_ring"]


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
    from planner.topology.ring import Ring

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
