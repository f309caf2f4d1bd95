"""Calibration: measure chosen configurations on a live cluster and fit the performance model.

Strategy (docs/calibration.md)
------------------------------
The calibration space is a finite grid: each chosen parameter over a few levels (the value
the cluster runs now is always one of them). The design starts where the cluster is (the
configuration running before calibration), then adds configurations greedily by *maximin*
distance (each new point as far as possible from every point already chosen), so the first
few runs spread over the grid. Once the observations can fit a model, each next
configuration is the unmeasured one where the fitted model is least sure: a configuration
holding a value never measured comes first (the model has no term for it yet), then the
largest predictive variance of log throughput averaged over the mixes (the coefficient
uncertainty of the OLS fit, which grows away from what was measured). Ties go to the
maximin distance.

Each configuration is applied through the executor (only the keys that change, so a
live-only change restarts nothing), warmed up, and measured once per workload mix; every
(configuration, mix) measurement is saved at once in a state file, so an interrupted
calibration resumes and skips what is already measured. The observations CSV (the format
:func:`planner.perfmodel.fit_model` reads) is rewritten from the state after each
measurement.

Fit and error: :func:`fit_observations` scores each design by leave-one-configuration-out
MAPE (every configuration predicted by a model that never saw it: the error a plan meets
when it moves to a configuration), keeps the best design, refits it on every row with
:func:`planner.perfmodel.fit_design`, and reports the held-out and in-sample MAPE next to
the mix-only baseline (no configuration terms). The baseline is a candidate too: when it
predicts unseen configurations best, the configuration terms are noise and the model
claims no configuration effect.

The cluster side is a :class:`Bench` (apply changes, warm up, measure): :class:`ExecutorBench`
drives the executor playbook and :func:`planner.loadgen.run_load`; tests use a synthetic one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import yaml

from planner.errors import KairosError, ValidationError
from planner.perfmodel import TARGET, PerformanceModel, fit_design
from planner.spaces import get_space
from planner.workload import classes_for

STATE_KIND = "kairos-calibration"
#: The design without configuration terms (the mix alone), scored beside the others.
MIX_ONLY = "mix-only"
#: Mixes measured when none are given (SOPHIA's read-heavy and write-heavy workloads).
DEFAULT_MIXES: dict[str, dict[str, float]] = {
    "read-heavy": {"read": 0.9, "update": 0.1},
    "write-heavy": {"read": 0.1, "update": 0.9},
}
#: Largest grid the design searches (product of the levels of every parameter).
MAX_GRID = 4096
#: Executor wall time assumed for the minutes budget before anything was measured.
ASSUMED_LIVE_APPLY_SECONDS = 40.0
ASSUMED_RESTART_APPLY_SECONDS = 180.0

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
        out[name] = _ordered(engine, name, levels)
    return out


def default_levels(engine: str) -> dict[str, tuple[Any, ...]]:
    """The space's grid keys over their candidate values (what the optimiser searches)."""
    space = get_space(engine)
    return {k: tuple(space[k].candidate_values or ()) for k in space.grid_keys}


def parse_mixes(specs: Sequence[str], engine: str) -> dict[str, dict[str, float]]:
    """``["read-heavy:read=0.9,update=0.1", ...]`` -> ``{name: mix over every class}``."""
    from planner.loadgen import parse_mix

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


def _ordered(engine: str, name: str, levels: Sequence[Any]) -> tuple[Any, ...]:
    param = get_space(engine)[name]
    if param.type in ("enum", "bool"):
        return tuple(levels)
    return tuple(sorted(levels, key=param.numeric))


def config_key(config: Mapping[str, Any]) -> str:
    """A stable text key of a configuration (state file, grouping)."""
    return json.dumps(dict(config), sort_keys=True)


# ------------------------------------------------------------------------ design
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
        out[name] = _ordered(engine, name, merged)
    return CalibrationSpace(engine, out)


def _min_distance(space: CalibrationSpace, config: Config, chosen: Sequence[Config]) -> float:
    if not chosen:
        return math.inf
    x = space.coordinates(config)
    return min(float(np.linalg.norm(x - space.coordinates(c))) for c in chosen)


def _unchosen(space: CalibrationSpace, chosen: Sequence[Config],
              candidates: Sequence[Config] | None) -> list[Config]:
    taken = {config_key(c) for c in chosen}
    pool = space.grid() if candidates is None else candidates
    return [c for c in pool if config_key(c) not in taken]


def maximin_next(space: CalibrationSpace, chosen: Sequence[Config], seed: int,
                 candidates: Sequence[Config] | None = None) -> Config | None:
    """The unchosen grid point (of ``candidates``, default the whole grid) farthest from every
    chosen one (None when none is left).

    Ties are broken by a seeded shuffle of the grid, so a seed gives one design.
    """
    rest = _unchosen(space, chosen, candidates)
    if not rest:
        return None
    order = np.random.default_rng(seed).permutation(len(rest))
    best, best_d = None, -1.0
    for i in order:
        d = _min_distance(space, rest[i], chosen)
        if d > best_d + 1e-12:
            best, best_d = rest[i], d
    return best


def uncertainty_next(
    space: CalibrationSpace,
    chosen: Sequence[Config],
    model: PerformanceModel,
    mixes: Sequence[Mapping[str, float]],
    seed: int,
    candidates: Sequence[Config] | None = None,
) -> Config | None:
    """The unchosen grid point (of ``candidates``, default the whole grid) where ``model`` is
    least sure (see the module docstring)."""
    rest = _unchosen(space, chosen, candidates)
    if not rest:
        return None
    seen = {name: {c[name] for c in chosen} for name in space.params}
    mix_m = model.mix_matrix(mixes)
    _, var = model.predict_log(mix_m, model.config_matrix(rest))
    mean_var = var.mean(axis=0)
    order = np.random.default_rng(seed).permutation(len(rest))

    def score(i: int) -> tuple[int, float, float]:
        config = rest[i]
        novel = sum(config[n] not in seen[n] for n in space.params)
        return (novel, round(float(mean_var[i]), 12), _min_distance(space, config, chosen))

    return rest[max(order, key=score)]


# ------------------------------------------------------------------------- state
@dataclass
class CalibrationState:
    """Everything a calibration has decided and measured; saved after every measurement.

    ``original`` is the configuration (calibrated parameters only) that ran before the
    calibration began, restored at the end; ``applied`` is what the calibration last applied;
    ``design`` lists the configurations in the order they were started; ``measurements``
    holds one record per measurement: ``repeats`` per (configuration, mix), taken in rounds
    over the mixes, plus the re-measurements of the original at the end (``"phase":
    "recheck"``, see :func:`recheck_original`).
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

    @property
    def space(self) -> CalibrationSpace:
        return CalibrationSpace(
            self.engine, {k: _ordered(self.engine, k, v) for k, v in self.levels.items()}
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
        the sweep's order (even sweeps take the mixes in reverse, mirroring the odd ones)."""
        names = list(self.mixes) if sweep % 2 else list(reversed(self.mixes))
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
                   sweeps: int = 1) -> None:
        """Raise unless a resumed calibration asks for the same engine, levels and mixes, and
        at least as many repeats and sweeps (more top up what was measured so far)."""
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": STATE_KIND,
            "schema_version": 1,
            "engine": self.engine,
            "levels": self.levels,
            "mixes": self.mixes,
            "seed": self.seed,
            "original": self.original,
            "applied": self.applied,
            "design": self.design,
            "measurements": self.measurements,
            "preloaded": self.preloaded,
            "repeats": self.repeats,
            "sweeps": self.sweeps,
            "created_at": self.created_at,
            "command": self.command,
            "environment": self.environment,
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
            )
        except (KeyError, AttributeError, TypeError, ValueError) as exc:
            raise ValidationError(f"state: malformed ({exc!r})") from None
        _ = state.space  # validates the levels against the engine's space
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


def observations_frame(state: CalibrationState) -> pd.DataFrame:
    """One row per measurement: class fractions, calibrated parameters, ``ops_per_s``.

    This is the CSV :func:`planner.perfmodel.fit_model` reads; measurements with no
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
        rows.append(row)
    return pd.DataFrame(rows, columns=[*classes, *state.levels, TARGET])


def write_observations(state: CalibrationState, path: str | Path) -> int:
    """Rewrite the observations CSV from ``state``; returns the number of rows."""
    df = observations_frame(state)
    _write_atomic(Path(path), df.to_csv(index=False))
    return len(df)


# --------------------------------------------------------------------------- fit
def _mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - actual) / actual))


def _predict_rows(model: PerformanceModel, df: pd.DataFrame, params: Sequence[str]) -> np.ndarray:
    classes = model.classes
    out = np.empty(len(df))
    for i, row in enumerate(df.to_dict("records")):
        mix = {c: float(row[c]) for c in classes}
        config = {p: _plain(row[p]) for p in params}
        out[i] = model.predict(mix, config).ops_per_s
    return out


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _row_keys(df: pd.DataFrame, params: Sequence[str]) -> list[str]:
    return [config_key({p: _plain(r[p]) for p in params}) for r in df.to_dict("records")]


def config_means(df: pd.DataFrame, *, engine: str, params: Sequence[str]) -> pd.DataFrame:
    """One row per (configuration, mix): the geometric mean of its measurements.

    Geometric, because the model is fitted on log throughput. This is what a configuration
    delivers under a mix as far as repeated runs can tell, and what the errors of
    :func:`fit_observations` are measured against; with one run per pair it is the row.
    """
    cols = [*classes_for(engine), *params]
    logged = df.assign(**{TARGET: np.log(df[TARGET].astype(float))})
    means = logged.groupby(cols, sort=False, dropna=False)[TARGET].mean().reset_index()
    return means.assign(**{TARGET: np.exp(means[TARGET])})


def repeat_spread(df: pd.DataFrame, *, engine: str, params: Sequence[str]) -> float | None:
    """Run-to-run noise: mean ``|run / its (configuration, mix) geometric mean - 1|`` over the
    pairs measured more than once (None when none was). No model can predict a single run
    better than this."""
    cols = [*classes_for(engine), *params]
    logged = np.log(df[TARGET].astype(float))
    groups = logged.groupby([df[c] for c in cols], sort=False, dropna=False)
    dev = [np.abs(np.exp(g - g.mean()) - 1) for _, g in groups if len(g) > 1]
    return float(np.mean(np.concatenate(dev))) if dev else None


def leave_one_config_out(
    df: pd.DataFrame, *, engine: str, design: str, params: Sequence[str],
    mix_only: bool = False,
) -> dict[str, Any]:
    """Predict each configuration from a model fitted on the other configurations' runs.

    ``params`` are the configuration columns (they define the groups). ``mix_only`` fits
    without them: the baseline that says how much the configuration terms explain. The
    prediction is scored against the configuration's measured throughput per mix (the
    geometric mean of its runs, :func:`config_means`). Returns ``{"mape": pooled MAPE over
    the predicted (configuration, mix) pairs or None, "per_config": [...], "skipped":
    [reasons]}``; a fold is skipped when its training rows cannot fit the design (too few
    rows, or parameters that never vary independently there).
    """
    keys = _row_keys(df, params)
    means = config_means(df, engine=engine, params=params)
    mean_keys = _row_keys(means, params)
    fit_df = df.drop(columns=list(params)) if mix_only else df
    actual: list[float] = []
    predicted: list[float] = []
    per_config: list[dict[str, Any]] = []
    skipped: list[str] = []
    for key in dict.fromkeys(keys):
        held = np.array([k == key for k in keys])
        try:
            model = fit_design(fit_df[~held], engine=engine, design=design)
        except ValidationError as exc:
            skipped.append(f"{key}: {exc}")
            continue
        test = means[np.array([k == key for k in mean_keys])]
        pred = _predict_rows(model, test, [] if mix_only else params)
        y = test[TARGET].to_numpy(dtype=float)
        actual.extend(y)
        predicted.extend(pred)
        per_config.append({"config": json.loads(key), "mape": _mape(y, pred)})
    mape = _mape(np.array(actual), np.array(predicted)) if actual else None
    return {"mape": mape, "per_config": per_config, "skipped": skipped}


def fit_observations(
    df: pd.DataFrame, *, engine: str, name: str | None = None
) -> tuple[PerformanceModel | None, dict[str, Any]]:
    """Choose the design by leave-one-configuration-out MAPE, refit it on every row.

    Returns ``(model or None, report)``; the model is None (and ``report["error"]`` says why)
    when no design can be fitted on the rows. The report holds the held-out MAPE of the
    chosen design (None when no fold could be fitted), the in-sample MAPE, and the same two
    figures for a mix-only baseline, all against the (configuration, mix) geometric means of
    the runs; and the runs' own spread around those means (``repeat_spread``).
    """
    classes = classes_for(engine)
    params = [c for c in df.columns if c not in (*classes, TARGET)]
    varying = [p for p in params if df[p].astype(str).nunique() > 1]
    n_configs = len(set(_row_keys(df, params)))
    report: dict[str, Any] = {
        "n_observations": len(df),
        "n_configurations": n_configs,
        "params": varying,
        "validation": "leave-one-configuration-out",
    }
    candidates: dict[str, dict[str, Any]] = {}
    for design in ("interaction", "additive"):
        try:
            fit_design(df, engine=engine, design=design)
        except ValidationError as exc:
            candidates[design] = {"mape": None, "error": str(exc)}
            continue
        candidates[design] = leave_one_config_out(df, engine=engine, design=design,
                                                  params=params)
    fittable = [d for d, c in candidates.items() if "error" not in c]
    if not fittable:
        report["candidates"] = {d: c.get("mape") for d, c in candidates.items()}
        report["error"] = "; ".join(c["error"] for c in candidates.values())
        report["heldout_mape"] = None
        return None, report
    # The mix-only model competes too: configuration terms that predict an unseen
    # configuration worse than the mix alone are fitted noise, and a planner must not
    # restart nodes for them.
    baseline = leave_one_config_out(df, engine=engine, design="interaction", params=params,
                                    mix_only=True)
    candidates[MIX_ONLY] = baseline
    report["candidates"] = {d: c.get("mape") for d, c in candidates.items()}
    scored = [d for d in [*fittable, MIX_ONLY] if candidates[d]["mape"] is not None]
    # With a held-out figure the lowest wins (a configuration design on a tie); without,
    # the smaller (additive) configuration design.
    chosen = min(scored, key=lambda d: (candidates[d]["mape"], d == MIX_ONLY)) if scored \
        else fittable[-1]
    means = config_means(df, engine=engine, params=params)
    y = means[TARGET].to_numpy(dtype=float)
    mix_model: PerformanceModel | None = None
    baseline_in_sample: float | None = None
    with contextlib.suppress(ValidationError):
        mix_model = fit_design(df, engine=engine, design="interaction", params=[])
        baseline_in_sample = _mape(y, _predict_rows(mix_model, means, []))
    model_name = name or f"{engine}-calibrated"
    if chosen == MIX_ONLY and mix_model is not None:
        model = dataclasses.replace(mix_model, name=model_name)
    else:
        model = fit_design(df, engine=engine, design=chosen, name=model_name)
    report.update({
        "design": chosen,
        "heldout_mape": candidates[chosen]["mape"],
        "heldout_per_config": candidates[chosen]["per_config"],
        "heldout_skipped": candidates[chosen]["skipped"],
        "in_sample_mape": _mape(y, _predict_rows(model, means, params)),
        "repeat_spread": repeat_spread(df, engine=engine, params=params),
        "baseline_heldout_mape": baseline["mape"],
        "baseline_in_sample_mape": baseline_in_sample,
        "r_squared": model.info["fit"]["r_squared"],
        "sigma": model.sigma,
        "notes": model.info["fit"]["notes"],
    })
    return model, report


def _geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


def best_by_mix(state: CalibrationState) -> dict[str, dict[str, Any]]:
    """Per mix: the best measured configuration against the original.

    Each configuration counts with the geometric mean of its runs (every sweep; the final
    re-measurement excluded). With one sweep, the original's runs are those taken first (the
    start of the calibration); after :func:`recheck_original`, its re-measured figure and
    its drift are given too: a gain smaller than that drift is not one to stand behind. With
    several sweeps the original's runs span the calibration like every other
    configuration's, so the gain is free of a linear drift; its drift is then its last sweep
    against its first (``original_first_sweep_ops_per_s``, ``original_last_sweep_ops_per_s``).
    """
    out: dict[str, dict[str, Any]] = {}
    original = config_key(state.original)
    last = state.sweeps
    for mix in state.mixes:
        runs: dict[str, list[float]] = {}
        recheck: list[float] = []
        by_sweep: dict[int, list[float]] = {}
        for m in state.measurements:
            if m["mix"] != mix or not m.get("ops_per_s", 0) > 0:
                continue
            sweep = sweep_of(m)
            if sweep is None:
                recheck.append(m["ops_per_s"])
                continue
            key = config_key(m["config"])
            runs.setdefault(key, []).append(m["ops_per_s"])
            if key == original:
                by_sweep.setdefault(sweep, []).append(m["ops_per_s"])
        if not runs:
            continue
        means = {key: _geomean(v) for key, v in runs.items()}
        best = max(means, key=lambda key: means[key])
        base = means.get(original)
        entry: dict[str, Any] = {
            "best_config": json.loads(best),
            "best_ops_per_s": round(means[best], 1),
            "best_runs": len(runs[best]),
            "original_ops_per_s": round(base, 1) if base else None,
            "gain": means[best] / base - 1 if base else None,
        }
        again = _geomean(recheck) if recheck else None
        entry.update({
            "original_recheck_ops_per_s": round(again, 1) if again else None,
            "gain_over_recheck": means[best] / again - 1 if again else None,
        })
        if last > 1:
            first_s = _geomean(by_sweep[1]) if by_sweep.get(1) else None
            last_s = _geomean(by_sweep[last]) if by_sweep.get(last) else None
            entry.update({
                "original_first_sweep_ops_per_s": round(first_s, 1) if first_s else None,
                "original_last_sweep_ops_per_s": round(last_s, 1) if last_s else None,
                "original_drift": last_s / first_s - 1 if first_s and last_s else None,
            })
        else:
            entry["original_drift"] = again / base - 1 if again and base else None
        out[mix] = entry
    return out


def sweep_drift(state: CalibrationState) -> dict[str, Any] | None:
    """How far the whole cluster moved between the first and the last sweep: the geometric
    mean over every (configuration, mix) measured in both of last / first (None with one
    sweep, or before the last sweep measured anything)."""
    if state.sweeps < 2:
        return None
    runs: dict[tuple[str, str, int], list[float]] = {}
    for m in state.measurements:
        sweep = sweep_of(m)
        if sweep in (1, state.sweeps) and m.get("ops_per_s", 0) > 0:
            runs.setdefault((config_key(m["config"]), m["mix"], sweep), []).append(
                m["ops_per_s"])
    ratios = [_geomean(runs[(c, mix, state.sweeps)]) / _geomean(v)
              for (c, mix, sweep), v in runs.items()
              if sweep == 1 and (c, mix, state.sweeps) in runs]
    if not ratios:
        return None
    return {"first_to_last": _geomean(ratios) - 1, "pairs": len(ratios),
            "per_pair_range": [min(ratios) - 1, max(ratios) - 1]}


# ------------------------------------------------------------------------ bench
class Bench(Protocol):
    """The cluster side of a calibration."""

    def apply(self, changes: Mapping[str, Any]) -> None:
        """Make the cluster run ``changes`` (only the keys that differ from now)."""

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool) -> None:
        """Run load that is not measured (after a change; ``preload`` writes every record;
        ``restarted``: the nodes were restarted, or the cluster is cold)."""

    def measure(self, mix: Mapping[str, float]) -> dict[str, Any]:
        """Measure one mix: ``{"ops_per_s": successful ops/s, "failed": n, ...}``."""

    def expected_seconds(self, changes: Mapping[str, Any], n_mixes: int) -> float:
        """Wall time one configuration is expected to take (for the minutes budget)."""


@dataclass(frozen=True)
class Budget:
    """``runs``: configurations in the whole calibration (resumes included); ``minutes``:
    wall time of this invocation (no configuration starts that would not finish in it)."""

    runs: int | None = None
    minutes: float | None = None

    def __post_init__(self) -> None:
        if self.runs is None and self.minutes is None:
            raise ValidationError("budget: give --runs, --minutes or both")
        if self.runs is not None and self.runs < 1:
            raise ValidationError(f"--runs: must be >= 1, got {self.runs}")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise ValidationError(f"--minutes: must be positive, got {self.minutes}")


def same_restart_plot(state: CalibrationState) -> list[Config] | None:
    """The unmeasured grid points the cluster can reach from where it is without a restart
    (its restart-class values kept), or None when there is none or nothing needs a restart.

    Measuring these first is a split-plot design: hard-to-change factors (a rolling restart,
    then minutes of JIT warm-up) change as rarely as possible.
    """
    space = state.space
    hard = get_space(state.engine).restart_params(space.params)
    if not hard:
        return None
    plot = [c for c in space.grid() if all(c[k] == state.applied[k] for k in hard)]
    return plot if _unchosen(space, state.design, plot) else None


def choose_next(state: CalibrationState, *, initial: int,
                group_restarts: bool = False) -> tuple[Config | None, str]:
    """The next configuration to start and why (``None`` when the grid is exhausted).

    With ``group_restarts``, the choice is made among :func:`same_restart_plot` while it has
    any left.
    """
    space = state.space
    if not state.design:
        return dict(state.original), "the configuration running before calibration"
    plot = same_restart_plot(state) if group_restarts else None
    where = ", no restart from here" if plot else ""
    seed = state.seed + len(state.design)
    if len(state.design) < initial:
        return maximin_next(space, state.design, seed, plot), "space-filling" + where
    df = observations_frame(state)
    model, report = fit_observations(df, engine=state.engine) if len(df) else (None, {})
    if model is None:
        return (maximin_next(space, state.design, seed, plot),
                "space-filling (too few observations to fit a model yet)" + where)
    nxt = uncertainty_next(space, state.design, model, list(state.mixes.values()), seed, plot)
    return nxt, f"most uncertain under the {report['design']} model{where}"


def _diff(base: Mapping[str, Any], config: Mapping[str, Any]) -> Config:
    """The keys of ``config`` whose value differs from ``base`` (what a change must apply)."""
    return {k: v for k, v in config.items() if base.get(k) != v}


def _changes(state: CalibrationState, config: Mapping[str, Any]) -> Config:
    return _diff(state.applied, config)


def run_calibration(
    state: CalibrationState,
    *,
    bench: Bench,
    budget: Budget,
    initial: int,
    state_path: str | Path,
    observations_path: str | Path,
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
    clock: Callable[[], float] = time.monotonic,
    group_restarts: bool = False,
) -> str:
    """Measure configurations until the budget or the grid is used up; returns why it stopped.

    The first sweep builds the design (one configuration after another, ``repeats`` runs per
    mix each). With ``state.sweeps`` > 1 the design is then measured again, backward, forward,
    ... (:meth:`CalibrationState.sweep_order`): every configuration's runs are centred on the
    same moment, so a linear drift of the cluster biases no configuration against another.

    The state is saved after every change and measurement; on an exception (a failed
    rollout, Ctrl-C) it holds everything measured so far and the call can be repeated.
    ``group_restarts``: see :func:`choose_next`. The warm-up after a restart-class change,
    and the very first one (a cluster started moments ago is as cold), is a restart's.
    """
    if initial < 1:
        raise ValidationError(f"--initial: must be >= 1, got {initial}")
    began = clock()
    visits_here = 0  # configurations started in this invocation (for the time left)
    n_mixes = len(state.mixes)
    designed = ""  # why the first sweep ended, once it has
    if state.design_closed:
        designed = _design_ended(state, budget) or (
            f"design fixed at {len(state.design)} configurations (a later sweep had begun)")

    def time_left() -> float:
        return math.inf if budget.minutes is None else budget.minutes * 60 - (clock() - began)

    while True:
        sweep = 1
        config = state.pending()
        if config is not None:
            # An interrupted configuration, or one topped up after --repeats was raised.
            need = bench.expected_seconds(_changes(state, config),
                                          state.runs_missing(config, 1))
            if need > time_left():
                return (f"time budget: {time_left() / 60:.1f} min left, finishing {config} "
                        f"needs about {need / 60:.1f}")
            log(f"calibrate: resuming {config} ({len(state.missing_mixes(config))} mix(es) "
                "left)")
        elif not designed:
            designed = _design_ended(state, budget)
            config, why = (None, "") if designed else choose_next(
                state, initial=initial, group_restarts=group_restarts)
            if config is not None:
                # Time for this configuration in every sweep and for the later sweeps of
                # those already chosen, so the mirrored sweeps can finish.
                need = (state.sweeps * bench.expected_seconds(_changes(state, config),
                                                              n_mixes * state.repeats)
                        + _later_sweeps_seconds(state, bench))
                if need > time_left():
                    designed = (f"time budget: {time_left() / 60:.1f} min left, the next "
                                f"configuration needs about {need / 60:.1f}")
                    config = None
            if config is None:
                if state.sweeps == 1:
                    return designed
                log(f"calibrate: design complete ({designed}); measuring it again in "
                    f"{state.sweeps - 1} mirrored sweep(s)")
                continue
            state.design.append(config)
            state.save(state_path)
            eta = _eta(began, clock(), visits_here, _visits_left(state, budget))
            log(f"calibrate: configuration {len(state.design)}"
                + (f"/{budget.runs}" if budget.runs else "") + f" {config} ({why}"
                + (f", {eta}" if eta else "") + ")")
        if config is None:
            nxt = state.revisit()
            if nxt is None:
                return designed + (f"; {state.sweeps} sweeps measured" if state.sweeps > 1
                                   else "")
            config, sweep = nxt
            need = bench.expected_seconds(_changes(state, config),
                                          state.runs_missing(config, sweep))
            if need > time_left():
                return (f"time budget: {time_left() / 60:.1f} min left, sweep {sweep} of "
                        f"{config} needs about {need / 60:.1f}")
            position = state.sweep_order(sweep).index(config) + 1
            eta = _eta(began, clock(), visits_here, _visits_left(state, budget))
            log(f"calibrate: sweep {sweep}/{state.sweeps}, configuration {position}/"
                f"{len(state.design)} {config}" + (f" ({eta})" if eta else ""))
        visits_here += 1
        changes = _changes(state, config)
        restarted = bool(get_space(state.engine).restart_params(changes)) or not state.preloaded
        if changes:
            t0 = clock()
            log(f"calibrate: applying {changes} through the executor")
            bench.apply(changes)
            state.applied.update(changes)
            state.save(state_path)
            log(f"calibrate: applied in {clock() - t0:.0f} s")
        missing = state.missing_mixes(config, sweep)
        bench.warm_up(state.mixes[missing[0]], preload=not state.preloaded,
                      restarted=restarted)
        if not state.preloaded:
            state.preloaded = True
            state.save(state_path)
        # Rounds over the mixes (A B A B, not A A B B), so a slow drift of the cluster
        # spreads over every mix instead of biasing the one measured last.
        while missing:
            for name in missing:
                _measure(state, config, name, bench=bench, state_path=state_path,
                         observations_path=observations_path, log=log, sweep=sweep)
            missing = state.missing_mixes(config, sweep)


def _later_sweeps_seconds(state: CalibrationState, bench: Bench) -> float:
    """Expected wall time of the runs the later sweeps still owe the current design."""
    total, at = 0.0, state.applied
    for sweep in range(2, state.sweeps + 1):
        for config in state.sweep_order(sweep):
            runs = state.runs_missing(config, sweep)
            if runs > 0:
                total += bench.expected_seconds(_diff(at, config), runs)
                at = config
    return total


def _design_ended(state: CalibrationState, budget: Budget) -> str:
    """Why the first sweep adds no further configuration ("" while it may)."""
    n = len(state.design)
    if budget.runs is not None and n >= budget.runs:
        return f"run budget reached ({n} configurations)"
    if n >= len(state.space.grid()):
        return f"every configuration of the grid measured ({n})"
    return ""


def _visits_left(state: CalibrationState, budget: Budget) -> int | None:
    """Configuration visits still to start (every sweep), when the run budget tells."""
    if budget.runs is None:
        return None
    planned = max(budget.runs, len(state.design))
    done = sum(1 for s in range(1, state.sweeps + 1) for c in state.sweep_order(s)
               if not state.missing_mixes(c, s))
    return planned * state.sweeps - done


def _eta(began: float, now: float, visits_here: int, left: int | None) -> str:
    if not visits_here or not left:
        return ""
    return f"about {(now - began) / visits_here * left / 60:.0f} min left"


def _measure(state: CalibrationState, config: Mapping[str, Any], mix: str, *, bench: Bench,
             state_path: str | Path, observations_path: str | Path,
             log: Callable[[str], None], phase: str | None = None, sweep: int = 1) -> None:
    """Measure ``mix`` once, record it and save the state and the observations."""
    result = bench.measure(state.mixes[mix])
    # A recheck counts its runs apart from the sweeps; every other run belongs to a sweep.
    where: dict[str, Any] = {"phase": phase} if phase else {"sweep": sweep}
    run = state.count(config, mix, **where) + 1
    record = {"config": dict(config), "mix": mix, **result, "run": run,
              "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(), **where}
    state.measurements.append(record)
    state.save(state_path)
    write_observations(state, observations_path)
    label = f"{phase} " if phase else (f"sweep {sweep}, " if state.sweeps > 1 else "")
    log(f"calibrate: {mix} ({label}run {run}/{state.repeats}): {result['ops_per_s']:.0f} "
        f"ops/s, {result.get('failed', 0)} failed")


def restore(state: CalibrationState, *, bench: Bench, state_path: str | Path,
            log: Callable[[str], None]) -> Config:
    """Apply the configuration that ran before the calibration (the keys that differ)."""
    changes = _changes(state, state.original)
    if changes:
        log(f"calibrate: restoring {changes} through the executor")
        bench.apply(changes)
        state.applied.update(changes)
        state.save(state_path)
    return changes


def recheck_original(state: CalibrationState, *, bench: Bench, state_path: str | Path,
                     observations_path: str | Path, log: Callable[[str], None],
                     restarted: bool = False) -> int:
    """Measure the original configuration again (``repeats`` runs per mix) after
    :func:`restore`: the cluster's drift over the calibration, reported beside the gains.

    The runs are observations of the original like the first ones (``"phase": "recheck"``);
    a resumed recheck only takes the runs still missing. ``restarted``: the restore
    restarted nodes (a restart's warm-up). Returns the runs taken.
    """
    if config_key(state.applied) != config_key(state.original):
        raise KairosError(f"recheck: the cluster runs {state.applied}, not the original "
                          f"{state.original}; restore it first")

    def missing() -> list[str]:
        return [mix for mix in state.mixes
                if state.count(state.original, mix, phase="recheck") < state.repeats]

    todo = missing()
    if not todo:
        return 0
    log(f"calibrate: measuring the original {state.original} again (drift check)")
    bench.warm_up(state.mixes[todo[0]], preload=False, restarted=restarted)
    taken = 0
    while todo:
        for mix in todo:
            _measure(state, state.original, mix, bench=bench, state_path=state_path,
                     observations_path=observations_path, log=log, phase="recheck")
            taken += 1
        todo = missing()
    return taken


# ------------------------------------------------------------ the real cluster
def change_settings_command(
    *,
    ansible_playbook: str,
    playbook: str | Path,
    inventory: str | Path,
    changes: Mapping[str, Any],
    rollout_cl: str,
    tables: Sequence[str] = (),
) -> list[str]:
    """argv of the executor's "change these settings safely" entry point.

    Live keys are set on every node; restart keys roll through safe batches (the executor
    decides, see docs/executor.md). ``tables`` are the tables a compaction change applies to.
    """
    extra: dict[str, Any] = {"settings": dict(changes), "cl": rollout_cl}
    if "compaction" in changes:
        extra["kairos_tables"] = list(tables)
    return [ansible_playbook, "-i", str(inventory), str(playbook), "-e", json.dumps(extra)]


def find_ansible_playbook() -> str:
    """ansible-playbook beside this Python (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "ansible-playbook"
    if beside.exists():
        return str(beside)
    import shutil

    found = shutil.which("ansible-playbook")
    if not found:
        raise ValidationError("ansible-playbook: not found beside Python nor on PATH")
    return found


class ExecutorBench:
    """Applies changes with the executor playbook and measures with planner.loadgen.

    Parameters
    ----------
    load : planner.loadgen.LoadConfig
        The measurement run (hosts, CL, keys, concurrency); its mix and seconds are replaced
        per call.
    warmup_seconds, measure_seconds : float
    warmup_max_seconds : float
        After the first window, warm up in further windows of ``warmup_seconds`` for as long
        as the throughput still rises by more than ``warmup_tolerance`` from one window to
        the next, up to this many seconds of further windows (0: the first window only).
        A node just restarted runs cold (JIT, caches) for minutes: measured too early, a
        restart-class configuration looks worse than it is.
    warmup_tolerance : float
    restart_warmup_seconds : float
        The first window after a restart (and of the calibration) lasts at least this long.
    playbook, inventory : path
    rollout_cl : str
        Consistency level the executor keeps while restarting (its batching).
    log_path : path
        The executor's output is appended here (it is long); its tail is shown on failure.
    """

    def __init__(self, *, load: Any, warmup_seconds: float, measure_seconds: float,
                 playbook: str | Path, inventory: str | Path, rollout_cl: str,
                 warmup_max_seconds: float = 0.0, warmup_tolerance: float = 0.05,
                 restart_warmup_seconds: float = 0.0,
                 log_path: str | Path, ansible_playbook: str | None = None,
                 log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
                 playbook_timeout: float = 3600.0) -> None:
        self.load = load
        self.warmup_seconds = warmup_seconds
        self.warmup_max_seconds = warmup_max_seconds
        self.warmup_tolerance = warmup_tolerance
        self.restart_warmup_seconds = restart_warmup_seconds
        self.measure_seconds = measure_seconds
        self.playbook = Path(playbook).resolve()
        self.inventory = Path(inventory).resolve()
        self.rollout_cl = rollout_cl
        self.log_path = Path(log_path)
        self.ansible_playbook = ansible_playbook or find_ansible_playbook()
        self.log = log
        self.playbook_timeout = playbook_timeout

    def apply(self, changes: Mapping[str, Any]) -> None:
        argv = change_settings_command(
            ansible_playbook=self.ansible_playbook, playbook=self.playbook,
            inventory=self.inventory, changes=changes, rollout_cl=self.rollout_cl,
            tables=[f"{self.load.keyspace}.{self.load.table}"],
        )
        # The repository root: ansible.cfg there sets the roles, modules and module_utils.
        root = self.playbook.parent.parent
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as out:
            out.write(f"\n=== {datetime.now(UTC).isoformat()} {' '.join(argv)}\n")
            out.flush()
            # The environment passes through: credentials travel there, never in argv.
            proc = subprocess.run(argv, cwd=root, env=dict(os.environ), stdout=out,
                                  stderr=subprocess.STDOUT, timeout=self.playbook_timeout,
                                  check=False)
        if proc.returncode != 0:
            # A log of subprocess output, shown not parsed: odd bytes are replaced.
            tail = self.log_path.read_text(errors="replace").splitlines()[-25:]
            raise KairosError(
                f"the executor failed (rc {proc.returncode}) applying {dict(changes)}; the "
                f"calibration state is saved, rerun the same command to resume. Last lines of "
                f"{self.log_path}:\n" + "\n".join(tail)
            )

    def _run(self, mix: Mapping[str, float], seconds: float, preload: bool) -> Any:
        from dataclasses import replace

        from planner.loadgen import run_load

        config = replace(self.load, mix=dict(mix), seconds=seconds, preload=preload)
        result = run_load(config)
        if result.stopped_by == "stopped":
            # run_load swallows Ctrl-C and returns a short run: that is no measurement.
            raise KeyboardInterrupt
        return result

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool = False
                ) -> None:
        first = max(self.warmup_seconds, self.restart_warmup_seconds if restarted else 0.0)
        if first <= 0 and not preload:
            return
        window = max(self.warmup_seconds, 1.0)
        first = max(first, 1.0)
        self.log(f"calibrate: warming up {first:g} s"
                 + (" (after a restart)" if restarted and first > window else "")
                 + (" (preloading every record first)" if preload else ""))
        rate = measurement_from_result(self._run(mix, first, preload))["ops_per_s"]
        extra = 0.0
        while extra + window <= self.warmup_max_seconds:
            nxt = measurement_from_result(self._run(mix, window, False))["ops_per_s"]
            extra += window
            rising = nxt > rate * (1 + self.warmup_tolerance)
            self.log(f"calibrate: warm-up {rate:.0f} -> {nxt:.0f} ops/s"
                     + (", still rising" if rising else ", steady"))
            if not rising:
                return
            rate = nxt
        if extra:
            self.log(f"calibrate: warm-up stopped at --warmup-max ({first + extra:g} s in all) "
                     "while the throughput was still rising")

    def measure(self, mix: Mapping[str, float]) -> dict[str, Any]:
        shown = ",".join(f"{c}={f:g}" for c, f in mix.items() if f)
        self.log(f"calibrate: measuring {shown} for {self.measure_seconds:g} s")
        result = self._run(mix, self.measure_seconds, False)
        return measurement_from_result(result)

    def expected_seconds(self, changes: Mapping[str, Any], n_mixes: int) -> float:
        space = get_space(self.load.engine)
        restart = space.restart_params(changes)
        apply = (ASSUMED_RESTART_APPLY_SECONDS if restart
                 else ASSUMED_LIVE_APPLY_SECONDS if changes else 0.0)
        # ~10 s per load run for spawning workers and connecting; two warm-up windows
        # (the least a warm-up past the first window takes)
        windows = 2 if self.warmup_max_seconds >= self.warmup_seconds else 1
        warm = windows * (self.warmup_seconds + 10)
        if restart:
            warm += max(self.restart_warmup_seconds - self.warmup_seconds, 0.0)
        return apply + warm + n_mixes * (self.measure_seconds + 10)


def measurement_from_result(result: Any) -> dict[str, Any]:
    """The record of one measurement from a :class:`planner.loadgen.LoadResult`.

    ``ops_per_s`` counts successful operations only (failed ones are not throughput).
    """
    seconds = float(result.seconds)
    ok_ops = result.ops - result.failed
    return {
        "ops_per_s": round(ok_ops / seconds, 1) if seconds > 0 else 0.0,
        "ops": int(result.ops),
        "failed": int(result.failed),
        "failures": dict(result.failures),
        "seconds": round(seconds, 2),
        "latency_ms": dict(result.latency_ms),
    }


# ------------------------------------------------------------ running configuration
def parse_setting(engine: str, name: str, shown: str | None) -> Any:
    """A value as ``system_views.settings`` shows it -> canonical (unset -> the default)."""
    param = get_space(engine)[name]
    if shown is None or shown in ("", "null"):
        return param.default
    raw = yaml.safe_load(shown) if param.type != "size" else shown
    return param.coerce(raw)


def read_running_config(
    params: Sequence[str], *, hosts: Sequence[str], port: int, keyspace: str, table: str,
    timeout: float = 30.0,
) -> tuple[Config, str]:
    """The running values of ``params`` on every Cassandra node, and its release version.

    cassandra.yaml parameters come from each node's ``system_views.settings``, the compaction
    strategy from ``system_schema.tables`` for ``keyspace.table`` (the default strategy when
    the table does not exist yet). Credentials come from the environment (as for the load
    generator). The JVM heap cannot be read over CQL: give it with ``--current``.

    Raises
    ------
    ValidationError
        ``heap_size`` asked for, or the nodes run different values.
    KairosError
        A node cannot be reached.
    """
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    from planner.loadgen import CASSANDRA_PASSWORD_ENV, CASSANDRA_USER_ENV

    space = get_space("cassandra")
    unreadable = [p for p in params if space[p].location == "jvm"]
    if unreadable:
        raise ValidationError(f"{', '.join(unreadable)}: cannot be read over CQL; give the "
                              "running value with --current FILE")
    user = os.environ.get(CASSANDRA_USER_ENV)
    auth = PlainTextAuthProvider(username=user, password=os.environ.get(
        CASSANDRA_PASSWORD_ENV, "")) if user else None
    per_node: dict[str, Config] = {}
    version = ""
    for host in hosts:
        cluster = Cluster(
            [host], port=port, protocol_version=5, auth_provider=auth, connect_timeout=timeout,
            execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=WhiteListRoundRobinPolicy([host]),
                request_timeout=timeout)},
        )
        try:
            session = cluster.connect()
            shown = {r.name: r.value for r in session.execute(
                "SELECT name, value FROM system_views.settings")}
            values: Config = {}
            for p in params:
                if space[p].location == "table":
                    row = session.execute(
                        "SELECT compaction FROM system_schema.tables WHERE keyspace_name=%s "
                        "AND table_name=%s", (keyspace, table)).one()
                    values[p] = (str(row.compaction["class"]).rsplit(".", 1)[-1] if row
                                 else space[p].default)
                else:
                    values[p] = parse_setting("cassandra", p, shown.get(p))
            per_node[host] = values
            version = str(session.execute("SELECT release_version FROM system.local").one()
                          .release_version)
        except ValidationError:
            raise
        except Exception as exc:
            raise KairosError(f"{host}: cannot read the running configuration over CQL "
                              f"({type(exc).__name__}: {exc})") from None
        finally:
            cluster.shutdown()
    first = next(iter(per_node.values()))
    for host, values in per_node.items():
        differ = [k for k in params if values[k] != first[k]]
        if differ:
            raise ValidationError(
                f"the nodes run different values of {', '.join(differ)} ({host}: "
                f"{ {k: values[k] for k in differ} }); make them equal first, or give "
                "--current FILE"
            )
    return first, version


def describe_environment(cluster_version: str = "") -> dict[str, Any]:
    """Provenance of the measurements: hardware, versions, date."""
    from planner import __version__

    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "host": platform.node(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "kairos": __version__,
        "cluster_version": cluster_version,
    }
