"""The payoff experiment's CI run on the lab: ``bench/payoff.py --short``.

Two runs of half a minute (the ``default`` policy, then ``kairos``, one repetition) under a
closed-loop load whose mix shifts once. The model is written here: 64 concurrent reads serve
35 % more than 32 for every mix, a live change (nodetool, no restart), so the Kairos plan
switches at once and the executor carries it out while the load runs. It checks the plumbing,
not the figures: results.json, the series and the page are written, every run completed with
a series and no failed or lost operation, the change was made and read back from the nodes,
and what the nodes ran before is back on every node at the end. About 3 minutes.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from planner.model.performance import Feature, PerformanceModel, save_model

from .conftest import REPO, PlaybookRun, assert_no_secret, cql_node_cluster

pytestmark = [pytest.mark.lab, pytest.mark.cassandra, pytest.mark.slow]

ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def live_effect_model(path: Path) -> None:
    """1,000 ops/s for every class at 32 concurrent reads, x1.35 at 64 (a live setting)."""
    save_model(PerformanceModel(
        engine="cassandra", name="payoff-ci", version=1, model_type="fitted",
        features=(Feature(param="concurrent_reads", kind="linear", ref=32.0, scale=32.0),),
        coef=np.array([[math.log(1000.0), 0.3]] * 4), cov=np.eye(8) * 1e-6, sigma=0.02,
        provenance="tests/integration/test_payoff.py: a synthetic live effect"), path)


def running_value(address: str, name: str) -> str:
    """``name`` as the node at ``address`` runs it (system_views.settings)."""
    cluster = cql_node_cluster(address)
    try:
        row = cluster.connect().execute(
            "SELECT value FROM system_views.settings WHERE name = %s", (name,)).one()
        return str(row.value)
    finally:
        cluster.shutdown()


def test_short_payoff_run_records_every_run_and_makes_the_planned_change(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    model = tmp_path / "model.json"
    live_effect_model(model)
    out = tmp_path / "payoff"
    # What the nodes run before the experiment (32, the lab's, unless a test before left
    # another): the experiment puts it back at the end.
    before = {a: running_value(a, "concurrent_reads") for a in ADDRESSES}
    assert len(set(before.values())) == 1, f"the nodes run different concurrent_reads: {before}"
    began = time.monotonic()
    # The CQL login (KAIROS_CASSANDRA_*) travels in the environment the lab fixture set.
    run = subprocess.run(
        [sys.executable, "bench/payoff.py", "--short", "--minutes", "0.5", "--model", str(model),
         "--keyspace", "kairos_payoff_ci", "--out", str(out)],
        cwd=REPO, env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                           ANSIBLE_FORCE_COLOR="0"),
        capture_output=True, text=True, timeout=900, check=False)
    print(f"\nbench/payoff.py --short rc={run.returncode} in {time.monotonic() - began:.0f} s"
          f"\n{run.stdout}\n{run.stderr[-3000:]}")
    assert run.returncode == 0, run.stderr[-4000:]

    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    assert [(r["policy"], r["repetition"]) for r in runs] == [("default", 1), ("kairos", 1)]
    for r in runs:
        assert r["status"] == "ok", r["error"]
        assert len(r["series"]) == 6 and r["served_ops"] > 0  # 30 s in 5-s steps
        assert sum(p["ops_per_s"] > 0 for p in r["series"]) >= 5
        assert r["failed_ops"] == 0 and r["lost_acknowledged_writes"] == 0 and r["verified"]
        assert r["p99_ms"] is not None

    default, kairos = runs
    assert default["changes_made"] == 0 and default["planned_changes"] == []
    assert default["readback"]["read"]["concurrent_reads"] == 32
    # Kairos' plan: 64 at once, live; carried out while the load ran, read back at the end
    assert [c["settings"] for c in kairos["planned_changes"]] == [{"concurrent_reads": 64}]
    change = kairos["changes"][0]
    assert change["ok"] and change["restart"] is False and change["started"] < 10
    assert kairos["changes_made"] == 1 and kairos["restarts"] == 0
    assert kairos["readback"]["read"]["concurrent_reads"] == 64
    assert kairos["readback"]["mismatches"] == {}

    # the experiment put back on every node what it ran before (the kairos run left 64)
    ran = int(before[ADDRESSES[0]])
    assert results["initial_config"]["concurrent_reads"] == ran
    assert results.get("restored", {}) == ({} if ran == 64 else {"concurrent_reads": ran})
    assert {a: running_value(a, "concurrent_reads") for a in ADDRESSES} == before

    assert "| kairos | 1 |" in run.stdout and "kairos vs default" in run.stdout
    assert (out / "series.csv").read_text().count("\n") == 1 + 2 * 6
    assert (out / "payoff.html").read_text().count("<polyline") == 2
    for text, where in ((run.stdout + run.stderr, "the bench's output"),
                        ((out / "results.json").read_text(), "results.json"),
                        ((out / "executor.log").read_text(), "executor.log")):
        assert_no_secret(text, where)
