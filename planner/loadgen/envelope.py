"""The load client's envelope: its worker processes join cgroups the lab made for it.

A lab node stands in for a machine; the load client stands in for the application's own
machines, so it must not take the nodes' CPU (docs/envelopes.md). ``make lab-up`` makes
the client's envelope (kairos_envelope, state present) and records its cgroup directories
in ``.lab/envelopes.json``; whoever starts a load there passes them in the environment
variable ``KAIROS_LOAD_CGROUPS`` (``os.pathsep``-separated), and every worker process
joins them before it connects. Unset, the workers stay where they were started.
"""

from __future__ import annotations

import json
import os

from planner.errors import KairosError

ENV = "KAIROS_LOAD_CGROUPS"


def cgroup_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """The directories named by ``KAIROS_LOAD_CGROUPS`` (empty when it is unset)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return [d for d in value.split(os.pathsep) if d]


def join(dirs: list[str], pid: int = 0) -> None:
    """Move ``pid`` (0: this process) into every cgroup of ``dirs``.

    Raises
    ------
    KairosError
        A directory that is not a cgroup, or one this user may not join; names it.
    """
    for directory in dirs:
        procs = os.path.join(directory, "cgroup.procs")
        if not os.path.isfile(procs):
            raise KairosError(f"{ENV}: {directory} is not a cgroup (no cgroup.procs); "
                              "start the lab again (make lab-up) or unset it")
        try:
            with open(procs, "w", encoding="ascii") as handle:
                handle.write(str(pid))
        except OSError as exc:
            raise KairosError(f"{ENV}: cannot join {directory}: {exc.strerror or exc}") from exc


def join_from_env() -> list[str]:
    """Join the envelope ``KAIROS_LOAD_CGROUPS`` names; returns the directories joined."""
    dirs = cgroup_dirs()
    join(dirs)
    return dirs


def leave(dirs: list[str], pid: int = 0) -> None:
    """Move ``pid`` (0: this process) back out of the envelope ``dirs``, to the cgroups the
    envelopes are nested under (``<starter's cgroup>/kairos/<name>``), so that it can be
    removed."""
    join([d.rsplit(f"{os.sep}kairos{os.sep}", 1)[0] for d in dirs], pid)


def enter_lab(path: str, pid: int = 0) -> dict[str, list[str]]:
    """Run as the lab's control host: move ``pid`` (0: this process) into the control
    envelope and name the load envelope in ``KAIROS_LOAD_CGROUPS`` for the loads started
    from here. Returns the lab's side envelopes (empty, and nothing done, without them)."""
    sides = lab_envelopes(path)
    if sides:
        join(sides["control"], pid)
        os.environ[ENV] = os.pathsep.join(sides["load"])
    return sides


def leave_lab(sides: dict[str, list[str]], pid: int = 0) -> None:
    """Undo :func:`enter_lab`, so that ``make lab-down`` can remove the envelopes."""
    if sides:
        leave(sides["control"], pid)
        os.environ.pop(ENV, None)


def lab_envelopes(path: str) -> dict[str, list[str]]:
    """The lab's side envelopes, {"load": dirs, "control": dirs}, from the file ``make
    lab-up`` writes; empty when there is none (a lab without envelopes)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise KairosError(f"{path}: cannot read the lab's envelopes: {exc}") from exc
    return {str(k): [str(d) for d in v] for k, v in data.items()}
