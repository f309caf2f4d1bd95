"""`kairos drift` (issue 40 part 4): each node's running values against the applied record.

The expected side is a real plan and state file (tests/unit/fixtures/metrics: step s1,
LeveledCompactionStrategy, recorded applied); the observed side is captured-looking
output of ``system_views.settings``, ``system_views.caches`` and ``CONFIG GET``
(tests/unit/fixtures/drift), read with the same readers as the rollout's read-back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.executor import drift, rollout
from planner.plan import load_plan

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
PLAN = FIXTURES / "metrics" / "lab-cassandra-20261127T152000Z.yml"
NODES = ["cass1", "cass2"]

CacheRow = namedtuple("CacheRow", "name capacity_bytes")


class CachesSession:
    """A session answering ``system_views.caches`` from a fixture's capacities."""

    def __init__(self, capacities: dict[str, int]) -> None:
        self.capacities = capacities

    def execute(self, query: str) -> list[CacheRow]:
        assert "system_views.caches" in query
        return [CacheRow(n, c) for n, c in self.capacities.items()]


def captured(node: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "drift" / f"cassandra_{node}.json").read_text())


def cassandra_observed(keys: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for node in NODES:
        doc = captured(node)
        sizes = drift.kairos_settings.read_cache_sizes(CachesSession(doc["caches"]))
        out[node] = {"running": drift.cassandra_running(keys, doc["settings"], sizes),
                     "tables": doc["tables"]}
    return out


def cassandra_expected() -> drift.Expected:
    plan = load_plan(PLAN)
    return drift.expected_values(plan, rollout.load_state(f"{PLAN}.state.json"), NODES)


def test_the_expected_values_are_the_applied_composition_as_the_templates_write_it() -> None:
    expected = cassandra_expected()
    assert expected.applied_through == "s1"
    assert expected.tables == {"compaction": "LeveledCompactionStrategy"}
    cass1 = expected.settings["cass1"]
    assert cass1["compaction_throughput"] == "64MiB/s" and cass1["concurrent_compactors"] == 2
    assert cass1["memtable"]["configurations"]["default"] == {"inherits": "skiplist"}


def test_a_node_that_runs_what_was_applied_shows_no_drift() -> None:
    expected = cassandra_expected()
    findings = drift.compare(expected, cassandra_observed(sorted(expected.settings["cass1"])))
    cass1 = [f for f in findings if f.node == "cass1"]
    # 11 settings (memtable as its map, 0.33 against 0.33000001, false against False) and
    # the table's compaction
    assert len(cass1) == 12
    assert not drift.drifted(cass1)


def test_values_changed_by_hand_are_drift_with_both_values() -> None:
    expected = cassandra_expected()
    findings = drift.compare(expected, cassandra_observed(sorted(expected.settings["cass1"])))
    got = {(f.node, f.parameter, f.source): (f.expected, f.observed)
           for f in drift.drifted(findings)}
    assert got == {
        ("cass2", "compaction_throughput", "running"): ("64MiB/s", "128MiB/s"),
        ("cass2", "concurrent_compactors", "running"): (2, "4"),
        ("cass2", "key_cache_size", "running"): ("51MiB", "100MiB"),
        ("cass2", "compaction", "table kairos_demo.usertable"):
            ("LeveledCompactionStrategy", "SizeTieredCompactionStrategy"),
    }


@pytest.mark.parametrize(("expected", "running", "same"), [
    ("64MiB/s", "64MiB/s", True),
    ("64MiB/s", "65536KiB/s", True),  # a rate compares as its size per second
    ("64MiB/s", "128MiB/s", False),
    (2, "2", True),
    (0.33, "0.33000001", True),  # float32 on the node
    (False, "false", True),
    ("51MiB", "53477376B", True),
    ("51MiB", None, False),  # no row: not running it
])
def test_cassandra_values_compare_as_the_read_back_compares_them(
    expected: Any, running: Any, same: bool
) -> None:
    assert drift.same("cassandra", expected, running) is same


def test_a_node_not_read_is_drift_on_every_value_never_agreement() -> None:
    expected = cassandra_expected()
    observed = cassandra_observed(sorted(expected.settings["cass1"]))
    del observed["cass2"]
    lost = [f for f in drift.compare(expected, observed) if f.node == "cass2"]
    assert lost and all(f.drifted and f.observed is None for f in lost)


def test_the_rendered_file_is_compared_when_a_reader_supplied_it() -> None:
    expected = cassandra_expected()
    observed = cassandra_observed(sorted(expected.settings["cass1"]))
    recorded = json.loads(Path(f"{PLAN}.state.json").read_text())
    observed["cass1"]["file"] = {
        **recorded["steps"]["s1"]["verified"]["cass1"]["readback"]["file"],
        "concurrent_reads": 64}
    bad = [f for f in drift.drifted(drift.compare(expected, observed)) if f.node == "cass1"]
    assert [(f.parameter, f.source, f.observed) for f in bad] == [("concurrent_reads", "file", 64)]


# ------------------------------------------------------------------------------ Redis
def redis_plan(tmp_path: Path) -> Path:
    doc = yaml.safe_load(PLAN.read_text())
    doc["engine"] = "redis"
    doc["current_config"] = {"maxmemory": "256mb", "maxmemory-policy": "noeviction", "hz": 10,
                             "appendfsync": "everysec", "io-threads": 1,
                             "io-threads-do-reads": False}
    step = doc["steps"][0]
    step.update(target={"hz": 50}, live=["hz"], restart=[], batches=[])
    step.pop("tables", None)
    path = tmp_path / "lab-redis.yml"
    path.write_text(yaml.safe_dump(doc))
    (tmp_path / "lab-redis.yml.state.json").write_text(json.dumps(
        {"version": 1, "steps": {"s1": {"status": "applied", "finished_at": "2026-11-27T15:39Z"}}}))
    return path


def redis_observed() -> dict[str, dict[str, Any]]:
    out = {}
    for port in (7001, 7002):
        doc = json.loads((FIXTURES / "drift" / f"redis_{port}.json").read_text())
        out[doc["node"]] = {"running": drift.redis_running(doc["config_get"])}
    return out


def test_redis_config_get_replies_against_the_applied_directives(tmp_path: Path) -> None:
    plan_path = redis_plan(tmp_path)
    expected = drift.expected_values(load_plan(plan_path),
                                     rollout.load_state(f"{plan_path}.state.json"),
                                     ["redis1", "redis2"])
    findings = drift.compare(expected, redis_observed())
    # 256mb = 268435456 bytes, no = False: redis1 agrees on all six
    assert [f for f in findings if f.node == "redis1" and f.drifted] == []
    assert {(f.parameter, f.expected, f.observed) for f in drift.drifted(findings)} == {
        ("hz", "50", "10"), ("maxmemory-policy", "noeviction", "allkeys-lru")}


def test_config_get_of_an_unknown_directive_is_none() -> None:
    assert drift.redis_running({"lazyfree-lazy-x": []}) == {"lazyfree-lazy-x": None}
    assert not drift.same("redis", "yes", None)


# --------------------------------------------------------------------- the command
def kairos(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", "drift", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


def observed_file(tmp_path: Path) -> Path:
    expected = cassandra_expected()
    path = tmp_path / "observed.json"
    path.write_text(json.dumps({"nodes": cassandra_observed(sorted(expected.settings["cass1"]))}))
    return path


def test_kairos_drift_prints_a_table_and_exits_1_on_drift(tmp_path: Path) -> None:
    report = tmp_path / "drift-lab-cassandra.json"
    run = kairos("--plan", str(PLAN), "--observed", str(observed_file(tmp_path)),
                 "--report", str(report))
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("cassandra cluster 'lab': 24 values compared on 2 nodes")
    assert lines[1].split() == ["node", "parameter", "source", "expected", "running"]
    assert "cass2  concurrent_compactors  running" in run.stdout
    assert lines[-1] == "drift: 4 value(s) on 1 node(s)"
    written = json.loads(report.read_text())
    assert written["nodes"]["cass1"] == {"compared": 12, "drifted": 0, "error": None}
    assert len(written["drift"]) == 4


def test_kairos_drift_json_and_no_drift_exits_0(tmp_path: Path) -> None:
    path = observed_file(tmp_path)
    doc = json.loads(path.read_text())
    doc["nodes"] = {"cass1": doc["nodes"]["cass1"]}
    path.write_text(json.dumps(doc))
    run = kairos("--plan", str(PLAN), "--observed", str(path), "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout)
    assert report["drift"] == [] and report["applied_through"] == "s1"


def test_kairos_drift_without_hosts_or_observed_is_refused() -> None:
    run = kairos("--plan", str(PLAN))
    assert run.returncode == 2
    assert "give --hosts" in run.stderr


def test_kairos_metrics_exports_the_last_report_per_node(tmp_path: Path) -> None:
    # The report `kairos drift --report` leaves in the state directory, as the metrics read
    # it: cass2's four hand-made changes, cass1 clean, cass3 unreadable (every value drift).
    from datetime import UTC, datetime

    from planner.report.metrics import Sources, collect, drift_report_path
    from tests.unit.test_metrics import export

    expected = cassandra_expected()
    observed = cassandra_observed(sorted(expected.settings["cass1"]))
    expected3 = drift.expected_values(load_plan(PLAN), rollout.load_state(f"{PLAN}.state.json"),
                                      [*NODES, "cass3"])
    findings = drift.compare(expected3, observed)  # cass3 not read
    report = drift.report(expected3, findings, cluster="lab", now="2026-11-28T00:10:00+00:00",
                          errors={"cass3": "NoHostAvailable: 127.0.0.3:9042 refused"})
    path = drift_report_path(tmp_path, "lab", "cassandra")
    path.write_text(json.dumps(report))
    got = export(tmp_path, engines=("cassandra",))
    lc = 'cluster="lab",engine="cassandra"'
    assert got[f'kairos_drift_values{{{lc},node="cass1"}}'] == 0
    assert got[f'kairos_drift_values{{{lc},node="cass2"}}'] == 4
    unread = report["nodes"]["cass3"]["compared"]
    assert unread > 0 and got[f'kairos_drift_values{{{lc},node="cass3"}}'] == unread
    assert got[f'kairos_drift_node_unread{{{lc},node="cass3"}}'] == 1
    assert got[f'kairos_drift_node_unread{{{lc},node="cass2"}}'] == 0
    assert got[f"kairos_drift_checked_timestamp_seconds{{{lc}}}"] == datetime(
        2026, 11, 28, 0, 10, tzinfo=UTC).timestamp()
    path.write_text(json.dumps({**report, "version": 99}))
    bad = collect(Sources(state_dir=tmp_path, cluster="lab", engines=("cassandra",)))
    assert any("drift" in w and "version 99" in w for w in bad.warnings)


# ------------------------------------------------------ the plan in force (--adopted)
def adopted_dir(tmp_path: Path, plan: Path | None) -> Path:
    """An autopilot state directory whose lab/redis state names ``plan`` (none: no file)."""
    from datetime import UTC, datetime

    from planner.autopilot import decisions

    state_dir = tmp_path / "autopilot"
    state_dir.mkdir()
    if plan is not None:
        decisions.adopt_plan(decisions.state_path(state_dir, "lab", "redis"), plan=str(plan),
                             forecast=None, now=datetime.now(UTC), reasons=["test"])
    return state_dir


def redis_observed_file(tmp_path: Path) -> Path:
    path = tmp_path / "observed-redis.json"
    path.write_text(json.dumps({"nodes": redis_observed()}))
    return path


def drift_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``kairos drift`` in this process (the CLI's own error handling): rc, out, err."""
    from planner.cli import main

    rc = main(["drift", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("state", [None, {"paused": True}, {"plan": None}])
def test_adopted_with_no_plan_in_force_says_so_compares_nothing_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], state: dict[str, Any] | None
) -> None:
    state_dir = adopted_dir(tmp_path, None)
    if state is not None:
        (state_dir / "lab-redis-autopilot.json").write_text(json.dumps(state))
    report = state_dir / "drift-lab-redis.json"
    rc, out, err = drift_main(capsys, "--adopted", str(state_dir), "--cluster", "lab",
                              "--engine", "redis", "--observed", str(redis_observed_file(tmp_path)),
                              "--report", str(report))
    assert (rc, err) == (0, "")
    assert out.splitlines() == [f"drift: no plan in force for lab redis (none adopted in "
                                f"{state_dir}): nothing compared"]
    assert not report.exists()


def test_adopted_compares_the_plan_in_force_and_reports_the_drifted_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = redis_plan(tmp_path)
    state_dir = adopted_dir(tmp_path, plan)
    report = state_dir / "drift-lab-redis.json"
    rc, out, err = drift_main(capsys, "--adopted", str(state_dir), "--cluster", "lab",
                              "--engine", "redis", "--observed", str(redis_observed_file(tmp_path)),
                              "--report", str(report))
    assert rc == 1, err
    lines = out.splitlines()
    assert lines[0] == f"plan in force: {plan}"
    assert lines[1].startswith("redis cluster 'lab': 12 values compared on 2 nodes against the "
                               "steps applied through s1")
    assert ["redis2", "hz", "running", "50", "10", "DRIFT"] in [x.split() for x in lines]
    assert lines[-1] == "drift: 2 value(s) on 1 node(s)"
    written = json.loads(report.read_text())
    assert written["plan"] == str(plan) and written["applied_through"] == "s1"
    assert {(d["node"], d["parameter"], d["expected"], d["observed"])
            for d in written["drift"]} == {("redis2", "hz", "50", "10"),
                                           ("redis2", "maxmemory-policy", "noeviction",
                                            "allkeys-lru")}
    assert not [p.name for p in state_dir.iterdir() if p.name.endswith(".tmp")]
    # --json: the report on stdout, as with --plan
    rc, out, _ = drift_main(capsys, "--adopted", str(state_dir), "--cluster", "lab",
                            "--engine", "redis", "--observed", str(redis_observed_file(tmp_path)),
                            "--json")
    assert rc == 1 and json.loads(out)["plan"] == str(plan)


def test_adopted_with_no_plan_in_force_and_json_prints_nothing_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = adopted_dir(tmp_path, None)
    rc, out, err = drift_main(capsys, "--adopted", str(state_dir), "--cluster", "lab",
                              "--engine", "redis", "--hosts", "redis1=127.0.0.1:1", "--json")
    assert (rc, out) == (0, "")
    assert "no plan in force for lab redis" in err


def _bad_state(tmp_path: Path, case: str) -> tuple[list[str], str]:
    """Arguments of a bad ``--adopted`` and what the error must name."""
    state_dir = adopted_dir(tmp_path, None)
    state = state_dir / "lab-redis-autopilot.json"
    base = ["--adopted", str(state_dir), "--cluster", "lab", "--engine", "redis"]
    if case == "missing dir":
        return ["--adopted", str(tmp_path / "nowhere"), "--cluster", "lab", "--engine",
                "redis"], f"{tmp_path / 'nowhere'}: no such directory"
    if case == "not JSON":
        state.write_text("{")
        return base, f"autopilot state {state}: not valid JSON"
    if case == "not an object":
        state.write_text("[]")
        return base, f"{state}: autopilot state must be a JSON object"
    if case == "plan not a path":
        state.write_text(json.dumps({"plan": 3}))
        return base, f"{state}: 'plan' must be the plan file's path, got int"
    if case == "plan gone":
        state.write_text(json.dumps({"plan": str(tmp_path / "gone.yml")}))
        return base, f"{state}: the adopted plan {tmp_path / 'gone.yml'} does not exist"
    if case == "another engine's plan":
        state.write_text(json.dumps({"plan": str(PLAN)}))
        return base, (f"{state}: the adopted plan {PLAN} is of cassandra cluster 'lab', "
                      "not redis cluster 'lab'")
    if case == "no engine":
        return base[:-2], "--adopted needs --cluster and --engine"
    assert case == "cluster with --plan"
    return ["--plan", str(PLAN), "--cluster", "lab"], "--cluster and --engine go with --adopted"


@pytest.mark.parametrize("case", ["missing dir", "not JSON", "not an object", "plan not a path",
                                  "plan gone", "another engine's plan", "no engine",
                                  "cluster with --plan"])
def test_bad_adopted_inputs_exit_2_naming_the_file_and_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    argv, named = _bad_state(tmp_path, case)
    rc, out, err = drift_main(capsys, *argv, "--observed", str(redis_observed_file(tmp_path)))
    assert rc == 2 and out == ""
    assert err.startswith("kairos drift: error: ") and named in err, err


def test_a_report_that_cannot_be_written_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "absent" / "drift-lab-redis.json"
    rc, _, err = drift_main(capsys, "--adopted", str(adopted_dir(tmp_path, redis_plan(tmp_path))),
                            "--cluster", "lab", "--engine", "redis",
                            "--observed", str(redis_observed_file(tmp_path)),
                            "--report", str(report))
    assert rc == 2
    assert f"--report {report}: directory {report.parent} does not exist" in err
