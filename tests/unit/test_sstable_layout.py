"""planner.lab.sstable_layout: what it reads from the lab and refuses before touching a node.

The save and the restore themselves run nodetool against the lab's nodes:
tests/integration/test_sstable_layout.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import KairosError, ValidationError
from planner.lab import sstable_layout as sl

FIXTURES = Path(__file__).parent / "fixtures" / "nodetool"


def _node(root: Path, name: str, address: str) -> Path:
    home = root / name
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "cassandra.yaml").write_text(
        f"listen_address: {address}\nrpc_address: {address}\n"
        f"data_file_directories:\n  - {home / 'data'}\n")
    return home


def test_sstable_count_from_captured_tablestats() -> None:
    assert sl.sstable_count((FIXTURES / "tablestats_one_table.txt").read_text()) == 3


def test_sstable_count_refuses_output_without_it() -> None:
    with pytest.raises(KairosError, match="no 'SSTable count'"):
        sl.sstable_count("Total number of tables: 0\n")


def test_lab_nodes_maps_addresses_to_node_directories(tmp_path: Path) -> None:
    _node(tmp_path, "cass1", "127.0.0.1")
    home2 = _node(tmp_path, "cass2", "127.0.0.2")
    nodes = sl.lab_nodes(tmp_path, ["127.0.0.2", "127.0.0.1"])
    assert [n.name for n in nodes] == ["cass2", "cass1"]
    assert nodes[0].data_dirs == (home2 / "data",)


def test_lab_nodes_names_the_address_no_node_serves(tmp_path: Path) -> None:
    _node(tmp_path, "cass1", "127.0.0.1")
    with pytest.raises(ValidationError, match=r"no node listens on 127\.0\.0\.9 "
                       r"\(found 127\.0\.0\.1\)"):
        sl.lab_nodes(tmp_path, ["127.0.0.1", "127.0.0.9"])


def test_table_dir_is_the_newest_of_a_table_created_twice(tmp_path: Path) -> None:
    import os

    home = _node(tmp_path, "cass1", "127.0.0.1")
    old = home / "data" / "ks" / "t-1111"
    new = home / "data" / "ks" / "t-2222"
    other = home / "data" / "ks" / "t_other-3333"
    for d in (old, new, other):
        d.mkdir(parents=True)
    os.utime(old, (1, 1))
    node = sl.lab_nodes(tmp_path, ["127.0.0.1"])[0]
    assert node.table_dir("ks", "t") == new
    with pytest.raises(KairosError, match=r"no directory of ks\.missing"):
        node.table_dir("ks", "missing")


def test_read_record_refuses_a_missing_or_foreign_layout(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"no saved layout .*--save-layout"):
        sl.read_record(tmp_path, keyspace="ks", table="t")
    (tmp_path / sl.RECORD).write_text(json.dumps({"keyspace": "ks", "table": "other",
                                                  "nodes": {}}))
    with pytest.raises(ValidationError, match=r"saved from ks\.other, not ks\.t"):
        sl.read_record(tmp_path, keyspace="ks", table="t")


def test_save_refuses_a_directory_that_holds_a_layout(tmp_path: Path) -> None:
    (tmp_path / sl.RECORD).write_text("{}")
    with pytest.raises(ValidationError, match="already holds a layout"):
        sl.save([], keyspace="ks", table="t", dest=tmp_path)


def test_restore_refuses_a_node_with_nothing_saved_before_truncating(tmp_path: Path) -> None:
    _node(tmp_path / "lab", "cass1", "127.0.0.1")
    (tmp_path / sl.RECORD).write_text(json.dumps({"keyspace": "ks", "table": "t",
                                                  "nodes": {"cass9": {"sstables": 1}}}))
    truncated: list[str] = []
    with pytest.raises(ValidationError, match="nothing saved for cass1"):
        sl.restore(sl.lab_nodes(tmp_path / "lab", ["127.0.0.1"]), keyspace="ks", table="t",
                   src=tmp_path, truncate=truncated.append)
    assert truncated == []


def test_nodetool_failure_names_the_node_and_the_command(tmp_path: Path) -> None:
    home = _node(tmp_path, "cass1", "127.0.0.1")
    (home / "bin").mkdir()
    tool = home / "bin" / "nodetool"
    tool.write_text("#!/bin/sh\necho 'nodetool: Keyspace ks does not exist' >&2\nexit 1\n")
    tool.chmod(0o755)
    node = sl.lab_nodes(tmp_path, ["127.0.0.1"])[0]
    with pytest.raises(KairosError, match=r"cass1: nodetool import ks t /x exited 1: "
                       r"nodetool: Keyspace ks does not exist"):
        node.nodetool("import", "ks", "t", "/x")


def test_restore_stops_before_the_import_when_the_truncate_left_sstables(tmp_path: Path) -> None:
    home = _node(tmp_path / "lab", "cass1", "127.0.0.1")
    table_dir = home / "data" / "ks" / "t-0123"
    table_dir.mkdir(parents=True)
    (table_dir / "nb-7-big-Data.db").write_bytes(b"x" * 42)
    (home / "bin").mkdir()
    calls = tmp_path / "calls"
    tool = home / "bin" / "nodetool"
    # A node whose table still holds the fixture's 3 SSTables, whatever is asked.
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                    f"cat {FIXTURES / 'tablestats_one_table.txt'}\n")
    tool.chmod(0o755)
    saved = tmp_path / "saved"
    (saved / "cass1").mkdir(parents=True)
    (saved / "cass1" / "nb-1-big-Data.db").write_bytes(b"y")
    (saved / sl.RECORD).write_text(json.dumps({"keyspace": "ks", "table": "t",
                                               "nodes": {"cass1": {"sstables": 1}}}))
    truncated: list[str] = []
    with pytest.raises(KairosError, match=r"^cass1: 3 SSTable\(s\) of ks.t left after the "
                       r"TRUNCATE, before the import: nb-7-big-Data.db \(42 B, \d+ s old\)$"):
        sl.restore(sl.lab_nodes(tmp_path / "lab", ["127.0.0.1"]), keyspace="ks", table="t",
                   src=saved, truncate=truncated.append)
    assert truncated == ["TRUNCATE ks.t"]
    assert [c.split()[0] for c in calls.read_text().splitlines()] == ["tablestats"]
