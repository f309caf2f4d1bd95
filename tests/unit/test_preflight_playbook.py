"""The pre-flight's judgement as Ansible runs it: the role's judge tasks and the skeleton's.

A playbook made here from the tasks as they are written - the cassandra role's "Judge" and
"Publish" tasks (roles/cassandra/tasks/rollout_preflight.yml) and the shared rollout's
"Keep this node's refusals" and "Refuse unless" (playbooks/rollout.yml) - runs on three
local hosts standing in for cass1..cass3. The reads before them are the real modules where
they need no cluster (cassandra_node_gate on a hints directory, cassandra_ring_status on a
captured nodetool status) registered with ``failed_when: false`` as the role does, and the
ring read a given result. Pins the two past bugs of the Jinja judgement: e10c706 (a held
hint file let the rollout go on) and 7cee3d8 (a refusal on one node did not stop the others).
The redis role's judge tasks run the same way on registered results given as host variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
STATUS = REPO / "tests" / "unit" / "fixtures" / "nodetool" / "status_3_UN.txt"
HOSTS = ["cass1", "cass2", "cass3"]
REFUSED = "pre-flight refused, nothing was touched: "


def judge_play(tmp_path: Path) -> Path:
    role = yaml.safe_load((REPO / "roles/cassandra/tasks/rollout_preflight.yml").read_text())
    block = next(t for t in role if "block" in t)["block"]
    judge = [t for t in block if t["name"].startswith(("Judge", "Publish"))]
    keep = skeleton_tasks()
    assert len(judge) == 2
    nodetool = tmp_path / "nodetool"
    nodetool.write_text(f"#!/bin/sh\ncat {STATUS}\n")
    nodetool.chmod(0o755)
    reads = [
        {"name": "Read the hint files this node holds for the others",
         "cassandra_node_gate": {
             "nodetool": "/bin/false", "checks": ["hints"], "timeout": 0, "host_ids": ["h2"],
             "node": "{{ groups['cassandra'] | reject('eq', inventory_hostname) | join(', ') }}",
             "hints_directory": f"{tmp_path}/hints/{{{{ inventory_hostname }}}}"},
         "register": "__cassandra_preflight_hint_files", "failed_when": False},
        {"name": "Read the ring from this node",
         "cassandra_ring_status": {"nodetool": str(nodetool)},
         "register": "__cassandra_preflight_view", "failed_when": False},
    ]
    play = {
        "name": "Judge", "hosts": "cassandra", "gather_facts": False,
        "vars": {
            "kairos_engine": "cassandra",
            "__refusal": "{{ lookup('ansible.builtin.vars', kairos_engine ~ '_rollout_refusal',"
                         " default=[]) }}",
            "kairos_rollout": {"hosts_in_order": HOSTS, "batch_sizes": [1, 1, 1]},
            "__cassandra_preflight_facts": "{{ ring_read }}",
            "__cassandra_preflight_check": {"changed": False, "skipped": True},
            "__cassandra_preflight_hints": {"changed": False, "skipped": True},
        },
        "tasks": [*reads, {"name": "The role's judgement", "block": judge}, *keep,
                  {"name": "Go on", "ansible.builtin.debug": {"msg": "every node goes on"}}],
    }
    path = tmp_path / "judge.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    for host in HOSTS:
        (tmp_path / "hints" / host).mkdir(parents=True, exist_ok=True)
    return path


def skeleton_tasks() -> list[dict[str, Any]]:
    skeleton = yaml.safe_load((REPO / "playbooks/rollout.yml").read_text())[0]
    keep = [t for t in skeleton["tasks"]
            if t["name"].startswith(("Keep this node's refusals", "Refuse unless"))]
    assert len(keep) == 2
    return keep


def inventory(tmp_path: Path, group: str, hosts: dict[str, dict[str, Any]]) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {group: {
        "hosts": hosts,
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
    }}}}))
    return path


def playbook(inventory: Path, play: Path, extra: dict[str, Any], *options: str) -> str:
    proc = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), str(play), "-e", json.dumps(extra), *options],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )
    return proc.stdout + proc.stderr


def run(tmp_path: Path, ring_read: dict[str, Any], *options: str) -> str:
    tmp_path.mkdir(exist_ok=True)
    hosts = inventory(tmp_path, "cassandra", {host: {} for host in HOSTS})
    return playbook(hosts, judge_play(tmp_path), {"ring_read": ring_read}, *options)


#: cassandra_cluster_facts' result on a whole cluster (the ring itself left out).
WHOLE = {"changed": False, "down": [], "host_ids": {"127.0.0.2": "h2"},
         "schema_agreement": True, "schema_versions": {"v1": HOSTS},
         "ring": {"nodes": [], "token_ranges": []}, "generations": {}}


def test_a_whole_cluster_goes_on_on_every_node(tmp_path: Path) -> None:
    out = run(tmp_path, WHOLE)
    assert out.count("msg: every node goes on") == 3, out[-3000:]
    assert REFUSED not in out


@pytest.mark.parametrize("check", [False, True])
def test_regressions_e10c706_and_7cee3d8_a_hint_file_one_node_holds_stops_every_node(
    tmp_path: Path, check: bool
) -> None:
    (tmp_path / "hints" / "cass1").mkdir(parents=True)
    (tmp_path / "hints" / "cass1" / "h2-1795700000000-2.hints").touch()
    out = run(tmp_path, WHOLE, *(["--check"] if check else []))
    # The messages tests/integration/test_apply_plan.py looks for, on every node.
    assert f"{REFUSED}cass1: node cass2, cass3 not caught up" in out, out[-3000:]
    assert "1 hint file(s) for cass2, cass3" in out
    assert out.count(f"msg: '{REFUSED}") == 3 and "every node goes on" not in out, out[-3000:]


def test_an_unreadable_ring_and_a_dead_node_are_named(tmp_path: Path) -> None:
    unreadable = {"changed": False, "msg": "127.0.0.1: cannot connect to 127.0.0.1:9042 over "
                  "CQL: AuthenticationFailed('Failed to authenticate')"}
    out = run(tmp_path, unreadable)
    assert f"{REFUSED}cannot read the live ring: 127.0.0.1: cannot connect" in out, out[-3000:]
    out = run(tmp_path / "dead", {**WHOLE, "down": ["cass3"]})
    assert f"{REFUSED}down: cass3" in out, out[-3000:]


def test_the_redis_judgement_names_the_node_that_drifted_and_stops_every_node(
    tmp_path: Path,
) -> None:
    role = yaml.safe_load((REPO / "roles/redis/tasks/rollout_preflight.yml").read_text())
    judge = [t for t in role if t["name"].startswith(("Judge", "Publish"))]
    assert len(judge) == 2
    play = tmp_path / "judge.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Judge", "hosts": "redis", "gather_facts": False,
        "vars": {"kairos_engine": "redis",
                 "__refusal": "{{ lookup('ansible.builtin.vars', kairos_engine ~ "
                              "'_rollout_refusal', default=[]) }}",
                 "__redis_preflight_order": {"changed": False, "skipped": True}},
        "tasks": [*judge, *skeleton_tasks(),
                  {"name": "Go on", "ansible.builtin.debug": {"msg": "every node goes on"}}],
    }], sort_keys=False))
    # redis_replication_facts (run once) and redis_live_config (per node, failed_when: false).
    topology = {"changed": False, "down": [], "unmet": {}, "cluster_state": "ok",
                "nodes": {"redis1": {"up": True, "role": "primary"}}}
    runs = {"changed": False, "before": {"hz": "10"}, "changed_keys": []}
    drifted = {"changed": False, "failed": False, "failed_when_result": False,
               "msg": "127.0.0.1:7002: the node does not run the expected values: hz=11 (runs 10)",
               "before": {"hz": "10"}, "drift": {"hz": {"expected": "11", "running": "10"}}}
    hosts = {f"redis{i}": {"__redis_preflight_facts": topology,
                           "__redis_preflight_config": drifted if i == 2 else runs}
             for i in (1, 2, 3)}
    out = playbook(inventory(tmp_path, "redis", hosts), play, {})
    assert (f"{REFUSED}redis2: 127.0.0.1:7002: the node does not run the expected values: "
            "hz=11 (runs 10)") in out, out[-3000:]
    assert out.count(f"msg: '{REFUSED}redis2: ") == 3, out[-3000:]
    hosts["redis2"]["__redis_preflight_config"] = runs
    out = playbook(inventory(tmp_path, "redis", hosts), play, {})
    assert out.count("msg: every node goes on") == 3, out[-3000:]
