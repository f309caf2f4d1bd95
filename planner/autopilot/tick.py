"""One engine's autopilot tick in one process: decide, re-plan, adopt, and record the run.

``playbooks/autopilot.yml`` does only what needs Ansible — the run lock, collecting the
counters, reading the live ring, running the executor — and calls two commands per engine:

- ``kairos autopilot tick --inputs FILE`` (:func:`run_tick`): the role's settings as one
  JSON document, read into :class:`planner.autopilot.tick_inputs.TickInputs`; export the
  workload history from the store (or take the given trace),
  :func:`planner.autopilot.decisions.decide`; when a re-plan is due, forecast, plan on the
  live ring (Cassandra; no ring, no plan) or the inventory's hosts (Redis) with
  :func:`planner.planning.pipeline.make_plan` on the :func:`plan_request` the inputs
  describe, read the plan file back once and check its batches against that ring and the
  inventory (``kairos explain``'s refusal), adopt it (not in a dry run), and decide again on
  it. No command line is built or parsed on the way, and nothing's output is captured. The
  result is a :class:`TickResult` written as JSON: what the playbook passes to the executor,
  and what :func:`record_run` logs.
- ``kairos autopilot record`` (:func:`record_run`): after the executor (or a failure of an
  earlier stage), judge the outcome, record a failed apply as a failed step unless the
  executor did, and append the run's line to ``autopilot.log.jsonl``.

The tick file is written before each stage begins, so a tick that fails part-way still
says at which stage, and the record names it (``replan-failed``, ...). Before the playbook
collects, ``kairos autopilot tick --inputs FILE --check`` (:func:`check_tick`) reads and
checks the same document and writes the tick file at stage ``collect``: bad settings stop the
tick before any node is touched, and what the collection needs (``per_table``) comes from
the checked inputs, not from Jinja.

With ``per_table`` (``kairos_autopilot_per_table``), a re-plan also forecasts each of the
inputs' tables from its own series in the store (:func:`table_forecasts`) and plans with
those forecasts, as ``kairos plan --table-forecast`` does; a table whose history cannot be
forecast is left out, and the tick file's ``per_table`` and the record say why.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner.autopilot import decisions as ap
from planner.autopilot.tick_inputs import TickInputs
from planner.errors import KairosError, ValidationError

__all__ = ["TickInputs", "TickResult", "check_tick", "decide_on_files", "load_tick",
           "plan_request", "record_run", "refused_inputs", "run_tick", "table_forecasts",
           "tick_path"]

#: Lines of the executor's output kept in the tick's record when it failed.
APPLY_OUTPUT_LINES = 60

#: Runs of up to this many dropped steps in the store's history are interpolated for the
#: forecast: a node's interval that spans its restart or failover cannot be counted, so the
#: step after every rollout is dropped; a longer gap cuts the history there.
MAX_FILL_STEPS = 2


@dataclass
class TickResult:
    """The tick's outcome so far (the tick file; ``record_run`` completes it)."""

    run: str
    started_at: str
    cluster: str
    engine: str
    dry_run: bool
    stage: str = "decide"
    trace: str = ""
    replan_reasons: list[str] = field(default_factory=list)
    replan_blocked: str | None = None
    replanned: bool = False
    plan_text: list[str] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)
    apply: bool = False
    apply_vars: dict[str, Any] = field(default_factory=dict)
    apply_log: str | None = None
    outcome: str = "nothing-to-do"
    learning: dict[str, Any] = field(default_factory=dict)
    per_table: dict[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        return str(self.decision.get("message", ""))

    @property
    def summary(self) -> str:
        """What the playbook prints: the decision, and in a dry run what it would do."""
        would = "dry run: would " if self.dry_run and self.decision.get("apply") else ""
        return f"{self.engine}: {would}{self.message} ({self.trace})"


def tick_path(state_dir: str | Path, run: str, engine: str) -> Path:
    """Where one run's tick file for ``engine`` is written (unique per run)."""
    return Path(state_dir) / "ticks" / f"{run}-{engine}.json"


def _write(result: TickResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(result) | {"message": result.message,
                                                 "summary": result.summary},
                               sort_keys=True, default=str) + "\n")


# --------------------------------------------------------------------- the tick
def check_tick(inp: TickInputs, out: Path) -> dict[str, Any]:
    """Before the playbook collects: ``inp`` has been read and checked; write the tick file
    at stage ``collect`` (a failed collection is then logged as ``collect-failed``) and
    return what the collection needs: ``{"stage": "collect", "collect": {"per_table": ...}}``.
    """
    _write(TickResult(run=inp.run, started_at=inp.started_at.isoformat(timespec="seconds"),
                      cluster=inp.cluster, engine=inp.engine, dry_run=inp.dry_run,
                      stage="collect"), out)
    return {"stage": "collect", "collect": {"per_table": inp.per_table}}


def refused_inputs(inputs: str | Path) -> None:
    """The tick refused its inputs ``<run>-<engine>.inputs.json``: the tick file the check
    left beside them (stage ``collect``) is removed, so that the record logs
    ``decide-failed`` (:func:`load_tick`) rather than a failed collection."""
    path = Path(inputs)
    if path.name.endswith(".inputs.json"):
        path.with_name(path.name.removesuffix(".inputs.json") + ".json").unlink(missing_ok=True)


def run_tick(inp: TickInputs, out: Path, now: datetime | None = None) -> TickResult:
    """Decide, re-plan when due, adopt, decide again; write and return the result."""
    now = now or datetime.now(UTC)
    result = TickResult(run=inp.run, started_at=inp.started_at.isoformat(timespec="seconds"),
                        cluster=inp.cluster, engine=inp.engine, dry_run=inp.dry_run)
    _write(result, out)
    trace, result.trace = _pick_trace(inp)
    result.learning = _learn(inp, now)
    first = _decide(inp, now, trace, plan=None, forecast=None)
    result.replan_reasons = list(first["replan_reasons"])
    result.replan_blocked = first["replan_blocked"]
    result.decision = first
    new_plan = new_forecast = None
    too_short = _too_short_to_forecast(inp, trace) if first["replan"] and trace else None
    if too_short:
        result.decision["message"] += f"; cannot re-plan: {too_short}"
    elif first["replan"] and trace:
        result.stage = "replan"
        _write(result, out)
        new_plan, new_forecast, result.plan_text = _replan(inp, now, trace, first,
                                                           result.learning, result.per_table)
        result.replanned = True
        result.stage = "decide"
        _write(result, out)
        result.decision = _decide(inp, now, trace, plan=new_plan, forecast=new_forecast)
    elif first["replan"]:
        result.decision["message"] += f"; cannot re-plan: {result.trace}"
    decision = result.decision
    result.apply = bool(decision["apply"]) and not inp.dry_run
    if result.apply:
        result.stage = "apply"
        result.apply_vars = _apply_vars(inp, decision)
        result.apply_log = str(
            (Path(inp.state_dir) / "apply-logs" / f"{inp.run}-{inp.engine}.log").resolve())
    result.outcome = _outcome(result)
    _write(result, out)
    return result


def _learn(inp: TickInputs, now: datetime) -> dict[str, Any]:
    """The model learns from the window of the configuration in force
    (:func:`planner.autopilot.learning.learn_from_production`); a failure is a note, not the tick's:
    learning must never keep the autopilot from acting on its plan."""
    import sqlite3

    from planner.autopilot.learning import learn_from_production

    if not inp.store:
        return {"note": "no store: nothing to learn from"}
    try:
        outcome = learn_from_production(
            state_dir=inp.state_dir, cluster=inp.cluster, engine=inp.engine, store=inp.store,
            model=inp.model, now=now.timestamp(), step_seconds=inp.step_seconds,
            settle_seconds=inp.learn_settle_seconds, window_seconds=inp.learn_window_seconds,
            current=inp.current)
    except KairosError as exc:
        return {"note": f"not learnt: {exc}"}
    except (OSError, ValueError, sqlite3.Error) as exc:  # an unreadable store or file
        return {"note": f"not learnt: {type(exc).__name__}: {exc}"}
    return asdict(outcome)


def _pick_trace(inp: TickInputs) -> tuple[str | None, str]:
    """The trace to decide on and a note for the log: the given file, or the store's export."""
    if inp.trace:
        return inp.trace, f"trace {inp.trace}"
    if not inp.store:
        return None, "no trace: no store and no trace file"
    from planner.workload.series import save_trace
    from planner.workload.store import Store, parse_since

    path = Path(inp.state_dir) / f"{inp.cluster}-{inp.engine}-trace.csv"
    try:
        with Store(inp.store) as store:
            series = store.cluster_series(inp.engine, inp.cluster,
                                          since=parse_since(inp.history, field="history.age"),
                                          step_seconds=inp.step_seconds)
            series, gaps = fill_short_gaps(series, inp.step_seconds)
            save_trace(series, path)
            store.refresh_cluster_samples(inp.engine, inp.cluster, step_seconds=inp.step_seconds)
    except KairosError as exc:  # too little history is a reason not to re-plan, said in the log
        return None, f"no trace: {exc}"
    return str(path), (f"wrote {path}: {len(series)} point(s) of {inp.engine}/{inp.cluster}, "
                       f"mean {float(series.load.mean()):.1f} ops/s{gaps}")


def fill_short_gaps(series: Any, step: float) -> tuple[Any, str]:
    """The store's series on its step grid, and a note for the log ("" when it had no gap).

    Runs of up to :data:`MAX_FILL_STEPS` dropped steps are interpolated; before a longer gap
    the history is cut, so the forecast starts after it; with fewer than 2 points after it,
    ValidationError (the tick waits for more).
    """
    import numpy as np

    from planner.workload.series import resample

    if series.step_seconds is not None:  # a series has at least 2 points
        return series, ""
    spans = np.diff(series.timestamps) / step
    long_gaps = np.flatnonzero(spans > MAX_FILL_STEPS + 1 + 1e-6)
    start = int(long_gaps[-1]) + 1 if long_gaps.size else 0
    note = ""
    if start:
        note = (f"; cut before a gap of {spans[start - 1] - 1:.0f} dropped step(s) at "
                f"{series.timestamps[start - 1] + step:.0f} (more than {MAX_FILL_STEPS})")
        if len(series) - start < 2:
            raise ValidationError(f"history: {len(series) - start} point(s) since a gap of "
                                  f"{spans[start - 1] - 1:.0f} dropped step(s): waiting for more")
    tail = series.slice(start)
    filled = resample(tail, step, max_fill=MAX_FILL_STEPS)
    missing = len(filled) - len(tail)
    if missing:
        note += (f"; {missing} dropped step(s) (a restart or failover) interpolated, "
                 f"at most {MAX_FILL_STEPS} in a row")
    return filled, note


def _too_short_to_forecast(inp: TickInputs, trace: str) -> str | None:
    """Why the trace cannot be forecast yet (too few points for the tick's forecast model), or
    None: young history is a reason to wait for the next tick, not a failed run."""
    from planner.forecast.forecaster import min_history
    from planner.workload.series import load_trace

    points, need = len(load_trace(trace)), min_history(inp.forecast_model, inp.horizon)
    if points >= need:
        return None
    source = (f"the trace file {inp.trace}" if inp.trace else
              f"the store's last {inp.history} at one point per {inp.step_seconds:g} s")
    return (f"{points} point(s) of history ({source}); forecasting {inp.horizon} steps with "
            f"the {inp.forecast_model} model needs at least {need}: waiting for more")


def _decide(inp: TickInputs, now: datetime, trace: str | None, *, plan: str | None,
            forecast: str | None) -> dict[str, Any]:
    return decide_on_files(state_dir=inp.state_dir, cluster=inp.cluster, engine=inp.engine,
                           policy=inp.policy, now=now, trace=trace, plan=plan, forecast=forecast)


def decide_on_files(*, state_dir: str, cluster: str, engine: str, policy: ap.Policy,
                    now: datetime, trace: str | None, plan: str | None = None,
                    forecast: str | None = None) -> dict[str, Any]:
    """:func:`planner.autopilot.decisions.decide` on the current plan (or ``plan``, a new one), with
    what the cluster runs after that plan's applied steps (``running_config``)."""
    from planner.executor.rollout import applied_composition, load_state, state_path_for

    state = ap.load_autopilot_state(ap.state_path(state_dir, cluster, engine))
    plan_path = plan or state.get("plan")
    view = ap.plan_view(plan_path) if plan_path and Path(plan_path).exists() else None
    forecast = forecast or (state.get("forecast") if plan is None else None)
    band = ap.band_from_forecast(forecast) if forecast and Path(forecast).exists() else None
    rollout_state = load_state(state_path_for(view.path)) if view else {}
    decision = ap.decide(
        now=now, policy=policy, plan=view, rollout_state=rollout_state,
        autopilot_state=state, band=band,
        observed=ap.latest_observation(trace) if trace else None,
    ).to_dict()
    decision["running_config"] = None
    if view is not None:
        from planner.plan import load_plan

        running = applied_composition(load_plan(view.path), rollout_state).cluster
        decision["running_config"] = dict(running)
    return decision


def _replan(inp: TickInputs, now: datetime, trace: str, first: Mapping[str, Any],
            learning: Mapping[str, Any], per_table: dict[str, str],
            ) -> tuple[str, str, list[str]]:
    """Forecast (each table too, with ``inp.per_table``: what was done with each goes in
    ``per_table``), plan, check the plan against the ring and inventory, adopt; the new
    files."""
    if inp.live_ring and not inp.ring:
        raise ValidationError(f"refusing to plan {inp.engine}: cannot read the live ring: "
                              f"{inp.ring_error or 'no ring given'}")
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = (Path(inp.state_dir) / "plans" / f"{inp.cluster}-{inp.engine}-{stamp}").resolve()
    base.parent.mkdir(parents=True, exist_ok=True)
    plan, forecast = f"{base}.yml", f"{base}.forecast.json"
    ring = None
    if inp.live_ring and inp.ring:  # kept beside the plan it was made on
        ring = f"{base}.ring.json"
        shutil.copyfile(inp.ring, ring)
    fc, lines = _forecast(inp, trace, forecast)
    tables: dict[str, str] = {}
    if inp.per_table:
        tables, notes = table_forecasts(inp, fc, base)
        per_table.update(notes)
        lines += [f"table {t}: {note}" for t, note in notes.items()]
    lines += _make_plan(plan_request(inp, forecast=fc, forecast_path=forecast, ring=ring,
                                     first=first, base=base, learning=learning,
                                     table_forecasts=tables), plan, inp, ring)
    if not inp.dry_run:
        ap.adopt_plan(ap.state_path(inp.state_dir, inp.cluster, inp.engine), plan=plan,
                      forecast=forecast, now=now, reasons=first["replan_reasons"])
    return plan, forecast, lines


def _forecast(inp: TickInputs, trace: str, path: str) -> tuple[Any, list[str]]:
    """Forecast the trace ``inp.horizon`` steps ahead (``kairos forecast``'s defaults) and
    write it to ``path``; the forecast and what to log."""
    from planner.forecast.forecaster import backtest_table, forecast, save_forecast
    from planner.workload.series import load_trace

    series = load_trace(trace)
    fc = forecast(series, horizon=inp.horizon, model=inp.forecast_model)
    save_forecast(fc, path)
    lines = [f"forecast of {len(series)} points of {trace}: season length "
             f"{fc.season_length or 'none detected'}, chosen model {fc.model}"]
    if fc.backtest:
        lines += backtest_table(fc.backtest, chosen=fc.model).splitlines()
    return fc, [*lines, f"wrote {path} ({fc.horizon} steps, {int(fc.level * 100)}% intervals)"]


def plan_request(inp: TickInputs, *, forecast: Any, forecast_path: str, ring: str | None,
                 first: Mapping[str, Any], base: Path,
                 learning: Mapping[str, Any] | None = None,
                 table_forecasts: Mapping[str, str] | None = None) -> Any:
    """The :class:`planner.planning.pipeline.PlanRequest` of a re-plan: the ring or hosts, T_r
    (measured on earlier steps under the state directory; ``restart_seconds`` only until a
    restart is measured), tables, the model (the one learnt from production once there is
    one), a restart hold, what runs now, the settings' plan options, and the tables' own
    forecast files (``table_forecasts``, as ``kairos plan --table-forecast`` gives them)."""
    from planner.planning.pipeline import plan_request as request

    learning = learning or {}
    return request(
        **inp.plan_options, forecast=forecast, source=forecast_path, engine=inp.engine,
        cluster=inp.cluster, horizon=inp.horizon, forecast_model=inp.forecast_model,
        **({"ring": ring} if ring else {"hosts": inp.hosts}),
        restart_seconds=inp.restart_seconds,
        restart_seconds_from=str(Path(inp.state_dir).resolve()), tables=list(inp.tables),
        restart_costs=inp.restart_costs, change_costs=inp.change_costs,
        model=learning.get("model") or inp.model, hold_restarts=learning.get("hold") or None,
        current=_current(inp, first, base), table_forecasts=dict(table_forecasts or {}) or None,
    )


def table_forecasts(inp: TickInputs, fc: Any, base: Path) -> tuple[dict[str, str],
                                                                    dict[str, str]]:
    """Each of ``inp.tables``' forecast, from its own series in the store (scope
    ``table:<ks>.<table>``, over the same history and step as the cluster's), written
    beside the plan as ``<base>.<ks>.<table>.forecast.json``: ``{table: file}``, and per
    table what was done or why it was left out. The series goes through a trace file
    (``<base>.<ks>.<table>.trace.csv``) as the cluster's does, so that both are forecast
    from the same times.

    A table is left out, and the plan runs it on the cluster-wide values with the load no
    table forecast names, when the store has too little of its history (collected per table
    for fewer rounds than the forecast model needs), its series has gaps, or it does not end
    where the cluster's does (its forecast would not start with the plan's: ``kairos plan``
    would refuse it).
    """
    from planner.forecast.forecaster import forecast, min_history, save_forecast
    from planner.workload.series import load_trace, save_trace
    from planner.workload.store import Store, parse_since

    need = min_history(inp.forecast_model, inp.horizon)
    step = float(fc.step_seconds)
    start = float(fc.timestamps[0])
    files: dict[str, str] = {}
    notes: dict[str, str] = {}
    with Store(inp.store) as store:
        since = parse_since(inp.history, field="history.age")
        for table in inp.tables:
            try:
                derived = store.cluster_series(inp.engine, inp.cluster, since=since,
                                               step_seconds=inp.step_seconds, table=table)
            except ValidationError as exc:
                notes[table] = f"left out: no history of its own ({exc})"
                continue
            trace = f"{base}.{table}.trace.csv"
            save_trace(derived, trace)
            series = load_trace(trace)
            why = _table_unusable(series, need=need, step=step, start=start, inp=inp)
            if why is not None:
                notes[table] = f"left out: {why}"
                continue
            try:
                tf = forecast(series, horizon=inp.horizon, model=inp.forecast_model)
            except ValidationError as exc:
                notes[table] = f"left out: cannot forecast it: {exc}"
                continue
            path = f"{base}.{table}.forecast.json"
            save_forecast(tf, path)
            files[table] = path
            notes[table] = (f"forecast from {len(series)} point(s), mean "
                            f"{float(series.load.mean()):.1f} ops/s, chosen model {tf.model}: "
                            f"wrote {path}")
    return files, notes


def _table_unusable(series: Any, *, need: int, step: float, start: float,
                    inp: TickInputs) -> str | None:
    """Why a table's series cannot give a forecast the plan takes, or None."""
    if len(series) < need:
        return (f"{len(series)} point(s) of its history (collected per table); forecasting "
                f"{inp.horizon} steps with the {inp.forecast_model} model needs at least "
                f"{need}: waiting for more")
    if series.step_seconds is None:
        return (f"its history has gaps (bins left out at a dropped interval): not one point "
                f"per {inp.step_seconds:g} s")
    end = float(series.timestamps[-1]) + step
    if end != start:
        return (f"its history ends at {end:.0f}, the cluster's at {start:.0f} (epoch "
                "seconds): its forecast would not start with the plan's")
    return None


def _current(inp: TickInputs, first: Mapping[str, Any], base: Path) -> str | None:
    """What the cluster runs: what the current plan's applied steps left it running (kept
    beside the new plan as ``.running.yml``), else the configured file."""
    running = first.get("running_config")
    if running is None:
        return inp.current
    import yaml

    path = Path(f"{base}.running.yml")
    path.write_text(yaml.safe_dump(dict(running), sort_keys=True))
    return str(path)


def _make_plan(request: Any, path: str, inp: TickInputs, ring: str | None) -> list[str]:
    """:func:`planner.planning.pipeline.make_plan`, the plan written; then the file read back once,
    checked against the inventory's hosts and, on a ring, each batch's safety (``kairos
    explain``'s refusal). Its progress and explanation lines."""
    from planner.plan import load_plan, save_plan
    from planner.planning.explain import explain_text
    from planner.planning.pipeline import make_plan
    from planner.topology.batch_safety import batch_safety, unsafe_message
    from planner.topology.ring import UnsafeBatchError, load_ring

    lines: list[str] = []
    result = make_plan(request, progress=lines.append)
    save_plan(result.plan, path, known_hosts=result.hosts)
    lines.append(f"wrote {path}: {result.summary()}")
    plan = load_plan(path, known_hosts=inp.hosts)
    safety = batch_safety(plan, load_ring(ring)) if ring else None
    source = f"the ring {ring}" if ring else None
    lines += explain_text(plan, safety=safety, ring_source=source).splitlines()
    unsafe = [v for v in safety or [] if v.problem]
    if unsafe:
        raise UnsafeBatchError(unsafe_message(path, str(source), unsafe))
    return lines


def _apply_vars(inp: TickInputs, decision: Mapping[str, Any]) -> dict[str, Any]:
    """The executor's variables: the plan and step, where its state lives, the tables."""
    out: dict[str, Any] = {"plan": decision["plan"], "step": decision["step"],
                           "retry_failed": bool(decision["retry_failed"])}
    if inp.apply_state_dir:
        out["kairos_state_dir"] = inp.apply_state_dir
    if inp.tables:  # the tables the plan was made for (the executor's default would hide them)
        out["kairos_tables"] = list(inp.tables)
    return out | dict(inp.apply_vars)


def _outcome(result: TickResult) -> str:
    """The run's outcome before any apply (``record_run`` sets the apply's)."""
    decision = result.decision
    if decision.get("paused"):
        return "paused"
    if decision.get("hold"):
        return "held"
    if result.dry_run:
        return "dry-run"
    if result.apply:
        return "apply"
    return "replanned" if result.replanned else "nothing-to-do"


# ------------------------------------------------------------------- the record
def load_tick(path: str | Path) -> dict[str, Any]:
    """A tick file. An absent one: the tick never started; when its inputs were written
    (``<run>-<engine>.inputs.json`` beside it) the tick or its check refused them (stage
    ``decide``), else an earlier task failed (stage ``collect``). Once the check passed,
    the file says stage ``collect`` (:func:`check_tick`) until the tick itself starts."""
    from planner import inputs

    p = Path(path)
    if not p.exists():
        written = p.with_name(f"{p.stem}.inputs.json").exists()
        return {"stage": "decide" if written else "collect", "decision": {}}
    data = inputs.load_json(p, kind=inputs.FileKind("autopilot tick", inputs.STATE.max_bytes))
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: a tick file must be a JSON object")
    return data


def record_run(
    tick: Mapping[str, Any], *, state_dir: str, cluster: str, engine: str, run: str,
    started_at: str, dry_run: bool, apply_rc: int | None = None, apply_output: str = "",
    failed_task: str | None = None, error: str = "",
) -> dict[str, Any]:
    """Judge the run, record a failed apply as a failed step, append the log line.

    Returns the log record plus ``failed`` (this engine's tick failed: the playbook fails
    the run after every engine had its turn).
    """
    decision = dict(tick.get("decision") or {})
    base = {"run": run, "started_at": started_at, "dry_run": dry_run,
            "plan": decision.get("plan"), "step": decision.get("step")}
    if failed_task is not None:
        record = base | {"outcome": f"{tick.get('stage', 'collect')}-failed", "applied": False,
                         "message": f"{failed_task}: {error}"[:500]}
        return _log(state_dir, cluster, engine, record) | {"failed": True}
    outcome, apply_error = str(tick.get("outcome", "nothing-to-do")), None
    if outcome == "apply":
        outcome, apply_error = _judge_apply(decision, started_at, apply_rc, apply_output)
    record = base | {
        "outcome": outcome, "applied": outcome == "applied",
        "replanned": bool(tick.get("replanned")),
        "replan_reasons": list(tick.get("replan_reasons") or []),
        "replan_blocked": tick.get("replan_blocked"),
        "retry_failed": bool(decision.get("retry_failed")), "hold": decision.get("hold"),
        "trace": tick.get("trace", ""), "apply_log": tick.get("apply_log"),
        "learning": (tick.get("learning") or {}).get("note"),
        "restart_hold": (tick.get("learning") or {}).get("hold"),
        "per_table": dict(tick.get("per_table") or {}) or None,
        "apply_error": apply_error, "message": decision.get("message", ""),
    }
    return _log(state_dir, cluster, engine, record) | {"failed": outcome == "apply-failed"}


def _judge_apply(decision: Mapping[str, Any], started_at: str, rc: int | None,
                 output: str) -> tuple[str, str | None]:
    """``applied``, or the failure's outcome and reason (recording the step when needed)."""
    from planner.executor.rollout import load_state, record_step, state_path_for

    if rc is None:
        raise ValidationError("--apply-rc: required after an apply")
    if rc == 0:
        return "applied", None
    state_file = state_path_for(decision["plan"])
    failure = ap.judge_failed_apply(
        step=decision["step"], rollout_state=load_state(state_file),
        since=datetime.fromisoformat(started_at), output=output,
    )
    if failure.record:
        record_step(state_file, step_id=decision["step"], status="failed",
                    error=f"the apply stopped before recording the step: {failure.reason}")
    return failure.outcome, failure.reason


def _log(state_dir: str, cluster: str, engine: str, record: Mapping[str, Any]) -> dict[str, Any]:
    line = {"logged_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "cluster": cluster, "engine": engine, **record}
    ap.append_log(state_dir, line)
    return line
