"""kairos report: HTML structure from synthetic inputs, and robustness when inputs are missing."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planner.cli import main
from planner.forecast.forecaster import Forecast, save_forecast
from planner.plan import plan_from_dict, save_plan
from planner.report.page import ReportInputs, build_inputs, render
from planner.workload.series import WorkloadSeries, save_trace
from planner.workload.store import CounterSample, Store

T0 = 1795348800.0  # 2026-11-21T12:00:00Z
STEP = 120.0
HOSTS = ["cass1", "cass2", "cass3"]


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat()


def synthetic_history(n: int = 180, seed: int = 3) -> WorkloadSeries:
    """6 h of a diurnal-ish load whose read share drifts down (writes ramp up)."""
    rng = np.random.default_rng(seed)
    t = T0 + STEP * np.arange(n)
    phase = np.arange(n) / n
    load = 4000 + 1500 * np.sin(2 * np.pi * phase * 1.5) + rng.normal(0, 120, n)
    read = np.clip(0.75 - 0.45 * phase + rng.normal(0, 0.02, n), 0.05, 0.9)
    scan = np.full(n, 0.05)
    update = 1 - read - scan
    return WorkloadSeries("cassandra", t, np.maximum(load, 0), {
        "read": read, "update": update * 0.8, "insert": update * 0.2, "scan": scan,
    }, step_seconds=STEP)


def synthetic_forecast(history: WorkloadSeries, origin: int = 120, horizon: int = 120) -> Forecast:
    t = history.timestamps[origin - 1] + STEP * np.arange(1, horizon + 1)
    base = float(np.mean(history.load[origin - 20:origin]))
    mean = base + 900 * np.sin(np.linspace(0, 2.5, horizon))
    width = 300 + 6 * np.arange(horizon)
    read = np.linspace(0.45, 0.25, horizon)
    upd = (1 - read - 0.05) * 0.8
    ins = (1 - read - 0.05) * 0.2
    mix = {"read": read, "update": upd, "insert": ins, "scan": np.full(horizon, 0.05)}
    lo = {c: np.clip(v - 0.1, 0, 1) for c, v in mix.items()}
    hi = {c: np.clip(v + 0.1, 0, 1) for c, v in mix.items()}
    return Forecast("cassandra", t, mean, np.maximum(mean - width, 0), mean + width, mix, lo, hi,
                    level=0.9, model="ets", step_seconds=STEP, season_length=None)


def synthetic_plan_dict() -> dict[str, Any]:
    start = T0 + 120 * STEP
    return {
        "schema_version": 1, "kind": "kairos-plan", "cluster": "lab", "engine": "cassandra",
        "created_at": _iso(start),
        "horizon": {"start": _iso(start), "step_seconds": STEP, "steps": 120},
        "provenance": {"forecast": {"model": "ets"}, "optimiser": {"method": "ga", "seed": 7}},
        "availability": {"consistency_level": "QUORUM", "tolerated_failures": 0,
                         "aggressive": False},
        "current_config": {"concurrent_writes": 32, "compaction": "SizeTieredCompactionStrategy"},
        "steps": [
            {"id": "s1", "due": _iso(start + 15 * STEP), "until": _iso(start + 50 * STEP),
             "target": {"concurrent_writes": 64, "trickle_fsync": True},
             "live": ["concurrent_writes"], "restart": ["trickle_fsync"],
             "batches": [["cass1"], ["cass2"], ["cass3"]],
             "expected": {"benefit_ops": 2.4e6, "cost_ops": 3.1e5, "net_ops": 2.09e6}},
            {"id": "s2", "due": _iso(start + 50 * STEP), "until": _iso(start + 120 * STEP),
             "target": {"compaction": "LeveledCompactionStrategy", "heap_size": "2G"},
             "per_node": {"cass3": {"heap_size": "1536M"}},
             "tables": ["kairos_load.usertable"],
             "live": ["compaction"], "restart": ["heap_size"],
             "batches": [["cass1"], ["cass2"], ["cass3"]],
             "expected": {"benefit_ops": 1.1e6, "cost_ops": 2.5e5, "net_ops": 8.5e5}},
        ],
    }


def synthetic_state() -> dict[str, Any]:
    return {"version": 1, "steps": {
        "s1": {"attempts": 1, "status": "applied", "finished_at": _iso(T0 + 140 * STEP),
               "nodes": {h: {"drain": 5.1 + i, "stop": 1.5, "start": 8.2 + i * 0.7,
                             "sync": 9.0 - i, "total": 23.8 + 1.7 * i}
                         for i, h in enumerate(HOSTS)}},
        "s2": {"attempts": 2, "status": "failed", "finished_at": _iso(T0 + 175 * STEP),
               "error": "cass2: sync gate: peers did not see cass2 UN within 120 s",
               "nodes": {"cass1": {"drain": 4.8, "stop": 1.4, "start": 8.9, "sync": 10.2}},
               "fingerprint": "3f0c9a1d2b7e4c55",
               "verified": {"cass1": {
                   "verified_at": _iso(T0 + 170 * STEP), "readback": CASS1_READBACK,
                   "timings": {"drain": 4.8, "stop": 1.4, "start": 8.9, "sync": 10.2,
                               "total": 25.3}}}},
    }}


#: What cassandra_settings_readback returned for cass1 in s2 (every source present).
CASS1_READBACK = {
    "running": {"trickle_fsync": "true", "concurrent_writes": "64"},
    "file": {"concurrent_writes": 64, "trickle_fsync": True},
    "tables": {"kairos_load.usertable": "LeveledCompactionStrategy"},
    "heap_mb": 2048.0,
}


def write_synthetic_inputs(directory: Path) -> dict[str, Path]:
    """Trace, forecast, plan and state files for a full report; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    hist = synthetic_history()
    trace = directory / "trace.csv"
    save_trace(hist, trace)
    fc = directory / "forecast.json"
    save_forecast(synthetic_forecast(hist), fc)
    plan = save_plan(plan_from_dict(synthetic_plan_dict(), known_hosts=HOSTS),
                     directory / "plan.yml", known_hosts=HOSTS)
    state = directory / "plan.yml.state.json"
    state.write_text(json.dumps(synthetic_state(), indent=2))
    track = directory / "track.jsonl"  # two windows judged by the autopilot (learning.py)
    track.write_text("".join(json.dumps({
        "step_id": "s1", "plan": str(plan), "engine": "cassandra", "start": 1.7e9 + i * 300,
        "end": 1.7e9 + (i + 1) * 300, "kind": kind, "served_ops_per_s": served,
        "predicted_ops_per_s": 1000.0, "predicted_std": 50.0, "error": error,
        "utilisation": served / 1000.0, "mix": {"read": 0.9, "update": 0.1}, "config": {},
        "p99_ms": {"read": 4.2, "write": 2.0}}) + "\n"
        for i, (kind, served, error) in enumerate([("lower bound", 600.0, 0.0),
                                                   ("capacity", 900.0, -0.1)])))
    return {"trace": trace, "forecast": fc, "plan": Path(plan), "state": state, "track": track}


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def parse(page: str) -> list[tuple[str, dict[str, str | None]]]:
    c = _Collector()
    c.feed(page)
    return c.tags


def full_page(tmp_path: Path) -> str:
    files = write_synthetic_inputs(tmp_path)
    inputs = build_inputs(trace=files["trace"], plan=files["plan"], forecast=files["forecast"],
                          model_track=files["track"])
    return render(inputs)


def test_full_report_structure(tmp_path: Path) -> None:
    page = full_page(tmp_path)
    tags = parse(page)
    charts = {a["data-chart"]: a for t, a in tags if t == "svg"}
    assert set(charts) == {"workload", "mix", "expected-vs-observed", "rollout-s1", "rollout-s2"}
    assert int(charts["workload"]["data-points"] or 0) == 180 + 120
    series = [a.get("data-series") for t, a in tags if a.get("data-series")]
    assert {"observed", "forecast", "forecast-interval"} <= set(series)
    assert {"observed-read", "forecast-scan"} <= set(series)
    steps = [a["data-step"] for t, a in tags if t == "g" and a.get("data-step")]
    assert steps == ["s1", "s2"]
    # rollout bars: 3 nodes x 4 phases for s1, 4 phases for cass1 in s2
    bars = [a for t, a in tags if t == "rect" and a.get("data-node")]
    assert len(bars) == 12 + 4
    assert {a["data-series"] for a in bars} == {"drain", "stop", "start", "sync"}
    tables = {a["data-table"] for t, a in tags if t == "table"}
    assert tables == {"plan", "nodes", "tables", "readback", "expected-observed",
                      "model-track"}
    assert "No data" not in page
    # self-contained: no external references of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page and "@import" not in page and "url(" not in page


def test_node_configuration_follows_state(tmp_path: Path) -> None:
    page = full_page(tmp_path)
    nodes = page.split('data-table="nodes"')[1].split("</table>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", nodes)
    cass3 = next(r for r in rows if "<b>cass3</b>" in r)
    # s1 applied everywhere; s2 failed: cass1 has timings (applied), cass3 not
    assert cass3.count("status applied") == 1 and "not applied" in cass3
    assert "heap_size=1536M" in cass3  # the per-node override
    cass1 = next(r for r in rows if "<b>cass1</b>" in r)
    assert cass1.count("status applied") == 2 and "heap_size=2G" in cass1
    assert "sync gate: peers did not see cass2 UN" in page


def test_expected_vs_observed_values(tmp_path: Path) -> None:
    files = write_synthetic_inputs(tmp_path)
    inputs = build_inputs(trace=files["trace"], plan=files["plan"], forecast=files["forecast"])
    from planner.report.page import expected_vs_observed

    _, rows = expected_vs_observed(inputs)
    current, s1, s2 = rows  # s1 is due 15 steps into the horizon: the current config first
    hist, fc = inputs.history, inputs.forecast
    lo, hi = inputs.plan.horizon.start.timestamp(), inputs.plan.steps[0].due.timestamp()
    sel = (hist.timestamps >= lo) & (hist.timestamps < hi)
    assert current["step"] == "current" and current["net"] is None
    assert current["observed"] == pytest.approx(float(np.mean(hist.load[sel])))
    lo, hi = inputs.plan.steps[0].due.timestamp(), inputs.plan.steps[0].until.timestamp()
    sel = (hist.timestamps >= lo) & (hist.timestamps < hi)
    assert s1["observed"] == pytest.approx(float(np.mean(hist.load[sel])))
    sel = (fc.timestamps >= lo) & (fc.timestamps < hi)
    assert s1["expected"] == pytest.approx(float(np.mean(fc.load_mean[sel])))
    # s2 runs past the end of the history: only its first part is observed
    assert s2["observed"] is not None and s2["expected"] is not None


def test_a_plan_without_steps_compares_the_current_configuration_with_the_model(
    tmp_path: Path,
) -> None:
    """No step pays: the report still says what the forecast expected over the horizon,
    what was observed, and what the judged windows served against the model's capacity."""
    from planner.report.page import expected_vs_observed

    files = write_synthetic_inputs(tmp_path)
    doc = synthetic_plan_dict() | {"steps": []}
    plan = save_plan(plan_from_dict(doc, known_hosts=HOSTS), tmp_path / "stay.yml",
                     known_hosts=HOSTS)
    start = T0 + 120 * STEP
    track = tmp_path / "stay-track.jsonl"
    windows = [(plan, "lower bound", 200.0), (plan, "capacity", 1300.0),
               (plan, "capacity", 1500.0), (tmp_path / "other-plan.yml", "capacity", 9000.0)]
    track.write_text("".join(json.dumps({
        "step_id": "current", "plan": str(judged_under), "engine": "cassandra",
        "start": start + i * 600, "end": start + (i + 1) * 600, "kind": kind,
        "served_ops_per_s": served, "predicted_ops_per_s": 1000.0, "predicted_std": 50.0,
        "error": max(served / 1000.0 - 1, 0.0), "utilisation": served / 1000.0,
        "mix": {"read": 0.9}, "config": {}, "p99_ms": {}}) + "\n"
        for i, (judged_under, kind, served) in enumerate(windows)))
    inputs = build_inputs(trace=files["trace"], plan=plan, forecast=files["forecast"],
                          model_track=track)
    svg, (row,) = expected_vs_observed(inputs)
    assert row["step"] == "current" and row["expected"] is not None and svg.startswith("<svg")
    # The capacity windows of this plan only: the lower bound is counted, not averaged.
    assert row["model"] == {"served": 1400.0, "predicted": 1000.0, "windows": 2.0,
                            "error": pytest.approx(0.4), "lower_bounds": 1.0}
    table = render(inputs).split('data-table="expected-observed"', 1)[1].split("</table>")[0]
    assert "<b>current</b>" in table and "1.4k" in table and "+40.0%" in table
    assert "2 capacity, 1 lower bound" in table and "9k" not in table


@pytest.mark.parametrize("missing", ["trace", "forecast", "plan", "state", "all"])
def test_missing_inputs_say_no_data(tmp_path: Path, missing: str) -> None:
    files = write_synthetic_inputs(tmp_path)
    if missing in ("state", "all"):
        files["state"].unlink()
    kwargs: dict[str, Any] = {k: files[k] for k in ("trace", "forecast", "plan")}
    if missing == "all":
        kwargs = {}
    elif missing != "state":
        kwargs.pop(missing)
    page = render(build_inputs(**kwargs))
    parse(page)  # well-formed enough to parse
    assert "No data" in page
    charts = [a["data-chart"] for t, a in parse(page) if t == "svg"]
    if missing == "all":
        assert charts == []
        assert page.count("No data") == 9
    if missing == "plan":
        assert "no plan given" in page and "workload" in charts
    if missing == "state":
        assert "no rollout state file" in page and not any(c.startswith("rollout") for c in charts)
    if missing == "trace":
        assert "workload" in charts  # the forecast alone still plots


def test_report_from_store_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_synthetic_inputs(tmp_path)
    db = tmp_path / "k.db"
    with Store(db) as st:
        for r in range(30):
            t = T0 + 60 * r
            st.append_counters("cassandra", "lab", [
                CounterSample(h, "node", t + i * 0.05, {"read": 300 * 60 * r, "write": 100 * 60 * r,
                                                         "scan": 0}, started_at=1.0,
                              instance=f"{h}:1") for i, h in enumerate(HOSTS)], round_ts=t)
    out = tmp_path / "r" / "report.html"
    rc = main(["report", "--store", str(db), "--plan", str(files["plan"]), "--forecast",
               str(files["forecast"]), "--out", str(out)])
    assert rc == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    charts = [a["data-chart"] for t, a in parse(page) if t == "svg"]
    assert "workload" in charts
    assert "k.db (cassandra/lab)" in page


def test_cli_report_with_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KAIROS_STORE", raising=False)
    rc = main(["report", "--out", "empty.html"])
    assert rc == 0
    assert "missing" in capsys.readouterr().out
    assert (tmp_path / "empty.html").read_text().count("No data") == 9


def test_html_escapes_untrusted_text() -> None:
    inputs = ReportInputs(title="<script>alert(1)</script>")
    page = render(inputs)
    assert "<script>" not in page and "&lt;script&gt;" in page


def _table(page: str, name: str) -> str:
    return page.split(f'data-table="{name}"')[1].split("</table>")[0]


def _row(table: str, *needles: str) -> str:
    return next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table)
                if all(n in r for n in needles))


def test_readback_section(tmp_path: Path) -> None:
    page = full_page(tmp_path)
    table = _table(page, "readback")
    assert table.startswith(
        '><tr><th>step</th><th>node</th><th>verified at</th>'
        "<th>running (system_views.settings)</th><th>cassandra.yaml</th>"
        "<th>tables (system_schema.tables)</th><th>heap (MB)</th></tr>"
    )
    # s1 was recorded applied before read-backs were kept: it says so
    assert (
        '<tr data-step="s1"><td><b>s1</b> <span class="status applied">applied</span></td>'
        '<td colspan="6" class="muted">not read back</td></tr>'
    ) in table
    # s2 failed after cass1 was read back: cass1's row, every source, sorted by key
    assert (
        '<tr data-step="s2" data-node="cass1"><td rowspan="1"><b>s2</b> '
        '<span class="status failed">failed</span></td><td><b>cass1</b></td>'
        "<td>2026-11-22 17:40:00 UTC</td>"
        "<td>concurrent_writes=64<br>trickle_fsync=true</td>"
        "<td>concurrent_writes=64<br>trickle_fsync=true</td>"
        "<td>kairos_load.usertable: LeveledCompactionStrategy</td>"
        '<td class="num">2048</td></tr>'
    ) in table
    assert table.count("<tr") == 3  # header, s1, s2/cass1
    assert '<section id="readback"><h2>Read back</h2>' in page
    # the plan table names the nodes verified before the failure
    plan = _table(page, "plan")
    assert '<span class="status failed">failed</span><div class="err">' in plan
    assert '<div class="note">cass1 verified</div>' in plan


def test_readback_missing_sources_and_escaping() -> None:
    state = {"version": 1, "steps": {"x<1>": {"verified": {
        "cass<9>": {"verified_at": "2026-11-22T18:00:00+01:00",
                    "readback": {"running": {"a<b": "</td><script>"},
                                 "file": {"k": None}, "heap_mb": None}},
        "cass2": {"verified_at": "not a time", "readback": {}},
    }}}}
    page = render(ReportInputs(state=state))
    assert "<script>" not in page and "&lt;/td&gt;&lt;script&gt;" in page
    table = _table(page, "readback")
    badge = ('<span class="status interrupted">interrupted after cass2, cass&lt;9&gt; verified'
             "</span>")
    assert (
        f'<tr data-step="x&lt;1&gt;" data-node="cass2"><td rowspan="2"><b>x&lt;1&gt;</b> {badge}'
        "</td><td><b>cass2</b></td><td>not a time</td><td>—</td><td>—</td><td>—</td>"
        '<td class="num">—</td></tr>'
    ) in table
    assert (
        '<tr data-step="x&lt;1&gt;" data-node="cass&lt;9&gt;"><td><b>cass&lt;9&gt;</b></td>'
        "<td>2026-11-22 17:00:00 UTC</td><td>a&lt;b=&lt;/td&gt;&lt;script&gt;</td>"
        '<td>k=(absent)</td><td>—</td><td class="num">not read</td></tr>'
    ) in table


def test_readback_without_verified_steps() -> None:
    from planner.report.page import readback_table

    assert "No data: no rollout state file" in readback_table(ReportInputs())
    planned = ReportInputs(state={"version": 1, "steps": {"s1": {}}})
    assert "No data: no step has been rolled out yet" in readback_table(planned)
    failed = ReportInputs(state={"version": 1, "steps": {"s1": {"status": "failed"}}})
    assert '<td colspan="6" class="muted">no node read back</td>' in readback_table(failed)


def three_step_plan_dict() -> dict[str, Any]:
    """s1 as before; s2 gives cass3 a smaller heap; s3 changes compaction only.

    s3 does not override cass3, so cass3 goes back to the cluster's 2G heap in s3 (a
    per_node override holds for its own step only): s3 restarts for it.
    """
    doc = synthetic_plan_dict()
    start = T0 + 120 * STEP
    s1 = doc["steps"][0]
    s1["until"] = _iso(start + 30 * STEP)
    every = [["cass1"], ["cass2"], ["cass3"]]
    s2 = {"id": "s2", "due": _iso(start + 30 * STEP), "until": _iso(start + 70 * STEP),
          "target": {"heap_size": "2G"}, "per_node": {"cass3": {"heap_size": "1536M"}},
          "live": [], "restart": ["heap_size"], "batches": every,
          "expected": {"benefit_ops": 1e6, "cost_ops": 2e5, "net_ops": 8e5}}
    s3 = {"id": "s3", "due": _iso(start + 70 * STEP), "until": _iso(start + 120 * STEP),
          "target": {"compaction": "LeveledCompactionStrategy"},
          "tables": ["kairos_load.usertable"], "live": ["compaction"], "restart": ["heap_size"],
          "batches": every, "expected": {"benefit_ops": 1e6, "cost_ops": 2e5, "net_ops": 8e5}}
    doc["steps"] = [s1, s2, s3]
    return doc


def three_step_state() -> dict[str, Any]:
    """s1 superseded by s2 (applied and read back), s3 interrupted after cass1 and cass2."""
    def verified(i: int, readback: dict[str, Any]) -> dict[str, Any]:
        return {"verified_at": _iso(T0 + (150 + i) * STEP), "readback": readback,
                "timings": {"drain": 5.0, "stop": 1.0, "start": 9.0 + i, "sync": 4.0,
                            "total": 19.0 + i}}

    tables = {"tables": {"kairos_load.usertable": "LeveledCompactionStrategy"}}
    return {"version": 1, "steps": {
        "s1": {"status": "superseded", "superseded_by": "s2", "finished_at": _iso(T0 + 140 * STEP)},
        "s2": {"status": "applied", "attempts": 1, "finished_at": _iso(T0 + 140 * STEP),
               "fingerprint": "aa",
               "nodes": {h: verified(i, {})["timings"] for i, h in enumerate(HOSTS)},
               "verified": {h: verified(i, {"heap_mb": 1536.0 if h == "cass3" else 2048.0})
                            for i, h in enumerate(HOSTS)}},
        "s3": {"fingerprint": "bb",
               "verified": {"cass2": verified(11, tables), "cass1": verified(10, tables)}},
    }}


def three_step_page(tmp_path: Path) -> str:
    plan = save_plan(plan_from_dict(three_step_plan_dict(), known_hosts=HOSTS),
                     tmp_path / "plan3.yml", known_hosts=HOSTS)
    (tmp_path / "plan3.yml.state.json").write_text(json.dumps(three_step_state()))
    return render(build_inputs(plan=plan))


def test_superseded_and_interrupted_steps(tmp_path: Path) -> None:
    page = three_step_page(tmp_path)
    superseded = '<span class="status superseded">superseded by s2</span>'
    interrupted = '<span class="status interrupted">interrupted after cass1, cass2 verified</span>'
    plan = _table(page, "plan")
    assert f"<td>{superseded}</td></tr>" in plan
    assert '<td><span class="status applied">applied</span></td></tr>' in plan
    assert f"<td>{interrupted}</td></tr>" in plan
    nodes = _table(page, "nodes")
    for host in HOSTS:
        assert f"<td>{superseded} concurrent_writes=64, trickle_fsync=true</td>" in _row(
            nodes, f"<b>{host}</b>")
    # s3 on the verified nodes is applied; cass3 was not reached
    assert _row(nodes, "<b>cass1</b>").endswith(
        '<td><span class="status applied">applied</span> compaction=LeveledCompactionStrategy</td>')
    assert _row(nodes, "<b>cass3</b>").endswith(
        '<td><span class="status interrupted">not applied (interrupted)</span> '
        "compaction=LeveledCompactionStrategy, heap_size=2G</td>")
    # the read-back table: s1 points at s2; s2 all three nodes; s3 the two verified
    readback = _table(page, "readback")
    assert (f'<tr data-step="s1"><td><b>s1</b> {superseded}</td>'
            '<td colspan="6" class="muted">not read back: rolled out with s2</td></tr>'
            ) in readback
    assert '<td rowspan="3"><b>s2</b> <span class="status applied">applied</span></td>' in readback
    assert ('<tr data-step="s2" data-node="cass3"><td><b>cass3</b></td>'
            '<td>2026-11-22 17:04:00 UTC</td><td>—</td><td>—</td><td>—</td>'
            '<td class="num">1536</td></tr>') in readback
    assert (f'<tr data-step="s3" data-node="cass1"><td rowspan="2"><b>s3</b> {interrupted}</td>'
            "<td><b>cass1</b></td><td>2026-11-22 17:20:00 UTC</td><td>—</td><td>—</td>"
            '<td>kairos_load.usertable: LeveledCompactionStrategy</td><td class="num">—</td>'
            "</tr>") in readback
    # timelines: the superseded step has none; the interrupted one its verified nodes'
    assert f"<h3>Step s1 {superseded}</h3>" in page
    assert "Its changes were rolled out with s2." in page
    assert f"<h3>Step s3 {interrupted}</h3>" in page
    bars = [a for t, a in parse(page) if t == "rect" and a.get("data-node")]
    s3_bars = page.split('data-chart="rollout-s3"')[1].split("</svg>")[0]
    assert s3_bars.count('data-node="cass1"') == 4 and 'data-node="cass3"' not in s3_bars
    assert len(bars) == 3 * 4 + 2 * 4
    assert '<div class="v">1 applied</div><div class="s">0 failed, 1 superseded, 1 interrupted' \
        in page
    for section in ("plan", "nodes", "readback", "rollouts"):
        assert "No data" not in page.split(f'<section id="{section}">')[1].split("</section>")[0]


def test_per_node_override_holds_for_its_step_only(tmp_path: Path) -> None:
    from planner.executor.rollout import compose
    from planner.report.page import node_changes

    plan = plan_from_dict(three_step_plan_dict(), known_hosts=HOSTS)
    assert [c.get("heap_size") for c in node_changes(plan, "cass3")] == [None, "1536M", "2G"]
    assert [c.get("heap_size") for c in node_changes(plan, "cass1")] == [None, "2G", None]
    # the report's per-node configuration is the rollout's composition, step by step
    for host in HOSTS:
        config = dict(plan.current_config)
        for i, changed in enumerate(node_changes(plan, host)):
            config.update(changed)
            assert config == dict(compose(plan, through=i, hosts=HOSTS).nodes[host])
    nodes = _table(three_step_page(tmp_path), "nodes")
    cells = re.findall(r"<td>(.*?)</td>", _row(nodes, "<b>cass3</b>"))
    assert [c.split("</span> ")[-1] for c in cells[2:]] == [
        "concurrent_writes=64, trickle_fsync=true", "heap_size=1536M",
        "compaction=LeveledCompactionStrategy, heap_size=2G",
    ]


def test_node_change_back_to_default() -> None:
    from planner.report.page import node_changes

    doc = three_step_plan_dict()
    doc["current_config"] = {"concurrent_writes": 32}
    doc["steps"][1]["target"] = {"concurrent_writes": 48}
    doc["steps"][1]["per_node"] = {"cass3": {"heap_size": "1536M"}}
    doc["steps"][1]["live"] = ["concurrent_writes"]
    plan = plan_from_dict(doc, known_hosts=HOSTS)
    assert node_changes(plan, "cass3")[2] == {
        "compaction": "LeveledCompactionStrategy", "heap_size": "default"}


def test_a_steps_capacity_gain_expected_against_observed() -> None:
    """Expected: the plan's utilisation before over after; observed: the step's saturated
    windows against the last saturated window before it, whatever plan judged that one."""
    from planner.plan import Expected
    from planner.report.page import step_gain

    due = T0 + 1000.0
    track = [{"kind": "capacity", "end": due - 600, "served_ops_per_s": 500.0},
             {"kind": "lower bound", "end": due - 100, "served_ops_per_s": 50.0},
             {"kind": "capacity", "end": due - 60, "served_ops_per_s": 250.0},
             {"kind": "capacity", "end": due + 300, "served_ops_per_s": 330.0}]
    expected = Expected(benefit_ops=1.0, cost_ops=0.5, net_ops=0.5,
                        utilisation_before=1.2, utilisation_after=1.0)
    gain = step_gain(track, expected, {"served": 330.0, "windows": 1.0}, due)
    assert gain["expected"] == pytest.approx(0.2)
    assert gain["observed"] == pytest.approx(330.0 / 250.0 - 1)  # the lower bound is skipped
    assert gain["served_before"] == 250.0
    # Nothing judged after the step, no utilisation recorded: nothing is claimed.
    none = step_gain(track, Expected(1.0, 0.5, 0.5), None, due)
    assert none["expected"] is None and none["observed"] is None


def test_the_capacity_advice_shows_as_a_card() -> None:
    from planner.planning.capacity import advise

    def page(advice: Any) -> str:
        doc = synthetic_plan_dict()
        doc["provenance"]["capacity_advice"] = advice.to_dict()
        plan = plan_from_dict(doc, known_hosts=HOSTS)
        return render(ReportInputs(plan=plan))

    ts = T0 + 300.0 * np.arange(4)
    out = advise(timestamps=ts, load_upper=np.array([100.0, 900.0, 1500.0, 1500.0]),
                 best_capacity=np.full(4, 1000.0), nodes=3, min_nodes=3, step_seconds=300.0)
    html = page(out)
    assert ">capacity<" in html and ">scale-out<" in html
    assert "3 → 6 nodes by 2026-11-22 12:05:00 UTC" in html  # the step at 900 x 1.2
    flat = advise(timestamps=ts, load_upper=np.full(4, 100.0), best_capacity=np.full(4, 1e3),
                  nodes=3, min_nodes=3, step_seconds=300.0)
    assert "no change of node count advised" in page(flat)
    assert ">capacity<" not in render(ReportInputs(plan=plan_from_dict(
        synthetic_plan_dict(), known_hosts=HOSTS)))


def test_the_memory_split_advice_shows_as_a_card() -> None:
    from planner.model.memory_curve import advise, load_curve

    curve = load_curve(Path(__file__).parent / "fixtures" / "memory" /
                       "redis-maxmemory-curve.json")
    doc = synthetic_plan_dict()
    doc["provenance"]["memory_split"] = advise(curve, current={"maxmemory": "8mb"},
                                               mix={"read": 0.9, "write": 0.1})
    html = render(ReportInputs(plan=plan_from_dict(doc, known_hosts=HOSTS)))
    assert ">memory split<" in html and ">maxmemory 24mb<" in html
    assert "now 8mb; predicted read hits 80% → 99%" in html
    assert ">memory split<" not in render(ReportInputs(plan=plan_from_dict(
        synthetic_plan_dict(), known_hosts=HOSTS)))


STCS, LCS = "SizeTieredCompactionStrategy", "LeveledCompactionStrategy"


def per_table_plan_dict() -> dict[str, Any]:
    """Two tables, planned per table (the provenance names both), changed live only.

    s1 gives shop.profiles its own LCS (shop.events follows the cluster-wide STCS); s2 has
    no override, so shop.profiles returns to the cluster-wide value; s3 moves the cluster
    to LCS, both tables with it.
    """
    doc = synthetic_plan_dict()
    start = T0 + 120 * STEP
    doc["provenance"]["per_table"] = {"tables": {"shop.events": {"override": False},
                                                 "shop.profiles": {"override": True}}}
    ex = {"benefit_ops": 1e6, "cost_ops": 2e5, "net_ops": 8e5}
    doc["steps"] = [
        {"id": "s1", "due": _iso(start), "until": _iso(start + 40 * STEP),
         "target": {"concurrent_writes": 64}, "tables": ["shop.profiles"],
         "per_table": {"shop.profiles": {"compaction": LCS}},
         "live": ["compaction", "concurrent_writes"], "restart": [], "expected": ex},
        {"id": "s2", "due": _iso(start + 40 * STEP), "until": _iso(start + 80 * STEP),
         "target": {"concurrent_writes": 48}, "tables": ["shop.profiles"],
         "live": ["compaction", "concurrent_writes"], "restart": [], "expected": ex},
        {"id": "s3", "due": _iso(start + 80 * STEP), "until": _iso(start + 120 * STEP),
         "target": {"compaction": LCS}, "tables": ["shop.events", "shop.profiles"],
         "live": ["compaction"], "restart": [], "expected": ex},
    ]
    return doc


def per_table_state() -> dict[str, Any]:
    """s1 applied, shop.profiles read back as LCS on cass1 only (cass2 reads STCS, cass3 has
    no such table); s2 applied, shop.profiles read back STCS everywhere (with its caching on
    cass1); s3 failed before any node was verified."""
    def verified(profiles: str | None) -> dict[str, Any]:
        return {"verified_at": _iso(T0 + 150 * STEP),
                "readback": {"running": {"concurrent_writes": "64"},
                             "tables": {"shop.profiles": profiles}}}

    return {"version": 1, "steps": {
        "s1": {"status": "applied", "verified": {
            "cass1": verified(LCS), "cass2": verified(STCS), "cass3": verified(None)}},
        "s2": {"status": "applied", "verified": {
            "cass1": verified(f"{STCS}; caching keys=ALL, rows_per_partition=NONE"),
            "cass2": verified(STCS), "cass3": verified(STCS)}},
        "s3": {"status": "failed", "error": "cass1: cannot connect"},
    }}


def _table_cells(page: str, table: str) -> list[tuple[str, str, str]]:
    """``(mark, values, notes)`` of ``table``'s cells in the per-table section, one per
    step (after the table's name and the plan's current configuration)."""
    row = _row(_table(page, "tables"), f"<b>{table}</b>")
    cells = re.findall(r"<td>(.*?)</td>", row)[2:]
    out = []
    for cell in cells:
        mark = re.match(r'<span class="status ([^"]+)">(.*?)</span> ', cell)
        text = cell[mark.end():] if mark else cell
        values, *notes = text.split('<div class="note">')
        out.append((f"{mark[1]}: {mark[2]}" if mark else "", values,
                    "; ".join(n.removesuffix("</div>") for n in notes)))
    return out


def per_table_page(tmp_path: Path, state: dict[str, Any] | None) -> str:
    plan = save_plan(plan_from_dict(per_table_plan_dict(), known_hosts=HOSTS),
                     tmp_path / "tables.yml", known_hosts=HOSTS)
    if state is not None:
        (tmp_path / "tables.yml.state.json").write_text(json.dumps(state))
    return render(build_inputs(plan=plan))


def test_each_table_runs_its_own_override_for_its_step_only(tmp_path: Path) -> None:
    from planner.executor.rollout import compose
    from planner.report.page import plan_tables, table_configs

    plan = plan_from_dict(per_table_plan_dict(), known_hosts=HOSTS)
    assert plan_tables(plan) == ["shop.events", "shop.profiles"]
    assert [c["compaction"] for c in table_configs(plan, "shop.events")] == [STCS, STCS, LCS]
    assert [c["compaction"] for c in table_configs(plan, "shop.profiles")] == [LCS, STCS, LCS]
    # the report's per-table values are the rollout's composition, step by step
    for table in plan_tables(plan):
        for i, config in enumerate(table_configs(plan, table)):
            composed = compose(plan, through=i, hosts=HOSTS)
            assert config == {"compaction": {**composed.cluster,
                                              **composed.tables.get(table, {})}["compaction"]}
    page = per_table_page(tmp_path, None)  # no state: every step planned
    assert (page.index('<section id="nodes">') < page.index('<section id="tables">')
            < page.index('<section id="readback">'))
    assert _table(page, "tables").startswith(
        '><tr><th>table</th><th>before the plan</th><th>after s1</th><th>after s2</th>'
        "<th>after s3</th></tr>")
    before = f"compaction={STCS}"
    assert re.findall(r"<td>(.*?)</td>", _row(_table(page, "tables"), "<b>shop.events</b>"))[1] \
        == before
    assert _table_cells(page, "shop.events") == [
        ("planned: planned", before, ""), ("planned: planned", before, ""),
        ("planned: planned", f"compaction={LCS}", "")]
    assert _table_cells(page, "shop.profiles") == [
        ("planned: planned", f"compaction={LCS}", "its own value (per_table)"),
        ("planned: planned", before, ""),  # back to the cluster-wide value
        ("planned: planned", f"compaction={LCS}", "")]


def test_table_cells_are_marked_from_what_the_nodes_read_back(tmp_path: Path) -> None:
    page = per_table_page(tmp_path, per_table_state())
    # s1: shop.profiles read back on all three nodes, two of them not as its own LCS;
    # shop.events was not part of s1's rollout: the step's outcome. s2: read back STCS on
    # every node (the caching after the class is not the compaction).
    assert _table_cells(page, "shop.profiles")[:2] == [
        ("not-applied: read back differs", f"compaction={LCS}",
         f"cass2 reads {STCS}, cass3 reads (absent); its own value (per_table)"),
        ("applied: applied, read back", f"compaction={STCS}", "")]
    assert _table_cells(page, "shop.events")[:2] == [
        ("applied: applied", f"compaction={STCS}", ""),
        ("applied: applied", f"compaction={STCS}", "")]
    # all three nodes agreeing on s1 makes it read back
    state = per_table_state()
    for host in ("cass2", "cass3"):
        state["steps"]["s1"]["verified"][host]["readback"]["tables"]["shop.profiles"] = LCS
    assert _table_cells(per_table_page(tmp_path, state), "shop.profiles")[0] == (
        "applied: applied, read back", f"compaction={LCS}", "its own value (per_table)")


def test_a_failed_step_marks_its_tables_failed(tmp_path: Path) -> None:
    page = per_table_page(tmp_path, per_table_state())
    for table in ("shop.events", "shop.profiles"):
        assert _table_cells(page, table)[2] == ("failed: failed", f"compaction={LCS}", "")
    # A node verified before the failure read both tables back as LCS: the tables run it
    # (they change before any restart), as a failed step's recorded node is applied.
    state = per_table_state()
    state["steps"]["s3"]["verified"] = {"cass1": {"readback": {"tables": {
        "shop.events": LCS, "shop.profiles": LCS}}}}
    page = per_table_page(tmp_path, state)
    for table in ("shop.events", "shop.profiles"):
        assert _table_cells(page, table)[2] == (
            "applied: applied, read back", f"compaction={LCS}", "")


def test_a_plan_without_tables_says_no_data() -> None:
    doc = synthetic_plan_dict()
    s2 = doc["steps"][1]
    s2["target"].pop("compaction")
    del s2["tables"]
    s2["live"] = []
    page = render(ReportInputs(plan=plan_from_dict(doc, known_hosts=HOSTS)))
    section = page.split('<section id="tables">')[1].split("</section>")[0]
    assert "No data: the plan names no table (no step has tables or per_table)" in section
    assert 'data-table="tables"' not in page
