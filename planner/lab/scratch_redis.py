"""A scratch redis-server on loopback, started and stopped by its PID: for benches and tests.

:func:`scratch_redis` starts ``redis-server`` on the first free port of ``ports`` on
127.0.0.1 (by default 7409 down to 7400: never the lab's 7001-7006), in a temporary
directory of its own, without persistence; with ``cluster`` it is a one-node Redis Cluster
holding every slot. It waits for PING, yields a :class:`ScratchRedis` and, on the way out,
stops the process it started (by its PID, SIGTERM then SIGKILL) and removes the directory.
It never changes a server it did not start: a port is taken only when it and its cluster
bus port (+10000) can be bound, and the server answering there must have the PID started
here (else, or when the server exits while starting, the next free port is tried). A
password goes into a conf file (0600) in the scratch directory, never on the command line.

:class:`ScratchRedisError` says why no server could be started (redis-server missing, no
free port -- :class:`NoFreePortError` --, the server did not come up): a bench stops with
it, a test skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_PORTS",
    "NoFreePortError",
    "ScratchRedis",
    "ScratchRedisError",
    "port_is_free",
    "scratch_redis",
]

#: The ports a scratch server may take, tried in this order.
DEFAULT_PORTS: Sequence[int] = range(7409, 7399, -1)
#: The cluster bus of a port: port + 10000.
BUS_OFFSET = 10000
HOST = "127.0.0.1"


class ScratchRedisError(RuntimeError):
    """No scratch redis-server could be started; the message says why."""


class NoFreePortError(ScratchRedisError):
    """Every port offered is taken (by another server, perhaps one of the lab's)."""


class _Exited(ScratchRedisError):
    """The server exited while starting (another process took its port meanwhile)."""


@dataclass(frozen=True)
class ScratchRedis:
    """A running scratch server: its port, its PID, its directory and the password set."""

    port: int
    pid: int
    dir: str
    password: str | None = field(default=None, repr=False)
    host: str = HOST

    @property
    def address(self) -> str:
        """``host:port``, as Kairos' load client and modules take it."""
        return f"{self.host}:{self.port}"

    def client(self, **options: Any) -> Any:
        """A redis-py client of this server (strings decoded), logged in with the password
        unless ``options`` say otherwise."""
        import redis

        kwargs: dict[str, Any] = {"host": self.host, "port": self.port, "password": self.password,
                                  "decode_responses": True, "socket_timeout": 10}
        return redis.Redis(**{**kwargs, **options})


def port_is_free(port: int, *, bus: bool = True) -> bool:
    """Whether ``port`` (and with ``bus`` its cluster bus port) can be bound on 127.0.0.1."""
    for p in (port, port + BUS_OFFSET) if bus else (port,):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server does
            s.bind((HOST, p))
            continue
        return False
    return True


def _quoted(text: str) -> str:
    """``text`` escaped for a double-quoted redis.conf argument."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server this module started, by its PID."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_ready(server: ScratchRedis, proc: subprocess.Popen[bytes], cluster: bool,
                timeout: float) -> None:
    """Until the server answers PING (and with ``cluster`` holds every slot, state ok)."""
    import redis

    client = server.client()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise ScratchRedisError(
                        f"the scratch redis-server on {server.address} did not start") from None
                time.sleep(0.05)
        if int(client.info("server")["process_id"]) != proc.pid:  # never another's server
            raise _Exited(f"{server.address} was taken by another redis-server meanwhile")
        if cluster:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            while client.cluster("info")["cluster_state"] != "ok":
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise ScratchRedisError(
                        f"the scratch redis-server on {server.address} did not take every slot")
                time.sleep(0.05)
        if proc.poll() is not None:
            raise ScratchRedisError(f"the scratch redis-server on {server.address} exited")
    finally:
        client.close()


def _start(binary: str, port: int, tmp: str, cluster: bool, extra_args: Sequence[str],
           password: str | None, timeout: float) -> tuple[subprocess.Popen[bytes], ScratchRedis]:
    """Start and wait for a server on ``port`` in ``tmp``; stopped again if it is not ready."""
    conf = os.path.join(tmp, "redis.conf")
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        if password is not None:
            fh.write(f'requirepass "{_quoted(password)}"\n')
    argv = [binary, conf, "--port", str(port), "--bind", HOST, "--dir", tmp, "--save", "",
            "--appendonly", "no"]
    if cluster:
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"]
    proc = subprocess.Popen([*argv, *extra_args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    server = ScratchRedis(port=port, pid=proc.pid, dir=tmp, password=password)
    try:
        _wait_ready(server, proc, cluster, timeout)
    except BaseException as exc:
        exited = proc.poll() is not None  # by itself, before being stopped here
        _stop(proc)
        if exited and isinstance(exc, ScratchRedisError) and not isinstance(exc, _Exited):
            raise _Exited(str(exc)) from None
        raise
    return proc, server


@contextlib.contextmanager
def scratch_redis(
    *,
    cluster: bool = True,
    extra_args: Sequence[str] = (),
    password: str | None = None,
    ports: Iterable[int] = DEFAULT_PORTS,
    timeout: float = 10.0,
) -> Iterator[ScratchRedis]:
    """A redis-server started here on the first free port of ``ports``, stopped by its PID.

    ``extra_args`` are added to its command line (``--maxmemory 8mb`` ...); ``password`` is
    the default user's (requirepass), written to a conf file, not on the command line. A
    server that exits while starting (its port was taken meanwhile, by a test running
    beside this one) is tried again on the next free port.

    Raises
    ------
    ScratchRedisError
        redis-server is not installed, no port of ``ports`` is free (:class:`NoFreePortError`),
        or the server did not start (answer PING, and with ``cluster`` reach cluster_state ok)
        within ``timeout``.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise ScratchRedisError("redis-server is not installed (Debian's redis-server package)")
    candidates = list(ports)
    exited: _Exited | None = None
    for port in candidates:
        if not port_is_free(port, bus=cluster):
            continue
        with tempfile.TemporaryDirectory(prefix="kairos-redis-") as tmp:
            try:
                proc, server = _start(binary, port, tmp, cluster, extra_args, password, timeout)
            except _Exited as exc:
                exited = exc
                continue
            try:
                yield server
            finally:
                _stop(proc)
            return
    if exited is not None:
        raise ScratchRedisError(str(exited))
    raise NoFreePortError(
        f"no free port among {', '.join(map(str, candidates))} on {HOST}"
        + (" (each with its cluster bus port +10000)" if cluster else ""))
