"""The executors refuse a rollout contract they were not written for (docs/rollout-contract.md).

Runs the real playbooks with ansible-playbook against an inventory with no cluster host:
``kairos`` is a stand-in whose ``rollout prepare`` answers with contract 2 (change_settings.yml
runs the same assert on ``rollout adhoc``, after reading the live ring: not testable here).
Each playbook must stop before touching any node, say which contract it got and which it
reads, and release the lock it took.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
FAKE_KAIROS = f"""#!{sys.executable}
import json
print(json.dumps({{"contract": 2, "hosts": [], "step": "s1"}}))
"""


@pytest.mark.parametrize(
    ("playbook", "extra"),
    [("apply_plan.yml", {"plan": "plan.yml"}),
     ("apply_plan_redis.yml", {"plan": "plan.yml"})],
)
def test_an_unknown_contract_is_refused_before_any_node(
    tmp_path: Path, playbook: str, extra: dict[str, object]
) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    cassandra: {}\n    redis: {}\n")
    kairos = tmp_path / "kairos"
    kairos.write_text(FAKE_KAIROS)
    kairos.chmod(0o755)
    (tmp_path / "plan.yml").write_text("{}\n")
    state = tmp_path / "state"
    run = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), f"playbooks/{playbook}",
         "-e", json.dumps({**extra, "kairos_cli": str(kairos), "kairos_state_dir": str(state),
                           "plan": str(tmp_path / "plan.yml") if "plan" in extra else None,
                           "ansible_python_interpreter": sys.executable})],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert "refused before touching any node: the planner wrote rollout contract 2;" in out, (
        out[-3000:])
    assert "this playbook reads contract 1 (docs/rollout-contract.md)" in out, out[-3000:]
    assert list(state.glob("*.lock")) == []  # the lock it took is released
