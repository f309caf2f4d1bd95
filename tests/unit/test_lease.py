"""The lease's decisions (module_utils/kairos_lease.py): who may take it, renew it or take it
over, and what a run that loses a race does. The stores themselves (a Cassandra row changed
by lightweight transactions, a Redis key) are exercised on the lab by
tests/integration/test_rollout_faults.py and test_autopilot.py; here a dict plays the
store, with the same compare-and-set contract."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

from ansible.module_utils.kairos_lease import acquire, decide, describe_holder
from ansible.module_utils.kairos_proc import process_start


class DictLease:
    """A lease store in memory: take and renew are compare-and-set on the owner and token,
    as the Cassandra batch and the Redis scripts are. ``race`` lets another run write
    between the next read and write."""

    seconds = 900

    def __init__(self) -> None:
        self.row: dict[str, Any] = {"holder": None, "token": None}
        self.race: dict[str, Any] | None = None

    def read(self) -> tuple[dict[str, Any] | None, int | None]:
        holder, token = self.row["holder"], self.row["token"]
        if self.race is not None:  # another run wins between this read and the write
            self.row = {"holder": self.race, "token": (token or 0) + 1}
            self.race = None
        return (dict(holder, token=token) if holder else None), token

    def take(self, holder: dict[str, Any], previous_owner: str | None,
             previous_token: int | None) -> int | None:
        current = self.row["holder"]
        if (current or {}).get("owner") != previous_owner or self.row["token"] != previous_token:
            return None
        self.row = {"holder": dict(holder), "token": (previous_token or 0) + 1}
        return self.row["token"]

    def renew(self, holder: dict[str, Any]) -> bool:
        if (self.row["holder"] or {}).get("owner") != holder["owner"]:
            return False
        self.row["holder"] = dict(holder)
        return True


def gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def here(owner: str, pid: int) -> dict[str, Any]:
    return {"owner": owner, "host": socket.gethostname(), "pid": pid,
            "pid_start": process_start(pid), "created": "earlier", "created_at": 1.0,
            "heartbeat_at": 1.0}


def test_a_free_lease_is_taken_with_the_next_token() -> None:
    lease = DictLease()
    outcome, holder, _ = acquire(lease, "run-a", os.getpid(), process_start(os.getpid()), 10.0)
    assert outcome == "taken" and holder["token"] == 1 and holder["owner"] == "run-a"
    assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
    assert lease.row["holder"]["owner"] == "run-a"


def test_the_owner_renews_and_keeps_its_token() -> None:
    lease = DictLease()
    acquire(lease, "run-a", os.getpid(), None, 10.0)
    outcome, holder, _ = acquire(lease, "run-a", os.getpid(), None, 70.0)
    assert outcome == "renewed" and holder["heartbeat_at"] == 70.0 and holder["token"] == 1


def test_a_live_holder_is_named_and_kept() -> None:
    lease = DictLease()
    lease.row = {"holder": here("run-a", os.getpid()), "token": 4}
    outcome, holder, _ = acquire(lease, "run-b", os.getpid(), None, 10.0)
    assert outcome == "held" and holder["owner"] == "run-a"
    assert lease.row["holder"]["owner"] == "run-a" and lease.row["token"] == 4
    text = describe_holder({**holder, "expires_in": 512})
    assert f"owner run-a on {socket.gethostname()}, pid {os.getpid()}" in text
    assert "expires in 512 s unless renewed" in text


def test_a_holder_whose_process_is_gone_is_taken_over_at_once_with_a_new_token() -> None:
    lease = DictLease()
    pid = gone_pid()
    lease.row = {"holder": here("run-a", pid), "token": 4}
    outcome, holder, reason = acquire(lease, "run-b", os.getpid(), None, 10.0)
    assert outcome == "taken over" and holder["token"] == 5 and holder["owner"] == "run-b"
    assert reason == f"run-a: its process {pid} on {socket.gethostname()} is gone"


def test_a_holder_on_another_host_waits_for_its_lease_to_expire() -> None:
    # A lease has no heartbeat age rule: the store drops it one period after its renewal.
    old = {"owner": "run-a", "host": "elsewhere", "pid": 1, "heartbeat_at": 0.0}
    assert decide(old, "run-b", None, time.time()) == ("refuse", None)
    assert decide(old, "run-b", 60, time.time())[0] == "takeover"  # the file lock's rule
    assert decide(None, "run-b", None, 0.0) == ("take", None)


def test_a_run_that_loses_the_race_to_take_it_is_refused_naming_the_winner() -> None:
    lease = DictLease()
    lease.race = here("run-c", os.getpid())
    outcome, holder, _ = acquire(lease, "run-b", os.getpid(), None, 10.0)
    assert outcome == "held" and holder["owner"] == "run-c"


def test_a_lease_lost_while_renewing_is_not_taken_back() -> None:
    lease = DictLease()
    acquire(lease, "run-a", os.getpid(), None, 10.0)
    lease.race = here("run-c", os.getpid())  # run-a's lease expired; run-c took it
    outcome, holder, _ = acquire(lease, "run-a", os.getpid(), None, 1000.0)
    assert outcome == "held" and holder["owner"] == "run-c"


def test_a_heartbeat_does_not_take_over_a_lease_another_run_had_since() -> None:
    lease = DictLease()
    lease.row = {"holder": here("run-b", gone_pid()), "token": 6}
    outcome, holder, _ = acquire(lease, "run-a", os.getpid(), None, 10.0, take_over=False)
    assert outcome == "held" and holder["owner"] == "run-b" and lease.row["token"] == 6


def test_a_redis_lease_is_taken_only_once_a_replica_holds_it() -> None:
    """Two scratch redis-servers, the second a replica of the first: the lease is taken once
    WAIT says the replica has it; with the replica stopped (SIGSTOP, a process this test
    started) no replica acknowledges, the take, and the owner's renewal, are refused and the
    key given back, so that a failover cannot hand the lock to a second run. About 5 s."""
    import shutil
    import signal

    import pytest
    import redis
    from ansible.module_utils.kairos_lease import LeaseNotReplicated, RedisLease

    from planner.lab.scratch_redis import ScratchRedisError, scratch_redis

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian's redis-server package)")
    try:
        with scratch_redis(cluster=False) as primary, \
                scratch_redis(cluster=False, ports=range(7408, 7399, -1)) as replica:
            p, r = primary.client(), replica.client()
            r.replicaof(primary.host, primary.port)
            deadline = time.monotonic() + 10
            while r.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the scratch replica did not sync"
                time.sleep(0.1)
            lease = RedisLease(redis.Redis(host=primary.host, port=primary.port,
                                           decode_responses=True), "wait-test", 60)
            assert acquire(lease, "run-1", os.getpid(), process_start(os.getpid()),
                           time.time())[0] == "taken"
            assert r.get(lease.key) is not None  # the replica has it
            os.kill(replica.pid, signal.SIGSTOP)
            try:
                # A renewal no replica acknowledges is refused too, the lease given back:
                # a failover would have left the old expiry (the run stops before its batch).
                with pytest.raises(LeaseNotReplicated, match="not renewed but given back"):
                    acquire(lease, "run-1", os.getpid(), process_start(os.getpid()),
                            time.time())
                assert p.get(lease.key) is None
                with pytest.raises(LeaseNotReplicated, match="not taken but given back"):
                    acquire(lease, "run-2", os.getpid(), process_start(os.getpid()),
                            time.time())
                assert p.get(lease.key) is None  # given back, not left to expire
            finally:
                os.kill(replica.pid, signal.SIGCONT)
    except ScratchRedisError as exc:
        pytest.skip(str(exc))
