"""Network checks the Kairos modules share: does an address accept TCP connections?

cassandra_drain asks it of the JMX port (a node is running) and of its peers' storage ports
(the peers are alive), and kairos_process of a server's ready port (the server is serving).
"""

from __future__ import annotations

import errno
import selectors
import socket
import time


def accepts_connections(host, port, timeout=1):
    """True when a TCP connection to host:port opens within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def not_accepting(addresses, port, timeout=1):
    """The addresses (of ``addresses``) on which no TCP connection to ``port`` opened within
    ``timeout`` seconds, all probed at once: a round costs the slowest answer, not the sum
    of them, however many peers a node has."""
    pending, failed = {}, set()
    with selectors.DefaultSelector() as selector:
        for address in set(addresses):
            try:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                failed.add(address)
                continue
            sock.setblocking(False)
            code = sock.connect_ex((address, port))
            if code in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
                selector.register(sock, selectors.EVENT_WRITE, address)
                pending[address] = sock
            else:
                sock.close()
                failed.add(address)
        deadline = time.monotonic() + timeout
        while pending and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock, address = key.fileobj, key.data
                selector.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    failed.add(address)
                sock.close()
                del pending[address]
        for sock in pending.values():  # no answer in time
            sock.close()
        failed.update(pending)
    return failed
