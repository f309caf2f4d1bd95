"""Which configuration to measure next: the design of a calibration.

The design starts where the cluster is (the configuration running before calibration),
then adds configurations greedily by *maximin* distance (each new point as far as possible
from every point already chosen), so the first few runs spread over the grid. Once the
observations can fit a model, each next configuration is the unmeasured one where the
fitted model is least sure: a configuration holding a value never measured comes first (the
model has no term for it yet), then the largest predictive variance of log throughput
averaged over the mixes (the coefficient uncertainty of the OLS fit, which grows away from
what was measured). Ties go to the maximin distance. Optionally the configurations the
cluster reaches without a restart come first (a split-plot design).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from planner.calibrate_fit import fit_observations
from planner.calibrate_space import CalibrationSpace, Config, config_key
from planner.calibrate_state import CalibrationState, observations_frame
from planner.perfmodel import PerformanceModel
from planner.spaces import get_space


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
