"""module_utils/kairos_net.py against real sockets on loopback addresses."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest
from ansible.module_utils.kairos_net import not_accepting

TIMEOUT = 0.5
SILENT = [f"127.0.0.{n}" for n in range(20, 30)]
LIVE, REFUSING = "127.0.0.5", "127.0.0.6"  # nothing listens on REFUSING


@pytest.fixture
def port() -> Iterator[int]:
    """A port that accepts on LIVE and, on each SILENT address, takes no more connections:
    its accept queue is full, so the kernel drops new SYNs (a hung or unreachable host)."""
    with contextlib.ExitStack() as stack:
        live = stack.enter_context(socket.socket())
        live.bind((LIVE, 0))
        live.listen()
        number = live.getsockname()[1]
        for address in SILENT:
            silent = stack.enter_context(socket.socket())
            silent.bind((address, number))
            silent.listen(0)
            for _ in range(3):  # never accepted: they fill the queue
                client = stack.enter_context(socket.socket())
                client.setblocking(False)
                client.connect_ex((address, number))
        time.sleep(0.05)
        yield number


def test_names_the_refusing_and_the_silent_addresses(port: int) -> None:
    began = time.monotonic()
    assert not_accepting([LIVE, SILENT[0], REFUSING], port, timeout=TIMEOUT) == {
        SILENT[0], REFUSING}
    assert TIMEOUT <= time.monotonic() - began < TIMEOUT + 0.3


def test_ten_silent_hosts_cost_one_timeout_not_ten(port: int) -> None:
    began = time.monotonic()
    assert not_accepting([*SILENT, LIVE], port, timeout=TIMEOUT) == set(SILENT)
    assert time.monotonic() - began < 2 * TIMEOUT  # probed one after another: 10 x 0.5 s


def test_every_address_answering_and_none_given(port: int) -> None:
    began = time.monotonic()
    assert not_accepting([LIVE], port, timeout=TIMEOUT) == set()
    assert time.monotonic() - began < TIMEOUT
    assert not_accepting([], port, timeout=TIMEOUT) == set()
