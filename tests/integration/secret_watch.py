"""Secrets proven absent over a whole lab session (issue 44 part 4).

:class:`ArgvWatch` samples every process's argv (``/proc/<pid>/cmdline``) four times a
second for as long as the lab fixture holds, while the session's rollouts, fault runs,
calibrations and loads run; :func:`files_holding` reads back every file Kairos wrote under
the given directories (its store, state, plans, reports and logs). The lab fixture fails the
session when a lab password appears in either. A canary, a process started with a random
token in its argv, proves at the start that the sampler sees what it must find.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

#: Files larger than this are read in part: logs are small, the store is a few MB.
MAX_BYTES = 64 * 1024 * 1024


def _argvs() -> Iterable[tuple[int, bytes]]:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                yield int(entry.name), fh.read()
        except OSError:  # gone since the listing
            continue


class ArgvWatch(threading.Thread):
    """Every process's argv, sampled until :meth:`stop`; ``found``: each (pid, program)
    whose argv held a needle."""

    def __init__(self, needles: Callable[[], list[str]], period: float = 0.25) -> None:
        super().__init__(daemon=True, name="argv-watch")
        self.needles = needles
        self.period = period
        self.canary = f"kairos-argv-canary-{secrets.token_hex(8)}"
        self.samples = 0
        self.processes: set[int] = set()
        self.found: set[tuple[int, str]] = set()
        self.canary_seen = False
        self._halt = threading.Event()

    def run(self) -> None:
        while True:
            wanted = [s.encode() for s in self.needles() if s]
            for pid, argv in _argvs():
                self.processes.add(pid)
                if self.canary.encode() in argv:
                    self.canary_seen = True
                for needle in wanted:
                    if needle in argv:
                        name = argv.split(b"\0", 1)[0].decode(errors="replace")
                        self.found.add((pid, name))
            self.samples += 1
            if self._halt.wait(self.period):
                return

    def prove(self) -> None:
        """Run a process with the canary in its argv until the watch has seen it (10 s)."""
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                                 self.canary])
        try:
            for _ in range(100):
                if self.canary_seen:
                    return
                threading.Event().wait(0.1)
            raise AssertionError("the argv watch did not see its canary in 10 s")
        finally:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def files_holding(roots: Iterable[Path], needles: list[str]) -> list[str]:
    """Every file under ``roots`` whose bytes hold one of ``needles``."""
    wanted = [s.encode() for s in needles if s]
    hits: list[str] = []
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            try:
                with path.open("rb") as fh:
                    data = fh.read(MAX_BYTES)
            except OSError:
                continue
            if any(n in data for n in wanted):
                hits.append(str(path))
    return hits
