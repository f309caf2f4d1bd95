"""The load generator against the running lab: no failures, no lost acknowledged writes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from planner.loadgen import BackgroundLoad, LoadConfig, _RedisWorker, make_value, run_load

pytestmark = pytest.mark.lab

REDIS_NODES = tuple(f"127.0.0.1:{p}" for p in range(7001, 7007))
BIN = Path(sys.executable).parent


@pytest.mark.cassandra
def test_cassandra_quorum_background_load_loses_nothing(lab: object) -> None:
    progress: list[tuple[float, int, int]] = []
    with BackgroundLoad(
        engine="cassandra",
        contact_points=("127.0.0.1", "127.0.0.2", "127.0.0.3"),
        keyspace="kairos_loadtest",
        replication_factor=3,
        cl="QUORUM",
        mix={"read": 0.5, "update": 0.3, "insert": 0.1, "scan": 0.1},
        keys=2000,
        rate=300,
        concurrency=16,
        seed=1,
        max_seconds=60,
        on_progress=lambda *p: progress.append(p),
    ) as load:
        time.sleep(8)
        assert load.running()
    result = load.result()
    print(json.dumps(result.to_dict()))
    assert result.stopped_by == "stopped"
    assert 7 <= result.seconds < 30
    assert result.ops > 0 and all(result.ops_by_class[c] > 0 for c in ("read", "update"))
    assert result.failures == {}
    assert result.acknowledged_writes > 0 and result.verified_keys > 0
    assert result.verified and result.lost_acknowledged_writes == 0
    assert result.latency_ms["p50"] is not None
    assert progress and progress[-1][1] > 0


@pytest.mark.redis
def test_redis_cluster_load_with_wait_loses_nothing(lab: object) -> None:
    config = LoadConfig(
        engine="redis",
        contact_points=REDIS_NODES,
        prefix="kairos_loadtest",
        mix={"read": 0.5, "write": 0.45, "other": 0.05},
        keys=2000,
        rate=1000,
        concurrency=4,
        seconds=6,
        seed=2,
    )
    result = run_load(config)
    print(json.dumps(result.to_dict()))
    assert result.stopped_by == "duration"
    assert result.ops > 0 and result.failures == {}
    assert result.acknowledged_writes > 0 and result.unacknowledged_writes == 0
    assert result.verified and result.lost_acknowledged_writes == 0
    assert result.ops_per_s == pytest.approx(1000, rel=0.2)


@pytest.mark.redis
def test_redis_verification_detects_lost_and_stale_writes(lab: object) -> None:
    """The checker itself: roll a key back and delete another; both must be reported."""
    config = LoadConfig(engine="redis", contact_points=REDIS_NODES, prefix="kairos_loadtest_v",
                        keys=10, concurrency=1, seconds=1)
    worker = _RedisWorker(config, 0, "t3st", threading.Event())
    worker.connect()
    try:
        writer = worker.writers[0]
        for key in (1, 2, 3):
            seq, value = writer.next_value()
            assert worker.write(key, value), "WAIT 1 should see the replica"
            writer.acks.record(key, seq)
        worker.rc.set(worker.key_name(1), make_value("t3st", 0, 0, 100))  # rolled back
        worker.rc.delete(worker.key_name(2))  # gone
        outcome = worker.verify()
    finally:
        worker.rc.delete(*(worker.key_name(k) for k in (1, 2, 3)))
        worker.close()
    assert outcome["verified_keys"] == 3 and outcome["verified"]
    assert outcome["lost"] == {"stale": 1, "missing": 1}


@pytest.mark.redis
def test_cli_prints_json_and_exits_zero(lab: object, tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    proc = subprocess.run(
        [str(BIN / "kairos"), "load", "--engine", "redis", "--hosts", ",".join(REDIS_NODES),
         "--prefix", "kairos_loadtest_cli", "--keys", "500", "--seconds", "2", "--rate", "200",
         "--concurrency", "2", "--json", "--out", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == json.loads(out.read_text())
    assert doc["ops"] > 0 and doc["failed"] == 0 and doc["lost_acknowledged_writes"] == 0
    assert "kairos load: redis" in proc.stderr
