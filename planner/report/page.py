"""``kairos report``: one self-contained HTML page about a cluster's workload and its plans.

Every plot is inline SVG written here, drawn with :mod:`planner.report.charts` (no JavaScript,
fonts, images or style sheets from elsewhere), so the page can be mailed, archived or
opened offline. Sections:

1. **Workload** — observed ops/s (from the store or a trace) and the forecast with its
   interval band; the plan's steps on the same time axis (restart steps orange, live-only
   steps green).
2. **Operation mix** — the observed mix and the forecast mix, stacked.
3. **Plan** — each step: when, what changes (live / restart), batches, expected gain and
   cost, and its outcome from the rollout state file: applied, failed, "superseded by s2",
   "interrupted after cass1, cass2 verified" (verified nodes, no final status) or planned.
4. **Configuration per node** — the configuration each node ran after each step: the
   plan's current configuration, then the targets so far with that step's own per-node
   overrides (an override holds for its step only, as ``planner.executor.rollout.compose``), marked
   from ``<plan>.state.json`` per node.
5. **Configuration per table** — the table-level values (``location: table`` in the space:
   compaction) each table the plan names ran after each step: the step's own ``per_table``
   override for it (for its step only, as ``compose``), else the cluster-wide targets so
   far; marked with the step's outcome from ``<plan>.state.json``, unless the step's
   verified nodes read the table's compaction class back: "applied, read back" when every
   one of them reads the value, else "read back differs" with what they read.
6. **Read back** — per step with ``verified`` nodes, one row per node: when it was verified
   and what the executor read back from it (running values from system_views.settings,
   cassandra.yaml, the tables' compaction class from system_schema.tables, the heap).
7. **Expected vs observed** — per configuration the plan keeps in force (its current one
   until the first step, the whole horizon when no step pays, then each step's
   ``[due, until)``), the load the forecast expected against the load observed then, the
   plan's expected net gain, and from the model track the capacity the model predicted
   against what the judged windows served.
8. **The model against production** — the autopilot's judgements (``--model-track``): each
   window after a step, served vs predicted, the error and the recent error the restart
   hold reads (docs/planning.md, "The learning loop").
9. **Rollout timelines** — per step in the state file, one row per node with its
   drain / stop / start / sync phases. The state file records durations and when the step
   finished, not when each phase began: batches are laid out one after the other ending at
   ``finished_at`` (the waits between batches are not recorded and are not drawn).

Any input may be missing: its sections then say "No data" and why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from planner.report.charts import (
    CSS,
    Frame,
    axes,
    esc,
    fmt_num,
    legend,
    nice_ticks,
    points,
    svg_open,
)
from planner.workload.series import WorkloadSeries, classes_for

# Colour-blind-safe palette (Okabe & Ito).
CLASS_COLOURS: dict[str, str] = {
    "read": "#0072B2",
    "update": "#E69F00",
    "insert": "#009E73",
    "scan": "#CC79A7",
    "write": "#D55E00",
    "other": "#8C8C8C",
}
PHASE_COLOURS: dict[str, str] = {
    "drain": "#56B4E9",
    "stop": "#D55E00",
    "start": "#009E73",
    "sync": "#E69F00",
    "failover": "#CC79A7",
}
HISTORY_COLOUR = "#1F3A5F"
FORECAST_COLOUR = "#0072B2"
RESTART_COLOUR = "#D55E00"
LIVE_COLOUR = "#009E73"
PHASE_ORDER = ("failover", "drain", "stop", "start", "sync")


@dataclass
class ReportInputs:
    """What the report is made from; every field may be missing.

    Attributes
    ----------
    history
        The observed cluster workload.
    forecast
        A :class:`planner.forecast.forecaster.Forecast`.
    plan
        A :class:`planner.plan.Plan`.
    state
        The rollout state (``<plan>.state.json`` content).
    title
        The page title.
    sources
        Where each input came from (shown at the bottom).
    notes
        Why an input is missing (shown in its sections).
    model_track
        The autopilot's judgements of the model against production windows
        (:func:`planner.autopilot.learning.load_track`), oldest first.
    """

    history: WorkloadSeries | None = None
    forecast: Any = None
    plan: Any = None
    state: Mapping[str, Any] | None = None
    title: str = "Kairos report"
    sources: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    generated_at: datetime | None = None
    model_track: Sequence[Mapping[str, Any]] = ()


# ---------------------------------------------------------------------- helpers
def _fmt_dt(value: datetime | float | None) -> str:
    if value is None:
        return "—"
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(float(value), UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt_short(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%m-%d %H:%M")


def _no_data(reason: str) -> str:
    return f'<p class="nodata">No data: {esc(reason)}</p>'


# ----------------------------------------------------------------------- charts
def _time_range(inputs: ReportInputs) -> tuple[float, float] | None:
    xs: list[float] = []
    if inputs.history is not None:
        xs += [float(inputs.history.timestamps[0]), float(inputs.history.timestamps[-1])]
    fc = inputs.forecast
    if fc is not None:
        xs += [float(fc.timestamps[0]), float(fc.timestamps[-1]) + float(fc.step_seconds)]
    plan = inputs.plan
    if plan is not None and xs:
        for s in plan.steps:
            xs += [s.due.timestamp()]
    if not xs:
        return None
    lo, hi = min(xs), max(xs)
    return (lo, hi if hi > lo else lo + 1)


def workload_chart(inputs: ReportInputs) -> str:
    """Observed load, forecast mean and interval band, plan steps as vertical markers."""
    hist, fc, plan = inputs.history, inputs.forecast, inputs.plan
    if hist is None and fc is None:
        reason = inputs.notes.get("history") or "no workload history and no forecast given"
        return _no_data(reason)
    rng = _time_range(inputs)
    assert rng is not None
    ymax = 0.0
    if hist is not None:
        ymax = max(ymax, float(np.max(hist.load)))
    if fc is not None:
        ymax = max(ymax, float(np.max(fc.load_upper)))
    ymax = ymax * 1.1 or 1.0
    frame = Frame(rng[0], rng[1], 0.0, nice_ticks(0, ymax)[-1] if ymax else 1.0)
    if frame.y1 < ymax:
        frame.y1 = ymax
    n = (len(hist) if hist is not None else 0) + (fc.horizon if fc is not None else 0)
    parts = [svg_open("workload", frame, "Workload: observed and forecast operations/s", n)]
    parts.append(axes(frame, time_axis=True, y_label="operations / s"))
    keys: list[tuple[str, str, str]] = []
    if fc is not None:
        xs = [float(t) for t in fc.timestamps]
        band = points(frame, xs, list(fc.load_upper)) + " " + points(
            frame, xs[::-1], list(fc.load_lower)[::-1]
        )
        parts.append(
            f'<polygon class="band" data-series="forecast-interval" points="{band}" '
            f'fill="{FORECAST_COLOUR}" fill-opacity="0.18" stroke="none"/>'
        )
        parts.append(
            f'<polyline data-series="forecast" points="{points(frame, xs, list(fc.load_mean))}" '
            f'fill="none" stroke="{FORECAST_COLOUR}" stroke-width="2" stroke-dasharray="6 4"/>'
        )
        keys += [
            ("dash", FORECAST_COLOUR, f"forecast ({fc.model})"),
            ("box", FORECAST_COLOUR, f"{round(fc.level * 100)}% interval"),
        ]
        x = frame.x(xs[0])
        parts.append(
            f'<line class="now" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top}" '
            f'y2="{frame.plot_bottom}"/>'
        )
    if hist is not None:
        xs = [float(t) for t in hist.timestamps]
        parts.append(
            f'<polyline data-series="observed" points="{points(frame, xs, list(hist.load))}" '
            f'fill="none" stroke="{HISTORY_COLOUR}" stroke-width="2" stroke-linejoin="round"/>'
        )
        keys.insert(0, ("line", HISTORY_COLOUR, "observed"))
    if plan is not None:
        for s in plan.steps:
            t = s.due.timestamp()
            if not rng[0] <= t <= rng[1]:
                continue
            colour = RESTART_COLOUR if s.restart else LIVE_COLOUR
            x = frame.x(t)
            parts.append(
                f'<g class="step" data-step="{esc(s.id)}">'
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top}" y2="{frame.plot_bottom}" '
                f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="2 3"/>'
                f'<rect x="{x - 1:.1f}" y="{frame.top - 2}" width="{8 * len(s.id) + 10}" '
                f'height="16" rx="3" fill="{colour}"/>'
                f'<text class="steplabel" x="{x + 4:.1f}" y="{frame.top + 10}">{esc(s.id)}</text>'
                "</g>"
            )
        if plan.steps:
            keys += [("line", RESTART_COLOUR, "restart step"), ("line", LIVE_COLOUR, "live step")]
    parts.append(legend(frame, keys))
    parts.append("</svg>")
    if hist is None:
        why = inputs.notes.get("history") or "no store or trace given"
        parts.append(_no_data(f"observed workload: {why}"))
    if fc is None:
        parts.append(_no_data(f"forecast: {inputs.notes.get('forecast') or 'no forecast given'}"))
    return "".join(parts)


def mix_chart(inputs: ReportInputs) -> str:
    """Stacked operation mix: observed, then the forecast's point mix (lighter)."""
    hist, fc = inputs.history, inputs.forecast
    if hist is None and fc is None:
        return _no_data(inputs.notes.get("history") or "no workload history and no forecast given")
    engine = hist.engine if hist is not None else fc.engine
    classes = classes_for(engine)
    rng = _time_range(inputs)
    assert rng is not None
    frame = Frame(rng[0], rng[1], 0.0, 1.0, height=240)
    n = (len(hist) if hist is not None else 0) + (fc.horizon if fc is not None else 0)
    parts = [svg_open("mix", frame, "Operation mix over time", n)]
    parts.append(axes(frame, time_axis=True, y_label="share of operations",
                       y_fmt=lambda v: f"{v:.0%}"))

    def stack(xs: list[float], matrix: np.ndarray, opacity: float, tag: str) -> None:
        # Step-wise areas: each point holds until the next one.
        if len(xs) < 1:
            return
        step = (xs[-1] - xs[-2]) if len(xs) > 1 else 1.0
        edges = [*xs, xs[-1] + step]
        cum = np.zeros(len(xs))
        for j, c in enumerate(classes):
            lower, upper = cum.copy(), cum + matrix[:, j]
            top = []
            bottom = []
            for i in range(len(xs)):
                top += [(edges[i], upper[i]), (edges[i + 1], upper[i])]
                bottom += [(edges[i], lower[i]), (edges[i + 1], lower[i])]
            pts = " ".join(f"{frame.x(a):.1f},{frame.y(b):.1f}" for a, b in top + bottom[::-1])
            parts.append(
                f'<polygon data-series="{tag}-{c}" points="{pts}" fill="{CLASS_COLOURS[c]}" '
                f'fill-opacity="{opacity}" stroke="none"/>'
            )
            cum = upper

    if hist is not None:
        stack([float(t) for t in hist.timestamps], hist.mix_matrix(), 0.85, "observed")
    if fc is not None:
        # The forecast's mix where nothing was observed yet (observed wins where both exist).
        after = float(hist.timestamps[-1]) if hist is not None else -math.inf
        keep = np.asarray(fc.timestamps) > after
        if keep.any():
            m = np.column_stack([fc.mix_mean[c] for c in classes])[keep]
            xs = [float(t) for t in np.asarray(fc.timestamps)[keep]]
            stack(xs, m, 0.45, "forecast")
            x = frame.x(xs[0])
            parts.append(
                f'<line class="now" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top}" '
                f'y2="{frame.plot_bottom}"/>'
                f'<text class="tick" x="{x + 4:.1f}" y="{frame.plot_bottom + 30}">forecast →</text>'
            )
    parts.append(legend(frame, [("box", CLASS_COLOURS[c], c) for c in classes]))
    parts.append("</svg>")
    return "".join(parts)


def _mean_in(ts: np.ndarray, values: np.ndarray, lo: float, hi: float) -> float | None:
    sel = (ts >= lo) & (ts < hi)
    return float(np.mean(values[sel])) if sel.any() else None


def _plan_periods(plan: Any) -> list[tuple[str, float, float, Any]]:
    """``(id, from, until, expected)`` of each configuration the plan keeps in force: the
    current one until the first step is due (``current``, the whole horizon when the plan
    has no step), then each step's."""
    from planner.autopilot.learning import CURRENT

    start, end = plan.horizon.start.timestamp(), plan.horizon.end.timestamp()
    first = plan.steps[0].due.timestamp() if plan.steps else end
    periods = [(CURRENT, start, first, None)] if first > start else []
    return periods + [(s.id, s.due.timestamp(), s.until.timestamp(), s.expected)
                      for s in plan.steps]


def _judged(track: Sequence[Mapping[str, Any]], plan: str | None, step: str, lo: float,
            hi: float) -> dict[str, float] | None:
    """The model track's judgements of ``step`` of ``plan`` (the plan file they were made
    under, when both name one) whose windows end inside ``[lo, hi]``: the capacity windows'
    mean served and predicted ops/s and mean error, and how many were lower bounds (None:
    none judged). A lower bound measured no capacity: it is counted, not averaged."""
    def same_plan(j: Mapping[str, Any]) -> bool:
        return not (plan and j.get("plan")) or Path(str(j["plan"])).resolve() == Path(plan)

    inside = [j for j in track if j.get("step_id") == step and same_plan(j)
              and lo <= float(j["end"]) <= hi]
    if not inside:
        return None
    capacity = [j for j in inside if j.get("kind") == "capacity"]
    out = {"windows": float(len(capacity)), "lower_bounds": float(len(inside) - len(capacity))}
    if capacity:
        out |= {k: float(np.mean([float(j[f]) for j in capacity])) for k, f in (
            ("served", "served_ops_per_s"), ("predicted", "predicted_ops_per_s"),
            ("error", "error"))}
    return out


def step_gain(track: Sequence[Mapping[str, Any]], expected: Any,
              judged: Mapping[str, float] | None, before: float) -> dict[str, float | None]:
    """A step's capacity gain, expected against observed.

    Expected: the plan's own, the capacity after over the capacity before at the forecast
    load (its utilisation before over after; None when the plan did not record them).
    Observed: what the step's saturated windows served over what the last saturated window
    judged by ``before`` served (the later of the step's due time and the plan's making: a
    tick judges its window, then re-plans, then applies), whatever configuration and plan it
    was judged under (None until both exist). Both are saturated closed-loop windows, so
    served is capacity; the two windows' mixes may differ, which the report's track table
    shows.
    """
    util = (expected.utilisation_before, expected.utilisation_after) if expected else (None,) * 2
    exp = util[0] / util[1] - 1.0 if util[0] and util[1] else None
    earlier = [j for j in track if j.get("kind") == "capacity" and float(j["end"]) <= before]
    obs = None
    if earlier and judged and "served" in judged:
        obs = judged["served"] / float(earlier[-1]["served_ops_per_s"]) - 1.0
    return {"expected": exp, "observed": obs,
            "served_before": float(earlier[-1]["served_ops_per_s"]) if earlier else None}


def expected_vs_observed(inputs: ReportInputs) -> tuple[str, list[dict[str, Any]]]:
    """Grouped bars per configuration the plan keeps in force (``current``, then each
    step): the forecast's mean load vs the observed mean load; beside them in the table,
    the model's predicted capacity vs what the judged windows served (``--model-track``),
    and each step's capacity gain, expected vs observed (:func:`step_gain`)."""
    from planner.autopilot.learning import CURRENT

    plan, fc, hist = inputs.plan, inputs.forecast, inputs.history
    if plan is None:
        return _no_data(inputs.notes.get("plan") or "no plan given"), []
    rows: list[dict[str, Any]] = []
    plan_file = inputs.sources.get("plan")
    plan_file = str(Path(plan_file).resolve()) if plan_file else None
    for step, lo, hi, expected in _plan_periods(plan):
        exp = (
            _mean_in(np.asarray(fc.timestamps), np.asarray(fc.load_mean), lo, hi)
            if fc is not None
            else None
        )
        obs = (
            _mean_in(np.asarray(hist.timestamps), np.asarray(hist.load), lo, hi)
            if hist is not None
            else None
        )
        judged = _judged(inputs.model_track, plan_file, step, lo, hi)
        rows.append({"step": step, "expected": exp, "observed": obs,
                     "net": expected.net_ops if expected else None,
                     "benefit": expected.benefit_ops if expected else None,
                     "cost": expected.cost_ops if expected else None,
                     "model": judged,
                     "gain": step_gain(inputs.model_track, expected, judged,
                                       max(lo, plan.created_at.timestamp()))
                     if step != CURRENT else None})
    values = [v for r in rows for v in (r["expected"], r["observed"]) if v is not None]
    if not values:
        why = "no forecast or observed load falls inside the plan's steps"
        return _no_data(why), rows
    ymax = max(values) * 1.15 or 1.0
    frame = Frame(0, len(rows), 0.0, nice_ticks(0, ymax)[-1], height=260)
    frame.y1 = max(frame.y1, ymax)
    parts = [svg_open("expected-vs-observed", frame, "Expected vs observed load per step",
                       len(values))]
    parts.append(axes(frame, time_axis=False, y_label="mean operations / s"))
    slot = (frame.width - frame.left - frame.right) / len(rows)
    bar = min(46.0, slot * 0.32)
    for i, r in enumerate(rows):
        cx = frame.x(i + 0.5)
        for k, (key, colour) in enumerate((("expected", FORECAST_COLOUR),
                                            ("observed", HISTORY_COLOUR))):
            x = cx - bar - 2 + k * (bar + 4)
            v = r[key]
            if v is None:
                parts.append(
                    f'<text class="tick" x="{x + bar / 2:.1f}" y="{frame.plot_bottom - 6}" '
                    f'text-anchor="middle">n/a</text>'
                )
                continue
            y = frame.y(v)
            parts.append(
                f'<rect data-series="{key}" data-step="{esc(r["step"])}" x="{x:.1f}" '
                f'y="{y:.1f}" width="{bar:.1f}" height="{frame.plot_bottom - y:.1f}" rx="2" '
                f'fill="{colour}" fill-opacity="{0.55 if key == "expected" else 0.9}"/>'
                f'<text class="value" x="{x + bar / 2:.1f}" y="{y - 5:.1f}" '
                f'text-anchor="middle">{esc(fmt_num(v))}</text>'
            )
        parts.append(
            f'<text class="tick" x="{cx:.1f}" y="{frame.plot_bottom + 17}" '
            f'text-anchor="middle">{esc(r["step"])}</text>'
        )
    parts.append(legend(frame, [("box", FORECAST_COLOUR, "expected (forecast)"),
                                 ("box", HISTORY_COLOUR, "observed")]))
    parts.append("</svg>")
    return "".join(parts), rows


def _phases(timings: Mapping[str, Any]) -> list[tuple[str, float]]:
    items = [(k, float(v)) for k, v in timings.items() if k != "total" and v is not None]
    order = {p: i for i, p in enumerate(PHASE_ORDER)}
    return sorted(items, key=lambda kv: order.get(kv[0], len(order)))


def rollout_timeline(plan: Any, step_id: str, entry: Mapping[str, Any]) -> str:
    """One step's per-node phases as a Gantt chart (batches back to back)."""
    nodes: Mapping[str, Mapping[str, Any]] = entry.get("nodes") or {}
    if not nodes:
        return _no_data(f"step {step_id} recorded no per-node timings")
    batches: list[list[str]] = []
    step = next((s for s in plan.steps if s.id == step_id), None) if plan is not None else None
    if step is not None and step.batches:
        batches = [[h for h in b if h in nodes] for b in step.batches]
        batches = [b for b in batches if b]
    placed = {h for b in batches for h in b}
    batches += [[h] for h in nodes if h not in placed]
    totals = {h: sum(v for _, v in _phases(nodes[h])) for h in nodes}
    offsets: dict[str, float] = {}
    t = 0.0
    for b in batches:
        for h in b:
            offsets[h] = t
        t += max(totals[h] for h in b)
    end = t or 1.0
    order = [h for b in batches for h in b]
    row_h, gap = 26, 10
    frame = Frame(0.0, end * 1.12, 0, 1, left=110, top=40, bottom=36,
                   height=40 + 36 + len(order) * (row_h + gap))
    finished = entry.get("finished_at")
    label = f"Rollout of step {step_id}"
    parts = [svg_open(f"rollout-{step_id}", frame, label, sum(len(nodes[h]) for h in nodes))]
    for v in nice_ticks(0, frame.x1, 6):
        x = frame.x(v)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top - 4}" '
            f'y2="{frame.plot_bottom}"/>'
            f'<text class="tick" x="{x:.1f}" y="{frame.plot_bottom + 16}" '
            f'text-anchor="middle">{v:g} s</text>'
        )
    used: list[str] = []
    for i, h in enumerate(order):
        y = frame.top + i * (row_h + gap)
        parts.append(
            f'<text class="rowlabel" x="{frame.left - 10}" y="{y + row_h / 2 + 4:.1f}" '
            f'text-anchor="end">{esc(h)}</text>'
        )
        x = offsets[h]
        for phase, sec in _phases(nodes[h]):
            colour = PHASE_COLOURS.get(phase, "#8C8C8C")
            if phase not in used:
                used.append(phase)
            x0, x1 = frame.x(x), frame.x(x + sec)
            parts.append(
                f'<rect data-series="{esc(phase)}" data-node="{esc(h)}" x="{x0:.1f}" '
                f'y="{y:.1f}" width="{max(x1 - x0, 1.0):.1f}" height="{row_h}" fill="{colour}">'
                f"<title>{esc(h)} {esc(phase)}: {sec:g} s</title></rect>"
            )
            if x1 - x0 > 34:
                parts.append(
                    f'<text class="barlabel" x="{(x0 + x1) / 2:.1f}" y="{y + row_h / 2 + 4:.1f}" '
                    f'text-anchor="middle">{sec:.3g}s</text>'
                )
            x += sec
        parts.append(
            f'<text class="value" x="{frame.x(x) + 6:.1f}" y="{y + row_h / 2 + 4:.1f}">'
            f"{totals[h]:.3g} s</text>"
        )
    parts.append(legend(frame, [("solid", PHASE_COLOURS.get(p, "#8C8C8C"), p) for p in used]))
    if finished:
        parts.append(
            f'<text class="tick" x="{frame.left}" y="{frame.top - 22}">ended '
            f"{esc(finished)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def rollout_timelines(inputs: ReportInputs) -> str:
    """Every step in the state file: its outcome, then its nodes' phases.

    An interrupted step's timings are its verified nodes' (no final record has them yet).
    """
    plan, state = inputs.plan, inputs.state
    if not state:
        return _no_data(inputs.notes.get("state") or "no rollout state file")
    steps = state.get("steps") or {}
    if not steps:
        return _no_data("the rollout state records no step yet")
    out: list[str] = []
    for sid in _state_order(plan, steps):
        entry = _step_entry(state, sid)
        css, label = step_outcome(plan, state, sid)
        attempts = entry.get("attempts")
        note = f' <span class="s">attempt(s): {esc(attempts)}</span>' if attempts else ""
        out.append(f"<h3>Step {esc(sid)} {_badge(css, label)}{note}</h3>")
        if css == "superseded":
            by = entry.get("superseded_by") or "a later step"
            out.append(f'<p class="note">Its changes were rolled out with {esc(by)}.</p>')
            continue
        nodes = {h: r["timings"] for h, r in _verified(entry).items() if r.get("timings")}
        nodes.update(entry.get("nodes") or {})
        out.append(rollout_timeline(plan, sid, {**entry, "nodes": nodes}))
    return "".join(out)


# ----------------------------------------------------------------------- tables
def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _config_text(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_plain(v)}" for k, v in sorted(config.items())) or "—"


def _badge(css: str, label: str) -> str:
    return f'<span class="status {esc(css)}">{esc(label)}</span>'


def _step_entry(state: Mapping[str, Any] | None, step_id: str) -> Mapping[str, Any]:
    entry = ((state or {}).get("steps") or {}).get(step_id)
    return entry if isinstance(entry, Mapping) else {}


def _verified(entry: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    """Host -> ``{verified_at, readback, timings}``: the nodes read back after their change."""
    verified = entry.get("verified")
    if not isinstance(verified, Mapping):
        return {}
    return {str(h): r for h, r in verified.items() if isinstance(r, Mapping)}


def _plan_step(plan: Any, step_id: str) -> Any:
    if plan is None:
        return None
    return next((s for s in plan.steps if s.id == step_id), None)


def _verified_hosts(plan: Any, step_id: str, entry: Mapping[str, Any]) -> list[str]:
    """The hosts read back for a step: in the step's batch order, then by name."""
    verified = _verified(entry)
    step = _plan_step(plan, step_id)
    order = [h for b in step.batches for h in b] if step is not None else []
    return [h for h in order if h in verified] + sorted(h for h in verified if h not in order)


def _state_order(plan: Any, steps: Mapping[str, Any]) -> list[str]:
    """The state file's step ids: in plan order, then the others by id."""
    order = [s.id for s in plan.steps] if plan is not None else []
    return sorted(steps, key=lambda k: (order.index(k) if k in order else len(order), k))


def step_outcome(plan: Any, state: Mapping[str, Any] | None, step_id: str) -> tuple[str, str]:
    """``(css class, label)`` of a step's outcome in the rollout state.

    ``applied``, ``failed``, ``superseded`` ("superseded by s2"), ``interrupted`` (nodes
    verified and no status: "interrupted after cass1, cass2 verified"), else ``planned``.
    """
    entry = _step_entry(state, step_id)
    status = entry.get("status")
    if status == "superseded":
        return "superseded", f"superseded by {entry.get('superseded_by') or 'a later step'}"
    if status in ("applied", "failed"):
        return str(status), str(status)
    if status is not None:
        return "unknown", str(status)
    hosts = _verified_hosts(plan, step_id, entry)
    if hosts:
        return "interrupted", f"interrupted after {', '.join(hosts)} verified"
    return "planned", "planned"


def _change_text(
    keys: Sequence[str], cluster: Mapping[str, Any], per_node: Mapping[str, Mapping[str, Any]]
) -> str:
    """``key=value`` per changed key: the cluster's value, then each node's override.

    A step also lists a key whose override the previous step had and it has not (the node
    returns to the cluster value), so a key need not be in the step's own target.
    """
    parts = []
    for k in sorted(keys):
        nodes = [f"{h}: {_plain(o[k])}" for h, o in sorted(per_node.items()) if k in o]
        text = f"{k}={_plain(cluster.get(k, 'default'))}"
        parts.append(text + (f" ({', '.join(nodes)})" if nodes else ""))
    return ", ".join(parts) or "—"


def plan_table(inputs: ReportInputs) -> str:
    plan = inputs.plan
    if plan is None:
        return _no_data(inputs.notes.get("plan") or "no plan given")
    if not plan.steps:
        return "<p>The plan keeps the current configuration: it has no steps.</p>"
    rows = []
    cluster = dict(plan.current_config)
    for s in plan.steps:
        cluster.update(s.target)
        css, label = step_outcome(plan, inputs.state, s.id)
        entry = _step_entry(inputs.state, s.id)
        batches = " → ".join("[" + ", ".join(b) + "]" for b in s.batches) or "—"
        err = f'<div class="err">{esc(entry.get("error"))}</div>' if entry.get("error") else ""
        verified = _verified_hosts(plan, s.id, entry)
        if css == "failed" and verified:
            err += f'<div class="note">{esc(", ".join(verified))} verified</div>'
        rows.append(
            "<tr>"
            f"<td><b>{esc(s.id)}</b></td><td>{esc(_fmt_short(s.due))}</td>"
            f"<td>{esc(_fmt_short(s.until))}</td>"
            f"<td>{esc(_change_text(s.live, cluster, s.per_node))}</td>"
            f"<td>{esc(_change_text(s.restart, cluster, s.per_node))}</td>"
            f"<td>{esc(batches)}</td>"
            f'<td class="num">{esc(fmt_num(s.expected.benefit_ops))}</td>'
            f'<td class="num">{esc(fmt_num(s.expected.cost_ops))}</td>'
            f'<td class="num">{esc(fmt_num(s.expected.net_ops))}{_gain_note(s.expected)}</td>'
            f"<td>{_badge(css, label)}{err}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>step</th><th>due (UTC)</th><th>until (UTC)</th><th>live changes</th>"
        "<th>restart changes</th><th>batches</th><th>benefit ops</th><th>cost ops</th>"
        "<th>net ops</th><th>outcome</th></tr>"
    )
    return f'<table class="data" data-table="plan">{head}{"".join(rows)}</table>'


def _gain_note(e: Any) -> str:
    """What a step gains and its P(gain > cost), when the plan records them (else '')."""
    parts = []
    if e.gains == "throughput":
        parts.append("throughput at saturation")
    elif e.gains == "headroom" and e.utilisation_before is not None:
        parts.append(f"headroom: utilisation {e.utilisation_before:.0%} → "
                     f"{e.utilisation_after:.0%}")
    if e.p_gain is not None:
        parts.append(f"P(gain > cost) {e.p_gain:.2f}")
    return f'<div class="note">{esc("; ".join(parts))}</div>' if parts else ""


def _report_hosts(inputs: ReportInputs) -> list[str]:
    """Every host the plan or the state names, in order of appearance."""
    hosts: list[str] = []
    for s in inputs.plan.steps:
        for b in s.batches:
            hosts += [h for h in b if h not in hosts]
        hosts += [h for h in s.per_node if h not in hosts]
    for entry in ((inputs.state or {}).get("steps") or {}).values():
        if isinstance(entry, Mapping):
            named = [*(entry.get("nodes") or {}), *_verified(entry)]
            hosts += [h for h in dict.fromkeys(named) if h not in hosts]
    return hosts or ["all nodes"]


def node_changes(plan: Any, host: str) -> list[dict[str, Any]]:
    """Per step, what changes on ``host`` (a key back to its default reads ``default``).

    A node runs the cluster's configuration (``current_config`` and the targets so far)
    with the overrides of the current step's ``per_node`` only: an override holds for its
    own step, and the next step returns the node to the cluster value unless it overrides
    again (:func:`planner.executor.rollout.compose`, as the plan validator reads it).
    """
    from planner.executor.rollout import compose

    before: Mapping[str, Any] = plan.current_config
    changes: list[dict[str, Any]] = []
    for i in range(len(plan.steps)):
        after = compose(plan, through=i, hosts=[host]).nodes[host]
        keys = sorted(set(before) | set(after), key=str)
        changes.append({k: after.get(k, "default") for k in keys if before.get(k) != after.get(k)})
        before = after
    return changes


def _node_outcome(css: str, label: str, entry: Mapping[str, Any], host: str) -> tuple[str, str]:
    """A step's outcome on one node: a failed or interrupted step applied on some nodes."""
    if css == "failed":
        done = host in (entry.get("nodes") or {}) or host in _verified(entry)
        return ("applied", "applied") if done else ("not-applied", "not applied")
    if css == "interrupted":
        if host in _verified(entry):
            return "applied", "applied"
        return "interrupted", "not applied (interrupted)"
    return css, label


def _steps_header(plan: Any, what: str) -> str:
    """The header of a configuration-over-time table: ``what``, then one column per step."""
    return f"<tr><th>{esc(what)}</th><th>before the plan</th>" + "".join(
        f"<th>after {esc(s.id)}</th>" for s in plan.steps
    ) + "</tr>"


def node_config_table(inputs: ReportInputs) -> str:
    plan = inputs.plan
    if plan is None:
        return _no_data(inputs.notes.get("plan") or "no plan given")
    header = _steps_header(plan, "node")
    outcomes = [step_outcome(plan, inputs.state, s.id) for s in plan.steps]
    entries = [_step_entry(inputs.state, s.id) for s in plan.steps]
    before = f"<td>{esc(_config_text(plan.current_config))}</td>"
    rows = []
    for h in _report_hosts(inputs):
        cells = [f"<td><b>{esc(h)}</b></td>", before]
        for changed, (css, label), entry in zip(node_changes(plan, h), outcomes, entries,
                                                strict=True):
            css, label = _node_outcome(css, label, entry, h)
            diff = _config_text(changed) if changed else "no change"
            cells.append(f"<td>{_badge(css, label)} {esc(diff)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="data" data-table="nodes">{header}{"".join(rows)}</table>'


def plan_tables(plan: Any) -> list[str]:
    """Every table the plan names, in order of appearance: those it was planned for per
    table (``provenance.per_table.tables``), then each step's ``tables`` and ``per_table``."""
    planned = plan.provenance.get("per_table")
    planned = planned.get("tables") if isinstance(planned, Mapping) else None
    names = [str(t) for t in planned] if isinstance(planned, Mapping) else []
    for s in plan.steps:
        names += [*s.tables, *s.per_table]
    return list(dict.fromkeys(names))


def table_configs(plan: Any, table: str) -> list[dict[str, Any]]:
    """Per step, the table-level values (``location: table``) ``table`` runs after it; a
    key no step or ``current_config`` sets is left out (it runs the default).

    The cluster-wide targets so far with the step's own ``per_table`` override for the
    table only: an override holds for its own step, and the next step returns the table to
    the cluster-wide value unless it overrides again (:func:`planner.executor.rollout.compose`).
    """
    from planner.executor.rollout import compose
    from planner.planning.per_table import table_keys

    keys = table_keys(plan.engine)
    configs = []
    for i in range(len(plan.steps)):
        composed = compose(plan, through=i, hosts=())
        values = {**composed.cluster, **composed.tables.get(table, {})}
        configs.append({k: values[k] for k in keys if k in values})
    return configs


def _table_reads(plan: Any, step_id: str, entry: Mapping[str, Any], table: str
                 ) -> dict[str, str | None]:
    """Host -> the compaction class each node verified for the step read back for ``table``
    (None: the node has no such table); nodes that did not read its compaction are left out."""
    verified = _verified(entry)
    reads: dict[str, str | None] = {}
    for h in _verified_hosts(plan, step_id, entry):
        readback = verified[h].get("readback")
        tables = readback.get("tables") if isinstance(readback, Mapping) else None
        if not isinstance(tables, Mapping) or table not in tables:
            continue
        if tables[table] is None:
            reads[h] = None
            continue
        # cassandra_settings_readback writes "<class>; caching k=v, ..." per table, the
        # class only when the rollout set the compaction.
        parts = [p for p in str(tables[table]).split("; ") if not p.startswith("caching ")]
        if parts:
            reads[h] = parts[0]
    return reads


def _table_outcome(plan: Any, state: Mapping[str, Any] | None, step_id: str, table: str,
                   want: Any) -> tuple[str, str, str]:
    """``(css, label, note)`` of a table after a step: the step's outcome
    (:func:`step_outcome`) unless the nodes verified for it read the table's compaction
    back. Read back as ``want`` on every one of them: the table runs it, even in a failed or
    interrupted step (the tables change once, before any restart, as a node recorded in a
    failed step is applied in the per-node section). Any other reading: "read back differs",
    the note naming the nodes and what they read."""
    from planner.executor.drift import same

    css, label = step_outcome(plan, state, step_id)
    reads = _table_reads(plan, step_id, _step_entry(state, step_id), table)
    if not reads or want is None:
        return css, label, ""
    differ = {h: got for h, got in reads.items() if not same(plan.engine, want, got)}
    if differ:
        return "not-applied", "read back differs", ", ".join(
            f"{h} reads {'(absent)' if got is None else got}" for h, got in differ.items())
    return "applied", "applied, read back", ""


def _table_cell(plan: Any, state: Mapping[str, Any] | None, step: Any, table: str,
                values: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """One table's cell after ``step``: its mark, its table-level values ``values`` (each
    key of ``defaults``; ``default`` for one nothing sets) and whether they are its own
    (the step's ``per_table``)."""
    # The read-back holds each table's compaction class only: that is what is compared.
    want = {**defaults, **values}.get("compaction")
    css, label, differs = _table_outcome(plan, state, step.id, table, want)
    text = _config_text({k: values.get(k, "default") for k in defaults})
    notes = [differs] if differs else []
    if table in step.per_table:
        notes.append("its own value (per_table)")
    return (f"<td>{_badge(css, label)} {esc(text)}"
            + "".join(f'<div class="note">{esc(n)}</div>' for n in notes) + "</td>")


def table_config_table(inputs: ReportInputs) -> str:
    """Per table the plan names, the table-level values it runs after each step, marked
    from the rollout state and what the nodes read back."""
    from planner.model.spaces import get_space
    from planner.planning.per_table import table_keys

    plan = inputs.plan
    if plan is None:
        return _no_data(inputs.notes.get("plan") or "no plan given")
    tables = plan_tables(plan)
    if not tables:
        return _no_data("the plan names no table (no step has tables or per_table)")
    space_defaults = get_space(plan.engine).defaults()
    defaults = {k: space_defaults[k] for k in table_keys(plan.engine)}
    current = {k: plan.current_config.get(k, "default") for k in defaults}
    before = f"<td>{esc(_config_text(current))}</td>"
    rows = []
    for t in tables:
        cells = [f"<td><b>{esc(t)}</b></td>", before]
        cells += [_table_cell(plan, inputs.state, s, t, values, defaults)
                  for s, values in zip(plan.steps, table_configs(plan, t), strict=True)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="data" data-table="tables">{_steps_header(plan, "table")}'
            f'{"".join(rows)}</table>')


#: What ``cassandra_settings_readback`` reads back, by source: readback key -> header.
READBACK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("running", "running (system_views.settings)"),
    ("file", "cassandra.yaml"),
    ("tables", "tables (system_schema.tables)"),
    ("heap_mb", "heap (MB)"),
)


_NUM = ' class="num"'


def _readback_cell(key: str, readback: Mapping[str, Any]) -> str:
    """One source's values, escaped: ``key=value`` per line (``table: class`` for tables)."""
    if key not in readback:
        return "—"
    value = readback[key]
    if value is None:
        return "not read"
    if not isinstance(value, Mapping):
        return esc(_plain(value))
    sep = ": " if key == "tables" else "="
    lines = [
        f"{k}{sep}{'(absent)' if v is None else _plain(v)}"
        for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
    ]
    return "<br>".join(esc(line) for line in lines) or "—"


def _fmt_stamp(value: Any) -> str:
    """An ISO 8601 time from the state file, as UTC (as given when it is not one)."""
    try:
        stamp = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value) if value else "—"
    return _fmt_dt(stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC))


def _readback_rows(plan: Any, step_id: str, entry: Mapping[str, Any], outcome: tuple[str, str]
                   ) -> list[str]:
    """One row per node verified for the step; one row saying why when none was."""
    hosts = _verified_hosts(plan, step_id, entry)
    step_cell = f"<b>{esc(step_id)}</b> {_badge(*outcome)}"
    if not hosts:
        css = outcome[0]
        why = {
            "applied": "not read back",
            "failed": "no node read back",
            "superseded": f"not read back: rolled out with {entry.get('superseded_by')}",
        }.get(css)
        if why is None:
            return []
        return [f'<tr data-step="{esc(step_id)}"><td>{step_cell}</td>'
                f'<td colspan="{len(READBACK_COLUMNS) + 2}" class="muted">{esc(why)}</td></tr>']
    rows = []
    verified = _verified(entry)
    for i, h in enumerate(hosts):
        readback = verified[h].get("readback")
        readback = readback if isinstance(readback, Mapping) else {}
        first = f'<td rowspan="{len(hosts)}">{step_cell}</td>' if i == 0 else ""
        cells = "".join(
            f"<td{_NUM if key == 'heap_mb' else ''}>{_readback_cell(key, readback)}</td>"
            for key, _ in READBACK_COLUMNS
        )
        rows.append(
            f'<tr data-step="{esc(step_id)}" data-node="{esc(h)}">{first}'
            f"<td><b>{esc(h)}</b></td><td>{esc(_fmt_stamp(verified[h].get('verified_at')))}</td>"
            f"{cells}</tr>"
        )
    return rows


def readback_table(inputs: ReportInputs) -> str:
    """Per step, what each node read back after its change (``verified`` in the state)."""
    state = inputs.state
    if not state:
        return _no_data(inputs.notes.get("state") or "no rollout state file")
    steps = state.get("steps") or {}
    rows: list[str] = []
    for sid in _state_order(inputs.plan, steps):
        entry = _step_entry(state, sid)
        rows += _readback_rows(inputs.plan, sid, entry, step_outcome(inputs.plan, state, sid))
    if not rows:
        return _no_data("no step has been rolled out yet")
    head = "<tr><th>step</th><th>node</th><th>verified at</th>" + "".join(
        f"<th>{esc(title)}</th>" for _, title in READBACK_COLUMNS
    ) + "</tr>"
    return f'<table class="data" data-table="readback">{head}{"".join(rows)}</table>'


def model_track_table(inputs: ReportInputs) -> str:
    """The model against production, window by window: what was served and predicted, the
    error, and the recent error the autopilot's restart hold reads."""
    from planner.autopilot.learning import ERROR_THRESHOLD, recent_error

    track = inputs.model_track
    if not track:
        return _no_data(inputs.notes.get("model track") or "no window judged yet")
    rows = []
    for i, j in enumerate(track):
        recent = recent_error(track[: i + 1]) or 0.0
        p99 = ", ".join(f"{c} {v:.1f}" for c, v in sorted((j.get("p99_ms") or {}).items()))
        rows.append(
            f"<tr><td><b>{esc(j['step_id'])}</b></td>"
            f"<td>{esc(_fmt_dt(datetime.fromtimestamp(float(j['end']), UTC)))}</td>"
            f"<td>{esc(j['kind'])}</td>"
            f'<td class="num">{esc(fmt_num(float(j["served_ops_per_s"])))}</td>'
            f'<td class="num">{esc(fmt_num(float(j["predicted_ops_per_s"])))}</td>'
            f'<td class="num">{float(j["error"]):+.1%}</td>'
            f'<td class="num">{recent:.1%}{" (hold)" if recent > ERROR_THRESHOLD else ""}</td>'
            f"<td>{esc(p99 or '—')}</td></tr>"
        )
    head = ("<tr><th>step</th><th>window end</th><th>kind</th><th>served ops/s</th>"
            "<th>predicted ops/s</th><th>error</th><th>recent error</th><th>p99 ms</th></tr>")
    return f'<table class="data" data-table="model-track">{head}{"".join(rows)}</table>'


def _eo_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    out = []
    def num(v: float | None) -> str:
        return esc(fmt_num(v)) if v is not None else "—"

    def pct(v: float | None) -> str:
        return f"{v:+.1%}" if v is not None else "—"

    for r in rows:
        e, o, m = r["expected"], r["observed"], r.get("model")
        gain = r.get("gain") or {}
        err = f"{(o - e) / e:+.1%}" if e and o is not None else "—"
        m = m or {}
        model_err = f"{m['error']:+.1%}" if "error" in m else "—"
        bounds = int(m.get("lower_bounds", 0))
        judged = f"{int(m.get('windows', 0))} capacity, {bounds} lower bound" if m else "none"
        out.append(
            f"<tr><td><b>{esc(r['step'])}</b></td>"
            f'<td class="num">{num(e)}</td><td class="num">{num(o)}</td>'
            f'<td class="num">{esc(err)}</td><td class="num">{num(r["net"])}</td>'
            f"<td>{esc(judged)}</td>"
            f'<td class="num">{num(m.get("predicted"))}</td>'
            f'<td class="num">{num(m.get("served"))}</td>'
            f'<td class="num">{model_err}</td>'
            f'<td class="num">{pct(gain.get("expected"))}</td>'
            f'<td class="num">{pct(gain.get("observed"))}</td></tr>'
        )
    head = (
        "<tr><th>configuration in force</th><th>expected ops/s</th><th>observed ops/s</th>"
        "<th>observed vs expected</th><th>expected net gain (ops)</th>"
        "<th>windows judged</th><th>model: predicted capacity</th>"
        "<th>measured capacity (saturated windows)</th><th>model error</th>"
        "<th>step's capacity gain: expected</th><th>observed</th></tr>"
    )
    return f'<table class="data" data-table="expected-observed">{head}{"".join(out)}</table>'


# ------------------------------------------------------------------------- page
def _cards(inputs: ReportInputs) -> str:
    cards = []
    hist, fc, plan, state = inputs.history, inputs.forecast, inputs.plan, inputs.state
    if hist is not None:
        span = float(hist.timestamps[-1] - hist.timestamps[0])
        cards.append(("workload", f"{fmt_num(float(np.mean(hist.load)))} ops/s",
                      f"mean of {len(hist)} points over {span / 3600:.3g} h"))
    else:
        cards.append(("workload", "—", "no history"))
    if fc is not None:
        cards.append(("forecast", fc.model, f"{fc.horizon} steps of {fc.step_seconds:g} s"))
    else:
        cards.append(("forecast", "—", "no forecast"))
    if plan is not None:
        cards.append(("plan", f"{len(plan.steps)} step(s)",
                      f"expected net {fmt_num(plan.expected_net_ops)} ops"))
    else:
        cards.append(("plan", "—", "no plan"))
    advice = plan.provenance.get("capacity_advice") if plan is not None else None
    if isinstance(advice, dict):  # plans made since issue 43
        if advice.get("action", "none") == "none":
            cards.append(("capacity", f"{advice.get('nodes_now')} nodes",
                          "no change of node count advised"))
        else:
            by = (f" by {_fmt_dt(datetime.fromisoformat(advice['by']))}"
                  if advice.get("by") else "")
            cards.append(("capacity", str(advice["action"]),
                          f"{advice.get('nodes_now')} → {advice.get('nodes_advised')} nodes{by}"))
    split = plan.provenance.get("memory_split") if plan is not None else None
    if isinstance(split, dict):  # a plan made with --memory-curve
        predicted = split.get("predicted") or {}
        hit_now, hit = predicted.get("hit_ratio_now"), predicted.get("hit_ratio", 0.0)
        cards.append(("memory split", f"{split.get('parameter')} {split.get('advised')}",
                      f"now {split.get('now') or 'no limit'}; predicted read hits "
                      + (f"{hit_now:.0%} → " if hit_now is not None else "") + f"{hit:.0%}"))
    steps = (state or {}).get("steps") or {}
    kinds = [step_outcome(plan, state, sid)[0] for sid in steps]
    applied = kinds.count("applied")
    detail = ", ".join(
        [f"{kinds.count('failed')} failed"]
        + [f"{kinds.count(k)} {k}" for k in ("superseded", "interrupted") if k in kinds]
    ) if steps else "none recorded"
    cards.append(("rollouts", f"{applied} applied", detail))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div>'
        f'<div class="s">{esc(s)}</div></div>'
        for k, v, s in cards
    ) + "</div>"


def render(inputs: ReportInputs) -> str:
    """The whole HTML page."""
    plan = inputs.plan
    engine = (
        plan.engine if plan is not None else
        inputs.history.engine if inputs.history is not None else
        inputs.forecast.engine if inputs.forecast is not None else None
    )
    cluster = plan.cluster if plan is not None else inputs.sources.get("cluster")
    subtitle = " · ".join(
        x for x in (
            f"engine {engine}" if engine else None,
            f"cluster {cluster}" if cluster else None,
            f"generated {_fmt_dt(inputs.generated_at or datetime.now(UTC))}",
        ) if x
    )
    eo_svg, eo_rows = expected_vs_observed(inputs)
    sources = "".join(
        f"<li>{esc(k)}: <code>{esc(v)}</code></li>"
        for k, v in inputs.sources.items() if k != "cluster"
    )
    sections = [
        ("workload", "Workload and forecast",
         "Observed operations per second, the forecast with its interval band, and the plan's "
         "steps where they fall due.", workload_chart(inputs)),
        ("mix", "Operation mix", "Share of each operation class, observed then forecast.",
         mix_chart(inputs)),
        ("plan", "Plan steps", "What each step changes, in which batches, what it was expected to "
         "gain and cost, and how its rollout ended.", plan_table(inputs)),
        ("nodes", "Configuration per node",
         "The configuration each node runs after each step (changes only), from the plan and "
         "the rollout state.", node_config_table(inputs)),
        ("tables", "Configuration per table",
         "The table-level settings (those kept in the tables' schema, such as compaction) "
         "each table the plan names runs after each step: its own per_table value in that "
         "step, else the cluster-wide one; marked from "
         "the rollout state and the compaction class the verified nodes read back "
         "(system_schema.tables).", table_config_table(inputs)),
        ("readback", "Read back",
         "What each node reported after its change, read from the node itself: running "
         "values (system_views.settings), its cassandra.yaml, the tables' compaction class "
         "(system_schema.tables) and the JVM's heap.", readback_table(inputs)),
        ("expected", "Expected vs observed",
         "Per configuration the plan keeps in force (current: before its first step, or "
         "all along when no step pays): the mean load the forecast expected and the load "
         "observed then; and the capacity the model predicted against what the windows "
         "judged in that time served.", eo_svg + _eo_table(eo_rows)),
        ("model", "The model against production",
         "Each window after a step, judged against the performance model: saturated, it "
         "measured the capacity; below saturation, a lower bound. Restart steps are held "
         "while the recent error is above the threshold.", model_track_table(inputs)),
        ("rollouts", "Rollout timelines",
         "Per node: drain, stop, start and sync durations from the rollout state; batches "
         "back to back, ending when the step finished.", rollout_timelines(inputs)),
    ]
    body = "".join(
        f'<section id="{sid}"><h2>{esc(title)}</h2><p class="lead">{esc(lead)}</p>{content}'
        "</section>"
        for sid, title, lead, content in sections
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(inputs.title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{esc(inputs.title)}</h1><p>{esc(subtitle)}</p></header>"
        f"<main>{_cards(inputs)}{body}"
        f"<footer><p>Inputs:</p><ul>{sources or '<li>none</li>'}</ul>"
        "<p>Made by <code>kairos report</code>; self-contained (inline SVG, no external "
        "assets).</p></footer></main></body></html>\n"
    )


# ------------------------------------------------------------------ loading
def build_inputs(
    *,
    store: str | Path | None = None,
    engine: str | None = None,
    cluster: str | None = None,
    trace: str | Path | None = None,
    since: float | None = None,
    step_seconds: float | None = None,
    plan: str | Path | None = None,
    forecast: str | Path | None = None,
    state: str | Path | None = None,
    title: str | None = None,
    model_track: str | Path | None = None,
) -> ReportInputs:
    """Load what is given; record why anything is missing instead of failing.

    A plan or forecast file that is given but invalid is an error (a person asked for it);
    a store without enough samples only leaves the history empty, with the reason.
    """
    from planner.executor.rollout import load_state, state_path_for
    from planner.forecast.forecaster import load_forecast
    from planner.plan import load_plan
    from planner.workload.series import load_trace

    inputs = ReportInputs()
    if plan is not None:
        inputs.plan = load_plan(plan)
        inputs.sources["plan"] = str(plan)
        engine = engine or inputs.plan.engine
        cluster = cluster or inputs.plan.cluster
        state_file = Path(state) if state is not None else state_path_for(plan)
        if state_file.exists():
            inputs.state = load_state(state_file)
            inputs.sources["rollout state"] = str(state_file)
        else:
            inputs.notes["state"] = f"no rollout state file {state_file}"
    else:
        inputs.notes["plan"] = "no plan given (--plan)"
        if state is not None:
            inputs.state = load_state(state)
            inputs.sources["rollout state"] = str(state)
        else:
            inputs.notes["state"] = "no plan or rollout state given"
    inputs.forecast = _given(inputs, "forecast", forecast, load_forecast, "")
    if inputs.forecast is not None:
        engine = engine or inputs.forecast.engine
    if trace is not None:
        inputs.history = load_trace(trace)
        inputs.sources["workload"] = str(trace)
    elif store is not None or engine is not None:
        cluster = _store_history(inputs, store, engine, cluster, since, step_seconds)
    else:
        inputs.notes["history"] = "no store or trace given"
    from planner.autopilot.learning import load_track

    inputs.model_track = _given(inputs, "model track", model_track, load_track,
                                "no model track given (--model-track)") or ()
    if cluster:
        inputs.sources["cluster"] = cluster
    parts = [p for p in (cluster, engine) if p]
    inputs.title = title or ("Kairos report — " + " ".join(parts) if parts else "Kairos report")
    return inputs


def _given(inputs: ReportInputs, name: str, path: str | Path | None,
           load: Callable[[str | Path], Any], missing: str) -> Any:
    """``load(path)`` with the path listed among the sources; None, noting ``missing`` (when
    there is something to say), when no path was given."""
    if path is None:
        if missing:
            inputs.notes[name] = missing
        return None
    inputs.sources[name] = str(path)
    return load(path)


def _store_history(
    inputs: ReportInputs,
    store: str | Path | None,
    engine: str | None,
    cluster: str | None,
    since: float | None,
    step_seconds: float | None,
) -> str | None:
    """Read the cluster's series from the store into ``inputs``; return the cluster read.

    The cluster defaults to the store's only cluster of ``engine``; what is missing is noted.
    """
    from planner.errors import KairosError
    from planner.workload.store import Store

    if engine is None:
        inputs.notes["history"] = "no engine to read from the store (give --engine or --plan)"
        return cluster
    with Store(store) as st:
        if cluster is None:
            names = [c for e, c in st.clusters() if e == engine]
            cluster = names[0] if len(names) == 1 else None
        if cluster is None:
            inputs.notes["history"] = (
                f"the store {st.path} holds no single {engine} cluster; give --cluster"
            )
            return None
        try:
            inputs.history = st.cluster_series(
                engine, cluster, since=since, step_seconds=step_seconds
            )
            inputs.sources["workload"] = f"{st.path} ({engine}/{cluster})"
        except KairosError as exc:
            inputs.notes["history"] = str(exc)
    return cluster


def write_report(inputs: ReportInputs, out: str | Path) -> Path:
    """Render and write the page; return its path."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(inputs), encoding="utf-8")
    return path
