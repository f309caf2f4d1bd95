"""The Gaussian-process surrogate and the acquisition behind the Bayesian-optimisation design.

:func:`planner.calibrate.design.bo_next` asks this module, per workload mix, what log
throughput a configuration not yet measured may deliver. The surrogate is a Gaussian
process on the points of :meth:`planner.calibrate.space.CalibrationSpace.coordinates` (a
numeric level's rank in [0, 1], an enum one-hot): a constant mean (the measured runs'
mean), a Matérn 5/2 kernel with one length-scale per parameter (a parameter that does not
matter gets a long one), a signal and a noise variance. The hyper-parameters maximise the
log marginal likelihood plus weak log-normal priors (:data:`PRIORS`; :func:`fit_gp`:
L-BFGS-B with the analytic gradient, from a default start and a few seeded ones, within
:data:`BOUNDS`). :func:`expected_improvement`
scores a point by how much it is expected to beat the best posterior mean among the
measured configurations (noisy runs: the incumbent is what the model believes, not the
luckiest run). Pure numpy/scipy on arrays; nothing here knows about a cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats
from scipy.linalg import cho_solve, cholesky, solve_triangular

#: Bounds of the hyper-parameters, natural scale: length-scale (coordinate units: a numeric
#: parameter spans 1, two enum levels are 1 apart), signal and noise standard deviation of
#: log throughput (0.01 = 1 %; the lab's runs spread 4-8 %).
BOUNDS = {"length": (0.1, 20.0), "signal": (0.005, 1.0), "noise": (0.005, 0.5)}
#: Weak log-normal priors (median, standard deviation of the log) added to the likelihood,
#: so that a handful of noisy runs can neither explain everything (the noise vanishing, a
#: length-scale collapsing) nor nothing (the signal vanishing): a priori a parameter's
#: effect is smooth over its range, configurations differ by about 10 % and runs by 5 %.
PRIORS = {"length": (1.0, 1.0), "signal": (0.1, 0.75), "noise": (0.05, 0.5)}
#: Seeded random starts of the likelihood search, beside the default start.
RESTARTS = 2
_SQRT5 = math.sqrt(5.0)


@dataclass(frozen=True)
class GaussianProcess:
    """A fitted GP: training points ``x`` (n, d), ``groups`` (d,) the parameter of each
    coordinate, the centred targets' ``mean``, ``length`` per parameter, ``signal`` and
    ``noise`` standard deviations, the Cholesky factor ``chol`` of K + noise² I, ``alpha`` =
    (K + noise² I)⁻¹ (y - mean), and the maximised ``objective``: the log marginal
    likelihood plus the log priors (up to a constant)."""

    x: np.ndarray
    groups: np.ndarray
    mean: float
    length: np.ndarray
    signal: float
    noise: float
    chol: np.ndarray
    alpha: np.ndarray
    objective: float

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the noise-free log throughput at ``x``."""
        d2 = _sq_dist(x, self.x, self.groups, self.length)
        k_star = self.signal**2 * _matern(d2)
        mu = self.mean + k_star @ self.alpha
        v = solve_triangular(self.chol, k_star.T, lower=True, check_finite=False)
        var = np.maximum(self.signal**2 - np.sum(v * v, axis=0), 1e-12)
        return mu, np.sqrt(var)


def _sq_dist(a: np.ndarray, b: np.ndarray, groups: np.ndarray,
             length: np.ndarray) -> np.ndarray:
    """Per parameter, squared distances scaled by its length-scale: shape (P, len a, len b)."""
    diff2 = (a[:, None, :] - b[None, :, :]) ** 2
    out = np.zeros((len(length), len(a), len(b)))
    for p in range(len(length)):
        out[p] = diff2[:, :, groups == p].sum(axis=2) / length[p] ** 2
    return out


def _matern(d2: np.ndarray) -> np.ndarray:
    """Matérn 5/2 correlation of per-parameter scaled squared distances (P, n, m)."""
    r = np.sqrt(d2.sum(axis=0))
    return (1.0 + _SQRT5 * r + 5.0 / 3.0 * r * r) * np.exp(-_SQRT5 * r)


def _neg_log_ml(theta: np.ndarray, x: np.ndarray, y: np.ndarray,
                groups: np.ndarray) -> tuple[float, np.ndarray]:
    """Negative log marginal likelihood plus the priors' negative log densities, and its
    gradient, in the log hyper-parameters ``theta`` = (log length per parameter, log signal,
    log noise)."""
    n, n_p = len(y), len(theta) - 2
    length, signal, noise = np.exp(theta[:n_p]), math.exp(theta[-2]), math.exp(theta[-1])
    d2 = _sq_dist(x, x, groups, length)
    r = np.sqrt(d2.sum(axis=0))
    e = np.exp(-_SQRT5 * r)
    k_sig = signal**2 * (1.0 + _SQRT5 * r + 5.0 / 3.0 * r * r) * e
    k = k_sig + noise**2 * np.eye(n)
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return 1e10, np.zeros_like(theta)
    chol_inv = np.linalg.inv(chol)
    k_inv = chol_inv.T @ chol_inv
    alpha = k_inv @ y
    nll = 0.5 * y @ alpha + np.log(np.diag(chol)).sum() + 0.5 * n * math.log(2 * math.pi)
    inner = k_inv - np.outer(alpha, alpha)
    # d k_sig / d log length_p = signal² 5/3 (1 + √5 r) e^{-√5 r} d2_p
    common = signal**2 * 5.0 / 3.0 * (1.0 + _SQRT5 * r) * e
    grad = np.empty_like(theta)
    for p in range(n_p):
        grad[p] = 0.5 * np.sum(inner * (common * d2[p]))
    grad[-2] = 0.5 * np.sum(inner * (2.0 * k_sig))
    grad[-1] = 0.5 * np.trace(inner) * 2.0 * noise**2
    for idx, name in ((slice(0, n_p), "length"), (slice(n_p, n_p + 1), "signal"),
                      (slice(n_p + 1, None), "noise")):
        centre, scale = math.log(PRIORS[name][0]), PRIORS[name][1]
        z = (theta[idx] - centre) / scale
        nll += 0.5 * float(np.sum(z * z))
        grad[idx] += z / scale
    return float(nll), grad


def _log_bounds(n_params: int) -> list[tuple[float, float]]:
    names = ["length"] * n_params + ["signal", "noise"]
    return [(math.log(BOUNDS[k][0]), math.log(BOUNDS[k][1])) for k in names]


def fit_gp(x: np.ndarray, y: np.ndarray, groups: np.ndarray, *, seed: int) -> GaussianProcess:
    """The GP of ``y`` (log throughput, one row per run) at ``x`` whose hyper-parameters
    maximise the log marginal likelihood plus the log priors; ``groups`` maps each column of
    ``x`` to its parameter (0..P-1). Deterministic for a seed."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    groups = np.asarray(groups, dtype=int)
    n_p = int(groups.max()) + 1
    mean = float(y.mean())
    yc = y - mean
    bounds = _log_bounds(n_p)
    spread = float(np.clip(yc.std(), BOUNDS["signal"][0], BOUNDS["signal"][1]))
    starts = [np.array([0.0] * n_p + [math.log(spread), math.log(0.05)])]
    rng = np.random.default_rng(seed)
    lo, hi = np.array(bounds).T
    starts += [rng.uniform(lo, hi) for _ in range(RESTARTS)]
    best: tuple[float, np.ndarray] | None = None
    for start in starts:
        res = optimize.minimize(_neg_log_ml, start, args=(x, yc, groups), jac=True,
                                method="L-BFGS-B", bounds=bounds)
        if np.isfinite(res.fun) and (best is None or res.fun < best[0] - 1e-9):
            best = (float(res.fun), np.asarray(res.x))
    assert best is not None  # _neg_log_ml is finite everywhere (1e10 where K is not PD)
    theta = best[1]
    length, signal, noise = np.exp(theta[:n_p]), math.exp(theta[-2]), math.exp(theta[-1])
    k = signal**2 * _matern(_sq_dist(x, x, groups, length)) + noise**2 * np.eye(len(y))
    chol = cholesky(k, lower=True)
    return GaussianProcess(x=x, groups=groups, mean=mean, length=length, signal=signal,
                           noise=noise, chol=chol, alpha=cho_solve((chol, True), yc),
                           objective=-best[0])


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float,
                         xi: float = 0.0) -> np.ndarray:
    """E[max(f - best - xi, 0)] for f ~ N(mu, sd²): on log throughput, the expected relative
    gain over ``best``."""
    gain = mu - best - xi
    z = gain / sd
    return np.maximum(gain * stats.norm.cdf(z) + sd * stats.norm.pdf(z), 0.0)
