"""What the lab benches that run a closed-loop Cassandra load from this machine share
(bench/change_cost.py, bench/restart_cost.py, bench/envelope_probe.py): the load's options
and the lab's CQL login. Not a script; they import it from their own folder."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_mix(text: str) -> dict[str, float]:
    """argparse type: ``read=0.5,update=0.5`` as a mix, kept as given (no normalising)."""
    try:
        return {k: float(v) for k, v in (kv.split("=") for kv in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CLASS=SHARE,..., got {text!r}") from None


def add_load_arguments(p: argparse.ArgumentParser, *, mix: str, keys: int, concurrency: int,
                       warmup: float) -> None:
    """The load's options, with this bench's defaults (``--mix`` parsed by :func:`load_mix`)."""
    p.add_argument("--mix", type=load_mix, default=mix,
                   help=f"the load's operation mix (default {mix})")
    p.add_argument("--cl", default="QUORUM")
    p.add_argument("--keys", type=int, default=keys)
    p.add_argument("--concurrency", type=int, default=concurrency,
                   help="requests in flight per load process")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--warmup", type=float, default=warmup,
                   help="seconds of load before anything is measured")


def lab_login() -> None:
    """The lab's CQL and Redis logins and TLS files, through the environment as for
    ``kairos load`` (never argv),
    unless the environment already names them: Kairos' own role, and the application's that
    the loads use (docs/security.md)."""
    secrets = REPO / ".lab" / "secrets"
    for user_env, password_env, user, name in (
            ("KAIROS_CASSANDRA_USERNAME", "KAIROS_CASSANDRA_PASSWORD", "kairos",
             "cassandra-cql-password"),
            ("KAIROS_LOAD_CASSANDRA_USERNAME", "KAIROS_LOAD_CASSANDRA_PASSWORD", "app",
             "cassandra-app-password"),
            ("KAIROS_REDIS_USERNAME", "KAIROS_REDIS_PASSWORD", "kairos",
             "redis-kairos-password"),
            ("KAIROS_LOAD_REDIS_USERNAME", "KAIROS_LOAD_REDIS_PASSWORD", "app",
             "redis-app-password")):
        secret = secrets / name
        if user_env not in os.environ and secret.exists():
            os.environ[user_env] = user
            os.environ[password_env] = secret.read_text().strip()
    # The lab speaks TLS only: the lab's CA and the clients' certificate (docs/security.md).
    tls = REPO / ".lab" / "tls"
    for engine in ("CASSANDRA", "REDIS"):
        for suffix, name in (("CA", "ca.pem"), ("CERT", "kairos.pem"), ("KEY", "kairos.key")):
            if (tls / name).exists():
                os.environ.setdefault(f"KAIROS_{engine}_TLS_{suffix}", str(tls / name))
