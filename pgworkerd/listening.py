"""The one way a listening TCP socket is made: the supervisor's HTTP listener
(supervisor/http.py) and the dashboard's (web/serve.py). Here, not in either, so that
neither side imports the other (nor the daemon the web extra's dependencies)."""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A TCP socket bound to `host`:`port` (an IPv6 address has a colon) and listening.
    Not inherited by children (sockets are not, PEP 446): the supervisor's workers never
    hold its port. SO_REUSEADDR: a restart binds at once while the old process's
    connections linger in TIME_WAIT. The OSError of a bind or listen that fails (a taken
    port, an address not on this host), the socket closed first."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
