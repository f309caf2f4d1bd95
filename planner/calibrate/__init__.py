"""Calibration: measure chosen configurations on a live cluster and fit the performance model.

The command line is ``kairos calibrate`` (:mod:`planner.commands.calibrate`); the strategy
is told in docs/calibration.md. In short: the calibration space is a finite grid of
configurations (the one running now always among them); the design starts where the
cluster is, spreads over the grid, then goes where the fitted model is least sure
(``maximin``, the default) or where a Gaussian process expects the largest improvement
(``bo``); each configuration is applied through the executor, warmed up and measured once
per workload mix, and every measurement is saved at once so an interrupted calibration
resumes; the model is the partially pooled fit, every configuration's effect shrunk
towards zero by as much as the runs' own spread says, with its held-out error.

This module is calibration's public face: import from here. The code lives in rooms along
its seams, each importing only those above it in this list:

- :mod:`planner.calibrate.space`: the grid (parameters over levels) and the mixes.
- :mod:`planner.calibrate.state`: the state file and the observations CSV.
- :mod:`planner.calibrate.importance`: the parameters ranked by importance, and which the
  model keeps.
- :mod:`planner.calibrate.fit`: the fit, its held-out error, the gains and the drift.
- :mod:`planner.calibrate.bo`: the Gaussian process and expected improvement of ``bo``.
- :mod:`planner.calibrate.design`: which configuration to measure next.
- :mod:`planner.calibrate.runner`: the loop that applies, warms up, measures and saves,
  against any :class:`Bench`.
- :mod:`planner.calibrate.bench`: the real cluster as a bench (executor playbook, load
  generator), and reading its running configuration.
"""

from __future__ import annotations

from planner.calibrate.bench import (
    ASSUMED_LIVE_APPLY_SECONDS,
    ASSUMED_RESTART_APPLY_SECONDS,
    ExecutorBench,
    cache_window,
    change_settings_command,
    describe_environment,
    find_ansible_playbook,
    measurement_from_result,
    parse_setting,
    read_caches,
    read_running_config,
)
from planner.calibrate.design import choose_next, maximin_next, same_restart_plot, uncertainty_next
from planner.calibrate.fit import (
    MIX_ONLY,
    best_by_mix,
    config_means,
    fit_observations,
    leave_one_config_out,
    repeat_spread,
    sweep_drift,
)
from planner.calibrate.importance import importance_lines, parameter_importance
from planner.calibrate.runner import Bench, Budget, recheck_original, restore, run_calibration
from planner.calibrate.space import (
    DEFAULT_MIXES,
    MAX_GRID,
    CalibrationSpace,
    Config,
    config_key,
    default_levels,
    make_space,
    parse_levels,
    parse_mixes,
)
from planner.calibrate.state import (
    STATE_KIND,
    CalibrationState,
    observations_frame,
    sweep_of,
    write_observations,
)

__all__ = [
    "ASSUMED_LIVE_APPLY_SECONDS",
    "ASSUMED_RESTART_APPLY_SECONDS",
    "DEFAULT_MIXES",
    "MAX_GRID",
    "MIX_ONLY",
    "STATE_KIND",
    "Bench",
    "Budget",
    "CalibrationSpace",
    "CalibrationState",
    "Config",
    "ExecutorBench",
    "best_by_mix",
    "cache_window",
    "change_settings_command",
    "choose_next",
    "config_key",
    "config_means",
    "default_levels",
    "describe_environment",
    "find_ansible_playbook",
    "fit_observations",
    "importance_lines",
    "leave_one_config_out",
    "make_space",
    "maximin_next",
    "measurement_from_result",
    "observations_frame",
    "parameter_importance",
    "parse_levels",
    "parse_mixes",
    "parse_setting",
    "read_caches",
    "read_running_config",
    "recheck_original",
    "repeat_spread",
    "restore",
    "run_calibration",
    "same_restart_plot",
    "sweep_drift",
    "sweep_of",
    "uncertainty_next",
    "write_observations",
]
