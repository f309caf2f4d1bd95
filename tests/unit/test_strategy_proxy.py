"""plugins/strategy/mitogen_linear.py: Mitogen's strategy without its CPU pinning, and
Ansible's own linear strategy, with a warning, where Mitogen is not installed."""

from __future__ import annotations

import importlib.util
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
