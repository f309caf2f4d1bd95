#!/usr/bin/python
"""Read a lab node's resource envelope back from its cgroups, or remove it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kairos_envelope
short_description: Make, read back or remove a resource envelope (cgroups)
description:
  - A lab node's envelope caps its CPU, memory (page cache included) and read I/O, like the
    machine it stands in for (docs/envelopes.md). kairos_process makes it and starts the node
    inside it; this module reads it back from the kernel or removes it.
  - State C(read) returns the limits and counters as the kernel holds them and, over
    I(sample_seconds), the CPU used in cores, the read IOPS and the throttled share.
  - State C(probe) says whether envelopes can be made on this machine, and if not, why.
  - State C(absent) removes the envelope's groups; it fails while a process is still inside.
  - State C(present) makes an envelope with I(limits) that no process joins yet, and returns its
    I(groups); the lab's load client and control host join theirs by writing their pid to
    each group's C(cgroup.procs) (planner/loadgen/envelope.py).
extends_documentation_fragment: [kairos, kairos.check_only]
options:
  name:
    description: The envelope's name (kairos_process's I(envelope.name)). Not used by C(probe).
    type: str
  state:
    description: What to do.
    type: str
    choices: [read, probe, absent, present]
    default: read
  limits:
    description:
      - For C(present) - cpu (cores), cpu_weight (1 to 10000, 100 the default), memory,
        read_iops, read_bps; a limit left out is lifted.
    type: dict
    default: {}
  device_path:
    description: For C(present) with read_iops or read_bps, a path on the disk to cap.
    type: path
    default: /
  evict:
    description:
      - For C(absent), move the processes still inside to the cgroups the envelope is nested
        under first, instead of failing. For the side envelopes, which only weigh CPU.
    type: bool
    default: false
  timeout:
    description: For C(absent), seconds to wait for the processes inside to exit.
    type: float
    default: 10.0
  sample_seconds:
    description: For C(read), the window over which rates are measured (0 for none).
    type: float
    default: 1.0
"""

EXAMPLES = r"""
- name: Read cass1's envelope, with rates over two seconds
  kairos_envelope:
    name: lab-cass1
    sample_seconds: 2
  register: envelope

- name: Remove it once the node is stopped
  kairos_envelope:
    name: lab-cass1
    state: absent
"""

RETURN = r"""
usable:
  description: Whether envelopes can be made here (C(probe), C(read)).
  returned: always
  type: bool
cgroup:
  description: The cgroup version in use (v1 or v2), when usable.
  returned: when usable
  type: str
reason:
  description: Why envelopes cannot be made here.
  returned: when not usable
  type: str
groups:
  description: The envelope's cgroup directories (C(present), C(read)).
  returned: state present or read, when the envelope exists
  type: list
  elements: str
exists:
  description: Whether the envelope's groups exist (C(read)), or existed (C(absent)).
  returned: state read or absent
  type: bool
limits:
  description: The limits the kernel holds - cpu (cores), memory (bytes), read_iops,
    read_bps - each null when not capped.
  returned: state read, when the envelope exists
  type: dict
usage:
  description: Counters - memory_bytes, memory_peak_bytes, page_cache_bytes, rss_bytes,
    oom_kills, limit_hits (times the usage met the memory limit), throttled_periods,
    throttled_seconds, read_ios, read_bytes, cpu_seconds.
  returned: state read, when the envelope exists
  type: dict
rates:
  description: Over the sample window - cpu_cores, read_iops, read_bytes_per_second,
    throttled_share (throttled seconds per second).
  returned: state read, when the envelope exists and sample_seconds > 0
  type: dict
pids:
  description: The processes inside the envelope.
  returned: state read, when the envelope exists
  type: list
  elements: int
summary:
  description: The limits in one line.
  returned: state read, when the envelope exists
  type: str
report:
  description: The limits, the use now and the counters in one line, for a person.
  returned: state read, when the envelope exists
  type: str
"""

from ansible.module_utils import kairos_cgroup as cgroup
from ansible.module_utils.basic import AnsibleModule


def _differ(held, wanted):
    """Whether the kernel's limits differ from the wanted ones (None: not capped)."""
    return any(held.get(k) != wanted.get(k) for k in ("cpu", "memory", "read_iops", "read_bps")) \
        or (held.get("cpu_weight") or cgroup.DEFAULT_CPU_WEIGHT) != (
            wanted.get("cpu_weight") or cgroup.DEFAULT_CPU_WEIGHT)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            state=dict(type="str", choices=["read", "probe", "absent", "present"],
                       default="read"),
            limits=dict(type="dict", default={}),
            device_path=dict(type="path", default="/"),
            evict=dict(type="bool", default=False),
            timeout=dict(type="float", default=10.0),
            sample_seconds=dict(type="float", default=1.0),
        ),
        required_if=[("state", "read", ["name"]), ("state", "absent", ["name"]),
                     ("state", "present", ["name"])],
        supports_check_mode=True,
    )
    params = module.params
    kind, folders = cgroup.layout()
    if kind is None:
        # Nothing can exist, so there is nothing to read or remove.
        module.exit_json(changed=False, usable=False, reason=folders, exists=False)
    if params["state"] == "probe":
        module.exit_json(changed=False, usable=True, cgroup=kind)
    if params["state"] == "present":
        before = cgroup.read(kind, folders, params["name"])
        try:
            if module.check_mode:
                limits = cgroup.check_limits(params["limits"])
                module.exit_json(changed=before is None or _differ(before["limits"], limits),
                                 usable=True, cgroup=kind, exists=before is not None)
            dirs = cgroup.make(kind, folders, params["name"], params["limits"],
                               params["device_path"])
        except cgroup.EnvelopeError as exc:
            module.fail_json(msg=f"envelope {params['name']}: {exc}")
        after = cgroup.read(kind, folders, params["name"])
        module.exit_json(changed=before is None or before["limits"] != after["limits"],
                         usable=True, cgroup=kind, exists=True, groups=sorted(dirs.values()),
                         limits=after["limits"], summary=cgroup.describe(after["limits"]))
    if params["state"] == "absent":
        exists = cgroup.read(kind, folders, params["name"]) is not None
        if exists and not module.check_mode:
            try:
                cgroup.remove(kind, folders, params["name"], timeout=params["timeout"],
                              evict=params["evict"])
            except cgroup.EnvelopeError as exc:
                module.fail_json(msg=f"envelope {params['name']}: {exc}")
        module.exit_json(changed=exists, usable=True, cgroup=kind, exists=exists)
    state = cgroup.rates(kind, folders, params["name"], params["sample_seconds"])
    if state is None:
        module.exit_json(changed=False, usable=True, cgroup=kind, exists=False)
    module.exit_json(changed=False, usable=True, exists=True,
                     summary=cgroup.describe(state["limits"]), report=cgroup.report(state), **state)


if __name__ == "__main__":
    main()
