"""Static tuner: the best configuration for one workload mix under a performance model.

This is SOPHIA's static tuner role (C_opt(W) = argmax_C f(W, C)), done exhaustively over a
finite candidate set (by default :meth:`ConfigSpace.candidates`). The optimiser uses the same
model over time; this module answers the one-mix question and ranks candidates for reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.errors import ValidationError
from planner.model.performance import PerformanceModel, Prediction
from planner.model.spaces import ConfigSpace

#: Predictions closer than this (relative) are ties, broken by fewer changed parameters.
TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class RankedConfig:
    """One candidate with its prediction and how many parameters differ from ``current``."""

    config: Mapping[str, Any]
    prediction: Prediction
    changes: int


def rank_configs(
    model: PerformanceModel,
    mix: Mapping[str, float],
    space: ConfigSpace,
    candidates: Sequence[Mapping[str, Any]] | None = None,
    *,
    current: Mapping[str, Any] | None = None,
) -> list[RankedConfig]:
    """All candidates, best first (highest median ops/s; ties: fewer changes, then order)."""
    if model.engine != space.engine:
        raise ValidationError(
            f"engine: the model is for {model.engine}, the space for {space.engine}"
        )
    cands = [space.complete(c) for c in (space.candidates() if candidates is None else candidates)]
    if not cands:
        raise ValidationError("candidates: the candidate list is empty")
    base = space.complete(current or {})
    mean, std = model.predict_matrix([mix], cands)
    changes = [len(space.changed_keys(base, c)) for c in cands]
    best = float(mean.max())
    scale = max(abs(best), 1.0)
    # Round predictions to the tie tolerance so near-equal ones order by changes.
    keys = np.round(mean[0] / (scale * TIE_TOLERANCE * 10)) if best > 0 else mean[0]
    order = sorted(range(len(cands)), key=lambda k: (-keys[k], changes[k], k))
    return [
        RankedConfig(
            config=cands[k],
            prediction=Prediction(ops_per_s=float(mean[0, k]), std=float(std[0, k])),
            changes=changes[k],
        )
        for k in order
    ]


def best_static_config(
    model: PerformanceModel,
    mix: Mapping[str, float],
    space: ConfigSpace,
    candidates: Sequence[Mapping[str, Any]] | None = None,
    *,
    current: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Prediction]:
    """The candidate with the highest predicted throughput for ``mix``.

    Parameters
    ----------
    model : PerformanceModel
    mix : Mapping[str, float]
        Operation-class fractions.
    space : ConfigSpace
    candidates : sequence of configurations, optional
        Default: ``space.candidates()``. Partial configurations are completed with defaults.
    current : Mapping, optional
        The running configuration; among equal predictions the candidate with the fewest
        changes from it wins (default: the space's defaults).

    Returns
    -------
    (config, Prediction)
        A full, canonical configuration and its prediction.
    """
    top = rank_configs(model, mix, space, candidates, current=current)[0]
    return dict(top.config), top.prediction
