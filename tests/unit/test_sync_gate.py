"""cassandra_sync_gate on the gossip rows captured from the lab (fixtures/cassandra_views).

Each fake peer answers the gate's three statements from a copy of cass2's captured rows,
changed poll by poll the way a restart shows in a peer's gossip: the old generation marked
shutdown, then the new generation NORMAL before its native transport is ready, then ready.
It answers the failure-detector probe (a read at ALL of a one-token range) as a coordinator
does: Unavailable while its view names the node in ``fd_down``.
"""

from __future__ import annotations

import copy
from collections import namedtuple
from collections.abc import Iterator
from typing import Any
from unittest import mock

import cassandra
import cassandra_sync_gate
import pytest
from ansible.module_utils.kairos_fd_probe import MAX_TOKEN, MIN_TOKEN, probe_range, tokens_by_node

from tests.unit.test_modules_cassandra import GOSSIP
from tests.unit.test_modules_harness import SECRET, ModuleFailed, assert_no_secret, run_module

CASS1, CASS2, CASS3 = "127.0.0.1", "127.0.0.2", "127.0.0.3"
BEFORE = {r["address"]: r["generation"] for r in GOSSIP["system_views.gossip_info"]}
SCHEMA = GOSSIP["system.local.schema_version"]
# The lab's tokens (system.peers_v2 of any peer lists the others'; the fake lists all three).
TOKENS = {CASS1: MIN_TOKEN, CASS2: -3074457345618258603, CASS3: 3074457345618258602}
PEERS_V2 = [{"peer": a, "tokens": [str(t)]} for a, t in TOKENS.items()]

View = dict[str, Any]


def view(**nodes: dict[str, Any]) -> View:
    """cass2's captured view, with the rows of the nodes named (cass1=...) changed."""
    rows = copy.deepcopy(GOSSIP["system_views.gossip_info"])
    names = {"cass1": CASS1, "cass2": CASS2, "cass3": CASS3}
    for name, change in nodes.items():
        next(r for r in rows if r["address"] == names[name]).update(change)
    return {"gossip": rows, "hints": [], "schema": SCHEMA}


# The HintsDispatcher pool's row (system_views.thread_pools) when nothing is dispatched.
IDLE = {"active_tasks": 0, "pending_tasks": 0}
SHUTDOWN = {"status_with_port": "shutdown,true", "rpc_ready": "false"}
RESTARTED = {"generation": BEFORE[CASS1] + 60}
BOOTING = {**RESTARTED, "rpc_ready": "false"}


def _rows(rows: list[dict[str, Any]]) -> list[Any]:
    if not rows:
        return []
    shape = namedtuple("Row", rows[0])  # type: ignore[misc]
    return [shape(**r) for r in rows]


class Result(list[Any]):
    def one(self) -> Any:
        return self[0] if self else None  # as the driver's ResultSet.one()


class FakePeers:
    """What build_cluster returns for each peer: its views, one per poll (the last repeats).

    A view of None is a peer that does not answer (its connect or query fails); ``"busy"``
    a peer whose requests time out (a saturated node).
    """

    def __init__(self, views: dict[str, list[View | str | None]]) -> None:
        self.views = views
        self.polls = dict.fromkeys(views, 0)
        self.logins: list[dict[str, Any]] = []

    def build_cluster(self, hosts: list[str], **login: Any) -> Any:
        self.logins.append(login)
        (address,) = hosts
        fake = self

        class Session:
            def execute(self, query: Any, bounds: tuple[int, ...] = ()) -> Result:
                if isinstance(query, str) and "gossip_info" in query:
                    fake.polls[address] += 1  # the first statement of a poll
                answers = fake.views[address]
                seen = answers[min(fake.polls[address], len(answers)) - 1]
                if seen is None:
                    raise OSError("connection refused")
                if seen == "busy":
                    raise cassandra.OperationTimedOut(errors="Client request timeout")
                if not isinstance(query, str):  # the failure-detector probe
                    return fake.probe(seen, query.query_string, bounds)
                if "peers_v2" in query:
                    return Result(_rows(PEERS_V2))
                if "gossip_info" in query:
                    return Result(_rows(seen["gossip"]))
                if "pending_hints" in query:
                    return Result(_rows(seen["hints"]))
                if "thread_pools" in query:
                    return Result(_rows(seen.get("dispatch", [IDLE])))
                if "system_views.settings" in query:  # the lab shows '10s' unless set
                    flush = seen.get("flush_period", "10s")
                    return Result(_rows([{"value": flush}] if flush else []))
                return Result([namedtuple("Row", "schema_version")(seen["schema"])])

        class Cluster:
            def connect(self) -> Session:
                return Session()

            def shutdown(self) -> None:
                pass

        return Cluster()

    @staticmethod
    def probe(seen: View, text: str, bounds: tuple[int, ...]) -> Result:
        assert "system_distributed" in text and "LIMIT 1" in text
        if seen.get("probe_error"):
            raise cassandra.Unauthorized(seen["probe_error"])
        token = MIN_TOKEN if bounds == (MAX_TOKEN - 1,) else bounds[1]
        assert len(bounds) == 1 or bounds[0] == token - 1  # one token's range only
        node = next(a for a, t in TOKENS.items() if t == token)
        if node in seen.get("fd_down", ()):
            raise cassandra.Unavailable("Cannot achieve consistency level ALL",
                                        required_replicas=3, alive_replicas=2)
        return Result([])


def gate(peers: FakePeers, **args: Any) -> dict[str, Any]:
    params = {"host": list(peers.views), "nodes": [CASS1], "generations": {CASS1: BEFORE[CASS1]},
              "username": "kairos", "password": SECRET, "interval": 0, "down_grace": 0,
              "timeout": 5, **args}
    with mock.patch.object(cassandra_sync_gate, "build_cluster", peers.build_cluster):
        return run_module("cassandra_sync_gate", params)


@pytest.fixture
def no_sleep() -> Iterator[None]:
    with mock.patch.object(cassandra_sync_gate.time, "sleep", lambda _s: None):
        yield


def test_passes_once_every_peer_sees_the_new_generation_ready(no_sleep: None) -> None:
    peers = FakePeers({
        CASS2: [view(cass1=SHUTDOWN), view(cass1=BOOTING), view(cass1=RESTARTED)],
        CASS3: [view(cass1=SHUTDOWN), view(cass1=RESTARTED)],
    })
    result = gate(peers)
    assert result["conditions"] == {
        "up_normal": True, "schema": True, "hints": True, "failure_detector": True}
    assert result["failure_detector_confirmed"] is True
    assert result["changed"] is False and result["unmet"] == {}
    assert peers.polls == {CASS2: 3, CASS3: 3}  # it waited for the slower peer
    assert all(login["password"] == SECRET for login in peers.logins)
    assert_no_secret(result)


def test_an_old_generation_still_normal_is_not_back(no_sleep: None) -> None:
    # A node killed without a word stays NORMAL in its peers' gossip: only a newer generation
    # proves the restart reached the peer.
    with pytest.raises(ModuleFailed, match=r"127\.0\.0\.1 not caught up") as failed:
        gate(FakePeers({CASS2: [view()], CASS3: [view()]}), timeout=0)
    unmet = failed.value.result["unmet"]
    assert "not newer than" in unmet[CASS2]["up_normal"]
    assert failed.value.result["conditions"]["up_normal"] is False


def test_names_every_unmet_condition_per_peer(no_sleep: None) -> None:
    held = view(cass1=RESTARTED)
    held["hints"] = [{"address": CASS1, "files": 2, "status": "UP"}]
    other = view(cass1={**RESTARTED, "schema": "0f0f0f0f-0000-0000-0000-000000000000"})
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS2: [held], CASS3: [other]}), timeout=0)
    unmet = failed.value.result["unmet"]
    assert unmet[CASS2] == {"hints": "2 hint file(s) for 127.0.0.1"}
    assert "127.0.0.1 has schema 0f0f0f0f" in unmet[CASS3]["schema"]
    assert failed.value.result["conditions"] == {
        "up_normal": True, "schema": False, "hints": False, "failure_detector": True}
    assert "2 hint file(s) for 127.0.0.1" in str(failed.value)


def test_a_peer_holding_hints_that_sees_the_node_down_is_not_done(no_sleep: None) -> None:
    held = view(cass1=RESTARTED)
    held["hints"] = [{"address": CASS1, "files": 0, "status": "DOWN"}]
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS2: [held], CASS3: [view(cass1=RESTARTED)]}), timeout=0)
    assert "DOWN in its failure detector" in failed.value.result["unmet"][CASS2]["up_normal"]


def test_a_dead_peer_fails_fast_once_the_live_peers_see_the_node_back(no_sleep: None) -> None:
    peers = FakePeers({
        CASS2: [view(cass1=SHUTDOWN), view(cass1=BOOTING), view(cass1=RESTARTED)],
        CASS3: [None],
    })
    with pytest.raises(ModuleFailed, match=r"127\.0\.0\.3 down outside the batch") as failed:
        gate(peers, timeout=60)
    assert failed.value.result["down"] == [CASS3]
    assert peers.polls[CASS2] == 3  # not before cass2 saw cass1 serving again
    assert_no_secret(failed.value.result)


def test_a_busy_peer_is_waited_for_not_counted_down(no_sleep: None) -> None:
    # Saturated, a node queues the gate's reads behind its clients' and they time out: that
    # node is there. It holds the gate, and is never a fast "down outside the batch".
    peers = FakePeers({CASS2: [view(cass1=RESTARTED)],
                       CASS3: ["busy", "busy", view(cass1=RESTARTED)]})
    result = gate(peers, timeout=60)
    assert result["conditions"]["up_normal"] and peers.polls[CASS3] == 3
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS2: [view(cass1=RESTARTED)], CASS3: ["busy"]}), timeout=0)
    assert "down outside the batch" not in str(failed.value)
    assert failed.value.result["unmet"][CASS3] == {
        "up_normal": "busy: no CQL answer within 5 s"}


def test_only_timeouts_make_a_peer_busy() -> None:
    timeout = cassandra.OperationTimedOut(errors="Client request timeout")
    assert cassandra_sync_gate.timed_out(timeout)
    assert cassandra_sync_gate.timed_out(
        cassandra.cluster.NoHostAvailable("Unable to connect", {CASS3: timeout}))
    assert not cassandra_sync_gate.timed_out(
        cassandra.cluster.NoHostAvailable("Unable to connect", {CASS3: ConnectionRefusedError()}))
    assert not cassandra_sync_gate.timed_out(OSError("connection refused"))


def test_a_node_down_that_the_guard_counted_is_not_a_failure(no_sleep: None) -> None:
    peers = FakePeers({CASS2: [view(cass1=RESTARTED)], CASS3: [None]})
    result = gate(peers, expected_down=[CASS3])
    assert result["conditions"]["up_normal"] is True


def test_check_mode_waits_for_nothing_more_than_a_normal_run(no_sleep: None) -> None:
    # The rollout passes no generations in check mode (nothing restarted).
    result = gate(FakePeers({CASS2: [view()], CASS3: [view()]}), generations={})
    assert all(result["conditions"].values()) and result["failure_detector_confirmed"]


@pytest.mark.parametrize(("change", "reason"), [
    ({"status_with_port": "shutdown,true"}, "status shutdown"),
    ({"rpc_ready": "false"}, "native transport not ready"),
    ({"status_with_port": "LEAVING,1"}, "status LEAVING"),
])
def test_node_state_names_what_the_peer_sees(change: dict[str, Any], reason: str) -> None:
    row = {**GOSSIP["system_views.gossip_info"][0], **change}
    assert cassandra_sync_gate.node_state(row, None) == reason


def test_node_state_reads_status_when_status_with_port_is_absent() -> None:
    row = {**GOSSIP["system_views.gossip_info"][0], "status_with_port": None,
           "status": "NORMAL,1"}
    assert cassandra_sync_gate.node_state(row, None) == ""
    assert cassandra_sync_gate.node_state(None, None) == "absent from gossip"


def test_peer_addresses_must_pair_with_hosts() -> None:
    with pytest.raises(ModuleFailed, match="one listen address per host"):
        gate(FakePeers({CASS2: [view()], CASS3: [view()]}), peer_addresses=[CASS2])




def test_hints_a_peer_holds_for_any_live_node_hold_the_gate(no_sleep: None) -> None:
    # cass3 still replays to cass2: the next batch (cass3) must not go down yet.
    replaying = view(cass1=RESTARTED)
    replaying["hints"] = [{"address": CASS2, "files": 1, "status": "UP"}]
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS2: [view(cass1=RESTARTED)], CASS3: [replaying]}), timeout=0)
    assert failed.value.result["unmet"] == {CASS3: {"hints": "1 hint file(s) for 127.0.0.2"}}


def test_a_hint_file_in_dispatch_holds_the_gate_though_pending_hints_lists_none(
    no_sleep: None,
) -> None:
    # cass3 dispatches its last file to cass2: off its queue, so pending_hints shows 0 files.
    dispatching = view(cass1=RESTARTED)
    dispatching["dispatch"] = [{"active_tasks": 1, "pending_tasks": 0}]
    peers = FakePeers({CASS2: [view(cass1=RESTARTED)],
                       CASS3: [dispatching, dispatching, view(cass1=RESTARTED)]})
    result = gate(peers)
    assert result["conditions"]["hints"] is True and peers.polls[CASS3] == 3
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS2: [view(cass1=RESTARTED)], CASS3: [dispatching]}), timeout=0)
    assert failed.value.result["unmet"] == {
        CASS3: {"hints": "dispatching hints (1 active, 0 queued HintsDispatcher tasks)"}}
    # Tolerating hint files tolerates their dispatch; a Cassandra without the row is not held.
    tolerant = gate(FakePeers({CASS2: [view(cass1=RESTARTED)], CASS3: [dispatching]}),
                    max_hint_files=1)
    assert tolerant["conditions"]["hints"] is True
    unknown = view(cass1=RESTARTED)
    unknown["dispatch"] = []
    assert gate(FakePeers({CASS2: [unknown], CASS3: [unknown]}))["conditions"]["hints"] is True


def test_hints_for_a_node_known_down_are_not_waited_for(no_sleep: None) -> None:
    held = view()
    held["hints"] = [{"address": CASS3, "files": 4, "status": "DOWN"}]
    result = gate(FakePeers({CASS1: [held], CASS2: [held], CASS3: [None]}), nodes=[],
                  generations={}, expected_down=[CASS3])
    assert result["conditions"] == {"up_normal": True, "schema": True, "hints": True}


def test_before_the_first_batch_it_waits_for_hints_only(no_sleep: None) -> None:
    held = view()
    held["hints"] = [{"address": CASS1, "files": 2, "status": "UP"}]
    peers = FakePeers({CASS1: [view()], CASS2: [held, view()], CASS3: [view()]})
    result = gate(peers, nodes=[], generations={})
    assert result["conditions"]["hints"] is True and peers.polls[CASS2] == 2


def test_a_peer_whose_failure_detector_counts_the_node_down_holds_the_gate(
    no_sleep: None,
) -> None:
    # Gossip shows cass1 back, but cass2's coordinator still refuses reads at ALL over its
    # range: the next batch must wait, as for a D in cass2's nodetool status.
    convicted = {**view(cass1=RESTARTED), "fd_down": [CASS1]}
    peers = FakePeers({CASS2: [convicted, convicted, view(cass1=RESTARTED)],
                       CASS3: [view(cass1=RESTARTED)]})
    result = gate(peers)
    assert result["failure_detector_confirmed"] is True and peers.polls[CASS2] == 3
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS2: [convicted], CASS3: [view(cass1=RESTARTED)]}), timeout=0)
    assert failed.value.result["unmet"] == {CASS2: {
        "failure_detector": "127.0.0.1: its failure detector counts a replica down (2 of 3 alive)"}}


def test_a_probe_that_cannot_run_leaves_the_failure_detector_to_nodetool(no_sleep: None) -> None:
    refused = {**view(cass1=RESTARTED), "probe_error": "no SELECT on system_distributed"}
    result = gate(FakePeers({CASS2: [refused], CASS3: [view(cass1=RESTARTED)]}))
    assert result["failure_detector_confirmed"] is False
    assert "127.0.0.2: Unauthorized" in result["failure_detector"]


def test_the_failure_detector_is_not_asked_with_a_node_known_down(no_sleep: None) -> None:
    # A read at ALL needs every replica: with cass3 down it would never be served.
    result = gate(FakePeers({CASS2: [view(cass1=RESTARTED)], CASS3: [None]}),
                  expected_down=[CASS3])
    assert "failure_detector" not in result["conditions"]
    assert result["failure_detector_confirmed"] is False
    assert "nodes outside the batch are down" in result["failure_detector"]


@pytest.mark.parametrize(("token", "bounds"), [
    (3074457345618258602, (3074457345618258601, 3074457345618258602)),
    (MIN_TOKEN, (MAX_TOKEN - 1,)),  # the owner of the minimum token owns the ring's end
])
def test_probe_range_reads_one_token_the_node_owns(token: int, bounds: tuple[int, ...]) -> None:
    query, got = probe_range(token)
    assert got == bounds and query.count("%s") == len(bounds)
    assert tokens_by_node([{"peer": CASS1, "tokens": ["5", "-7"]}, {"peer": CASS2, "tokens": None}]
                          ) == {CASS1: -7}


def test_the_cross_check_asks_every_peer_about_every_other(no_sleep: None) -> None:
    # Before the first batch: cass3's failure detector still counts cass2 down on the first
    # poll (a D in cass3's nodetool status), then sees it back.
    convicted = {**view(), "fd_down": [CASS2]}
    peers = FakePeers({CASS1: [view()], CASS2: [view()], CASS3: [convicted, view()]})
    result = gate(peers, nodes=[], generations={}, cross_check=True)
    assert result["failure_detector_confirmed"] is True and peers.polls[CASS3] == 2
    assert result["conditions"] == {"up_normal": True, "schema": True, "hints": True,
                                    "failure_detector": True}
    # A peer whose gossip shows another leaving is named, with what it sees.
    leaving = view(cass3={"status_with_port": "LEAVING,123"})
    with pytest.raises(ModuleFailed) as failed:
        gate(FakePeers({CASS1: [view()], CASS2: [leaving], CASS3: [view()]}),
             nodes=[], generations={}, cross_check=True, timeout=0)
    assert failed.value.result["unmet"] == {CASS2: {"up_normal": "127.0.0.3: status LEAVING"}}


def test_the_cross_check_is_refused_with_batch_nodes() -> None:
    with pytest.raises(ModuleFailed, match="cross_check is for the gate before the first batch"):
        gate(FakePeers({CASS2: [view()]}), cross_check=True)


def test_it_returns_the_longest_hints_flush_period_of_the_peers(no_sleep: None) -> None:
    """The hint gate waits this long after the pass: each peer flushes on its own period."""
    peers = FakePeers({
        CASS2: [{**view(cass1=RESTARTED), "flush_period": "1500ms"}],
        CASS3: [{**view(cass1=RESTARTED), "flush_period": "2s"}],
    })
    assert gate(peers)["hints_flush_seconds"] == 2.0


def test_without_a_peer_showing_its_flush_period_it_returns_cassandras_default(
    no_sleep: None,
) -> None:
    peers = FakePeers({CASS2: [{**view(cass1=RESTARTED), "flush_period": None}]})
    assert gate(peers)["hints_flush_seconds"] == 10.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("2000ms", 2.0), ("1m", 60.0), ("500us", 0.0005), (" 3 S ", 3.0),
    ("10000", None), ("", None), (None, None), ("2 fortnights", None),
])
def test_duration_seconds_reads_cassandra_yaml_durations(
    text: str | None, seconds: float | None,
) -> None:
    assert cassandra_sync_gate.duration_seconds(text) == seconds


def test_settle_flush_polls_on_for_the_peers_flush_period_after_every_condition_held(
    no_sleep: None,
) -> None:
    """Hints a peer held in its memory buffer when the batch was seen back are in a file a
    flush period later; the wait is timed on the control host, never against a node's clock."""
    import time

    peers = FakePeers({CASS2: [{**view(cass1=RESTARTED), "flush_period": "300ms"}]})
    before = time.time()
    result = gate(peers, settle_flush=True)
    after = time.time()
    assert result["waited_seconds"] >= 0.3 and result["hints_flush_seconds"] == 0.3
    assert before <= result["passed_at"] <= after - 0.3  # when the conditions first held
    assert peers.polls[CASS2] > 1  # it went on polling meanwhile
    assert gate(FakePeers({CASS2: [{**view(cass1=RESTARTED), "flush_period": "300ms"}]})
                )["waited_seconds"] < 0.3  # without settle_flush it passes at once
