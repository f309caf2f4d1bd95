"""Running a calibration: apply each configuration, warm up, measure every mix, save.

:func:`run_calibration` takes the configurations :mod:`planner.calibrate.design` chooses,
applies each through a :class:`Bench` (only the keys that change, so a live-only change
restarts nothing), warms up and measures every workload mix, and saves each measurement at
once in the state, so an interrupted calibration resumes and skips what is already
measured. With several sweeps the design is then measured again in mirrored order.
:func:`restore` and :func:`recheck_original` put the original configuration back and
measure the cluster's drift. The real cluster is :class:`planner.calibrate.bench.ExecutorBench`;
tests use a synthetic bench.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from planner.calibrate.design import choose_next
from planner.calibrate.space import Config, config_key
from planner.calibrate.state import CalibrationState, write_observations
from planner.errors import KairosError, ValidationError
from planner.model.spaces import get_space


class Bench(Protocol):
    """The cluster side of a calibration."""

    def apply(self, changes: Mapping[str, Any]) -> None:
        """Make the cluster run ``changes`` (only the keys that differ from now)."""

    def warm_up(self, mix: Mapping[str, float], *, preload: bool, restarted: bool,
                name: str = "") -> None:
        """Run load that is not measured (after a change; ``preload`` writes every record;
        ``restarted``: the nodes were restarted, or the cluster is cold). ``name``: the
        mix's name (a Redis bench runs the shape of that name)."""

    def measure(self, mix: Mapping[str, float], name: str = "") -> dict[str, Any]:
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
    run = _Invocation(state, bench=bench, budget=budget, initial=initial,
                      group_restarts=group_restarts, state_path=state_path,
                      observations_path=observations_path, log=log, clock=clock)
    while True:
        visit = run.next_visit()
        if isinstance(visit, str):
            return visit
        run.measure(*visit)


@dataclass
class _Invocation:
    """One call of :func:`run_calibration`: where to go next, and the visit itself.

    Besides the state it keeps what the call's decisions need: when the call began and how
    many configurations it started (the time budget and the ETA), and why the first sweep
    ended once it has.
    """

    state: CalibrationState
    bench: Bench
    budget: Budget
    initial: int
    group_restarts: bool
    state_path: str | Path
    observations_path: str | Path
    log: Callable[[str], None]
    clock: Callable[[], float]
    began: float = field(init=False)
    visits_here: int = field(init=False, default=0)  # configurations started in this call
    designed: str = field(init=False, default="")  # why the first sweep ended, once it has

    def __post_init__(self) -> None:
        self.began = self.clock()
        if self.state.design_closed:
            self.designed = _design_ended(self.state, self.budget) or (
                f"design fixed at {len(self.state.design)} configurations (a later sweep "
                "had begun)")

    def time_left(self) -> float:
        budget = self.budget
        return math.inf if budget.minutes is None else budget.minutes * 60 - (
            self.clock() - self.began)

    def eta(self) -> str:
        return _eta(self.began, self.clock(), self.visits_here,
                    _visits_left(self.state, self.budget))

    def next_visit(self) -> tuple[Config, int] | str:
        """The next (configuration, sweep) to measure, or why the calibration stops."""
        state = self.state
        config = state.pending()
        if config is not None:
            return self._resume(config)
        if not self.designed:
            config = self._design_next()
            if config is not None:
                return config, 1
            if state.sweeps == 1:
                return self.designed
            self.log(f"calibrate: design complete ({self.designed}); measuring it again in "
                     f"{state.sweeps - 1} mirrored sweep(s)")
        return self._revisit()

    def _resume(self, config: Config) -> tuple[Config, int] | str:
        """An interrupted configuration, or one topped up after --repeats was raised."""
        state = self.state
        need = self.bench.expected_seconds(_changes(state, config), state.runs_missing(config, 1))
        if need > self.time_left():
            return (f"time budget: {self.time_left() / 60:.1f} min left, finishing {config} "
                    f"needs about {need / 60:.1f}")
        self.log(f"calibrate: resuming {config} ({len(state.missing_mixes(config))} mix(es) "
                 "left)")
        return config, 1

    def _design_next(self) -> Config | None:
        """The next configuration of the first sweep, added to the design (None: it ended)."""
        state, budget = self.state, self.budget
        self.designed = _design_ended(state, budget)
        config, why = (None, "") if self.designed else choose_next(
            state, initial=self.initial, group_restarts=self.group_restarts)
        if config is None:
            return None
        # Time for this configuration in every sweep and for the later sweeps of those
        # already chosen, so the mirrored sweeps can finish.
        need = (state.sweeps * self.bench.expected_seconds(_changes(state, config),
                                                           len(state.mixes) * state.repeats)
                + _later_sweeps_seconds(state, self.bench))
        if need > self.time_left():
            self.designed = (f"time budget: {self.time_left() / 60:.1f} min left, the next "
                             f"configuration needs about {need / 60:.1f}")
            return None
        state.design.append(config)
        state.save(self.state_path)
        eta = self.eta()
        self.log(f"calibrate: configuration {len(state.design)}"
                 + (f"/{budget.runs}" if budget.runs else "") + f" {config} ({why}"
                 + (f", {eta}" if eta else "") + ")")
        return config

    def _revisit(self) -> tuple[Config, int] | str:
        """The next configuration of a later sweep, or why the calibration stops."""
        state = self.state
        nxt = state.revisit()
        if nxt is None:
            return self.designed + (f"; {state.sweeps} sweeps measured" if state.sweeps > 1
                                    else "")
        config, sweep = nxt
        need = self.bench.expected_seconds(_changes(state, config),
                                           state.runs_missing(config, sweep))
        if need > self.time_left():
            return (f"time budget: {self.time_left() / 60:.1f} min left, sweep {sweep} of "
                    f"{config} needs about {need / 60:.1f}")
        position = state.sweep_order(sweep).index(config) + 1
        eta = self.eta()
        self.log(f"calibrate: sweep {sweep}/{state.sweeps}, configuration {position}/"
                 f"{len(state.design)} {config}" + (f" ({eta})" if eta else ""))
        return config, sweep

    def measure(self, config: Config, sweep: int) -> None:
        """Apply ``config``, warm up, and take the runs ``sweep`` still owes it."""
        state, bench, log = self.state, self.bench, self.log
        self.visits_here += 1
        changes = _changes(state, config)
        # The first configuration is measured on JVMs as cold as just restarted ones.
        restarted = (bool(get_space(state.engine).restart_params(changes))
                     or not state.measurements)
        if changes:
            t0 = self.clock()
            log(f"calibrate: applying {changes} through the executor")
            bench.apply(changes)
            state.applied.update(changes)
            state.save(self.state_path)
            log(f"calibrate: applied in {self.clock() - t0:.0f} s")
        missing = state.missing_mixes(config, sweep)
        bench.warm_up(state.mixes[missing[0]], preload=not state.preloaded,
                      restarted=restarted, name=missing[0])
        if not state.preloaded:
            state.preloaded = True
            state.save(self.state_path)
        # Rounds over the mixes (A B A B, not A A B B), so a slow drift of the cluster
        # spreads over every mix instead of biasing the one measured last.
        while missing:
            for name in missing:
                _measure(state, config, name, bench=bench, state_path=self.state_path,
                         observations_path=self.observations_path, log=log, sweep=sweep)
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
    result = bench.measure(state.mixes[mix], name=mix)
    # A recheck counts its runs apart from the sweeps; every other run belongs to a sweep.
    where: dict[str, Any] = {"phase": phase} if phase else {"sweep": sweep}
    run = state.count(config, mix, **where) + 1
    record = {"config": dict(config), "mix": mix, **result, "run": run,
              "measured_at": datetime.now(UTC).replace(microsecond=0).isoformat(), **where}
    state.measurements.append(record)
    state.save(state_path)
    write_observations(state, observations_path)
    label = f"{phase} " if phase else (f"sweep {sweep}, " if state.sweeps > 1 else "")
    caches = "".join(f", {name[:-1]} cache hit ratio {c['hit_ratio']:.2f} ({c['entries']:,} "
                     f"entries)" for name, c in (result.get("caches") or {}).items()
                     if c.get("hit_ratio") is not None)
    log(f"calibrate: {mix} ({label}run {run}/{state.repeats}): {result['ops_per_s']:.0f} "
        f"ops/s, {result.get('failed', 0)} failed{caches}")


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
    bench.warm_up(state.mixes[todo[0]], preload=False, restarted=restarted,
                  name=todo[0])
    taken = 0
    while todo:
        for mix in todo:
            _measure(state, state.original, mix, bench=bench, state_path=state_path,
                     observations_path=observations_path, log=log, phase="recheck")
            taken += 1
        todo = missing()
    return taken

