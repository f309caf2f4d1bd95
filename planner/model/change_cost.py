"""What a live change that rewrites data costs, measured under load (a compaction strategy).

A change of compaction strategy takes no node down, but every node rewrites its SSTables
for minutes while it serves, at a fraction of its throughput. The cost model charges it
as seconds of the new configuration's full throughput (``change_seconds``;
:func:`planner.planning.pipeline.change_seconds_matrix`), which used to be assumed (120 s by
default, 30 s in the demo from a rewrite timed with no load). ``bench/change_cost.py`` measures it
on a cluster under a saturating load: the served operations second by second around the
change, and when the rewrite ended (no node ran or queued a compaction). This module turns
them into the figures and keeps them in a JSON file that ``kairos plan --change-costs``
reads (docs/planning.md, "Measured change costs").

The cost is direction-dependent: moving to leveled compaction rewrites every SSTable,
moving back to size-tiered rewrites nothing at once (the leveled SSTables stay until
writes replace them). So a file holds one entry per measured ``(parameter, before,
after)``, and :meth:`ChangeCosts.seconds_for` prices a switch from the entries for its
target value.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import ValidationError, finite_at_least
from planner.model.restart_impact import (
    baseline_window,
    lost_seconds,
    read_measurement_file,
    required_fields,
    served_rates,
)

__all__ = ["ChangeCost", "ChangeCosts", "change_cost", "load_change_costs", "merge_entry"]

#: The file's format version.
SCHEMA = 1
#: The new configuration's steady rate is taken from at least this many seconds.
MIN_STEADY_SECONDS = 20.0


@dataclass(frozen=True)
class ChangeCost:
    """One measured change.

    Parameters
    ----------
    parameter, before, after
        The setting changed and its values (as the plan writes them).
    change_seconds
        Seconds of the new configuration's full throughput lost from the change's start
        until the rewrite ended, beyond the steady window's own noise.
    rewrite_seconds
        From the change's start until no node ran or queued a compaction.
    apply_seconds
        How long the executor took to apply the change.
    baseline_ops_per_s, steady_ops_per_s
        Served ops/s before the change, and after the rewrite (medians).
    environment
        What it was measured on (the envelopes, the load, the command), free-form.
    """

    parameter: str
    before: str
    after: str
    change_seconds: float
    rewrite_seconds: float
    apply_seconds: float
    baseline_ops_per_s: float
    steady_ops_per_s: float
    environment: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("change_seconds", "rewrite_seconds", "apply_seconds"):
            finite_at_least(name, getattr(self, name))
        for name in ("parameter", "before", "after"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValidationError(f"{name}: expected a non-empty string, "
                                      f"got {getattr(self, name)!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def change_cost(
    points: Sequence[tuple[float, float]],
    *,
    baseline: tuple[float, float],
    changed: tuple[float, float],
    settled: float,
    end: float,
    parameter: str,
    before: str,
    after: str,
    environment: Mapping[str, Any] | None = None,
) -> ChangeCost:
    """The cost of one change from a load's served-operations series.

    Parameters
    ----------
    points
        ``(time, cumulative served operations)``, about every second, over the whole run.
    baseline
        ``(start, end)`` of the undisturbed window before the change.
    changed
        ``(start, end)`` of the executor's apply.
    settled
        When the rewrite ended: from then on no node ran or queued a compaction.
    end
        End of the observation; ``[settled, end)`` is the new configuration's steady window.
    """
    b0, b1 = baseline_window(baseline)
    c0, c1 = changed
    if not b1 <= c0 <= c1 <= settled:
        raise ValidationError("changed: the change must start after the baseline and end "
                              "before the rewrite settled")
    if end - settled < MIN_STEADY_SECONDS:
        raise ValidationError(f"end: at least {MIN_STEADY_SECONDS:g} s of observation are "
                              f"needed after the rewrite, got {end - settled:.1f} s")
    base = served_rates(points, b0, b1)
    steady = served_rates(points, settled, end)
    steady_rate = float(np.median(steady))
    if steady_rate <= 0:
        raise ValidationError("end: the load served nothing after the rewrite")
    # The steady window's own shortfall per second is noise, not the change's cost.
    during = served_rates(points, math.floor(c0), settled)
    return ChangeCost(
        parameter=parameter, before=str(before), after=str(after),
        change_seconds=round(lost_seconds(during, steady_rate, steady), 1),
        rewrite_seconds=round(settled - c0, 1), apply_seconds=round(c1 - c0, 1),
        baseline_ops_per_s=round(float(np.median(base)), 1),
        steady_ops_per_s=round(steady_rate, 1), environment=dict(environment or {}),
    )


@dataclass(frozen=True)
class ChangeCosts:
    """The measured changes of one file, and where they come from."""

    entries: tuple[ChangeCost, ...]
    source: str

    def seconds_for(self, parameter: str, before: Any, after: Any) -> float | None:
        """Measured seconds of a switch of ``parameter`` to ``after`` (the median of the
        entries measured from ``before`` to ``after``, else of every entry to ``after``);
        None when none was measured."""
        return self._median("change_seconds", parameter, before, after)

    def span_for(self, parameter: str, before: Any, after: Any) -> float | None:
        """Measured seconds the rewrite of that switch lasted, the entries chosen as for
        :meth:`seconds_for`; None when none was measured."""
        return self._median("rewrite_seconds", parameter, before, after)

    def _median(self, field_name: str, parameter: str, before: Any, after: Any
                ) -> float | None:
        to = [e for e in self.entries if e.parameter == parameter and e.after == str(after)]
        exact = [getattr(e, field_name) for e in to if e.before == str(before)]
        values = exact or [getattr(e, field_name) for e in to]
        return float(statistics.median(values)) if values else None

    def describe(self) -> str:
        """One line for the plan's provenance: each measured switch and its seconds."""
        parts = [f"{e.parameter} {_short(e.before)} -> {_short(e.after)} {e.change_seconds:g} s"
                 f" over a {e.rewrite_seconds:g}-s rewrite" for e in self.entries]
        return f"measured: {self.source} ({'; '.join(parts)})"


def _short(value: str) -> str:
    return value.removesuffix("CompactionStrategy")


def _entry(where: Path, i: int, raw: Any) -> ChangeCost:
    at = f"{where}: changes[{i}]"
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{at}: expected an object")
    names = required_fields(ChangeCost, raw, where=at)
    try:
        return ChangeCost(**{n: raw[n] for n in names},
                          environment=dict(raw.get("environment") or {}))
    except (ValidationError, TypeError) as exc:
        raise ValidationError(f"{at}.{exc}") from exc


def load_change_costs(path: str | os.PathLike[str]) -> ChangeCosts:
    """Read a file ``bench/change_cost.py --out`` wrote.

    Raises
    ------
    ValidationError
        Naming the file and the field: missing, unreadable, or out of range.
    """
    where = Path(path)
    data = read_measurement_file(where, option="--change-costs", schema=SCHEMA)
    raw = data.get("changes")
    if not isinstance(raw, list) or not raw:
        raise ValidationError(f"{where}: changes: expected a non-empty list of measured changes")
    return ChangeCosts(tuple(_entry(where, i, r) for i, r in enumerate(raw)), str(where))


def merge_entry(path: str | os.PathLike[str], entry: ChangeCost) -> dict[str, Any]:
    """The file's content with ``entry`` in place of any earlier one for the same
    ``(parameter, before, after)`` (a new file when there is none); written back."""
    where = Path(path)
    kept: list[dict[str, Any]] = []
    if where.exists():
        kept = [e.to_json() for e in load_change_costs(where).entries
                if (e.parameter, e.before, e.after) != (entry.parameter, entry.before,
                                                         entry.after)]
    data = {"schema": SCHEMA, "changes": [*kept, entry.to_json()]}
    where.write_text(json.dumps(data, indent=2) + "\n")
    return data
