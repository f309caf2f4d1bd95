"""The performance model learns from production (issue 15 part 4; seeds/004).

After a step has been in force for a window, the workload store says what the cluster
served and, from its gauges (:data:`planner.workload.store.GAUGES`), whether it was saturated.
Passive only: no synthetic load on the user's cluster.

- :func:`observe` turns a window of the store into a :class:`ProductionWindow`: the mean
  served load and mix, the share of rounds that were saturated, the p99 per class.
- :func:`judge` compares it with the model's prediction for the configuration in force. A
  saturated window measured the capacity: its error is observed against predicted. Below
  saturation the cluster served what it was offered, a lower bound of the capacity: the
  model is wrong only if it predicts less than was served.
- :func:`learn` makes the model follow production: production differs from the
  calibration bench systematically (clients in flight, data size, other traffic), an
  offset of the level rather than noise to average away among the calibration's rows. The
  base model (the calibrated one, or the shipped prior) keeps its configuration effects;
  per-class log offsets are learnt online from the saturated windows' residuals against
  it, in closed form with a shrinkage prior (:func:`offset_posterior`), and added to its
  intercepts (:func:`with_offset`). An unsaturated window measured no capacity: it is
  not learnt from. :func:`record_window` keeps each saturated window in the
  calibration's CSV columns, the record of what production measured. The effects are not
  refitted on those rows: one intercept would be pulled between two levels (the bench's,
  production's), a window among 33 barely moving it and the effects bent towards the
  configurations production happened to run, which (one a step) could not identify them.
- :func:`restart_hold` says why restart steps should not be proposed while the model's
  recent error is above a threshold, from the judgements kept in a JSONL track file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.engines import get_engine
from planner.errors import ValidationError

if TYPE_CHECKING:
    from planner.model.performance import PerformanceModel

#: A Cassandra round is saturated when its busiest node has at least this many client
#: requests in flight (Native-Transport-Requests active + pending), or the request stages
#: queue at least this many tasks. Measured on the lab (bench/saturation.sh, closed loop of
#: 256): 1 to 102 in flight per round under saturation, means 27 and 39; 1 or 2 at 200 ops/s.
MIN_ACTIVE_REQUESTS = 16.0
MIN_PENDING_TASKS = 1.0
#: A node that uses this share of its envelope's CPU limit is held at its quota: saturated.
#: The enveloped lab's nodes, saturated by a closed loop, used 0.36-0.38 of 0.4 CPU (0.90-0.95)
#: while Cassandra's own queues showed 1 request in flight: a throttled JVM leaves the backlog
#: in the kernel's socket buffers, where no stage counts it (make demo, 2026-11-27).
MIN_CPU_LIMIT_SHARE = 0.85
#: A Redis round is saturated when its busiest main thread is at least this busy.
MIN_MAIN_THREAD_UTILISATION = 0.9
#: A window is saturated when at least this share of its rounds is.
SATURATED_SHARE = 0.5
#: The ``step_id`` of a window judged before any step of the plan in force was applied.
CURRENT = "current"
#: How many recent judgements the model's error is averaged over, and the error (relative)
#: above which restart steps are held.
RECENT_WINDOWS = 3
ERROR_THRESHOLD = 0.25
#: Prior spread (log scale) of production's offset from the base model, common to every
#: class: production may serve a factor e^0.5 = 1.65 more or less than the bench (the lab's
#: closed loop of 256 served 1.40x what the bench of 64 calibrated), a factor 2.7 at two
#: standard deviations. Against a model sigma of 0.1, one window moves the level 97 % of
#: the way to what it measured (:func:`offset_posterior`).
TAU_COMMON = 0.5
#: Prior spread of a class's own offset beyond the common one: a factor 1.2 (data size
#: weighs on reads more than on writes), small enough that a read-heavy window still
#: moves the write and scan levels most of the way with it.
TAU_CLASS = 0.2
#: Floor of a window's noise (log scale): a production window is no more exact than 2 %,
#: whatever the base model's sigma (0 for a noise-free fit).
MIN_WINDOW_SIGMA = 0.02
#: The offset is learnt from this many most recent capacity windows: production drifts
#: (data grows, clients change), and the level's standard error stays at least
#: sigma / sqrt(20) (2 % at sigma 0.1), so planning never grows overconfident of it.
OFFSET_WINDOWS = 20


@dataclass(frozen=True)
class ProductionWindow:
    """What the cluster served while one configuration was in force (see :func:`observe`)."""

    engine: str
    start: float
    end: float
    served_ops_per_s: float
    mix: Mapping[str, float]
    rounds: int
    saturated_share: float
    p99_ms: Mapping[str, float]
    in_flight: float | None = None
    cpu_limit_share: float | None = None

    @property
    def saturated(self) -> bool:
        """At least half the rounds saturated, or (Cassandra) the busiest node's requests in
        flight at least :data:`MIN_ACTIVE_REQUESTS` on average: an instant's count, which a
        saturated lab showed high in only 3 of 7 rounds of one run (bench/saturation.sh); or
        the busiest node's CPU at least :data:`MIN_CPU_LIMIT_SHARE` of its envelope's limit on
        average over the rounds that read it."""
        busy = self.in_flight is not None and self.in_flight >= MIN_ACTIVE_REQUESTS
        held = self.cpu_limit_share is not None and self.cpu_limit_share >= MIN_CPU_LIMIT_SHARE
        return self.saturated_share >= SATURATED_SHARE or busy or held


@dataclass(frozen=True)
class Judgement:
    """A window against the model's prediction for the configuration in force.

    ``kind`` is ``capacity`` (saturated: ``error`` = observed / predicted - 1) or ``lower
    bound`` (``error`` = how far the served load exceeds the predicted capacity, else 0).
    ``utilisation`` is served over predicted capacity.
    """

    step_id: str
    engine: str
    start: float
    end: float
    kind: str
    served_ops_per_s: float
    predicted_ops_per_s: float
    predicted_std: float
    error: float
    utilisation: float
    mix: Mapping[str, float]
    config: Mapping[str, Any]
    p99_ms: Mapping[str, float]
    plan: str = ""


def round_saturated(engine: str, values: Mapping[str, float]) -> bool:
    """Whether one round's gauges (:meth:`planner.workload.store.Store.gauge_rounds`) say saturated:
    the registry's ``saturated`` (planner.engines)."""
    return bool(get_engine(engine).saturated.get()(values))


def cassandra_saturated(values: Mapping[str, float]) -> bool:
    """Requests queue: enough in flight, tasks pending, or any blocked."""
    return values.get("active_requests", 0.0) >= MIN_ACTIVE_REQUESTS or \
        values.get("pending_tasks", 0.0) >= MIN_PENDING_TASKS or \
        values.get("blocked_tasks", 0.0) > 0


def redis_saturated(values: Mapping[str, float]) -> bool:
    """The main thread is busy nearly all the time."""
    return values.get("cpu_main_utilisation", 0.0) >= MIN_MAIN_THREAD_UTILISATION


def observe(
    store: Any, engine: str, cluster: str, *, start: float, end: float, step_seconds: float
) -> ProductionWindow:
    """The window ``[start, end]`` of the store: served load and mix, saturation, p99.

    Raises
    ------
    ValidationError
        Fewer than two intervals, or no gauges, inside the window: it cannot be judged.
    """
    if not end > start:
        raise ValidationError(f"window: end {end} is not after start {start}")
    series = store.cluster_series(engine, cluster, since=start, step_seconds=step_seconds)
    inside = (series.timestamps >= start) & (series.timestamps + step_seconds <= end + 1e-6)
    if inside.sum() < 2:
        raise ValidationError(
            f"window {start:.0f}-{end:.0f}: {int(inside.sum())} interval(s) of "
            f"{step_seconds:.0f} s inside; collect longer before judging the model"
        )
    load = series.load[inside]
    served = float(load.mean())
    weights = load / load.sum() if load.sum() > 0 else np.full(len(load), 1 / len(load))
    mix = {c: float(np.dot(series.mix[c][inside], weights)) for c in series.mix}
    rounds = [g for g in store.gauge_rounds(engine, cluster, since=start) if start <= g.ts <= end]
    if not rounds:
        raise ValidationError(
            f"window {start:.0f}-{end:.0f}: no gauges collected (a collector older than "
            "the gauges, or none ran): saturation unknown"
        )
    saturated = sum(round_saturated(engine, g.values) for g in rounds) / len(rounds)
    classes = sorted({k for g in rounds for k in g.values if k.startswith("p99_ms_")})
    p99 = {k.removeprefix("p99_ms_"): float(np.median([g.values[k] for g in rounds
                                                       if k in g.values])) for k in classes}
    in_flight, cpu = (_mean_of(rounds, k) for k in ("active_requests", "cpu_limit_share"))
    return ProductionWindow(engine, start, end, served, mix, len(rounds), saturated, p99,
                            in_flight, cpu)


def _mean_of(rounds: Sequence[Any], key: str) -> float | None:
    """The mean of ``key`` over the rounds that have it (None: none has)."""
    values = [g.values[key] for g in rounds if key in g.values]
    return float(np.mean(values)) if values else None


def judge(
    window: ProductionWindow, model: Any, config: Mapping[str, Any], *, step_id: str,
    plan: str = "",
) -> Judgement:
    """The window against ``model``'s prediction for ``config`` at the window's mix."""
    prediction = model.predict(window.mix, config)
    predicted = float(prediction.ops_per_s)
    if not (math.isfinite(predicted) and predicted > 0):
        raise ValidationError(f"model: predicts {predicted!r} ops/s for {dict(config)}")
    ratio = window.served_ops_per_s / predicted
    if window.saturated:
        kind, error = "capacity", ratio - 1.0
    else:
        kind, error = "lower bound", max(ratio - 1.0, 0.0)
    return Judgement(
        step_id=step_id, engine=window.engine, start=window.start, end=window.end, kind=kind,
        served_ops_per_s=window.served_ops_per_s, predicted_ops_per_s=predicted,
        predicted_std=float(prediction.std), error=error, utilisation=ratio,
        mix=dict(window.mix), config=dict(config), p99_ms=dict(window.p99_ms), plan=plan,
    )


# ------------------------------------------------------- the production offset
@dataclass(frozen=True)
class ProductionOffset:
    """How far production's capacity lies from the base model's, per class (log scale).

    ``mean`` is the posterior mean of the per-class log offsets (added to the base model's
    intercepts), ``cov`` their posterior covariance; ``windows`` the capacity windows they
    were learnt from, ``sigma`` the noise of one window assumed (the base model's).
    """

    classes: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    windows: int
    sigma: float

    def at(self, mix: np.ndarray) -> tuple[float, float]:
        """The log offset at a mix (fractions in :attr:`classes` order) and its std."""
        m = np.asarray(mix, dtype=float)
        return float(m @ self.mean), math.sqrt(max(float(m @ self.cov @ m), 0.0))

    def to_dict(self) -> dict[str, Any]:
        """Per-class offsets (log scale, and as a factor - 1) and their standard errors."""
        se = np.sqrt(np.maximum(np.diag(self.cov), 0.0))
        return {"windows": self.windows, "sigma": self.sigma,
                "tau_common": TAU_COMMON, "tau_class": TAU_CLASS,
                "log_offset": dict(zip(self.classes, self.mean.tolist(), strict=True)),
                "log_se": dict(zip(self.classes, se.tolist(), strict=True)),
                "offset": {c: math.expm1(v) for c, v in zip(self.classes, self.mean,
                                                          strict=True)}}

    def summary(self) -> str:
        """``read +34% (se 9%), ...``: each class's offset and its standard error."""
        se = np.sqrt(np.maximum(np.diag(self.cov), 0.0))
        return ", ".join(f"{c} {math.expm1(v):+.0%} (se {s:.0%})"
                         for c, v, s in zip(self.classes, self.mean, se, strict=True))


def offset_prior(n_classes: int) -> np.ndarray:
    """Prior covariance of the per-class log offsets: a common part and a class's own.

    ``TAU_COMMON**2`` everywhere plus ``TAU_CLASS**2`` on the diagonal: what makes
    production differ from the bench (clients in flight, data size, other traffic) mostly
    moves every class alike, so a read-heavy window also tells about writes and scans,
    while the classes may still part as windows of other mixes arrive.
    """
    return np.full((n_classes, n_classes), TAU_COMMON**2) + TAU_CLASS**2 * np.eye(n_classes)


def offset_posterior(
    mixes: np.ndarray, residuals: np.ndarray, sigma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and covariance of the per-class log offsets ``d`` (closed form).

    Window i's residual is ``r_i = m_i' d + e_i``, ``e_i ~ N(0, sigma^2)`` (``m_i`` its
    mix), ``d ~ N(0, S)`` (:func:`offset_prior`): the Gaussian update with gain
    ``K = S M' (M S M' + sigma^2 I)^-1`` gives mean ``K r`` and covariance ``S - K M S``
    (ridge regression towards no offset). One window moves the level at its mix by the
    share ``m'Sm / (m'Sm + sigma^2)`` of its residual: most of it when sigma is small
    against the prior spread; more windows refine it. ``sigma`` is floored at
    :data:`MIN_WINDOW_SIGMA`.
    """
    m = np.atleast_2d(np.asarray(mixes, dtype=float))
    r = np.asarray(residuals, dtype=float)
    prior = offset_prior(m.shape[1])
    noise = max(float(sigma), MIN_WINDOW_SIGMA) ** 2
    gain = np.linalg.solve(m @ prior @ m.T + noise * np.eye(len(r)), m @ prior).T
    cov = prior - gain @ m @ prior
    return gain @ r, (cov + cov.T) / 2


def production_offset(
    base: PerformanceModel, capacity: Sequence[Mapping[str, Any]]
) -> ProductionOffset:
    """The offset the capacity windows (judgements as dicts) measured against ``base``.

    Each residual is ``log(served) - log(base's median for the window's mix and
    configuration)``: against the base model, never the previously learnt one, so the
    estimate does not chase itself, and every window counts once.
    """
    if not capacity:
        raise ValidationError("production offset: no capacity window to learn from")
    mixes = base.mix_matrix([j["mix"] for j in capacity])
    xconf = base.config_matrix([j["config"] for j in capacity])
    mu = np.einsum("ic,cj,ij->i", mixes, base.coef, xconf)
    served = np.array([float(j["served_ops_per_s"]) for j in capacity])
    if not np.all(np.isfinite(served) & (served > 0)):
        raise ValidationError(f"production offset: served ops/s must be > 0, got {served}")
    mean, cov = offset_posterior(mixes, np.log(served) - mu, base.sigma)
    return ProductionOffset(tuple(base.classes), mean, cov, len(capacity),
                            max(base.sigma, MIN_WINDOW_SIGMA))


def with_offset(
    base: PerformanceModel, offset: ProductionOffset, *, base_source: str = ""
) -> PerformanceModel:
    """``base`` with the offset added to its intercepts and its posterior covariance to
    theirs: the configuration effects (every other coefficient) are the base's, so the
    ratio of two configurations' predictions is unchanged, and planning's uncertainty
    of the level includes what production has not pinned down yet."""
    from planner.model.performance import PerformanceModel

    n_c, n_j = base.coef.shape
    coef = np.array(base.coef)
    coef[:, 0] += offset.mean
    cov = np.array(base.cov)
    intercepts = np.arange(n_c) * n_j
    cov[np.ix_(intercepts, intercepts)] += offset.cov
    source = base_source or base.name
    windows = f"{offset.windows} capacity window{'s' if offset.windows != 1 else ''}"
    return PerformanceModel(
        engine=base.engine, name=f"{base.name}+production", version=base.version,
        model_type=base.model_type, features=base.features, coef=coef, cov=cov,
        sigma=base.sigma,
        provenance=(f"the base model {base.name} ({source}) plus a production offset "
                    f"learnt from {windows}: {offset.summary()}"),
        info={**dict(base.info),
              "base": {"name": base.name, "source": source, "provenance": base.provenance},
              "production_offset": offset.to_dict()},
    )


def learn(
    base: PerformanceModel, judgements: Sequence[Judgement | Mapping[str, Any]], *,
    base_source: str = "",
) -> tuple[PerformanceModel, ProductionOffset] | None:
    """The base model plus the production offset its capacity judgements measured.

    Returns ``(learnt model, offset)``, or None when no judgement is a capacity one (a
    lower bound measured no capacity: it is no evidence of the level). The offset comes
    from the last :data:`OFFSET_WINDOWS` capacity windows (:func:`production_offset`);
    ``base_source`` names the base in the learnt model's provenance.
    """
    windows = [asdict(j) if isinstance(j, Judgement) else j for j in judgements]
    capacity = [j for j in windows if j.get("kind") == "capacity"][-OFFSET_WINDOWS:]
    if not capacity:
        return None
    offset = production_offset(base, capacity)
    return with_offset(base, offset, base_source=base_source), offset


def record_window(judgement: Judgement, observations: str | Path, *, engine: str) -> int | None:
    """Append a capacity window to an observations CSV: the record of what production
    measured, in the calibration's columns (a new file: the classes, the configuration's
    parameters, ``ops_per_s``). Returns the rows now kept, None for a lower bound.

    Raises
    ------
    ValidationError
        The configuration in force lacks a parameter the file has.
    """
    import pandas as pd

    from planner.model.performance import MEASURED_COLUMNS
    from planner.workload.series import classes_for

    if judgement.kind != "capacity":
        return None
    path = Path(observations)
    row = {**{c: float(judgement.mix.get(c, 0.0)) for c in classes_for(engine)},
           **dict(judgement.config), "ops_per_s": judgement.served_ops_per_s}
    if path.exists():
        table = pd.read_csv(path)
        missing = [c for c in table.columns if c not in row and c not in MEASURED_COLUMNS]
        if missing:
            raise ValidationError(
                f"{path}: the window has no value for {', '.join(missing)} (the "
                "configuration in force must name every parameter the observations have)")
        new = pd.DataFrame([{c: row[c] for c in table.columns if row.get(c) is not None}])
        # the window's empty (measured) columns stay out of the concat: pandas 2 deprecates
        # typing the result by them; they are NaN in the new row either way
        table = pd.concat([table, new], ignore_index=True)
    else:
        table = pd.DataFrame([row])
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return len(table)


# ------------------------------------------------------------------- the track
def append_judgement(track: str | Path, judgement: Judgement) -> None:
    """Keep a judgement (one JSON line) in the engine's track file."""
    path = Path(track)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(asdict(judgement), sort_keys=True, default=str) + "\n")


def load_track(track: str | Path) -> list[dict[str, Any]]:
    """The judgements kept, oldest first (none when the file does not exist)."""
    path = Path(track)
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{path}: line {number}: not JSON ({exc.msg})") from None
    return out


def recent_error(track: Sequence[Mapping[str, Any]], windows: int = RECENT_WINDOWS) -> float | None:
    """Mean absolute relative error of the last ``windows`` judgements that measured one
    (None: none yet). A lower bound the model agrees with (served below its capacity, error
    0) measured nothing about the error: counting it as 0 would lift a hold that a wrong
    capacity window set (a quiet hour after a saturated one). A lower bound the model
    contradicts (more served than it predicts) counts."""
    errors = [abs(float(j["error"])) for j in _measured_errors(track)[-windows:]]
    return float(np.mean(errors)) if errors else None


def _measured_errors(track: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The judgements that measured the model's error (see :func:`recent_error`)."""
    return [j for j in track if j.get("kind") == "capacity" or float(j["error"]) > 0]


def restart_hold(
    track: Sequence[Mapping[str, Any]], *, threshold: float = ERROR_THRESHOLD,
    windows: int = RECENT_WINDOWS,
) -> str | None:
    """Why restart steps must not be proposed now (None: the model may be trusted)."""
    error = recent_error(track, windows)
    if error is None or error <= threshold:
        return None
    measured = _measured_errors(track)
    last = measured[-1]
    return (
        f"the performance model's recent error is {error:.0%} over the last "
        f"{min(windows, len(measured))} window(s) that measured it, above {threshold:.0%}: "
        "the last one "
        f"{last['kind']}, served {float(last['served_ops_per_s']):.0f} ops/s where it "
        f"predicted {float(last['predicted_ops_per_s']):.0f}; no restart step until the "
        "error falls back"
    )


# ------------------------------------------------------ the autopilot's loop
@dataclass(frozen=True)
class LearnOutcome:
    """What one autopilot tick learnt (:func:`learn_from_production`).

    ``refit``: what a capacity window taught (None otherwise): the base model, the windows
    learnt from, the offset at this window's mix and its standard error (log scale), the
    learnt model's prediction for the window, the per-class offsets and their standard
    errors, and the rows of the learnt observations.
    """

    note: str
    judgement: Mapping[str, Any] | None = None
    refit: Mapping[str, Any] | None = None
    hold: str | None = None
    model: str | None = None


def learnt_paths(state_dir: str | Path, cluster: str, engine: str) -> dict[str, Path]:
    """The autopilot's own model files: the judgements' track (what the offset is learnt
    from), the observations recorded (the calibration's, then production's capacity
    windows) and the learnt model (the base plus the production offset)."""
    base = Path(state_dir) / "models" / f"{cluster}-{engine}"
    return {"track": base.with_name(base.name + "-track.jsonl"),
            "observations": base.with_name(base.name + "-observations.csv"),
            "model": base.with_name(base.name + "-model.json")}


def learn_from_production(
    *, state_dir: str, cluster: str, engine: str, store: str, model: str | None,
    now: float, step_seconds: float, settle_seconds: float, window_seconds: float,
    current: str | None = None,
) -> LearnOutcome:
    """Judge the window since the plan's last applied step (once it lasted
    ``window_seconds`` after ``settle_seconds``), keep the judgement, learn from a capacity
    window, and say whether restart steps are held. Before any plan is in force, the last
    ``window_seconds`` are judged against ``current`` (the configuration file the operator
    declares the nodes run), when given: the first plan is then made with what production
    serves, and a first step's gain has a window before it to be measured against. Never
    raises on missing data: the outcome's note says why nothing was judged."""
    paths = learnt_paths(state_dir, cluster, engine)
    learnt = str(paths["model"]) if paths["model"].exists() else None
    track = load_track(paths["track"])

    def outcome(note: str, **more: Any) -> LearnOutcome:
        return LearnOutcome(note=note, hold=restart_hold(track),
                            model=more.pop("model", learnt), **more)

    found = _window_to_judge(state_dir, cluster, engine, track, now=now,
                             settle_seconds=settle_seconds, window_seconds=window_seconds,
                             current=current)
    if isinstance(found, str):
        return outcome(found)
    plan_path, step_id, start, config = found
    from planner.model.performance import load_model, prior_model
    from planner.workload.store import Store

    try:
        with Store(store) as db:
            window = observe(db, engine, cluster, start=start, end=now, step_seconds=step_seconds)
    except ValidationError as exc:
        return outcome(f"not judged: {exc}")
    source = learnt or model
    judged_by = load_model(source) if source else prior_model(engine)
    judgement = judge(window, judged_by, config, step_id=step_id, plan=plan_path)
    append_judgement(paths["track"], judgement)
    track.append(json.loads(json.dumps(asdict(judgement), default=str)))  # as the file has it
    what = (f"step {step_id}" if step_id != CURRENT else "the current configuration"
            if plan_path else "the declared current configuration (no plan in force yet)")
    note = (f"{what}: served {judgement.served_ops_per_s:.0f} ops/s "
            f"({judgement.kind}; the model predicts {judgement.predicted_ops_per_s:.0f}, "
            f"error {judgement.error:+.0%})")
    refit = None
    if judgement.kind == "capacity":
        refit, note = _learn_offset(judgement, track, paths, engine, model, note)
    return outcome(note, judgement=asdict(judgement), refit=refit,
                   model=str(paths["model"]) if refit else learnt)


def _window_to_judge(
    state_dir: str, cluster: str, engine: str, track: Sequence[Mapping[str, Any]], *,
    now: float, settle_seconds: float, window_seconds: float, current: str | None = None,
) -> tuple[str, str, float, dict[str, Any]] | str:
    """``(plan, step, window start, configuration in force)``, or why there is none.
    Before any plan (``plan`` is then ``""``): the last ``window_seconds`` against the
    declared ``current`` file, from the last such judgement's end at the earliest."""
    from datetime import datetime

    from planner.autopilot import decisions as ap
    from planner.executor.rollout import (
        applied_composition,
        applied_index,
        load_state,
        state_path_for,
    )
    from planner.plan import load_plan

    autopilot = ap.load_autopilot_state(ap.state_path(state_dir, cluster, engine))
    plan_path = autopilot.get("plan")
    if not plan_path or not Path(plan_path).exists():
        return _declared_window(engine, track, now=now, window_seconds=window_seconds,
                                current=current)
    plan = load_plan(plan_path)
    rollout_state = load_state(state_path_for(plan_path))
    index = applied_index(plan, rollout_state)
    config = dict(applied_composition(plan, rollout_state).cluster)
    if index >= 0:
        step_id = plan.steps[index].id
        since = datetime.fromisoformat(rollout_state["steps"][step_id]["finished_at"])
    else:
        # No step applied yet: the plan's current configuration has been in force since
        # the plan was adopted at least, and since the last judgement if that judged the
        # same configuration (nothing changed in between: no settling needed).
        step_id = CURRENT
        since = datetime.fromisoformat(str(autopilot.get("last_replan_at") or plan.created_at))
    judged = [float(j["end"]) for j in track
              if j.get("plan") == plan_path and j.get("step_id") == step_id]
    start = max([since.timestamp() + settle_seconds, *judged])
    if index < 0 and track and track[-1].get("config") == config:
        start = min(start, float(track[-1]["end"]))
    if now - start < window_seconds:
        what = f"step {step_id}" if index >= 0 else "the current configuration"
        return (f"{what}'s window is not over ({max(now - start, 0):.0f} of "
                f"{window_seconds:.0f} s)")
    return plan_path, step_id, start, config


def _declared_window(
    engine: str, track: Sequence[Mapping[str, Any]], *, now: float, window_seconds: float,
    current: str | None,
) -> tuple[str, str, float, dict[str, Any]] | str:
    """The window before any plan: the configuration the operator declares (no settling:
    nothing Kairos did changed it), each stretch judged once."""
    if not current:
        return "no plan in force, and no current configuration declared to judge"
    from planner.model.spaces import get_space, load_config

    config = get_space(engine).complete(load_config(current, engine=engine))
    judged = [float(j["end"]) for j in track
              if not j.get("plan") and j.get("step_id") == CURRENT and j.get("config") == config]
    start = max([now - window_seconds, *judged])
    if now - start < window_seconds:
        return (f"no plan in force; the declared current configuration's window is not over "
                f"({max(now - start, 0):.0f} of {window_seconds:.0f} s)")
    return "", CURRENT, start, config


def _learn_offset(
    judgement: Judgement, track: Sequence[Mapping[str, Any]], paths: Mapping[str, Path],
    engine: str, model: str | None, note: str,
) -> tuple[dict[str, Any] | None, str]:
    """Learn the production offset of the base model (``model``, else the shipped prior)
    from the track's capacity windows, this one last; save the learnt model and record the
    window in the learnt observations. Returns what was learnt and the note, extended."""
    from planner.model.performance import load_model, prior_model, save_model

    base = load_model(model) if model else prior_model(engine)
    source = model or f"the shipped prior {engine}-prior"
    try:
        learnt = learn(base, track, base_source=source)
    except ValidationError as exc:
        return None, f"{note}; not learnt: {exc}"
    assert learnt is not None  # the track ends with this capacity judgement
    new_model, offset = learnt
    paths["model"].parent.mkdir(parents=True, exist_ok=True)
    save_model(new_model, paths["model"])
    rows, unrecorded = _record(judgement, paths, engine, model)
    log_offset, se = offset.at(base.mix_matrix([judgement.mix])[0])
    predicted = new_model.predict(judgement.mix, judgement.config).ops_per_s
    refit = {"base": source, "windows": offset.windows, "offset": math.expm1(log_offset),
             "offset_se": se, "predicted_ops_per_s": predicted, "observations": rows,
             "offsets": offset.to_dict()["offset"], "offset_ses": offset.to_dict()["log_se"]}
    windows = f"{offset.windows} window{'s' if offset.windows != 1 else ''}"
    return refit, (f"{note}; production offset {math.expm1(log_offset):+.0%} from {windows} "
                   f"(se {se:.0%}); the model now predicts {predicted:,.0f} ops/s for this "
                   f"window's mix{unrecorded}")


def _record(judgement: Judgement, paths: Mapping[str, Path], engine: str,
            model: str | None) -> tuple[int | None, str]:
    """Keep the window in the learnt observations (seeded from the configured model's
    calibration, ``<engine>-observations.csv`` beside it, when there is one): the rows
    kept, and what to add to the note when it could not be (the offset is learnt anyway,
    from the track)."""
    import shutil

    seed = Path(model).with_name(f"{engine}-observations.csv") if model else None
    if not paths["observations"].exists() and seed is not None and seed.exists():
        paths["observations"].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seed, paths["observations"])
    try:
        return record_window(judgement, paths["observations"], engine=engine), ""
    except ValidationError as exc:
        return None, f" (window not recorded in the observations: {exc})"
