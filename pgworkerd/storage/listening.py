"""The listening worker's connection (docs/design.md, "Round 9: a listening worker"):
its marker, what its socket brought, and the UNLISTEN sent as it goes busy.

Driven through libpq's own calls on the connection's PGconn (psycopg's Connection
object is only its opener): the UNLISTEN is sent without waiting for its answer, which
psycopg's protocol state would not allow, and a wake-up's read is libpq's two calls
(consume_input, notifies) rather than psycopg's generator (housekeeping/notifications.py
says what that costs).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import pq

from pgworkerd.storage import queries
from pgworkerd.storage.channels import listeners_channel, notify_channel

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


class ListeningConnection:
    """One connection that LISTENs for its worker's queues between its claims."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str) -> None:
        self.conn = conn  # kept open by this reference; only its PGconn is used
        self.pgconn = conn.pgconn
        self.schema = schema
        self._encoding = conn.info.encoding
        self._queue_channel = notify_channel(schema)
        self._unlisten = queries.statements(schema)["listener_unlisten"]
        self._unlisten_pending = False

    def fileno(self) -> int:
        return self.pgconn.socket

    def mark(self, marker: str) -> list[str]:
        """LISTEN and send `marker` in one transaction; drop every notification up to
        and including the marker, and return the queues named by those after it (an
        enqueue that committed after the marker). Raises psycopg.OperationalError on a
        broken connection."""
        self._finish_unlisten()
        self._exec(queries.listener_mark(self.schema, marker))
        after: list[str] | None = None
        channel = listeners_channel(self.schema)
        for name, payload in self._notifies():
            if after is not None:
                if name == self._queue_channel:
                    after.append(payload)
            elif name == channel and payload == marker:
                after = []
        if after is None:  # PostgreSQL delivers it before the query's end: never seen
            raise psycopg.OperationalError(f"the listener's marker {marker!r} was not received")
        return after

    def received(self) -> list[str]:
        """The queues named by the enqueue notifications the socket brought (markers,
        ours or another listener's, are dropped). Raises psycopg.OperationalError on a
        broken connection."""
        self.pgconn.consume_input()
        return [payload for name, payload in self._notifies() if name == self._queue_channel]

    def unlisten(self) -> None:
        """Stop listening, without waiting for the answer (read by the next mark())."""
        if self._unlisten_pending:
            return
        self.pgconn.send_query(self._unlisten)  # raises OperationalError if it cannot
        self._unlisten_pending = True
        self.pgconn.flush()  # 0: all sent (a few bytes: the socket's buffer takes them)

    def close(self) -> None:
        self.conn.close()

    def _finish_unlisten(self) -> None:
        if not self._unlisten_pending:
            return
        self._unlisten_pending = False
        while (result := self.pgconn.get_result()) is not None:
            self._check(result)

    def _exec(self, statement: bytes) -> None:
        self._check(self.pgconn.exec_(statement))

    def _check(self, result: pq.abc.PGresult) -> None:
        if result.status not in _OK:
            message = result.error_message.decode(self._encoding, "replace")
            raise psycopg.OperationalError(message or "the listening connection failed")

    def _notifies(self) -> list[tuple[str, str]]:
        encoding, pgconn = self._encoding, self.pgconn
        out = []
        while (n := pgconn.notifies()) is not None:
            out.append((n.relname.decode(encoding), n.extra.decode(encoding)))
        return out


def marker_payload(daemon: str, pid: int, number: int) -> str:
    """A listener's marker: its daemon ("<host>:<supervisor pid>"), its pid, its number."""
    return f"{daemon} {pid} {number}"


def parse_marker(payload: str) -> tuple[str, int, int] | None:
    """marker_payload's three parts, or None for a payload of another form."""
    parts = payload.rsplit(" ", 2)
    if len(parts) != 3:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError:
        return None
