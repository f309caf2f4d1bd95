"""The Cassandra modules' main flows, on output captured from the lab's Cassandra 5.0.6.

nodetool answers come from tests/unit/fixtures/nodetool/: a value the test changes is
written into the captured text where the node prints it (``FakeNodetool``), and setters
print nothing, as nodetool does. CQL answers come from tests/unit/fixtures/cassandra_views/
(system.local, system_views.settings); system_schema rows have the driver's shapes
(named tuples, maps of text). The fakes record every command and statement, so the tests
see what was applied, in which order, and that no password is on a command line.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import uuid
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import cassandra_auth_setup
import pytest
from ansible.module_utils import basic, kairos_cql
from cassandra import AuthenticationFailed, ConsistencyLevel, Unauthorized
from cassandra.metadata import Murmur3Token
from cassandra.policies import SimpleConvictionPolicy
from cassandra.pool import Host

from tests.unit.test_modules_harness import (
    FIXTURES,
    SECRET,
    ModuleFailed,
    assert_no_secret,
    refused,
    run_module,
)

NODETOOL = "/srv/lab/cass1/bin/nodetool"
ADDRESSES = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
#: The lab's initial_token of cass1..3 (inventories/local/hosts.yml).
TOKENS = [-9223372036854775808, -3074457345618258603, 3074457345618258602]
SIMPLE = "org.apache.cassandra.locator.SimpleStrategy"
NTS = "org.apache.cassandra.locator.NetworkTopologyStrategy"
STCS = "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy"
LCS = "org.apache.cassandra.db.compaction.LeveledCompactionStrategy"


#: cass2's gossip, pending hints and schema version over CQL, all three nodes UN.
GOSSIP = json.loads((FIXTURES / "cassandra_views" / "gossip_cass2.json").read_text())


def captured(name: str) -> str:
    return (FIXTURES / "nodetool" / name).read_text()


# ------------------------------------------------------------------ nodetool
class FakeNodetool:
    """One node answering nodetool like the lab's (values as in the captured output)."""

    def __init__(self, *, ignores: tuple[str, ...] = (), status: str = "status_3_UN.txt",
                 describecluster: str = "describecluster.txt") -> None:
        self.stages = {"ReadStage": 32, "MutationStage": 32, "CounterMutationStage": 32}
        self.compactors = 2
        self.throughput = 64
        self.caches = {"key": 25, "row": 0, "counter": 12}  # MiB, as in info.txt
        self.ignores = ignores  # setters the node accepts but does not take
        self.status = status
        self.describecluster = describecluster
        self.commands: list[list[str]] = []

    def __call__(self, argv: Any, **_: Any) -> tuple[int, str, str]:
        assert isinstance(argv, list), "nodetool runs with an argument list, never a shell"
        assert argv[0] == NODETOOL
        args = argv[1:]
        self.commands.append(args)
        verb = args[0]
        if verb.startswith("set"):
            if verb not in self.ignores:
                self._set(args)
            return 0, "", ""
        return 0, self._get(args), ""

    def _set(self, args: list[str]) -> None:
        verb, *values = args
        if verb == "setconcurrency":
            self.stages[values[0]] = int(values[1])
        elif verb == "setconcurrentcompactors":
            self.compactors = int(values[0])
        elif verb == "setcompactionthroughput":
            self.throughput = int(values[0])
        elif verb == "setcachecapacity":
            self.caches = dict(zip(("key", "row", "counter"), map(int, values), strict=True))

    def _get(self, args: list[str]) -> str:
        verb = args[0]
        if verb == "getconcurrency":
            # Same columns as the captured getconcurrency.txt.
            header = captured("getconcurrency.txt").splitlines()[0]
            rows = [f"{stage:<29}{0:>12}{self.stages[stage]:>16}" for stage in args[1:]]
            return "\n".join([header, *rows]) + "\n"
        if verb == "getconcurrentcompactors":
            return re.sub(r"\d+", str(self.compactors), captured("getconcurrentcompactors.txt"))
        if verb == "getcompactionthroughput":
            return captured("getcompactionthroughput.txt").replace("64", str(self.throughput))
        if verb == "info":
            text = captured("info.txt")
            for name in ("Key", "Row", "Counter"):
                mib = self.caches[name.lower()]
                size = f"{mib} MiB" if mib else "0 bytes"
                text = re.sub(rf"^({name} Cache .*?capacity )[\d.]+ (bytes|KiB|MiB)",
                              rf"\g<1>{size}", text, flags=re.M)
            return text
        if verb == "status":
            return captured(self.status)
        if verb == "describecluster":
            return captured(self.describecluster)
        if verb in ("disablegossip", "enablegossip", "drain"):
            return ""  # they print nothing
        if verb == "statusgossip":
            return captured("statusgossip_running.txt")
        raise AssertionError(f"unexpected nodetool {args}")


@pytest.fixture
def nodetool() -> Any:
    fake = FakeNodetool()
    with mock.patch("ansible.module_utils.basic.AnsibleModule.run_command", fake):
        yield fake


def test_the_fake_answers_as_the_captured_node() -> None:
    fake = FakeNodetool()
    assert fake._get(["getconcurrency", "MutationStage", "ReadStage"]) == captured(
        "getconcurrency.txt"
    )
    assert fake._get(["info"]) == captured("info.txt")
    assert fake._get(["getcompactionthroughput"]) == captured("getcompactionthroughput.txt")


# ------------------------------------------------------ cassandra_live_settings
def live(settings: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return run_module("cassandra_live_settings", {"nodetool": NODETOOL, "settings": settings},
                      **kwargs)


def test_live_settings_check_mode_reports_the_change_and_sets_nothing(nodetool: Any) -> None:
    result = live({"concurrent_reads": 64, "compaction_throughput": "128MiB/s"},
                  check_mode=True)
    assert result["changed"] is True
    assert result["changed_keys"] == ["compaction_throughput", "concurrent_reads"]
    assert result["before"] == {"concurrent_reads": 32, "compaction_throughput": 64}
    assert result["after"] == {"concurrent_reads": 64, "compaction_throughput": 128}
    assert not [c for c in nodetool.commands if c[0].startswith("set")]


def test_live_settings_already_running_change_nothing(nodetool: Any) -> None:
    result = live({"concurrent_reads": 32, "concurrent_compactors": 2,
                   "compaction_throughput": "64MiB/s"})
    assert result["changed"] is False and result["changed_keys"] == []
    assert nodetool.commands == [
        ["getconcurrency", "ReadStage"], ["getconcurrentcompactors"], ["getcompactionthroughput"],
    ]


def test_live_settings_apply_then_report_what_the_node_reads_back(nodetool: Any) -> None:
    result = live({"concurrent_writes": 48, "row_cache_size": "256MiB"})
    assert result["changed"] is True
    assert nodetool.commands == [
        ["getconcurrency", "MutationStage"], ["info"],
        ["setcachecapacity", "25", "256", "12"],  # key and counter caches kept
        ["setconcurrency", "MutationStage", "48"],
        ["getconcurrency", "MutationStage"], ["info"],
    ]
    assert result["before"] == {"concurrent_writes": 32, "row_cache_size": 0}
    assert result["after"] == {"concurrent_writes": 48, "row_cache_size": 256}
    assert result["diff"] == {"before": result["before"], "after": result["after"]}


def test_live_settings_set_the_key_and_row_caches_in_one_command(nodetool: Any) -> None:
    # Two setcachecapacity calls, each keeping the other cache "as it is" from the capacities
    # read before, would put the first one's old size back.
    result = live({"row_cache_size": "64MiB", "key_cache_size": "100MiB"})
    sets = [c for c in nodetool.commands if c[0] == "setcachecapacity"]
    assert sets == [["setcachecapacity", "100", "64", "12"]]  # the counter cache kept
    assert result["after"] == {"row_cache_size": 64, "key_cache_size": 100}


def test_live_settings_fail_when_the_node_does_not_take_a_value() -> None:
    fake = FakeNodetool(ignores=("setconcurrentcompactors",))
    with (
        mock.patch("ansible.module_utils.basic.AnsibleModule.run_command", fake),
        pytest.raises(ModuleFailed, match=r"did not take: concurrent_compactors=4 \(is 2\)"),
    ):
        live({"concurrent_compactors": 4})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"memtable_flush_writers": 4}, "cannot change live: memtable_flush_writers"),
        ({"compaction_throughput": "fast"}, "compaction_throughput: bad value 'fast'"),
        ({"concurrent_reads": 0}, "concurrent_reads: must be positive"),
    ],
)
def test_live_settings_refuse_bad_settings_before_running_nodetool(
    nodetool: Any, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ModuleFailed, match=message):
        live(settings)
    assert nodetool.commands == []


def test_live_settings_need_nodetool() -> None:
    refused("cassandra_live_settings", {"settings": {"concurrent_reads": 64}},
            "missing required arguments: nodetool")


# --------------------------------------------------- ring status and node gate
def test_ring_status_reads_every_node_and_changes_nothing(nodetool: Any) -> None:
    result = run_module("cassandra_ring_status", {"nodetool": NODETOOL}, check_mode=True)
    assert result["changed"] is False
    assert sorted(result["up_normal"]) == ADDRESSES
    assert nodetool.commands == [["status"]]


def test_ring_status_names_the_node_that_is_not_up_normal() -> None:
    fake = FakeNodetool(status="status_1_DN.txt")
    with (
        mock.patch("ansible.module_utils.basic.AnsibleModule.run_command", fake),
        pytest.raises(ModuleFailed, match=r"not every node is UN .*: 127\.0\.0\.3 is DN") as failed,
    ):
        run_module("cassandra_ring_status", {"nodetool": NODETOOL, "expect_up_normal": ADDRESSES,
                                             "timeout": 1, "interval": 0.25})
    assert sorted(failed.value.result["up_normal"]) == ["127.0.0.1", "127.0.0.2"]


def test_ring_status_refuses_a_timeout_that_is_not_whole_seconds(nodetool: Any) -> None:
    refused("cassandra_ring_status", {"nodetool": NODETOOL, "timeout": 0.5},
            "argument 'timeout' is of type float")
    assert nodetool.commands == []


def test_node_gate_passes_when_the_node_is_back_and_schemas_agree(
    nodetool: Any, tmp_path: Path
) -> None:
    result = run_module("cassandra_node_gate", {
        "nodetool": NODETOOL, "node": "127.0.0.2", "peer": "127.0.0.1",
        "hints_directory": str(tmp_path), "timeout": 1,
    })
    assert result["changed"] is False
    assert result["conditions"] == {"up_normal": True, "schema": True, "hints": True}


def test_node_gate_names_every_unmet_condition(tmp_path: Path) -> None:
    # cass3 (host id from status_1_DN.txt) still has a hint file on this peer.
    (tmp_path / "9abbe137-7e2c-48ab-9b43-88c091e8600e-1795309138000-1.hints").write_text("")
    fake = FakeNodetool(status="status_1_DN.txt", describecluster="describecluster_1_down.txt")
    with (
        mock.patch("ansible.module_utils.basic.AnsibleModule.run_command", fake),
        pytest.raises(ModuleFailed, match=r"node 127\.0\.0\.3 not caught up") as failed,
    ):
        run_module("cassandra_node_gate", {
            "nodetool": NODETOOL, "node": "127.0.0.3", "hints_directory": str(tmp_path),
            "timeout": 0, "interval": 0.01,
        })
    assert failed.value.result["conditions"] == {
        "up_normal": False, "schema": False, "hints": False,
    }
    assert "up_normal: DN" in str(failed.value) and "1 hint file(s)" in str(failed.value)


HOST_ID = "9abbe137-7e2c-48ab-9b43-88c091e8600e"


def listening_port(address: str) -> Iterator[int]:
    """A port on ``address`` that accepts connections, as a running node's does."""
    with socket.socket() as listener:
        listener.bind((address, 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def live_peer() -> Iterator[int]:
    """The peer's storage port, answering (the peer's Cassandra is alive)."""
    yield from listening_port("127.0.0.2")


def hints_gate(tmp_path: Path, peer_port: int, **extra: Any) -> dict[str, Any]:
    return {"nodetool": NODETOOL, "node": "127.0.0.3", "peer": "127.0.0.2",
            "peer_port": peer_port, "hints_directory": str(tmp_path), "host_ids": [HOST_ID],
            "checks": ["hints"], "timeout": 5, "interval": 0.05, **extra}


def test_hints_gate_waits_for_the_file_the_peer_still_writes_and_runs_no_nodetool(
    nodetool: Any, tmp_path: Path, live_peer: int
) -> None:
    """A file the peer still writes (pending_hints does not list it) holds the gate until
    the peer delivers and deletes it."""
    import threading

    held = tmp_path / f"{HOST_ID}-1795309138000-2.hints"
    held.write_text("")
    (tmp_path / "another-node-1795309138000-2.hints").write_text("")  # not the batch's
    threading.Timer(0.3, held.unlink).start()
    result = run_module("cassandra_node_gate", hints_gate(tmp_path, live_peer))
    assert result["conditions"] == {"hints": True} and result["waited_seconds"] >= 0.3
    assert nodetool.commands == []


def test_hints_gate_fails_fast_when_the_peer_itself_dies(nodetool: Any, tmp_path: Path) -> None:
    (tmp_path / f"{HOST_ID}-1795309138000-2.hints").write_text("")  # never delivered now
    with socket.socket() as closed:
        closed.bind(("127.0.0.2", 0))  # bound, not listening: refuses
        port = closed.getsockname()[1]
        with pytest.raises(ModuleFailed, match=r"127\.0\.0\.2 down outside the batch") as dead:
            run_module("cassandra_node_gate", hints_gate(tmp_path, port, down_grace=0.2))
    assert dead.value.result["down"] == ["127.0.0.2"] and nodetool.commands == []


@pytest.fixture
def jmx_port() -> Iterator[int]:
    """A port that accepts connections, as a running node's JMX port does."""
    yield from listening_port("127.0.0.1")


def test_node_gate_up_normal_alone_runs_one_nodetool_call(nodetool: Any) -> None:
    result = run_module("cassandra_node_gate", {
        "nodetool": NODETOOL, "node": "127.0.0.2", "checks": ["up_normal"], "timeout": 1,
    })
    assert result["conditions"] == {"up_normal": True}
    assert nodetool.commands == [["status"]]


def test_drain_leaves_gossip_pauses_then_drains(nodetool: Any, jmx_port: int) -> None:
    result = run_module("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": jmx_port,
                                            "quiesce_seconds": 0.05})
    assert nodetool.commands == [["disablegossip"], ["drain"]]
    assert result["changed"] is True and result["drained"] is True
    assert len(result["phases"]) == 3 and 0.05 <= result["phases"][1] < 1


def test_drain_of_a_stopped_node_runs_nothing(nodetool: Any) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: refused
        result = run_module("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": port})
    assert result["changed"] is False and result["drained"] is False
    assert nodetool.commands == [] and "not running" in result["msg"]


def test_drain_in_check_mode_runs_nothing(nodetool: Any, jmx_port: int) -> None:
    result = run_module("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": jmx_port},
                        check_mode=True)
    assert result["changed"] is True and nodetool.commands == []


# ----------------------------------------------------------------------- CQL
@functools.cache
def _row_type(columns: tuple[str, ...]) -> Any:
    return namedtuple("Row", columns)


def row(**values: Any) -> Any:
    """A row as the driver returns it (its default row factory makes named tuples)."""
    return _row_type(tuple(values))(**values)


class Rows(list[Any]):
    def one(self) -> Any:
        return self[0] if self else None


class FakeSession:
    """Answers the statements the modules send with rows shaped like the captured ones."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def get_pool_state(self) -> dict[Any, Any]:
        return {h: {} for h in self.cluster.metadata.all_hosts()}

    def execute(self, query: Any, params: Any = None, timeout: Any = None) -> Rows:
        db = self.cluster.db
        db.consistency = getattr(query, "consistency_level", None)  # a statement's own CL
        query = getattr(query, "query_string", query)
        db.statements.append((query, params))
        user = self.cluster.login.get("username")
        refused = Unauthorized(f"User {user} does not have sufficient privileges to perform "
                               "the requested operation")
        if query == "LIST ALL PERMISSIONS" and user == db.stale_role and db.stale_roles > 0:
            db.stale_roles -= 1  # the node's roles cache not refreshed yet
            # CassandraAuthorizer.list then asks the permissions cache for DESCRIBE on every
            # role, which caches none for the login until its next refresh.
            db.stale_permissions[user] = db.stale_permission_reads
            raise refused
        if query.startswith(("CREATE ROLE", "ALTER ROLE", "GRANT", "REVOKE")) and (
                db.stale_permissions.get(user)):
            db.stale_permissions[user] -= 1  # served once more, then refreshed
            raise refused
        if query == "LIST ALL PERMISSIONS" or query.startswith(("CREATE ROLE", "ALTER ROLE")):
            # The node's roles cache reads the login at QUORUM: a row on its old replica
            # only reads as absent (the worst case; a fresh lab's start, 2026-12-04).
            if user in db.unrepaired:
                raise refused
            assert db.roles[user]["is_superuser"], query
        if query == "LIST ALL PERMISSIONS":
            return Rows()
        if db.error_on and query.startswith(db.error_on):
            # A server error may quote the statement it refused.
            raise RuntimeError(f'Error from server: code=2000 [Syntax error] message="{query}"')
        if query.startswith(("ALTER", "CREATE", "GRANT", "REVOKE")):
            db.alter(query)
            return Rows()
        return Rows(db.select(query, params))


class FakeCluster:
    """What build_cluster returns: driver Hosts and token map of the lab's ring."""

    def __init__(self, db: FakeDatabase, login: dict[str, Any]) -> None:
        self.db = db
        self.login = login
        self.metadata = mock.Mock(all_hosts=lambda: list(db.hosts), token_map=db.token_map)
        self.control_connection = mock.Mock(
            wait_for_schema_agreement=lambda wait_time: db.schema_agrees)

    def connect(self) -> FakeSession:
        user, password = self.login.get("username"), self.login.get("password")
        if self.db.auth and self.db.roles.get(user, {}).get("password") != password:
            raise AuthenticationFailed("Provided username and/or password are incorrect")
        return FakeSession(self)

    def shutdown(self) -> None:
        pass

    def refresh_nodes(self) -> None:
        """A node still joining shows up on the next refresh."""
        if self.db.joining:
            self.db.hosts.append(self.db.joining.pop(0))


class FakeDatabase:
    """The lab's three nodes (one token each, inventories/local) as cass2 answers over CQL.

    system.local and system_views.settings are the captured rows (fixtures/cassandra_views/);
    the schema version and keyspace replication are those describecluster.txt shows.
    """

    SCHEMA = "d03783d7-b468-3c1a-82f1-8e30b2edde8b"

    def __init__(self, *, auth: bool = False) -> None:
        views = FIXTURES / "cassandra_views"
        self.local = json.loads((views / "cass2.json").read_text())["system.local"]
        self.settings = json.loads((views / "settings_cass2.json").read_text())["rows"]
        self.compaction = {"kairos_app.events": STCS}
        # Cassandra's default caching, as system_schema.tables holds it for a new table.
        self.caching = {"kairos_app.events": {"keys": "ALL", "rows_per_partition": "NONE"}}
        # system_views.caches capacity_bytes: the key cache at the 512M heap's 25MiB.
        self.cache_capacity = {"keys": 25 * 2**20, "rows": 0, "counters": 12 * 2**20}
        self.replication = {
            "system": {"class": "org.apache.cassandra.locator.LocalStrategy"},
            "system_auth": {"class": SIMPLE, "replication_factor": "1"},
            "system_distributed": {"class": SIMPLE, "replication_factor": "3"},
            "kairos_app": {"class": SIMPLE, "replication_factor": "3"},
        }
        self.auth = auth
        self.roles = {"cassandra": {"password": "cassandra", "can_login": True,
                                    "is_superuser": True}}
        # role -> {(PERMISSION, resource as LIST PERMISSIONS prints it)}
        self.permissions: dict[str, set[tuple[str, str]]] = {}
        self.tables = {"kairos_app.events"}
        self.error_on = ""
        # Roles written before system_auth's replication changed: until a repair, a read of
        # them at less than ALL may ask only new replicas, which do not hold them yet.
        self.unrepaired: set[str] = set()
        self.consistency: Any = None
        self.schema_agrees = True
        # How many more superuser checks of stale_role the node refuses (its roles cache
        # read the role before it was written).
        self.stale_roles, self.stale_role = 0, "kairos_admin"
        # A refused probe leaves the login's permissions on the roles cached as none: the
        # node refuses this many role statements of it before its cache refreshes.
        self.stale_permission_reads = 1
        self.stale_permissions: dict[str, int] = {}
        self.statements: list[tuple[str, Any]] = []
        self.logins: list[dict[str, Any]] = []
        self.joining: list[Host] = []  # hosts the driver sees only after a refresh
        owners = {}
        self.hosts = []
        for address, token in zip(ADDRESSES, TOKENS, strict=True):
            host = Host(address, SimpleConvictionPolicy, datacenter="datacenter1", rack="rack1",
                        host_id=uuid.uuid5(uuid.NAMESPACE_DNS, address))
            host.is_up = True
            self.hosts.append(host)
            owners[Murmur3Token(token)] = host
        ring = sorted(owners)
        # What the driver's token map holds without the schema: the ring and its owners.
        self.token_map = SimpleNamespace(ring=ring, token_to_host_owner=owners)

    def build_cluster(self, hosts: list[str], **login: Any) -> FakeCluster:
        self.logins.append(login)
        return FakeCluster(self, login)

    def select(self, query: str, params: Any) -> list[Any]:
        if query == "SELECT release_version FROM system.local":
            return [row(release_version=self.local["release_version"])]
        if query == "SELECT name, value FROM system_views.settings":
            return [row(name=k, value=v) for k, v in self.settings.items()]
        if query == "SELECT name, capacity_bytes FROM system_views.caches":
            return [row(name=k, capacity_bytes=v) for k, v in self.cache_capacity.items()]
        if query.startswith("SELECT compaction, caching FROM system_schema.tables"):
            table = ".".join(params)
            cls = self.compaction.get(table)
            # The maps system_schema.tables holds for a table created with defaults.
            return [row(compaction={"class": cls, "max_threshold": "32", "min_threshold": "4"},
                        caching=dict(self.caching[table]))] if cls else []
        if query == "SELECT keyspace_name, replication FROM system_schema.keyspaces":
            return [row(keyspace_name=k, replication=v) for k, v in self.replication.items()]
        if query.startswith("SELECT replication FROM system_schema.keyspaces"):
            return [row(replication=self.replication["system_auth"])]
        if query == "SELECT broadcast_address, schema_version FROM system.local":
            return [row(broadcast_address=self.local["broadcast_address"],
                           schema_version=uuid.UUID(self.SCHEMA))]
        if query == "SELECT peer, schema_version FROM system.peers_v2":
            return [row(peer=a, schema_version=uuid.UUID(self.SCHEMA))
                    for a in ADDRESSES if a != self.local["broadcast_address"]]
        if query.startswith("SELECT active_tasks, pending_tasks FROM system_views.thread_pools"):
            return [row(active_tasks=0, pending_tasks=0)]  # no hint being dispatched
        if query == "SELECT address, generation FROM system_views.gossip_info":
            return [row(address=r["address"], generation=r["generation"])
                    for r in GOSSIP["system_views.gossip_info"]]
        if query == "SELECT role FROM system_auth.roles":
            return [row(role=name) for name in self.roles]
        if query == "SELECT * FROM system_auth.roles WHERE role = %s":
            if self.consistency == ConsistencyLevel.ALL:  # a read repair
                self.unrepaired.discard(params[0])
            role = self.roles.get(params[0])
            return [row(role=params[0], **role)] if role else []
        if query == "SELECT keyspace_name FROM system_schema.keyspaces":
            return [row(keyspace_name=k) for k in self.replication]
        if query.startswith("SELECT table_name FROM system_schema.tables"):
            return [row(table_name=params[1])] if ".".join(params) in self.tables else []
        if match := re.match(r'LIST ALL PERMISSIONS OF "(\w+)" NORECURSIVE$', query):
            return [row(permission=p, resource=r)
                    for p, r in sorted(self.permissions.get(match[1], set()))]
        if query.startswith("SELECT can_login, is_superuser FROM system_auth.roles"):
            role = self.roles.get(params[0])
            if params[0] in self.unrepaired and self.consistency != ConsistencyLevel.ALL:
                role = None
            return [row(can_login=role["can_login"], is_superuser=role["is_superuser"])
                    ] if role else []
        raise AssertionError(f"unexpected statement {query!r}")

    def alter(self, query: str) -> None:
        if match := re.match(r"ALTER TABLE (\S+) WITH (.*)$", query):
            for option, value in re.findall(r"(\w+) = (\{[^}]*\})", match[2]):
                entries = dict(re.findall(r"'(\w+)': '(\w+)'", value))
                if option == "compaction":
                    self.compaction[match[1]] = (
                        f"org.apache.cassandra.db.compaction.{entries['class']}")
                else:
                    assert option == "caching", query
                    self.caching[match[1]] = entries
        elif query.startswith("ALTER KEYSPACE system_auth"):
            dcs = dict(re.findall(r"'(datacenter\d)': (\d+)", query))
            self.replication["system_auth"] = {"class": NTS, **dcs}
            self.unrepaired = set(self.roles)
        elif match := re.match(r'(?:CREATE|ALTER) ROLE "(\w+)" WITH (.*)$', query):
            role = self.roles.setdefault(match[1], {})
            if password := re.search(r"PASSWORD = '((?:[^']|'')*)'", match[2]):
                role["password"] = password[1].replace("''", "'")
            role["is_superuser"] = "SUPERUSER = true" in match[2]
            role["can_login"] = "LOGIN = true" in match[2]
        elif match := re.match(r"CREATE KEYSPACE IF NOT EXISTS (\w+) WITH replication = "
                               r"\{'class': 'NetworkTopologyStrategy', 'datacenter1': (\d)\}$",
                               query):
            self.replication[match[1]] = {"class": NTS, "datacenter1": match[2]}
        elif match := re.match(r"CREATE TABLE IF NOT EXISTS (\w+\.\w+) \(", query):
            self.tables.add(match[1])
        elif match := re.match(r'(GRANT|REVOKE) (\w+) ON (.+) (?:TO|FROM) "(\w+)"$', query):
            # As LIST PERMISSIONS prints the resource: <keyspace k>, <all keyspaces>.
            kind, _, name = match[3].partition(" ")
            printed = f"<{match[3].lower()}>" if kind == "ALL" else f"<{kind.lower()} {name}>"
            held = self.permissions.setdefault(match[4], set())
            if match[1] == "GRANT":
                held.add((match[2], printed))
            else:
                held.remove((match[2], printed))
        else:
            raise AssertionError(f"unexpected statement {query!r}")


@pytest.fixture
def cql() -> Any:
    db = FakeDatabase()
    with mock.patch.object(kairos_cql, "build_cluster", db.build_cluster):
        yield db


def cql_args(**args: Any) -> dict[str, Any]:
    return {"host": "127.0.0.2", "username": "kairos", "password": SECRET, **args}


def test_cql_query_returns_the_nodes_rows_and_keeps_the_password_out(cql: Any) -> None:
    result = run_module("cassandra_cql_query",
                        cql_args(query="SELECT release_version FROM system.local"))
    assert result == {"changed": False, "rows": [{"release_version": "5.0.6"}]}
    assert cql.logins[0]["password"] == SECRET  # to the driver's auth provider, not argv
    assert_no_secret(result)


def test_cql_query_refuses_a_statement_that_writes(cql: Any) -> None:
    refused("cassandra_cql_query", cql_args(query="TRUNCATE kairos_app.events"),
            "SELECT statements only")
    assert cql.statements == []


def test_readback_passes_when_the_node_runs_what_was_written(cql: Any, tmp_path: Path) -> None:
    conf = tmp_path / "cassandra.yaml"
    conf.write_text("concurrent_reads: 32\nmemtable_flush_writers: 2\nrow_cache_size: 0MiB\n")
    result = run_module("cassandra_settings_readback", cql_args(
        settings={"concurrent_reads": 32, "memtable_flush_writers": 2},
        file_settings={"row_cache_size": "0MiB"}, config_file=str(conf),
        tables=["kairos_app.events"], compaction="SizeTieredCompactionStrategy",
        caching={"rows_per_partition": "NONE"},
    ), check_mode=True)
    assert result["changed"] is False
    assert result["readback"] == {
        "running": {"concurrent_reads": "32", "memtable_flush_writers": "2"},
        "tables": {"kairos_app.events":
                   "SizeTieredCompactionStrategy; caching keys=ALL, rows_per_partition=NONE"},
        "file": {"concurrent_reads": 32, "memtable_flush_writers": 2, "row_cache_size": "0MiB"},
    }
    assert_no_secret(result)


MEMTABLE_TRIE = {"configurations": {"skiplist": {"class_name": "SkipListMemtable"},
                                    "trie": {"class_name": "TrieMemtable"},
                                    "default": {"inherits": "trie"}}}


def test_readback_reads_the_memtable_mapping_from_its_dotted_row(
    cql: Any, tmp_path: Path
) -> None:
    # As Cassandra 5.0.6 shows a file with the trie as default (HashMap order, from the
    # 5.0.6 classes SettingsTable and InheritingClass; the captured lab node has no
    # memtable key, so its row is null).
    cql.settings["memtable.configurations"] = (
        "{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}")
    conf = tmp_path / "cassandra.yaml"
    conf.write_text("memtable: " + json.dumps(MEMTABLE_TRIE) + "\nconcurrent_reads: 32\n")
    result = run_module("cassandra_settings_readback", cql_args(
        settings={"memtable": MEMTABLE_TRIE, "concurrent_reads": 32}, config_file=str(conf),
    ), check_mode=True)
    assert result["readback"]["running"] == {
        "concurrent_reads": "32",
        "memtable": {"configurations": {"default": {"inherits": "trie"},
                                        "skiplist": {"class_name": "SkipListMemtable"},
                                        "trie": {"class_name": "TrieMemtable"}}},
    }
    assert result["readback"]["file"] == {"concurrent_reads": 32, "memtable": MEMTABLE_TRIE}


def test_readback_fails_when_the_node_runs_another_default_memtable(
    cql: Any, tmp_path: Path
) -> None:
    cql.settings["memtable.configurations"] = None  # started before the file had the key
    with pytest.raises(ModuleFailed) as failed:
        run_module("cassandra_settings_readback", cql_args(settings={"memtable": MEMTABLE_TRIE}))
    assert str(failed.value) == (
        f"127.0.0.2 does not run what was applied: running memtable: expected "
        f"{MEMTABLE_TRIE!r}, reads None"
    )
    cql.settings["memtable.configurations"] = (
        "{default=skiplist+, skiplist=SkipListMemtable, trie=TrieMemtable}")
    with pytest.raises(ModuleFailed, match=r"running memtable: expected .*'inherits': 'skiplist'"):
        run_module("cassandra_settings_readback", cql_args(settings={"memtable": MEMTABLE_TRIE}))


def test_readback_names_every_key_source_and_value_that_differs(
    cql: Any, nodetool: Any, tmp_path: Path
) -> None:
    conf = tmp_path / "cassandra.yaml"
    conf.write_text("memtable_flush_writers: 4\n")
    with pytest.raises(ModuleFailed) as failed:
        run_module("cassandra_settings_readback", cql_args(
            settings={"memtable_flush_writers": 4}, config_file=str(conf),
            heap="1G", nodetool=NODETOOL,
        ))
    assert str(failed.value) == (
        "127.0.0.2 does not run what was applied: "
        "running memtable_flush_writers: expected 4, reads '2'; "
        "heap: expected 1G, the JVM runs 512.0 MB"
    )
    assert_no_secret(failed.value.result)


def test_readback_reads_the_caches_sizes_from_the_caches_not_the_start_up_settings(
    cql: Any,
) -> None:
    # After nodetool setcachecapacity 30 0 12 on the lab (Cassandra 5.0.6), system_views.settings
    # still said key_cache_size 25MiB while system_views.caches had the new capacity.
    cql.cache_capacity["keys"] = 30 * 2**20
    result = run_module("cassandra_settings_readback", cql_args(
        settings={"key_cache_size": "30MiB", "row_cache_size": "0MiB", "concurrent_reads": 32}))
    assert result["readback"]["running"] == {
        "key_cache_size": "30MiB", "row_cache_size": "0MiB", "concurrent_reads": "32"}
    with pytest.raises(ModuleFailed, match=r"running key_cache_size: expected '25MiB', "
                       r"reads '30MiB'"):
        run_module("cassandra_settings_readback", cql_args(settings={"key_cache_size": "25MiB"}))


def test_readback_fails_when_the_tables_do_not_cache_rows(cql: Any) -> None:
    with pytest.raises(ModuleFailed) as failed:
        run_module("cassandra_settings_readback", cql_args(
            tables=["kairos_app.events"], caching={"keys": "ALL", "rows_per_partition": "ALL"},
        ))
    assert str(failed.value) == (
        "127.0.0.2 does not run what was applied: table kairos_app.events: expected caching "
        "{'keys': 'ALL', 'rows_per_partition': 'ALL'}, reads "
        "{'keys': 'ALL', 'rows_per_partition': 'NONE'}"
    )
    # Compaction alone asked: the caching is neither compared nor published.
    result = run_module("cassandra_settings_readback", cql_args(
        tables=["kairos_app.events"], compaction=STCS))
    assert result["readback"] == {
        "running": {}, "tables": {"kairos_app.events": "SizeTieredCompactionStrategy"}}


EVENTS_DEFAULTS = {"compaction": "SizeTieredCompactionStrategy",
                   "caching": {"keys": "ALL", "rows_per_partition": "NONE"}}
ROWS_ALL = {"keys": "ALL", "rows_per_partition": "ALL"}


def test_table_options_check_mode_reports_and_alters_nothing(cql: Any) -> None:
    result = run_module("cassandra_table_options", cql_args(
        tables=["kairos_app.events"], compaction="LeveledCompactionStrategy", caching=ROWS_ALL,
    ), check_mode=True)
    assert result["changed"] is True
    assert result["before"] == {"kairos_app.events": EVENTS_DEFAULTS}
    assert result["after"] == {"kairos_app.events": {"compaction": "LeveledCompactionStrategy",
                                                     "caching": ROWS_ALL}}
    assert not [q for q, _ in cql.statements if q.startswith("ALTER")]


@pytest.mark.parametrize("args", [
    {"compaction": STCS},
    {"caching": {"rows_per_partition": "none"}},
    {"compaction": "SizeTieredCompactionStrategy", "caching": {"keys": "ALL"}},
])
def test_table_options_already_set_change_nothing(cql: Any, args: dict[str, Any]) -> None:
    result = run_module("cassandra_table_options", cql_args(tables=["kairos_app.events"], **args))
    assert result["changed"] is False and result["before"] == result["after"]
    assert not [q for q, _ in cql.statements if q.startswith("ALTER")]


def test_table_options_alter_then_report_what_they_read_back(cql: Any) -> None:
    result = run_module("cassandra_table_options", cql_args(
        tables=["kairos_app.events"], compaction="LeveledCompactionStrategy", caching=ROWS_ALL,
    ))
    assert result["changed"] is True
    assert result["after"] == {"kairos_app.events": {"compaction": "LeveledCompactionStrategy",
                                                     "caching": ROWS_ALL}}
    queries = [q for q, _ in cql.statements]
    assert queries[1] == (
        "ALTER TABLE kairos_app.events WITH compaction = {'class': 'LeveledCompactionStrategy'} "
        "AND caching = {'keys': 'ALL', 'rows_per_partition': 'ALL'}"
    )
    assert queries[2].startswith("SELECT compaction, caching")  # the re-read after the ALTER
    assert cql.compaction["kairos_app.events"] == LCS
    assert_no_secret(result)


def test_table_options_set_only_the_caching_that_differs(cql: Any) -> None:
    result = run_module("cassandra_table_options", cql_args(
        tables=["kairos_app.events"], compaction=STCS, caching=ROWS_ALL))
    assert result["changed"] is True
    assert [q for q, _ in cql.statements if q.startswith("ALTER")] == [
        "ALTER TABLE kairos_app.events WITH caching = "
        "{'keys': 'ALL', 'rows_per_partition': 'ALL'}"
    ]
    assert cql.caching["kairos_app.events"] == ROWS_ALL


def test_table_options_fail_when_the_alter_does_not_take(cql: Any) -> None:
    cql.alter = lambda query: None  # the statement is accepted, the schema stays as it was
    with pytest.raises(ModuleFailed, match=(
        r"ALTER TABLE did not take: kairos_app.events reads .*'rows_per_partition': 'NONE'.*"
        r"wanted \{'caching': \{'keys': 'ALL', 'rows_per_partition': 'ALL'\}\}"
    )):
        run_module("cassandra_table_options", cql_args(
            tables=["kairos_app.events"], caching=ROWS_ALL))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"tables": ["events"], "compaction": "LeveledCompactionStrategy"},
         "tables must be keyspace.table: events"),
        ({"tables": ["kairos_app.events"], "compaction": "Leveled"},
         "compaction: not a compaction strategy class: 'Leveled'"),
        ({"tables": ["kairos_app.nope"], "compaction": "LeveledCompactionStrategy"},
         "no such table: kairos_app.nope"),
        ({"tables": ["kairos_app.events"], "caching": {"rows": "ALL"}},
         "caching: unknown option 'rows'"),
        ({"tables": ["kairos_app.events"], "caching": {"keys": "SOME"}},
         "caching.keys: expected ALL or NONE, got 'SOME'"),
        ({"tables": ["kairos_app.events"], "caching": {"rows_per_partition": "-1"}},
         "caching.rows_per_partition: expected ALL, NONE or a number of rows, got '-1'"),
        ({"tables": ["kairos_app.events"]}, "give compaction, caching or both"),
        ({"tables": ["kairos_app.events"], "compaction": "LeveledCompactionStrategy",
          "timeout": "soon"}, "timeout"),
    ],
)
def test_table_options_refuse_bad_arguments(
    cql: Any, args: dict[str, Any], message: str
) -> None:
    result = refused("cassandra_table_options", cql_args(**args), message)
    assert not [q for q, _ in cql.statements if q.startswith("ALTER")]
    assert_no_secret(result)


# -------------------------------------------------------- cassandra_cluster_facts
def test_cluster_facts_read_the_ring_and_write_nothing_in_check_mode(
    cql: Any, tmp_path: Path
) -> None:
    dest = tmp_path / "live-ring.json"
    result = run_module("cassandra_cluster_facts", cql_args(
        host=ADDRESSES, hosts=dict(zip(ADDRESSES, ["cass1", "cass2", "cass3"], strict=True)),
        dest=str(dest),
    ), check_mode=True)
    assert result["changed"] is False and not dest.exists()
    ring = result["ring"]
    assert [n["host"] for n in ring["nodes"]] == ["cass1", "cass2", "cass3"]
    assert ring["keyspaces"] == {"kairos_app": {"replication": {
        "class": SIMPLE, "replication_factor": "3"}}}
    assert [(r["start"], r["end"]) for r in ring["token_ranges"]] == [
        (TOKENS[2], TOKENS[0]), (TOKENS[0], TOKENS[1]), (TOKENS[1], TOKENS[2]),
    ]
    assert all(sorted(r["replicas"]["kairos_app"]) == ["cass1", "cass2", "cass3"]
               for r in ring["token_ranges"])
    assert result["schema_agreement"] is True and result["down"] == []
    assert result["generations"] == {
        r["address"]: r["generation"] for r in GOSSIP["system_views.gossip_info"]}
    # Each node's host ID, which the hint files held for it are named after.
    assert result["host_ids"] == {a: str(uuid.uuid5(uuid.NAMESPACE_DNS, a)) for a in ADDRESSES}
    assert_no_secret(result)


def test_cluster_facts_write_the_ring_for_the_preflight(cql: Any, tmp_path: Path) -> None:
    dest = tmp_path / "live-ring.json"
    result = run_module("cassandra_cluster_facts", cql_args(host=ADDRESSES, dest=str(dest)))
    assert json.loads(dest.read_text()) == result["ring"]


def test_cluster_facts_place_replicas_from_the_keyspaces_replication(cql: Any) -> None:
    """The driver's token map only (no schema read): the replicas come from each keyspace's
    replication map, NetworkTopologyStrategy's per-DC factor included."""
    cql.replication["kairos_two"] = {"class": NTS, "datacenter1": "2"}
    result = run_module("cassandra_cluster_facts", cql_args(host=ADDRESSES))
    assert cql.logins[0]["metadata"] == "tokens"
    ranges = result["ring"]["token_ranges"]
    assert all(len(r["replicas"]["kairos_two"]) == 2 for r in ranges)
    # Each range's first replica is the node owning its end token, the next one clockwise.
    assert [r["replicas"]["kairos_two"] for r in ranges] == [
        ["127.0.0.1", "127.0.0.2"], ["127.0.0.2", "127.0.0.3"], ["127.0.0.3", "127.0.0.1"]]
    cql.replication["kairos_odd"] = {"class": "com.example.OwnStrategy", "factor": "3"}
    refused("cassandra_cluster_facts", cql_args(host=ADDRESSES),
            "cannot read the cluster's metadata: no replica placement for keyspace kairos_odd")


def test_cluster_facts_refuse_a_keyspace_the_cluster_lacks(cql: Any) -> None:
    refused("cassandra_cluster_facts", cql_args(host=ADDRESSES, keyspaces=["shop"]),
            "keyspaces not in the cluster: shop")


# ----------------------------------------------------------- cassandra_auth_setup
@pytest.fixture
def auth_db() -> Any:
    db = FakeDatabase(auth=True)
    with mock.patch.object(cassandra_auth_setup, "build_cluster", db.build_cluster):
        yield db


def auth_args(**args: Any) -> dict[str, Any]:
    return {"host": "127.0.0.2", "username": "kairos_admin", "password": SECRET,
            "kairos_username": "kairos", "kairos_password": KAIROS_SECRET, "timeout": 0, **args}


KAIROS_SECRET = "kairos-only-grants-secret"
KAIROS_GRANTS = [
    ("MODIFY", "<keyspace kairos>"), ("SELECT", "<keyspace kairos>"),
    ("SELECT", "<keyspace system_views>"),
    ("SELECT", "<table system_distributed.view_build_status>"),
]


def changes(db: FakeDatabase) -> list[str]:
    return [q for q, _ in db.statements if q.startswith(("ALTER", "CREATE", "GRANT", "REVOKE"))]


def test_auth_setup_check_mode_on_a_new_cluster_reports_and_changes_nothing(
    auth_db: Any,
) -> None:
    result = run_module("cassandra_auth_setup", auth_args(), check_mode=True)
    assert result["changed"] is True and result["logged_in_as"] == "cassandra"
    assert result["actions"] == [
        "system_auth replication {'replication_factor': 1} -> {'datacenter1': 3}",
        "created superuser role kairos_admin",
        "created keyspace kairos (Kairos' lease)",
        "created table kairos.leases",
        "created role kairos",
        "granted MODIFY ON KEYSPACE kairos to kairos",
        "granted SELECT ON KEYSPACE kairos to kairos",
        "granted SELECT ON KEYSPACE system_views to kairos",
        "granted SELECT ON TABLE system_distributed.view_build_status to kairos",
        "disabled login and superuser of the built-in cassandra role",
    ]
    assert result["repair_needed"] is False  # nothing was changed
    assert changes(auth_db) == [] and "kairos" not in auth_db.roles
    assert_no_secret(result)
    assert KAIROS_SECRET not in json.dumps(result)


def test_auth_setup_applies_then_a_second_run_changes_nothing(auth_db: Any) -> None:
    first = run_module("cassandra_auth_setup", auth_args(alter_keyspaces=["kairos_app"]))
    assert first["changed"] is True and first["repair_needed"] is True
    assert first["replication"] == {"datacenter1": 3}
    assert auth_db.replication["system_auth"] == {"class": NTS, "datacenter1": "3"}
    assert auth_db.replication["kairos"] == {"class": NTS, "datacenter1": "3"}
    assert "kairos.leases" in auth_db.tables
    assert auth_db.roles["kairos_admin"] == {"password": SECRET, "is_superuser": True,
                                             "can_login": True}
    # Kairos' own role: a login, never a superuser, with exactly its grants.
    assert auth_db.roles["kairos"] == {"password": KAIROS_SECRET, "is_superuser": False,
                                       "can_login": True}
    assert auth_db.permissions["kairos"] == {*KAIROS_GRANTS, ("ALTER", "<keyspace kairos_app>")}
    assert first["kairos_grants"] == [
        "ALTER ON KEYSPACE kairos_app", "MODIFY ON KEYSPACE kairos", "SELECT ON KEYSPACE kairos",
        "SELECT ON KEYSPACE system_views", "SELECT ON TABLE system_distributed.view_build_status"]
    assert auth_db.roles["cassandra"]["can_login"] is False
    # The passwords went to the node in the CQL statements and logins only, never elsewhere.
    assert_no_secret(first)
    assert KAIROS_SECRET not in json.dumps(first)

    again = run_module("cassandra_auth_setup", auth_args(alter_keyspaces=["kairos_app"]))
    assert again["changed"] is False and again["actions"] == []
    assert again["logged_in_as"] == "kairos_admin"
    # Kairos' password was proven by logging in as it, not set again.
    assert auth_db.logins[-1]["password"] == KAIROS_SECRET


def test_auth_setup_reads_the_roles_from_every_replica_once_it_changed_the_replication(
    auth_db: Any,
) -> None:
    """Molecule's idempotence failure (CI stops 55 and 56, reproduced here): after the
    ALTER of system_auth, the built-in superuser's row is only on its old replica; read at
    QUORUM it looked absent, stayed enabled, and only the next run disabled it."""
    first = run_module("cassandra_auth_setup", auth_args())
    assert "disabled login and superuser of the built-in cassandra role" in first["actions"]
    assert auth_db.roles["cassandra"] == {"password": "cassandra", "can_login": False,
                                          "is_superuser": False}
    auth_db.unrepaired.clear()  # the role's repair of system_auth
    again = run_module("cassandra_auth_setup", auth_args())
    assert again["changed"] is False and again["actions"] == []
    # Without a change of replication the session's QUORUM reads serve.
    assert auth_db.consistency is None


def test_auth_setup_repairs_the_roles_before_the_login_is_used_on_the_new_replicas(
    auth_db: Any,
) -> None:
    """A fresh lab's start (2026-12-04): right after the ALTER of system_auth, the node
    refused the built-in superuser's CREATE ROLE ("does not have sufficient privileges"): its
    roles cache read the login's row, on its old replica only, as absent. Every role is now
    read at ALL (a read repair) and the login confirmed before any role is written."""
    result = run_module("cassandra_auth_setup", auth_args())
    assert result["actions"][:2] == [
        "system_auth replication {'replication_factor': 1} -> {'datacenter1': 3}",
        "created superuser role kairos_admin"]
    queries = [q for q, _ in auth_db.statements]
    repaired = queries.index("SELECT * FROM system_auth.roles WHERE role = %s")
    assert queries.index("ALTER KEYSPACE system_auth WITH replication = {'class': "
                         "'NetworkTopologyStrategy', 'datacenter1': 3}") < repaired
    assert repaired < queries.index("LIST ALL PERMISSIONS") < next(
        i for i, q in enumerate(queries) if q.startswith("CREATE ROLE"))
    assert auth_db.roles["kairos"]["can_login"] and not auth_db.unrepaired


def test_an_install_cut_short_after_the_replication_change_is_read_repaired_and_repaired(
    auth_db: Any,
) -> None:
    """A run that failed after the ALTER (before the role's repair) leaves the built-in
    superuser's row on its old replica, and the next run sees no change of replication: it
    logs in as the built-in role, so it reads the roles at ALL first and asks for the repair."""
    auth_db.replication["system_auth"] = {"class": NTS, "datacenter1": "3"}
    auth_db.unrepaired = {"cassandra"}
    result = run_module("cassandra_auth_setup", auth_args())
    assert result["logged_in_as"] == "cassandra" and result["repair_needed"] is True
    assert result["actions"][0] == "created superuser role kairos_admin"
    queries = [q for q, _ in auth_db.statements]
    assert queries.index("SELECT * FROM system_auth.roles WHERE role = %s") < next(
        i for i, q in enumerate(queries) if q.startswith("CREATE ROLE"))
    again = run_module("cassandra_auth_setup", auth_args())
    assert again["logged_in_as"] == "kairos_admin" and again["repair_needed"] is False
    assert again["actions"] == []


def test_auth_setup_uses_the_new_superuser_only_once_the_node_treats_it_as_one(
    auth_db: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI stop 64: under load, a node refused the superuser just made ("does not have
    sufficient privileges") on the next statement, CREATE KEYSPACE, and the lab's start
    failed. The module now waits until the node grants it superuser status."""
    monkeypatch.setattr(cassandra_auth_setup.time, "sleep", lambda s: None)
    auth_db.stale_roles = 2
    result = run_module("cassandra_auth_setup", auth_args(timeout=60))
    assert auth_db.stale_roles == 0
    made = next(i for i, (q, _) in enumerate(auth_db.statements)
                if q.startswith('CREATE ROLE "kairos_admin"'))
    probes = [i for i, (q, _) in enumerate(auth_db.statements)
              if q == "LIST ALL PERMISSIONS" and i > made]
    assert len(probes) == 3  # refused twice, then granted
    first_use = next(i for i, (q, _) in enumerate(auth_db.statements)
                     if q.startswith("CREATE KEYSPACE"))
    assert max(probes) < first_use
    assert "created keyspace kairos (Kairos' lease)" in result["actions"]


def test_a_role_statement_refused_after_the_login_was_confirmed_is_run_again(
    auth_db: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI stop 69: the probe that waited for the node to treat the built-in superuser as one
    again, refused once, left its permissions on the roles cached as none; the probe then
    passed (the roles cache had refreshed) and the CREATE ROLE right after it was refused."""
    sleeps: list[float] = []
    monkeypatch.setattr(cassandra_auth_setup.time, "sleep", sleeps.append)
    warnings: list[str] = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda _, text: warnings.append(text))
    auth_db.stale_role, auth_db.stale_roles, auth_db.stale_permission_reads = "cassandra", 1, 2
    result = run_module("cassandra_auth_setup", auth_args(timeout=60))
    assert warnings == ["the node refused 'created superuser role kairos_admin' 2 time(s) before "
                        "it ran it: its permissions cache still held the login as no superuser"]
    creates = [q for q, _ in auth_db.statements if q.startswith('CREATE ROLE "kairos_admin"')]
    assert len(creates) == 3  # refused twice, then run
    assert result["actions"][1] == "created superuser role kairos_admin"
    assert auth_db.roles["kairos_admin"]["is_superuser"] and not auth_db.stale_permissions[
        "cassandra"]
    assert sleeps.count(1) >= 3  # one probe and two statements waited for a refresh


def test_a_role_statement_refused_until_the_timeout_names_the_confirmed_login(
    auth_db: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cassandra_auth_setup.time, "sleep", lambda s: None)
    auth_db.stale_permissions["cassandra"] = 10**6  # never refreshed
    result = refused("cassandra_auth_setup", auth_args(timeout=0),
                     r"127\.0\.0\.2: authentication setup failed: refused for 0 s although "
                     r"cassandra was confirmed a superuser: User cassandra does not have")
    assert result["actions"][-1] == "created superuser role kairos_admin"
    assert "kairos_admin" not in auth_db.roles


def test_auth_setup_refuses_a_new_superuser_the_node_never_treats_as_one(auth_db: Any) -> None:
    """Refused, naming the node, before anything else is changed."""
    auth_db.stale_roles = 10**6
    result = refused("cassandra_auth_setup", auth_args(timeout=0),
                     r"127\.0\.0\.2 still refuses kairos_admin as a superuser 0 s after")
    assert result["actions"][-1] == "created superuser role kairos_admin"
    assert "kairos" not in auth_db.roles


def test_auth_setup_writes_no_role_until_the_nodes_agree_on_system_auths_replication(
    auth_db: Any,
) -> None:
    auth_db.schema_agrees = False
    result = refused("cassandra_auth_setup", auth_args(timeout=0),
                     "the nodes do not agree on the schema 0 s after system_auth's replication")
    assert result["actions"] == [
        "system_auth replication {'replication_factor': 1} -> {'datacenter1': 3}"]
    assert set(auth_db.roles) == {"cassandra"}


def test_auth_setup_decides_the_replication_once_every_expected_node_is_in_the_ring(
    auth_db: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A node still joining is not in the driver's ring yet: deciding then would give RF 2
    # (min(3, 2 nodes)), and the next run would raise it to 3: a change on every converge.
    monkeypatch.setattr(cassandra_auth_setup.time, "sleep", lambda s: None)
    auth_db.roles["kairos_admin"] = {"password": SECRET, "can_login": True,
                                     "is_superuser": True}
    auth_db.joining = [auth_db.hosts.pop()]
    result = run_module("cassandra_auth_setup", auth_args(expected_nodes=3, timeout=60))
    assert result["replication"] == {"datacenter1": 3}
    assert not auth_db.joining
    # a ring that never shows them is refused, naming the counts, before anything changes
    auth_db.replication["system_auth"] = {"class": SIMPLE, "replication_factor": "1"}
    auth_db.statements.clear()
    result = refused("cassandra_auth_setup", auth_args(expected_nodes=4, timeout=0),
                     r"the ring shows 3 node\(s\) after 0 s, not the 4 expected")
    assert changes(auth_db) == []


def test_auth_setup_takes_the_superuser_away_from_a_kairos_role_made_before(
    auth_db: Any,
) -> None:
    """A cluster set up when Kairos logged in as the superuser: the module gets in as that
    role, makes the installer's superuser, and leaves Kairos only its grants."""
    auth_db.roles["kairos"] = {"password": KAIROS_SECRET, "is_superuser": True, "can_login": True}
    auth_db.roles["cassandra"] = {"password": "cassandra", "is_superuser": False,
                                  "can_login": False}
    auth_db.permissions["kairos"] = {("ALTER", "<keyspace kairos_app>"),
                                     ("DROP", "<keyspace kairos_app>")}
    result = run_module("cassandra_auth_setup", auth_args())
    assert result["logged_in_as"] == "kairos"
    assert "set the password of role kairos and made it no superuser" in result["actions"]
    assert auth_db.roles["kairos"]["is_superuser"] is False
    assert auth_db.permissions["kairos"] == set(KAIROS_GRANTS)
    assert "revoked DROP ON KEYSPACE kairos_app from kairos" in result["actions"]


def test_auth_setup_gives_an_application_role_its_grants_and_warns_of_a_missing_keyspace(
    auth_db: Any, capsys: pytest.CaptureFixture[str],
) -> None:
    app = {"name": "app", "password": "app-role-secret", "grants": ["CREATE ON ALL KEYSPACES"]}
    result = run_module("cassandra_auth_setup", auth_args(roles=[app],
                                                          alter_keyspaces=["shop", "kairos_app"]))
    assert auth_db.roles["app"]["is_superuser"] is False
    assert auth_db.permissions["app"] == {("CREATE", "<all keyspaces>")}
    assert "ALTER ON KEYSPACE shop" not in result["kairos_grants"]
    assert "keyspaces shop do not exist yet: kairos gets no ALTER" in capsys.readouterr().err
    assert "app-role-secret" not in json.dumps(result)


def test_auth_setup_never_lets_the_password_through_a_server_error(auth_db: Any) -> None:
    auth_db.error_on = "CREATE ROLE"
    result = refused("cassandra_auth_setup", auth_args(), "authentication setup failed")
    assert "PASSWORD = '********'" in result["msg"]
    assert_no_secret(result)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"replication_factor": 0}, "replication_factor=0: must be at least 1"),
        ({"username": "cassandra"}, "username must not be the built-in cassandra role"),
        ({"password": None}, "password: empty; give the password of kairos_admin"),
        ({"password": ""}, "password: empty"),
        ({"username": None}, "username: empty; give the superuser role used to install"),
        ({"kairos_username": "kairos_admin"}, "Kairos' role must not be a superuser role"),
        ({"kairos_password": ""}, "kairos_password: empty; give the password of kairos"),
        ({"alter_keyspaces": ["shop; DROP"]}, "alter_keyspaces: 'shop; DROP' is not a keyspace"),
        ({"roles": [{"name": "app", "password": "p", "grants": ["READ ON KEYSPACE shop"]}]},
         r"roles\[0\].grants: 'READ ON KEYSPACE shop': unknown permission READ"),
        ({"roles": [{"name": "app", "password": "p", "grants": ["SELECT ON shop"]}]},
         r"roles\[0\].grants: 'SELECT ON shop': want PERMISSION ON"),
    ],
)
def test_auth_setup_refuses_bad_arguments(
    auth_db: Any, args: dict[str, Any], message: str
) -> None:
    refused("cassandra_auth_setup", auth_args(**args), message)
    assert auth_db.logins == []


def test_a_node_that_cannot_read_its_roles_yet_is_not_a_refused_login() -> None:
    # Cassandra's answers, as the lab gave them: a wrong password, and a node whose peers
    # were out of reach (internode TLS refused) while it read system_auth.
    from cassandra.cluster import NoHostAvailable

    wrong = AuthenticationFailed('Failed to authenticate to 127.0.0.1:9042: Error from server: '
                                 'code=0100 [Bad credentials] message="Provided username kairos '
                                 'and/or password are incorrect"')
    unreadable = AuthenticationFailed(
        'Failed to authenticate to 127.0.0.1:9042: Error from server: code=0100 [Bad '
        'credentials] message="Unable to perform authentication: Cannot achieve consistency '
        'level LOCAL_QUORUM"')
    assert cassandra_auth_setup._auth_refused(wrong)
    assert cassandra_auth_setup._auth_refused(NoHostAvailable("x", {"127.0.0.1:9042": wrong}))
    assert not cassandra_auth_setup._auth_refused(unreadable)
    assert not cassandra_auth_setup._auth_refused(
        NoHostAvailable("x", {"127.0.0.1:9042": unreadable}))
