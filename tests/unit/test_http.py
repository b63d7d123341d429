"""The supervisor's HTTP listener without a daemon: request parsing, and a listener
driven by a selector as the supervisor's loop drives it."""

from __future__ import annotations

import errno
import os
import selectors
import socket
import time
from collections.abc import Iterator

import pytest

from pgworkerd.config import ConfigError, host_port, parse
from pgworkerd.supervisor import http
from pgworkerd.supervisor.http import BadRequest, HttpListener, parse_request_head


def test_request_line_parsing() -> None:
    assert parse_request_head(b"GET /metrics HTTP/1.1\r\nHost: x") == ("GET", "/metrics")
    assert parse_request_head(b"GET /readyz?x=1 HTTP/1.0") == ("GET", "/readyz")
    for bad in (b"", b"GET", b"GET /x", b"GET x HTTP/1.1", b"GET /x SPDY/3", b"G\xc3T /x HTTP/1.1"):
        with pytest.raises(BadRequest):
            parse_request_head(bad)


def test_end_of_head_and_response() -> None:
    assert http.end_of_head(b"GET / HTTP/1.1\r\nA: b\r\n") == -1
    assert http.end_of_head(b"GET / HTTP/1.1\r\n\r\n") == 14
    whole = http.response(200, "text/plain", b"ok\n")
    assert whole.startswith(b"HTTP/1.1 200 OK\r\n") and whole.endswith(b"\r\n\r\nok\n")
    assert b"Content-Length: 3\r\n" in whole


def test_listen_addresses() -> None:
    assert host_port("127.0.0.1:9187") == ("127.0.0.1", 9187)
    assert host_port("[::1]:80") == ("::1", 80)
    for bad in ("localhost", ":80", "host:0", "host:99999", "host:http"):
        with pytest.raises(ValueError):
            host_port(bad)
    assert parse("http: {listen: '0.0.0.0:9187'}").http is not None
    with pytest.raises(ConfigError) as caught:
        parse("http: {listen: nowhere}")
    assert caught.value.problems == [
        "<config>: http.listen: must be host:port such as 127.0.0.1:9187, not 'nowhere'"
    ]
    assert parse("log_format: json").log_format == "json"
    with pytest.raises(ConfigError):
        parse("log_format: xml")


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_taken_port_leaves_no_socket_open() -> None:
    """The listen fails (the supervisor says so in one line, exit 2) and closes the
    socket it made: the error's traceback, which the caller may keep, holds it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        before = open_descriptors()
        selector = selectors.DefaultSelector()
        with pytest.raises(OSError) as refused:
            HttpListener(selector, {}).listen("127.0.0.1", taken.getsockname()[1])
        assert open_descriptors() == before + 1  # the selector's epoll descriptor only
        assert refused.value.errno == errno.EADDRINUSE
        selector.close()


@pytest.fixture
def listener() -> Iterator[tuple[HttpListener, selectors.BaseSelector, int]]:
    selector = selectors.DefaultSelector()
    served = HttpListener(selector, {"/healthz": lambda: (200, "text/plain", b"ok\n")})
    served.listen("127.0.0.1", 0)
    assert served.sock is not None
    yield served, selector, served.sock.getsockname()[1]
    served.close()
    selector.close()


def turn(selector: selectors.BaseSelector, times: int = 20) -> None:
    for _ in range(times):
        for key, mask in selector.select(0.01):
            key.data.ready(key.fileobj, mask)


def ask(selector: selectors.BaseSelector, port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as client:
        client.sendall(request)
        turn(selector)
        client.settimeout(0.5)
        chunks = []
        try:
            while chunk := client.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        except ConnectionResetError:
            chunks.append(b"<reset>")  # closed with part of the request unread
        return b"".join(chunks)


def test_routes_404_405_and_400(listener: tuple[HttpListener, selectors.BaseSelector, int]) -> None:
    served, selector, port = listener
    assert ask(selector, port, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"\r\n\r\nok\n")
    assert ask(selector, port, b"GET /other HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert ask(selector, port, b"POST /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert ask(selector, port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
    head = ask(selector, port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    too_big = b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (http.MAX_REQUEST_BYTES + 10)
    # Answered 400 and closed unread: the client sees the answer or a reset, no wait.
    answer = ask(selector, port, too_big)
    assert answer.startswith((b"HTTP/1.1 400", b"<reset>"))
    assert served.connections == {}


def test_a_silent_client_is_closed_at_its_deadline(
    listener: tuple[HttpListener, selectors.BaseSelector, int],
) -> None:
    served, selector, port = listener
    with socket.create_connection(("127.0.0.1", port), timeout=2) as silent:
        silent.sendall(b"GET /heal")  # and nothing more
        turn(selector)
        assert len(served.connections) == 1
        # Another client is answered meanwhile.
        assert ask(selector, port, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"ok\n")
        served.expire(time.monotonic() + http.CONNECTION_TIMEOUT_S + 1)
        assert served.connections == {}
        assert silent.recv(10) == b""  # closed by the listener
