"""The lab's envelopes on the real lab: each node a small machine (docs/envelopes.md).

Limits are read back from the kernel's cgroup files, never from what the inventory asked;
the expected values come from the inventory.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils import kairos_cgroup as cgroup

from planner.loadgen import BackgroundLoad, envelope

from .conftest import LAB_ENVELOPES, REPO, PlaybookRun, run_playbook
from .lab_plans import HOSTS, LAB, node_pid, pids

pytestmark = pytest.mark.lab

GROUP_VARS = REPO / "inventories" / "local" / "group_vars"
REDIS_PID_FILES = {f"redis{i}": REPO / ".lab" / "redis" / f"redis{i}" / "redis.pid"
                   for i in range(1, 7)}


def inventory_envelope(group: str) -> dict[str, Any]:
    data = yaml.safe_load((GROUP_VARS / f"{group}.yml").read_text())
    return cgroup.check_limits(data[f"{group}_envelope"])


def envelope_of(name: str) -> dict[str, Any] | None:
    """The envelope as the kernel holds it now (None when it does not exist)."""
    kind, folders = cgroup.layout()
    if kind is None:
        pytest.skip(f"no envelopes on this machine: {folders}")
    return cgroup.read(kind, folders, name)


@pytest.mark.cassandra
@pytest.mark.redis
def test_lab_status_prints_every_nodes_envelope_as_the_kernel_holds_it(lab: PlaybookRun) -> None:
    status = run_playbook("playbooks/lab_status.yml")
    assert status.rc == 0, status.output[-3000:]
    for group, hosts in (("cassandra", {h: LAB / h / "cassandra.pid" for h in HOSTS}),
                         ("redis", REDIS_PID_FILES)):
        wanted = inventory_envelope(group)
        for host, pid_file in hosts.items():
            held = envelope_of(f"lab-{host}")
            assert held is not None, f"{host} has no envelope"
            pid = int(pid_file.read_text())
            assert held["pids"] == [pid], f"{host}: pid {pid} alone in its envelope"
            for key in ("cpu", "memory", "read_iops", "read_bps"):
                assert held["limits"][key] == wanted[key], (host, key, held["limits"])
            line = re.search(rf"{host} envelope: ([^\n]*(?:\n +[^\n]*)*)", status.output)
            assert line, f"lab-status printed no envelope for {host}"
            text = " ".join(line.group(1).split())
            assert text.startswith(cgroup.describe(held["limits"])), text
            assert f"pids {pid})" in text, text


@pytest.mark.cassandra
def test_a_write_load_fills_a_nodes_page_cache_up_to_its_limit_and_no_further(
    lab: PlaybookRun,
) -> None:
    """Large writes (commit log, memtable flushes, compactions) fill the page cache; the
    envelope holds usage at its limit by reclaiming cache, the node is not OOM-killed and
    serves every write; the load's workers run in the load envelope, not beside the nodes."""
    limit = inventory_envelope("cassandra")["memory"]
    host = "cass1"
    pid = node_pid(host)
    start = envelope_of(f"lab-{host}")
    assert start is not None
    samples, load_pids = [], set()
    with BackgroundLoad(
        engine="cassandra", contact_points=list(HOSTS.values()), cl="ONE",
        keyspace="kairos_envelope", mix={"insert": 1.0}, keys=20_000, max_keys=20_000,
        value_size=128 * 1024, concurrency=16, max_seconds=240, seed=3, verify=False,
    ) as background:
        deadline = time.monotonic() + 230
        while time.monotonic() < deadline:
            held = envelope_of(f"lab-{host}")
            assert held is not None
            samples.append(held["usage"])
            load_pids.update(envelope_of("lab-load")["pids"] if LAB_ENVELOPES.exists() else [])
            # Five samples after the limit first bound: the node lives on at its limit.
            bound = [s for s in samples if s["limit_hits"] > start["usage"]["limit_hits"]]
            if len(bound) >= 5:
                break
            time.sleep(1)
    result = background.result()
    peak = max(s["memory_bytes"] for s in samples)
    cache = max(s["page_cache_bytes"] for s in samples)
    print(f"\n{host}: {len(samples)} samples, usage peak {peak / 2**20:.0f} MiB of "
          f"{limit / 2**20:.0f}, page cache peak {cache / 2**20:.0f} MiB, limit met "
          f"{samples[-1]['limit_hits'] - start['usage']['limit_hits']} times; load "
          f"{result.ops} writes ({result.ops_per_s:.0f}/s), failures {dict(result.failures)}")
    assert samples[-1]["limit_hits"] > start["usage"]["limit_hits"], (
        "the load never filled the envelope: nothing shows the limit binds")
    assert peak <= limit
    assert all(s["page_cache_bytes"] + s["rss_bytes"] <= limit for s in samples)
    assert cache > 0.25 * limit, "the page cache should take what the JVM leaves"
    assert samples[-1]["oom_kills"] == 0
    assert node_pid(host) == pid and envelope_of(f"lab-{host}")["pids"] == [pid]
    assert result.ops > 0 and dict(result.failures) == {}
    if LAB_ENVELOPES.exists():
        sides = envelope.lab_envelopes(str(LAB_ENVELOPES))
        assert load_pids, "the load's workers never ran in the load envelope"
        assert not load_pids & set(pids().values()), "a node in the load envelope"
        assert sides["load"] and sides["control"]
    drop_keyspace("kairos_envelope")


def drop_keyspace(keyspace: str) -> None:
    """Drop the test's gigabytes, and the snapshot auto_snapshot takes of them."""
    from .conftest import cql_cluster

    cluster = cql_cluster(list(HOSTS.values()), app=True)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    finally:
        cluster.shutdown()
    for host in HOSTS:
        subprocess.run([str(Path(LAB / host / "bin" / "nodetool")), "clearsnapshot", "--all",
                        "--", keyspace], check=True, capture_output=True, timeout=120)
