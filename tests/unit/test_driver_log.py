"""No library traceback reaches the operator's output (issue 40, part A).

cassandra-driver logs a refused connection with its traceback through :mod:`logging`. Under
Mitogen a module's root logger forwards every record to the controller, which printed them
among a fault run's tasks (2026-11-27: 1-5 per run, from the sync gate and the rescue's
re-read). module_utils/kairos_driverlog.py sends the drivers' records to a file instead.
Nothing here needs a server: a closed loopback port refuses the connection.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible.module_utils import kairos_driverlog

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def driver_loggers() -> Iterator[None]:
    """Restore the drivers' loggers as they were: routing them is process-wide."""
    loggers = [logging.getLogger(name) for name in kairos_driverlog.DRIVER_LOGGERS]
    saved = [(lg.handlers[:], lg.propagate, lg.level) for lg in loggers]
    yield
    for logger, (handlers, propagate, level) in zip(loggers, saved, strict=True):
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers[:], logger.propagate, logger.level = handlers, propagate, level


#: A process like a Mitogen child: the root logger has a handler (there it forwards to the
#: controller, which prints; here it prints to stderr), then a CQL connection is refused.
REFUSED = textwrap.dedent("""\
    import logging, sys
    import ansible.module_utils
    ansible.module_utils.__path__.append({module_utils!r})
    logging.basicConfig(stream=sys.stderr)
    from cassandra.cluster import NoHostAvailable
    {make_cluster}
    try:
        cluster.connect()
    except NoHostAvailable:
        pass
    finally:
        cluster.shutdown()
""")
THROUGH_KAIROS = ("from ansible.module_utils.kairos_cql import build_cluster\n"
                  "cluster = build_cluster(['127.0.0.1'], port={port}, timeout=3, metadata=False)")
DRIVER_ALONE = ("from cassandra.cluster import Cluster\n"
                "cluster = Cluster(['127.0.0.1'], port={port}, protocol_version=5, "
                "connect_timeout=3)")


def refused(make_cluster: str, log: Path) -> subprocess.CompletedProcess[str]:
    code = REFUSED.format(module_utils=str(REPO / "module_utils"),
                          make_cluster=make_cluster.format(port=closed_port()))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False, env={"KAIROS_DRIVER_LOG": str(log),
                                                        "PATH": "/usr/bin:/bin"})


def test_a_refused_connection_prints_nothing_and_the_driver_log_keeps_it(tmp_path: Path) -> None:
    log = tmp_path / "state" / "driver.log"
    run = refused(THROUGH_KAIROS, log)
    assert run.returncode == 0, run.stderr
    assert (run.stdout, run.stderr) == ("", "")
    text = log.read_text()
    assert "cassandra.cluster" in text and "Traceback" in text
    assert "ConnectionRefusedError" in text


def test_without_the_routing_the_same_failure_prints_its_traceback(tmp_path: Path) -> None:
    """The stand-in for Mitogen's forwarding reproduces the leak the routing stops."""
    run = refused(DRIVER_ALONE, tmp_path / "driver.log")
    assert "Traceback" in run.stderr and "ConnectionRefusedError" in run.stderr
    assert not (tmp_path / "driver.log").exists()


def test_a_module_under_mitogen_fails_in_one_clean_line(tmp_path: Path) -> None:
    """The path of 2026-11-27: a CQL module run by ansible-playbook with this repository's
    ansible.cfg (Mitogen's strategy) fails its task; the output holds no traceback."""
    playbook = tmp_path / "refused.yml"
    playbook.write_text(textwrap.dedent(f"""\
        - name: A CQL module against a closed port
          hosts: localhost
          gather_facts: false
          tasks:
            - name: Query a node that refuses
              cassandra_cql_query:
                host: 127.0.0.1
                port: {closed_port()}
                timeout: 3
                query: SELECT release_version FROM system.local
    """))
    log = tmp_path / "driver.log"
    run = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={"KAIROS_DRIVER_LOG": str(log), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
             "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(tmp_path)},
    )
    out = run.stdout + run.stderr
    assert run.returncode == 2, out[-3000:]
    assert "cannot connect to 127.0.0.1" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "Traceback" in log.read_text()


def test_routing_is_idempotent_and_follows_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver_loggers: None
) -> None:
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    monkeypatch.setenv("KAIROS_DRIVER_LOG", str(first))
    assert kairos_driverlog.route_driver_log() == str(first)
    assert kairos_driverlog.route_driver_log() == str(first)
    for name in kairos_driverlog.DRIVER_LOGGERS:
        logger = logging.getLogger(name)
        assert not logger.propagate
        assert sum(hasattr(h, "kairos_driver_log") for h in logger.handlers) == 1
    assert kairos_driverlog.route_driver_log(str(second)) == str(second)
    logging.getLogger("redis.connection").warning("lost %s", "127.0.0.1:7001")
    assert "redis.connection WARNING lost 127.0.0.1:7001" in second.read_text()
    assert first.read_text() == ""
    assert sum(hasattr(h, "kairos_driver_log")
               for h in logging.getLogger("cassandra").handlers) == 1


def test_an_unwritable_path_drops_the_records_silently(
    tmp_path: Path, driver_loggers: None, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert kairos_driverlog.route_driver_log(str(blocker / "driver.log")) == ""
    logging.getLogger("cassandra.cluster").error("refused")
    assert capsys.readouterr() == ("", "")


def test_the_default_path_is_under_the_home_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAIROS_DRIVER_LOG", raising=False)
    monkeypatch.setenv("HOME", "/home/op")
    assert kairos_driverlog.driver_log_path() == "/home/op/.ansible/kairos-driver.log"
