"""Every batch of every step of a plan checked on a ring, as the executor's pre-flight does.

``kairos validate-plan`` and ``kairos explain`` (given a ring) and the autopilot tick (on
the live ring) refuse a plan with an unsafe batch: :func:`batch_safety` gives one
:class:`BatchVerdict` per batch, :func:`unsafe_message` the refusal naming each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["NO_RING", "BatchVerdict", "batch_safety", "unsafe_message"]

#: What explain and validate-plan say when there is no ring to check the batches on.
NO_RING = "batch safety not checked: no ring given"


@dataclass(frozen=True)
class BatchVerdict:
    """One batch of one step, checked on a ring (``problem`` None: safe)."""

    step: str
    index: int  # 1-based
    of: int
    hosts: tuple[str, ...]
    problem: str | None
    #: Why the batch is safe (planner.topology.batching.batch_reasons); empty when it is not.
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
    from planner.topology.batching import batch_reasons
    from planner.topology.ring import UnsafeBatchError, check_batch

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
