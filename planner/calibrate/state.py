"""The record of one calibration: what it decided and measured, saved after every step.

:class:`CalibrationState` is the state file (``state.json``) an interrupted calibration
resumes from: the original configuration, what is applied now, the design in the order it
was started and every measurement. :func:`write_observations` rewrites the observations
CSV from it (the format :func:`planner.model.performance.fit_model` reads).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from planner.calibrate.space import CalibrationSpace, Config, config_key, make_space, ordered_levels
from planner.errors import ValidationError
from planner.model.performance import MEASURED_COLUMNS, TARGET
from planner.workload.series import classes_for

STATE_KIND = "kairos-calibration"
#: The designs a calibration can follow (:mod:`planner.calibrate.design`); a state file
#: from before the choice existed followed the first.
DESIGNS = ("maximin", "bo")
#: How each sweep orders the mixes (CalibrationState.mix_order); the first is the default.
MIX_ORDERS = ("mirrored", "fixed")


@dataclass
class CalibrationState:
    """Everything a calibration has decided and measured; saved after every measurement.

    ``original`` is the configuration (calibrated parameters only) that ran before the
    calibration began, restored at the end; ``applied`` is what the calibration last applied;
    ``design`` lists the configurations in the order they were started; ``measurements``
    holds one record per measurement: ``repeats`` per (configuration, mix), taken in rounds
    over the mixes, plus the re-measurements of the original at the end (``"phase":
    "recheck"``, see :func:`recheck_original`). ``design_strategy`` is how the next
    configuration is chosen (one of :data:`DESIGNS`), kept so that a resumed calibration
    goes on with the design it began with.
    """

    engine: str
    levels: dict[str, list[Any]]
    mixes: dict[str, dict[str, float]]
    seed: int
    original: Config
    applied: Config
    design: list[Config] = field(default_factory=list)
    measurements: list[dict[str, Any]] = field(default_factory=list)
    preloaded: bool = False
    repeats: int = 1
    sweeps: int = 1
    created_at: str = ""
    command: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    design_strategy: str = DESIGNS[0]
    #: ``mirrored``: even sweeps take the mixes in reverse; ``fixed``: every run takes them
    #: in the given order (a mix whose speed depends on the one before, e.g. scans after
    #: the updates that fragment the rows, is then always measured in the same state).
    mix_order: str = MIX_ORDERS[0]
    #: Redis: the options of each shape measured (its mix's name): ``{"keys": ...,
    #: "value_size": ..., "mix": ...}`` as given (the shape's own otherwise); {} for
    #: Cassandra.
    shapes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def space(self) -> CalibrationSpace:
        return CalibrationSpace(
            self.engine, {k: ordered_levels(self.engine, k, v) for k, v in self.levels.items()}
        )

    def count(self, config: Mapping[str, Any], mix: str, *, phase: str | None = None,
              sweep: int | None = None) -> int:
        """Measurements of ``mix`` under ``config`` (of one ``phase``, or of one ``sweep``
        of the design, when given)."""
        key = config_key(config)
        return sum(1 for m in self.measurements
                   if m["mix"] == mix and config_key(m["config"]) == key
                   and (phase is None or m.get("phase") == phase)
                   and (sweep is None or sweep_of(m) == sweep))

    def measured(self, config: Mapping[str, Any], mix: str, sweep: int = 1) -> bool:
        return self.count(config, mix, sweep=sweep) >= self.repeats

    def runs_missing(self, config: Mapping[str, Any], sweep: int) -> int:
        """Runs ``sweep`` still owes ``config`` over every mix."""
        return sum(max(self.repeats - self.count(config, mix, sweep=sweep), 0)
                   for mix in self.mixes)

    def missing_mixes(self, config: Mapping[str, Any], sweep: int = 1) -> list[str]:
        """The mixes of ``config`` with fewer than ``repeats`` measurements in ``sweep``, in
        the sweep's order (with ``mix_order`` mirrored, even sweeps take the mixes in reverse,
        mirroring the odd ones; fixed, every sweep takes them as given)."""
        forward = sweep % 2 or self.mix_order == "fixed"
        names = list(self.mixes) if forward else list(reversed(self.mixes))
        return [name for name in names if not self.measured(config, name, sweep)]

    def pending(self) -> Config | None:
        """The first started configuration with a mix still to measure in the first sweep
        (an interrupted run, or a top-up after ``repeats`` was raised)."""
        return next((c for c in self.design if self.missing_mixes(c)), None)

    @property
    def design_closed(self) -> bool:
        """A later sweep has begun: the design is fixed (no configuration is added)."""
        return any((sweep_of(m) or 1) > 1 for m in self.measurements)

    def sweep_order(self, sweep: int) -> list[Config]:
        """The design in the order ``sweep`` visits it: forward in odd sweeps, backward in
        even ones (A B C, C B A, A B C, ...)."""
        return list(self.design) if sweep % 2 else list(reversed(self.design))

    def revisit(self) -> tuple[Config, int] | None:
        """The next (configuration, sweep) of the later sweeps with a run still missing."""
        for sweep in range(2, self.sweeps + 1):
            for config in self.sweep_order(sweep):
                if self.missing_mixes(config, sweep):
                    return config, sweep
        return None

    def compatible(self, *, engine: str, levels: Mapping[str, Sequence[Any]],
                   mixes: Mapping[str, Mapping[str, float]], repeats: int = 1,
                   sweeps: int = 1, design: str | None = None,
                   mix_order: str | None = None,
                   shapes: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Raise unless a resumed calibration asks for the same engine, levels and mixes, and
        at least as many repeats and sweeps (more top up what was measured so far), and, when
        ``design`` is given, the design it began with."""
        if engine != self.engine:
            raise ValidationError(f"state: made for {self.engine}, not {engine}")
        if set(levels) != set(self.levels) or \
                make_space(engine, levels, self.original).to_dict() != self.levels:
            raise ValidationError(
                f"state: calibrates {self.levels} but {dict(levels)} was asked; give the same "
                "--param options to resume, or a new --dir"
            )
        if {k: dict(v) for k, v in mixes.items()} != self.mixes:
            raise ValidationError(
                f"state: measures mixes {self.mixes} but {dict(mixes)} was asked; give the "
                "same --mix options to resume, or a new --dir"
            )
        if shapes is not None and {k: dict(v) for k, v in shapes.items()} != self.shapes:
            raise ValidationError(
                f"state: measures the shapes with {self.shapes} but {dict(shapes)} was asked; "
                "give the same --shape options to resume, or a new --dir"
            )
        if repeats < self.repeats:
            raise ValidationError(
                f"state: measures every mix {self.repeats} time(s) but --repeats {repeats} "
                "was asked; give at least as many to resume, or a new --dir"
            )
        if sweeps < self.sweeps:
            raise ValidationError(
                f"state: measures the design in {self.sweeps} sweep(s) but --sweeps {sweeps} "
                "was asked; give at least as many to resume, or a new --dir"
            )
        if design is not None and design != self.design_strategy:
            raise ValidationError(
                f"state: follows the {self.design_strategy} design but --design {design} was "
                f"asked; give --design {self.design_strategy} (or none) to resume, or a new "
                "--dir"
            )
        if mix_order is not None and mix_order != self.mix_order:
            raise ValidationError(
                f"state: takes the mixes in {self.mix_order} order but --mix-order "
                f"{mix_order} was asked; give --mix-order {self.mix_order} (or none) to "
                "resume, or a new --dir"
            )

    def to_dict(self) -> dict[str, Any]:
        """The state file: its kind and version, then every field."""
        return {
            "kind": STATE_KIND,
            "schema_version": 1,
            **{f.name: getattr(self, f.name) for f in fields(self)},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationState:
        if not isinstance(data, Mapping) or data.get("kind") != STATE_KIND:
            raise ValidationError(f"state: not a {STATE_KIND} document")
        if data.get("schema_version") != 1:
            raise ValidationError(f"state: unsupported schema_version "
                                  f"{data.get('schema_version')!r}")
        try:
            state = cls(
                engine=str(data["engine"]),
                levels={k: list(v) for k, v in data["levels"].items()},
                mixes={k: {c: float(f) for c, f in m.items()} for k, m in data["mixes"].items()},
                seed=int(data["seed"]),
                original=dict(data["original"]),
                applied=dict(data["applied"]),
                design=[dict(c) for c in data.get("design", [])],
                measurements=[dict(m) for m in data.get("measurements", [])],
                preloaded=bool(data.get("preloaded", False)),
                repeats=int(data.get("repeats", 1)),
                sweeps=int(data.get("sweeps", 1)),
                created_at=str(data.get("created_at", "")),
                command=str(data.get("command", "")),
                environment=dict(data.get("environment", {})),
                design_strategy=str(data.get("design_strategy", DESIGNS[0])),
                mix_order=str(data.get("mix_order", MIX_ORDERS[0])),
                shapes={k: dict(v) for k, v in (data.get("shapes") or {}).items()},
            )
        except (KeyError, AttributeError, TypeError, ValueError) as exc:
            raise ValidationError(f"state: malformed ({exc!r})") from None
        _ = state.space  # validates the levels against the engine's space
        if state.design_strategy not in DESIGNS:
            raise ValidationError(f"state: design_strategy must be one of "
                                  f"{', '.join(DESIGNS)}, got {state.design_strategy!r}")
        if state.mix_order not in MIX_ORDERS:
            raise ValidationError(f"state: mix_order must be one of {', '.join(MIX_ORDERS)}, "
                                  f"got {state.mix_order!r}")
        if state.repeats < 1 or state.sweeps < 1:
            raise ValidationError(f"state: repeats and sweeps must be >= 1, got "
                                  f"{state.repeats} and {state.sweeps}")
        return state

    def save(self, path: str | Path) -> None:
        _write_atomic(Path(path), json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CalibrationState:
        from planner import inputs

        kind = inputs.FileKind("calibration state", inputs.STATE.max_bytes)
        data = inputs.load_json(path, kind=kind)
        with inputs.in_file(path):
            return cls.from_dict(data)


def sweep_of(measurement: Mapping[str, Any]) -> int | None:
    """The sweep a measurement belongs to (records from before sweeps existed: the first);
    None for the final re-measurement of the original (``phase: recheck``)."""
    if measurement.get("phase") == "recheck":
        return None
    return int(measurement.get("sweep", 1))


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so an interruption never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


#: The observations' column for each cache's hit ratio over the window (ExecutorBench's
#: ``caches``); empty where it was not read.
CACHE_HIT_COLUMNS = {"keys": "key_cache_hit_ratio", "rows": "row_cache_hit_ratio"}


def observations_frame(state: CalibrationState) -> pd.DataFrame:
    """One row per measurement: class fractions, calibrated parameters, ``ops_per_s``.

    This is the CSV :func:`planner.model.performance.fit_model` reads; measurements with no
    successful operation are left out (they carry no throughput to fit).
    """
    classes = classes_for(state.engine)
    rows = []
    for m in state.measurements:
        if not m.get("ops_per_s", 0) > 0:
            continue
        mix = state.mixes[m["mix"]]
        row: dict[str, Any] = {c: mix.get(c, 0.0) for c in classes}
        row.update({k: m["config"][k] for k in state.levels})
        row[TARGET] = m["ops_per_s"]
        latency = m.get("latency_ms") or {}
        row.update({"p50_ms": latency.get("p50"), "p99_ms": latency.get("p99")})
        caches = m.get("caches") or {}
        row.update({column: (caches.get(name) or {}).get("hit_ratio")
                    for name, column in CACHE_HIT_COLUMNS.items()})
        row["hit_ratio"] = m.get("hit_ratio")
        rows.append(row)
    return pd.DataFrame(rows, columns=[*classes, *state.levels, TARGET, *MEASURED_COLUMNS])


def write_observations(state: CalibrationState, path: str | Path) -> int:
    """Rewrite the observations CSV from ``state``; returns the number of rows."""
    df = observations_frame(state)
    _write_atomic(Path(path), df.to_csv(index=False))
    return len(df)

