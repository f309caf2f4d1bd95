"""The small CI calibration on the real lab: 3 configurations x 2 mixes, live changes only.

`kairos calibrate` measures the running configuration and two other values of
concurrent_reads (nodetool setconcurrency through playbooks/change_settings.yml, no
restart), each under a read-heavy and a write-heavy mix, then the three again in reverse
order (``--sweeps 2``: every configuration's runs centred on the same moment), fits the
model and reports its leave-one-configuration-out error and the drift between the sweeps.
The second sweep ends on the running configuration: nothing is left to restore. About 3
minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from planner.model.performance import load_model

from .conftest import REPO, PlaybookRun, assert_no_secret, redis_conf, redis_running

pytestmark = pytest.mark.lab

HOSTS = ("cass1", "cass2", "cass3")
LAB = REPO / ".lab" / "cassandra"


def yaml_setting(host: str, key: str) -> object:
    return yaml.safe_load((LAB / host / "conf" / "cassandra.yaml").read_text()).get(key)


def calibrate(directory: Path) -> subprocess.CompletedProcess[str]:
    # Credentials (KAIROS_CASSANDRA_USERNAME/PASSWORD) pass through the environment.
    return subprocess.run(
        [str(Path(sys.executable).parent / "kairos"), "calibrate",
         "--dir", str(directory),
         # three levels no other lab test sets: the grid holds >= 3 configurations
         "--param", "concurrent_reads=24,72,96",
         "--mix", "read-heavy:read=0.9,update=0.1",
         "--mix", "write-heavy:read=0.1,update=0.9",
         # the lab is warm from the tests before: short warm-ups (the first configuration's
         # is --restart-warmup's) and short windows: this checks the plumbing, not the figures
         "--runs", "3", "--sweeps", "2", "--warmup", "2", "--warmup-max", "0",
         "--restart-warmup", "2", "--seconds", "3",
         "--keys", "5000", "--concurrency", "32", "--rollout-cl", "ONE"],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )


@pytest.mark.cassandra
def test_small_calibration_produces_a_model_with_a_held_out_error(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    before = {h: yaml_setting(h, "concurrent_reads") for h in HOSTS}
    began = time.monotonic()
    run = calibrate(tmp_path / "cal")
    print(f"\nkairos calibrate rc={run.returncode} in "
          f"{time.monotonic() - began:.0f} s\n{run.stdout}")
    assert run.returncode == 0, run.stderr[-4000:]

    state = json.loads((tmp_path / "cal" / "state.json").read_text())
    # 3 configurations x 2 mixes x 2 sweeps, the second backward; no separate recheck
    assert len(state["design"]) == 3 and len(state["measurements"]) == 12
    assert state["design"][0] == state["original"]  # the running configuration first
    visits = [(m["config"], m["sweep"]) for m in state["measurements"][::2]]
    assert visits == [(c, 1) for c in state["design"]] + [
        (c, 2) for c in reversed(state["design"])]
    assert not [m for m in state["measurements"] if m.get("phase") == "recheck"]
    assert state["applied"] == state["original"]
    obs = pd.read_csv(tmp_path / "cal" / "observations.csv")
    assert len(obs) == 12 and (obs["ops_per_s"] > 0).all()
    assert obs["concurrent_reads"].nunique() == 3
    # every window read the nodes' caches (reads served from memtables ask no cache, so a
    # window may have no key-cache request; the row cache is off on the lab)
    caches = [m["caches"] for m in state["measurements"]]
    assert all(c["keys"]["capacity_mib"] > 0 and c["keys"]["requests"] >= 0
               and (c["keys"]["hit_ratio"] is None) == (c["keys"]["requests"] == 0)
               and c["rows"] == {"requests": 0, "hit_ratio": None, "entries": 0,
                                 "capacity_mib": 0.0} for c in caches), caches
    assert {"key_cache_hit_ratio", "row_cache_hit_ratio"} <= set(obs.columns)
    assert all(m["failed"] == 0 for m in state["measurements"]), state["measurements"]

    report = json.loads((tmp_path / "cal" / "report.json").read_text())
    assert report["failed_operations"] == 0
    assert isinstance(report["fit"]["heldout_mape"], float)
    assert report["fit"]["validation"] == "leave-one-configuration-out"
    # every pair measured twice (one run per sweep): spread and drift are reported
    assert isinstance(report["fit"]["repeat_spread"], float)
    assert report["sweep_drift"]["pairs"] == 6
    for best in report["best_by_mix"].values():
        assert best["original_drift"] == pytest.approx(
            best["original_last_sweep_ops_per_s"] / best["original_first_sweep_ops_per_s"]
            - 1, abs=1e-3)
    assert "from the first sweep to the last" in run.stdout
    model = load_model(tmp_path / "cal" / "model.json")
    assert model.model_type == "fitted" and "kairos calibrate" in model.provenance
    assert model.info["calibration"]["environment"]["cluster_version"].startswith("5.0")

    # the login travelled in the environment: no password in any output or file
    assert_no_secret(run.stdout + run.stderr, "kairos calibrate's output")
    for name in ("state.json", "report.json", "model.json", "executor.log"):
        assert_no_secret((tmp_path / "cal" / name).read_text(), name)

    # the running value is back on every node
    assert {h: yaml_setting(h, "concurrent_reads") for h in HOSTS} == before

    # the same command again resumes: the budget is spent, nothing is measured twice
    again = calibrate(tmp_path / "cal")
    assert again.returncode == 0, again.stderr[-4000:]
    assert "run budget reached (3 configurations); 2 sweeps measured" in again.stderr
    state2 = json.loads((tmp_path / "cal" / "state.json").read_text())
    assert state2["measurements"] == state["measurements"]


@pytest.mark.redis
def test_redis_calibration_measures_shapes_on_their_own_keys_and_restores(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    # Two shapes, two other values of a live directive no other lab test sets: each configuration
    # goes through playbooks/change_settings_redis.yml (CONFIG SET, into the conf file, read
    # back), each shape is measured on its own keys, the original comes back and is
    # measured again. Short windows: the plumbing, not the figures.
    before = redis_running("hash-max-listpack-entries")
    assert len(set(before.values())) == 1, before
    others = [v for v in ("200", "300", "400") if v != before[7001]][:2]
    began = time.monotonic()
    run = subprocess.run(
        [str(Path(sys.executable).parent / "kairos"), "calibrate", "--engine", "redis",
         "--dir", str(tmp_path / "cal"), "--param", f"hash-max-listpack-entries={','.join(others)}",
         # two data sets, and mixes over the same two classes (the model's identifiability)
         "--shape", "hash-read:keys=300,read=0.9,write=0.1",
         "--shape", "cache-hot:keys=3000,read=0.5,write=0.5",
         "--runs", "3", "--warmup", "2", "--warmup-max", "0", "--restart-warmup", "3",
         "--seconds", "4", "--concurrency", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    print(f"\nkairos calibrate --engine redis rc={run.returncode} in "
          f"{time.monotonic() - began:.0f} s\n{run.stdout}\n{run.stderr[-3000:]}")
    assert run.returncode == 0, run.stderr[-4000:]

    state = json.loads((tmp_path / "cal" / "state.json").read_text())
    assert state["engine"] == "redis" and list(state["mixes"]) == ["hash-read", "cache-hot"]
    levels = [int(v) for v in (before[7001], *others)]
    assert state["design"][0]["hash-max-listpack-entries"] == levels[0]
    assert sorted(c["hash-max-listpack-entries"] for c in state["design"]) == sorted(levels)
    # 3 configurations x 2 shapes, then the original measured again after the restore
    measured = [(m["config"]["hash-max-listpack-entries"], m["mix"], m.get("phase"))
                for m in state["measurements"]]
    assert sorted(measured[:6], key=str) == sorted(
        [(v, s, None) for v in levels for s in ("hash-read", "cache-hot")], key=str)
    assert [m[2] for m in measured[6:]] == ["recheck", "recheck"]
    for m in state["measurements"]:
        assert m["failed"] == 0 and m["ops_per_s"] > 0, m
        assert 0 < m["hit_ratio"] <= 1 and isinstance(m["evicted_keys"], int), m
    # each shape ran on its own keys: the other's were removed before it was warmed up
    assert "calibrate: removed the" in run.stderr and "key(s) of hash-read before cache-hot" \
        in run.stderr
    obs = pd.read_csv(tmp_path / "cal" / "observations.csv")
    assert len(obs) == 8 and obs["hit_ratio"].between(0, 1).all()
    assert set(obs.columns) >= {"read", "write", "other", "hash-max-listpack-entries"}
    model = load_model(tmp_path / "cal" / "model.json")
    assert model.engine == "redis" and "Redis 7" in model.provenance
    assert model.info["calibration"]["environment"]["cluster_version"].startswith("7.")
    log = (tmp_path / "cal" / "executor.log").read_text()
    assert "change_settings_redis.yml" in log and "applied and read back on every node" in log
    for text, where in ((run.stdout + run.stderr, "the output"), (log, "executor.log")):
        assert_no_secret(text, where)
    # the original runs again on every node and is in every conf file
    assert redis_running("hash-max-listpack-entries") == before
    assert redis_conf("hash-max-listpack-entries") == before
