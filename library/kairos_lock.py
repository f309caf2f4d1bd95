#!/usr/bin/python
"""A run lock on the control host: one Kairos rollout per cluster at a time."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_lock
short_description: Take or release the lock that keeps two Kairos runs off one cluster
description:
  - C(present) creates I(path) atomically (O_EXCL), recording the owner, the host and the
    pid (and start time) of the ansible-playbook process that holds it. Taking it again
    by the same owner refreshes its heartbeat.
  - If another run holds it, fails at once with who holds it and since when, unless the
    holder is dead, which is taken over with a warning - on this host, its
    ansible-playbook process is gone (recognised at once); on another host, its
    heartbeat is older than I(stale_after) seconds.
  - C(absent) removes the lock if I(owner) holds it (or with I(force)).
extends_documentation_fragment: [kairos, kairos.no_check]
options:
  path:
    description: The lock file.
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
  stale_after:
    description:
      - Seconds without a heartbeat after which a lock held from another host is
        considered left by a crashed run (a lock held on this host is judged by its pid).
    type: int
    default: 1800
  force:
    description: Release even if another owner holds it (a person clearing a stale lock).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Take the cluster's lock
  kairos_lock:
    path: /var/lib/kairos/lab.lock
    owner: "{{ kairos_run_id }}"
"""

RETURN = r"""
holder:
  description: The lock's content (owner, host, pid, created_at, heartbeat_at) afterwards.
  returned: always
  type: dict
"""

import json
import os
import socket
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.kairos_proc import process_start


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


def holder_dead(holder, stale_after, now):
    """Why the holder is dead (a reason), or None while it may still be running."""
    pid = holder.get("pid")
    if holder.get("host") == socket.gethostname() and pid:
        started = process_start(pid)
        if started is None:
            return f"its process {pid} on {holder['host']} is gone"
        if holder.get("pid_start") not in (None, started):
            return f"its process {pid} on {holder['host']} is gone (the pid was reused)"
        return None
    age = now - float(holder.get("heartbeat_at", holder.get("created_at", 0)))
    if age > stale_after:
        return f"no heartbeat for {int(age)} s"
    return None


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def write_atomically(path, record):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            owner=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            stale_after=dict(type="int", default=1800),
            force=dict(type="bool", default=False),
        ),
    )
    path, owner = module.params["path"], module.params["owner"]
    if module.params["state"] == "absent":
        holder = read(path)
        if not os.path.exists(path):
            module.exit_json(changed=False, holder={})
        if holder.get("owner") != owner and not module.params["force"]:
            module.exit_json(changed=False, holder=holder, msg="held by another run; left alone")
        os.unlink(path)
        module.exit_json(changed=True, holder={})

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    now = time.time()
    pid, pid_start = playbook_process()
    record = {
        "owner": owner,
        "host": socket.gethostname(),
        "pid": pid,
        "pid_start": pid_start,
        "created_at": now,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "heartbeat_at": now,
    }
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = read(path)
            if holder.get("owner") == owner:
                holder["heartbeat_at"] = now
                write_atomically(path, holder)
                module.exit_json(changed=False, holder=holder)
            dead = holder_dead(holder, module.params["stale_after"], now)
            if dead:
                module.warn(f"taking over the lock of {holder.get('owner')}: {dead}")
                os.unlink(path)
                continue
            module.fail_json(
                msg=f"another Kairos run holds {path} (owner {holder.get('owner')}, since "
                f"{holder.get('created')}); this run exits without touching the cluster",
                holder=holder,
                locked=True,
            )
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle)
        module.exit_json(changed=True, holder=record)
    module.fail_json(msg=f"could not take {path}")


if __name__ == "__main__":
    main()
