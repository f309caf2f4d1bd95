"""planner.lab.sstable_layout on the lab: a table's SSTables saved, the table changed, and the saved
SSTables put back on every node (what bench/payoff.py --layout does before every run).

Rows written after the save are gone after the restore, the saved ones are back, and each
node holds as many SSTables as were saved. About a minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.lab import sstable_layout as sl

from .conftest import PlaybookRun, cql_cluster
from .lab_plans import HOSTS, LAB

pytestmark = [pytest.mark.lab, pytest.mark.cassandra]

KEYSPACE, TABLE = "kairos_layout", "events"


def test_a_saved_layout_is_put_back_on_every_node(lab: PlaybookRun, tmp_path: Path) -> None:
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    cluster = cql_cluster(list(HOSTS.values()), app=True)
    session = cluster.connect()
    try:
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 3}", timeout=60)
        session.execute(f"DROP TABLE IF EXISTS {KEYSPACE}.{TABLE}", timeout=60)
        session.execute(f"CREATE TABLE {KEYSPACE}.{TABLE} (k int PRIMARY KEY, v text)",
                        timeout=60)
        insert = session.prepare(f"INSERT INTO {KEYSPACE}.{TABLE} (k, v) VALUES (?, ?)")
        insert.consistency_level = ConsistencyLevel.ALL

        def write(keys: range) -> None:
            for k in keys:
                session.execute(insert, (k, f"v{k}"))

        def keys() -> set[int]:
            rows = session.execute(SimpleStatement(f"SELECT k FROM {KEYSPACE}.{TABLE}",
                                                   consistency_level=ConsistencyLevel.ALL))
            return {r.k for r in rows}

        nodes = sl.lab_nodes(LAB, list(HOSTS.values()))
        write(range(0, 50))
        for n in nodes:
            n.nodetool("flush", KEYSPACE, TABLE)
        record = sl.save(nodes, keyspace=KEYSPACE, table=TABLE, dest=tmp_path / "layout")
        assert {k: v["sstables"] for k, v in record["nodes"].items()} == {
            n.name: 1 for n in nodes}

        write(range(50, 80))  # a second SSTable on every node, rows the layout does not hold
        for n in nodes:
            n.nodetool("flush", KEYSPACE, TABLE)
        assert keys() == set(range(80))

        def truncate(cql: str) -> None:
            session.execute(SimpleStatement(cql, consistency_level=ConsistencyLevel.ALL),
                            timeout=120)

        counts = sl.restore(nodes, keyspace=KEYSPACE, table=TABLE, src=tmp_path / "layout",
                            truncate=truncate)
        assert counts == {n.name: 1 for n in nodes}
        assert keys() == set(range(50))
        # the truncation's own snapshots are gone; the saved files still hold the layout
        for n in nodes:
            assert not list((n.table_dir(KEYSPACE, TABLE) / "snapshots").glob("truncated-*"))
            assert list((tmp_path / "layout" / n.name).glob("*-Data.db"))
        # a second restore from the same files (every payoff run does one)
        assert sl.restore(nodes, keyspace=KEYSPACE, table=TABLE, src=tmp_path / "layout",
                          truncate=truncate) == counts
        assert keys() == set(range(50))
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}", timeout=120)
        cluster.shutdown()
