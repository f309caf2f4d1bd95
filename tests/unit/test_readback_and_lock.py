"""Read-back comparison (against real system_views.settings output) and the run lock's liveness."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.kairos_lease import holder_dead
from ansible.module_utils.kairos_proc import process_start
from ansible.module_utils.kairos_settings import (
    memtable_configurations,
    mismatches,
    running_value,
    same_setting,
    settings_row,
)

FIXTURE = Path(__file__).parent / "fixtures" / "cassandra_views" / "settings_cass2.json"


def running() -> dict[str, str]:
    return json.loads(FIXTURE.read_text())["rows"]


def test_the_rendered_file_values_match_what_the_node_reports() -> None:
    # What planner.model.spaces.render_settings writes for the defaults, against cass2's answer.
    written = {
        "memtable_flush_writers": 2,
        "trickle_fsync": False,
        "row_cache_size": "0MiB",
        "concurrent_writes": 32,
        "concurrent_reads": 32,
        "memtable_allocation_type": "heap_buffers",
        "key_cache_size": "25MiB",
    }
    assert mismatches(written, running()) == []


@pytest.mark.parametrize(
    ("expected", "actual", "same"),
    [
        (0.33333334, "0.33333334", True),
        (0.33, "0.33000001", True),  # float32 on the node
        (0.33, "0.33333334", False),
        ("64MiB", "64MiB", True),
        ("1GiB", "1024MiB", True),
        ("64MiB", "0MiB", False),
        (True, "true", True),
        (False, "true", False),
        (4, "2", False),
        ("HEAP_BUFFERS", "heap_buffers", True),
        ("LeveledCompactionStrategy", "SizeTieredCompactionStrategy", False),
        (4, None, False),
    ],
)
def test_a_value_reads_back_equal_only_when_it_is(
    expected: object, actual: object, same: bool
) -> None:
    assert same_setting(expected, actual) is same


MEMTABLE_TRIE = {"configurations": {"skiplist": {"class_name": "SkipListMemtable"},
                                    "trie": {"class_name": "TrieMemtable"},
                                    "default": {"inherits": "trie"}}}


@pytest.mark.parametrize(
    ("shown", "same"),
    [
        # Cassandra 5.0.6: HashMap.toString() of the configurations (hash order, not the file's)
        ("{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}", True),
        ("{trie=TrieMemtable, default=trie+, skiplist=SkipListMemtable}", True),
        ('{"default": {"class_name": null, "parameters": null, "inherits": "trie"}, '
         '"skiplist": {"class_name": "SkipListMemtable", "parameters": null, "inherits": null}, '
         '"trie": {"class_name": "TrieMemtable", "parameters": {}, "inherits": null}}', True),
        ("{default=skiplist+, skiplist=SkipListMemtable, trie=TrieMemtable}", False),
        ("{default=trie+, trie=TrieMemtable}", False),
        ("{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable{shards=4}}", False),
        ("not a map", False),
        (None, False),  # no memtable key in the file the node started with
    ],
)
def test_the_memtable_mapping_reads_back_from_its_dotted_row(shown: str | None,
                                                             same: bool) -> None:
    assert settings_row("memtable") == "memtable.configurations"
    assert settings_row("concurrent_reads") == "concurrent_reads"
    assert same_setting(MEMTABLE_TRIE, running_value("memtable", shown)) is same


def test_a_memtable_configuration_keeps_its_parameters() -> None:
    assert memtable_configurations("{default=fast+, fast=TrieMemtable{shards=4, x=y}}") == {
        "default": {"inherits": "fast"},
        "fast": {"class_name": "TrieMemtable", "parameters": {"shards": "4", "x": "y"}},
    }
    expected = {"configurations": {"fast": {"class_name": "TrieMemtable",
                                            "parameters": {"shards": 4, "x": "y"}}}}
    assert same_setting(expected, running_value("memtable", "{fast=TrieMemtable{shards=4, x=y}}"))


def test_the_memtable_mapping_in_the_file_compares_as_a_mapping() -> None:
    # yaml.safe_load of the rendered file: the same mapping, keys in the file's order
    in_file = {"configurations": {"default": {"inherits": "trie"},
                                  "skiplist": {"class_name": "SkipListMemtable"},
                                  "trie": {"class_name": "TrieMemtable"}}}
    assert mismatches({"memtable": MEMTABLE_TRIE}, {"memtable": in_file}) == []
    in_file["configurations"]["default"] = {"inherits": "skiplist"}
    assert mismatches({"memtable": MEMTABLE_TRIE}, {"memtable": in_file}) == [
        f"memtable: expected {MEMTABLE_TRIE!r}, reads {in_file!r}"
    ]
    assert not same_setting(MEMTABLE_TRIE, "trie")  # a scalar is not the mapping


def test_mismatches_name_the_key_and_both_values() -> None:
    assert mismatches({"memtable_flush_writers": 4, "concurrent_reads": 32}, running()) == [
        "memtable_flush_writers: expected 4, reads '2'"
    ]


def test_a_lock_held_by_a_live_process_on_this_host_is_kept() -> None:
    holder = {"owner": "a", "host": socket.gethostname(), "pid": os.getpid(),
              "pid_start": process_start(os.getpid())}
    assert holder_dead(holder, 1800, time.time()) is None


def test_a_lock_whose_process_is_gone_is_dead_at_once() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    holder = {"owner": "a", "host": socket.gethostname(), "pid": child.pid,
              "created_at": time.time(), "heartbeat_at": time.time()}
    assert holder_dead(holder, 1800, time.time()) == (
        f"its process {child.pid} on {socket.gethostname()} is gone"
    )


def test_a_reused_pid_is_told_apart_by_its_start_time() -> None:
    holder = {"owner": "a", "host": socket.gethostname(), "pid": os.getpid(),
              "pid_start": process_start(os.getpid()) - 1}
    assert "the pid was reused" in str(holder_dead(holder, 1800, time.time()))


def test_a_lock_from_another_host_is_judged_by_its_heartbeat() -> None:
    now = time.time()
    holder = {"owner": "a", "host": "elsewhere", "pid": 1, "heartbeat_at": now - 100}
    assert holder_dead(holder, 1800, now) is None
    assert holder_dead(holder, 60, now) == "no heartbeat for 100 s"
