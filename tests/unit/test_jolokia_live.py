"""cassandra_live_settings through a node's Jolokia agent (module_utils/kairos_jolokia
LIVE_SETTINGS), and the role's policy that must allow exactly those calls.

The agent is played by a local HTTP server whose answers are the lab's Jolokia 2.3.0 agent's
(tests/unit/fixtures/jolokia/live-settings.json, captured from cass1 under the role's
policy): each setting's read, a write, and the write of a disabled row cache's capacity.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jinja2
import pytest
from ansible.module_utils import kairos_jolokia, kairos_nodetool

from tests.unit import test_jolokia, test_modules_cassandra
from tests.unit.test_jolokia import CAPTURED, FakeAgent, write_config
from tests.unit.test_modules_harness import assert_no_secret, refused, run_module

NODETOOL = test_modules_cassandra.NODETOOL
# The fixtures: the agent as captured, nodetool answering as captured.
agent = test_jolokia.agent
nodetool = test_modules_cassandra.nodetool

LIVE = json.loads((CAPTURED / "live-settings.json").read_text())
REPO = Path(__file__).resolve().parents[2]
MIB = 1048576


class LiveNode:
    """A node's live settings as its agent answers them: the captured reads, with the
    values kept in ``stages``, ``attributes`` and ``caches`` (bytes)."""

    def __init__(self) -> None:
        reads = LIVE["reads"]
        self.stages = {reads[k]["request"]["arguments"][0][0]: list(
            next(iter(reads[k]["value"].values())))
            for k in ("concurrent_reads", "concurrent_writes", "concurrent_counter_writes")}
        self.attributes = {"ConcurrentCompactors": reads["concurrent_compactors"]["value"],
                           "CompactionThroughputMbPerSec": reads["compaction_throughput"]["value"]}
        self.caches = {"KeyCache": reads["key_cache_size"]["value"],
                       "RowCache": reads["row_cache_size"]["value"]}
        self.ignores: set[str] = set()  # what the node accepts but does not take

    def answer(self, request: dict[str, Any]) -> dict[str, Any] | None:
        kind, mbean = request.get("type"), str(request.get("mbean"))
        name = request.get("operation") or request.get("attribute")
        ok = {"request": request, "value": None, "status": 200}
        if kind == "exec" and name == "getConcurrency":
            return dict(ok, value={s: self.stages[s] for s in request["arguments"][0]})
        if kind == "exec" and name == "setConcurrency":
            stage, _, size = request["arguments"]
            if name not in self.ignores:
                self.stages[stage][1] = size
            return ok
        if mbean.startswith("org.apache.cassandra.metrics:type=Cache"):
            scope = re.search(r"scope=(\w+)", mbean)
            return dict(ok, value=self.caches[scope.group(1) if scope else ""])
        if name in self.attributes:
            if kind == "write" and name not in self.ignores:
                self.attributes[str(name)] = request["value"]
            return dict(ok, value=self.attributes[str(name)])
        if kind == "write" and mbean == kairos_jolokia.CACHES:
            if name == "RowCacheCapacityInMB" and self.caches["RowCache"] == 0:
                return copy.deepcopy(LIVE["write_row_cache_disabled"])
            if name not in self.ignores:
                self.caches[str(name).replace("CapacityInMB", "")] = request["value"] * MIB
            return copy.deepcopy(LIVE["write_key_cache"])
        return None


@pytest.fixture
def node(agent: FakeAgent) -> LiveNode:
    live_node = LiveNode()
    drain_and_heap = agent.answer

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        live_answer = live_node.answer(request)
        if live_answer is None:
            return drain_and_heap(request)
        agent.requests.append(request)
        return live_answer

    agent.answer = answer  # type: ignore[method-assign]
    return live_node


def live(agent: FakeAgent, tmp_path: Path, settings: dict[str, Any],
         **kwargs: Any) -> dict[str, Any]:
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    return run_module("cassandra_live_settings", {"nodetool": NODETOOL, "settings": settings,
                                                  "jolokia_config": str(config)}, **kwargs)


def calls(agent: FakeAgent) -> list[tuple[str, str]]:
    return [(r["type"], r.get("operation") or r.get("attribute")) for r in agent.requests]


def test_the_captured_reads_are_what_the_module_asks() -> None:
    assert set(kairos_jolokia.LIVE_SETTINGS) == set(kairos_nodetool.LIVE_SETTERS)
    for key, (request, parse, _) in kairos_jolokia.LIVE_SETTINGS.items():
        captured = LIVE["reads"][key]
        asked = {k: v for k, v in request.items() if k != "mbean"}
        assert {k: v for k, v in captured["request"].items() if k != "mbean"} == asked
        # The agent gives the mbean's keys in its own order.
        assert sorted(captured["request"]["mbean"].split(":")[1].split(",")) == sorted(
            request["mbean"].split(":")[1].split(","))
        assert isinstance(parse(captured["value"]), int)
    assert kairos_jolokia.LIVE_SETTINGS["key_cache_size"][1](
        LIVE["reads"]["key_cache_size"]["value"]) == 25  # 26214400 bytes, as nodetool info's


def test_live_settings_through_the_agent_start_no_jvm(
    agent: FakeAgent, node: LiveNode, nodetool: Any, tmp_path: Path
) -> None:
    result = live(agent, tmp_path, {"concurrent_reads": 64, "key_cache_size": "40MiB",
                                    "compaction_throughput": "32MiB/s"})
    assert result["via"] == "jolokia" and result["changed"] is True
    assert result["before"] == {"concurrent_reads": 32, "key_cache_size": 25,
                                "compaction_throughput": 64}
    assert result["after"] == {"concurrent_reads": 64, "key_cache_size": 40,
                               "compaction_throughput": 32}
    assert nodetool.commands == []
    reads = [("exec", "getConcurrency"), ("read", "Value"),
             ("read", "CompactionThroughputMbPerSec")]
    sets = [("write", "CompactionThroughputMbPerSec"), ("exec", "setConcurrency"),
            ("write", "KeyCacheCapacityInMB")]  # in the order of the keys' names
    assert calls(agent) == reads + sets + reads
    assert node.stages["ReadStage"] == [0, 64]  # the core size left as it was
    assert node.caches == {"KeyCache": 40 * MIB, "RowCache": 0}  # the row cache untouched
    assert_no_secret(result)


def test_settings_already_running_or_checked_write_nothing(
    agent: FakeAgent, node: LiveNode, tmp_path: Path
) -> None:
    same = live(agent, tmp_path, {"concurrent_compactors": 2, "concurrent_writes": 32})
    assert same["changed"] is False and same["changed_keys"] == []
    checked = live(agent, tmp_path, {"concurrent_compactors": 4}, check_mode=True)
    assert checked["changed"] is True and checked["after"] == {"concurrent_compactors": 4}
    assert all(kind != "write" and name != "setConcurrency" for kind, name in calls(agent))
    assert node.attributes["ConcurrentCompactors"] == 2


def test_a_value_the_node_does_not_take_is_refused(
    agent: FakeAgent, node: LiveNode, tmp_path: Path
) -> None:
    node.ignores.add("ConcurrentCompactors")
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    refused("cassandra_live_settings", {"nodetool": NODETOOL, "jolokia_config": str(config),
                                        "settings": {"concurrent_compactors": 4}},
            r"did not take: concurrent_compactors=4 \(is 2\)")


def test_the_agents_refusal_is_told_naming_the_setting(
    agent: FakeAgent, node: LiveNode, tmp_path: Path
) -> None:
    # A disabled row cache cannot be resized live: the node's own reason, as captured.
    config = write_config(tmp_path / "j.properties", agent.server_address[1])
    result = refused("cassandra_live_settings", {
        "nodetool": NODETOOL, "jolokia_config": str(config),
        "settings": {"row_cache_size": "16MiB"}},
        r"cannot set row_cache_size=16 through Jolokia: .*status 500: .*NopCache is not permitted")
    assert_no_secret(result)


def test_without_a_listening_agent_nodetool_reads_each_command_once(
    nodetool: Any, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
        config = write_config(tmp_path / "j.properties", closed.getsockname()[1])
        result = run_module("cassandra_live_settings", {
            "nodetool": NODETOOL, "jolokia_config": str(config),
            "settings": {"key_cache_size": "25MiB", "row_cache_size": "16MiB"}}, check_mode=True)
    assert result["via"] == "nodetool"
    assert nodetool.commands == [["info"]]  # both caches from one nodetool info


def _policy(address: str = "127.0.0.1") -> ET.Element:
    template = (REPO / "roles/cassandra/templates/jolokia-access.xml.j2").read_text()
    text = jinja2.Template(template).render(inventory_hostname="cass1",
                                            cassandra_jolokia_address=address)
    return ET.fromstring(text)


def _allowed(policy: ET.Element) -> dict[str, dict[str, set[str]]]:
    """mbean -> {"read": attributes, "write": attributes, "exec": operations}."""
    allowed: dict[str, dict[str, set[str]]] = {}
    for mbean in policy.iter("mbean"):
        name = str(mbean.findtext("name"))
        entry = allowed.setdefault(name, {"read": set(), "write": set(), "exec": set()})
        for attribute in mbean.iter("attribute"):
            entry["read"].add(str(attribute.text))
            if attribute.get("mode") != "read":
                entry["write"].add(str(attribute.text))
        entry["exec"] |= {str(o.text) for o in mbean.iter("operation")}
    return allowed


def test_the_roles_policy_allows_every_live_call_and_writes_only_the_settings() -> None:
    allowed = _allowed(_policy())
    for key, (read, _, write) in kairos_jolokia.LIVE_SETTINGS.items():
        for request in (read, write(1)):
            name = request.get("operation") or request.get("attribute")
            assert name in allowed.get(request["mbean"], {}).get(request["type"], set()), (
                f"{key}: the policy does not allow {request['type']} {request['mbean']} {name}")
    writable = {(mbean, a) for mbean, entry in allowed.items() for a in entry["write"]}
    # What may be written is exactly the settings (reads of the rest are mode="read" or
    # read-only in the MBean itself).
    assert {(m, a) for m, a in writable if "metrics" in m} == set()
    assert _allowed(_policy("127.0.0.7")) == allowed  # another address adds a host only
