"""Bad role inputs fail at the start with a message naming the variable (no lab needed)."""

from __future__ import annotations

import json

import pytest

from .conftest import run_playbook

CASES = [
    ({"cassandra_install_method": "rpm"}, "cassandra_install_method"),
    ({"cassandra_service_manager": "upstart"}, "cassandra_service_manager"),
    ({"cassandra_heap_size": "256M"}, "cassandra_heap_size"),
    ({"cassandra_heap_size": "lots"}, "cassandra_heap_size"),
    ({"cassandra_seeds": []}, "cassandra_seeds"),
    ({"cassandra_install_method": "tarball", "cassandra_tarball_url": ""}, "cassandra_tarball_url"),
    ({"cassandra_settings_overrides": {"listen_address": "1.2.3.4"}}, "listen_address"),
]


@pytest.mark.parametrize(
    ("extra_vars", "named"), CASES, ids=[c[1] + "-" + str(i) for i, c in enumerate(CASES)]
)
def test_bad_cassandra_input_is_refused_naming_the_variable(
    extra_vars: dict[str, object], named: str
) -> None:
    # --check so that nothing could be touched even if validation let the input through.
    run = run_playbook(
        "playbooks/cassandra.yml", "--check", "--limit", "cass1", "-e", json.dumps(extra_vars)
    )
    assert run.rc != 0, run.output[-2000:]
    failed = run.output.split("fatal:", 1)[-1]
    assert named in failed, run.output[-2000:]
    # It failed in validation, before any task that changes something.
    assert "TASK [cassandra : Render cassandra.yaml]" not in run.output
