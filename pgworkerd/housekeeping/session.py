"""The supervisor's one database connection, and its round trips.

The connection is opened after the first children are forked, uses short timeouts (the
supervisor's loop must never hang on a dead network: it also enforces runtimes and
stops jobs whose leases it cannot renew), and is reopened after any failure, after a
short backoff. An outage is logged once, and its end once.

Every round trip runs under a client-side deadline (see deadline.py for why the
server's and TCP's own timeouts are not enough). Each answers with a typed result: an
`Answer` holding what the work returned, or a `Failure`, so that a failed round trip
is never mistaken for work that returned None.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

import psycopg

from pgworkerd import logs
from pgworkerd.housekeeping.deadline import Deadline, RoundTripTimeout, enforced
from pgworkerd.storage import connections
from pgworkerd.storage.channels import listen_statement

log = logging.getLogger("pgworkerd.supervisor")

T = TypeVar("T")

# Even when the supervisor's next moment to act has come, one short round trip: a
# renewal that still answers spares a job a needless kill (a loop that ran late, a
# frozen host waking up), and one that does not delays the kill by this much only.
MIN_ROUND_TRIP_FRACTION = 0.05  # of lease_ttl
# A round trip whose transaction alone failed (DatabaseSession._work) is run again at
# once, this many times at most, after a wait of about TRANSACTION_RETRY_S, then twice
# that: a few milliseconds of a loop that also renews leases, not the reconnect's
# quarter second or more.
TRANSACTION_RETRIES = 2
TRANSACTION_RETRY_S = 0.005


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """The round trip answered: `value` is what its work returned (None included)."""

    value: T
    ok: Literal[True] = field(default=True, init=False)


@dataclass(frozen=True, slots=True)
class Failure:
    """The round trip failed (and the connection was dropped), or was not tried."""

    what: str
    error: str | None  # None: not tried, backing off after an earlier failure
    ok: Literal[False] = field(default=False, init=False)


# What a round trip gives: callers narrow it with `if result.ok:` (or isinstance).
Result: TypeAlias = Answer[T] | Failure


class DatabaseSession:
    def __init__(
        self,
        *,
        database_url: str,
        lease_ttl_s: float,
        listen_channels: Callable[[], Sequence[str]] | None = None,
        on_disconnect: Callable[[], None] | None = None,
        answer_by: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.database_url = database_url
        self.lease_ttl_s = lease_ttl_s
        # LISTEN on these channels after each connect; None: no LISTEN (PgBouncer).
        self.listen_channels = listen_channels
        # Called before our connection closes: its socket may sit in a selector, which
        # must forget it before the descriptor number can be reused.
        self.on_disconnect = on_disconnect
        # The supervisor's next moment to act on a lease (monotonic), or None: no round
        # trip may hold its loop past it.
        self.answer_by = answer_by
        # Short bounds: this loop also enforces runtimes and answers signals.
        self.round_trip_cap_s = min(5.0, lease_ttl_s / 3)
        self.conn: psycopg.Connection[Any] | None = None
        self._next_connect_at = 0.0
        self._connect_delay_s = 0.25
        self._outage_logged = False
        # A LISTEN ran on a new connection since take_fresh_listen() last looked.
        self._listening_since_connect = False
        # A query ran since the notifications were last drained: its answer may have
        # brought notifications with it, which the socket will not announce again.
        self.queried_since_drain = False

    def attempt(self, what: str, work: Callable[[psycopg.Connection[Any]], T]) -> Result[T]:
        """Run `work(conn)` within the round-trip deadline, connecting first if need be.
        On a database error or the deadline: log it (once per outage), drop the
        connection, and answer a Failure."""
        deadline = Deadline(self._round_trip_budget_s())
        try:
            with enforced(deadline, lambda: self.conn):
                conn = self._connection()
                if conn is None:
                    return Failure(what, None)
                self.queried_since_drain = True
                value = self._work(what, work, conn, deadline)
        except (psycopg.Error, RoundTripTimeout) as exc:
            # When the deadline fired, the error that surfaced is its doing: say so.
            error = deadline.error() if deadline.fired else exc
            during = "connect" if self.conn is None else what
            self.failed(during, error)
            return Failure(during, connections.describe_error(error, self.database_url))
        self._connect_delay_s = 0.25
        if self._outage_logged:
            logs.event(log, logging.INFO, "database reachable again")
            self._outage_logged = False
        return Answer(value)

    def _work(
        self,
        what: str,
        work: Callable[[psycopg.Connection[Any]], T],
        conn: psycopg.Connection[Any],
        deadline: Deadline,
    ) -> T:
        """`work(conn)`, run again on the same connection, after a short jittered wait,
        when it failed with a transaction fault that left the connection idle (a
        deadlock, a serialization failure, a lock_timeout: see transaction_fault), up to
        TRANSACTION_RETRIES times; what else it raised, or the last fault, is raised.
        Each work is one transaction or statements that are fenced or idempotent, which
        the next tick would run again after a failure anyway; running it again now
        spares the connection (its LISTEN) and the reconnect backoff. Not after the
        deadline fired (the connection is gone), nor for a statement_timeout: ours is
        the round trip's cap, whose time a retry would not have."""
        tries = 0
        while True:
            try:
                return work(conn)
            except psycopg.Error as exc:
                fault = None
                if not isinstance(exc, psycopg.errors.QueryCanceled) and not deadline.fired:
                    fault = connections.transaction_fault(exc, conn)
                if fault is None or tries >= TRANSACTION_RETRIES:
                    raise
                tries += 1
                wait_s = TRANSACTION_RETRY_S * tries * random.uniform(0.5, 1.5)
                logs.event(
                    log,
                    logging.WARNING,
                    f"{fault} in supervisor; retrying on the same connection",
                    during=what,
                    sqlstate=exc.sqlstate,
                    error=connections.describe_error(exc, self.database_url),
                    retry=tries,
                    retry_in_s=round(wait_s, 3),
                )
                time.sleep(wait_s)

    def take_fresh_listen(self) -> bool:
        """Whether a new LISTEN ran since the last call: what was notified before it
        was missed."""
        fresh, self._listening_since_connect = self._listening_since_connect, False
        return fresh

    def failed(self, what: str, exc: BaseException) -> None:
        """Log the outage (once), drop the connection, back off from reconnecting."""
        if not self._outage_logged:
            logs.event(
                log,
                logging.WARNING,
                "database error in supervisor",
                during=what,
                error=connections.describe_error(exc, self.database_url),
            )
            self._outage_logged = True
        self.close()
        # No new connection for a moment, so one tick holds the loop for one failed
        # round trip at most. Capped low: children reconnect on their own, and every
        # job they start needs our renewals.
        self._next_connect_at = time.monotonic() + self._connect_delay_s
        self._connect_delay_s = min(1.0, self._connect_delay_s * 2)

    def close(self) -> None:
        if self.conn is not None:
            if self.on_disconnect is not None:
                self.on_disconnect()
            with contextlib.suppress(Exception):  # closing a broken connection may fail too
                self.conn.close()
            self.conn = None

    def _round_trip_budget_s(self) -> float:
        budget = self.round_trip_cap_s
        answer_by = self.answer_by()
        if answer_by is not None:
            budget = min(budget, answer_by - time.monotonic())
        return max(budget, MIN_ROUND_TRIP_FRACTION * self.lease_ttl_s)

    def _connection(self) -> psycopg.Connection[Any] | None:
        """The open connection, a new one, or None while backing off after a failure."""
        if self.conn is not None and not self.conn.closed:
            return self.conn
        if time.monotonic() < self._next_connect_at:
            return None
        timeout_ms = int(self.round_trip_cap_s * 1000)
        self.conn = connections.connect(
            self.database_url,
            application_name="pgworkerd supervisor",
            connect_timeout=max(2, timeout_ms // 1000),
            tcp_user_timeout=timeout_ms,
            options=f"-c statement_timeout={timeout_ms}",
        )
        if self.listen_channels is not None:
            for channel in self.listen_channels():
                self.conn.execute(listen_statement(channel))
            self._listening_since_connect = True
        return self.conn
