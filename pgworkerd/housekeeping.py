"""The supervisor's database work: renew its children's leases, heartbeat, rescue
expired leases (of any daemon), prune old rows, settle the jobs of children that died,
and listen for enqueue notifications: the daemon's one listening connection.

Its connection is opened after the first children are forked, uses short timeouts
(the supervisor's loop must never hang on a dead network: it also enforces runtimes
and stops jobs whose leases it cannot renew), and is reopened after any failure, after
a short backoff. Settlements that cannot be written yet wait in a queue and are
retried: they are fenced by lease, so a late one changes nothing if the job moved on.

Every round trip runs under a client-side deadline. The server's statement_timeout
and TCP's keepalives and tcp_user_timeout cannot end a wait for an answer that never
comes while the path stays up: a pooler or proxy in between whose server side is cut,
or any half-open path whose near end still acknowledges. Without it the loop would
block in a renewal while the leases it was renewing ran out, and the jobs would run on
unfenced (found by tests/test_faults_network.py, §8).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgworkerd import db, logs
from pgworkerd.job import Lease
from pgworkerd.store import JobStore

log = logging.getLogger("pgworkerd.supervisor")

PRUNE_INTERVAL_S = 60.0
PRUNE_BATCHES_PER_TICK = 10
PRUNE_BATCH = 1000


# Even when the supervisor's next moment to act has come, one short round trip: a
# renewal that still answers spares a job a needless kill (a loop that ran late, a
# frozen host waking up), and one that does not delays the kill by this much only.
MIN_ROUND_TRIP_FRACTION = 0.05  # of lease_ttl


class RoundTripTimeout(Exception):
    """A database round trip of the supervisor outlived its deadline."""


@dataclass(slots=True)
class _Deadline:
    seconds: float
    armed: bool = False
    fired: bool = False

    def error(self) -> RoundTripTimeout:
        return RoundTripTimeout(f"no answer from the database within {self.seconds:.2f}s")


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to write for a job whose child is gone: charge it, or give it back."""

    lease: Lease
    charge_error: str | None  # None: release uncharged


# Stands for every queue: notifications may have been missed while not connected.
ALL_QUEUES = "*"


class Housekeeper:
    def __init__(
        self,
        *,
        store: JobStore,
        database_url: str,
        lease_ttl_s: float,
        retention_s: float,
        daemon_id: str,
        listen: bool = True,
        on_disconnect: Callable[[], None] | None = None,
        answer_by: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.store = store
        # Called before our connection closes: its socket may sit in a selector, which
        # must forget it before the descriptor number can be reused.
        self.on_disconnect = on_disconnect
        self.listen = listen  # LISTEN on the enqueue channel (off behind PgBouncer)
        self.database_url = database_url
        self.lease_ttl_s = lease_ttl_s
        self.retention_s = retention_s
        self.daemon_id = daemon_id
        # The supervisor's next moment to act on a lease (monotonic), or None: no round
        # trip may hold its loop past it.
        self.answer_by = answer_by
        # Short bounds: this loop also enforces runtimes and answers signals.
        self.round_trip_cap_s = min(5.0, lease_ttl_s / 3)
        self.conn: psycopg.Connection[Any] | None = None
        self.pending: deque[Settlement] = deque()
        self._next_connect_at = 0.0
        self._connect_delay_s = 0.25
        self._next_prune_at = 0.0
        self._outage_logged = False
        self._listening_since_connect = False  # a fresh LISTEN: report ALL_QUEUES once
        # A query ran since notified_queues() last looked: its answer may have brought
        # notifications with it, which the socket will not announce again.
        self.queried_since_drain = False

    # -- periodic work (each returns None when the database could not be reached) --------

    def renew(self, leases: Iterable[Lease], info: dict[str, Any]) -> set[int] | None:
        """Renew `leases` and refresh our heartbeat; the ids still ours, or None."""
        leases = list(leases)

        def work(conn: psycopg.Connection[Any]) -> set[int]:
            with conn.transaction():
                self.store.heartbeat(
                    conn,
                    daemon_id=self.daemon_id,
                    hostname=socket.gethostname(),
                    pid=os.getpid(),
                    info=json.dumps(info),
                )
                return self.store.renew(conn, leases, self.lease_ttl_s)

        return self._attempt("renew leases", work)

    def rescue(self) -> int | None:
        def work(conn: psycopg.Connection[Any]) -> int:
            outcomes = self.store.rescue(conn)
            for outcome in outcomes:
                logs.event(
                    log,
                    logging.WARNING,
                    "rescued job with expired lease",
                    job=outcome.job_id,
                    attempt=outcome.attempt,
                    next_state=outcome.state,
                )
            return len(outcomes)

        return self._attempt("rescue", work)

    def prune_if_due(self) -> None:
        now = time.monotonic()
        if now < self._next_prune_at:
            return
        self._next_prune_at = now + PRUNE_INTERVAL_S

        def work(conn: psycopg.Connection[Any]) -> int:
            total = 0
            for _ in range(PRUNE_BATCHES_PER_TICK):
                deleted = self.store.prune(conn, retention_s=self.retention_s, batch=PRUNE_BATCH)
                total += deleted
                if deleted < PRUNE_BATCH:
                    break
            self.store.prune_stale_daemons(conn, stale_after_s=max(300.0, 10 * self.lease_ttl_s))
            return total

        pruned = self._attempt("prune", work)
        if pruned:
            logs.event(log, logging.INFO, "pruned finished jobs", count=pruned)

    def settle(self, settlements: Iterable[Settlement]) -> None:
        """Queue settlements and write as many as the database takes now."""
        self.pending.extend(settlements)
        self.flush_settlements()

    def flush_settlements(self) -> None:
        while self.pending:
            item = self.pending[0]

            def work(conn: psycopg.Connection[Any], item: Settlement = item) -> None:
                if item.charge_error is None:
                    self.store.release(conn, [item.lease])
                    return
                outcome = self.store.fail(conn, item.lease, item.charge_error)
                if outcome is not None:
                    logs.event(
                        log,
                        logging.WARNING,
                        "charged job of a lost worker",
                        job=item.lease.job_id,
                        attempt=outcome.attempt,
                        next_state=outcome.state,
                        error=item.charge_error,
                    )

            if self._attempt("settle job", work, quiet=True) is False:
                return
            self.pending.popleft()

    def listen_fd(self) -> int | None:
        """The socket to watch for notifications, connecting if it is time to."""
        if not self.listen:
            return None
        fd = self._attempt("listen", lambda conn: conn.fileno())
        return fd if isinstance(fd, int) else None

    def notified_queues(self) -> set[str]:
        """The queues named by notifications received so far (ALL_QUEUES after a new
        connection, whose LISTEN missed whatever was enqueued before it)."""
        queues: set[str] = set()
        self.queried_since_drain = False
        if self._listening_since_connect:
            self._listening_since_connect = False
            queues.add(ALL_QUEUES)
        conn = self.conn
        if conn is None or conn.closed:
            return queues
        try:
            queues.update(n.payload for n in conn.notifies(timeout=0))
        except psycopg.Error as exc:
            self._failed("receive notifications", exc)
        return queues

    def unregister(self) -> None:
        self._attempt("unregister", lambda conn: self.store.remove_daemon(conn, self.daemon_id))

    def close(self) -> None:
        if self.conn is not None:
            if self.on_disconnect is not None:
                self.on_disconnect()
            with contextlib.suppress(Exception):  # closing a broken connection may fail too
                self.conn.close()
            self.conn = None

    # -- the connection -------------------------------------------------------------------

    def _attempt(self, what: str, work: Any, *, quiet: bool = False) -> Any:
        """Run `work(conn)` within the round-trip deadline; on a database error or the
        deadline, log it, drop the connection, and return None (False for `quiet`
        callers that only need to know it failed)."""
        failed = False if quiet else None
        deadline = _Deadline(self._round_trip_budget_s())
        try:
            with self._deadline(deadline):
                conn = self._connection()
                if conn is None:
                    return failed
                self.queried_since_drain = True
                result = work(conn)
        except (psycopg.Error, RoundTripTimeout) as exc:
            # When the deadline fired, the error that surfaced is its doing: say so.
            error = deadline.error() if deadline.fired else exc
            self._failed("connect" if self.conn is None else what, error)
            return failed
        self._connect_delay_s = 0.25
        if self._outage_logged:
            logs.event(log, logging.INFO, "database reachable again")
            self._outage_logged = False
        return True if quiet and result is None else result

    def _round_trip_budget_s(self) -> float:
        budget = self.round_trip_cap_s
        answer_by = self.answer_by()
        if answer_by is not None:
            budget = min(budget, answer_by - time.monotonic())
        return max(budget, MIN_ROUND_TRIP_FRACTION * self.lease_ttl_s)

    @contextlib.contextmanager
    def _deadline(self, deadline: _Deadline) -> Iterator[None]:
        """SIGALRM when `deadline` passes. With a connection open, its socket is shut
        down: libpq sees the connection end and psycopg raises at once, in the
        statement and in anything after it (no rollback waits). While connecting,
        RoundTripTimeout is raised instead. Installed only for the call: children
        forked at other times never inherit it. The supervisor is one thread, so the
        signal interrupts this very wait."""

        def expire(signum: int, frame: Any) -> None:
            if not deadline.armed:
                return  # a late signal, after the call ended: nothing to interrupt
            deadline.armed = False
            deadline.fired = True
            conn = self.conn
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

    def _connection(self) -> psycopg.Connection[Any] | None:
        """The open connection, a new one, or None while backing off after a failure."""
        if self.conn is not None and not self.conn.closed:
            return self.conn
        if time.monotonic() < self._next_connect_at:
            return None
        timeout_ms = int(self.round_trip_cap_s * 1000)
        self.conn = db.connect(
            self.database_url,
            application_name="pgworkerd supervisor",
            connect_timeout=max(2, timeout_ms // 1000),
            tcp_user_timeout=timeout_ms,
            options=f"-c statement_timeout={timeout_ms}",
        )
        if self.listen:
            self.conn.execute(
                sql.SQL("LISTEN {}").format(sql.Identifier(self.store.notify_channel))
            )
            self._listening_since_connect = True
        return self.conn

    def _failed(self, what: str, exc: BaseException) -> None:
        if not self._outage_logged:
            logs.event(
                log,
                logging.WARNING,
                "database error in supervisor",
                during=what,
                error=db.describe_error(exc, self.database_url),
            )
            self._outage_logged = True
        self.close()
        # No new connection for a moment, so one tick holds the loop for one failed
        # round trip at most. Capped low: children reconnect on their own, and every
        # job they start needs our renewals.
        self._next_connect_at = time.monotonic() + self._connect_delay_s
        self._connect_delay_s = min(1.0, self._connect_delay_s * 2)
