"""The drain and the heap read-back through a node's Jolokia agent (module_utils/kairos_jolokia).

The agent is played by a local HTTP server that answers as the lab's Jolokia 2.3.0 agent did
under the role's policy (tests/unit/fixtures/jolokia/, captured with curl): a read it allows,
a read the policy forbids (status 403 in the body), a request without the login (HTTP 401).
The fake records each request with its Authorization header, so the tests see what was
called, in which order, with which login, and that nodetool (a JVM per call) never ran.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible.module_utils import kairos_jolokia

from tests.unit import test_modules_cassandra as cassandra_modules
from tests.unit.test_modules_harness import FIXTURES, SECRET, assert_no_secret, refused, run_module

NODETOOL = cassandra_modules.NODETOOL
# The module tests' fixtures: nodetool answering as captured, a listening "JMX port".
nodetool = cassandra_modules.nodetool
jmx_port = cassandra_modules.jmx_port

CAPTURED = FIXTURES / "jolokia"
STORAGE = "org.apache.cassandra.db:type=StorageService"


def captured(name: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads((CAPTURED / name).read_text())
    return answer


class FakeAgent(ThreadingHTTPServer):
    """Answers POST /jolokia/ like the lab's agent under the role's policy."""

    def __init__(self, user: str, password: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.login = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.requests: list[dict[str, Any]] = []
        self.mode = "NORMAL"
        self.drained_mode = "DRAINED"  # what the node says after a drain
        self.gossip_running = True
        self.rejoins = True  # False: startGossiping leaves gossip stopped
        self.allows_start = True  # False: a policy written before it allowed startGossiping
        self.on_leave: Any = None  # called when the node leaves gossip

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        mbean, kind = request.get("mbean"), request.get("type")
        if kind == "read" and mbean == "java.lang:type=Memory":
            return captured("read-heap.json")
        if kind == "read" and request.get("attribute") == "OperationMode":
            return dict(captured("read-operation-mode.json"), value=self.mode)
        if kind == "read" and request.get("attribute") == "GossipRunning" and self.allows_start:
            return dict(captured("read-gossip-running.json"), value=self.gossip_running)
        operation = request.get("operation")
        allowed = ("stopGossiping", "drain") + (("startGossiping",) if self.allows_start else ())
        if kind == "exec" and mbean == STORAGE and operation in allowed:
            if operation == "drain":
                self.mode = self.drained_mode
            if operation == "stopGossiping":
                self.gossip_running = False
                if self.on_leave:
                    self.on_leave()
            if operation == "startGossiping":
                self.gossip_running = self.rejoins
            # An exec of a void operation: value null, status 200 (Jolokia's protocol).
            return {"request": request, "value": None, "status": 200, "timestamp": 1795612955}
        return captured("read-forbidden.json")


class _Handler(BaseHTTPRequestHandler):
    server: FakeAgent

    def do_POST(self) -> None:
        if self.headers.get("Authorization") != self.server.login:
            # As captured in unauthorized.http: 401, a Basic challenge, no body.
            self.send_response(401)
            self.send_header("Www-authenticate", 'Basic realm="jolokia", charset="UTF-8"')
            self.send_header("Content-length", "0")
            self.end_headers()
            return
        body = json.dumps(self.server.answer(json.loads(self.rfile.read(
            int(self.headers["Content-Length"]))))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain;charset=utf-8")
        self.send_header("Content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def agent() -> Iterator[FakeAgent]:
    server = FakeAgent("kairos", SECRET)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def write_config(path: Path, port: int, password: str = SECRET) -> Path:
    """The properties file as roles/cassandra/templates/jolokia.properties.j2 renders it."""
    path.write_text(
        "# Jolokia JVM agent of cass1, written by Kairos\n"
        f"host=127.0.0.1\nport={port}\ndiscoveryEnabled=false\n"
        "policyLocation=file:///srv/lab/cass1/conf/jolokia-access.xml\n"
        f"user=kairos\npassword={password}\n"
    )
    return path


def test_read_config_takes_the_login_and_unescapes_backslashes(tmp_path: Path) -> None:
    config = kairos_jolokia.read_config(write_config(tmp_path / "j.properties", 8778, "a\\\\b=c"))
    assert config == {"host": "127.0.0.1", "port": 8778, "user": "kairos", "password": "a\\b=c",
                      "tls": {}}


@pytest.mark.parametrize("text, problem", [
    ("host=127.0.0.1\n", "port must be an integer"),
    ("port=eighty\n", "port must be an integer"),
    ("port=8778\njust words\n", "not a key=value line"),
])
def test_read_config_names_the_file_and_the_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "j.properties"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as raised:
        kairos_jolokia.read_config(str(path))
    assert str(path) in str(raised.value)


def test_drain_through_the_agent_starts_no_jvm_and_checks_the_node_drained(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    result = run_module("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": jmx_port,
                                            "quiesce_seconds": 0.05, "jolokia_config": str(config)})
    assert result["drained"] is True and result["via"] == "jolokia"
    assert nodetool.commands == []
    calls = [(r["type"], r.get("operation") or r.get("attribute")) for r in agent.requests]
    assert calls == [("exec", "stopGossiping"), ("exec", "drain"), ("read", "OperationMode")]
    assert 0.05 <= result["phases"][1] < 1
    assert_no_secret(result)


def test_a_drain_the_node_does_not_confirm_fails(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int
) -> None:
    agent.drained_mode = "DRAINING"
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    result = refused("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": jmx_port,
                                         "quiesce_seconds": 0, "jolokia_config": str(config)},
                     "the node's operation mode is DRAINING")
    assert_no_secret(result)


def test_a_wrong_login_fails_without_showing_the_password(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1], password="wrong-one")
    result = refused("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": jmx_port,
                                         "quiesce_seconds": 0, "jolokia_config": str(config)},
                     "stopGossiping: HTTP 401 Unauthorized")
    assert "wrong-one" not in json.dumps(result) and nodetool.commands == []


def test_a_node_started_without_the_agent_is_drained_with_nodetool(
    nodetool: Any, tmp_path: Path, jmx_port: int
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
        config = write_config(tmp_path / "j.properties", closed.getsockname()[1])
        result = run_module("cassandra_drain", {
            "nodetool": NODETOOL, "jmx_port": jmx_port, "quiesce_seconds": 0,
            "jolokia_config": str(config),
        })
    assert result["via"] == "nodetool"
    assert nodetool.commands == [["disablegossip"], ["drain"]]


def test_an_unreadable_agent_config_is_refused_naming_it(
    nodetool: Any, tmp_path: Path, jmx_port: int
) -> None:
    missing = tmp_path / "nowhere.properties"
    refused("cassandra_drain", {"nodetool": NODETOOL, "jmx_port": jmx_port,
                                "jolokia_config": str(missing)},
            f"jolokia_config: cannot read {missing}")
    assert nodetool.commands == []


def test_readback_reads_the_heap_from_the_agent(
    agent: FakeAgent, nodetool: Any, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    result = run_module("cassandra_settings_readback", {
        "host": "127.0.0.1", "heap": "512M", "nodetool": NODETOOL, "jolokia_config": str(config),
    })
    assert result["readback"] == {"heap_mb": 512.0}  # 536870912 bytes, as captured
    assert nodetool.commands == []
    refused("cassandra_settings_readback", {
        "host": "127.0.0.1", "heap": "1G", "nodetool": NODETOOL, "jolokia_config": str(config),
    }, "heap: expected 1G, the JVM runs 512.0 MB")


def test_a_request_the_policy_forbids_fails_with_the_agents_reason(agent: FakeAgent) -> None:
    config = {"host": "127.0.0.1", "port": agent.server_address[1], "user": "kairos",
              "password": SECRET}
    with pytest.raises(kairos_jolokia.JolokiaError, match=r"status 403: .*LiveNodes is forbidden"):
        kairos_jolokia.read_attribute(config, STORAGE, "LiveNodes")


# ----------------------------------------- a peer dies before the drain has begun
@pytest.fixture
def peer() -> Iterator[socket.socket]:
    """A peer's storage port, listening on 127.0.0.2 (close it: the peer's process died)."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen()
    yield listener
    listener.close()


def drain_watching(
    config: Path, peer: socket.socket, jmx_port: int, **extra: Any
) -> dict[str, Any]:
    return {"nodetool": NODETOOL, "jmx_port": jmx_port, "quiesce_seconds": 1.0,
            "jolokia_config": str(config), "peers": {"cass2": "127.0.0.2"},
            "peer_port": peer.getsockname()[1], **extra}


def test_peers_that_answer_throughout_do_not_stop_the_drain(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int, peer: socket.socket
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    result = run_module("cassandra_drain", drain_watching(config, peer, jmx_port))
    assert result["drained"] is True
    assert 1.0 <= result["phases"][1] < 2  # the whole pause, probing as it went


def test_a_peer_dead_before_the_drain_stops_it_before_anything_is_done(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int, peer: socket.socket
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    args = drain_watching(config, peer, jmx_port)
    peer.close()
    result = refused("cassandra_drain", args, "cass2 stopped answering on its storage port "
                     "before the drain began; nothing was done")
    assert result["peers_down"] == ["cass2"] and result["drained"] is False
    assert agent.requests == [] and nodetool.commands == []


def test_a_peer_dying_in_the_pause_puts_the_node_back_in_gossip_and_reads_it_back(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int, peer: socket.socket
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    agent.on_leave = peer.close  # the peer dies while the node leaves gossip
    result = refused("cassandra_drain", drain_watching(config, peer, jmx_port),
                     "during the drain's pause; the node joined gossip again "
                     r"\(StorageService startGossiping, read back running\)")
    calls = [(r["type"], r.get("operation") or r.get("attribute")) for r in agent.requests]
    assert calls == [("exec", "stopGossiping"), ("exec", "startGossiping"),
                     ("read", "GossipRunning")]  # never drained
    assert result["rejoined"] is True and result["peers_down"] == ["cass2"]
    assert result["phases"][1] < 1.0  # stopped at the first probe, not after the pause
    assert agent.gossip_running and nodetool.commands == []
    assert_no_secret(result)


def test_a_node_whose_gossip_does_not_come_back_says_a_person_must_look(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int, peer: socket.socket
) -> None:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    agent.on_leave, agent.rejoins = peer.close, False
    result = refused("cassandra_drain", drain_watching(config, peer, jmx_port),
                     "the node's gossip is NOT running: it serves no peer; a person must look")
    assert result["rejoined"] is False


def test_a_policy_without_start_gossiping_rejoins_through_nodetool(
    agent: FakeAgent, nodetool: Any, tmp_path: Path, jmx_port: int, peer: socket.socket
) -> None:
    """A node whose agent still runs an older policy (403 for startGossiping)."""
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    agent.on_leave, agent.allows_start = peer.close, False
    refused("cassandra_drain", drain_watching(config, peer, jmx_port),
            r"the node joined gossip again \(nodetool enablegossip, read back running\)")
    assert nodetool.commands == [["enablegossip"], ["statusgossip"]]


def test_a_nodetool_that_fails_to_rejoin_still_names_the_dead_peer(
    nodetool: Any, tmp_path: Path, jmx_port: int, peer: socket.socket
) -> None:
    """No agent, and nodetool enablegossip fails: the result still names the dead peer (the
    rescue counts it as down) and says a person must look."""
    def failing(_module: Any, argv: list[str], **_: Any) -> tuple[int, str, str]:
        nodetool.commands.append(argv[1:])
        if argv[1] == "disablegossip":
            peer.close()  # the peer dies while the node leaves gossip
            return 0, "", ""
        return 1, "", "nodetool: Failed to connect to '127.0.0.1:7199'"

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # the agent's port, bound and not listening: nodetool
        config = write_config(tmp_path / "j.properties", closed.getsockname()[1])
        with mock.patch("ansible.module_utils.basic.AnsibleModule.run_command", failing):
            result = refused("cassandra_drain", drain_watching(config, peer, jmx_port),
                             r"after nodetool enablegossip \(rc=1: nodetool: Failed to connect"
                             r".*NOT running.*a person must look")
    assert result["peers_down"] == ["cass2"] and result["rejoined"] is False
    assert nodetool.commands == [["disablegossip"], ["enablegossip"]]
