"""What a rolling restart costs beyond T_r, measured under load: the survivors' penalty and
the warm-up.

The cost model (planner/planning/costbenefit.py) charges a rolling restart, batch by batch, the
capacity of the batch that is down, less ``survivor_penalty`` of the nodes that stay up
(they take its clients, write its hints), and then ``warmup_seconds`` of full capacity for
the restarted nodes coming back cold (JIT, caches). Both used to be assumed (5 %, 0 s).
``bench/restart_cost.py`` measures them on a cluster under a saturating load: the load's
served operations second by second, and when each node's CQL port was closed. This module
turns those series into the figures and keeps them in a small JSON file that ``kairos
plan --restart-costs`` reads (docs/planning.md, "Measured restart impact").
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import ValidationError, finite_at_least

__all__ = [
    "RestartImpact",
    "baseline_window",
    "load_restart_impact",
    "lost_seconds",
    "read_measurement_file",
    "required_fields",
    "restart_impact",
    "served_rates",
]

#: The file's format version.
SCHEMA = 1
#: Seconds per bin of the served-operations series.
BIN_SECONDS = 1.0
#: A restarted cluster is warm again once its 10-s mean is back to this share of before.
RECOVERED_SHARE = 0.95


@dataclass(frozen=True)
class RestartImpact:
    """A rolling restart's measured impact beyond T_r.

    Parameters
    ----------
    baseline_ops_per_s
        Served ops/s before the restart (median of the baseline's seconds).
    baseline_spread
        Relative standard deviation of the baseline's 5-s means: the noise floor.
    batch_share
        Capacity share of one batch (1/N for one node at a time).
    down_share
        Served ops/s while a batch was down, over the baseline.
    survivor_penalty
        ``1 - down_share / (1 - batch_share)``, at least 0: what the nodes that stay up lose
        beyond the batch's own share.
    warmup_seconds
        Seconds of full capacity lost while the restarted nodes were up again (between
        batches and after the last one), beyond the baseline's own noise.
    recovery_seconds
        From the last node's return until the 10-s mean was back to 95 % of the baseline
        (None: not within the observed window).
    down_seconds
        Seconds at least one node was down, in all.
    environment
        What it was measured on (the envelopes, the load), free-form.
    """

    baseline_ops_per_s: float
    baseline_spread: float
    batch_share: float
    down_share: float
    survivor_penalty: float
    warmup_seconds: float
    recovery_seconds: float | None
    down_seconds: float
    environment: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.survivor_penalty < 1.0:
            raise ValidationError(
                f"survivor_penalty: must be in [0, 1), got {self.survivor_penalty!r}")
        finite_at_least("warmup_seconds", self.warmup_seconds)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}


def baseline_window(baseline: tuple[float, float]) -> tuple[float, float]:
    """``(start, end)`` of a measurement's undisturbed window, at least 10 bins long.

    Raises
    ------
    ValidationError
        A shorter window (``baseline``).
    """
    b0, b1 = baseline
    if b1 - b0 < 10 * BIN_SECONDS:
        raise ValidationError(f"baseline: at least 10 s are needed, got {b1 - b0:.1f} s")
    return b0, b1


def served_rates(points: Sequence[tuple[float, float]], start: float, end: float) -> np.ndarray:
    """Served ops/s per BIN_SECONDS bin of [start, end), from (time, cumulative ops) points."""
    t = np.asarray([p[0] for p in points], dtype=float)
    ops = np.asarray([p[1] for p in points], dtype=float)
    edges = np.arange(start, end + 1e-9, BIN_SECONDS)
    if len(edges) < 2:
        return np.zeros(0)
    return np.diff(np.interp(edges, t, ops)) / BIN_SECONDS


def lost_seconds(rates: np.ndarray, full: float, reference: np.ndarray) -> float:
    """Seconds of ``full`` ops/s lost over ``rates`` (one per bin), less the mean shortfall
    of ``reference``, a window at that rate (its noise), so that noise is not charged."""
    noise = float(np.maximum(0.0, 1.0 - reference / full).mean())
    short = np.maximum(0.0, 1.0 - rates / full) - noise
    return float(max(0.0, short.sum()) * BIN_SECONDS)


def _mask(bins: np.ndarray, windows: Sequence[tuple[float, float]]) -> np.ndarray:
    """Which bins (by start time) overlap any window."""
    out = np.zeros(len(bins), dtype=bool)
    for lo, hi in windows:
        out |= (bins + BIN_SECONDS > lo) & (bins < hi)
    return out


def _merge(windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for lo, hi in sorted(windows):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def restart_impact(
    points: Sequence[tuple[float, float]],
    *,
    baseline: tuple[float, float],
    down: Sequence[tuple[float, float]],
    end: float,
    batch_share: float,
    environment: dict[str, Any] | None = None,
) -> RestartImpact:
    """The impact of one rolling restart from a load's served-operations series.

    Parameters
    ----------
    points
        ``(time, cumulative served operations)``, about every second, over the whole run.
    baseline
        ``(start, end)`` of the undisturbed window before the restart.
    down
        ``(start, end)`` of every window in which a node was down (its CQL port closed).
    end
        End of the observation (after the last node came back).
    batch_share
        Capacity share of one batch.
    """
    if not 0 < batch_share < 1:
        raise ValidationError(f"batch_share: must be in (0, 1), got {batch_share!r}")
    if not down:
        raise ValidationError("down: no node was seen down; nothing was restarted")
    b0, b1 = baseline_window(baseline)
    base = served_rates(points, b0, b1)
    baseline_rate = float(np.median(base))
    if baseline_rate <= 0:
        raise ValidationError("baseline: the load served nothing before the restart")
    fives = base[: len(base) // 5 * 5].reshape(-1, 5).mean(axis=1)
    spread = float(np.std(fives) / baseline_rate) if len(fives) > 1 else 0.0
    windows = _merge(down)
    first, last = windows[0][0], windows[-1][1]
    if end <= last:
        raise ValidationError("end: the observation must go on after the last node is back")
    start = math.floor(first)
    rates = served_rates(points, start, end)
    bins = start + np.arange(len(rates)) * BIN_SECONDS
    is_down = _mask(bins, windows)
    down_share = float(rates[is_down].mean() / baseline_rate)
    penalty = max(0.0, 1.0 - down_share / (1.0 - batch_share))
    # Up again: every second outside the down windows from the first restart on, less the
    # baseline's own shortfall per second (its noise), so that noise is not charged.
    warmup = lost_seconds(rates[~is_down], baseline_rate, base)
    after = rates[bins >= last]
    recovery = None
    for i in range(len(after) - 9):
        if after[i:i + 10].mean() >= RECOVERED_SHARE * baseline_rate:
            recovery = float(i * BIN_SECONDS)
            break
    return RestartImpact(
        baseline_ops_per_s=round(baseline_rate, 1), baseline_spread=round(spread, 4),
        batch_share=round(batch_share, 4), down_share=round(down_share, 4),
        survivor_penalty=round(min(penalty, 0.99), 4), warmup_seconds=round(warmup, 1),
        recovery_seconds=recovery,
        down_seconds=round(sum(hi - lo for lo, hi in windows), 1),
        environment=dict(environment or {}),
    )


def read_measurement_file(where: Path, *, option: str, schema: int) -> dict[str, Any]:
    """A measured-cost file's JSON object, at format version ``schema``.

    Raises
    ------
    ValidationError
        Naming ``option`` or the file: missing, not JSON, or another version.
    """
    try:
        data = json.loads(where.read_text())
    except FileNotFoundError as exc:
        raise ValidationError(f"{option}: {where}: no such file") from exc
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{option}: {where}: not a JSON file ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != schema:
        raise ValidationError(f"{where}: schema: expected {schema}, got "
                              f"{data.get('schema') if isinstance(data, dict) else data!r}")
    return data


def required_fields(record: type[Any], raw: Mapping[str, Any], *, where: str) -> list[str]:
    """The fields of ``record`` (a measured-cost dataclass) but ``environment``, each of
    which a file's object ``raw`` must hold.

    Raises
    ------
    ValidationError
        At ``where``, naming the fields ``raw`` lacks.
    """
    names = [f.name for f in fields(record) if f.name != "environment"]
    missing = [n for n in names if n not in raw]
    if missing:
        raise ValidationError(f"{where}: missing field(s) {', '.join(missing)}")
    return names


def load_restart_impact(path: str | os.PathLike[str]) -> RestartImpact:
    """Read a file ``bench/restart_cost.py --out`` wrote.

    Raises
    ------
    ValidationError
        Naming the file and the field: missing, unreadable, or out of range.
    """
    where = Path(path)
    data = read_measurement_file(where, option="--restart-costs", schema=SCHEMA)
    names = required_fields(RestartImpact, data, where=str(where))
    for name in ("survivor_penalty", "warmup_seconds"):
        if isinstance(data[name], bool) or not isinstance(data[name], (int, float)):
            raise ValidationError(f"{where}: {name}: expected a number, got {data[name]!r}")
    try:
        return RestartImpact(**{n: data[n] for n in names},
                             environment=dict(data.get("environment") or {}))
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from exc
