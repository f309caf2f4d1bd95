"""The memory split as a plan step (issue 43; docs/memory-split.md).

A plan made with a measured memory curve (``kairos plan --memory-curve``) carries the split
it advises in ``provenance.memory_split`` (:func:`planner.model.memory_curve.advise`). When
that split changes a cache's size live (Redis ``maxmemory``, Cassandra ``key_cache_size``:
the heap is held), it is also a step: a live change costs no restart, so any predicted gain
pays for it, and the executor, ``kairos rollout`` and the autopilot carry it out as they do
every live step (CONFIG SET / nodetool, persisted, read back).

- The split is due at the horizon's start. When the optimiser's first step is due then too,
  the split joins it (its target and its ``live`` list); otherwise it is a step of its own
  before the optimiser's, which are renumbered after it.
- A split that needs a restart (none does while the heap is held) stays advice.
- Its ``expected`` figures: what the predicted read capacity adds to the served work over
  the step's hold, at the running configuration's predicted capacity: the curve's reads a
  second at the advised size over those at the running one (the measured mix's ratio),
  applied to the capacity; only the load above the running capacity is gained
  (``gains: throughput``), otherwise the step adds headroom (``gains: headroom``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["with_split_step"]


def with_split_step(
    steps: Sequence[Mapping[str, Any]], advice: Mapping[str, Any] | None, *, start: datetime,
    step_seconds: float, horizon: int, capacity: npt.ArrayLike, load: npt.ArrayLike,
) -> list[dict[str, Any]]:
    """``steps`` with the advised split as a step (or in the first step due at ``start``).

    ``capacity`` and ``load``: per decision interval, the running configuration's predicted
    capacity and the forecast's load (ops/s).
    """
    out = [dict(s) for s in steps]
    if not advice or not advice.get("changed") or advice.get("change") != "live":
        return out
    param, value = str(advice["parameter"]), advice["advised"]
    begins = start.isoformat()
    if out and datetime.fromisoformat(out[0]["due"]) == start:
        first = out[0]
        if param not in first["target"]:
            first["target"] = {**first["target"], param: value}
            first["live"] = [*first["live"], param]
        return out
    ends = out[0]["due"] if out else (start + timedelta(seconds=horizon * step_seconds)).isoformat()
    hold = max(1, round((datetime.fromisoformat(ends) - start).total_seconds() / step_seconds))
    gained, saturated = _served_gain(advice, np.asarray(capacity, dtype=float)[:hold],
                                     np.asarray(load, dtype=float)[:hold], step_seconds)
    split = {"id": "s1", "due": begins, "until": ends, "target": {param: value}, "per_node": {},
             "live": [param], "restart": [], "batches": [],
             "expected": {"benefit_ops": gained, "cost_ops": 0.0, "net_ops": gained,
                          "gains": "throughput" if saturated else "headroom",
                          "served_ops": gained}}
    for i, s in enumerate(out, start=2):
        s["id"] = f"s{i}"
    return [split, *out]


def _served_gain(advice: Mapping[str, Any], cap: npt.NDArray[np.float64],
                 offered: npt.NDArray[np.float64], step_seconds: float) -> tuple[float, bool]:
    """Served operations the advised size adds over the intervals (``cap`` and ``offered``
    per interval), and whether any of them is saturated at the running size."""
    predicted = advice.get("predicted") or {}
    now, then = predicted.get("reads_per_s_now"), predicted.get("reads_per_s")
    if not now or not then:
        return 0.0, False
    gained = np.minimum(offered, cap * (then / now)) - np.minimum(offered, cap)
    return float(gained.sum() * step_seconds), bool(np.any(offered > cap))
