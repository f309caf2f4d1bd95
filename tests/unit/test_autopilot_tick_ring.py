"""The autopilot's Cassandra re-plan reads the live ring and plans on it (docs/autopilot.md).

Runs the real playbooks/autopilot.yml with ansible-playbook, nothing contacted: ``kairos``
is a wrapper that records its argv, and
``cassandra_cluster_facts`` is a stand-in module (first on ANSIBLE_LIBRARY) that writes a
ring description where it is told to, or fails as the real one does when no node answers.
The tick and the record are the real ``kairos`` (only collection and the executor are
stand-ins). What is checked: the tick gets the ring just read, plans on it (its nodes, the
CL) and hands the executor the step and the inventory's ``kairos_tables``; and, when the
ring cannot be read, no forecast, no plan, and the reason in autopilot.log.jsonl.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from planner.workload.series import WorkloadSeries, save_trace

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOSTS = {"cass1": "127.0.0.251", "cass2": "127.0.0.252", "cass3": "127.0.0.253"}
RING_ERROR = "['127.0.0.251', '127.0.0.252', '127.0.0.253']: cannot read the cluster's metadata: "
RING_ERROR += "('Unable to connect to any servers', {})"

FAKE_KAIROS = r'''#!{python}
"""Stand-in for kairos (and the executor's ansible-playbook): record argv; collection is
answered here (no node to read), every other command is the real kairos."""
import json, os, sys
from pathlib import Path

tmp = Path(os.environ["FAKE_DIR"])
argv = sys.argv[1:]
with (tmp / "calls.jsonl").open("a") as handle:
    handle.write(json.dumps(argv) + "\n")
if argv[0] == "collect":
    print("collected 1 new sample(s)")
elif argv[0].startswith("--inventory="):
    print("the executor: done")
else:  # the kairos of the repository under test, whichever one the venv's script imports
    sys.path.insert(0, {repo!r})
    from planner.cli import main
    sys.exit(main(argv))
'''

FAKE_FACTS = r'''#!{python}
"""Stand-in for cassandra_cluster_facts: write a ring where told to, or fail as the real one."""
import json, os
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec=dict(
    host=dict(type="list", elements="str", required=True), port=dict(type="int", default=9042),
    hosts=dict(type="dict", default={{}}), keyspaces=dict(type="list", elements="str"),
    dest=dict(type="path"), username=dict(type="str"), password=dict(type="str", no_log=True),
    timeout=dict(type="float", default=20), tls=dict(type="dict", default={{}})),
    supports_check_mode=True)
tmp = os.environ["FAKE_DIR"]
with open(os.path.join(tmp, "facts-args.json"), "w") as handle:
    json.dump({{k: module.params[k] for k in ("host", "hosts", "keyspaces", "dest")}}, handle)
if os.environ.get("FAKE_RING_FAILS") == "1":
    module.fail_json(msg={error!r})
names = module.params["hosts"]
ring = {{
    "nodes": [{{"host": name, "address": addr, "dc": "dc1", "rack": "rack1"}}
              for addr, name in sorted(names.items())],
    "keyspaces": {{"shop": {{"replication": {{"class": "NetworkTopologyStrategy", "dc1": "3"}}}}}},
    "token_ranges": [{{"start": 0, "end": 1, "replicas": {{"shop": sorted(names.values())}}}}],
}}
with open(module.params["dest"], "w") as handle:
    json.dump(ring, handle)
module.exit_json(changed=False, ring=ring, down=[], nodes=[], schema_versions={{}},
                 schema_agreement=True)
'''


def setup(tmp: Path, *, all_vars: dict[str, Any], cassandra_vars: dict[str, Any]) -> Path:
    """An inventory of three Cassandra hosts (no Redis), the stand-ins, a trace file."""
    inventory = tmp / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "cassandra": {"hosts": {h: {"cassandra_listen_address": a} for h, a in HOSTS.items()}},
        "redis": {},
    }}}))  # fmt: skip
    (inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "kairos_cluster_name": "lab",
        **all_vars,
    }))  # fmt: skip
    if cassandra_vars:
        (inventory / "group_vars" / "cassandra.yml").write_text(yaml.safe_dump(cassandra_vars))
    (tmp / "plans").mkdir()
    (tmp / "lib").mkdir()
    for path, text in ((tmp / "kairos", FAKE_KAIROS),
                       (tmp / "lib" / "cassandra_cluster_facts.py", FAKE_FACTS),
                       (tmp / "ansible-playbook", FAKE_KAIROS)):
        path.write_text(text.format(python=sys.executable, error=RING_ERROR, repo=str(REPO)))
        path.chmod(0o755)
    trace(tmp / "trace.csv")
    return inventory


def trace(path: Path) -> None:
    """A read-heavy then write-heavy trace ending a minute ago: a step is due now."""
    n, step = 40, 20.0
    read = np.where(np.arange(n) < 20, 0.1, 0.9)
    save_trace(WorkloadSeries(
        engine="cassandra", timestamps=time.time() - 60.0 - step * (n - 1 - np.arange(n)),
        load=np.full(n, 300.0), mix={"read": read, "update": 1 - read, "insert": np.zeros(n),
                                     "scan": np.zeros(n)}, step_seconds=step), path)


def tick(tmp: Path, inventory: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "playbooks/autopilot.yml",
         "-e", f"kairos_cli={tmp / 'kairos'}", "-e", f"kairos_state_dir={tmp / 'state'}",
         "-e", f"kairos_autopilot_dir={tmp}", "-e", f"kairos_autopilot_trace={tmp / 'trace.csv'}",
         "-e", f"kairos_autopilot_ansible_playbook={tmp / 'ansible-playbook'}",
         "-e", "kairos_autopilot_forecast_model=naive", "-e", "kairos_autopilot_horizon=30",
         "-e", '{"kairos_autopilot_plan_options": {"method": "dp"}}', *extra],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, FAKE_DIR=str(tmp), ANSIBLE_FORCE_COLOR="0",
                 ANSIBLE_LIBRARY=f"{tmp / 'lib'}:{REPO / 'library'}", **env),
    )  # fmt: skip


def calls(tmp: Path, command: str) -> list[list[str]]:
    lines = (tmp / "calls.jsonl").read_text().splitlines()
    return [argv for argv in map(json.loads, lines) if argv[0] == command]


def logged(tmp: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp / "autopilot.log.jsonl").read_text().splitlines()]


def tick_inputs(tmp: Path) -> dict[str, Any]:
    """The document the playbook gave the (first) tick: ``kairos autopilot tick --inputs``
    (after its ``--check``, before the collection)."""
    check, argv = calls(tmp, "autopilot")[:2]
    assert check[:3] == ["autopilot", "tick", "--inputs"] and check[4:] == ["--check"], check
    assert argv[:3] == ["autopilot", "tick", "--inputs"] and len(argv) == 4, argv
    return dict(json.loads(Path(argv[3]).read_text()))


def after(argv: list[str], flag: str) -> str:
    assert flag in argv, argv
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(
    ("all_vars", "cassandra_vars", "tables"),
    [
        ({"kairos_tables": ["shop.orders", "shop.items"]}, {}, "shop.orders,shop.items"),
        ({}, {"kairos_tables": ["shop.orders"]}, "shop.orders"),
        ({}, {}, None),
    ],
    ids=["tables-in-group_vars-all", "tables-in-group_vars-cassandra", "no-tables"],
)
def test_the_tick_plans_on_the_live_ring_with_the_inventory_s_tables(
    tmp_path: Path, all_vars: dict[str, Any], cassandra_vars: dict[str, Any], tables: str | None
) -> None:
    inventory = setup(tmp_path, all_vars=all_vars, cassandra_vars=cassandra_vars)

    run = tick(tmp_path, inventory)

    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    ring_read = str(tmp_path / "lab-cassandra-ring.json")
    facts = json.loads((tmp_path / "facts-args.json").read_text())
    assert facts["dest"] == ring_read
    assert facts["host"] == list(HOSTS.values())
    assert facts["hosts"] == {a: h for h, a in HOSTS.items()}
    assert facts["keyspaces"] is None  # every non-system keyspace, as the pre-flight reads it
    ring_given = tick_inputs(tmp_path)["ring"]
    assert ring_given["file"] == ring_read and ring_given["live"] in (True, "True")
    assert ring_given["read"] in (True, "True")
    (line,) = logged(tmp_path)
    assert line["outcome"] == "applied" and line["replanned"], line
    # The plan was made on that ring (kept beside it) with the inventory's tables and the CL.
    plan_file = Path(line["plan"])
    plan = yaml.safe_load(plan_file.read_text())
    ring = Path(str(plan_file).removesuffix(".yml") + ".ring.json")
    assert json.loads(ring.read_text())["nodes"][0]["host"] == "cass1"
    assert plan["availability"]["consistency_level"] == "QUORUM", plan["availability"]
    assert {h for step in plan["steps"] for batch in step["batches"] for h in batch} <= set(HOSTS)
    assert plan["steps"], "a step is due on this trace"
    # The executor gets the step and the tables the plan was made for.
    (executor,) = [argv for argv in map(json.loads, (tmp_path / "calls.jsonl").read_text()
                                        .splitlines()) if argv[0].startswith("--inventory=")]
    extra = json.loads(after(executor, "--extra-vars"))
    assert extra["step"] == line["step"] and extra["plan"] == line["plan"]
    if tables is None:
        assert "kairos_tables" not in extra
    else:
        assert extra["kairos_tables"] == tables.split(",")


def test_the_inventory_s_measured_change_costs_price_the_plan(tmp_path: Path) -> None:
    from planner.model.change_cost import ChangeCost, merge_entry

    costs = tmp_path / "change-costs.json"
    merge_entry(costs, ChangeCost(
        parameter="compaction", before="SizeTieredCompactionStrategy",
        after="LeveledCompactionStrategy", change_seconds=55.0, rewrite_seconds=140.0,
        apply_seconds=20.0, baseline_ops_per_s=400.0, steady_ops_per_s=420.0))
    # Read on the control host, as the restart costs are: group_vars/all.
    inventory = setup(tmp_path, all_vars={"kairos_cassandra_change_costs_file": str(costs)},
                      cassandra_vars={})

    run = tick(tmp_path, inventory)

    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert tick_inputs(tmp_path)["plan"]["change_costs"] == str(costs)
    (line,) = logged(tmp_path)
    cost_model = yaml.safe_load(Path(line["plan"]).read_text())["provenance"]["cost_model"]
    assert cost_model["compaction_seconds_source"].startswith(
        f"measured: {costs} (compaction SizeTiered -> Leveled 55 s over a 140-s rewrite)")


def test_an_unreadable_ring_means_no_plan_and_the_reason_is_logged(tmp_path: Path) -> None:
    inventory = setup(tmp_path, all_vars={}, cassandra_vars={})

    run = tick(tmp_path, inventory, FAKE_RING_FAILS="1")

    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    assert "the autopilot tick failed for cassandra" in out, out[-4000:]
    ring_given = tick_inputs(tmp_path)["ring"]
    assert ring_given["read"] in (False, "False") and ring_given["error"] == RING_ERROR
    assert list((tmp_path / "plans").iterdir()) == []  # no forecast, no plan
    (line,) = logged(tmp_path)
    assert line["outcome"] == "replan-failed", line
    assert line["message"] == (
        "Decide, re-plan when due, adopt: kairos autopilot: error: refusing to plan cassandra: "
        f"cannot read the live ring: {RING_ERROR}"
    ), line
    assert not (tmp_path / "state" / "lab-autopilot.lock").exists()  # released
    assert calls(tmp_path, "metrics") == []  # no kairos_autopilot_metrics_textfile: none


def test_the_tick_refreshes_the_metrics_textfile_after_releasing_its_lock(
        tmp_path: Path) -> None:
    inventory = setup(tmp_path, all_vars={}, cassandra_vars={})
    textfile = tmp_path / "node-exporter" / "kairos.prom"
    textfile.parent.mkdir()

    run = tick(tmp_path, inventory, "-e", f"kairos_autopilot_metrics_textfile={textfile}")

    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    (argv,) = calls(tmp_path, "metrics")
    assert after(argv, "--state-dir") == str(tmp_path)
    assert after(argv, "--apply-state-dir") == str(tmp_path / "state")
    assert after(argv, "--cluster") == "lab" and after(argv, "--textfile") == str(textfile)
    assert "--engine=cassandra" in argv and not any("redis" in a for a in argv)
    text = textfile.read_text()
    assert 'kairos_lock_held{cluster="lab",lock="autopilot"} 0' in text  # released first
    assert 'kairos_autopilot_last_outcome{cluster="lab",engine="cassandra",outcome="applied"} 1' \
        in text
    assert 'kairos_plan_step_status{cluster="lab",engine="cassandra",status="applied",' in text

