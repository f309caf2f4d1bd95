"""The lab fixture: one lab per test session, started if needed, stopped if we started it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from planner._module_utils import kairos_tls
from planner.loadgen import envelope

from .secret_watch import ArgvWatch, files_holding

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The lab's random passwords (inventories/local/group_vars/all.yml makes them on first use).
SECRETS = REPO / ".lab" / "secrets"
# Where `make lab-up` records the load client's and the control host's envelopes.
LAB_ENVELOPES = REPO / ".lab" / "envelopes.json"
# Kairos' own CQL role (only its grants), and the application's, which the loads and the
# tests' own tables use (inventories/local/group_vars/all.yml; docs/security.md).
CQL_USER = "kairos"
APP_USER = "app"


# The lab's CA and the clients' certificate (`make lab-up` makes them; docs/security.md, "TLS"):
# every connection of the tests is TLS, verified against the lab's CA.
TLS_DIR = REPO / ".lab" / "tls"
LAB_TLS = {"ca_file": str(TLS_DIR / "ca.pem"), "cert_file": str(TLS_DIR / "kairos.pem"),
           "key_file": str(TLS_DIR / "kairos.key")}


def lab_secret(name: str) -> str:
    return (SECRETS / name).read_text().strip()


def lab_secrets() -> list[str]:
    """Every lab password that exists now."""
    if not SECRETS.is_dir():
        return []
    return [p.read_text().strip() for p in sorted(SECRETS.glob("*-password"))]


def assert_no_secret(text: str, where: str) -> None:
    """Fail when any lab password appears in text (output, logs, results)."""
    for secret in lab_secrets():
        assert secret not in text, f"a lab password appears in {where}"


#: The lab's Redis logins (inventories/local/group_vars/redis.yml): the operator (the default
#: user), Kairos' ACL user and the application's.
REDIS_LOGINS = {"operator": (None, "redis-password"), "kairos": ("kairos", "redis-kairos-password"),
                "app": ("app", "redis-app-password")}


def redis_client(port: int, *, user: str = "operator", host: str = "127.0.0.1",
                 tls: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """A redis-py client of one lab node, logged in as ``user`` (see REDIS_LOGINS), over TLS
    with the clients' certificate (``tls``: other settings)."""
    import redis

    username, secret = REDIS_LOGINS[user]
    kwargs.setdefault("socket_timeout", 5)
    kwargs.update(kairos_tls.redis_kwargs(LAB_TLS if tls is None else tls))
    return redis.Redis(host=host, port=port, username=username, password=lab_secret(secret),
                       **kwargs)


LAB_REDIS_PORTS = range(7001, 7007)


def redis_running(key: str) -> dict[int, str]:
    """CONFIG GET ``key`` on every lab node, as Kairos' ACL user reads it."""
    out = {}
    for port in LAB_REDIS_PORTS:
        client = redis_client(port, user="kairos", decode_responses=True)
        try:
            out[port] = str(client.config_get(key)[key])
        finally:
            client.close()
    return out


def redis_conf(key: str) -> dict[int, str]:
    """``key`` in every lab node's rendered conf file (the role's source of truth)."""
    out = {}
    for port in LAB_REDIS_PORTS:
        conf = REPO / ".lab" / "redis" / f"redis{port - 7000}" / f"{port}.conf"
        values = [line.split(None, 1)[1] for line in conf.read_text().splitlines()
                  if line.startswith(key + " ")]
        out[port] = values[-1] if values else ""
    return out


def cql_auth(app: bool = False) -> Any:
    """The driver's login for the lab (PasswordAuthenticator): Kairos' role, or the app's."""
    from cassandra.auth import PlainTextAuthProvider

    if app:
        return PlainTextAuthProvider(username=APP_USER,
                                     password=lab_secret("cassandra-app-password"))
    return PlainTextAuthProvider(username=CQL_USER, password=lab_secret("cassandra-cql-password"))


def cql_cluster(contact_points: list[str], *, app: bool = False, **kwargs: Any) -> Any:
    """A cassandra-driver Cluster logged in to the lab as Kairos (system tables, settings)
    or, with ``app``, as the application (its keyspaces and data)."""
    from cassandra.cluster import Cluster

    kwargs.setdefault("protocol_version", 5)
    kwargs.setdefault("connect_timeout", 30)
    kwargs.setdefault("ssl_context", kairos_tls.client_context(LAB_TLS))
    return Cluster(contact_points, auth_provider=cql_auth(app), **kwargs)


def cql_node_cluster(address: str) -> Any:
    """A logged-in Cluster whose requests all go to the one node at ``address``."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([address]))
    return cql_cluster([address], execution_profiles={EXEC_PROFILE_DEFAULT: profile})


APP_TABLE = "kairos_app.events"


def ensure_app_table() -> None:
    """An application table with RF 3 whose compaction a plan may change.

    It also gives the lab a non-system keyspace: the live ring (and so every plan made on
    it) is read for the application's keyspaces.
    """
    cluster = cql_cluster(["127.0.0.1", "127.0.0.2", "127.0.0.3"], app=True)
    try:
        session = cluster.connect()
        session.execute(
            "CREATE KEYSPACE IF NOT EXISTS kairos_app WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 3}",
            timeout=60,
        )
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {APP_TABLE} (id bigint PRIMARY KEY, body text)",
            timeout=60,
        )
    finally:
        cluster.shutdown()


@dataclass(frozen=True)
class PlaybookRun:
    rc: int
    output: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """Per-host counters of the PLAY RECAP (ok, changed, failed, ...)."""
        hosts: dict[str, dict[str, int]] = {}
        for line in self.output.split("PLAY RECAP", 1)[-1].splitlines():
            match = re.match(r"^(\S+)\s+:\s+(.*)$", line.strip())
            if match:
                counts = dict(re.findall(r"(\w+)=(\d+)", match.group(2)))
                hosts[match.group(1)] = {k: int(v) for k, v in counts.items()}
        return hosts

    def changed(self) -> int:
        return sum(h.get("changed", 0) for h in self.recap().values())


def run_playbook(playbook: str, *args: str, timeout: float = 600) -> PlaybookRun:
    """Run a playbook from the repository root; return its output and timing."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    began = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), playbook, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = proc.stdout + proc.stderr
    # Every playbook run of the suite doubles as a check that no password reaches the output.
    assert_no_secret(output, f"the output of {playbook}")
    return PlaybookRun(proc.returncode, output, time.monotonic() - began)


def lab_processes() -> list[str]:
    """The lab's servers alive, from their pid files (as tests/lab_leftovers.sh reads them).
    Not by command line: Molecule's nodes, which may run beside the session (`make test`),
    name .lab/ in theirs too."""
    alive = []
    for pidfile in [*(REPO / ".lab" / "cassandra").glob("*/cassandra.pid"),
                    *(REPO / ".lab" / "redis").glob("*/redis.pid")]:
        pid = pidfile.read_text().strip()
        try:
            state = Path(f"/proc/{int(pid)}/status").read_text()
        except (OSError, ValueError):  # gone, or not a pid
            continue
        if "\nState:\tZ" not in state:
            alive.append(pid)
    return alive


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlaybookRun]:
    """The running lab. Started once per session; stopped at the end if this session started it.

    The session runs in the lab's control envelope and its loads in the load envelope
    (docs/envelopes.md): neither takes the nodes' CPU. All along, every process's argv is
    watched for the lab's passwords, and at the end every file the session's Kairos wrote
    (under .kairos/ and the tests' temporary directories) is read back for them
    (tests/integration/secret_watch.py): the session fails when one holds a password.
    """
    watch = ArgvWatch(lab_secrets)
    watch.start()
    watch.prove()
    try:
        yield from _lab()
    finally:
        watch.stop()
    roots = (REPO / ".kairos", tmp_path_factory.getbasetemp())
    print(f"\nsecrets: {watch.samples} argv samples of {len(watch.processes)} processes; "
          f"files under {', '.join(map(str, roots))} read back")
    assert watch.samples > 1  # prove() saw the canary: the watch reads argv
    assert not watch.found, f"a lab password was in the argv of {sorted(watch.found)}"
    holding = files_holding(roots, lab_secrets())
    assert not holding, f"a lab password is in {holding}"


def kairos_acl_denials() -> list[str]:
    """What the lab's Redis nodes refused Kairos' ACL user (ACL LOG), as text."""
    import redis

    denied = []
    for port in range(7001, 7007):
        try:
            with redis_client(port, decode_responses=True) as client:
                entries = client.acl_log()
        except (redis.RedisError, OSError):
            continue  # a node a test left down: nothing to read
        denied += [f"{port}: {e.get('reason')} {e.get('object')} ({e.get('count')}x)"
                   for e in entries if e.get("username") == "kairos"]
    return denied


#: Whether the lab stops when this session ends (set by the lab fixture).
_lab_stops_after = False


def lab_stops_after_session() -> bool:
    """The lab is stopped when this session ends: this session started it (and
    KAIROS_KEEP_LAB is unset), or whoever started it says it stops it
    (KAIROS_LAB_STOPS_AFTER_SESSION=1: `make test`). A test need not then put back a
    setting only a lab that outlives the session would keep."""
    return _lab_stops_after


def _lab() -> Iterator[PlaybookRun]:
    global _lab_stops_after
    started_here = not lab_processes()
    _lab_stops_after = bool(
        (started_here and not os.environ.get("KAIROS_KEEP_LAB"))
        or os.environ.get("KAIROS_LAB_STOPS_AFTER_SESSION") == "1")
    run = run_playbook("playbooks/lab_up.yml")
    print(f"\nlab-up: rc={run.rc} in {run.seconds:.1f} s (started here: {started_here})")
    if run.rc != 0:
        run_playbook("playbooks/lab_down.yml")
        pytest.fail(f"lab_up.yml failed:\n{run.output[-4000:]}")
    # The `kairos` commands the tests run log in through the environment, never argv.
    os.environ["KAIROS_CASSANDRA_USERNAME"] = CQL_USER
    os.environ["KAIROS_CASSANDRA_PASSWORD"] = lab_secret("cassandra-cql-password")
    os.environ["KAIROS_LOAD_CASSANDRA_USERNAME"] = APP_USER
    os.environ["KAIROS_LOAD_CASSANDRA_PASSWORD"] = lab_secret("cassandra-app-password")
    os.environ["KAIROS_REDIS_USERNAME"] = "kairos"
    os.environ["KAIROS_REDIS_PASSWORD"] = lab_secret("redis-kairos-password")
    os.environ["KAIROS_LOAD_REDIS_USERNAME"] = "app"
    os.environ["KAIROS_LOAD_REDIS_PASSWORD"] = lab_secret("redis-app-password")
    for engine in ("CASSANDRA", "REDIS"):
        os.environ[f"KAIROS_{engine}_TLS_CA"] = LAB_TLS["ca_file"]
        os.environ[f"KAIROS_{engine}_TLS_CERT"] = LAB_TLS["cert_file"]
        os.environ[f"KAIROS_{engine}_TLS_KEY"] = LAB_TLS["key_file"]
    sides = envelope.enter_lab(str(LAB_ENVELOPES))
    try:
        yield run
    finally:
        envelope.leave_lab(sides)
    # Every command Kairos sent all session long was within its ACL (docs/security.md).
    denied = kairos_acl_denials()
    assert not denied, f"Kairos' Redis user was refused: {denied}"
    if started_here and not os.environ.get("KAIROS_KEEP_LAB"):
        down = run_playbook("playbooks/lab_down.yml")
        assert down.rc == 0, down.output[-3000:]
