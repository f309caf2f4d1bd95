"""Configuration spaces: names, validation, candidates and rendering."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.kairos_settings import memtable_configurations, running_value

from planner.errors import ValidationError
from planner.model.spaces import (
    change_kind,
    from_settings_view,
    get_space,
    render_settings,
    settings_row,
)

REPO = Path(__file__).resolve().parents[2]

SOPHIA_SEVEN = (
    "compaction",
    "memtable_flush_writers",
    "memtable_cleanup_threshold",
    "trickle_fsync",
    "row_cache_size",
    "concurrent_writes",
    "heap_size",
)
SEED_002 = ("concurrent_reads", "memtable_allocation_type", "memtable_cleanup_threshold")


def test_cassandra_space_has_sophia_and_seed_002_parameters() -> None:
    space = get_space("cassandra")
    for name in (*SOPHIA_SEVEN, *SEED_002):
        assert name in space


def test_cassandra_names_and_formats_are_the_50_ones() -> None:
    space = get_space("cassandra")
    # 5.0 renamed row_cache_size_in_mb -> row_cache_size with a unit suffix.
    assert "row_cache_size_in_mb" not in space
    defaults = space.defaults()
    assert defaults["row_cache_size"] == "0MiB"
    assert defaults["concurrent_writes"] == 32
    assert defaults["concurrent_reads"] == 32
    assert defaults["memtable_allocation_type"] == "heap_buffers"
    assert defaults["trickle_fsync"] is False
    assert space["heap_size"].location == "jvm"
    assert space["compaction"].location == "table"
    assert space["compaction"].live_command.startswith("ALTER TABLE")
    assert space["concurrent_writes"].live_command == "nodetool setconcurrency MutationStage <n>"


def test_redis_space_names_and_change_kinds() -> None:
    space = get_space("redis")
    assert space["io-threads"].change == "restart"
    assert space["io-threads-do-reads"].change == "restart"
    for name in (
        "maxmemory-policy",
        "appendfsync",
        "hz",
        "activedefrag",
        "lazyfree-lazy-eviction",
        "hash-max-listpack-entries",
    ):
        assert space[name].change == "live"
        assert space[name].live_command.startswith(f"CONFIG SET {name} ")
    # 7.0 uses listpack names; the ziplist names are gone.
    assert "hash-max-ziplist-entries" not in space


def test_every_parameter_default_is_valid_in_its_space() -> None:
    for engine in ("cassandra", "redis"):
        space = get_space(engine)
        assert space.normalize(space.defaults()) == space.defaults()


@pytest.mark.parametrize(
    ("engine", "config", "match"),
    [
        ("cassandra", {"concurrent_writz": 32}, r"concurrent_writz: unknown cassandra parameter"),
        ("cassandra", {"concurrent_writes": 1}, r"concurrent_writes: 1 is below the minimum 2"),
        ("cassandra", {"concurrent_writes": 32.5}, r"concurrent_writes: 32.5 is not an integer"),
        ("cassandra", {"memtable_cleanup_threshold": 1.5}, r"above the maximum 0.99"),
        ("cassandra", {"compaction": "Tiered"}, r"compaction: 'Tiered' is not one of"),
        ("cassandra", {"heap_size": "256M"}, r"heap_size: '256M' is below the minimum 512M"),
        ("cassandra", {"row_cache_size": "64XB"}, r"row_cache_size: unknown size unit 'XB'"),
        ("cassandra", {"trickle_fsync": "maybe"}, r"trickle_fsync: 'maybe' is not a boolean"),
        (
            "cassandra",
            {"memtable_implementation": "btree"},
            r"memtable_implementation: 'btree' is not one of skiplist, trie",
        ),
        (
            "cassandra",
            {"memtable": "trie"},
            r"memtable: unknown cassandra parameter \(did you mean .*memtable_implementation\?",
        ),
        ("redis", {"hz": 501}, r"hz: 501 is above the maximum 500"),
        ("redis", {"maxmemory-policy": "lru"}, r"maxmemory-policy: 'lru' is not one of"),
        ("redis", {"io_threads": 2}, r"did you mean io-threads"),
    ],
)
def test_invalid_configuration_names_key_and_reason(
    engine: str, config: dict[str, object], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        get_space(engine).validate(config)


def test_unknown_engine_is_an_error() -> None:
    with pytest.raises(ValidationError, match="unknown engine 'mongo'"):
        get_space("mongo")


def test_sizes_are_normalised_to_the_engine_format() -> None:
    cass = get_space("cassandra")
    assert cass.normalize({"row_cache_size": 64})["row_cache_size"] == "64MiB"
    assert cass.normalize({"row_cache_size": "1GiB"})["row_cache_size"] == "1024MiB"
    assert cass.normalize({"heap_size": "1024M"})["heap_size"] == "1G"
    assert cass.normalize({"heap_size": 768})["heap_size"] == "768M"
    redis = get_space("redis")
    assert redis.normalize({"maxmemory": "1gb"})["maxmemory"] == "1024mb"
    # redis.conf: 1g is 10^9 bytes, not a GiB
    assert redis.normalize({"maxmemory": "1g"})["maxmemory"] == "1000000000"
    assert redis.normalize({"activedefrag": "yes"})["activedefrag"] is True


def test_restart_and_live_partition_keys() -> None:
    space = get_space("cassandra")
    keys = ["compaction", "heap_size", "concurrent_writes", "trickle_fsync"]
    assert space.live_params(keys) == ["compaction", "concurrent_writes"]
    assert space.restart_params(keys) == ["heap_size", "trickle_fsync"]


def test_row_cache_resize_is_live_only_between_nonzero_sizes() -> None:
    assert change_kind("cassandra", "row_cache_size", "0MiB", "64MiB") == "restart"
    assert change_kind("cassandra", "row_cache_size", "64MiB", "128MiB") == "live"
    assert change_kind("redis", "hz", 10, 50) == "live"


@pytest.mark.parametrize("engine", ["cassandra", "redis"])
def test_candidates_are_valid_distinct_and_few(engine: str) -> None:
    space = get_space(engine)
    cands = space.candidates()
    assert 2 <= len(cands) <= 32
    assert cands[0] == space.defaults()
    assert len({tuple(sorted(c.items(), key=str)) for c in cands}) == len(cands)
    for c in cands:
        space.validate(c)


def test_cassandra_candidates_run_on_a_small_lab() -> None:
    space = get_space("cassandra")
    heaps = {space["heap_size"].size_mib(c["heap_size"]) for c in space.candidates()}
    assert heaps <= {512.0, 1024.0}
    with_heap = space.candidates(keys=["compaction", "heap_size"])
    assert {c["heap_size"] for c in with_heap} == {"512M", "1G"}


def test_candidate_grid_too_large_is_an_error() -> None:
    space = get_space("redis")
    with pytest.raises(ValidationError, match=r"has 64 configurations, more than max_configs=32"):
        space.candidates(keys=[*space.grid_keys, "activedefrag", "lazyfree-lazy-expire"])


def test_render_cassandra_settings() -> None:
    out = render_settings(
        "cassandra",
        {
            "heap_size": "1024M",
            "row_cache_size": 64,
            "compaction": "LeveledCompactionStrategy",
            "trickle_fsync": True,
            "memtable_cleanup_threshold": 0.11,
        },
    )
    assert out == {
        "cassandra.yaml": {
            "row_cache_size": "64MiB",
            "trickle_fsync": True,
            "memtable_cleanup_threshold": 0.11,
        },
        "jvm": {"-Xms": "1G", "-Xmx": "1G"},
        "table": {
            "compaction": {"class": "LeveledCompactionStrategy"},
            "caching": {"keys": "ALL", "rows_per_partition": "ALL"},
        },
    }


def test_render_redis_settings_uses_directive_syntax() -> None:
    out = render_settings(
        "redis", {"appendfsync": "no", "activedefrag": True, "hz": 20, "maxmemory": "256mb"}
    )
    assert out == {
        "redis.conf": {"appendfsync": "no", "activedefrag": "yes", "hz": "20", "maxmemory": "256mb"}
    }


def test_render_rejects_invalid_configuration() -> None:
    with pytest.raises(ValidationError, match=re.escape("hz: 0 is below the minimum 1")):
        render_settings("redis", {"hz": 0})


def test_changed_keys_compare_canonical_values() -> None:
    space = get_space("cassandra")
    assert space.changed_keys({"heap_size": "1024M"}, {"heap_size": "1G"}) == []
    assert space.changed_keys({}, {"concurrent_writes": 64}) == ["concurrent_writes"]


# ------------------------------------------------------------ the trie memtable
def _memtable(default: str) -> dict[str, Any]:
    """cassandra.yaml's memtable mapping as Cassandra 5.0's own file writes it."""
    return {
        "configurations": {
            "skiplist": {"class_name": "SkipListMemtable"},
            "trie": {"class_name": "TrieMemtable"},
            "default": {"inherits": default},
        }
    }


def test_memtable_implementation_is_a_restart_cassandra_yaml_enum_outside_the_grid() -> None:
    space = get_space("cassandra")
    param = space["memtable_implementation"]
    assert (param.type, param.default, param.choices) == ("enum", "skiplist", ("skiplist", "trie"))
    assert (param.change, param.location, param.live_command) == ("restart", "cassandra.yaml", None)
    assert param.candidate_values == ("skiplist", "trie")
    assert "memtable_implementation" not in space.grid_keys  # like compaction_throughput
    assert space.restart_params(["memtable_implementation"]) == ["memtable_implementation"]
    assert change_kind("cassandra", "memtable_implementation", "skiplist", "trie") == "restart"


@pytest.mark.parametrize("implementation", ["skiplist", "trie"])
def test_render_memtable_implementation_as_the_nested_memtable_key(implementation: str) -> None:
    out = render_settings(
        "cassandra", {"memtable_implementation": implementation, "trickle_fsync": True}
    )
    assert out == {
        "cassandra.yaml": {"memtable": _memtable(implementation), "trickle_fsync": True},
        "jvm": {},
        "table": {},
    }


def test_render_refuses_an_unknown_memtable_implementation() -> None:
    with pytest.raises(
        ValidationError,
        match=re.escape(
            "memtable_implementation: 'ShardedSkipListMemtable' is not one of skiplist, trie"
        ),
    ):
        render_settings("cassandra", {"memtable_implementation": "ShardedSkipListMemtable"})


def _trusted(value: Any) -> Any:
    """Role files as Ansible loads them: their strings are templates."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _node_file(previous: dict[str, Any] | None, applied: dict[str, Any]) -> dict[str, Any]:
    """The cassandra.yaml the cassandra role renders for a node (tasks/render_settings.yml).

    ``applied`` is the node's entry of the rollout file, ``previous`` its applied record;
    both went through JSON with sorted keys, as kairos rollout and to_nice_json write them.
    """
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    role = REPO / "roles" / "cassandra"
    variables = _trusted(
        {
            **yaml.safe_load((role / "defaults" / "main.yml").read_text()),
            **yaml.safe_load((role / "vars" / "main.yml").read_text()),
        }
    )
    variables.update(inventory_hostname="cass1", ansible_managed="Ansible managed")
    merge = yaml.safe_load((role / "tasks" / "render_settings.yml").read_text())[0]
    expression = merge["ansible.builtin.set_fact"]["__cassandra_applied"]
    record = json.dumps(previous, indent=4, sort_keys=True) if previous else ""
    rollout = json.loads(json.dumps(applied, sort_keys=True))
    merged = Templar(
        loader=DataLoader(),
        variables={
            **variables,
            "cassandra_previous_applied": record,
            "cassandra_applied_settings": rollout,
        },
    ).template(_trusted(expression))
    template = (REPO / "roles" / "cassandra" / "templates" / "cassandra.yaml.j2").read_text()
    text = Templar(
        loader=DataLoader(), variables={**variables, "__cassandra_applied": merged}
    ).template(_trusted(template))
    return yaml.safe_load(text)


@pytest.mark.parametrize(
    ("before", "after"), [(None, "trie"), ("skiplist", "trie"), ("trie", "skiplist")]
)
def test_the_role_template_writes_the_memtable_mapping_as_yaml(
    before: str | None, after: str
) -> None:
    def node(implementation: str) -> dict[str, Any]:
        rendered = render_settings(
            "cassandra", {"memtable_implementation": implementation, "concurrent_reads": 64}
        )
        return {"settings": rendered["cassandra.yaml"], "jvm": {}}

    conf = _node_file(node(before) if before else None, node(after))
    assert conf["memtable"] == _memtable(after)
    assert conf["concurrent_reads"] == 64
    assert conf["memtable_allocation_type"] == "heap_buffers"  # the role's defaults stay
    assert "memtable_implementation" not in conf


# How Cassandra 5.0.6 shows cassandra.yaml's memtable in system_views.settings: the row
# memtable.configurations holds java.util.HashMap.toString() of the InheritingClass entries,
# each [<inherits>+][<class_name>][<parameters>] (from the 5.0.6 classes SettingsTable,
# InheritingClass; not captured from the lab), or JSON with
# -Dcassandra.virtual_table_complex_settings_format_json=true; null without the key.
SHOWN_TRIE = "{default=trie+, skiplist=SkipListMemtable, trie=TrieMemtable}"
SHOWN_SKIPLIST = "{default=skiplist+, skiplist=SkipListMemtable, trie=TrieMemtable}"
SHOWN_JSON = json.dumps(
    {
        "default": {"class_name": None, "parameters": None, "inherits": "trie"},
        "skiplist": {"class_name": "SkipListMemtable", "parameters": None, "inherits": None},
        "trie": {"class_name": "TrieMemtable", "parameters": None, "inherits": None},
    }
)


@pytest.mark.parametrize(
    ("shown", "implementation"),
    [
        (SHOWN_TRIE, "trie"),
        (SHOWN_SKIPLIST, "skiplist"),
        (SHOWN_JSON, "trie"),
        (None, "skiplist"),  # no memtable key: Cassandra's default
        ("null", "skiplist"),
        ("{skiplist=SkipListMemtable, trie=TrieMemtable}", "skiplist"),  # no default entry
        ("{default=org.apache.cassandra.db.memtable.TrieMemtable{shards=4}}", "trie"),
        ("{default=trie+SkipListMemtable, trie=TrieMemtable}", "skiplist"),  # own class wins
        ("{fast=trie+, default=fast+, trie=TrieMemtable}", "trie"),
    ],
)
def test_memtable_implementation_is_read_from_system_views_settings(
    shown: str | None, implementation: str
) -> None:
    assert settings_row("cassandra", "memtable_implementation") == "memtable.configurations"
    assert from_settings_view("cassandra", "memtable_implementation", shown) == implementation
    if shown and shown != "null":  # the nodes' read-back reads it the same way
        assert running_value("memtable", shown) == {
            "configurations": memtable_configurations(shown)
        }
        # The planner's parser and the nodes' twin (module_utils cannot import the planner)
        # see the same configurations, inherits and classes.
        from planner.model.spaces import _memtable_configurations

        nodes = memtable_configurations(shown)
        assert nodes is not None
        assert {n: {k: v for k, v in c.items() if v}
                for n, c in _memtable_configurations(shown).items()} == {
            n: {k: v for k, v in c.items() if k != "parameters"} for n, c in nodes.items()}


@pytest.mark.parametrize(
    ("shown", "match"),
    [
        ("{default=ShardedSkipListMemtable}", r"default memtable is ShardedSkipListMemtable"),
        ("{default=sharded+}", r"default memtable configuration does not resolve to a class"),
        ("{default=a+, a=default+}", r"does not resolve to a class"),
        ("SkipListMemtable", r"cannot read memtable.configurations = 'SkipListMemtable'"),
    ],
)
def test_an_unknown_running_memtable_is_an_error_naming_the_row(shown: str, match: str) -> None:
    with pytest.raises(ValidationError, match=f"memtable_implementation: .*{match}"):
        from_settings_view("cassandra", "memtable_implementation", shown)


def test_other_parameters_are_read_from_their_own_row() -> None:
    assert settings_row("cassandra", "concurrent_reads") == "concurrent_reads"
    assert from_settings_view("cassandra", "concurrent_reads", "48") == 48
    assert from_settings_view("cassandra", "row_cache_size", "16MiB") == "16MiB"
    assert from_settings_view("cassandra", "memtable_cleanup_threshold", None) == 0.33
