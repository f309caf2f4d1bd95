"""planner/lab/scratch_redis.py: the scratch redis-server of the benches and tests, on
127.0.0.1:7400-7409, stopped by its PID; never another process's server. Skipped when
redis-server is not installed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from planner.lab import scratch_redis as sr

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed")


@pytest.fixture
def other() -> Iterator[sr.ScratchRedis]:
    """A server started beside the one under test, on the first free port."""
    try:
        with sr.scratch_redis(cluster=False) as server:
            yield server
    except sr.ScratchRedisError as exc:
        pytest.skip(str(exc))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_password_is_in_the_conf_not_on_the_command_line() -> None:
    password = 'with "quotes" and \\ a backslash'
    try:
        with sr.scratch_redis(cluster=False, password=password) as server:
            with open(f"/proc/{server.pid}/cmdline", "rb") as fh:
                assert password.encode() not in fh.read()
            assert oct(os.stat(os.path.join(server.dir, "redis.conf")).st_mode & 0o777) == "0o600"
            assert password not in repr(server)
            with server.client() as client:
                assert client.ping() and client.config_get("requirepass") == {
                    "requirepass": password}
            pid, directory = server.pid, server.dir
    except sr.ScratchRedisError as exc:
        pytest.skip(str(exc))
    assert not _alive(pid) and not os.path.exists(directory)


def test_a_taken_port_is_never_used(other: sr.ScratchRedis) -> None:
    with (pytest.raises(sr.NoFreePortError, match=f"no free port among {other.port} "),
          sr.scratch_redis(cluster=False, ports=[other.port])):
        pytest.fail("a taken port was used")
    assert _alive(other.pid)


def test_a_port_taken_after_the_check_is_left_to_its_server(
        other: sr.ScratchRedis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's server on the port: its PID is not this one's, the next port is
    tried, and the other server is not touched."""
    free = sr.port_is_free
    monkeypatch.setattr(sr, "port_is_free",
                        lambda port, bus=True: port == other.port or free(port, bus=bus))
    with (pytest.raises(sr.ScratchRedisError, match="taken by another redis-server"),
          sr.scratch_redis(cluster=False, ports=[other.port])):
        pytest.fail("the other server was taken for this one")
    with sr.scratch_redis(cluster=False, ports=[other.port, *sr.DEFAULT_PORTS]) as mine:
        assert mine.port != other.port
        with mine.client() as client:
            assert int(client.info("server")["process_id"]) == mine.pid
    assert _alive(other.pid)
