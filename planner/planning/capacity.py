"""Capacity advice (MeT's elasticity, seeds/001): when will the forecast load outgrow the
best configuration Kairos can reach, and when has the cluster more nodes than it needs?

Kairos recommends; it never adds or removes a node. The advice rests on three figures,
all recorded with it:

- the forecast's **upper band** of the offered load, step by step (the load the plan must
  survive, not the mean it expects);
- the predicted capacity of the **best reachable configuration** at each step (the best
  of the candidates the planner searched, for that step's mix);
- the operator's **safety margin** ``m``: a step needs ``upper * (1 + m)`` of capacity.

The node count assumes capacity proportional to the nodes (each node holds ``RF / N`` of
the data and serves its share of the requests): ``N' = ceil(N * max_t need_t / cap_t)``.
That is the first-order rule MeT's elasticity uses; a ring that is unbalanced, or a
workload bound by one hot partition, scales worse, which is why the advice names it.

- **Scale out** when some step needs more than the best configuration serves: the advice
  gives the first such step's time (``by``), the node count and the step's figures.
- **Scale in** only when the whole horizon is over-provisioned, the horizon is at least
  ``scale_in_after_seconds`` long (a day by default: one quiet hour is not a trend), and
  one node fewer still serves every step with the margin. Never below ``min_nodes`` (the
  replication factor: each replica needs its own node).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from planner.errors import ValidationError

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_SCALE_IN_AFTER_SECONDS",
    "RUNBOOKS",
    "CapacityAdvice",
    "advice_line",
    "advise",
]

#: The share of capacity kept free at the forecast's upper band.
DEFAULT_MARGIN = 0.2
#: The shortest horizon a scale-in recommendation may rest on.
DEFAULT_SCALE_IN_AFTER_SECONDS = 86_400.0
RUNBOOKS = {"scale-out": "docs/runbooks/add-a-node.md",
            "scale-in": "docs/runbooks/remove-a-node.md"}


@dataclass(frozen=True)
class CapacityAdvice:
    """The recommendation and the figures it rests on (``action``: scale-out, scale-in or
    none; ``by``: the first step that needs more nodes, for a scale-out)."""

    action: str
    nodes_now: int
    nodes_advised: int
    reason: str
    by: datetime | None = None
    figures: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "nodes_now": self.nodes_now,
                               "nodes_advised": self.nodes_advised, "reason": self.reason}
        if self.by is not None:
            out["by"] = self.by.isoformat()
        if self.action in RUNBOOKS:
            out["runbook"] = RUNBOOKS[self.action]
        out["figures"] = dict(self.figures)
        return out


def _check(name: str, value: float, low: float, high: float = math.inf) -> float:
    if not (low <= value < high) or math.isnan(value):
        raise ValidationError(f"{name}: must be in [{low:g}, {high:g}), got {value!r}")
    return float(value)


def advise(
    *,
    timestamps: Sequence[float] | np.ndarray,
    load_upper: Sequence[float] | np.ndarray,
    best_capacity: Sequence[float] | np.ndarray,
    nodes: int,
    min_nodes: int,
    step_seconds: float,
    margin: float = DEFAULT_MARGIN,
    scale_in_after_seconds: float = DEFAULT_SCALE_IN_AFTER_SECONDS,
) -> CapacityAdvice:
    """The capacity advice over a horizon.

    ``timestamps`` (epoch seconds), ``load_upper`` and ``best_capacity`` (ops/s) are one
    value per step; ``nodes`` the cluster's node count now, ``min_nodes`` the fewest it may
    have (the replication factor).
    """
    ts = np.asarray(timestamps, dtype=float)
    upper = np.asarray(load_upper, dtype=float)
    best = np.asarray(best_capacity, dtype=float)
    if not (ts.shape == upper.shape == best.shape) or ts.ndim != 1 or ts.size == 0:
        raise ValidationError(
            f"capacity advice: timestamps, load_upper and best_capacity must be one value per "
            f"step, got shapes {ts.shape}, {upper.shape}, {best.shape}")
    if np.any(~np.isfinite(upper)) or np.any(~np.isfinite(best)) or np.any(best <= 0):
        raise ValidationError("capacity advice: the loads must be finite and the capacities "
                              "finite and > 0")
    m = _check("--capacity-margin", margin, 0.0, 1.0)
    after = _check("--scale-in-after", scale_in_after_seconds, 0.0)
    if nodes < 1 or min_nodes < 1:
        raise ValidationError(f"capacity advice: nodes {nodes} and min_nodes {min_nodes} "
                              "must be >= 1")
    need = np.maximum(upper, 0.0) * (1.0 + m)
    ratio = need / best
    peak = int(np.argmax(ratio))
    horizon = float(ts.size * step_seconds)
    figures = {
        "margin": m,
        "peak_step": peak,
        "peak_at": _iso(ts[peak]),
        "peak_load_upper": round(float(upper[peak]), 1),
        "peak_need": round(float(need[peak]), 1),
        "best_capacity_at_peak": round(float(best[peak]), 1),
        "peak_need_over_capacity": round(float(ratio[peak]), 4),
        "horizon_seconds": horizon,
        "scaling": "capacity proportional to the nodes",
    }
    needed = max(min_nodes, math.ceil(nodes * float(ratio[peak]) - 1e-9))
    if ratio[peak] > 1.0:
        first = int(np.argmax(ratio > 1.0))
        figures.update({"first_short_step": first,
                        "load_upper_then": round(float(upper[first]), 1),
                        "best_capacity_then": round(float(best[first]), 1)})
        return CapacityAdvice(
            "scale-out", nodes, needed, by=datetime.fromtimestamp(float(ts[first]), tz=UTC),
            figures=figures,
            reason=(f"at {_iso(ts[first])} the forecast's upper band {upper[first]:,.0f} ops/s "
                    f"plus a {m:.0%} margin needs more than the best reachable configuration's "
                    f"{best[first]:,.0f} ops/s; the peak needs {ratio[peak]:.2f} times it, "
                    f"so {needed} nodes instead of {nodes}"))
    if needed >= nodes:
        return CapacityAdvice("none", nodes, nodes, figures=figures, reason=(
            f"the best reachable configuration serves the forecast's upper band with a "
            f"{m:.0%} margin at every step (peak {ratio[peak]:.0%} of it) and one node fewer "
            f"would not" if nodes > min_nodes else
            f"the best reachable configuration serves the forecast's upper band with a "
            f"{m:.0%} margin (peak {ratio[peak]:.0%} of it); {nodes} nodes is the fewest "
            f"for replication factor {min_nodes}"))
    if horizon < after:
        return CapacityAdvice("none", nodes, nodes, figures=figures, reason=(
            f"over-provisioned over the horizon ({needed} of {nodes} nodes would serve its "
            f"peak), but the horizon is {horizon / 3600:.3g} h, shorter than the "
            f"{after / 3600:.3g} h a scale-in must rest on"))
    return CapacityAdvice("scale-in", nodes, needed, figures=figures, reason=(
        f"over the whole {horizon / 3600:.3g} h horizon the forecast's upper band plus a "
        f"{m:.0%} margin peaks at {ratio[peak]:.0%} of the best reachable configuration's "
        f"capacity: {needed} nodes would serve it"))


def advice_line(advice: Mapping[str, Any]) -> str:
    """One line for a person, from the plan file's ``capacity_advice``."""
    action = advice.get("action", "none")
    if action == "none":
        return f"Capacity: no change of node count advised: {advice.get('reason', '')}."
    verb = "add" if action == "scale-out" else "remove"
    n = abs(int(advice["nodes_advised"]) - int(advice["nodes_now"]))
    by = f" by {advice['by']}" if advice.get("by") else ""
    return (f"Capacity: {action} advised ({verb} {n} node(s): {advice['nodes_now']} -> "
            f"{advice['nodes_advised']}{by}; runbook {advice.get('runbook', '')}): "
            f"{advice.get('reason', '')}. Kairos does not add or remove nodes itself.")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(float(ts), tz=UTC).isoformat()
