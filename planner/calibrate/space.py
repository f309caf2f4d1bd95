"""What a calibration can measure: the grid of configurations and the workload mixes.

Each calibrated parameter runs over a few levels (canonical values of the engine's
configuration space, :mod:`planner.model.spaces`); the value the cluster runs now is always one
of them (:func:`make_space`). The grid is their product, bounded by :data:`MAX_GRID`. The
mixes are named operation mixes, each measured under every configuration chosen. Which
configurations are chosen is :mod:`planner.calibrate.design`'s business.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from planner.errors import ValidationError
from planner.loadgen.workload import parse_mix
from planner.model.spaces import get_space

#: Mixes measured when none are given (SOPHIA's read-heavy and write-heavy workloads).
DEFAULT_MIXES: dict[str, dict[str, float]] = {
    "read-heavy": {"read": 0.9, "update": 0.1},
    "write-heavy": {"read": 0.1, "update": 0.9},
}
#: Largest grid the design searches (product of the levels of every parameter).
MAX_GRID = 4096

#: A configuration: parameter name -> canonical value.
Config = dict[str, Any]


# ------------------------------------------------------------------------ inputs
def parse_levels(specs: Sequence[str], engine: str) -> dict[str, tuple[Any, ...]]:
    """``["concurrent_reads=32,64,128", ...]`` -> ``{name: canonical levels}``.

    Values are read as YAML scalars (``true``, ``0.11``, ``64MiB``) and validated against the
    engine's space. Numeric levels are sorted; duplicates are removed.
    """
    space = get_space(engine)
    out: dict[str, tuple[Any, ...]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise ValidationError(f"--param: {spec!r} is not name=value1,value2,...")
        param = space[name]
        if name in out:
            raise ValidationError(f"--param: {name} given twice")
        levels: list[Any] = []
        for text in values.split(","):
            raw = yaml.safe_load(text.strip()) if text.strip() else None
            if raw is None:
                raise ValidationError(f"--param: {name}: empty value in {spec!r}")
            value = param.coerce(raw)
            if value not in levels:
                levels.append(value)
        out[name] = ordered_levels(engine, name, levels)
    return out


def default_levels(engine: str) -> dict[str, tuple[Any, ...]]:
    """The space's grid keys over their candidate values (what the optimiser searches)."""
    space = get_space(engine)
    return {k: tuple(space[k].candidate_values or ()) for k in space.grid_keys}


def parse_mixes(specs: Sequence[str], engine: str) -> dict[str, dict[str, float]]:
    """``["read-heavy:read=0.9,update=0.1", ...]`` -> ``{name: mix over every class}``."""
    out: dict[str, dict[str, float]] = {}
    for spec in specs:
        name, sep, text = spec.partition(":")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise ValidationError(f"--mix: {spec!r} is not name:class=fraction,...")
        if name in out:
            raise ValidationError(f"--mix: {name} given twice")
        out[name] = parse_mix(text, engine)
    return out


def ordered_levels(engine: str, name: str, levels: Sequence[Any]) -> tuple[Any, ...]:
    """``levels`` of ``name`` in the grid's order: numeric ones sorted, others as given."""
    param = get_space(engine)[name]
    if param.type in ("enum", "bool"):
        return tuple(levels)
    return tuple(sorted(levels, key=param.numeric))


def config_key(config: Mapping[str, Any]) -> str:
    """A stable text key of a configuration (state file, grouping)."""
    return json.dumps(dict(config), sort_keys=True)


# -------------------------------------------------------------------------- grid
@dataclass(frozen=True)
class CalibrationSpace:
    """The grid: each calibrated parameter over its levels (canonical values).

    Parameters
    ----------
    engine : str
    levels : Mapping[str, tuple]
        Levels per parameter; :func:`make_space` adds the running value to each.
    """

    engine: str
    levels: Mapping[str, tuple[Any, ...]]

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValidationError("params: give at least one parameter to calibrate")
        space = get_space(self.engine)
        for name, values in self.levels.items():
            if not values:
                raise ValidationError(f"{name}: no levels to calibrate")
            for v in values:
                space[name].coerce(v)
        size = math.prod(len(v) for v in self.levels.values())
        if size > MAX_GRID:
            raise ValidationError(
                f"params: the grid has {size} configurations, more than {MAX_GRID}; "
                "give fewer parameters or levels"
            )

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.levels)

    def grid(self) -> list[Config]:
        """Every configuration of the grid (product of the levels)."""
        names = self.params
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(self.levels[n] for n in names))]

    def coordinates(self, config: Mapping[str, Any]) -> np.ndarray:
        """Point of ``config`` for distances: a numeric level's rank in [0, 1]; an enum or
        boolean one-hot over its levels scaled so that two different levels are 1 apart."""
        out: list[float] = []
        space = get_space(self.engine)
        for name in self.params:
            levels = self.levels[name]
            value = config[name]
            if space[name].type in ("enum", "bool"):
                out.extend((1.0 if value == lv else 0.0) / math.sqrt(2) for lv in levels)
            else:
                out.append(levels.index(value) / max(1, len(levels) - 1))
        return np.array(out)

    def to_dict(self) -> dict[str, list[Any]]:
        return {k: list(v) for k, v in self.levels.items()}


def make_space(
    engine: str, levels: Mapping[str, Sequence[Any]], running: Mapping[str, Any]
) -> CalibrationSpace:
    """The grid over ``levels`` with the running value of each parameter added as a level."""
    out: dict[str, tuple[Any, ...]] = {}
    for name, values in levels.items():
        if name not in running:
            raise ValidationError(f"{name}: its running value is unknown")
        merged = list(values)
        if running[name] not in merged:
            merged.append(running[name])
        out[name] = ordered_levels(engine, name, merged)
    return CalibrationSpace(engine, out)
