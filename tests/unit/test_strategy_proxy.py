"""plugins/strategy/mitogen_linear.py: Mitogen's strategy without its CPU pinning, and
Ansible's own linear strategy, with a warning, where Mitogen is not installed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from unittest import mock

import pytest

PROXY = Path(__file__).resolve().parents[2] / "plugins" / "strategy" / "mitogen_linear.py"


def load_proxy() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kairos_strategy_proxy", PROXY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_proxy_is_mitogens_strategy_with_its_cpu_pinning_off() -> None:
    import ansible_mitogen.affinity
    from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule

    pinning = ansible_mitogen.affinity.policy
    try:
        proxy = load_proxy()
        assert proxy.StrategyModule is StrategyModule
        # The no-op base policy: assigning a worker's CPUs changes nothing.
        assert type(ansible_mitogen.affinity.policy) is ansible_mitogen.affinity.Policy
    finally:
        ansible_mitogen.affinity.policy = pinning


def test_without_mitogen_the_proxy_is_ansibles_linear_strategy_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ansible.plugins.strategy.linear import StrategyModule

    hidden = {name: None for name in list(sys.modules) if name.startswith("ansible_mitogen")}
    hidden["ansible_mitogen"] = None  # an import of it raises ImportError
    with mock.patch.dict(sys.modules, hidden):
        proxy = load_proxy()
    assert proxy.StrategyModule is StrategyModule
    assert "running on Ansible's own linear strategy" in capsys.readouterr().err


PROBE = '''
import os
import sys

PRELOADED = "cassandra.cluster" in sys.modules  # before anything here imports it

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_probe_util import NAME  # custom module_utils: Mitogen forks


def main():
    AnsibleModule(argument_spec={}).exit_json(changed=False, preloaded=PRELOADED, name=NAME,
                                              pid=os.getpid())


main()
'''


def test_a_forked_module_on_the_control_host_finds_the_driver_imported(tmp_path: Path) -> None:
    """A real run of Mitogen through the proxy: a module that imports a custom module_utils
    (forked, as Kairos' CQL modules are) starts with the Cassandra driver already imported."""
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "preload_probe.py").write_text(PROBE)
    (tmp_path / "module_utils").mkdir()
    (tmp_path / "module_utils" / "kairos_probe_util.py").write_text('NAME = "probe"\n')
    (tmp_path / "hosts.ini").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    (tmp_path / "probe.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - {name: probe, preload_probe: {}}\n"
        "    - {name: again, preload_probe: {}}\n")
    repo = PROXY.parents[2]
    env = dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"),
               ANSIBLE_LIBRARY=str(tmp_path / "library"),
               ANSIBLE_MODULE_UTILS=f"{tmp_path / 'module_utils'}:{repo / 'module_utils'}",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               # A file: ANSIBLE_INVENTORY is a list of paths, and "localhost," would make
               # "" (the working directory) a source, whose executables Ansible runs.
               ANSIBLE_INVENTORY=str(tmp_path / "hosts.ini"))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    run = subprocess.run(["ansible-playbook", str(tmp_path / "probe.yml")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False, timeout=60)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    first, second = (task["hosts"]["localhost"] for task in tasks)
    assert first["name"] == "probe" and first["preloaded"] is True and second["preloaded"] is True
    assert first["pid"] != second["pid"]  # each run forked, both from the preloaded parent
