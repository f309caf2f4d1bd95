"""Redis durability: an order on configurations, and the floor no plan goes below.

A :class:`DurabilityFloor` is what the operator declares (the inventory's
``kairos_redis_durability_floor``, ``kairos plan --durability-floor``) or, by default, what
the nodes run now (:func:`floor_of`). :meth:`DurabilityFloor.violations` says which fields
of a configuration fall below it; the planner drops such candidates
(planner.planning.pipeline) and the plan validator refuses a step that would run one
(planner.plan). docs/planning.md, "The durability floor", is the prose of these rules.

The order, field by field (a configuration meets the floor when it meets every field):

``appendonly``
    ``yes`` > ``no``. A floor of ``yes`` needs the append-only file; ``no`` needs nothing.
``appendfsync``
    ``always`` > ``everysec`` > ``no``, compared only when the floor has ``appendonly: yes``
    (without the AOF the fsync policy loses nothing more); a floor that names
    ``appendfsync`` without ``appendonly: yes`` is refused as meaningless.
``save``
    RDB snapshot rules ``<seconds> <changes>``: a policy meets the floor's when, for every
    floor rule ``(s, c)``, it has a rule ``(s', c')`` with ``s' <= s`` and ``c' <= c``: any
    run of writes that triggers the floor's rule triggers that one no later, so no
    snapshot the floor promises is missed. An empty policy (``""``, RDB off) meets only
    an empty floor. Kairos does not plan ``save`` (it is not in planner.model.spaces' Redis
    space), so the rule is checked on a configuration that carries ``save`` and holds
    trivially for the candidates, which keep the nodes' own policy.

Pure: no I/O, no planner imports beyond the error type.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.errors import ValidationError

__all__ = [
    "APPENDFSYNC_ORDER",
    "FIELDS",
    "DurabilityFloor",
    "Violation",
    "floor_of",
    "parse_floor",
    "parse_save",
    "plan_violations",
    "save_meets",
]

#: appendfsync policies, least durable first.
APPENDFSYNC_ORDER: tuple[str, ...] = ("no", "everysec", "always")
#: The fields a floor may name.
FIELDS: tuple[str, ...] = ("appendonly", "appendfsync", "save")

SaveRule = tuple[int, int]


@dataclass(frozen=True)
class Violation:
    """One field of a configuration below the floor, and why (a sentence fragment)."""

    field: str
    problem: str


def _bool(value: Any, where: str) -> bool:
    """A Redis yes/no (or YAML boolean)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("yes", "true"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("no", "false"):
        return False
    raise ValidationError(f"{where}: {value!r} is not yes or no")


def _fsync(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in APPENDFSYNC_ORDER:
        raise ValidationError(
            f"{where}: {value!r} is not one of {', '.join(reversed(APPENDFSYNC_ORDER))}"
        )
    return value.strip().lower()


def parse_save(value: Any, where: str = "save") -> tuple[SaveRule, ...]:
    """RDB rules from redis.conf's ``save`` value: ``"3600 1 300 100"``, ``""`` (none), or
    a list of ``"<seconds> <changes>"`` strings or ``[seconds, changes]`` pairs.

    Raises
    ------
    ValidationError
        ``<where>: ...`` naming the rule that is not two positive whole numbers.
    """
    if isinstance(value, str):
        words = value.replace('"', " ").split()
    elif isinstance(value, list | tuple):
        words = []
        for item in value:
            if isinstance(item, str):
                words += item.split()
            elif isinstance(item, list | tuple):
                words += list(item)
            else:
                words.append(item)
    else:
        raise ValidationError(
            f"{where}: {value!r} is not a save policy like '3600 1 300 100' (seconds changes ...)"
        )
    if len(words) % 2:
        raise ValidationError(
            f"{where}: {value!r} is not pairs of <seconds> <changes> (odd count of numbers)"
        )
    rules: list[SaveRule] = []
    for i in range(0, len(words), 2):
        pair = words[i:i + 2]
        try:
            seconds, changes = (int(str(w)) for w in pair)
        except ValueError:
            raise ValidationError(
                f"{where}: rule {' '.join(map(str, pair))!r} is not two whole numbers"
            ) from None
        if seconds < 1 or changes < 1:
            raise ValidationError(
                f"{where}: rule '{seconds} {changes}': seconds and changes must be >= 1"
            )
        rules.append((seconds, changes))
    return tuple(sorted(set(rules), reverse=True))  # as redis.conf lists them: longest first


def _save_text(rules: Sequence[SaveRule]) -> str:
    return " ".join(f"{s} {c}" for s, c in rules)


def save_meets(policy: Sequence[SaveRule], floor: Sequence[SaveRule]) -> SaveRule | None:
    """The first floor rule ``policy`` does not cover (None: it meets the floor).

    A rule ``(s, c)`` is covered by a policy rule ``(s', c')`` with ``s' <= s`` and
    ``c' <= c``.
    """
    for s, c in floor:
        if not any(ps <= s and pc <= c for ps, pc in policy):
            return (s, c)
    return None


@dataclass(frozen=True)
class DurabilityFloor:
    """The least durable Redis configuration a plan may run.

    Parameters
    ----------
    appendonly
        True: the append-only file is required.
    appendfsync
        With ``appendonly``: the least durable fsync policy allowed (None: any).
    save
        RDB rules every configuration that sets ``save`` must cover (empty: none).
    source
        Where the floor comes from, for the plan's provenance and ``kairos explain``.
    """

    appendonly: bool = False
    appendfsync: str | None = None
    save: tuple[SaveRule, ...] = ()
    source: str = "given"

    def __post_init__(self) -> None:
        if self.appendfsync is not None:
            _fsync(self.appendfsync, "appendfsync")
            if not self.appendonly:
                raise ValidationError(
                    "appendfsync: a floor on appendfsync needs appendonly: yes (without the "
                    "append-only file the fsync policy has no effect)"
                )

    def violations(self, config: Mapping[str, Any]) -> list[Violation]:
        """The fields of ``config`` (a Redis configuration, complete or partial: a missing
        ``appendonly`` is Redis' ``no``, a missing ``appendfsync`` its ``everysec``, a
        missing ``save`` is not checked) below this floor, in :data:`FIELDS` order."""
        out: list[Violation] = []
        aof = _bool(config.get("appendonly", False), "appendonly")
        if self.appendonly and not aof:
            out.append(Violation("appendonly", f"'no' is below the durability floor "
                                 f"'yes' ({self.source})"))
        fsync = _fsync(config.get("appendfsync", "everysec"), "appendfsync")
        if self.appendfsync is not None and aof and \
                APPENDFSYNC_ORDER.index(fsync) < APPENDFSYNC_ORDER.index(self.appendfsync):
            out.append(Violation("appendfsync", f"{fsync!r} is below the durability floor "
                                 f"{self.appendfsync!r} ({self.source}; always > everysec > no)"))
        if self.save and "save" in config:
            rules = parse_save(config["save"])
            missed = save_meets(rules, self.save)
            if missed is not None:
                out.append(Violation("save", (
                    f"{_save_text(rules) or 'no rule'!r} is below the durability floor "
                    f"{_save_text(self.save)!r} ({self.source}): no rule snapshots at least "
                    f"as often as '{missed[0]} {missed[1]}' (seconds <= {missed[0]} and "
                    f"changes <= {missed[1]})")))
        return out

    def excludes(self, config: Mapping[str, Any]) -> bool:
        """Whether ``config`` is below the floor."""
        return bool(self.violations(config))

    def to_dict(self) -> dict[str, Any]:
        """The floor as the plan's provenance records it (redis.conf spelling)."""
        out: dict[str, Any] = {"appendonly": "yes" if self.appendonly else "no"}
        if self.appendfsync is not None:
            out["appendfsync"] = self.appendfsync
        if self.save:
            out["save"] = _save_text(self.save)
        return out

    def describe(self) -> str:
        """One line: ``appendonly yes, appendfsync >= everysec, save covers '900 1'``."""
        parts = ["appendonly yes" if self.appendonly else "no append-only file required"]
        if self.appendfsync is not None:
            parts.append(f"appendfsync >= {self.appendfsync}")
        if self.save:
            parts.append(f"save covers {_save_text(self.save)!r}")
        return ", ".join(parts)


def parse_floor(data: Any, *, where: str = "--durability-floor",
                source: str | None = None) -> DurabilityFloor:
    """A floor from its declaration: a mapping of :data:`FIELDS` (redis.conf spelling).

    Raises
    ------
    ValidationError
        ``<where>.<field>: <problem>`` for an unknown field or a bad value, or ``<where>:``
        for a declaration that is not a mapping.
    """
    if not isinstance(data, Mapping):
        raise ValidationError(
            f"{where}: expected a mapping such as {{appendonly: yes, appendfsync: everysec}}, "
            f"got {data!r}"
        )
    for key in data:
        if key not in FIELDS:
            raise ValidationError(
                f"{where}.{key}: not a durability setting; a floor names "
                f"{', '.join(FIELDS)}"
            )
    aof = _bool(data.get("appendonly", False), f"{where}.appendonly")
    fsync = None
    if data.get("appendfsync") is not None:
        fsync = _fsync(data["appendfsync"], f"{where}.appendfsync")
        if not aof:
            raise ValidationError(
                f"{where}.appendfsync: a floor on appendfsync needs appendonly: yes "
                "(without the append-only file the fsync policy has no effect)"
            )
    save = parse_save(data["save"], f"{where}.save") if data.get("save") is not None else ()
    return DurabilityFloor(appendonly=aof, appendfsync=fsync, save=save,
                           source=source or where)


def floor_of(config: Mapping[str, Any], *, source: str = "the running configuration",
             ) -> DurabilityFloor:
    """The durability ``config`` gives (the default floor: what the nodes run now).

    With the append-only file on: it and the fsync policy; off: nothing about the AOF
    (``appendfsync`` then loses nothing). ``save`` when the configuration carries it.
    """
    aof = _bool(config.get("appendonly", False), "appendonly")
    fsync = _fsync(config.get("appendfsync", "everysec"), "appendfsync") if aof else None
    save = parse_save(config["save"]) if config.get("save") is not None else ()
    return DurabilityFloor(appendonly=aof, appendfsync=fsync, save=save, source=source)


def change_violations(floor: DurabilityFloor, settings: Mapping[str, Any],
                      ) -> Iterator[tuple[str, str]]:
    """``(field, problem)`` for every setting of a partial change (``kairos rollout adhoc``)
    that runs below ``floor``. What the nodes run is not known there, and a change cannot
    lower what it leaves alone: the keys it does not set are taken at the floor, so only
    what it sets is judged (``appendfsync no`` alone is below ``appendonly yes, appendfsync
    everysec``; ``hz 20`` is not)."""
    at_floor: dict[str, Any] = {}
    if floor.appendonly:
        at_floor["appendonly"] = "yes"
    if floor.appendfsync is not None:
        at_floor["appendfsync"] = floor.appendfsync
    if floor.save:
        at_floor["save"] = _save_text(floor.save)
    for v in floor.violations({**at_floor, **settings}):
        yield f"settings.{v.field}", v.problem


def plan_violations(floor: DurabilityFloor, current: Mapping[str, Any], steps: Sequence[Any],
                    ) -> Iterator[tuple[str, str]]:
    """``(field, problem)`` for every place a plan runs below ``floor``, in order: its
    ``current_config``, then each step's configuration (``current`` updated by every
    ``target`` so far) and each node's ``per_node`` override on it. ``steps`` are
    planner.plan Steps (anything with ``target`` and ``per_node``)."""
    for v in floor.violations(current):
        yield f"current_config.{v.field}", v.problem
    config = dict(current)
    for i, step in enumerate(steps):
        config.update(step.target)
        for v in floor.violations(config):
            yield f"steps[{i}].target.{v.field}", v.problem
        for host, over in step.per_node.items():
            for v in floor.violations({**config, **over}):
                yield f"steps[{i}].per_node.{host}.{v.field}", v.problem
