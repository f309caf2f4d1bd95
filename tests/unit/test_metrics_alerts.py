"""The shipped alert rules (docs/prometheus/kairos-alerts.yml): valid, tested with
``promtool test rules``, and written on metrics ``kairos metrics`` exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from planner.report.metrics import FAMILIES

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is absent (Debian package prometheus; `make setup` installs it)")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=RULES, text=True, capture_output=True,
                          check=False, timeout=120)


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load((RULES / "kairos-alerts.yml").read_text())["groups"]
            for rule in group["rules"]]


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", "kairos-alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    result = _promtool("test", "rules", "kairos-alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_read_only_exported_metrics() -> None:
    exported = {name for name, _, _ in FAMILIES}
    used = {m for rule in _rules() for m in re.findall(r"\bkairos_[a-z_]+", rule["expr"])}
    assert used and used <= exported, sorted(used - exported)


def test_the_issue_s_alerts_are_shipped_and_each_is_tested() -> None:
    names = {rule["alert"] for rule in _rules()}
    assert {"KairosStepFailed", "KairosRolloutStuck", "KairosModelErrorHigh",
            "KairosLockHeldTooLong", "KairosCapacityScaleOut"} <= names
    tests = yaml.safe_load((RULES / "kairos-alerts.test.yml").read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t["alert_rule_test"]
              if case["exp_alerts"]}
    assert tested == names  # every rule is seen firing at least once
