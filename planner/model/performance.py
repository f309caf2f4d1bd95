"""Performance model f(workload mix, configuration) -> saturated cluster throughput.

The model is log-linear with mix x configuration interactions::

    log(ops/s) = sum_c m_c * (alpha_c + sum_j gamma_cj * x_j(config)) + e,   e ~ N(0, sigma^2)

where ``m_c`` are the operation-class fractions (they sum to 1, so the model needs no separate
intercept), ``x_j`` are configuration features (an indicator for an enum/bool level, or a
clipped, centred and scaled number) and ``alpha_c`` is the log throughput of a pure class-c
workload under the reference (default) configuration. An *additive* design is the special
case ``gamma_cj = gamma_j`` for every class. Uncertainty comes from the coefficient covariance
and the residual ``sigma``; predictions are lognormal: ``ops_per_s`` is the median
``exp(mu)`` and ``std`` the lognormal standard deviation. :meth:`PerformanceModel.sample_capacity`
draws plausible coefficient sets (the planner's scenarios for P(gain > cost)).

When the observations carry the windows' p99 latency (``p99_ms``), the model also fits it
(:class:`LatencyTerms`: the same features and design on the Little's-law-normalised tail
``log(p99 x ops/s)``) and :meth:`PerformanceModel.predict` returns a p99 beside the
throughput (:attr:`PerformanceModel.predicts_latency`); a model without it (the priors,
files written before) predicts throughput only.

:func:`fit_model` fits the model with statsmodels OLS from observations (a CSV or DataFrame:
one column per class fraction, any configuration columns, and ``ops_per_s``), choosing between
the interaction and the additive design by held-out MAPE; :func:`fit_design` fits one design on
every row for callers that validate otherwise (``kairos calibrate``: leave one configuration
out), among them the partially pooled one (:data:`POOLED`): every configuration effect shrunk
towards zero by empirical Bayes, each measured configuration's own effect included, with
:func:`configuration_effects` giving each effect's interval. :func:`load_default_model` loads the
shipped prior (planner/data/<engine>-prior.json, provenance beside it), which
:func:`prior_model` builds from the effects the seeds report.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.linalg import cho_factor, cho_solve

from planner import inputs
from planner.engines import get_engine
from planner.errors import ValidationError
from planner.model.spaces import ConfigSpace, get_space
from planner.workload.series import EngineClasses, classes_for, document_head

MODEL_KIND = "kairos-perfmodel"
_MODEL_REQUIRED = ("kind", "schema_version", "engine", "name", "version", "model_type",
                   "classes", "features", "coef", "cov", "sigma")
_MODEL_KEYS = (*_MODEL_REQUIRED, "provenance", "info", "latency")
#: Bound on |coefficient| (log ops/s): exp(100) ~ 1e43 ops/s is already no real
#: cluster, and near 709 exp() overflows to inf.
COEF_BOUND = 100.0
#: Bound on |covariance| entries: a standard deviation of 100 on the log scale.
COV_BOUND = 1e4
#: Bound on the residual sigma (log scale): e^10 ~ 22,000x run-to-run noise.
SIGMA_BOUND = 10.0
TARGET = "ops_per_s"
#: Observation columns measured beside the throughput (latency percentiles of the window,
#: Cassandra's cache hit ratios, a Redis shape's read hit ratio); kept in the CSV as the
#: record, not modelled.
MEASURED_COLUMNS = ("p50_ms", "p99_ms", "key_cache_hit_ratio", "row_cache_hit_ratio",
                    "hit_ratio")
#: The measured column the latency terms are fitted on (:class:`LatencyTerms`).
LATENCY_COLUMN = "p99_ms"
#: What the latency coefficients model (written into model.json, checked on load).
LATENCY_TARGET = "log(p99_seconds * ops_per_s)"
_LATENCY_KEYS = ("target", "coef", "cov", "sigma", "info")
#: The partially pooled design: the interaction design with every configuration coefficient
#: shrunk towards zero by as much as the data say (:func:`_pooled_fit`).
POOLED = "pooled"
FeatureKind = Literal["level", "linear", "config"]


@dataclass(frozen=True)
class Prediction:
    """Predicted saturated throughput of the whole cluster.

    Parameters
    ----------
    ops_per_s : float
        Median prediction (operations per second).
    std : float
        Standard deviation of the (lognormal) predictive distribution.
    p99_ms : float or None
        Median p99 latency (milliseconds) of a saturated window at the calibration's
        concurrency (:class:`LatencyTerms`); None when the model predicts no latency.
    """

    ops_per_s: float
    std: float
    p99_ms: float | None = None


@dataclass(frozen=True)
class Feature:
    """One configuration feature ``x_j``.

    ``level``: 1.0 when the parameter equals ``level`` (enums and booleans), else 0.0.
    ``linear``: ``(clip(value, lo, hi) - ref) / scale`` on the parameter's numeric value
    (MiB for sizes).
    ``config``: 1.0 for the one configuration ``match`` (parameter -> value pairs; ``param``
    is its first parameter), else 0.0: a measured configuration's own effect, beyond what
    the other features say (the pooled fit's second level, :func:`_pooled_fit`).
    """

    param: str
    kind: FeatureKind
    level: Any = None
    ref: float = 0.0
    scale: float = 1.0
    lo: float | None = None
    hi: float | None = None
    match: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        if self.kind == "level":
            return f"{self.param}={self.level}"
        if self.kind == "config":
            return "config(" + ", ".join(f"{k}={v}" for k, v in self.match) + ")"
        return self.param

    def value_in(self, space: ConfigSpace, full: Mapping[str, Any]) -> float:
        """The feature of a complete canonical configuration ``full``."""
        if self.kind == "config":
            return 1.0 if all(full[k] == v for k, v in self.match) else 0.0
        return self.value(space, full[self.param])

    def value(self, space: ConfigSpace, canonical: Any) -> float:
        if self.kind == "level":
            return 1.0 if canonical == self.level else 0.0
        x = space[self.param].numeric(canonical)
        if self.lo is not None:
            x = max(x, self.lo)
        if self.hi is not None:
            x = min(x, self.hi)
        return (x - self.ref) / self.scale

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"param": self.param, "kind": self.kind}
        if self.kind == "level":
            out["level"] = self.level
        elif self.kind == "config":
            out["match"] = dict(self.match)
        else:
            out.update({"ref": self.ref, "scale": self.scale, "lo": self.lo, "hi": self.hi})
        return out

    @classmethod
    def from_dict(cls, data: Any, *, field: str = "features") -> Feature:
        """Inverse of :meth:`to_dict`; ``field`` names the feature in messages."""
        raw = inputs.mapping(data, field)
        inputs.closed_keys(
            raw, field, allowed=("param", "kind", "level", "ref", "scale", "lo", "hi", "match"),
            required=("param", "kind"),
        )
        kind = raw["kind"]
        if kind not in ("level", "linear", "config"):
            raise ValidationError(f"{field}.kind: {kind!r} is not level, linear or config")
        match = inputs.mapping(raw.get("match", {}), f"{field}.match")
        if (kind == "config") != bool(match):
            raise ValidationError(f"{field}.match: required for kind config, and only there")

        def bound(key: str) -> float | None:
            value = raw.get(key)
            return None if value is None else inputs.number(value, f"{field}.{key}")

        return cls(
            param=inputs.string(raw["param"], f"{field}.param"),
            kind=kind,
            level=raw.get("level"),
            ref=inputs.number(raw.get("ref", 0.0), f"{field}.ref"),
            scale=inputs.number(raw.get("scale", 1.0), f"{field}.scale"),
            lo=bound("lo"),
            hi=bound("hi"),
            match=tuple((str(k), v) for k, v in match.items()),
        )


@dataclass(frozen=True, eq=False)
class LatencyTerms:
    """The p99 latency part of a fitted model: what a saturated window's tail was.

    A calibration window is a closed loop: the load generator keeps N requests in flight
    (``--concurrency`` x ``--processes``, the same for every window of a calibration) and
    drives the cluster to saturation. By Little's law its mean latency is then N / X (X the
    throughput): most of the latency such a window measures is queueing, set by the
    throughput the model already predicts. So the latency is not fitted as ``log p99`` on
    its own but as the tail relative to that queue::

        log(p99_seconds * ops_per_s) = sum_c m_c * (alpha_c + sum_j gamma_cj * x_j) + e

    i.e. ``log N + log(p99 / mean latency)``, with the throughput model's features and
    design (in ``kairos calibrate``: partially pooled). Shrinking an effect towards zero
    then means "p99 follows the throughput by Little's law", not "p99 is the same
    everywhere", which is the right null for a closed loop. The predicted p99 is
    ``exp(mu_latency - mu_throughput)`` (:meth:`PerformanceModel.predict_p99_matrix`): the
    p99 of a *saturated* window at the calibration's concurrency, not the p99 at a lower
    offered load (no window measured that). What carries over below saturation is the ratio
    between configurations: with the same N and the same cores, a request's service time
    scales as 1 / capacity, so the ratio of two configurations' saturated p99 is the ratio
    of their per-request tails; the queueing that falls with utilisation is the planner's
    headroom term (docs/planning.md, "Cost-benefit").

    Parameters
    ----------
    coef : numpy.ndarray
        ``(n_classes, 1 + n_features)``, the layout of :attr:`PerformanceModel.coef`.
    cov : numpy.ndarray
        Covariance of ``coef.ravel()``.
    sigma : float
        Residual standard deviation (log scale).
    info : Mapping
        The fit's summary (design, R^2, notes).
    """

    coef: np.ndarray
    cov: np.ndarray
    sigma: float
    info: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"target": LATENCY_TARGET, "coef": self.coef.tolist(),
                "cov": self.cov.tolist(), "sigma": self.sigma, "info": dict(self.info)}

    @classmethod
    def from_dict(cls, data: Any) -> LatencyTerms:
        """Inverse of :meth:`to_dict` (closed schema; shapes are checked by the model)."""
        raw = inputs.mapping(data, "latency")
        inputs.closed_keys(raw, "latency", allowed=_LATENCY_KEYS,
                           required=("target", "coef", "cov", "sigma"))
        if raw["target"] != LATENCY_TARGET:
            raise ValidationError(
                f"latency.target: {raw['target']!r} is not {LATENCY_TARGET!r}")
        return cls(
            coef=inputs.number_array(raw["coef"], "latency.coef", ndim=2, lo=-COEF_BOUND,
                                     hi=COEF_BOUND),
            cov=inputs.number_array(raw["cov"], "latency.cov", ndim=2, lo=-COV_BOUND,
                                    hi=COV_BOUND),
            sigma=inputs.number(raw["sigma"], "latency.sigma", lo=0.0, hi=SIGMA_BOUND),
            info=dict(inputs.mapping(raw.get("info", {}), "latency.info")),
        )


def _draws(coef: np.ndarray, cov: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, *coef.shape)`` coefficients drawn from N(coef, cov) (a singular covariance
    through its eigenvectors)."""
    if n < 1:
        raise ValidationError(f"n: must be >= 1, got {n}")
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    root = v * np.sqrt(np.maximum(w, 0.0))
    z = rng.standard_normal((n, coef.size))
    return (coef.ravel()[None, :] + z @ root.T).reshape(n, *coef.shape)


def _checked_latency(latency: LatencyTerms, shape: tuple[int, int]) -> LatencyTerms:
    """``latency`` with read-only arrays, its shapes those of the throughput terms."""
    coef = np.array(latency.coef, dtype=float)
    cov = np.array(latency.cov, dtype=float)
    if coef.shape != shape:
        raise ValidationError(f"latency.coef: shape {coef.shape}, expected {shape}")
    if cov.shape != (coef.size, coef.size):
        raise ValidationError(
            f"latency.cov: shape {cov.shape}, expected {(coef.size, coef.size)}")
    if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(cov))):
        raise ValidationError("latency.coef/cov: must be finite")
    if not (math.isfinite(latency.sigma) and latency.sigma >= 0):
        raise ValidationError(f"latency.sigma: must be >= 0, got {latency.sigma}")
    coef.setflags(write=False)
    cov.setflags(write=False)
    return replace(latency, coef=coef, cov=cov)


@dataclass(frozen=True, eq=False)
class PerformanceModel(EngineClasses):
    """A fitted or prior throughput model for one engine (see the module docstring).

    Parameters
    ----------
    engine : str
    name : str
        E.g. ``"cassandra-prior"``.
    version : int
    model_type : {"prior", "fitted"}
    features : tuple of Feature
    coef : numpy.ndarray
        Shape ``(n_classes, 1 + n_features)``: column 0 is ``alpha_c``, then ``gamma_cj``.
    cov : numpy.ndarray
        Covariance of ``coef.ravel()`` (row-major), shape ``(P, P)``.
    sigma : float
        Residual standard deviation on the log scale.
    provenance : str
        Where the numbers come from (a file name beside the model, or a fit summary).
    info : Mapping
        Free-form metadata (fit report, design, creation time).
    latency : LatencyTerms or None
        The p99 latency terms, fitted beside the throughput when the observations had
        ``p99_ms``; None (the priors, older files): the model predicts throughput only.
    """

    engine: str
    name: str
    version: int
    model_type: Literal["prior", "fitted"]
    features: tuple[Feature, ...]
    coef: np.ndarray
    cov: np.ndarray
    sigma: float
    provenance: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)
    latency: LatencyTerms | None = None

    def __post_init__(self) -> None:
        classes = classes_for(self.engine)
        space = get_space(self.engine)
        feats = []
        for feat in self.features:
            feats.append(feat)
            if feat.param not in space:
                raise ValidationError(f"features: {feat.param!r} is not a {self.engine} parameter")
            if feat.kind == "level":
                space[feat.param].coerce(feat.level)
            elif feat.kind == "config":
                # canonical values, so that a configuration read back from JSON matches
                match = tuple((k, space[k].coerce(v)) for k, v in feat.match)
                if not match or match[0][0] != feat.param:
                    raise ValidationError(f"features: {feat.label}: param is not its first")
                feats[-1] = replace(feat, match=match)
            elif feat.kind != "linear" or feat.scale == 0:
                raise ValidationError(f"features: {feat.label}: bad kind or zero scale")
        coef = np.array(self.coef, dtype=float)
        shape = (len(classes), 1 + len(self.features))
        if coef.shape != shape:
            raise ValidationError(f"coef: shape {coef.shape}, expected {shape}")
        cov = np.array(self.cov, dtype=float)
        p = coef.size
        if cov.shape != (p, p):
            raise ValidationError(f"cov: shape {cov.shape}, expected {(p, p)}")
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(cov))):
            raise ValidationError("coef/cov: must be finite")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValidationError(f"sigma: must be >= 0, got {self.sigma}")
        if self.model_type not in ("prior", "fitted"):
            raise ValidationError(f"model_type: {self.model_type!r} is not prior or fitted")
        coef.setflags(write=False)
        cov.setflags(write=False)
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "cov", cov)
        object.__setattr__(self, "features", tuple(feats))
        if self.latency is not None:
            object.__setattr__(self, "latency", _checked_latency(self.latency, shape))

    @property
    def space(self) -> ConfigSpace:
        return get_space(self.engine)

    # ----------------------------------------------------------- design rows
    def mix_matrix(self, mixes: Sequence[Mapping[str, float]]) -> np.ndarray:
        """Validated ``(n, n_classes)`` matrix of mixes (missing classes count as 0)."""
        classes = self.classes
        out = np.zeros((len(mixes), len(classes)))
        for i, mix in enumerate(mixes):
            unknown = set(mix) - set(classes)
            if unknown:
                raise ValidationError(
                    f"mix {i}: unknown class(es) {sorted(unknown)}; {self.engine} classes are "
                    f"{list(classes)}"
                )
            row = np.array([float(mix.get(c, 0.0)) for c in classes])
            if not np.all(np.isfinite(row)) or np.any(row < 0) or np.any(row > 1):
                raise ValidationError(f"mix {i}: fractions must be in [0, 1], got {dict(mix)}")
            if abs(row.sum() - 1.0) > 1e-3:
                raise ValidationError(f"mix {i}: fractions sum to {row.sum():.6g}, not 1")
            out[i] = row / row.sum()
        return out

    def config_matrix(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """``(k, 1 + n_features)`` matrix ``[1, x_1..x_J]`` of validated configurations."""
        space = self.space
        out = np.ones((len(configs), 1 + len(self.features)))
        for k, config in enumerate(configs):
            full = space.complete(config)
            for j, feat in enumerate(self.features):
                out[k, 1 + j] = feat.value_in(space, full)
        return out

    # ------------------------------------------------------------ predicting
    @property
    def predicts_latency(self) -> bool:
        """Whether the model predicts p99 latency (it has :class:`LatencyTerms`).

        Without them, callers that need a latency/headroom measure use utilisation
        (offered load over predicted capacity) and say so.
        """
        return self.latency is not None

    def predict_p99_matrix(
        self, mixes: Sequence[Mapping[str, float]], configs: Sequence[Mapping[str, Any]]
    ) -> np.ndarray:
        """``(len(mixes), len(configs))`` median p99 latency in milliseconds.

        ``exp(mu_latency - mu_throughput)`` seconds: the p99 of a saturated window at the
        calibration's concurrency (:class:`LatencyTerms`; use it as a ratio between
        configurations below saturation).

        Raises
        ------
        ValidationError
            The model predicts no latency.
        """
        if self.latency is None:
            raise ValidationError(f"model {self.name}: predicts no latency (no p99_ms in the "
                                  "observations it was fitted on)")
        m, x = self.mix_matrix(mixes), self.config_matrix(configs)
        return 1000.0 * np.exp(m @ self.latency.coef @ x.T - m @ self.coef @ x.T)

    def predict_log(
        self, mixes: np.ndarray, xconf: np.ndarray, *, noise: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of log throughput for mix rows x configuration rows.

        ``noise=False`` leaves out the residual ``sigma**2``: the variance of the *mean*
        throughput (coefficient uncertainty only), what a sustained period delivers.
        """
        mu = mixes @ self.coef @ xconf.T
        n_c, n_j = self.coef.shape
        s = self.cov.reshape(n_c, n_j, n_c, n_j)
        a = np.einsum("ic,cjdl,id->ijl", mixes, s, mixes, optimize=True)
        var = np.einsum("ijl,kj,kl->ik", a, xconf, xconf, optimize=True)
        return mu, np.maximum(var, 0.0) + (self.sigma**2 if noise else 0.0)

    def coefficient_draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n, n_classes, 1 + n_features)`` coefficients drawn from N(coef, cov).

        The model's epistemic uncertainty: the fit's parameter covariance (from its
        residuals), or the prior's stated uncertainty of each effect. A singular
        covariance (a parameter never varied) is handled through its eigenvectors.
        """
        return _draws(self.coef, self.cov, n, rng)

    def sample_capacity(
        self,
        mixes: np.ndarray,
        configs: Sequence[Mapping[str, Any]],
        *,
        n: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """``(n, T, K)`` plausible mean throughputs: one coefficient draw per sample.

        Parameters
        ----------
        mixes
            ``(T, n_classes)`` fractions (one mix for every sample) or ``(n, T, n_classes)``
            (sample ``s`` uses its own path, e.g. a forecast sample path).
        configs
            The K configurations.

        Notes
        -----
        Draws are of the mean throughput a configuration sustains, so the residual
        ``sigma`` (run-to-run noise of one measurement) is not added: it averages out over
        the minutes a step holds, while an error in a coefficient persists.
        """
        m = np.asarray(mixes, dtype=float)
        if m.ndim == 2:
            m = np.broadcast_to(m, (n, *m.shape))
        if m.ndim != 3 or m.shape[0] != n or m.shape[2] != len(self.classes):
            raise ValidationError(
                f"mixes: expected (T, {len(self.classes)}) or ({n}, T, {len(self.classes)}), "
                f"got {np.shape(mixes)}"
            )
        m = m / np.maximum(m.sum(axis=2, keepdims=True), 1e-12)
        xconf = self.config_matrix(configs)
        coef = self.coefficient_draws(n, rng)
        return np.exp(np.einsum("stc,scj,kj->stk", m, coef, xconf, optimize=True))

    def sample_p99(
        self,
        mixes: np.ndarray,
        configs: Sequence[Mapping[str, Any]],
        *,
        capacity: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """``(n, T, K)`` plausible p99 (ms) beside sampled ``capacity`` ``(n, T, K)``.

        One draw of the latency coefficients per sample (from their covariance, as
        :meth:`sample_capacity`; drawn independently of the throughput's), and p99 = the
        drawn tail over that sample's capacity (:class:`LatencyTerms`). ``mixes`` as for
        :meth:`sample_capacity`.
        """
        if self.latency is None:
            raise ValidationError(f"model {self.name}: predicts no latency")
        cap = np.asarray(capacity, dtype=float)
        n = cap.shape[0]
        m = np.asarray(mixes, dtype=float)
        if m.ndim == 2:
            m = np.broadcast_to(m, (n, *m.shape))
        if m.shape[:2] != cap.shape[:2] or m.shape[2] != len(self.classes):
            raise ValidationError(f"mixes: shape {m.shape} does not match capacity {cap.shape}")
        m = m / np.maximum(m.sum(axis=2, keepdims=True), 1e-12)
        coef = _draws(self.latency.coef, self.latency.cov, n, rng)
        tail = np.einsum("stc,scj,kj->stk", m, coef, self.config_matrix(configs), optimize=True)
        return 1000.0 * np.exp(tail) / cap

    def predict_matrix(
        self,
        mixes: Sequence[Mapping[str, float]],
        configs: Sequence[Mapping[str, Any]],
        *,
        noise: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predictions for every mix x configuration pair.

        ``noise=False``: the std of the mean throughput (no run-to-run noise).

        Returns
        -------
        mean, std : numpy.ndarray
            Both of shape ``(len(mixes), len(configs))``; ``mean`` is the median ops/s.
        """
        mu, var = self.predict_log(
            self.mix_matrix(mixes), self.config_matrix(configs), noise=noise
        )
        median = np.exp(mu)
        std = median * np.sqrt(np.expm1(var) * np.exp(var))
        return median, std

    def predict(self, mix: Mapping[str, float], config: Mapping[str, Any]) -> Prediction:
        """Predicted saturated cluster throughput (and p99 latency, when the model has
        :class:`LatencyTerms`) for one mix and one configuration."""
        mean, std = self.predict_matrix([mix], [config])
        p99 = (float(self.predict_p99_matrix([mix], [config])[0, 0])
               if self.latency is not None else None)
        return Prediction(ops_per_s=float(mean[0, 0]), std=float(std[0, 0]), p99_ms=p99)

    # --------------------------------------------------------------- persist
    def to_dict(self) -> dict[str, Any]:
        return {
            **document_head(MODEL_KIND, self.engine),
            "name": self.name,
            "version": self.version,
            "model_type": self.model_type,
            "classes": list(self.classes),
            "features": [f.to_dict() for f in self.features],
            "coef": self.coef.tolist(),
            "cov": self.cov.tolist(),
            "sigma": self.sigma,
            "provenance": self.provenance,
            "info": dict(self.info),
            **({"latency": self.latency.to_dict()} if self.latency is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Any) -> PerformanceModel:
        """Inverse of :meth:`to_dict`; every field is checked (closed schema)."""
        if not isinstance(data, Mapping) or data.get("kind") != MODEL_KIND:
            raise ValidationError(f"kind: not a {MODEL_KIND} document")
        inputs.closed_keys(data, "", allowed=_MODEL_KEYS, required=_MODEL_REQUIRED)
        if data.get("schema_version") != 1:
            raise ValidationError(f"schema_version: unsupported {data.get('schema_version')!r}")
        engine = inputs.string(data["engine"], "engine")
        classes = inputs.sequence(data["classes"], "classes")
        if classes != list(classes_for(engine)):
            raise ValidationError(
                f"classes: {data['classes']} do not match {engine} {classes_for(engine)}"
            )
        model_type = data["model_type"]
        if model_type not in ("prior", "fitted"):
            raise ValidationError(f"model_type: {model_type!r} is not prior or fitted")
        features = inputs.sequence(data["features"], "features")
        return cls(
            engine=engine,
            name=inputs.string(data["name"], "name"),
            version=inputs.integer(data["version"], "version", lo=0),
            model_type=model_type,
            features=tuple(
                Feature.from_dict(f, field=f"features[{i}]") for i, f in enumerate(features)
            ),
            # Coefficients are on the log scale of ops/s: |coef| <= COEF_BOUND keeps
            # exp() finite; a larger value is a corrupt or mis-scaled file.
            coef=inputs.number_array(data["coef"], "coef", ndim=2, lo=-COEF_BOUND,
                                     hi=COEF_BOUND),
            cov=inputs.number_array(data["cov"], "cov", ndim=2, lo=-COV_BOUND, hi=COV_BOUND),
            sigma=inputs.number(data["sigma"], "sigma", lo=0.0, hi=SIGMA_BOUND),
            provenance=inputs.string(data.get("provenance", ""), "provenance", empty=True),
            info=dict(inputs.mapping(data.get("info", {}), "info")),
            # absent from priors and from files written before latency was fitted
            latency=LatencyTerms.from_dict(data["latency"]) if "latency" in data else None,
        )


def save_model(model: PerformanceModel, path: str | Path) -> None:
    """Write ``model`` as JSON."""
    Path(path).write_text(json.dumps(model.to_dict(), indent=1) + "\n")


def load_model(path: str | Path) -> PerformanceModel:
    """Read a model written by :func:`save_model` (through :mod:`planner.inputs`)."""
    data = inputs.load_json(path, kind=inputs.MODEL)
    with inputs.in_file(path):
        return PerformanceModel.from_dict(data)


def default_model_path(engine: str) -> Path:
    """Path of the shipped prior of ``engine`` (planner/data/<engine>-prior.json)."""
    classes_for(engine)
    return Path(str(resources.files("planner") / "data" / f"{engine}-prior.json"))


def load_default_model(engine: str) -> PerformanceModel:
    """The shipped default (prior) model of ``engine``; its provenance file lies beside it."""
    return load_model(default_model_path(engine))


# ====================================================================== priors
#: Figures the priors use, with their sources (also written to the provenance files).
SOPHIA_STCS_OVER_LCS_WRITE = 1.44  # seeds/000: size-tiered +44% on write-heavy vs leveled
SOPHIA_LCS_OVER_STCS_READ = 1.90  # seeds/000: leveled +90% on read-heavy vs size-tiered
SEED002_MCT_THROUGHPUT_RATIO = 1.8  # seeds/002: 1.8x throughput at mct 0.11 vs 0.2 (80/20 r/w)
SEED002_MCT_LOW, SEED002_MCT_HIGH = 0.11, 0.20

# Order-of-magnitude placeholders for a 3-node loopback lab; NOT from the seeds.
_ASSUMED_BASE: dict[str, dict[str, float]] = {
    "cassandra": {"read": 6000.0, "update": 8000.0, "insert": 8000.0, "scan": 600.0},
    "redis": {"read": 60000.0, "write": 50000.0, "other": 20000.0},
}
_BASE_LOG_STD = 0.3  # assumed base scale: uncertain to a factor of ~1.35 (shared by all configs)
_UNREPORTED_EFFECT_STD = 0.05  # parameters without a reported effect: 0 +- 5%
_PRIOR_SIGMA = 0.10  # run-to-run noise on the log scale, assumed


#: A prior feature, its reported log effect per class (None: none reported) and its std.
_PriorEffect = tuple[Feature, Mapping[str, float] | None, float]


def cassandra_prior_effects() -> list[_PriorEffect]:
    """Cassandra's features with the effects the seeds report (see :func:`prior_model`;
    the registry's ``prior_effects``, planner.engines)."""
    lcs_read = math.log(SOPHIA_LCS_OVER_STCS_READ)
    lcs_write = -math.log(SOPHIA_STCS_OVER_LCS_WRITE)
    mct = -math.log(SEED002_MCT_THROUGHPUT_RATIO)
    return [
        (Feature("compaction", "level", level="LeveledCompactionStrategy"),
         {"read": lcs_read, "scan": lcs_read, "update": lcs_write, "insert": lcs_write}, 0.15),
        (Feature("compaction", "level", level="UnifiedCompactionStrategy"), None, 0.0),
        (Feature("memtable_cleanup_threshold", "linear", ref=SEED002_MCT_HIGH,
                 scale=SEED002_MCT_HIGH - SEED002_MCT_LOW, lo=SEED002_MCT_LOW,
                 hi=SEED002_MCT_HIGH),
         {"read": mct, "update": mct}, abs(mct) / 2),
        (Feature("memtable_flush_writers", "linear", ref=2.0, scale=2.0), None, 0.0),
        (Feature("trickle_fsync", "level", level=True), None, 0.0),
        (Feature("row_cache_size", "linear", ref=0.0, scale=64.0, hi=256.0), None, 0.0),
        (Feature("concurrent_writes", "linear", ref=32.0, scale=32.0), None, 0.0),
        (Feature("concurrent_reads", "linear", ref=32.0, scale=32.0), None, 0.0),
        (Feature("heap_size", "linear", ref=1024.0, scale=512.0), None, 0.0),
        (Feature("memtable_allocation_type", "level", level="offheap_objects"), None, 0.0),
        (Feature("memtable_allocation_type", "level", level="offheap_buffers"), None, 0.0),
    ]


def redis_prior_effects() -> list[_PriorEffect]:
    """Redis's features: the seeds report no effect for any Redis 7 parameter."""
    features = [
        Feature("io-threads", "linear", ref=1.0, scale=1.0, hi=4.0),
        Feature("io-threads-do-reads", "level", level=True),
        Feature("appendonly", "level", level=True),
        Feature("appendfsync", "level", level="always"),
        Feature("appendfsync", "level", level="no"),
        Feature("hz", "linear", ref=10.0, scale=40.0, hi=100.0),
        Feature("maxmemory-policy", "level", level="allkeys-lru"),
        Feature("activedefrag", "level", level=True),
        Feature("lazyfree-lazy-eviction", "level", level=True),
    ]
    return [(feat, None, 0.0) for feat in features]


def prior_model(engine: str) -> PerformanceModel:
    """Build the prior model of ``engine`` from the effects the seeds report.

    Cassandra (figures in :data:`SOPHIA_STCS_OVER_LCS_WRITE` etc.): leveled vs size-tiered
    compaction +90% on reads and -1/1.44 on writes (SOPHIA, seeds/000), applied to read+scan
    and update+insert; memtable_cleanup_threshold 0.11 vs 0.2 gives 1.8x throughput on the
    read/update overwrite workload of seeds/002, applied to read and update and flat outside
    the measured range [0.11, 0.2]. Every other parameter has no reported effect: coefficient
    0 with a small standard deviation. Redis: the seeds report no effect of any Redis 7
    parameter (SOPHIA tuned the removed virtual-memory feature), so the prior is flat.
    The base throughput per class is an assumed order of magnitude, labelled as such.
    """
    classes = classes_for(engine)
    space = get_space(engine)
    reported = get_engine(engine).prior_effects.get()()
    features = [feat for feat, _, _ in reported]
    effects = [{c: float((eff or {}).get(c, 0.0)) for c in classes} for _, eff, _ in reported]
    effect_std = [
        {c: std if eff and c in eff else _UNREPORTED_EFFECT_STD for c in classes}
        for _, eff, std in reported
    ]
    for feat in features:  # fail early if a feature names a missing parameter
        space[feat.param]
    base = _ASSUMED_BASE[engine]
    coef = np.array([[math.log(base[c])] + [e[c] for e in effects] for c in classes], dtype=float)
    std = np.array([[_BASE_LOG_STD] + [s[c] for s in effect_std] for c in classes], dtype=float)
    return PerformanceModel(
        engine=engine,
        name=f"{engine}-prior",
        version=1,
        model_type="prior",
        features=tuple(features),
        coef=coef,
        cov=np.diag(std.ravel() ** 2),
        sigma=_PRIOR_SIGMA,
        provenance=f"{engine}-prior.provenance.md",
        info={
            "label": "PRIOR - not calibrated: built from effects reported in the seeds and "
            "assumed base throughputs; replace with `fit_model` on calibration data.",
            "assumed_base_ops_per_s": base,
        },
    )


# ===================================================================== fitting
@dataclass(frozen=True)
class FitReport:
    """What :func:`fit_model` did and how well the model predicts held-out data.

    Parameters
    ----------
    n_observations, n_train, n_test : int
    design : str
        ``"interaction"`` or ``"additive"`` (the one chosen).
    heldout_mape : float
        Mean absolute percentage error (fraction, 0.05 = 5%) of the chosen design on the
        held-out rows, fitted on the training rows.
    candidates : Mapping[str, float]
        Held-out MAPE of every design tried.
    baseline_mape : float
        Held-out MAPE of a mix-only model (no configuration terms), for comparison.
    r_squared : float
        In-sample R^2 (log scale) of the final fit on all rows.
    sigma : float
        Residual standard deviation (log scale) of the final fit.
    notes : tuple of str
        Warnings about the data (e.g. a class never observed).
    """

    n_observations: int
    n_train: int
    n_test: int
    design: str
    heldout_mape: float
    candidates: Mapping[str, float]
    baseline_mape: float
    r_squared: float
    sigma: float
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "candidates": dict(self.candidates), "notes": list(self.notes)}


def _read_observations(obs: str | Path | pd.DataFrame) -> pd.DataFrame:
    if isinstance(obs, pd.DataFrame):
        return obs.copy()
    return inputs.load_csv(obs, kind=inputs.OBSERVATIONS)


def _features_for(
    space: ConfigSpace, configs: list[dict[str, Any]], params: Sequence[str]
) -> list[Feature]:
    features: list[Feature] = []
    for name in params:
        param = space[name]
        values = [c[name] for c in configs]
        if param.type in ("enum", "bool"):
            seen = list(dict.fromkeys(values))
            ref = param.default if param.default in seen else seen[0]
            features.extend(Feature(name, "level", level=v) for v in seen if v != ref)
        else:
            x = np.array([param.numeric(v) for v in values])
            scale = float(np.std(x)) or 1.0
            features.append(
                Feature(name, "linear", ref=float(param.numeric(param.default)), scale=scale)
            )
    return features


def _config_features(configs: list[dict[str, Any]], params: Sequence[str]) -> list[Feature]:
    """One ``config`` feature per distinct configuration (over ``params``), when there are
    at least two: each measured configuration's own effect, beyond the parameters'."""
    distinct = list(dict.fromkeys(tuple((p, c[p]) for p in params) for c in configs))
    if len(distinct) < 2:
        return []
    return [Feature(params[0], "config", match=match) for match in distinct]


def _design(mixes: np.ndarray, xconf: np.ndarray, design: str) -> np.ndarray:
    if design in ("interaction", POOLED):
        return np.einsum("ic,ij->icj", mixes, xconf).reshape(len(mixes), -1)
    if design == "additive":
        return np.hstack([mixes, xconf[:, 1:]])
    if design == "mix-only":
        return mixes
    raise ValidationError(f"design: unknown design {design!r}")


def _expand(
    beta: np.ndarray, cov: np.ndarray, design: str, n_c: int, n_j: int
) -> tuple[np.ndarray, np.ndarray]:
    """Map the coefficients of a design onto the full (n_c, 1 + n_j) interaction layout."""
    if design in ("interaction", POOLED):
        return beta.reshape(n_c, 1 + n_j), cov
    cols = n_c + (n_j if design == "additive" else 0)
    t = np.zeros((n_c * (1 + n_j), cols))
    for c in range(n_c):
        t[c * (1 + n_j), c] = 1.0
        if design == "additive":
            for j in range(n_j):
                t[c * (1 + n_j) + 1 + j, n_c + j] = 1.0
    return (t @ beta).reshape(n_c, 1 + n_j), t @ cov @ t.T


def _ols(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """OLS on the non-zero columns of ``z``; zero columns get coefficient 0, variance 0."""
    import statsmodels.api as sm

    keep = np.flatnonzero(np.any(z != 0, axis=0))
    zk = z[:, keep]
    if np.linalg.matrix_rank(zk) < zk.shape[1]:
        raise ValidationError(
            "observations: the design is rank-deficient (some parameters always change "
            "together, or a parameter level never co-occurs with a class); vary the "
            "parameters independently"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # perfect fits divide by zero in R^2
        res = sm.OLS(y, zk).fit()
    beta = np.zeros(z.shape[1])
    beta[keep] = np.asarray(res.params, dtype=float)
    cov = np.zeros((z.shape[1], z.shape[1]))
    cov[np.ix_(keep, keep)] = np.nan_to_num(np.asarray(res.cov_params(), dtype=float))
    dof = max(len(y) - zk.shape[1], 1)
    sigma = float(np.sqrt(np.sum(np.asarray(res.resid) ** 2) / dof))
    r2 = float(res.rsquared) if np.isfinite(res.rsquared) else 1.0
    return beta, cov, sigma, r2


# ============================================================== partial pooling
#: Grid of lambda = sigma^2 / tau^2 (noise over an effect group's spread) the pooled fit
#: integrates over, per group: from ordinary least squares (1e-6) to every coefficient of
#: the group shrunk to zero (1e10), 1.5 points a decade. Two groups make a 25 x 25 grid.
_LAMBDA_GRID = np.geomspace(1e-6, 1e10, 25)
#: Scale of the half-Cauchy prior on each ``tau`` (Gelman 2006): effects of settings are
#: mostly within a factor e^0.5, yet a larger one is not ruled out. Proper, so that a group
#: of one or two effects (where the likelihood barely falls with tau) still has a posterior.
_TAU_PRIOR_SCALE = 0.5
#: Floor of the residual sum of squares: a noise-free fit must not make sigma zero.
_RSS_FLOOR = 1e-20
#: Grid points lighter than this (relative to the heaviest) are left out of the mixture.
_WEIGHT_FLOOR = 1e-6


@dataclass(frozen=True)
class _Pooled:
    """A pooled fit in the columns of ``z``: posterior mean and covariance, and its scales."""

    beta: np.ndarray
    cov: np.ndarray
    sigma: float
    r2: float
    groups: tuple[int, ...]  # the groups shrunk (those with a column that is not all zero)
    tau: tuple[float, ...]  # posterior mean of each group's spread
    tau_interval: tuple[tuple[float, float], ...]  # their 2.5 % and 97.5 % quantiles


def _pooled_grid(
    z: np.ndarray, y: np.ndarray, groups: np.ndarray
) -> list[tuple[float, float, np.ndarray, np.ndarray]]:
    """Per grid point: (log posterior weight, sigma^2, lambda per column, tau per group).

    Restricted likelihood of y = X b + sum_g G_g u_g + e, u_g ~ N(0, tau_g^2 I),
    e ~ N(0, sigma^2 I), b flat (``groups`` 0: X; g > 0: G_g). With lambda_g = sigma^2 /
    tau_g^2 and C = Z'Z + diag(lambda) (Henderson's mixed-model equations), -2 log L =
    (n - p) log sigma^2 + log|C| - sum_g q_g log lambda_g + S / sigma^2, where S = y'y -
    coef' Z'y is the penalised residual sum of squares; for given lambdas it is smallest at
    sigma^2 = S / (n - p), which is plugged in.
    """
    n_groups = int(groups.max())
    n, p = len(y), int(np.sum(groups == 0))
    q = np.array([np.sum(groups == g) for g in range(1, n_groups + 1)])
    ztz, zty, yty = z.T @ z, z.T @ y, float(y @ y)
    out = []
    for lams in np.array(np.meshgrid(*[_LAMBDA_GRID] * n_groups)).reshape(n_groups, -1).T:
        lam_col = np.r_[0.0, lams][groups]
        # one Cholesky factor gives both the solution and log|C|
        try:
            chol = cho_factor(ztz + np.diag(lam_col))
        except np.linalg.LinAlgError:  # numerically singular at this point: no weight
            continue
        rss = max(yty - float(cho_solve(chol, zty) @ zty), _RSS_FLOOR)
        s2 = rss / (n - p)
        taus = np.sqrt(s2 / lams)
        logdet = 2.0 * float(np.sum(np.log(np.diag(chol[0]))))
        loglik = -0.5 * ((n - p) * math.log(rss) + logdet - float(q @ np.log(lams)))
        # half-Cauchy prior on each tau, times tau: the grid is uniform in log tau
        logprior = float(np.sum(np.log(taus) - np.log1p((taus / _TAU_PRIOR_SCALE) ** 2)))
        out.append((loglik + logprior, s2, lam_col, taus))
    return out


def _pooled_fit(z: np.ndarray, y: np.ndarray, groups: np.ndarray) -> _Pooled:
    """Partial pooling: the columns of ``z`` in ``groups`` 1, 2, ... shrunk towards zero.

    Empirical Bayes: every coefficient of group g has the prior N(0, tau_g^2); tau_g (how
    far the group's effects spread, against the runs' own noise sigma) is estimated from
    the data, and its uncertainty integrated over (:data:`_LAMBDA_GRID`, sigma profiled).
    The result is the posterior mean and covariance of the coefficients: a mixture of the
    Gaussian posteriors at every grid point. Group 0 is not shrunk. All-zero columns (a
    class never seen) get coefficient 0, variance 0, as in :func:`_ols`.
    """
    keep = np.flatnonzero(np.any(z != 0, axis=0))
    zk, gk = z[:, keep], groups[keep]
    x = zk[:, gk == 0]
    n = len(y)
    rank = int(np.linalg.matrix_rank(x))
    if rank < x.shape[1]:
        raise ValidationError(
            f"observations: the mixes are rank-deficient ({rank} "
            f"independent mixes over {x.shape[1]} classes); measure as many independent "
            "mixes as classes they use (a Redis shape's classes can be set, e.g. --shape "
            "hash-read:read=0.9,write=0.1)")
    if n <= x.shape[1]:
        raise ValidationError(
            f"observations: {n} rows are too few to fit {x.shape[1]} mix coefficients "
            f"and the noise; need at least {x.shape[1] + 1}")
    used = sorted(set(gk[gk > 0].tolist()))  # renumber the groups present 1..G
    gk = np.array([0 if g == 0 else used.index(g) + 1 for g in gk])
    if not used:
        beta_k, cov_k, sigma, r2 = _ols(zk, y)
        taus, intervals = np.zeros((1, 0)), []
        w = np.ones(1)
    else:
        grid = _pooled_grid(zk, y, gk)
        if not grid:
            raise ValidationError("observations: the pooled design is numerically singular")
        logw = np.array([row[0] for row in grid])
        w = np.exp(logw - logw.max())
        w /= w.sum()
        beta_k, cov_k, s2 = _mixture(zk, y, grid, w)
        sigma = math.sqrt(s2)
        resid = y - zk @ beta_k
        tss = float(np.sum((y - y.mean()) ** 2))
        r2 = 1.0 - float(resid @ resid) / tss if tss > 0 else 1.0
        taus = np.array([row[3] for row in grid])
        intervals = [_quantiles(taus[:, g], w) for g in range(len(used))]
    beta = np.zeros(z.shape[1])
    beta[keep] = beta_k
    cov = np.zeros((z.shape[1],) * 2)
    cov[np.ix_(keep, keep)] = cov_k
    return _Pooled(beta, cov, sigma, r2, tuple(used), tuple(float(t) for t in w @ taus),
                   tuple(intervals))


def _mixture(
    z: np.ndarray, y: np.ndarray, grid: Sequence[tuple[float, float, np.ndarray, np.ndarray]],
    w: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, covariance and mean sigma^2 of the mixture of the grid's Gaussian posteriors
    (at each point: mean C^-1 Z'y, covariance sigma^2 C^-1)."""
    ztz, zty = z.T @ z, z.T @ y
    mean = np.zeros(z.shape[1])
    second = np.zeros((z.shape[1],) * 2)
    s2_mean = 0.0
    heavy = w >= _WEIGHT_FLOOR * w.max()
    w = np.where(heavy, w, 0.0) / w[heavy].sum()
    for wi, (_, s2, lam_col, _) in zip(w, grid, strict=True):  # the points that factored
        if wi == 0.0:
            continue
        c_inv = cho_solve(cho_factor(ztz + np.diag(lam_col)), np.eye(len(zty)))
        mu = c_inv @ zty
        mean += wi * mu
        second += wi * (s2 * c_inv + np.outer(mu, mu))
        s2_mean += wi * s2
    cov = second - np.outer(mean, mean)
    return mean, (cov + cov.T) / 2, s2_mean


def _quantiles(values: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """The weighted 2.5 % and 97.5 % quantiles of ``values``."""
    order = np.argsort(values)
    cdf = np.cumsum(w[order])
    lo, hi = (float(values[order][min(int(np.searchsorted(cdf, p)), len(cdf) - 1)])
              for p in (0.025, 0.975))
    return lo, hi


def _fit_z(
    z: np.ndarray, y: np.ndarray, design: str, features: Sequence[Feature]
) -> tuple[np.ndarray, np.ndarray, float, float, dict[str, Any]]:
    """Fit the columns ``z`` of ``design``: OLS, or partial pooling for :data:`POOLED`.

    Returns coefficients, covariance, sigma, R^2 and what the pooled fit adds (``tau``).
    """
    if design != POOLED:
        return (*_ols(z, y), {})
    # interaction layout, per class: alpha_c (not shrunk), the parameters' features (group
    # 1), each measured configuration's own effect (group 2)
    per_class = np.array([0] + [2 if f.kind == "config" else 1 for f in features])
    groups = np.tile(per_class, z.shape[1] // len(per_class))
    own_residual, back = _own_effects_residual(z, groups == 2)
    fit = _pooled_fit(own_residual, y, groups)
    beta, cov = back @ fit.beta, back @ fit.cov @ back.T
    names = [{1: "parameters", 2: "configurations"}[g] for g in fit.groups]
    return beta, (cov + cov.T) / 2, fit.sigma, fit.r2, {
        "tau": dict(zip(names, fit.tau, strict=True)),
        "tau_interval": {k: list(v) for k, v in zip(names, fit.tau_interval, strict=True)},
    }


def _own_effects_residual(z: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``z`` with its configurations' own-effect columns (``own``) replaced by what the
    other columns cannot say (their least-squares residual), and the map ``back`` that
    turns coefficients fitted on it into coefficients of ``z``.

    Why: both groups are shrunk, so where a configuration's own effect and its parameters'
    effects could say the same thing the fit would split it between them by their spreads,
    and a configuration never measured (which has no own effect) would get only the
    parameters' share. Residualised, an own effect is only what the parameters cannot say
    (an interaction, a configuration off the parameters' pattern); with E = X A + R,
    X b + R g = X (b - A g) + E g.
    """
    x, e = z[:, ~own], z[:, own]
    back = np.eye(z.shape[1])
    if not e.size:
        return z, back
    a = np.linalg.lstsq(x, e, rcond=None)[0]
    r = e - x @ a
    r[np.abs(r) < 1e-10] = 0.0  # a column the others say entirely is left out of the fit
    out = z.copy()
    out[:, own] = r
    back[np.ix_(~own, own)] = -a
    return out, back


def _mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - actual) / actual))


@dataclass(frozen=True)
class _Observations:
    """Observations validated and turned into model rows (see :func:`_prepare`)."""

    y: np.ndarray
    mixes: np.ndarray
    xconf: np.ndarray
    features: tuple[Feature, ...]
    p99: np.ndarray | None = None  # p99_ms of every row, or None (see latency_note)
    latency_note: str | None = None  # why p99 is None although the column is there


def _prepare(
    observations: str | Path | pd.DataFrame, engine: str, params: Sequence[str] | None,
    *, per_config: bool = False,
) -> _Observations:
    classes = classes_for(engine)
    space = get_space(engine)
    df = _read_observations(observations)
    df.columns = [str(c).strip() for c in df.columns]
    for col in (*classes, TARGET):
        if col not in df.columns:
            raise ValidationError(f"{col}: column missing from the observations")
    extra = [c for c in df.columns if c not in (*classes, TARGET, *MEASURED_COLUMNS)]
    unknown = [c for c in extra if c not in space]
    if unknown:
        raise ValidationError(
            f"{unknown[0]}: unknown {engine} parameter column in the observations"
        )
    y = pd.to_numeric(df[TARGET], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(y) | (y <= 0))
    if bad.size:
        raise ValidationError(f"{TARGET}: row {int(bad[0])}: must be a positive number")
    configs: list[dict[str, Any]] = []
    # pandas < 3 gives no records at all for no columns: one empty row per observation
    records = df[extra].to_dict("records") if extra else [{} for _ in range(len(df))]
    for i, row in enumerate(records):
        try:
            configs.append(space.complete({k: _plain(v) for k, v in row.items()}))
        except ValidationError as exc:
            raise ValidationError(f"observations row {i}: {exc}") from None
    mix_rows = df[list(classes)].to_dict("records")
    if params is None:
        params = [p for p in extra if len({str(c[p]) for c in configs}) > 1]
    for p in params:
        space[p]
    features = _features_for(space, configs, params)
    if per_config and params:
        features += _config_features(configs, params)
    n_c, n_j = len(classes), len(features)
    scaffold = PerformanceModel(
        engine=engine,
        name="scaffold",
        version=0,
        model_type="fitted",
        features=tuple(features),
        coef=np.zeros((n_c, 1 + n_j)),
        cov=np.zeros((n_c * (1 + n_j),) * 2),
        sigma=0.0,
    )
    try:
        mixes = scaffold.mix_matrix(mix_rows)
    except ValidationError as exc:
        raise ValidationError(f"observations {exc}") from None
    p99, note = _latency_column(df)
    return _Observations(y, mixes, scaffold.config_matrix(configs), tuple(features), p99, note)


def _latency_column(df: pd.DataFrame) -> tuple[np.ndarray | None, str | None]:
    """The rows' p99 (ms) when every row has a positive one; else None and, when the column
    is there but incomplete, why the latency is not fitted."""
    if LATENCY_COLUMN not in df.columns:
        return None, None
    p99 = pd.to_numeric(df[LATENCY_COLUMN], errors="coerce").to_numpy(dtype=float)
    bad = int(np.sum(~np.isfinite(p99) | (p99 <= 0)))
    if bad == len(p99):
        return None, None
    if bad:
        return None, (f"latency not fitted: {bad} of {len(p99)} rows have no positive "
                      f"{LATENCY_COLUMN}")
    return p99, None


def _n_fitted(z: np.ndarray) -> int:
    """Coefficients OLS actually fits: all-zero columns (a class never seen) are left out."""
    return int(np.count_nonzero(np.any(z != 0, axis=0)))


def _fit_all(
    obs: _Observations, design: str, engine: str, y: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float, float, list[str], dict[str, Any]]:
    """Fit ``design`` on every row; coefficients in the full interaction layout, notes and
    what a pooled fit adds. ``y`` (positive, fitted on the log scale): the throughput
    ``obs.y`` unless given (the latency terms' target, :func:`_latency_terms`)."""
    classes = classes_for(engine)
    n_c, n_j = len(classes), len(obs.features)
    mixes = obs.mixes
    target = np.log(obs.y if y is None else y)
    beta, cov, sigma, r2, extra = _fit_z(_design(mixes, obs.xconf, design), target,
                                         design, obs.features)
    coef, full_cov = _expand(beta, cov, design, n_c, n_j)
    coef, full_cov = coef.copy(), full_cov.copy()
    notes = [
        f"class {c} never exceeds 5% of the mix: predictions for {c}-heavy mixes extrapolate"
        for j, c in enumerate(classes)
        if 0 < mixes[:, j].max() < 0.05
    ]
    absent = [j for j in range(n_c) if mixes[:, j].max() == 0]
    present = [j for j in range(n_c) if j not in absent]
    if absent:
        # An unobserved class gets the average of the observed ones, with a wide variance.
        p_j = 1 + n_j
        for j in absent:
            coef[j] = coef[present].mean(axis=0)
            idx = np.arange(j * p_j, (j + 1) * p_j)
            full_cov[idx, :] = 0.0
            full_cov[:, idx] = 0.0
            full_cov[idx, idx] = 1.0
            notes.append(
                f"class {classes[j]} never observed: its coefficients are the mean of the "
                "observed classes with variance 1 (log scale)"
            )
    return coef, full_cov, sigma, r2, notes, extra


def _latency_terms(obs: _Observations, design: str, engine: str) -> LatencyTerms | None:
    """The p99 terms of ``design`` on the rows' ``p99 x ops/s`` (:class:`LatencyTerms`), or
    None when the observations carry no complete ``p99_ms``."""
    if obs.p99 is None:
        return None
    coef, cov, sigma, r2, notes, extra = _fit_all(obs, design, engine,
                                                  y=obs.p99 / 1000.0 * obs.y)
    return LatencyTerms(coef=coef, cov=cov, sigma=sigma, info={
        "design": design, "n_observations": len(obs.y), "r_squared": r2, "sigma": sigma,
        "notes": notes, **extra})


def _latency_info(obs: _Observations, latency: LatencyTerms | None) -> dict[str, Any]:
    """What ``info["fit"]`` says of the latency: its fit, or why there is none."""
    if latency is not None:
        return {"latency": {"target": LATENCY_TARGET, **latency.info}}
    return {"latency": obs.latency_note} if obs.latency_note else {}


def fit_model(
    observations: str | Path | pd.DataFrame,
    *,
    engine: str,
    params: Sequence[str] | None = None,
    design: str = "auto",
    test_fraction: float = 0.25,
    seed: int = 0,
    name: str | None = None,
) -> tuple[PerformanceModel, FitReport]:
    """Fit a performance model from measured throughput.

    Parameters
    ----------
    observations : path or DataFrame
        One row per measurement: a column per operation class (fractions summing to 1),
        any configuration parameters as columns (missing ones are at their defaults; every
        value is validated against the space) and ``ops_per_s`` (> 0). With ``p99_ms`` (> 0
        in every row) the p99 latency is fitted too, with the design chosen for the
        throughput (:class:`LatencyTerms`).
    engine : str
    params : sequence of str, optional
        Parameters to model; default: every parameter column whose value varies.
    design : {"auto", "interaction", "additive", "pooled"}
        ``auto`` tries the first two and keeps the lower held-out MAPE; ``pooled`` is the
        partially pooled interaction design (:func:`fit_design`).
    test_fraction : float, default 0.25
        Share of rows held out (chosen uniformly at random with ``seed``), as in SOPHIA's Redis
        model (75% train / 25% test).
    seed : int
    name : str, optional

    Returns
    -------
    (PerformanceModel, FitReport)
        The model is refitted on all rows with the chosen design.

    Raises
    ------
    ValidationError
        Missing columns, bad fractions, unknown parameters or values, non-positive ops/s, or
        too few rows for the number of coefficients.
    """
    if not 0 < test_fraction < 1:
        raise ValidationError(f"test_fraction: must be in (0, 1), got {test_fraction}")
    obs = _prepare(observations, engine, params, per_config=design == POOLED)
    designs = ["interaction", "additive"] if design == "auto" else [design]
    scores, baseline, n_train = _heldout_scores(
        obs, designs, test_fraction=test_fraction, seed=seed
    )
    chosen = min(designs, key=lambda d: scores[d])
    coef, full_cov, sigma, r2, notes, _ = _fit_all(obs, chosen, engine)
    n = len(obs.y)
    report = FitReport(
        n_observations=n,
        n_train=n_train,
        n_test=n - n_train,
        design=chosen,
        heldout_mape=scores[chosen],
        candidates=scores,
        baseline_mape=baseline,
        r_squared=r2,
        sigma=sigma,
        notes=tuple(notes),
    )
    model = _fitted_model(
        obs, engine=engine, name=name, coef=coef, cov=full_cov, sigma=sigma, by="fit_model",
        design=chosen, fit=report.to_dict(),
    )
    return model, report


def _heldout_scores(
    obs: _Observations, designs: Sequence[str], *, test_fraction: float, seed: int
) -> tuple[dict[str, float], float, int]:
    """Held-out MAPE per design, the mix-only baseline's, and the rows trained on.

    The rows held out are ``test_fraction`` of them, drawn with ``seed``; too few rows for
    the largest design (plus 2) are refused.
    """
    mixes, xconf, y = obs.mixes, obs.xconf, obs.y
    logy = np.log(y)
    n = len(y)
    # pooled: only the mix coefficients count, the configuration ones are shrunk
    need = max(_n_fitted(_design(mixes, xconf, "mix-only" if d == POOLED else d))
               for d in designs)
    n_test = max(1, round(test_fraction * n))
    if n - n_test < need + 2:
        raise ValidationError(
            f"observations: {n} rows are too few to fit {need} coefficients with "
            f"{test_fraction:.0%} held out; need at least "
            f"{math.ceil((need + 2) / (1 - test_fraction))}"
        )
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    test, train = perm[:n_test], perm[n_test:]
    scores: dict[str, float] = {}
    for d in [*designs, "mix-only"]:
        ztr, zte = _design(mixes[train], xconf[train], d), _design(mixes[test], xconf[test], d)
        beta = _fit_z(ztr, logy[train], d, obs.features)[0]
        scores[d] = _mape(y[test], np.exp(zte @ beta))
    baseline = scores.pop("mix-only")
    return scores, baseline, len(train)


def _fitted_model(
    obs: _Observations,
    *,
    engine: str,
    name: str | None,
    coef: np.ndarray,
    cov: np.ndarray,
    sigma: float,
    by: str,
    design: str,
    fit: Mapping[str, Any],
) -> PerformanceModel:
    """A fitted model over the observations' features, with the latency terms of the same
    ``design`` when the rows have p99; ``by`` names the fitting function, ``fit`` is the
    fit's summary (``info["fit"]``, the latency's added)."""
    latency = _latency_terms(obs, design, engine)
    return PerformanceModel(
        engine=engine,
        name=name or f"{engine}-fitted",
        version=1,
        model_type="fitted",
        features=obs.features,
        coef=coef,
        cov=cov,
        sigma=sigma,
        provenance=f"fitted by planner.model.performance.{by} on {len(obs.y)} observations",
        info={"fit": {**fit, **_latency_info(obs, latency)}},
        latency=latency,
    )


def fit_design(
    observations: str | Path | pd.DataFrame,
    *,
    engine: str,
    design: str,
    params: Sequence[str] | None = None,
    name: str | None = None,
) -> PerformanceModel:
    """Fit one design on every row, holding nothing out: the caller validates the model.

    For callers with their own validation scheme, e.g. leave-one-configuration-out in
    planner/calibrate/__init__.py, where a random row hold-out would leak each configuration's other
    rows into training. Same observations and ``params`` as :func:`fit_model`; ``design`` is
    ``"interaction"``, ``"additive"`` or ``"pooled"``. Needs one row more than the
    coefficients fitted (so that ``sigma`` is defined).

    ``pooled`` (partial pooling, what ``kairos calibrate`` fits): the interaction design
    plus one ``config`` feature per measured configuration (its own effect, beyond the
    parameters'), every configuration coefficient shrunk towards zero with a spread
    estimated from the data (:func:`_pooled_fit`); only the mix coefficients count as
    fitted. ``info["fit"]`` adds ``tau`` and ``tau_interval``: each group's spread.

    When every row has a positive ``p99_ms``, the p99 latency is fitted with the same design
    (:class:`LatencyTerms`, ``model.latency``); ``info["fit"]["latency"]`` summarises that
    fit, or says why there is none (a column with gaps).

    Raises
    ------
    ValidationError
        As :func:`fit_model`; also for a rank-deficient design.
    """
    if design not in ("interaction", "additive", POOLED):
        raise ValidationError(
            f"design: must be interaction, additive or {POOLED}, got {design!r}")
    obs = _prepare(observations, engine, params, per_config=design == POOLED)
    n = len(obs.y)
    # pooled: only the mix coefficients count, the configuration ones are shrunk
    need = _n_fitted(_design(obs.mixes, obs.xconf, "mix-only" if design == POOLED
                             else design))
    if n < need + 1:
        raise ValidationError(
            f"observations: {n} rows are too few to fit {need} coefficients ({design}); "
            f"need at least {need + 1}"
        )
    coef, cov, sigma, r2, notes, extra = _fit_all(obs, design, engine)
    return _fitted_model(
        obs, engine=engine, name=name, coef=coef, cov=cov, sigma=sigma, by="fit_design",
        design=design, fit={"design": design, "n_observations": n, "r_squared": r2,
                            "sigma": sigma, "notes": notes, **extra},
    )


#: z of the two-sided 95 % interval of a configuration effect.
_Z95 = 1.959963984540054


def configuration_effects(
    model: PerformanceModel,
    mixes: Mapping[str, Mapping[str, float]],
    configs: Sequence[Mapping[str, Any]],
    reference: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Each configuration's effect under each mix against ``reference``, with its interval.

    The effect is the model's ratio of mean throughputs minus 1, from the log difference
    d = m' coef (x_k - x_ref) and its standard error from the coefficient covariance; the
    95 % interval is exp(d -+ 1.96 se) - 1. ``excludes_zero``: the interval lies wholly on
    one side of "no effect". One entry per (configuration, mix), the reference left out.
    """
    ref = model.config_matrix([reference])[0]
    out: list[dict[str, Any]] = []
    for config in configs:
        dx = model.config_matrix([config])[0] - ref
        if not np.any(dx):
            continue
        for name, mix in mixes.items():
            m = model.mix_matrix([mix])[0]
            grad = np.outer(m, dx).ravel()  # d(log ratio) / d(coef), row-major as cov
            d = float(m @ model.coef @ dx)
            se = math.sqrt(max(float(grad @ model.cov @ grad), 0.0))
            lo, hi = math.expm1(d - _Z95 * se), math.expm1(d + _Z95 * se)
            out.append({"config": dict(config), "mix": name, "effect": math.expm1(d),
                        "interval": [lo, hi], "excludes_zero": lo > 0 or hi < 0})
    return out


def _plain(value: Any) -> Any:
    """numpy/pandas scalars -> Python scalars (so validation sees ints as ints)."""
    if isinstance(value, np.generic):
        return value.item()
    return value
