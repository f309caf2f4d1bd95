"""TLS for Kairos' own connections: one client context that verifies the server.

A connection's TLS settings are a dict ``{ca_file, cert_file, key_file}`` (paths to PEM
files): ``ca_file`` turns TLS on and is the only authority trusted (the server's certificate
must chain to it and name the address connected to); ``cert_file`` and ``key_file`` are
Kairos' client certificate, for servers that require one. An empty dict is a plaintext
connection. The modules take it as their ``tls`` option; the planner reads it from
``KAIROS_<ENGINE>_TLS_CA`` / ``_CERT`` / ``_KEY`` (:func:`from_env`). Plain Python, shared
with the planner (planner/_module_utils.py).
"""

from __future__ import annotations

import os
import ssl

KEYS = ("ca_file", "cert_file", "key_file")
ENV_SUFFIXES = {"ca_file": "CA", "cert_file": "CERT", "key_file": "KEY"}


class TLSConfigError(ValueError):
    """TLS settings that cannot be used: names the setting and the problem."""


def normalise(tls, where="tls", names=None):
    """``tls`` (a dict, or None) checked: known keys, a CA when anything is set, a key with a
    certificate, every file readable. Returns ``{}`` (plaintext) or the three keys. Errors
    name ``where.<key>``, or ``names[key]`` (e.g. the environment variable) when given."""
    if not tls:
        return {}
    if not isinstance(tls, dict):
        raise TLSConfigError(f"{where}: must be a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(tls) - set(KEYS))
    if unknown:
        raise TLSConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                             f"known: {', '.join(KEYS)}")
    label = {k: (names or {}).get(k, f"{where}.{k}") for k in KEYS}
    out = {k: str(tls.get(k) or "") for k in KEYS}
    if not any(out.values()):
        return {}
    if not out["ca_file"]:
        raise TLSConfigError(f"{label['ca_file']}: required when TLS is on (the authority the "
                             "server's certificate must chain to)")
    if bool(out["cert_file"]) != bool(out["key_file"]):
        raise TLSConfigError(f"{label['cert_file']} and {label['key_file']} go together (the "
                             "client certificate and its key)")
    for key in KEYS:
        path = out[key]
        if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise TLSConfigError(f"{label[key]}: {path}: not a readable file")
    return out


def from_env(engine, environ=None):
    """The TLS settings of ``engine`` ("cassandra" or "redis") from ``KAIROS_<ENGINE>_TLS_CA``,
    ``_CERT`` and ``_KEY``; ``{}`` when none is set. Errors name the variable."""
    environ = os.environ if environ is None else environ
    names = {key: f"KAIROS_{engine.upper()}_TLS_{suffix}" for key, suffix in ENV_SUFFIXES.items()}
    return normalise({key: environ.get(name, "") for key, name in names.items()}, names=names)


def client_context(tls):
    """An SSLContext for a client of a server whose certificate chains to ``tls['ca_file']``
    and names the address connected to; with Kairos' certificate when one is given."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls["ca_file"])
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if tls.get("cert_file"):
        context.load_cert_chain(tls["cert_file"], tls["key_file"])
    return context


def redis_kwargs(tls, connection=False):
    """redis-py's client arguments for ``tls`` (nothing for plaintext); ``connection``: those
    of an ``SSLConnection`` (which is TLS by its class)."""
    if not tls:
        return {}
    kwargs = {} if connection else {"ssl": True}
    kwargs |= {"ssl_ca_certs": tls["ca_file"], "ssl_cert_reqs": "required",
               "ssl_check_hostname": True}
    if tls.get("cert_file"):
        kwargs.update(ssl_certfile=tls["cert_file"], ssl_keyfile=tls["key_file"])
    return kwargs


def redis_cli_args(tls):
    """redis-cli's TLS options for ``tls`` (paths only: nothing secret on the command line)."""
    if not tls:
        return []
    args = ["--tls", "--cacert", tls["ca_file"]]
    if tls.get("cert_file"):
        args += ["--cert", tls["cert_file"], "--key", tls["key_file"]]
    return args
