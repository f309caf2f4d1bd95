#!/usr/bin/python
"""Make the lab's certificate authority and one certificate per node and client."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_lab_certificates
short_description: A private CA and the certificates signed by it, for the local lab
description:
  - Makes, under I(directory), a CA (C(ca.pem), its key C(ca.key)) and for each identity a
    certificate C(<name>.pem) signed by it with its key C(<name>.key). Keys are RSA 2048,
    unencrypted PKCS#8 (what Cassandra's PEM keystore, Jolokia, Redis and Python all read),
    mode 0600; the directory is 0700.
  - Idempotent - an existing file is kept while it is signed by the CA, names the identity's
    addresses and has more than I(renew_days) left; otherwise it is made again. A new CA
    re-issues every certificate.
  - Production brings its own CA and certificates (docs/security.md); this is the lab's.
extends_documentation_fragment: [kairos, kairos.no_check]
options:
  directory:
    description: Where the CA and the certificates live.
    type: path
    required: true
  identities:
    description:
      - One per certificate - its name, and the IP address (or list of them) the certificate
        names (subjectAltName); a client certificate names none (an empty list).
    type: dict
    required: true
  valid_days:
    description: Lifetime of a new certificate (the CA lives ten times as long).
    type: int
    default: 825
  renew_days:
    description: A certificate with fewer days left is made again.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: The lab's CA and certificates
  kairos_lab_certificates:
    directory: "{{ kairos_lab_dir }}/tls"
    identities:
      cass1: 127.0.0.1
      kairos: []
"""

RETURN = r"""
made:
  description: The files made by this run (their names, never their contents).
  returned: always
  type: list
  elements: str
ca_file:
  description: The CA's certificate.
  returned: always
  type: str
"""

import datetime
import ipaddress
import os

from ansible.module_utils.basic import AnsibleModule

try:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    HAS_CRYPTOGRAPHY = True
except ImportError:  # pragma: no cover - reported by main
    HAS_CRYPTOGRAPHY = False


def _now():
    return datetime.datetime.now(datetime.UTC)


def _write(path, data, mode):
    """Write atomically with ``mode`` from the first byte (a key is never world-readable)."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load(path):
    try:
        with open(path, "rb") as handle:
            return x509.load_pem_x509_certificate(handle.read())
    except (OSError, ValueError):
        return None


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Kairos lab"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _usable(cert, issuer, addresses, renew_days):
    """The certificate is signed by ``issuer``, names exactly ``addresses`` and lives on."""
    if cert is None or cert.not_valid_after_utc - _now() < datetime.timedelta(days=renew_days):
        return False
    if issuer is not None:
        try:
            cert.verify_directly_issued_by(issuer)
        except (InvalidSignature, ValueError, TypeError):
            return False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        named = sorted(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        named = []
    return named == sorted(addresses)


def make_ca(directory, valid_days):
    key = _new_key()
    name = _name("Kairos lab CA")
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=10 * valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                       critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(os.path.join(directory, "ca.key"), _key_pem(key), 0o600)
    _write(os.path.join(directory, "ca.pem"), cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert, key


def make_identity(directory, name, addresses, ca_cert, ca_key, valid_days):
    """A certificate for servers and clients alike: nodes connect to each other (internode,
    replication, the cluster bus) with the certificate they serve."""
    key = _new_key()
    builder = (
        x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False),
                       critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    if addresses:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]),
            critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(os.path.join(directory, f"{name}.key"), _key_pem(key), 0o600)
    _write(os.path.join(directory, f"{name}.pem"), cert.public_bytes(serialization.Encoding.PEM),
           0o644)


def ensure(directory, identities, valid_days=825, renew_days=30):
    """Make what is missing or unusable: the CA, then each ``(name, addresses)``. Returns the
    names of the files made."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    made = []
    ca_cert = _load(os.path.join(directory, "ca.pem"))
    ca_key = None
    ca_key_path = os.path.join(directory, "ca.key")
    if _usable(ca_cert, None, [], renew_days) and os.path.exists(ca_key_path):
        with open(ca_key_path, "rb") as handle:
            ca_key = serialization.load_pem_private_key(handle.read(), password=None)
    else:
        ca_cert, ca_key = make_ca(directory, valid_days)
        made += ["ca.pem", "ca.key"]
    for name, addresses in identities:
        cert = _load(os.path.join(directory, f"{name}.pem"))
        if _usable(cert, ca_cert, addresses, renew_days) and os.path.exists(
                os.path.join(directory, f"{name}.key")):
            continue
        make_identity(directory, name, addresses, ca_cert, ca_key, valid_days)
        made += [f"{name}.pem", f"{name}.key"]
    return made


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory=dict(type="path", required=True),
            identities=dict(type="dict", required=True),
            valid_days=dict(type="int", default=825),
            renew_days=dict(type="int", default=30),
        ),
        supports_check_mode=False,
    )
    if not HAS_CRYPTOGRAPHY:
        module.fail_json(msg="the Python package cryptography is required on the lab host")
    p = module.params
    directory = p["directory"]
    identities = []
    for name, addresses in p["identities"].items():
        name = str(name)
        if not name or "/" in name or name == "ca" or name.startswith("."):
            module.fail_json(msg=f"identities: {name!r} is not a usable file name")
        if isinstance(addresses, str):
            addresses = [addresses]
        try:
            addresses = [str(ipaddress.ip_address(str(a))) for a in addresses or []]
        except ValueError as exc:
            module.fail_json(msg=f"identities.{name}: {exc}")
        identities.append((name, addresses))
    made = ensure(directory, identities, p["valid_days"], p["renew_days"])
    module.exit_json(changed=bool(made), made=made, ca_file=os.path.join(directory, "ca.pem"))


if __name__ == "__main__":
    main()
