"""Which calibrated parameters matter: a ranking by importance, and which ones the model keeps.

:func:`parameter_importance` ranks the calibrated parameters of a fitted pooled model
(:func:`planner.calibrate.fit.fit_observations` puts the ranking in its report as
``importance``, the interactions' share as ``importance_interactions``).
:func:`importance_lines` writes it for the end-of-run summary and ``kairos calibrate
--fit-only``.

How it is computed: a functional ANOVA (Hooker 2007; the fANOVA of Hutter et al. 2014,
here over the pooled model instead of a random forest):

* **The surface.** Per measured mix, the model's predicted log throughput over the grid of
  the measured levels: every combination of every parameter's measured levels, each cell
  weighted equally. A cell that was measured carries its own effect (the pooled fit's
  ``config`` feature); one never measured carries the parameters' effects only, as a plan
  sees it.
* **Shares.** A parameter's main effect at a level is the mean of the surface over the
  cells holding that level minus the grand mean; its ``share`` is the variance of its main
  effects over its levels over the variance of the surface. On a product grid the main
  effects are orthogonal, so the shares and the interactions' (the remainder) add up to 1.
  ``overall`` adds the mixes' variances first: a mix under which the configurations differ
  more weighs more. ``range`` is the largest main effect over the smallest as a throughput
  ratio minus 1: a share is relative, and 90 % of a surface that spans 1 % is nothing.
* **Kept.** The pooled model shrinks every parameter, never drops one; its ``tau`` is one
  spread for all the parameters together, so it cannot tell one parameter from another. A
  parameter counts as kept when the model's posterior (the coefficients' mean and
  covariance, as for the ``effects`` intervals) tells its main effects from zero: the
  joint 95 % region of its main-effect contrasts (each level against the original's level,
  under every mix) excludes zero, by a Wald chi-squared test at :data:`KEPT_LEVEL`. One
  test per parameter, not corrected for the number of parameters.
* **A cross-check from the runs alone** (``anova``, the ANOVA RAFIKI ranks by): per mix, an
  OLS of the runs' log throughput on every parameter's levels (main effects only, so the
  interactions are left in the residual), with each parameter's Type II sum of squares, its
  share of the total (``ss_share``), F and p-value. It takes the runs as independent, which
  runs minutes apart on a drifting cluster are not, and it does not see which run belongs
  to which sweep: read its p-values as a rough guide.

Why the model's surface ranks rather than the runs' ANOVA: a calibration measures a few
configurations (2 to 8 on the lab) a couple of times each; the runs' ANOVA then has a handful
of residual degrees of freedom, and its ranking follows the noise as readily as the
effects. The pooled fit has already weighed every effect against the runs' spread (it
shrinks what the noise could have made), so the shares rank what the model will plan with.
The price: the shares describe the model, not the truth. With two levels a parameter's main
effect is one contrast; a parameter measured at a single level cannot be ranked at all, and
is reported so (``share`` None, ``rank`` None), never as a silent 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from planner.calibrate.space import MAX_GRID
from planner.model.performance import TARGET, PerformanceModel
from planner.model.spaces import get_space

#: Significance level of the "kept" test: the joint 95 % region of a parameter's main effects.
KEPT_LEVEL = 0.05
_Z95 = float(stats.norm.ppf(0.975))
#: Eigenvalues of a contrast covariance below this share of the largest are left out of the
#: Wald statistic (directions the mixes do not identify, e.g. more mixes than classes).
_EIG_FLOOR = 1e-10


def mix_labels(df: pd.DataFrame, classes: Sequence[str]) -> dict[str, dict[str, float]]:
    """The measured mixes, named by their fractions (``read=0.9, update=0.1``) as in the
    report's ``effects``."""
    mixes: dict[str, dict[str, float]] = {}
    for row in df[list(classes)].drop_duplicates().to_dict("records"):
        label = ", ".join(f"{c}={float(v):g}" for c, v in row.items() if v)
        mixes[label] = {c: float(v) for c, v in row.items()}
    return mixes


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def measured_levels(df: pd.DataFrame, params: Sequence[str], *, engine: str
                    ) -> dict[str, list[Any]]:
    """Each parameter's distinct measured levels (canonical), in the order first measured:
    the first is the original's (the first row's)."""
    space = get_space(engine)
    return {p: list(dict.fromkeys(space[p].coerce(_plain(v)) for v in df[p])) for p in params}


def parameter_importance(
    model: PerformanceModel, df: pd.DataFrame, *, params: Sequence[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rank ``params`` by their main effects' share of the model's predicted variance.

    Parameters
    ----------
    model : PerformanceModel
        The pooled model fitted on ``df`` (:func:`planner.calibrate.fit.fit_observations`).
    df : pandas.DataFrame
        The observations: class fractions, one column per parameter, ``ops_per_s``.
    params : sequence of str
        The parameter columns of ``df``.

    Returns
    -------
    (ranking, interactions)
        ``ranking``: one entry per parameter, highest ``overall`` share first, the
        parameters measured at one level last (``rank`` None; all of them when the grid of
        measured levels exceeds :data:`planner.calibrate.space.MAX_GRID`). Each entry: ``name``,
        ``rank``, ``levels`` (as measured; the first is the original's, the reference of
        the contrasts), ``share`` (per mix), ``overall``, ``range`` (per mix),
        ``main_effects`` (per mix: each other level against the reference, averaged over the
        grid, with its 95 % interval), ``kept``, ``test`` (``chi2``, ``df``, ``p``),
        ``anova`` (per mix: ``F``, ``p``, ``df``, ``ss_share``, or None where the runs
        cannot give them) and ``reason``. ``interactions``: the remainder's share, per mix
        (``share``) and ``overall``. See the module docstring.
    """
    levels = measured_levels(df, params, engine=model.engine)
    ranked = [p for p in params if len(levels[p]) > 1]
    mixes = mix_labels(df, model.classes)
    entries: list[dict[str, Any]] = []
    interactions: dict[str, Any] = {"share": {}, "overall": None}
    cells = math.prod(len(levels[p]) for p in ranked)
    why = f"the grid of measured levels has {cells} cells, more than {MAX_GRID}: not ranked"
    if cells > MAX_GRID:  # not a calibration's grid (those are at most MAX_GRID)
        ranked = []
    elif ranked:
        entries, interactions = _decompose(model, df, ranked, levels, mixes)
    entries.sort(key=lambda e: (-(e["overall"] or 0.0), e["name"]))
    for rank, entry in enumerate(entries, start=1):
        entry["rank"] = rank
    for p in params:
        if p not in ranked:
            entries.append({
                "name": p, "rank": None, "levels": levels[p], "share": None, "overall": None,
                "range": None, "main_effects": None, "kept": False, "test": None,
                "anova": None,
                "reason": why if len(levels[p]) > 1 else f"one level measured "
                f"({levels[p][0]}): its effect cannot be estimated, so it is not ranked",
            })
    return entries, interactions


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def _decompose(
    model: PerformanceModel, df: pd.DataFrame, ranked: Sequence[str],
    levels: Mapping[str, Sequence[Any]], mixes: Mapping[str, Mapping[str, float]],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The functional ANOVA of the model's surface over the grid of measured levels, and the
    runs' ANOVA beside it (see the module docstring)."""
    cells = list(itertools.product(*(levels[p] for p in ranked)))
    x = model.config_matrix([dict(zip(ranked, cell, strict=True)) for cell in cells])
    m = model.mix_matrix(list(mixes.values()))
    names = list(mixes)
    coef = model.coef.ravel()
    # d(predicted log throughput of mix i in cell k) / d(coef), row-major as model.cov
    grad = np.einsum("ic,kj->ikcj", m, x).reshape(len(m), len(cells), -1)
    mu = grad @ coef  # (mixes, cells)
    centred = mu - mu.mean(axis=1, keepdims=True)
    total = np.mean(centred**2, axis=1)
    anova = {name: _runs_anova(df, model, ranked, levels, mix)
             for name, mix in mixes.items()}
    entries: list[dict[str, Any]] = []
    explained = np.zeros(len(m))
    for idx, p in enumerate(ranked):
        # averaging over the cells of each level: (levels, cells)
        avg = np.array([[1.0 if cell[idx] == level else 0.0 for cell in cells]
                        for level in levels[p]])
        avg /= avg.sum(axis=1, keepdims=True)
        main = centred @ avg.T  # (mixes, levels): main effect of each level
        var = np.mean(main**2, axis=1)
        explained += var
        contrast = avg[1:] - avg[0]  # each level against the reference (the original's)
        rows = np.einsum("lk,ikp->ilp", contrast, grad).reshape(-1, coef.size)
        effect_log = rows @ coef
        cov = rows @ model.cov @ rows.T
        test = _wald(effect_log, cov)
        se = np.sqrt(np.maximum(np.diag(cov), 0.0))
        n_other = len(levels[p]) - 1  # rows: mix-major, then the levels after the first
        main_effects = {
            name: [_effect(levels[p][j + 1], float(effect_log[i * n_other + j]),
                           float(se[i * n_other + j])) for j in range(n_other)]
            for i, name in enumerate(names)
        }
        entries.append({
            "name": p,
            "levels": list(levels[p]),
            "share": {name: _share(float(var[i]), float(total[i]))
                      for i, name in enumerate(names)},
            "overall": _share(float(var.sum()), float(total.sum())),
            "range": {name: math.expm1(float(main[i].max() - main[i].min()))
                      for i, name in enumerate(names)},
            "main_effects": main_effects,
            "kept": test["p"] is not None and test["p"] < KEPT_LEVEL,
            "test": test,
            "anova": {name: anova[name].get(p) for name in names},
        })
    for entry in entries:
        entry["reason"] = _reason(entry)
    rest = total - explained
    interactions = {
        "share": {name: _share(max(float(rest[i]), 0.0), float(total[i]))
                  for i, name in enumerate(names)},
        "overall": _share(max(float(rest.sum()), 0.0), float(total.sum())),
    }
    return entries, interactions


def _effect(level: Any, d: float, se: float) -> dict[str, Any]:
    """A main-effect contrast ``d`` (log) as a throughput ratio minus 1, with its 95 %
    interval."""
    return {"level": level, "effect": math.expm1(d),
            "interval": [math.expm1(d - _Z95 * se), math.expm1(d + _Z95 * se)]}


def _wald(effect: np.ndarray, cov: np.ndarray) -> dict[str, Any]:
    """Wald chi-squared of ``effect`` = 0 under N(effect, cov), over the directions ``cov``
    identifies; ``p`` None when it identifies none."""
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    top = float(w.max()) if w.size else 0.0
    keep = w > _EIG_FLOOR * top
    if top <= 0 or not keep.any():
        return {"chi2": None, "df": 0, "p": None}
    proj = v[:, keep].T @ effect
    chi2 = float(np.sum(proj**2 / w[keep]))
    df = int(keep.sum())
    return {"chi2": chi2, "df": df, "p": float(stats.chi2.sf(chi2, df))}


def _runs_anova(
    df: pd.DataFrame, model: PerformanceModel, ranked: Sequence[str],
    levels: Mapping[str, Sequence[Any]], mix: Mapping[str, float],
) -> dict[str, dict[str, Any] | None]:
    """Per parameter, the Type II ANOVA of the runs of one mix (main effects only; None
    where the runs hold one level of it, or leave no residual degree of freedom)."""
    classes = model.classes
    rows = df[np.all([np.isclose(df[c].astype(float), mix[c]) for c in classes], axis=0)]
    space = model.space
    y = np.log(rows[TARGET].to_numpy(dtype=float))
    blocks = {}
    for p in ranked:
        values = [space[p].coerce(_plain(v)) for v in rows[p]]
        blocks[p] = np.array([[1.0 if v == level else 0.0 for level in levels[p][1:]]
                              for v in values]).reshape(len(values), -1)
    intercept = np.ones((len(y), 1))

    def fit(keep: Sequence[str]) -> tuple[float, int]:
        z = np.hstack([intercept, *(blocks[q] for q in keep)])
        beta = np.linalg.lstsq(z, y, rcond=None)[0]
        resid = y - z @ beta
        return float(resid @ resid), int(np.linalg.matrix_rank(z))

    rss, rank = fit(ranked)
    tss = float(np.sum((y - y.mean()) ** 2))
    df_res = len(y) - rank
    out: dict[str, dict[str, Any] | None] = {}
    for p in ranked:
        rss_red, rank_red = fit([q for q in ranked if q != p])
        df_p = rank - rank_red
        if df_p == 0 or df_res == 0 or rss <= 0 or tss <= 0:
            out[p] = None
            continue
        ss = max(rss_red - rss, 0.0)
        f = (ss / df_p) / (rss / df_res)
        out[p] = {"F": f, "p": float(stats.f.sf(f, df_p, df_res)), "df": [df_p, df_res],
                  "ss_share": ss / tss}
    return out


def _reason(entry: Mapping[str, Any]) -> str:
    """Why a ranked parameter is kept or not, with its largest main effect."""
    test = entry["test"]
    largest = max(((mix, e) for mix, es in entry["main_effects"].items() for e in es),
                  key=lambda me: abs(me[1]["effect"]))
    mix, e = largest
    low, high = e["interval"]
    detail = (f"largest: {e['level']} against {entry['levels'][0]} under {mix}, "
              f"{e['effect']:+.1%} [{low:+.1%}, {high:+.1%}]")
    if test["p"] is None:
        return f"the model gives its main effects no uncertainty to test; {detail}"
    pval = f"p = {test['p']:.3g}, chi2 {test['chi2']:.1f} on {test['df']} df"
    if entry["kept"]:
        return f"its main effects' joint 95 % region excludes zero ({pval}); {detail}"
    return (f"its main effects' joint 95 % region holds zero ({pval}): the pooled fit does "
            f"not tell it from the runs' noise; {detail}")


def importance_lines(fit: Mapping[str, Any]) -> list[str]:
    """The ranking as summary lines (none when the report has no ranking)."""
    ranking = fit.get("importance") or []
    if not ranking:
        return []

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    lines = ["parameter importance (share of the model's predicted log-throughput variance "
             "over the grid of measured levels, main effects; docs/calibration.md):"]
    for entry in ranking:
        if entry["rank"] is None:
            lines.append(f"  -  {entry['name']}: {entry['reason']}")
            continue
        per_mix = "; ".join(
            f"{mix}: {pct(share)} of a {entry['range'][mix]:.1%} range"
            for mix, share in entry["share"].items())
        kept = "kept" if entry["kept"] else "not kept"
        lines.append(f"  {entry['rank']}. {entry['name']}: {pct(entry['overall'])} overall "
                     f"({per_mix}); {kept}: {entry['reason']}")
    rest = fit.get("importance_interactions") or {}
    if rest.get("share"):
        per_mix = "; ".join(f"{mix}: {pct(s)}" for mix, s in rest["share"].items())
        lines.append(f"  interactions (the remainder): {pct(rest.get('overall'))} overall "
                     f"({per_mix})")
    return lines
