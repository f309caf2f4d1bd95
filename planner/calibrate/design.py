"""Which configuration to measure next: the design of a calibration.

The design starts where the cluster is (the configuration running before calibration),
then adds configurations greedily by *maximin* distance (each new point as far as possible
from every point already chosen), so the first few runs spread over the grid. Once the
observations can fit a model, each next configuration is the unmeasured one where the
fitted model is least sure: a configuration holding a value never measured comes first (the
model has no term for it yet), then the largest predictive variance of log throughput
averaged over the mixes (the coefficient uncertainty of the partially pooled fit,
:data:`planner.model.performance.POOLED`, which grows away from what was measured). Ties go to
the maximin distance. Optionally the configurations the cluster reaches without a restart
come first (a split-plot design).

That is the ``maximin`` design, which aims at the model. The ``bo`` design (Bayesian
optimisation, :func:`bo_next`) aims at the best configuration per mix instead: after a
shorter space-filling start (:func:`default_initial`), each next configuration is the
unmeasured one with the largest expected improvement of log throughput, summed over the
mixes, under a Gaussian process per mix (:mod:`planner.calibrate.bo`). :func:`choose_next`
follows the state's ``design_strategy``; :data:`DEFAULT_DESIGN` is what a new ``kairos
calibrate`` uses, the winner of the synthetic comparison in bench/design.py
(docs/calibration.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from planner.calibrate.bo import expected_improvement, fit_gp
from planner.calibrate.space import CalibrationSpace, Config, config_key
from planner.calibrate.state import DESIGNS, CalibrationState, observations_frame
from planner.errors import ValidationError
from planner.model.performance import POOLED, PerformanceModel, fit_design
from planner.model.spaces import get_space

#: The design of a new calibration (``kairos calibrate --design``): the winner of
#: bench/design.py (docs/calibration.md, "Choosing the design").
DEFAULT_DESIGN = "maximin"
#: Expected improvement's margin (log throughput): a gain under 1 % is not worth a run.
XI = 0.01


def default_initial(n_params: int, design: str) -> int:
    """Configurations of the space-filling start, the original included, when ``--initial``
    is not given: parameters + 1 for ``maximin`` (so the model has as many configurations as
    coefficients per class before it chooses), at most 3 for ``bo`` (the Gaussian process,
    held by its priors, learns from two configurations, and every run the start spends is one
    the acquisition cannot)."""
    return min(n_params + 1, 3) if design == "bo" else n_params + 1


def _min_distances(space: CalibrationSpace, configs: Sequence[Config],
                   chosen: Sequence[Config]) -> list[float]:
    """Each of ``configs``' distance to the nearest chosen point (inf when none is)."""
    near = [space.coordinates(c) for c in chosen]
    return [min((float(np.linalg.norm(x - y)) for y in near), default=math.inf)
            for x in (space.coordinates(c) for c in configs)]


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
    dist = _min_distances(space, rest, chosen)
    best, best_d = None, -1.0
    for i in order:
        d = dist[i]
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
    dist = _min_distances(space, rest, chosen)

    def score(i: int) -> tuple[int, float, float]:
        config = rest[i]
        novel = sum(config[n] not in seen[n] for n in space.params)
        return (novel, round(float(mean_var[i]), 12), dist[i])

    return rest[max(order, key=score)]


def _groups(space: CalibrationSpace) -> np.ndarray:
    """The parameter (0..P-1) of each column of :meth:`CalibrationSpace.coordinates`."""
    kinds = get_space(space.engine)
    widths = [len(space.levels[n]) if kinds[n].type in ("enum", "bool") else 1
              for n in space.params]
    return np.repeat(np.arange(len(widths)), widths)


def _runs_by_mix(space: CalibrationSpace, measurements: Sequence[Mapping[str, Any]]
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per mix, the points and log throughputs of its runs (runs with no successful
    operation carry no throughput and are left out)."""
    runs: dict[str, tuple[list[np.ndarray], list[float]]] = {}
    for m in measurements:
        if m.get("ops_per_s", 0) > 0:
            xs, ys = runs.setdefault(str(m["mix"]), ([], []))
            xs.append(space.coordinates(m["config"]))
            ys.append(math.log(float(m["ops_per_s"])))
    return {mix: (np.array(xs), np.array(ys)) for mix, (xs, ys) in sorted(runs.items())}


def gp_ready(space: CalibrationSpace, measurements: Sequence[Mapping[str, Any]]) -> bool:
    """Whether some mix has runs on two different configurations (a GP has something to
    learn a length-scale from)."""
    return any(len(np.unique(x, axis=0)) >= 2
               for x, _ in _runs_by_mix(space, measurements).values())


def bo_next(
    space: CalibrationSpace,
    chosen: Sequence[Config],
    measurements: Sequence[Mapping[str, Any]],
    seed: int,
    candidates: Sequence[Config] | None = None,
    *,
    xi: float = XI,
) -> Config | None:
    """The unchosen grid point (of ``candidates``, default the whole grid) with the largest
    expected improvement, summed over the mixes (None when none is left).

    ``measurements`` are the state's records (``config``, ``mix``, ``ops_per_s``). Per mix a
    Gaussian process of log throughput is fitted on every run (:func:`fit_gp`, seeded), and
    each candidate scored by its expected gain over the best posterior mean among the
    measured configurations (:func:`expected_improvement`, margin ``xi``). A mix measured
    on fewer than two configurations adds nothing. Ties (no mix fitted yet, or improvements
    equal to 12 decimals) go to the maximin distance, then to a seeded shuffle of the grid, so
    a seed gives one design.
    """
    rest = _unchosen(space, chosen, candidates)
    if not rest:
        return None
    groups = _groups(space)
    points = np.array([space.coordinates(c) for c in rest])
    gain = np.zeros(len(rest))
    for i, (x, y) in enumerate(_runs_by_mix(space, measurements).values()):
        seen = np.unique(x, axis=0)
        if len(seen) < 2:
            continue
        gp = fit_gp(x, y, groups, seed=seed * 1009 + i)
        incumbent = float(gp.predict(seen)[0].max())
        mu, sd = gp.predict(points)
        gain += expected_improvement(mu, sd, incumbent, xi)
    order = np.random.default_rng(seed).permutation(len(rest))
    dist = _min_distances(space, rest, chosen)

    def score(i: int) -> tuple[float, float]:
        return round(float(gain[i]), 12), dist[i]

    return rest[max(order, key=score)]


def same_restart_plot(state: CalibrationState) -> list[Config] | None:
    """The unmeasured grid points the cluster can reach from where it is without a restart
    (its restart-class values kept), or None when there is none or nothing needs a restart.

    Measuring these first is a split-plot design: hard-to-change factors (a rolling restart,
    then minutes of JIT warm-up; a table's compaction strategy, after which every node
    rewrites its SSTables) change as rarely as possible.
    """
    space = state.space
    engine_space = get_space(state.engine)
    hard = [k for k in space.params
            if engine_space[k].change == "restart" or engine_space[k].location == "table"]
    if not hard:
        return None
    plot = [c for c in space.grid() if all(c[k] == state.applied[k] for k in hard)]
    return plot if _unchosen(space, state.design, plot) else None


def choose_next(state: CalibrationState, *, initial: int, group_restarts: bool = False,
                design: str | None = None) -> tuple[Config | None, str]:
    """The next configuration to start and why (``None`` when the grid is exhausted).

    ``design`` (``"maximin"`` or ``"bo"``; default the state's ``design_strategy``): after
    the original and ``initial`` space-filling points in all, ``maximin`` goes where the
    fitted model is least sure (:func:`uncertainty_next`), ``bo`` where the expected
    improvement is largest (:func:`bo_next`). With ``group_restarts``, the choice is made
    among :func:`same_restart_plot` while it has any left.
    """
    strategy = state.design_strategy if design is None else design
    if strategy not in DESIGNS:
        raise ValidationError(f"design: must be one of {', '.join(DESIGNS)}, got {strategy!r}")
    space = state.space
    if not state.design:
        return dict(state.original), "the configuration running before calibration"
    plot = same_restart_plot(state) if group_restarts else None
    where = ", no restart from here" if plot else ""
    seed = state.seed + len(state.design)
    if len(state.design) < initial:
        return maximin_next(space, state.design, seed, plot), "space-filling" + where
    if strategy == "bo":
        if not gp_ready(space, state.measurements):
            return (maximin_next(space, state.design, seed, plot),
                    "space-filling (too few observations for the Gaussian process yet)" + where)
        return (bo_next(space, state.design, state.measurements, seed, plot),
                "largest expected improvement under the Gaussian process per mix" + where)
    df = observations_frame(state)
    try:
        model = fit_design(df, engine=state.engine, design=POOLED) if len(df) else None
    except ValidationError:
        model = None
    if model is None:
        return (maximin_next(space, state.design, seed, plot),
                "space-filling (too few observations to fit a model yet)" + where)
    nxt = uncertainty_next(space, state.design, model, list(state.mixes.values()), seed, plot)
    return nxt, f"most uncertain under the {POOLED} model{where}"
