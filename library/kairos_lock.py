#!/usr/bin/python
"""A run lock on the control host: one Kairos rollout per cluster at a time."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_lock
short_description: Take, renew or release the lock that keeps two Kairos runs off one cluster
description:
  - With I(lease), the lock is a lease in the cluster itself, seen by every run whatever its
    control host or directory - Cassandra, a row of C(kairos.leases) changed by
    lightweight transactions (the keyspace and table are created when missing); Redis, a key
    taken with SET NX PX on the primary that serves it. The lease expires I(lease.seconds)
    after its last renewal, and each new holder gets a fencing token one above the last.
    I(path) then keeps a copy of this host's holder record (for C(kairos metrics)), and is
    the lock itself only when no node of the cluster answers (a first install).
  - Without I(lease), C(present) creates I(path) atomically (O_EXCL).
  - Either way the holder is named by owner, host, pid (and start time) of the
    ansible-playbook process that took it. Taking it again by the same owner renews it
    (the heartbeat); with I(heartbeat), a lock that is no longer this owner's fails the run.
  - If another run holds it, fails at once naming the holder, unless the holder is dead -
    on this host its ansible-playbook process is gone (taken over at once, with a warning);
    on another host, a lease that was not renewed expired, a lock file has a heartbeat
    older than I(stale_after).
  - C(absent) releases it if I(owner) holds it (or with I(force), the lock file only).
extends_documentation_fragment: [kairos, kairos.no_check]
options:
  path:
    description: The lock file (the holder record's copy when a lease is used).
    type: path
    required: true
  owner:
    description: Identifier of this run.
    type: str
    required: true
  state:
    description: Take (present) or release (absent) the lock.
    type: str
    choices: [present, absent]
    default: present
  heartbeat:
    description:
      - This run already holds the lock and renews it; fail if it was lost to another run
        rather than taking a free one as new.
    type: bool
    default: false
  stale_after:
    description:
      - Seconds without a heartbeat after which a lock file held from another host is
        considered left by a crashed run (a lock held on this host is judged by its pid).
    type: int
    default: 1800
  force:
    description: Release the lock file even if another owner holds it (a person clearing it).
    type: bool
    default: false
  lease:
    description: The cluster that holds the lease, and how to reach it (omit for a file lock).
    type: dict
    suboptions:
      engine:
        description: Where the lease lives.
        type: str
        choices: [cassandra, redis, file]
        required: true
      name:
        description: The lease's name, one per cluster and engine.
        type: str
        required: true
      seconds:
        description:
          - The lease period, longer than the longest batch (a run renews it before each).
        type: int
        default: 900
      hosts:
        description: Cassandra - the CQL addresses to try.
        type: list
        elements: str
        default: []
      port:
        description: Cassandra - the CQL port.
        type: int
        default: 9042
      keyspace:
        description: Cassandra - the keyspace of the C(leases) table.
        type: str
        default: kairos
      replication_factor:
        description: Cassandra - replicas of that keyspace per DC, capped at the DC's nodes.
        type: int
        default: 3
      nodes:
        description: Redis - inventory name to host:port of every node.
        type: dict
        default: {}
      username:
        description: The CQL role or Redis ACL user (empty - none).
        type: str
        default: ""
      password:
        description: Its password; never logged or returned.
        type: str
        default: ""
      timeout:
        description: Seconds per connection and request.
        type: float
        default: 10
      tls:
        description:
          - TLS of the lease's connections - C(ca_file), C(cert_file), C(key_file) as the
            Kairos modules' I(tls) option takes them; empty for plaintext.
        type: dict
        default: {}
"""

EXAMPLES = r"""
- name: Take the cluster's lease
  kairos_lock:
    path: /var/lib/kairos/lab-cassandra.lock
    owner: "{{ kairos_run_id }}"
    lease:
      engine: cassandra
      name: lab-cassandra
      hosts: [10.0.0.1, 10.0.0.2]
      username: kairos
      password: "{{ cassandra_cql_password }}"
"""

RETURN = r"""
holder:
  description:
    - The holder afterwards (owner, host, pid, created_at, heartbeat_at; with a lease its
      token and expires_in seconds), or another run's when it is held.
  returned: always
  type: dict
where:
  description: Where the lock was - C(cassandra), C(redis) or C(file).
  returned: always
  type: str
"""

import json
import os
import time

from ansible.module_utils import kairos_tls
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_cql import HAS_DRIVER, build_cluster, wanted_replication
from ansible.module_utils.kairos_lease import (
    CassandraLease,
    LeaseRefused,
    LeaseUnreachable,
    RedisLease,
    acquire,
    decide,
    describe_holder,
    new_holder,
)
from ansible.module_utils.kairos_proc import process_start
from ansible.module_utils.kairos_redis import lease_primary


def playbook_process():
    """(pid, start) of the ansible-playbook process this module runs under, or (None, None).

    Modules run in short-lived children of Ansible's workers; the run that holds the lock
    is the ansible-playbook process at the top of that chain. Without one (another
    runner), the lock is judged by its heartbeat alone.
    """
    pid, found = os.getppid(), None
    for _ in range(32):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
        if any(os.path.basename(a) == b"ansible-playbook" for a in argv[:2]):
            found = pid
        if parent <= 1:
            break
        pid = parent
    return (found, process_start(found)) if found else (None, None)


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def write_atomically(path, record):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(tmp, path)


# ------------------------------------------------------------------ the lock file
def file_release(module, path, owner):
    holder = read(path)
    if not os.path.exists(path):
        return False, {}
    if holder.get("owner") != owner and not module.params["force"]:
        return False, holder
    os.unlink(path)
    return True, {}


def file_acquire(module, path, owner, now):
    """The lock file's holder after taking or renewing it; fails when another run holds it."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pid, pid_start = playbook_process()
    record = new_holder(owner, pid, pid_start, now)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = read(path)
            action, dead = decide(holder, owner, module.params["stale_after"], now)
            if action == "renew":
                holder["heartbeat_at"] = now
                write_atomically(path, holder)
                return holder
            if action == "takeover":
                module.warn(f"taking over the lock of {holder.get('owner')}: {dead}")
                os.unlink(path)
                continue
            refuse(module, f"{path} ({describe_holder(holder)})", holder)
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle)
        return record
    module.fail_json(msg=f"could not take {path}")


def refuse(module, what, holder):
    if module.params["heartbeat"]:
        module.fail_json(msg=f"this run lost the lock: another Kairos run holds {what}; "
                         "no further batch is started", holder=holder, locked=True)
    module.fail_json(msg=f"another Kairos run holds {what}; this run exits without touching "
                     "the cluster", holder=holder, locked=True)


# ------------------------------------------------------------------ the lease
def open_lease(spec, schema=True):
    """(lease, close): the engine's lease store; LeaseUnreachable when no node answers.
    ``schema=False`` (a release) skips checking that the lease's table exists."""
    if spec["engine"] == "cassandra":
        return open_cassandra(spec, schema)
    return open_redis(spec)


def open_cassandra(spec, schema=True):
    if not HAS_DRIVER:
        raise LeaseUnreachable("cassandra-driver is not installed on the control host")
    from cassandra import ConsistencyLevel

    cluster = build_cluster(spec["hosts"], port=spec["port"], timeout=spec["timeout"],
                            username=spec["username"] or None, password=spec["password"],
                            metadata=False, tls=spec["tls"],
                            consistency_level=ConsistencyLevel.QUORUM)
    try:
        session = cluster.connect()
    except Exception as exc:  # NoHostAvailable: why, per host
        cluster.shutdown()
        causes = getattr(exc, "errors", None) or {"": exc}
        refused = [f"{host}: {error}" for host, error in causes.items()
                   if "Authentication" in type(error).__name__]
        if refused:  # a wrong login is not a cluster that is not there yet
            raise LeaseRefused(f"the CQL login was refused ({refused[0][:200]})") from None
        raise LeaseUnreachable(f"no CQL node of {', '.join(spec['hosts'])} answers: "
                               f"{type(exc).__name__}") from None
    lease = CassandraLease(session, spec["name"], spec["seconds"], spec["keyspace"])
    if not schema:
        return lease, cluster.shutdown
    try:
        lease.ensure_schema(wanted_replication(cluster.metadata.all_hosts(),
                                               spec["replication_factor"]))
    except Exception:
        cluster.shutdown()
        raise
    return lease, cluster.shutdown


def open_redis(spec):
    key = f"kairos:{{lease:{spec['name']}}}"
    try:
        node = lease_primary(spec["nodes"], key, spec["password"], spec["username"],
                             spec["timeout"], spec["tls"])
    except Exception as exc:  # only a refused login is raised
        raise LeaseRefused(f"the Redis login was refused ({type(exc).__name__})") from None
    if node is None:
        raise LeaseUnreachable(f"no Redis node of {', '.join(spec['nodes'].values())} serves "
                               f"the lease's key")
    return RedisLease(node.client, spec["name"], spec["seconds"]), node.close


def lease_acquire(module, spec, path, owner, now):
    """The holder after taking or renewing the lease; None when no node answers (the
    caller falls back to the file)."""
    copy = read(path)
    if copy.get("owner") not in (None, owner) and not copy.get("lease"):
        # A run that found no node (a first install) holds the lock file: respect it.
        action, _ = decide(copy, owner, module.params["stale_after"], now)
        if action == "refuse":
            refuse(module, f"{path} ({describe_holder(copy)})", copy)
    try:
        lease, close = open_lease(spec)
    except LeaseRefused as exc:
        module.fail_json(msg=f"cannot take the lease {spec['name']}: {exc}", where=spec["engine"])
    except LeaseUnreachable as exc:
        module.warn(f"the lease {spec['name']} cannot be read ({exc}); the lock is the file {path}")
        return None
    except Exception as exc:  # a schema change refused, a timeout: the lease's state is unknown
        module.fail_json(msg=f"cannot read the lease {spec['name']} in {spec['engine']}: "
                         f"{type(exc).__name__}: {exc}", where=spec["engine"])
    pid, pid_start = playbook_process()
    try:
        outcome, holder, reason = acquire(lease, owner, pid, pid_start, now,
                                            take_over=not module.params["heartbeat"])
    except Exception as exc:  # a timeout, Unavailable: the lease's state is unknown
        module.fail_json(msg=f"cannot take the lease {spec['name']} in {spec['engine']}: "
                         f"{type(exc).__name__}: {exc}", where=spec["engine"])
    finally:
        close()
    where = f"the lease {spec['name']} in {spec['engine']}"
    if outcome == "held":
        refuse(module, f"{where} ({describe_holder(holder or {})})", holder or {})
    if outcome == "taken over":
        module.warn(f"taking over the lock of {reason} ({where})")
    if outcome != "renewed" and module.params["heartbeat"]:
        module.warn(f"{where} had expired and was free; this run took it again")
    write_atomically(path, {**holder, "lease": spec["name"], "where": spec["engine"]})
    return holder


def lease_release(module, spec, path, owner):
    """(changed, holder): the lease freed if ``owner`` holds it; a cluster that cannot be
    reached leaves it to expire (or to be taken over at once from this host)."""
    released = False
    try:
        lease, close = open_lease(spec, schema=False)
        try:
            released = lease.release(owner)
        finally:
            close()
    except Exception as exc:  # the release is on every way out: never fail it
        module.warn(f"could not release the lease {spec['name']} ({type(exc).__name__}); it "
                    f"expires within {spec['seconds']} s, or is taken over at once from this host")
    changed, _ = file_release(module, path, owner)
    return released or changed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            owner=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            heartbeat=dict(type="bool", default=False),
            stale_after=dict(type="int", default=1800),
            force=dict(type="bool", default=False),
            lease=dict(type="dict", options=LEASE_OPTIONS),
        ),
    )
    path, owner = module.params["path"], module.params["owner"]
    spec = module.params["lease"]
    if spec and spec["engine"] == "file":
        spec = None
    if spec:
        try:
            spec["tls"] = kairos_tls.normalise(spec["tls"], where="lease.tls")
        except kairos_tls.TLSConfigError as exc:
            module.fail_json(msg=str(exc))
    if module.params["state"] == "absent":
        if spec:
            module.exit_json(changed=lease_release(module, spec, path, owner), holder={},
                             where=spec["engine"])
        changed, holder = file_release(module, path, owner)
        if holder:
            module.exit_json(changed=False, holder=holder, where="file",
                             msg="held by another run; left alone")
        module.exit_json(changed=changed, holder={}, where="file")

    now = time.time()
    holder = lease_acquire(module, spec, path, owner, now) if spec else None
    where = spec["engine"] if holder is not None else "file"
    if holder is None:
        holder = file_acquire(module, path, owner, now)
    # Taken now (changed), or renewed (a heartbeat changes nothing).
    module.exit_json(changed=holder.get("heartbeat_at") == holder.get("created_at"),
                     holder=holder, where=where)


LEASE_OPTIONS = dict(
    engine=dict(type="str", choices=["cassandra", "redis", "file"], required=True),
    name=dict(type="str", required=True),
    seconds=dict(type="int", default=900),
    hosts=dict(type="list", elements="str", default=[]),
    port=dict(type="int", default=9042),
    keyspace=dict(type="str", default="kairos"),
    replication_factor=dict(type="int", default=3),
    nodes=dict(type="dict", default={}),
    username=dict(type="str", default=""),
    password=dict(type="str", default="", no_log=True),
    timeout=dict(type="float", default=10),
    tls=dict(type="dict", default={}),
)


if __name__ == "__main__":
    main()
