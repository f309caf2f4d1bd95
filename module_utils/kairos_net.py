"""Network checks the Kairos modules share: does an address accept TCP connections?

cassandra_drain asks it of the JMX port (a node is running) and kairos_process of a
server's ready port (the server is serving).
"""

from __future__ import annotations

import socket


def accepts_connections(host, port, timeout=1):
    """True when a TCP connection to host:port opens within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
