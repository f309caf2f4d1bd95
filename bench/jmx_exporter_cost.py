"""What the Prometheus JMX exporter agent costs a lab node (docs/prometheus.md, "Measured").

For each running lab Cassandra node (its pid from .lab/cassandra/<host>/cassandra.pid): the
CPU seconds it used over a window (utime + stime of /proc/<pid>/stat) and its resident
memory at the end (VmRSS). With ``--scrape S`` the window scrapes each node's agent
(``http://<address>:7070/metrics``, as Prometheus would) every S seconds and reports the
scrape's time and size. Run it once on a lab started without the agent
(``-e cassandra_jmx_exporter_enabled=false``) and once with it.

    .venv/bin/python bench/jmx_exporter_cost.py --seconds 60 [--scrape 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODES = {"cass1": "127.0.0.1", "cass2": "127.0.0.2", "cass3": "127.0.0.3"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scrape", type=float, help="scrape each agent every S seconds")
    args = ap.parse_args()
    pids = {h: int((REPO / ".lab/cassandra" / h / "cassandra.pid").read_text().strip())
            for h in NODES}
    before = {h: cpu_seconds(p) for h, p in pids.items()}
    began = time.monotonic()
    scrapes: list[tuple[float, int]] = []
    while time.monotonic() - began < args.seconds:
        if args.scrape:
            for address in NODES.values():
                t = time.monotonic()
                with urllib.request.urlopen(f"http://{address}:7070/metrics", timeout=10) as r:
                    size = len(r.read())
                scrapes.append((time.monotonic() - t, size))
            time.sleep(max(0.0, args.scrape - (time.monotonic() - began) % args.scrape))
        else:
            time.sleep(min(1.0, args.seconds))
    span = time.monotonic() - began
    out = {
        "seconds": round(span, 1),
        "scrape_interval": args.scrape,
        "cpu_cores": {h: round((cpu_seconds(p) - before[h]) / span, 4) for h, p in pids.items()},
        "rss_mib": {h: round(rss_mib(p), 1) for h, p in pids.items()},
    }
    if scrapes:
        times = sorted(s[0] for s in scrapes)
        out.update(scrapes=len(scrapes), scrape_ms_median=round(1000 * times[len(times) // 2], 1),
                   scrape_ms_max=round(1000 * times[-1], 1), scrape_bytes=scrapes[-1][1])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
