"""Every parameter of the configuration spaces is accepted by the real servers.

Cassandra: one rolling restart at CL ONE (playbooks/change_settings.yml, through the role's
templates) with every cassandra.yaml parameter at a non-default value, under load (two of
the three nodes go down at once; the client must see no failure and lose no acknowledged
write), every node restarting once, back inside its envelope, with its timings recorded;
then each node's system_views.settings must report them. The row cache turned on sets the
load table's caching (rows_per_partition ALL) and the nodes then hold its rows in the cache.
On a lab that outlives the session, a second rolling restart at ONE without load puts the
defaults back (the table's caching to NONE); under `make test`, which stops the lab, it is
left out. QUORUM rollouts under load, one node a batch, are the fault
tests' (test_rollout_faults.py) and the learning loop's. The heap (JVM option) is exercised
by the rollback test of test_apply_plan.py. Redis: CONFIG SET of every live parameter on a
real node with the value the templates would write, then the node's own value is restored.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from planner.model.spaces import get_space, render_settings

from .conftest import (
    REPO,
    PlaybookRun,
    cql_cluster,
    cql_node_cluster,
    lab_stops_after_session,
    redis_client,
    run_playbook,
)
from .lab_plans import HOSTS, pids
from .test_apply_plan import Timeline, load, node_envelope, report, up_normal

pytestmark = pytest.mark.lab

CASSANDRA_VALUES: dict[str, Any] = {
    "memtable_flush_writers": 3,
    "memtable_cleanup_threshold": 0.2,
    "trickle_fsync": True,
    "row_cache_size": "16MiB",
    "memtable_allocation_type": "offheap_buffers",
    "concurrent_reads": 48,
    "concurrent_writes": 48,
    "compaction_throughput": "32MiB/s",
    "concurrent_compactors": 1,
    "key_cache_size": "40MiB",
    "memtable_implementation": "trie",
}
# How system_views.settings prints each value.
CASSANDRA_SHOWN = {
    "memtable_flush_writers": "3",
    "memtable_cleanup_threshold": "0.2",
    "trickle_fsync": "true",
    "row_cache_size": "16MiB",
    "memtable_allocation_type": "offheap_buffers",
    "concurrent_reads": "48",
    "concurrent_writes": "48",
    "compaction_throughput": "32MiB/s",
    "concurrent_compactors": "1",
    "key_cache_size": "40MiB",
    "memtable.configurations": "{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}",
}
# The background load's table: the row cache is only used by tables whose caching says so.
LOAD_TABLE = "kairos_rollout.usertable"


def table_caching(table: str) -> dict[str, str]:
    keyspace, name = table.split(".")
    cluster = cql_cluster(["127.0.0.1"])
    try:
        row = cluster.connect().execute(
            "SELECT caching FROM system_schema.tables WHERE keyspace_name=%s AND table_name=%s",
            (keyspace, name),
        ).one()
    finally:
        cluster.shutdown()
    return dict(row.caching)


def running_setting(address: str, name: str) -> str:
    cluster = cql_node_cluster(address)
    try:
        row = cluster.connect().execute(
            "SELECT value FROM system_views.settings WHERE name = %s", (name,)).one()
    finally:
        cluster.shutdown()
    return str(row.value)


def change_settings(settings: dict[str, Any], cl: str) -> PlaybookRun:
    return run_playbook(
        "playbooks/change_settings.yml", "-e",
        json.dumps({"settings": settings, "cl": cl, "kairos_tables": [LOAD_TABLE]}),
        timeout=900,
    )


def change_settings_under_load(settings: dict[str, Any], cl: str, batches: int,
                               label: str) -> None:
    """change_settings.yml at ``cl`` under a load at ``cl``: it rolls through ``batches``
    batches, and the client sees no failure and loses no acknowledged write."""
    timeline = Timeline()
    with load(cl, timeline) as background:
        time.sleep(3)
        began = time.monotonic()
        run = change_settings(settings, cl)
    result = background.result()
    report(label, result, run, timeline, began)
    assert run.rc == 0, run.output[-4000:]
    assert f"in {batches} batch(es) at {cl}" in run.output
    assert result.ops > 0 and dict(result.failures) == {}
    assert result.acknowledged_writes > 0
    assert result.lost_acknowledged_writes == 0 and result.verified


@pytest.mark.cassandra
def test_every_cassandra_yaml_parameter_is_accepted_by_the_lab_nodes(lab: PlaybookRun) -> None:
    space = get_space("cassandra")
    in_yaml = {k for k, p in space.parameters.items() if p.location == "cassandra.yaml"}
    assert in_yaml == set(CASSANDRA_VALUES), "a new cassandra.yaml parameter needs a value here"
    assert all(CASSANDRA_VALUES[k] != space.defaults()[k] for k in in_yaml)
    space.validate(CASSANDRA_VALUES)
    # The tests after this one expect the lab's defaults, and `make lab-up` keeps the
    # rendered cassandra.yaml: every exit path puts the defaults back.
    defaults = {k: space.defaults()[k] for k in in_yaml}
    # The key cache's default is derived from the heap (25MiB on the lab's 512M, the space's
    # 51MiB is for 1G): put back what the nodes ran.
    defaults["key_cache_size"] = running_setting("127.0.0.1", "key_cache_size")
    before = pids()
    envelope_before = {h: node_envelope(h) for h in HOSTS}
    try:
        change_settings_under_load(CASSANDRA_VALUES, "ONE", 2,
                                   "change_settings.yml (every parameter) at ONE")
        assert table_caching(LOAD_TABLE) == {"keys": "ALL", "rows_per_partition": "ALL"}
        restarted_once_into_envelopes(before, envelope_before)
        cached_rows = 0
        for address in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
            cluster = cql_node_cluster(address)
            try:
                session = cluster.connect()
                rows = session.execute("SELECT name, value FROM system_views.settings")
                shown = {row.name: row.value for row in rows if row.name in CASSANDRA_SHOWN}
                cache = session.execute(
                    "SELECT entry_count FROM system_views.caches WHERE name = 'rows'").one()
                cached_rows += cache.entry_count
            finally:
                cluster.shutdown()
            assert shown == CASSANDRA_SHOWN, f"{address} runs {shown}"
        # The load read its table after the restarts: the rows are in the nodes' row caches.
        print(f"row cache entries after the load: {cached_rows}")
        assert cached_rows > 0
    except BaseException:
        change_settings(defaults, "ONE")  # the defaults back; the first failure is the one told
        raise
    if lab_stops_after_session():
        # A second rolling restart only for a lab that is stopped anyway (CI time): the
        # tests after this one (test_sstable_layout.py) do not depend on these settings.
        print("the lab stops after this session: the defaults are not put back")
        return
    restore_defaults(defaults)


def restore_defaults(defaults: dict[str, Any]) -> None:
    """The defaults back at ONE, without load (the slow part of this test is restarts)."""
    before = pids()
    envelope_before = {h: node_envelope(h) for h in HOSTS}
    run = change_settings(defaults, "ONE")
    assert run.rc == 0, run.output[-4000:]
    assert "in 2 batch(es) at ONE" in run.output
    assert table_caching(LOAD_TABLE) == {"keys": "ALL", "rows_per_partition": "NONE"}
    restarted_once_into_envelopes(before, envelope_before)


def restarted_once_into_envelopes(before: dict[str, int],
                                  envelope_before: dict[str, Any]) -> None:
    """Each node restarted exactly once, into its envelope with the same limits, its
    timings recorded in the ad-hoc state; every node sees the three UN."""
    after = pids()
    assert all(after[h] != before[h] for h in HOSTS), "every node restarts exactly once"
    for host in HOSTS:  # each restarted node is back inside its envelope, limits unchanged
        held = node_envelope(host)
        assert held is None or (held["pids"] == [after[host]]
                                and held["limits"] == envelope_before[host]["limits"]), held
    steps = json.loads((REPO / ".kairos" / "adhoc-lab-cassandra.state.json").read_text())["steps"]
    last = steps[max(steps, key=lambda s: steps[s].get("finished_at") or "")]
    assert last["status"] == "applied", last
    assert set(last["nodes"]) == set(HOSTS)
    for host, phases in last["nodes"].items():
        print(f"  {host}: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
        assert phases["total"] > 0
    for host in HOSTS:
        assert up_normal(host) == set(HOSTS.values())


def _value_for(param: Any, default: Any) -> Any:
    """A valid value other than the default."""
    if param.choices:
        return next(c for c in param.choices if c != default)
    if param.type == "bool":
        return not default
    if param.type == "size":
        return "32mb"
    return (param.minimum or 0) + 1 if default != (param.minimum or 0) + 1 else default + 1


@pytest.mark.redis
def test_every_live_redis_parameter_is_accepted_by_config_set(lab: PlaybookRun) -> None:
    space = get_space("redis")
    client = redis_client(7001, decode_responses=True)
    live = [k for k, p in space.parameters.items() if p.change == "live"]
    assert live
    original = {k: client.config_get(k)[k] for k in live}
    try:
        for key in live:
            param = space.parameters[key]
            value = space.normalize({key: _value_for(param, space.defaults()[key])})
            space.validate(value)
            rendered = render_settings("redis", value)["redis.conf"][key]
            text = {True: "yes", False: "no"}.get(rendered, rendered)
            try:
                assert client.config_set(key, text), key
            except redis.ResponseError as exc:
                # Debian builds Redis against the system jemalloc, which lacks the hooks
                # active defragmentation needs: the name is valid, "yes" is refused.
                assert key == "activedefrag" and "Jemalloc" in str(exc), exc
                print(f"\n{key}={text} refused by this Redis build: {exc}")
                assert client.config_set(key, "no"), key
            assert client.config_get(key)[key] != "", key
        # Restart parameters cannot be set live; the server must know their names (their
        # values go through redis.conf, proven by the Redis executor's io-threads restart).
        for key in (k for k, p in space.parameters.items() if p.change == "restart"):
            assert key in client.config_get(key), f"Redis does not know {key}"
    finally:
        for key, value in original.items():
            client.config_set(key, value)
        client.close()
