"""What ``kairos metrics`` exports, read only from the files Kairos already records.

No server is contacted: every value comes from the control host's files (docs/metrics.md).

- the autopilot's state, ``<state-dir>/<cluster>-<engine>-autopilot.json``: paused, the
  last re-plan, the current plan;
- the autopilot's log, ``<state-dir>/autopilot.log.jsonl``: its last line per engine (only
  the file's end is read);
- the plans (the autopilot's current one per engine, or ``--plan`` files) and their
  ``<plan>.state.json`` (planner.executor.rollout): steps, their state, expected gain, P(gain >
  cost), the capacity advice (``provenance.capacity_advice``, planner.planning.capacity);
- the executor's last rollout, ``<apply-state-dir>/rollout-<cluster>-<engine>.json``
  (docs/rollout-contract.md), and the state file it names: per node verified and its
  phase durations;
- the locks, in ``<apply-state-dir>`` (kairos_state_dir, as the playbooks keep them):
  ``<cluster>-autopilot.lock`` (the run lock) and ``<cluster>-<engine>.lock`` (the
  executors' apply locks);
- the model's track, ``<state-dir>/models/<cluster>-<engine>-track.jsonl``
  (planner.autopilot.learning): its recent error.

Label cardinality stays bounded: steps are those of one plan per engine; nodes and phases
those of one rollout per engine (the last); the lock holder is named by host, not by run id
(which changes every run). A file that cannot be read does not stop the export: its
source's ``kairos_metrics_source_error`` is 1 and a warning names the file.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from planner._module_utils import kairos_proc
from planner.engines import ENGINES
from planner.errors import KairosError, ValidationError
from planner.plan import Plan, load_plan
from planner.report.exposition import Family, stateset

__all__ = [
    "AUTOPILOT_OUTCOMES",
    "FAMILIES",
    "ROLLOUT_STATUSES",
    "STEP_STATUSES",
    "Sources",
    "collect",
]

#: The autopilot log's outcomes (planner.autopilot.tick): ``<stage>-failed`` for a stage
#: that failed, else what the run did.
AUTOPILOT_OUTCOMES = ("nothing-to-do", "replanned", "applied", "dry-run", "held", "paused",
                      "apply-busy", "apply-failed", "collect-failed", "decide-failed",
                      "replan-failed")
#: A plan step's state: ``planned`` (not due yet), ``due`` (due, not carried out),
#: ``in_progress`` (its rollout holds the apply lock), ``interrupted`` (nodes verified, no
#: outcome, no rollout running), and the outcomes the state file records.
STEP_STATUSES = ("planned", "due", "in_progress", "interrupted", "applied", "failed",
                 "superseded")
#: The last rollout's state: ``prepared`` (decided, no node done and no lock held: a
#: --check run, a refusal), then as a step's.
ROLLOUT_STATUSES = ("prepared", "in_progress", "interrupted", "applied", "failed", "superseded")
CAPACITY_ACTIONS = ("none", "scale-out", "scale-in")
#: The end of the autopilot log read for the last run (the log grows a line per run).
LOG_TAIL_BYTES = 1024 * 1024

#: Every metric: name, TYPE and HELP, in the order written. docs/metrics.md lists them.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("kairos_metrics_generated_timestamp_seconds", "gauge",
     "When kairos metrics wrote this (Unix time); stale when the refresh stopped."),
    ("kairos_metrics_source_error", "gauge",
     "1 when a file Kairos records could not be read or is malformed (kairos metrics names "
     "it on stderr)."),
    ("kairos_autopilot_paused", "gauge", "1 while the autopilot is paused (kairos autopilot "
     "pause)."),
    ("kairos_autopilot_last_replan_timestamp_seconds", "gauge",
     "When the autopilot last adopted a new plan (Unix time)."),
    ("kairos_autopilot_last_run_timestamp_seconds", "gauge",
     "When the autopilot's last run for the engine was logged (Unix time)."),
    ("kairos_autopilot_last_outcome", "gauge",
     "1 for the outcome of the autopilot's last run for the engine, 0 for the others."),
    ("kairos_autopilot_held", "gauge",
     "1 when the last run held the engine: a failed step waits for a person or its back-off."),
    ("kairos_autopilot_restart_hold", "gauge",
     "1 when the last run held restart steps back: the model's recent error is too high."),
    ("kairos_plan_created_timestamp_seconds", "gauge", "When the current plan was made."),
    ("kairos_plan_horizon_end_timestamp_seconds", "gauge",
     "When the current plan's horizon ends."),
    ("kairos_plan_steps", "gauge", "Steps in the current plan."),
    ("kairos_plan_expected_net_operations", "gauge",
     "The current plan's expected net gain over its horizon: operations served more than "
     "staying put, after the steps' costs."),
    ("kairos_plan_step_status", "gauge",
     "1 for the step's state (planned, due, in_progress, interrupted, applied, failed, "
     "superseded), 0 for the others."),
    ("kairos_plan_step_due_timestamp_seconds", "gauge", "When the step is due."),
    ("kairos_plan_step_expected_benefit_operations", "gauge",
     "Operations the step is expected to gain while it is in force."),
    ("kairos_plan_step_expected_cost_operations", "gauge",
     "Operations the step is expected to cost (nodes out of service, warm-up)."),
    ("kairos_plan_step_expected_net_operations", "gauge",
     "The step's expected benefit minus its cost, in operations."),
    ("kairos_plan_step_gain_probability_ratio", "gauge",
     "P(gain > cost) of the step over the planner's scenarios."),
    ("kairos_plan_step_restart_nodes", "gauge", "Nodes the step restarts (0: a live change)."),
    ("kairos_plan_step_attempts", "gauge", "Times the executor recorded the step's outcome."),
    ("kairos_plan_step_finished_timestamp_seconds", "gauge",
     "When the step's outcome was recorded."),
    ("kairos_rollout_status", "gauge",
     "1 for the state of the engine's last rollout (prepared, in_progress, interrupted, "
     "applied, failed, superseded), 0 for the others."),
    ("kairos_rollout_nodes", "gauge", "Nodes the last rollout configures."),
    ("kairos_rollout_nodes_verified", "gauge",
     "Nodes of the last rollout read back after their change."),
    ("kairos_rollout_node_verified", "gauge",
     "1 when the node was read back after its change in the last rollout."),
    ("kairos_rollout_node_phase_seconds", "gauge",
     "How long a node spent in each phase of the last rollout (failover, drain, stop, "
     "start, sync; total is its measured restart time)."),
    ("kairos_rollout_prepared_timestamp_seconds", "gauge",
     "When the last rollout was decided (kairos rollout prepare)."),
    ("kairos_rollout_last_progress_timestamp_seconds", "gauge",
     "When the last rollout last made progress: decided, a node verified, or its outcome."),
    ("kairos_rollout_attempts", "gauge", "Times the last rollout's outcome was recorded."),
    ("kairos_lock_held", "gauge",
     "1 while the lock file exists (lock: autopilot, the run lock; cassandra or redis, the "
     "executors' apply locks)."),
    ("kairos_lock_acquired_timestamp_seconds", "gauge", "When the lock's holder took it."),
    ("kairos_lock_heartbeat_timestamp_seconds", "gauge", "The lock holder's last heartbeat."),
    ("kairos_lock_holder_info", "gauge",
     "1, labelled with the host of the lock's holder (its run id is in the lock file)."),
    ("kairos_lock_holder_pid", "gauge",
     "The pid of the lock holder's ansible-playbook process on its host."),
    ("kairos_lock_holder_running", "gauge",
     "1 when the holder's process still runs, 0 when it is gone (judged on the holder's "
     "own host only)."),
    ("kairos_model_recent_error_ratio", "gauge",
     "The performance model's recent error: mean absolute relative error over the last "
     "windows that measured it."),
    ("kairos_model_error_threshold_ratio", "gauge",
     "The recent error above which the autopilot holds restart steps back."),
    ("kairos_model_last_error_ratio", "gauge",
     "The last judged window's relative error (served over predicted, minus 1)."),
    ("kairos_model_last_served_operations_per_second", "gauge",
     "What the cluster served in the last judged window."),
    ("kairos_model_last_predicted_operations_per_second", "gauge",
     "What the model predicted for the last judged window."),
    ("kairos_model_last_judgement_timestamp_seconds", "gauge",
     "When the last judged window ended."),
    ("kairos_model_judgements", "gauge", "Windows judged against the model so far."),
    ("kairos_model_restart_hold", "gauge",
     "1 while the model's recent error holds restart steps back."),
    ("kairos_capacity_advice", "gauge",
     "1 for the current plan's capacity advice (none, scale-out, scale-in), 0 for the others."),
    ("kairos_capacity_nodes", "gauge", "Nodes the capacity advice counted now."),
    ("kairos_capacity_advised_nodes", "gauge", "Nodes the capacity advice recommends."),
    ("kairos_capacity_scale_out_by_timestamp_seconds", "gauge",
     "When the first step short of capacity begins (scale-out advice only)."),
    ("kairos_capacity_peak_need_ratio", "gauge",
     "The horizon's peak need (upper band plus margin) over the best reachable capacity."),
    ("kairos_capacity_margin_ratio", "gauge", "The safety margin the advice used."),
    ("kairos_memory_split_advised_bytes", "gauge",
     "The size the plan's memory split advises for a cache parameter (docs/memory-split.md)."),
    ("kairos_memory_split_running_bytes", "gauge",
     "The size the plan's running configuration gives that parameter (absent: no limit)."),
    ("kairos_memory_split_predicted_hit_ratio", "gauge",
     "The measured curve's read hit ratio at the running (at=now) and advised size."),
    ("kairos_drift_values", "gauge",
     "Values the node runs that differ from what Kairos recorded applied (kairos drift); "
     "a node that could not be read counts every value it should hold."),
    ("kairos_drift_node_unread", "gauge", "1 when kairos drift could not read the node."),
    ("kairos_drift_checked_timestamp_seconds", "gauge",
     "When kairos drift last compared the nodes (Unix time)."),
)


@dataclass(frozen=True)
class Sources:
    """Where the files are (``kairos metrics --help``).

    ``state_dir`` is the autopilot's directory (kairos_autopilot_dir), ``apply_state_dir``
    the executors' and the locks' (kairos_state_dir; the same directory by default).
    ``plans`` are plan files to export besides the autopilot's current ones (one plan per
    cluster and engine).
    """

    state_dir: Path
    cluster: str
    engines: tuple[str, ...] = ENGINES
    apply_state_dir: Path | None = None
    plans: tuple[Path, ...] = ()

    @property
    def apply_dir(self) -> Path:
        return self.apply_state_dir if self.apply_state_dir is not None else self.state_dir


@dataclass
class Collected:
    """The families, and a warning per file that could not be read."""

    families: dict[str, Family]
    warnings: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Family:
        return self.families[name]

    @contextmanager
    def source(self, source: str, path: Path | str, **labels: str) -> Iterator[None]:
        """Read one source: a failure is its ``kairos_metrics_source_error`` and a warning,
        never the export's."""
        fam = self.families["kairos_metrics_source_error"]
        try:
            yield
        except READ_ERRORS as exc:
            self.warnings.append(f"{source} {path}: {type(exc).__name__}: {exc}")
            _set(fam, 1.0, source=source, **labels)
        else:
            _set(fam, 0.0, source=source, **labels)

    def read(self, source: str, path: Path, reader: Callable[[Path], Any],
             **labels: str) -> Any:
        """``reader(path)``, or None when it fails (said as :meth:`source` says it)."""
        value = None
        with self.source(source, path, **labels):
            value = reader(path)
        return value


#: What reading a recorded file may raise: the file is the problem, not the export.
READ_ERRORS = (KairosError, OSError, ValueError, KeyError, TypeError, AttributeError)


def _set(fam: Family, value: float, **labels: str) -> None:
    """Add a sample, or raise an existing one to ``value`` (an error wins over an ok)."""
    key = tuple(sorted(labels.items()))
    for i, s in enumerate(fam.samples):
        if s.labels == key:
            if value > s.value:
                fam.samples[i] = type(s)(key, value)
            return
    fam.add(value, **labels)


# ------------------------------------------------------------------ helpers
def _epoch(value: Any) -> float | None:
    """Unix time from an ISO 8601 string (naive = UTC) or a number; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    when = datetime.fromisoformat(str(value))
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _tail_lines(path: Path, max_bytes: int = LOG_TAIL_BYTES) -> list[str]:
    """The complete lines in the last ``max_bytes`` of ``path``."""
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - max_bytes))
        data = handle.read()
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > max_bytes and lines else lines


# ------------------------------------------------------------------ collect
def collect(sources: Sources, *, now: datetime | None = None,
            hostname: str | None = None) -> Collected:
    """Read every source and return the families (:data:`FAMILIES` order) and warnings.

    ``now`` decides which unrecorded steps are ``due``; ``hostname`` is this host's name
    (whether a lock holder's process can be looked up here).
    """
    now = now or datetime.now(UTC)
    out = Collected({name: Family(name, help_, kind) for name, kind, help_ in FAMILIES})
    out["kairos_metrics_generated_timestamp_seconds"].add(now.timestamp())
    host = hostname or socket.gethostname()
    cluster = sources.cluster
    locks = {"autopilot": sources.apply_dir / f"{cluster}-autopilot.lock"}
    locks |= {e: sources.apply_dir / f"{cluster}-{e}.lock" for e in sources.engines}
    held = {name: _lock(out, path, cluster=cluster, lock=name, host=host)
            for name, path in locks.items()}
    plans: dict[tuple[str, str], tuple[Path, Plan]] = {}
    for engine in sources.engines:
        current = _autopilot(out, sources, engine)
        if current is not None:
            plan = out.read("plan", current, load_plan, cluster=cluster, engine=engine)
            if plan is not None:
                plans[(plan.cluster, plan.engine)] = (current, plan)
        _model(out, sources, engine)
        _drift(out, sources, engine)
    explicit: dict[tuple[str, str], tuple[Path, Plan]] = {}
    for path in sources.plans:
        plan = out.read("plan", path, load_plan, cluster=cluster, engine="")
        if plan is None:
            continue
        key = (plan.cluster, plan.engine)
        if key in explicit:
            raise ValidationError(
                f"--plan: {explicit[key][0]} and {path} are both plans of {key[1]} cluster "
                f"{key[0]!r}: give one per cluster and engine")
        explicit[key] = (path, plan)
    plans |= explicit
    for engine in sources.engines:
        _rollout(out, sources, engine, lock_held=held.get(engine, False))
    for (plan_cluster, engine), (path, plan) in sorted(plans.items()):
        running = held.get(engine, False) and plan_cluster == cluster
        _plan(out, path, plan, now=now,
              rollout=_rollout_step(sources, engine) if running else None)
    return out


def _lock(out: Collected, path: Path, *, cluster: str, lock: str, host: str) -> bool:
    """The lock's metrics; whether it is held."""
    labels = {"cluster": cluster, "lock": lock}
    held = path.exists()
    out["kairos_lock_held"].add(held, **labels)
    if not held:
        return False
    from planner import inputs

    with out.source("lock", path, cluster=cluster, engine=lock):
        record = inputs.load_json(path, kind=inputs.FileKind("lock", 64 * 1024))
        if not isinstance(record, dict):
            raise ValidationError("a lock file holds a JSON object")
        _timestamp(out["kairos_lock_acquired_timestamp_seconds"], record.get("created_at"),
                   labels)
        _timestamp(out["kairos_lock_heartbeat_timestamp_seconds"],
                   record.get("heartbeat_at", record.get("created_at")), labels)
        holder = str(record.get("host") or "unknown")
        out["kairos_lock_holder_info"].add(1, **labels, host=holder)
        pid = record.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
            out["kairos_lock_holder_pid"].add(pid, **labels)
            if holder == host:
                started = kairos_proc.process_start(pid)
                alive = started is not None and record.get("pid_start") in (None, started)
                out["kairos_lock_holder_running"].add(alive, **labels)
    return True


def _autopilot(out: Collected, sources: Sources, engine: str) -> Path | None:
    """The autopilot's state and last run; the current plan's path (None: none)."""
    from planner.autopilot import decisions as ap

    labels = {"cluster": sources.cluster, "engine": engine}
    path = ap.state_path(sources.state_dir, sources.cluster, engine)
    plan: Path | None = None
    if path.exists():
        with out.source("autopilot_state", path, **labels):
            state = ap.load_autopilot_state(path)
            out["kairos_autopilot_paused"].add(bool(state.get("paused")), **labels)
            _timestamp(out["kairos_autopilot_last_replan_timestamp_seconds"],
                       state.get("last_replan_at"), labels)
            if state.get("plan"):
                plan = Path(str(state["plan"]))
    log = sources.state_dir / ap.LOG_NAME
    if log.exists():
        with out.source("autopilot_log", log, **labels):
            last = _last_run(log, sources.cluster, engine)
            if last is not None:
                _timestamp(out["kairos_autopilot_last_run_timestamp_seconds"],
                           last.get("logged_at"), labels)
                stateset(out["kairos_autopilot_last_outcome"], AUTOPILOT_OUTCOMES,
                         str(last.get("outcome", "unknown")), "outcome", **labels)
                out["kairos_autopilot_held"].add(bool(last.get("hold")), **labels)
                out["kairos_autopilot_restart_hold"].add(bool(last.get("restart_hold")),
                                                         **labels)
    return plan


def _last_run(log: Path, cluster: str, engine: str) -> Mapping[str, Any] | None:
    """The autopilot log's last line for ``cluster``/``engine`` (lines cut short skipped)."""
    for line in reversed(_tail_lines(log)):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (isinstance(record, dict) and record.get("cluster") == cluster
                and record.get("engine") == engine):
            return record
    return None


def _model(out: Collected, sources: Sources, engine: str) -> None:
    """The model's error from the autopilot's track of judged windows."""
    from planner.autopilot import learning

    labels = {"cluster": sources.cluster, "engine": engine}
    track_path = learning.learnt_paths(sources.state_dir, sources.cluster, engine)["track"]
    if not track_path.exists():
        return
    with out.source("model_track", track_path, **labels):
        track = learning.load_track(track_path)
        out["kairos_model_judgements"].add(len(track), **labels)
        out["kairos_model_error_threshold_ratio"].add(learning.ERROR_THRESHOLD, **labels)
        recent = learning.recent_error(track)
        if recent is not None:
            out["kairos_model_recent_error_ratio"].add(recent, **labels)
        out["kairos_model_restart_hold"].add(learning.restart_hold(track) is not None,
                                             **labels)
        if track:
            last = track[-1]
            out["kairos_model_last_error_ratio"].add(float(last["error"]), **labels)
            out["kairos_model_last_served_operations_per_second"].add(
                float(last["served_ops_per_s"]), **labels)
            out["kairos_model_last_predicted_operations_per_second"].add(
                float(last["predicted_ops_per_s"]), **labels)
            out["kairos_model_last_judgement_timestamp_seconds"].add(float(last["end"]),
                                                                     **labels)


def drift_report_path(state_dir: Path, cluster: str, engine: str) -> Path:
    """Where ``kairos drift --report`` leaves the report that this export reads."""
    return state_dir / f"drift-{cluster}-{engine}.json"


def _drift(out: Collected, sources: Sources, engine: str) -> None:
    """The last drift report (docs/drift.md): drifted values and unread nodes per node."""
    from planner.executor.drift import DRIFT_REPORT_VERSION

    labels = {"cluster": sources.cluster, "engine": engine}
    path = drift_report_path(sources.state_dir, sources.cluster, engine)
    if not path.exists():
        return
    with out.source("drift", path, **labels):
        report = json.loads(path.read_text())
        if report.get("version") != DRIFT_REPORT_VERSION:
            raise ValueError(f"version {report.get('version')!r}, this Kairos reads "
                             f"{DRIFT_REPORT_VERSION}")
        _timestamp(out["kairos_drift_checked_timestamp_seconds"], report.get("checked_at"),
                   labels)
        for node, seen in sorted(report["nodes"].items()):
            out["kairos_drift_values"].add(int(seen["drifted"]), **labels, node=node)
            out["kairos_drift_node_unread"].add(seen.get("error") is not None, **labels,
                                                node=node)


def _rollout_step(sources: Sources, engine: str) -> Any:
    """The engine's last rollout (a :class:`planner.executor.rollout.RolloutStep`), or None."""
    from planner.executor.rollout import load_rollout

    path = _rollout_path(sources, engine)
    try:
        return load_rollout(path) if path.exists() else None
    except (KairosError, OSError, ValueError):
        return None


def _rollout_path(sources: Sources, engine: str) -> Path:
    return sources.apply_dir / f"rollout-{sources.cluster}-{engine}.json"


def _entry_status(entry: Mapping[str, Any], verified: Mapping[str, Any], running: bool,
                  idle: str) -> str:
    """A step's state from its state-file entry (see :data:`STEP_STATUSES`)."""
    status = entry.get("status")
    if status in ("applied", "failed", "superseded"):
        return str(status)
    if running:
        return "in_progress"
    return "interrupted" if verified else idle


def _verified(entry: Mapping[str, Any], fingerprint: str) -> Mapping[str, Any]:
    """The entry's verified nodes, when they were verified for this target (``fingerprint``;
    empty: any)."""
    verified = entry.get("verified") or {}
    if fingerprint and entry.get("fingerprint", "") != fingerprint:
        return {}
    return verified if isinstance(verified, Mapping) else {}


def _rollout(out: Collected, sources: Sources, engine: str, *, lock_held: bool) -> None:
    """The engine's last rollout: its state, per node verified and phase durations."""
    from planner.executor.rollout import load_rollout, load_state

    path = _rollout_path(sources, engine)
    if not path.exists():
        return
    labels = {"cluster": sources.cluster, "engine": engine}
    with out.source("rollout", path, **labels):
        rollout = load_rollout(path)
        if rollout.step_id is None:  # nothing was due: no rollout to follow
            return
        entry: Mapping[str, Any] = {}
        if rollout.state:
            entry = load_state(rollout.state).get("steps", {}).get(rollout.step_id, {})
        verified = _verified(entry, rollout.fingerprint)
        step = {**labels, "step": rollout.step_id}
        stateset(out["kairos_rollout_status"], ROLLOUT_STATUSES,
                 _entry_status(entry, verified, lock_held, "prepared"), "status", **step)
        nodes = sorted(rollout.nodes) or sorted(set(rollout.hosts_in_order) | set(verified))
        out["kairos_rollout_nodes"].add(len(nodes), **step)
        out["kairos_rollout_nodes_verified"].add(len([n for n in nodes if n in verified]),
                                                 **step)
        timings = entry.get("nodes") or {}
        for node in nodes:
            out["kairos_rollout_node_verified"].add(node in verified, **step, node=node)
            record = verified.get(node) or {}
            phases = timings.get(node) or record.get("timings") or {}
            for phase, seconds in sorted(phases.items()):
                out["kairos_rollout_node_phase_seconds"].add(float(seconds), **step,
                                                             node=node, phase=str(phase))
        prepared = path.stat().st_mtime
        out["kairos_rollout_prepared_timestamp_seconds"].add(prepared, **step)
        times = [prepared] + [t for t in (_epoch(v.get("verified_at"))
                                          for v in verified.values()) if t is not None]
        finished = _epoch(entry.get("finished_at"))
        if finished is not None:
            times.append(finished)
        out["kairos_rollout_last_progress_timestamp_seconds"].add(max(times), **step)
        out["kairos_rollout_attempts"].add(int(entry.get("attempts", 0)), **step)


def _plan(out: Collected, path: Path, plan: Plan, *, now: datetime, rollout: Any) -> None:
    """A plan's steps, their state, expected gain and P(gain > cost); its capacity advice.

    ``rollout`` is the engine's last rollout while its apply lock is held (the step it
    names, of this plan, is in progress)."""
    from planner.executor.rollout import load_state, state_path_for

    labels = {"cluster": plan.cluster, "engine": plan.engine}
    out["kairos_plan_created_timestamp_seconds"].add(plan.created_at.timestamp(), **labels)
    out["kairos_plan_horizon_end_timestamp_seconds"].add(plan.horizon.end.timestamp(),
                                                         **labels)
    out["kairos_plan_steps"].add(len(plan.steps), **labels)
    out["kairos_plan_expected_net_operations"].add(plan.expected_net_ops, **labels)
    _capacity(out, plan.provenance.get("capacity_advice"), labels)
    _memory_split(out, plan.provenance.get("memory_split"), labels)
    state_file = state_path_for(path)
    steps_state: Mapping[str, Any] = {}
    with out.source("plan_state", state_file, **labels):
        steps_state = load_state(state_file).get("steps", {})
    running_step = None
    if rollout is not None and _same_file(rollout.plan, path):
        running_step = rollout.step_id
    for step in plan.steps:
        entry = steps_state.get(step.id, {})
        idle = "due" if plan.horizon.has_come_due(step.due, now) else "planned"
        status = _entry_status(entry, _verified(entry, ""), step.id == running_step, idle)
        sl = {**labels, "step": step.id}
        stateset(out["kairos_plan_step_status"], STEP_STATUSES, status, "status", **sl)
        out["kairos_plan_step_due_timestamp_seconds"].add(step.due.timestamp(), **sl)
        ex = step.expected
        out["kairos_plan_step_expected_benefit_operations"].add(ex.benefit_ops, **sl)
        out["kairos_plan_step_expected_cost_operations"].add(ex.cost_ops, **sl)
        out["kairos_plan_step_expected_net_operations"].add(ex.net_ops, **sl)
        if ex.p_gain is not None:
            out["kairos_plan_step_gain_probability_ratio"].add(ex.p_gain, **sl)
        out["kairos_plan_step_restart_nodes"].add(sum(len(b) for b in step.batches), **sl)
        out["kairos_plan_step_attempts"].add(int(entry.get("attempts", 0)), **sl)
        _timestamp(out["kairos_plan_step_finished_timestamp_seconds"], entry.get("finished_at"),
                   sl)


def _same_file(a: str | Path, b: str | Path) -> bool:
    try:
        return bool(a) and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _capacity(out: Collected, advice: Any, labels: Mapping[str, str]) -> None:
    """The plan's capacity advice (planner.planning.capacity; absent from older plans)."""
    if not isinstance(advice, Mapping):
        return
    stateset(out["kairos_capacity_advice"], CAPACITY_ACTIONS, str(advice.get("action", "none")),
             "action", **labels)
    for name, key in (("kairos_capacity_nodes", "nodes_now"),
                      ("kairos_capacity_advised_nodes", "nodes_advised")):
        _number(out[name], advice.get(key), labels)
    _timestamp(out["kairos_capacity_scale_out_by_timestamp_seconds"], advice.get("by"), labels)
    figures = advice.get("figures") or {}
    _number(out["kairos_capacity_peak_need_ratio"], figures.get("peak_need_over_capacity"),
            labels)
    _number(out["kairos_capacity_margin_ratio"], figures.get("margin"), labels)


def _memory_split(out: Collected, advice: Any, labels: Mapping[str, str]) -> None:
    """The plan's memory split advice (planner.model.memory_curve; a plan made with
    ``--memory-curve`` only)."""
    if not isinstance(advice, Mapping):
        return
    from planner.model.memory_split import config_bytes

    engine, param = str(advice.get("engine")), str(advice.get("parameter"))
    sl = {**labels, "parameter": param}
    for name, value in (("kairos_memory_split_advised_bytes", advice.get("advised")),
                        ("kairos_memory_split_running_bytes", advice.get("now"))):
        if value is not None:
            _number(out[name], config_bytes(engine, {param: value})[param], sl)
    predicted = advice.get("predicted") or {}
    for at, key in (("now", "hit_ratio_now"), ("advised", "hit_ratio")):
        _number(out["kairos_memory_split_predicted_hit_ratio"], predicted.get(key),
                {**sl, "at": at})


def _timestamp(fam: Family, value: Any, labels: Mapping[str, str]) -> None:
    """Add ``value`` as Unix time (:func:`_epoch`) when it is there (absent: left out)."""
    when = _epoch(value)
    if when is not None:
        fam.add(when, **labels)


def _number(fam: Family, value: Any, labels: Mapping[str, str]) -> None:
    """Add ``value`` when it is a number (a figure an older plan lacks is left out)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        fam.add(float(value), **labels)
