"""The client-side deadline under which the supervisor's every round trip runs.

The server's statement_timeout and TCP's keepalives and tcp_user_timeout cannot end a
wait for an answer that never comes while the path stays up: a pooler or proxy in
between whose server side is cut, or any half-open path whose near end still
acknowledges. Without this deadline the loop would block in a renewal while the leases
it was renewing ran out, and the jobs would run on unfenced (found by
tests/process/test_faults_network.py; docs/faults.md, "Network cut past the lease").
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg


class RoundTripTimeout(Exception):
    """A database round trip of the supervisor outlived its deadline."""


@dataclass(slots=True)
class Deadline:
    seconds: float
    armed: bool = False
    fired: bool = False

    def error(self) -> RoundTripTimeout:
        return RoundTripTimeout(f"no answer from the database within {self.seconds:.2f}s")


@contextlib.contextmanager
def enforced(
    deadline: Deadline, connection: Callable[[], psycopg.Connection[Any] | None]
) -> Iterator[None]:
    """SIGALRM when `deadline` passes. With a connection open (`connection()`, asked when
    the alarm fires), its socket is shut down: libpq sees the connection end and psycopg
    raises at once, in the statement and in anything after it (no rollback waits).
    While connecting, RoundTripTimeout is raised instead. Installed only for the call:
    children forked at other times never inherit it. The supervisor is one thread, so
    the signal interrupts this very wait."""

    def expire(signum: int, frame: Any) -> None:
        if not deadline.armed:
            return  # a late signal, after the call ended: nothing to interrupt
        deadline.armed = False
        deadline.fired = True
        conn = connection()
        if conn is None or conn.closed:
            raise deadline.error()
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)

    previous = signal.signal(signal.SIGALRM, expire)
    deadline.armed = True
    signal.setitimer(signal.ITIMER_REAL, deadline.seconds)
    try:
        yield
    finally:
        deadline.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
