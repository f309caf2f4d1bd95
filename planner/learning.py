"""The performance model learns from production (issue 15 part 4; seeds/004).

After a step has been in force for a window, the workload store says what the cluster
served and, from its gauges (:data:`planner.store.GAUGES`), whether it was saturated.
Passive only: no synthetic load on the user's cluster.

- :func:`observe` turns a window of the store into a :class:`ProductionWindow`: the mean
  served load and mix, the share of rounds that were saturated, the p99 per class.
- :func:`judge` compares it with the model's prediction for the configuration in force. A
  saturated window measured the capacity: its error is observed against predicted. Below
  saturation the cluster served what it was offered, a lower bound of the capacity: the
  model is wrong only if it predicts less than was served.
- :func:`learn` adds a saturated window to the model's observations (the calibration's
  CSV columns) and refits; an unsaturated one measured no capacity and is not added.
- :func:`restart_hold` says why restart steps should not be proposed while the model's
  recent error is above a threshold, from the judgements kept in a JSONL track file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import ValidationError

#: A Cassandra round is saturated when its busiest node has at least this many client
#: requests in flight (Native-Transport-Requests active + pending), or the request stages
#: queue at least this many tasks. Measured on the lab (bench/saturation.sh, closed loop of
#: 256): 1 to 102 in flight per round under saturation, means 27 and 39; 1 or 2 at 200 ops/s.
MIN_ACTIVE_REQUESTS = 16.0
MIN_PENDING_TASKS = 1.0
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

    @property
    def saturated(self) -> bool:
        """At least half the rounds saturated, or (Cassandra) the busiest node's requests in
        flight at least :data:`MIN_ACTIVE_REQUESTS` on average: an instant's count, which a
        saturated lab showed high in only 3 of 7 rounds of one run (bench/saturation.sh)."""
        busy = self.in_flight is not None and self.in_flight >= MIN_ACTIVE_REQUESTS
        return self.saturated_share >= SATURATED_SHARE or busy


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
    """Whether one round's gauges (:meth:`planner.store.Store.gauge_rounds`) say saturated."""
    if engine == "cassandra":
        return values.get("active_requests", 0.0) >= MIN_ACTIVE_REQUESTS or \
            values.get("pending_tasks", 0.0) >= MIN_PENDING_TASKS or \
            values.get("blocked_tasks", 0.0) > 0
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
    flights = [g.values["active_requests"] for g in rounds if "active_requests" in g.values]
    in_flight = float(np.mean(flights)) if flights else None
    return ProductionWindow(engine, start, end, served, mix, len(rounds), saturated, p99,
                            in_flight)


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


def learn(
    judgement: Judgement, observations: str | Path, *, engine: str, design: str = "pooled"
) -> tuple[Any, Any] | None:
    """Add a capacity judgement to the model's observations CSV and refit.

    Returns ``(model, fit report)``, or None for a lower bound (it measured no capacity,
    so it is not data for a model of saturated throughput). The CSV keeps the calibration's
    columns: a parameter it does not have is left out (at its default in the fit).
    """
    import pandas as pd

    from planner.perfmodel import fit_model

    if judgement.kind != "capacity":
        return None
    path = Path(observations)
    table = pd.read_csv(path)
    row = {**{c: judgement.mix.get(c, 0.0) for c in table.columns if c in judgement.mix},
           **{k: v for k, v in judgement.config.items() if k in table.columns},
           "ops_per_s": judgement.served_ops_per_s}
    missing = [c for c in table.columns if c not in row]
    if missing:
        raise ValidationError(
            f"{path}: the window has no value for {', '.join(missing)} (the configuration in "
            "force must name every parameter the model's observations have)"
        )
    table = pd.concat([table, pd.DataFrame([row])], ignore_index=True)
    table.to_csv(path, index=False)
    return fit_model(table, engine=engine, design=design)


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
    """Mean absolute relative error of the last ``windows`` judgements (None: none yet)."""
    errors = [abs(float(j["error"])) for j in track[-windows:]]
    return float(np.mean(errors)) if errors else None


def restart_hold(
    track: Sequence[Mapping[str, Any]], *, threshold: float = ERROR_THRESHOLD,
    windows: int = RECENT_WINDOWS,
) -> str | None:
    """Why restart steps must not be proposed now (None: the model may be trusted)."""
    error = recent_error(track, windows)
    if error is None or error <= threshold:
        return None
    last = track[-1]
    return (
        f"the performance model's recent error is {error:.0%} over the last "
        f"{min(windows, len(track))} window(s), above {threshold:.0%}: last window "
        f"{last['kind']}, served {float(last['served_ops_per_s']):.0f} ops/s where it "
        f"predicted {float(last['predicted_ops_per_s']):.0f}; no restart step until the "
        "error falls back"
    )


# ------------------------------------------------------ the autopilot's loop
@dataclass(frozen=True)
class LearnOutcome:
    """What one autopilot tick learnt (:func:`learn_from_production`)."""

    note: str
    judgement: Mapping[str, Any] | None = None
    refit: Mapping[str, Any] | None = None
    hold: str | None = None
    model: str | None = None


def learnt_paths(state_dir: str | Path, cluster: str, engine: str) -> dict[str, Path]:
    """The autopilot's own model files: the judgements' track, the observations it learns
    from (the calibration's, then production's) and the model refitted on them."""
    base = Path(state_dir) / "models" / f"{cluster}-{engine}"
    return {"track": base.with_name(base.name + "-track.jsonl"),
            "observations": base.with_name(base.name + "-observations.csv"),
            "model": base.with_name(base.name + "-model.json")}


def learn_from_production(
    *, state_dir: str, cluster: str, engine: str, store: str, model: str | None,
    now: float, step_seconds: float, settle_seconds: float, window_seconds: float,
) -> LearnOutcome:
    """Judge the window since the plan's last applied step (once it lasted
    ``window_seconds`` after ``settle_seconds``), keep the judgement, learn from a capacity
    window, and say whether restart steps are held. Never raises on missing data: the
    outcome's note says why nothing was judged."""
    paths = learnt_paths(state_dir, cluster, engine)
    learnt = str(paths["model"]) if paths["model"].exists() else None
    track = load_track(paths["track"])

    def outcome(note: str, **more: Any) -> LearnOutcome:
        return LearnOutcome(note=note, hold=restart_hold(track),
                            model=more.pop("model", learnt), **more)

    found = _window_to_judge(state_dir, cluster, engine, track, now=now,
                             settle_seconds=settle_seconds, window_seconds=window_seconds)
    if isinstance(found, str):
        return outcome(found)
    plan_path, step_id, start, config = found
    from planner.perfmodel import load_model, prior_model
    from planner.store import Store

    try:
        with Store(store) as db:
            window = observe(db, engine, cluster, start=start, end=now, step_seconds=step_seconds)
    except ValidationError as exc:
        return outcome(f"not judged: {exc}")
    source = learnt or model
    current = load_model(source) if source else prior_model(engine)
    judgement = judge(window, current, config, step_id=step_id, plan=plan_path)
    append_judgement(paths["track"], judgement)
    track.append(json.loads(json.dumps(asdict(judgement), default=str)))  # as the file has it
    what = "the current configuration" if step_id == CURRENT else f"step {step_id}"
    note = (f"{what}: served {judgement.served_ops_per_s:.0f} ops/s "
            f"({judgement.kind}; the model predicts {judgement.predicted_ops_per_s:.0f}, "
            f"error {judgement.error:+.0%})")
    refit = None
    if judgement.kind == "capacity":
        refit, note = _refit(judgement, paths, engine, model, note)
    return outcome(note, judgement=asdict(judgement), refit=refit,
                   model=str(paths["model"]) if refit else learnt)


def _window_to_judge(
    state_dir: str, cluster: str, engine: str, track: Sequence[Mapping[str, Any]], *,
    now: float, settle_seconds: float, window_seconds: float,
) -> tuple[str, str, float, dict[str, Any]] | str:
    """``(plan, step, window start, configuration in force)``, or why there is none."""
    from datetime import datetime

    from planner import autopilot as ap
    from planner.plan import load_plan
    from planner.rollout import applied_composition, applied_index, load_state, state_path_for

    autopilot = ap.load_autopilot_state(ap.state_path(state_dir, cluster, engine))
    plan_path = autopilot.get("plan")
    if not plan_path or not Path(plan_path).exists():
        return "no plan in force"
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


def _refit(judgement: Judgement, paths: Mapping[str, Path], engine: str, model: str | None,
           note: str) -> tuple[dict[str, Any] | None, str]:
    """Add a capacity judgement to the learnt observations (seeded from the configured
    model's calibration, ``<engine>-observations.csv`` beside it) and refit."""
    import shutil

    from planner.perfmodel import save_model

    if not paths["observations"].exists():
        seed = Path(model).with_name(f"{engine}-observations.csv") if model else None
        if seed is None or not seed.exists():
            return None, note + "; not learnt: the model has no observations to add to"
        paths["observations"].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seed, paths["observations"])
    try:
        fitted = learn(judgement, paths["observations"], engine=engine)
    except ValidationError as exc:
        return None, f"{note}; not learnt: {exc}"
    assert fitted is not None
    new_model, report = fitted
    save_model(new_model, paths["model"])
    refit = {"observations": report.n_observations, "design": report.design,
             "heldout_mape": report.heldout_mape}
    return refit, (f"{note}; refitted on {report.n_observations} observations "
                   f"(held-out error {report.heldout_mape:.1%})")
