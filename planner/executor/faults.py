"""What the executor may do to a node now, given the nodes that are down now.

The fault model of docs/executor.md, decided in Python so the playbooks only carry it out:

- before a batch is drained, and again before it is stopped, the nodes down *now* (outside
  the batch) count as unavailable: a batch that would then leave a replica set below the
  consistency level is refused, naming the dead node (:func:`guard_batch`);
- when a batch fails, the rescue re-reads the nodes down now and takes the failed node
  down again (to restore its previous configuration) only if that is itself safe; a node
  that is not serving is always brought back, since starting a node takes nothing down
  (:func:`decide_rescue`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.executor.rollout import RolloutRefused, RolloutStep
from planner.topology.ring import Ring

RESTORE = "restore"  # stop what is left, put the previous configuration back, start, gate
LEAVE = "leave"  # touch nothing: the node stays as it is, serving


@dataclass(frozen=True)
class RescueDecision:
    """What the rescue does to one failed node, and why (recorded with the failed step).

    Attributes
    ----------
    action
        ``restore`` or ``leave``.
    drain
        Drain before stopping (only a node that still serves has anything to drain).
    dead
        Nodes outside the batch that are down now: the likely cause, named first.
    reason
        One sentence a person can act on.
    """

    action: str
    drain: bool
    dead: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "drain": self.drain,
            "dead": list(self.dead),
            "reason": self.reason,
        }


def _outside(down: Iterable[str], batch: Iterable[str]) -> list[str]:
    in_batch = set(batch)
    return sorted({h for h in down if h not in in_batch})


def guard_batch(
    rollout: RolloutStep, ring: Ring, *, batch: Iterable[str], down: Iterable[str]
) -> None:
    """Refuse to take ``batch`` down when the nodes down now would leave a replica set short.

    Raises
    ------
    RolloutRefused
        Naming the nodes down outside the batch and the replica set left below the CL.
    """
    hosts = list(batch)
    dead = _outside(down, hosts)
    if rollout.aggressive:
        return
    problem = rollout.batch_problem(ring, hosts, down=dead)
    if problem is not None:
        cause = f"{', '.join(dead)} down outside the batch; " if dead else ""
        raise RolloutRefused(
            f"{cause}taking {', '.join(hosts)} down now would break "
            f"{rollout.consistency_level}: {problem}"
        )


def decide_rescue(
    rollout: RolloutStep,
    ring: Ring | None,
    *,
    node: str,
    batch: Iterable[str],
    down: Iterable[str] | None,
    serving: bool,
    files_changed: bool = True,
) -> RescueDecision:
    """Decide what the rescue of a failed batch may do to ``node``.

    Parameters
    ----------
    rollout
        The rollout being carried out (its consistency level and tolerated failures).
    ring
        The live ring (``None`` when it could not be read).
    node
        The failed node.
    batch
        Every node of the failed batch.
    down
        The nodes down now, as re-read at the start of the rescue; ``None`` when they
        could not be read (then nothing is taken down).
    serving
        Whether ``node`` serves clients now (its CQL port answers and peers see it up).
    files_changed
        Whether the node's files already hold the new configuration (else it failed
        before they were written, and it runs its previous configuration).
    """
    running_on = "its new configuration" if files_changed else "its previous configuration"
    batch_hosts = list(batch)
    if down is None or ring is None:
        if serving:
            return RescueDecision(
                LEAVE, False, (), f"the nodes down now could not be read; {node} is serving "
                f"and is left running on {running_on} rather than taken down blind",
            )
        return RescueDecision(
            RESTORE, False, (), f"{node} is not serving: it is brought back on its previous "
            "configuration (starting a node takes nothing down)",
        )
    dead = tuple(_outside(down, batch_hosts))
    named = f"{', '.join(dead)} down outside the batch; " if dead else ""
    if not serving:
        return RescueDecision(
            RESTORE, False, dead, f"{named}{node} is not serving: it is brought back on its "
            "previous configuration (starting a node takes nothing down)",
        )
    others = sorted({h for h in down if h != node})
    problem = rollout.batch_problem(ring, [node], down=others)
    if problem is not None:
        return RescueDecision(
            LEAVE, False, dead, f"{named}{node} is serving and is left running on {running_on}: "
            f"taking it down again would break "
            f"{rollout.consistency_level} ({problem})",
        )
    return RescueDecision(
        RESTORE, True, dead, f"{named}{node} is restored to its previous configuration "
        f"(safe at {rollout.consistency_level} with {', '.join(others) or 'no other node'} down)",
    )

