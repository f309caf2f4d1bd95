"""playbooks/change_settings_redis.yml's one-step rollout: the argv its task renders, run
through the real `kairos rollout adhoc`. With ``kairos_restart_all`` every node restarts
(through the failover path) even for live directives: a restart reloads the data, which
is what re-encodes keys written under an earlier listpack threshold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.cli import main

REPO = Path(__file__).resolve().parents[2]
HOSTS = [f"redis{i}" for i in range(1, 7)]


def trusted(value: Any) -> Any:
    """``value`` with every string in it marked a template, as the playbook's own are."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(v) for v in value]
    return value


def rendered_argv(tmp_path: Path, **variables: Any) -> list[str]:
    """The `kairos` argv the playbook's "Ask the planner" task renders with ``variables``."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    play = yaml.safe_load((REPO / "playbooks/change_settings_redis.yml").read_text())
    tasks = [t for p in play for t in p.get("tasks", [])]
    block = next(t for t in tasks if t.get("name") == "Validate the settings")
    task = next(t for t in block["block"] if t["name"] == "Ask the planner for a one-step rollout")
    templar = Templar(loader=DataLoader(), variables={
        "groups": {"redis": HOSTS}, "kairos_rollout_group": "redis",
        "kairos_state_dir": str(tmp_path), "kairos_cluster_name": "lab",
        "kairos_rollout_file": str(tmp_path / "rollout.json"),
        "kairos_redis_durability_floor": {}, **variables,
        # The task's own vars, templated where they are used, as Ansible does.
        **{k: trusted(v) for k, v in task["vars"].items()}})
    return [str(a) for a in templar.template(trust_as_template(task["kairos_command"]["argv"]))]


def rollout(tmp_path: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)  # a path left unrendered is written there, not in the checkout
    assert main(argv) == 0, argv
    return dict(json.loads((tmp_path / "rollout.json").read_text()))


def test_live_settings_alone_restart_no_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    argv = rendered_argv(tmp_path, settings={"hash-max-listpack-entries": 1024})
    assert "--restart-all" not in argv and "--set=hash-max-listpack-entries=1024" in argv
    done = rollout(tmp_path, argv, monkeypatch)
    assert done["batches"] == [] and done["live"] == {"hash-max-listpack-entries": 1024}


@pytest.mark.parametrize("settings", [{"hash-max-listpack-entries": 1024}, {}])
def test_restart_all_restarts_every_node_with_or_without_settings(
    tmp_path: Path, settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = rendered_argv(tmp_path, settings=settings, kairos_restart_all=True)
    assert "--restart-all" in argv
    done = rollout(tmp_path, argv, monkeypatch)
    assert sorted(h for batch in done["batches"] for h in batch) == HOSTS
    assert done["live"] == settings
