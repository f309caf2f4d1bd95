"""The Java map parser both sides of the module seam read with (module_utils/kairos_javamap.py).

The formats are the ones the fixtures and the read-back tests hold: the row
``memtable.configurations`` as Cassandra 5.0.6 prints it (java.util.HashMap.toString() of
InheritingClass entries; tests/unit/test_spaces.py, test_readback_and_lock.py,
test_modules_cassandra.py) and the replication maps of ``nodetool describecluster``
(tests/unit/fixtures/nodetool/describecluster*.txt).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from ansible.module_utils import kairos_javamap, kairos_settings
from ansible.module_utils.kairos_javamap import java_map, memtable_configuration

import planner.model.spaces
from planner import _module_utils

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("text", "entries"),
    [
        # memtable.configurations, Cassandra 5.0.6 (hash order, not the file's)
        ("{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}",
         {"default": "trie+", "skiplist": "SkipListMemtable", "trie": "TrieMemtable"}),
        ("{trie=TrieMemtable, default=trie+, skiplist=SkipListMemtable}",
         {"trie": "TrieMemtable", "default": "trie+", "skiplist": "SkipListMemtable"}),
        # a nested parameters map stays one value, commas and all
        ("{default=fast+, fast=TrieMemtable{shards=4, x=y}}",
         {"default": "fast+", "fast": "TrieMemtable{shards=4, x=y}"}),
        ("{default=org.apache.cassandra.db.memtable.TrieMemtable{shards=4}}",
         {"default": "org.apache.cassandra.db.memtable.TrieMemtable{shards=4}"}),
        ("{default=trie+SkipListMemtable, trie=TrieMemtable}",
         {"default": "trie+SkipListMemtable", "trie": "TrieMemtable"}),
        # a map's parameters, read again
        ("{shards=4, x=y}", {"shards": "4", "x": "y"}),
        # table options as java.util.Map.toString() prints them
        ("{class=org.apache.cassandra.db.compaction.LeveledCompactionStrategy, "
         "max_threshold=32, min_threshold=4}",
         {"class": "org.apache.cassandra.db.compaction.LeveledCompactionStrategy",
          "max_threshold": "32", "min_threshold": "4"}),
        ("{keys=ALL, rows_per_partition=NONE}", {"keys": "ALL", "rows_per_partition": "NONE"}),
        # blanks around entries, keys and values; an empty entry is skipped
        ("  { a = b ,c=d{e=f, g=h} , }  ", {"a": "b", "c": "d{e=f, g=h}"}),
        ("{}", {}),
        ("{a=}", {"a": ""}),
        ("{a=b=c}", {"a": "b=c"}),  # the first = splits
    ],
)
def test_a_java_map_is_split_outside_braces(text: str, entries: dict[str, str]) -> None:
    assert java_map(text) == entries


def test_every_replication_map_of_the_describecluster_fixtures_reads() -> None:
    line = re.compile(r"^\s*(\S+) -> Replication class: (\w+) (\{.*\})$")
    seen = {}
    for path in sorted((FIXTURES / "nodetool").glob("describecluster*.txt")):
        for match in filter(None, map(line.match, path.read_text().splitlines())):
            seen[match[1]] = (match[2], java_map(match[3]))
    assert seen == {
        "system_traces": ("SimpleStrategy", {"replication_factor": "2"}),
        "system_distributed": ("SimpleStrategy", {"replication_factor": "3"}),
        "system_auth": ("SimpleStrategy", {"replication_factor": "1"}),
        "system_schema": ("LocalStrategy", {}),
        "system": ("LocalStrategy", {}),
    }


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("SkipListMemtable", r"not a map: 'SkipListMemtable'"),
        ("not a map", r"not a map: 'not a map'"),
        ("{a=b", r"not a map: '\{a=b'"),
        ("", r"not a map: ''"),
        ("{a=b, c}", r"not a map entry: 'c'"),
        ("{TrieMemtable}", r"not a map entry: 'TrieMemtable'"),
    ],
)
def test_what_is_not_a_java_map_is_a_value_error(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        java_map(text)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("trie+", {"inherits": "trie", "class_name": "", "parameters": None}),
        ("TrieMemtable", {"inherits": None, "class_name": "TrieMemtable", "parameters": None}),
        ("trie+SkipListMemtable",
         {"inherits": "trie", "class_name": "SkipListMemtable", "parameters": None}),
        ("TrieMemtable{shards=4, x=y}",
         {"inherits": None, "class_name": "TrieMemtable", "parameters": "{shards=4, x=y}"}),
        ("org.apache.cassandra.db.memtable.TrieMemtable{shards=4}",
         {"inherits": None, "class_name": "org.apache.cassandra.db.memtable.TrieMemtable",
          "parameters": "{shards=4}"}),
        ("", {"inherits": None, "class_name": "", "parameters": None}),
    ],
)
def test_a_memtable_configuration_has_three_parts(
    text: str, parts: dict[str, str | None]
) -> None:
    assert memtable_configuration(text) == parts


@pytest.mark.parametrize("text", ["{shards=4}+", "a=b", "trie+fast+", "TrieMemtable{shards=4}x"])
def test_what_is_not_a_memtable_configuration_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match=f"not a memtable configuration: {re.escape(repr(text))}"):
        memtable_configuration(text)


def test_the_planner_and_the_modules_read_with_the_same_parser() -> None:
    # One module, imported once, under the name Ansible ships it as.
    assert _module_utils.kairos_javamap is kairos_javamap
    assert planner.model.spaces.kairos_javamap is kairos_javamap
    assert kairos_settings.java_map is java_map
    assert sys.modules["ansible.module_utils.kairos_javamap"] is kairos_javamap
    assert Path(kairos_javamap.__file__ or "") == REPO / "module_utils" / "kairos_javamap.py"


def test_the_parser_imports_nothing_but_the_standard_library() -> None:
    # The planner imports it outside Ansible, the nodes inside AnsiballZ: plain Python only.
    tree = ast.parse((REPO / "module_utils" / "kairos_javamap.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_no_other_java_map_parser_is_left() -> None:
    # The split outside braces, written once (issue 39: it lived on both sides of the seam).
    twins = [
        path.relative_to(REPO).as_posix()
        for folder in ("planner", "library", "module_utils")
        for path in sorted((REPO / folder).rglob("*.py"))
        if 'depth += {"{": 1, "}": -1}' in path.read_text()
    ]
    assert twins == ["module_utils/kairos_javamap.py"]
