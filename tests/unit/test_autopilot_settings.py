"""The autopilot's settings are defaults that the inventory overrides (docs/autopilot.md).

Runs the real playbooks/autopilot.yml with ansible-playbook against an inventory with no
cluster host (so nothing is contacted): the run lock named in the inventory is held by
another run, and the tick must stop at that lock. Were the settings play variables
(vars_files), they would outrank the inventory and the tick would take the default lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def test_an_inventory_setting_outranks_the_autopilot_default(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all:\n  children:\n    cassandra: {}\n    redis: {}\n")
    lock = tmp_path / "set-in-the-inventory.lock"
    (inventory / "group_vars" / "all.yml").write_text(
        "ansible_connection: local\n"
        "ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        f"kairos_autopilot_lock_file: {lock}\n"
    )
    lock.write_text(json.dumps({"owner": "another-run", "created_at": time.time(),
                                "created": "now"}))
    run = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), "playbooks/autopilot.yml",
         "-e", f"kairos_state_dir={tmp_path / 'state'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert f"another Kairos run holds {lock}" in out, out[-3000:]
    assert json.loads(lock.read_text())["owner"] == "another-run"  # left alone
