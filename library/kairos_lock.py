#!/usr/bin/python
"""A run lock on the control host: one Kairos rollout per cluster at a time."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_lock
short_description: Take or release the lock that keeps two Kairos runs off one cluster
description:
  - C(present) creates I(path) atomically (O_EXCL). If another run holds it, fails at once
    with who holds it and since when, unless the lock is older than I(stale_after)
    seconds (a crashed run), which is taken over with a warning.
  - C(absent) removes the lock if I(owner) holds it (or with I(force)).
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
    description: Seconds after which a lock is considered left by a crashed run.
    type: int
    default: 7200
  force:
    description: Release even if another owner holds it (a person clearing a stale lock).
    type: bool
    default: false
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
author: Kairos
"""

EXAMPLES = r"""
- name: Take the cluster's lock
  kairos_lock:
    path: /var/lib/kairos/lab.lock
    owner: "{{ kairos_run_id }}"
"""

RETURN = r"""
holder:
  description: The lock's content (owner, created_at) after the module acted.
  returned: always
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            owner=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            stale_after=dict(type="int", default=7200),
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
    record = {
        "owner": owner,
        "created_at": time.time(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = read(path)
            if holder.get("owner") == owner:
                module.exit_json(changed=False, holder=holder)
            age = time.time() - float(holder.get("created_at", 0))
            if age > module.params["stale_after"]:
                module.warn(
                    f"taking over a stale lock ({int(age)} s old) from {holder.get('owner')}"
                )
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
