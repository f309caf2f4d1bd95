"""nodetool parsers against output captured from the real Cassandra 5.0.6 lab."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.kairos_nodetool import (
    LIVE_SETTERS,
    parse_cache_capacities,
    parse_pending_hints,
    parse_schema_versions,
    parse_status,
)

FIXTURES = Path(__file__).parent / "fixtures" / "nodetool"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_status_all_up_normal() -> None:
    nodes = parse_status(read("status_3_UN.txt"))
    assert sorted(n["address"] for n in nodes) == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert {n["code"] for n in nodes} == {"UN"}
    assert {n["dc"] for n in nodes} == {"datacenter1"}
    assert {n["rack"] for n in nodes} == {"rack1"}
    assert all(n["tokens"] == 1 for n in nodes)


def test_status_one_node_down() -> None:
    codes = {n["address"]: n["code"] for n in parse_status(read("status_1_DN.txt"))}
    assert codes == {"127.0.0.1": "UN", "127.0.0.2": "UN", "127.0.0.3": "DN"}


def test_status_ignores_headers_and_garbage() -> None:
    assert parse_status("Datacenter: dc1\n===\nStatus=Up/Down\nnot a node line\n") == []


def test_schema_versions_agree() -> None:
    versions = parse_schema_versions(read("describecluster.txt"))
    assert list(versions.values()) == [["127.0.0.1", "127.0.0.2", "127.0.0.3"]]


def test_schema_versions_with_unreachable_node() -> None:
    versions = parse_schema_versions(read("describecluster_1_down.txt"))
    assert versions.pop("UNREACHABLE") == ["127.0.0.3"]
    assert list(versions.values()) == [["127.0.0.1", "127.0.0.2"]]


def test_no_pending_hints() -> None:
    assert parse_pending_hints(read("listpendinghints_none.txt")) == []


def test_cache_capacities_from_info() -> None:
    assert parse_cache_capacities(read("info.txt")) == {"key": 25, "row": 0, "counter": 12}


def test_row_cache_resize_keeps_the_key_and_counter_caches() -> None:
    get_args, parse, set_args, normalise = LIVE_SETTERS["row_cache_size"]
    assert get_args == ["info"]
    assert parse(read("info.txt")) == 0
    assert normalise("1GiB") == 1024
    assert set_args(normalise("256MiB"), read("info.txt")) == [
        "setcachecapacity", "25", "256", "12"
    ]


def test_key_cache_resize_keeps_the_row_and_counter_caches() -> None:
    get_args, parse, set_args, normalise = LIVE_SETTERS["key_cache_size"]
    assert get_args == ["info"] and parse(read("info.txt")) == 25
    assert set_args(normalise("100MiB"), read("info.txt")) == [
        "setcachecapacity", "100", "0", "12"
    ]


def test_cache_capacities_refuse_other_output() -> None:
    import pytest

    with pytest.raises(ValueError, match="no cache capacities"):
        parse_cache_capacities(read("getconcurrency.txt"))
