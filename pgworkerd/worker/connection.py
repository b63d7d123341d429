"""A worker child's database connection: opened after the fork, reopened with jittered
backoff when the database goes away, given up when the supervisor is gone."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
from collections.abc import Callable
from typing import Any

import psycopg

from pgworkerd import logs
from pgworkerd.storage import connections
from pgworkerd.storage.store import JobStore
from pgworkerd.worker.spec import WorkerSpec

log = logging.getLogger("pgworkerd.worker")

RECONNECT_MAX_S = 10.0
# The worker's statements (prepared on each new connection: JobStore.warm) have plans
# that do not depend on their parameters' values (tests/integration/test_claim_plan.py
# asserts the generic ones). Left to choose, PostgreSQL kept planning the claim afresh
# for every run: half a millisecond of each claim, and of an idle worker's pick-up of a
# new job.
WORKER_PLAN_CACHE_MODE = "force_generic_plan"
# A generic plan is made at a statement's first run on the connection (JobStore.warm
# runs each at connect), from the size the table has then, and kept until its
# statistics change (an ANALYZE or a VACUUM of jobs, up to a minute later). Made on an
# empty or small jobs table, the completions' and the claims' updates by id were a seq
# scan of the whole table, which under a held snapshot reads every dead version
# (docs/design.md, "The idle wake-up path"). Without seq scans the planner takes the
# indexes whatever size it sees, so a plan made at any moment is the one made on a big
# table (tests/integration/test_worker_warm.py). JIT off: a seq scan with no other path
# costs disable_cost (1e10), far past jit_above_cost, for statements of a millisecond.
WORKER_OPTIONS = f"-c plan_cache_mode={WORKER_PLAN_CACHE_MODE} -c enable_seqscan=off -c jit=off"
# Errors that end a connection's use. A server that cannot write any more (a failover
# left us on a read-only node, or a standby) is one: the job is not at fault, nothing
# is charged, we reconnect (with backoff) until a writable server answers
# (docs/faults.md, "Read-only database after failover").
CONNECTION_FAULTS = (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction)
# Of CONNECTION_FAULTS, those that end one transaction only (connections.
# transaction_fault: a deadlock, a serialization failure, a lock_timeout or a
# statement_timeout) are tried again on the same connection (WorkerConnection.failed):
# taken for a lost connection, each cost a reconnect and a warm-up and logged a network
# fault there was not. Up to TRANSACTION_RETRIES in a row, before the connection is
# dropped and reopened as for any fault (whatever in the session makes them fail again,
# none known, goes with it); the first waits about TRANSACTION_RETRY_S, each next one
# twice as long, jittered: workers that crossed the same transaction do not all come
# back at the same moment.
TRANSACTION_RETRIES = 5
TRANSACTION_RETRY_S = 0.02


class WorkerConnection:
    def __init__(
        self, spec: WorkerSpec, wake_fd: int, stopping: Callable[[], bool], store: JobStore
    ) -> None:
        self.spec = spec
        self.store = store  # its statements are prepared on every new connection
        self.wake_fd = wake_fd  # signals wake a sleep between attempts
        self.stopping = stopping
        self.conn: psycopg.Connection[Any] | None = None
        # Counts connections made: a batch claimed on an earlier connection is given
        # back rather than run, since its leases may have lapsed while we were away.
        self.epoch = 0
        self._read_only_delay_s = 0.0  # backoff between read-only faults in a row
        # Set when a connect was refused for a read-only server, cleared by one that
        # went through: the cause is told once a fault, not at every retry of it.
        self._told_read_only = False
        # Transaction faults retried on this connection since a write last went through.
        self._transaction_retries = 0

    def get(self, *, for_outcome: bool = False) -> psycopg.Connection[Any]:
        """The open connection, or a new one after jittered backoff. Gives up (raises)
        when the supervisor is gone, or when draining unless an outcome is waiting."""
        if self.conn is not None and not self.conn.closed:
            return self.conn
        delay = 0.1
        while True:
            try:
                # A write unacknowledged for as long as a lease lasts means a dead
                # path: give up then, not after the default 30 s (the job's lease
                # would have lapsed long before, leaving it `running` meanwhile).
                self.conn = connections.connect(
                    self.spec.database_url,
                    application_name=f"pgworkerd worker {self.spec.pool} #{self.spec.index}",
                    tcp_user_timeout=int(min(30.0, self.spec.lease_ttl_s) * 1000),
                    options=WORKER_OPTIONS,
                )
                # Before the first claim: the first jobs after a start or a reconnect
                # would otherwise each wait for a parse and a plan (JobStore.warm).
                self.store.warm(self.conn, limit=self.spec.batch_size, **self.spec.claim_scope())
                self.epoch += 1
                self._told_read_only = False
                self._transaction_retries = 0
                return self.conn
            except CONNECTION_FAULTS as exc:
                self._close()
                self._log_connect_fault(exc, delay)
                if self.orphaned() or (self.stopping() and not for_outcome):
                    raise
                sleep_interruptibly(self.wake_fd, delay)
                delay = min(RECONNECT_MAX_S, delay * 2) * random.uniform(0.5, 1.0) + 0.05

    def _log_connect_fault(self, exc: BaseException, retry_in_s: float) -> None:
        """A connect that failed. A read-only server (a standby, a node a failover left
        us on, default_transaction_read_only) accepts the connection and refuses the
        warm-up's first write: named as such, at its first refusal, and its retries
        below warning, where "unreachable" would send one looking for a network fault."""
        read_only = isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)
        if read_only:
            message = "database is read-only (it accepts connections, refuses writes); retrying"
            level = logging.DEBUG if self._told_read_only else logging.WARNING
        else:
            message, level = "database unreachable; retrying", logging.WARNING
        self._told_read_only = read_only  # another fault between: told again after it
        logs.event(
            log,
            level,
            message,
            error=connections.describe_error(exc, self.spec.database_url),
            retry_in_s=round(retry_in_s, 2),
        )

    def succeeded(self) -> None:
        """A write went through: the next read-only fault starts its backoff afresh, and
        the next transaction fault its retries."""
        self._read_only_delay_s = 0.0
        self._transaction_retries = 0

    def failed(self, exc: BaseException, retrying: str) -> None:
        """A statement on our connection raised one of CONNECTION_FAULTS, and the caller
        tries `retrying` again as it did after a lost connection (the same write, fenced
        by the leases: a write whose commit went through before the failure is found
        by them, docs/faults.md "Outcome committed, reply lost"; or the next claim,
        with the same successes). A transaction fault (connections.transaction_fault)
        that left the connection idle is said as what it is and tried again on this
        connection, after a short jittered wait, without a reconnect or a warm-up;
        anything else, or a transaction fault past TRANSACTION_RETRIES in a row, loses
        the connection.
        Asked only on a failure: nothing of it runs for a write that goes through."""
        what = connections.transaction_fault(exc, self.conn)
        if what is None or self._transaction_retries >= TRANSACTION_RETRIES:
            self.lost(exc)
            return
        self._transaction_retries += 1
        wait_s = TRANSACTION_RETRY_S * 2 ** (self._transaction_retries - 1)
        wait_s *= random.uniform(0.5, 1.5)
        logs.event(
            log,
            logging.WARNING,
            f"{what}; retrying {retrying} on the same connection",
            sqlstate=getattr(exc, "sqlstate", None),
            error=connections.describe_error(exc, self.spec.database_url),
            retry=self._transaction_retries,
            retry_in_s=round(wait_s, 3),
        )
        sleep_interruptibly(self.wake_fd, wait_s)

    def lost(self, exc: BaseException) -> None:
        logs.event(
            log,
            logging.WARNING,
            "database connection lost",
            error=connections.describe_error(exc, self.spec.database_url),
        )
        self._close()
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            # Connecting works, writing does not: reconnecting at once would spin.
            self._read_only_delay_s = min(RECONNECT_MAX_S, max(0.1, self._read_only_delay_s * 2))
            sleep_interruptibly(self.wake_fd, self._read_only_delay_s * random.uniform(0.5, 1.0))

    def orphaned(self) -> bool:
        return os.getppid() != self.spec.supervisor_pid

    def _close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection may fail too
                self.conn.close()
        self.conn = None


def drain_pipe(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, OSError):
        os.set_blocking(fd, False)
        while os.read(fd, 4096):
            pass


def sleep_interruptibly(wake_fd: int, seconds: float) -> None:
    select.select([wake_fd], [], [], seconds)
    drain_pipe(wake_fd)
