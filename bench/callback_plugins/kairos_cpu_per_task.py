"""Ansible callback for bench/rollout.py --cpu-tasks: each task's CPU seconds, summed over
the controller's whole process tree (ansible-playbook, its workers, Mitogen's contexts and
the module runs they waited for), read from /proc at every task start.

Linear strategies run one task on every host before the next starts, so the difference
between two task starts is what that task cost. Writes JSON to $KAIROS_CPU_TASKS_OUT:
the CPU before the first task, the total at the end, and [task, CPU s, wall s] per task.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: kairos_cpu_per_task
type: aggregate
short_description: CPU seconds of each task, over the controller's process tree
description: Writes the figures to the file named by KAIROS_CPU_TASKS_OUT (bench/rollout.py).
"""

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its reaped children) from /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 after the state.
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / _TICK


def tree_cpu(root: int) -> float:
    children: dict[int, list[tuple[int, float]]] = {}
    own = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (stat := _stat(pid)) is not None:
            if int(pid) == root:
                own = stat[1]
            children.setdefault(stat[0], []).append((int(pid), stat[1]))
    total, stack = own, [root]
    while stack:
        for child, cpu in children.get(stack.pop(), []):
            total += cpu
            stack.append(child)
    return total


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kairos_cpu_per_task"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.root = os.getpid()
        self.before_first = tree_cpu(self.root)
        self.rows: list[list[Any]] = []
        self.current: tuple[str, float, float] | None = None

    def _close(self) -> None:
        if self.current is not None:
            name, cpu, began = self.current
            self.rows.append([name, round(tree_cpu(self.root) - cpu, 2),
                              round(time.monotonic() - began, 2)])
        self.current = None

    def v2_playbook_on_task_start(self, task: Any, is_conditional: Any) -> None:
        self._close()
        self.current = (task.get_name(), tree_cpu(self.root), time.monotonic())

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._close()
        out = os.environ.get("KAIROS_CPU_TASKS_OUT")
        if out:
            with open(out, "w", encoding="utf-8") as handle:
                json.dump({"cpu_before_first_task": round(self.before_first, 2),
                           "cpu_total": round(tree_cpu(self.root), 2), "tasks": self.rows},
                          handle, indent=0)
