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

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        mbean, kind = request.get("mbean"), request.get("type")
        if kind == "read" and mbean == "java.lang:type=Memory":
            return captured("read-heap.json")
        if kind == "read" and request.get("attribute") == "OperationMode":
            return dict(captured("read-operation-mode.json"), value=self.mode)
        operation = request.get("operation")
        if kind == "exec" and mbean == STORAGE and operation in ("stopGossiping", "drain"):
            if operation == "drain":
                self.mode = self.drained_mode
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
    assert config == {"host": "127.0.0.1", "port": 8778, "user": "kairos", "password": "a\\b=c"}


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
