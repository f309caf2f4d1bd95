"""Process facts from /proc that a lock's holder is judged by (plain Python, no Ansible
imports): shared by library/kairos_lock.py, which records them, and `kairos metrics`
(planner/report/metrics.py), which reads a lock's holder back."""

from __future__ import annotations


def process_start(pid):
    """The start time of ``pid`` in clock ticks since boot (tells a reused pid apart), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])  # field 22 of proc(5), counted after "pid (comm)"
