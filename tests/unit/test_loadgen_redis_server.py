"""The Redis shapes against a real redis-server: a scratch one-node cluster this test starts
on a free port of 127.0.0.1:7400-7409 (its own directory, no persistence) and stops by its
PID. Skipped when redis-server is not installed. About 15 s."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from planner.errors import ValidationError
from planner.lab.scratch_redis import ScratchRedisError, scratch_redis
from planner.loadgen import LoadConfig, hash_fields, run_load

SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    SERVER is None, reason="redis-server is not installed (Debian's redis-server package): "
    "the shapes' real-server test needs one to start")


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    try:
        with scratch_redis(extra_args=("--maxmemory", "8mb", "--maxmemory-policy",
                                       "allkeys-lru")) as scratch:
            client = scratch.client()
            try:
                yield scratch.port, client
            finally:
                client.close()
    except ScratchRedisError as exc:  # no free port, or the server did not start
        pytest.skip(str(exc))


def _run(port: int, shape: str, **options: Any) -> Any:
    cfg = LoadConfig(engine="redis", contact_points=(f"127.0.0.1:{port}",), shape=shape,
                     wait_replicas=0, wait_timeout_ms=0, concurrency=2, request_timeout=5,
                     seed=7, **options)
    return run_load(cfg, startup_timeout=60)


def test_evict_burst_evicts_and_every_missing_write_is_accounted(server: Any) -> None:
    port, client = server
    client.flushall()
    result = _run(port, "evict-burst", keys=2000, max_keys=100_000, value_size=500, seconds=4)
    assert result.failed == 0 and result.verified and result.acknowledged_writes > 0
    # 8 MB of maxmemory and 64-KiB burst values: the bursts evicted, and only missing keys
    # the measured evictions cover were not counted lost.
    assert result.evicted_keys is not None and result.evicted_keys > 0
    assert 0 < result.missing_evicted <= result.evicted_keys
    assert result.lost_acknowledged_writes == 0 and result.ok
    lookups = result.hits_by_class.get("read", 0) + result.misses_by_class.get("read", 0)
    assert lookups == result.ops_by_class["read"] and result.hit_ratio("read") is not None


def test_without_eviction_no_missing_write_is_excused(server: Any) -> None:
    port, client = server
    client.flushall()
    client.config_set("maxmemory-policy", "noeviction")
    try:
        result = _run(port, "cache-hot", keys=500, value_size=200, seconds=2)
    finally:
        client.config_set("maxmemory-policy", "allkeys-lru")
    assert result.evicted_keys == 0 and result.missing_evicted == 0
    assert result.ok and result.verified_keys == len(client.keys("kairos_load:*"))
    # Cache-aside: a key is read (miss) before it is filled, so misses >= distinct keys read.
    assert result.misses_by_class["read"] > 0 and result.hits_by_class["read"] > 0


def test_hash_shapes_build_hashes_on_both_sides_of_the_listpack_threshold(server: Any) -> None:
    port, client = server
    client.flushall()
    result = _run(port, "hash-read", keys=60, value_size=40, seconds=2)
    assert result.ok and result.verified_keys > 0
    entries = int(client.config_get("hash-max-listpack-entries")["hash-max-listpack-entries"])
    seen = {}
    for name in client.scan_iter("kairos_load:h:*"):
        key = int(name.rsplit(":", 1)[1])
        if client.hlen(name) == hash_fields(key) + 1:  # a whole hash (filled) and its marker
            seen[client.hlen(name) <= entries] = client.object("encoding", name)
    assert seen == {True: "listpack", False: "hashtable"}


def test_a_miss_penalty_is_waited_on_every_fill_and_counted_in_its_latency(server: Any) -> None:
    """--miss-penalty-ms: the backing store a cache-aside application reads on a miss. A fill
    waits it (counted in the write class, beside the write-through SETs that do not); the
    reads do not, and the two threads' time bounds how many misses a run can fill."""
    port, client = server
    client.flushall()
    result = _run(port, "cache-hot", keys=400, value_size=200, seconds=3, miss_penalty_ms=20)
    misses = result.misses_by_class["read"]
    assert result.ok and misses > 0 and result.hits_by_class["read"] > 0
    assert result.latency_ms_by_class["write"]["max"] >= 20.0, result.latency_ms_by_class
    assert result.latency_ms_by_class["read"]["p99"] < 20.0, result.latency_ms_by_class
    assert misses * 0.020 <= 2 * result.seconds * 1.05, (misses, result.seconds)


def test_a_miss_penalty_needs_a_shape_and_a_sane_value() -> None:
    with pytest.raises(ValidationError, match="miss_penalty_ms: only a Redis shape"):
        LoadConfig(engine="redis", miss_penalty_ms=2)
    with pytest.raises(ValidationError, match=r"miss_penalty_ms: must be in \[0, 10000\]"):
        LoadConfig(engine="redis", shape="cache-hot", miss_penalty_ms=-1)


#: A run of 60 s in a process of its own, which says "running" once the load issues
#: operations and prints how it ended: a Ctrl-C reaches the process's main thread there, as
#: at a terminal (pytest-xdist runs the tests off it).
CTRL_C_RUN = """
import json, signal, sys
# Python's own Ctrl-C handler, as at a terminal: a run started from a background job (a CI
# script's `( ... ) &`, nohup) inherits SIGINT ignored, and Python then installs none.
signal.signal(signal.SIGINT, signal.default_int_handler)
from planner.loadgen import LoadConfig, run_load
said = []
def progress(elapsed, ops, failures):
    if ops and not said:
        said.append(1)
        print("running", flush=True)
cfg = LoadConfig(engine="redis", contact_points=("127.0.0.1:%d",), keys=200, wait_replicas=0,
                 wait_timeout_ms=0, concurrency=2, request_timeout=5, seed=7, seconds=60)
try:
    r = run_load(cfg, startup_timeout=60, on_progress=progress, ctrl_c_ends_run=%s)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print(json.dumps({"stopped_by": r.stopped_by, "ops": r.ops, "failed": r.failed,
                  "verified": r.verified, "lost": r.lost_acknowledged_writes}), flush=True)
"""


@pytest.mark.parametrize("ends_run", [False, True])
def test_ctrl_c_stops_the_workers_and_ends_the_run_only_when_asked(
    server: Any, ends_run: bool,
) -> None:
    """SIGINT once a 60-s run issues operations: the workers stop either way. `kairos load`
    (ends_run) reports the short run; every other caller (a calibration's or a bench's
    window) gets the interrupt back and never a window cut short as a whole one."""
    port, client = server
    client.flushall()
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_RUN % (port, ends_run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "running", proc.stderr
        os.kill(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # From the interrupt, not the start: a starved machine may take long to start the
    # process (a CI-like run in an idle CPU class took 62 s from Popen to exit).
    assert time.monotonic() - sent < 30, "the run went on after Ctrl-C"
    if ends_run:
        assert proc.returncode == 0, err[-2000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["stopped_by"] == "stopped" and result["ops"] > 0, result
        assert result["failed"] == 0 and result["verified"] and result["lost"] == 0, result
    else:
        assert proc.returncode == 130 and out.strip().endswith("interrupted"), (out, err)
    # No worker outlived the run: none is left in the run's session (multiprocessing's
    # resource tracker leaves once it reads the run's end, a moment later).
    deadline = time.monotonic() + 10
    while True:
        left = subprocess.run(["pgrep", "-a", "-s", str(proc.pid)], capture_output=True,
                              text=True).stdout.strip()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == "", left
