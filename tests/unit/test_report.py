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
from planner.forecast import Forecast, save_forecast
from planner.plan import plan_from_dict, save_plan
from planner.report import ReportInputs, build_inputs, render
from planner.store import CounterSample, Store
from planner.workload import WorkloadSeries, save_trace

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
               "nodes": {"cass1": {"drain": 4.8, "stop": 1.4, "start": 8.9, "sync": 10.2}}},
    }}


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
    return {"trace": trace, "forecast": fc, "plan": Path(plan), "state": state}


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
    inputs = build_inputs(trace=files["trace"], plan=files["plan"], forecast=files["forecast"])
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
    assert tables == {"plan", "nodes", "expected-observed"}
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
    from planner.report import expected_vs_observed

    _, rows = expected_vs_observed(inputs)
    s1, s2 = rows
    hist, fc = inputs.history, inputs.forecast
    lo, hi = inputs.plan.steps[0].due.timestamp(), inputs.plan.steps[0].until.timestamp()
    sel = (hist.timestamps >= lo) & (hist.timestamps < hi)
    assert s1["observed"] == pytest.approx(float(np.mean(hist.load[sel])))
    sel = (fc.timestamps >= lo) & (fc.timestamps < hi)
    assert s1["expected"] == pytest.approx(float(np.mean(fc.load_mean[sel])))
    # s2 runs past the end of the history: only its first part is observed
    assert s2["observed"] is not None and s2["expected"] is not None


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
        assert page.count("No data") == 6
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
    assert (tmp_path / "empty.html").read_text().count("No data") == 6


def test_html_escapes_untrusted_text() -> None:
    inputs = ReportInputs(title="<script>alert(1)</script>")
    page = render(inputs)
    assert "<script>" not in page and "&lt;script&gt;" in page
