"""What a load worker reports of the error that stopped it (planner.loadgen.run.worker_error)."""

from __future__ import annotations

import pytest
from cassandra.cluster import NoHostAvailable
from redis.exceptions import ConnectionError as RedisConnectionError

from planner.errors import KairosError
from planner.loadgen.run import worker_error


@pytest.mark.parametrize("exc", [
    NoHostAvailable("Unable to connect to any servers",
                    {"127.0.0.1:9042": ConnectionResetError(104, "Connection reset by peer")}),
    RedisConnectionError("Error 111 connecting to 127.0.0.1:7001. Connection refused."),
    ConnectionRefusedError(111, "Connection refused"),
    KairosError("the schema was not ready within 120 s"),
])
def test_a_connection_or_kairos_error_is_reported_in_one_line(exc: BaseException) -> None:
    try:
        raise exc
    except BaseException as caught:
        text = worker_error(caught)
    assert text.startswith(f"{type(exc).__name__}: ") and "\n" not in text
    assert "Traceback" not in text


def test_an_unexpected_error_keeps_its_traceback() -> None:
    try:
        {}["missing"]
    except KeyError as caught:
        text = worker_error(caught)
    assert text.startswith("KeyError: 'missing'\nTraceback (most recent call last):")
