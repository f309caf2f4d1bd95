"""Configuration spaces: names, validation, candidates and rendering."""

from __future__ import annotations

import re

import pytest

from planner.errors import ValidationError
from planner.spaces import change_kind, get_space, render_settings

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
