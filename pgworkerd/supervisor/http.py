"""The supervisor's HTTP listener: /metrics, /healthz, /readyz, served from its own
selector loop (no thread: the supervisor forks at any time).

The listening socket and each connection are non-blocking and registered in the
loop's selector. A connection is read until the blank line that ends the request's
head (at most MAX_REQUEST_BYTES), answered with one buffered write (the rest sent as
the socket takes it), then closed. A connection that has not been answered and closed
within CONNECTION_TIMEOUT_S is closed: a slow or half-open client costs a descriptor
for a few seconds, never a wait.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pgworkerd import logs
from pgworkerd.listening import listening_socket

log = logging.getLogger("pgworkerd.supervisor")

MAX_REQUEST_BYTES = 8192
CONNECTION_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64

Route = Callable[[], tuple[int, str, bytes]]  # -> status, content type, body

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


class BadRequest(Exception):
    pass


def parse_request_head(head: bytes) -> tuple[str, str]:
    """The method and path of a request head (without its final blank line)."""
    request_line = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
    parts = request_line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest("malformed request line")
    try:
        method, target = parts[0].decode("ascii"), parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("non-ASCII request line") from None
    if not method.isalpha() or not target.startswith("/"):
        raise BadRequest("malformed request line")
    return method, target.split("?", 1)[0]


def response(status: int, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def end_of_head(data: bytes) -> int:
    """Where the request head ends (-1: not yet)."""
    for marker in (b"\r\n\r\n", b"\n\n"):
        at = data.find(marker)
        if at >= 0:
            return at
    return -1


@dataclass(eq=False)
class Connection:
    sock: socket.socket
    deadline: float
    received: bytes = b""
    outgoing: bytes | None = None  # None: still reading the request


@dataclass(eq=False)
class HttpListener:
    """Selector data of its listening socket and of each of its connections: the loop
    calls `ready(key.fileobj, mask)` for either."""

    selector: selectors.BaseSelector
    routes: dict[str, Route]
    sock: socket.socket | None = None
    connections: dict[socket.socket, Connection] = field(default_factory=dict)

    def listen(self, host: str, port: int) -> None:
        """Listen on `host`:`port`; OSError (the socket closed) when that fails."""
        sock = listening_socket(host, port, MAX_CONNECTIONS)
        sock.setblocking(False)
        self.sock = sock
        self.selector.register(sock, selectors.EVENT_READ, self)

    def ready(self, fileobj: object, mask: int) -> None:
        if fileobj is self.sock:
            self._accept()
            return
        conn = self.connections.get(fileobj)  # type: ignore[call-overload]
        if conn is None:
            return
        if conn.outgoing is None:
            self._read(conn)
        if conn.outgoing is not None:
            self._write(conn)

    def expire(self, now: float) -> None:
        """Close the connections past their deadline (called every loop turn)."""
        for conn in [c for c in self.connections.values() if now >= c.deadline]:
            self._close(conn)

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._close(conn)
        if self.sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None

    # -- one connection -------------------------------------------------------------------

    def _accept(self) -> None:
        assert self.sock is not None
        while len(self.connections) < MAX_CONNECTIONS:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. EMFILE: try again next turn
                logs.event(log, logging.WARNING, "http: accept failed", error=str(exc))
                return
            sock.setblocking(False)
            sock.set_inheritable(False)
            conn = Connection(sock, time.monotonic() + CONNECTION_TIMEOUT_S)
            self.connections[sock] = conn
            self.selector.register(sock, selectors.EVENT_READ, self)

    def _read(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(MAX_REQUEST_BYTES + 1 - len(conn.received))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not chunk:  # the client closed before a whole request
            self._close(conn)
            return
        conn.received += chunk
        end = end_of_head(conn.received)
        if end < 0:
            if len(conn.received) > MAX_REQUEST_BYTES:
                self._answer(conn, response(400, "text/plain", b"request too large\n"))
            return
        self._answer(conn, self._respond(conn.received[:end]))

    def _respond(self, head: bytes) -> bytes:
        try:
            method, path = parse_request_head(head)
        except BadRequest as exc:
            return response(400, "text/plain", f"{exc}\n".encode())
        route = self.routes.get(path)
        if route is None:
            return response(404, "text/plain", b"not found\n")
        if method not in ("GET", "HEAD"):
            return response(405, "text/plain", b"GET only\n")
        try:
            status, content_type, body = route()
        except Exception:
            log.exception("http: %s failed", path)
            status, content_type, body = 503, "text/plain", b"error\n"
        whole = response(status, content_type, body)
        return whole[: len(whole) - len(body)] if method == "HEAD" else whole

    def _answer(self, conn: Connection, data: bytes) -> None:
        conn.outgoing = data
        with contextlib.suppress(KeyError, ValueError):
            self.selector.modify(conn.sock, selectors.EVENT_WRITE, self)

    def _write(self, conn: Connection) -> None:
        assert conn.outgoing is not None
        try:
            sent = conn.sock.send(conn.outgoing)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                logs.event(log, logging.DEBUG, "http: send failed", error=str(exc))
            self._close(conn)
            return
        conn.outgoing = conn.outgoing[sent:]
        if not conn.outgoing:
            self._close(conn)

    def _close(self, conn: Connection) -> None:
        self.connections.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()
