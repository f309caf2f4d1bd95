"""The lab's certificates (library/kairos_lab_certificates.py) and Kairos' TLS settings
(module_utils/kairos_tls.py): real certificates, and real TLS handshakes on loopback."""

from __future__ import annotations

import importlib.util
import os
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import kairos_tls
from cryptography import x509

from planner.errors import ValidationError
from planner.workload import collect

REPO = Path(__file__).resolve().parents[2]


def _certificates_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "kairos_lab_certificates", REPO / "library" / "kairos_lab_certificates.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


certificates = _certificates_module()


def make(directory: Path, identities: dict[str, list[str]], renew_days: int = 30) -> list[str]:
    """The module's work without Ansible: the files it made."""
    return list(certificates.ensure(str(directory), list(identities.items()), 825, renew_days))


def tls_of(directory: Path, name: str) -> dict[str, str]:
    return {"ca_file": str(directory / "ca.pem"), "cert_file": str(directory / f"{name}.pem"),
            "key_file": str(directory / f"{name}.key")}


@pytest.fixture(scope="module")
def lab_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    make(directory, {"node": ["127.0.0.1"], "kairos": []})
    return directory


def test_keys_are_private_and_certificates_name_their_addresses(lab_ca: Path) -> None:
    assert os.stat(lab_ca).st_mode & 0o777 == 0o700
    for key in ("ca.key", "node.key", "kairos.key"):
        assert os.stat(lab_ca / key).st_mode & 0o777 == 0o600, key
        assert (lab_ca / key).read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
    node = x509.load_pem_x509_certificate((lab_ca / "node.pem").read_bytes())
    san = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    ca = x509.load_pem_x509_certificate((lab_ca / "ca.pem").read_bytes())
    node.verify_directly_issued_by(ca)


def test_a_second_run_keeps_every_file_and_a_changed_address_reissues_one(tmp_path: Path) -> None:
    assert make(tmp_path, {"a": ["127.0.0.1"], "b": ["127.0.0.2"]}) == [
        "ca.pem", "ca.key", "a.pem", "a.key", "b.pem", "b.key"]
    assert make(tmp_path, {"a": ["127.0.0.1"], "b": ["127.0.0.2"]}) == []
    assert make(tmp_path, {"a": ["127.0.0.1"], "b": ["127.0.0.3"]}) == ["b.pem", "b.key"]
    # A certificate about to expire is made again.
    assert make(tmp_path, {"a": ["127.0.0.1"]}, renew_days=10_000) == [
        "ca.pem", "ca.key", "a.pem", "a.key"]


def test_a_new_ca_reissues_every_certificate(tmp_path: Path) -> None:
    make(tmp_path, {"a": ["127.0.0.1"]})
    (tmp_path / "ca.pem").unlink()
    assert make(tmp_path, {"a": ["127.0.0.1"]}) == ["ca.pem", "ca.key", "a.pem", "a.key"]


@pytest.mark.parametrize("tls, problem", [
    ({"cert_file": "x"}, "tls.ca_file: required"),
    ({"ca_file": "CA", "cert_file": "CERT"}, "cert_file and tls.key_file go together"),
    ({"ca_file": "/nonexistent/ca.pem"}, "tls.ca_file: /nonexistent/ca.pem: not a readable file"),
    ({"ca_file": "CA", "certfile": "x"}, "unknown key"),
    ("ca.pem", "must be a mapping"),
])
def test_unusable_settings_name_the_setting(lab_ca: Path, tls: Any, problem: str) -> None:
    if isinstance(tls, dict):
        tls = {k: str(lab_ca / "ca.pem") if v == "CA" else str(lab_ca / "node.pem")
               if v == "CERT" else v for k, v in tls.items()}
    with pytest.raises(kairos_tls.TLSConfigError, match=problem):
        kairos_tls.normalise(tls)


def test_settings_come_from_the_environment_and_errors_name_the_variable(lab_ca: Path) -> None:
    assert kairos_tls.from_env("redis", {}) == {}
    env = {"KAIROS_REDIS_TLS_CA": str(lab_ca / "ca.pem")}
    assert kairos_tls.from_env("redis", env) == {"ca_file": str(lab_ca / "ca.pem"),
                                                 "cert_file": "", "key_file": ""}
    with pytest.raises(kairos_tls.TLSConfigError, match="KAIROS_CASSANDRA_TLS_CA: required"):
        kairos_tls.from_env("cassandra", {"KAIROS_CASSANDRA_TLS_CERT": "x"})


def test_the_planner_refuses_unusable_files_before_connecting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAIROS_REDIS_TLS_CA", "/nonexistent/ca.pem")
    with pytest.raises(ValidationError, match=r"KAIROS_REDIS_TLS_CA: /nonexistent/ca\.pem"):
        collect.redis_tls_kwargs()


def test_redis_and_redis_cli_arguments(lab_ca: Path) -> None:
    tls = kairos_tls.normalise(tls_of(lab_ca, "kairos"))
    assert kairos_tls.redis_kwargs({}) == {} and kairos_tls.redis_cli_args({}) == []
    kwargs = kairos_tls.redis_kwargs(tls)
    assert kwargs["ssl"] is True and kwargs["ssl_check_hostname"] is True
    assert kwargs["ssl_cert_reqs"] == "required" and kwargs["ssl_certfile"] == tls["cert_file"]
    assert "ssl" not in kairos_tls.redis_kwargs(tls, connection=True)
    assert kairos_tls.redis_cli_args(tls) == ["--tls", "--cacert", tls["ca_file"], "--cert",
                                              tls["cert_file"], "--key", tls["key_file"]]


def _serve_once(lab_ca: Path, address: str) -> tuple[int, threading.Thread, list[str]]:
    """A TLS server on ``address`` with the node's certificate, requiring a client one."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH,
                                                cafile=str(lab_ca / "ca.pem"))
    server_context.verify_mode = ssl.CERT_REQUIRED
    server_context.load_cert_chain(str(lab_ca / "node.pem"), str(lab_ca / "node.key"))
    listener = socket.create_server((address, 0))
    seen: list[str] = []

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with server_context.wrap_socket(conn, server_side=True) as tls_conn:
                    peer: Any = tls_conn.getpeercert()
                    seen.append(dict(x[0] for x in peer["subject"])["commonName"])
                    tls_conn.sendall(b"ok")
            except (ssl.SSLError, OSError) as exc:
                seen.append(type(exc).__name__)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, seen


def test_the_client_context_verifies_the_chain_and_the_address(lab_ca: Path) -> None:
    client = kairos_tls.client_context(kairos_tls.normalise(tls_of(lab_ca, "kairos")))
    port, thread, seen = _serve_once(lab_ca, "127.0.0.1")
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            client.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        assert conn.recv(2) == b"ok"
    thread.join(5)
    assert seen == ["kairos"]  # the server saw Kairos' certificate
    # The node's certificate names 127.0.0.1 only: connecting to 127.0.0.2 is refused.
    port, thread, _ = _serve_once(lab_ca, "127.0.0.2")
    with socket.create_connection(("127.0.0.2", port)) as raw, \
            pytest.raises(ssl.SSLCertVerificationError, match=r"(?i)mismatch|not valid"):
        client.wrap_socket(raw, server_hostname="127.0.0.2")
    thread.join(5)
