"""`job.progress(percent, stage)`: what a handler reports, and how it reaches the job row.

A handler may report from any thread or coroutine, as often as it likes: `report` only
checks the value and leaves it, under a lock, as its job's latest. A writer thread of
the worker process (started on the first report, after the fork, never in the
supervisor) writes the latest value of each job in one statement, at most once per
`interval_s`, on a small connection of its own: the handler never waits for the
database, an event loop is never blocked, and a tight loop of reports costs one write
per interval however many it makes. The last value reported is written too (after at
most one interval), even when the handler returned meanwhile: the statement lets the
lease that ran the job write onto its own success (storage/sql/queries.sql, `jobs_progress`).

Every write is fenced by the job's lease token: a holder that lost its lease (rescued,
cancelled, released) writes nothing. A value the database could not take is dropped
(progress is advice, never a reason to fail or retry the job); the next report of the
job is written afresh.

Outside a worker (a handler called directly in a unit test) no sink is installed and
`job.progress` only checks its arguments. `pgworkerd.testing.drain` installs a sink
that writes each report at once, on the test's connection.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from pgworkerd import logs
from pgworkerd.encoding import storable_text
from pgworkerd.storage.progress import write_progress

if TYPE_CHECKING:
    from pgworkerd.job import Job

log = logging.getLogger("pgworkerd.worker")

WRITE_INTERVAL_S = 0.5  # at most one progress write a process this often
MAX_STAGE_CHARS = 200


class ProgressSink(Protocol):
    def report(self, job_id: int, token: uuid.UUID, percent: float, stage: str | None) -> None:
        """Take a checked value; must not block on the database from an event loop."""


_sink: ProgressSink | None = None


def install(sink: ProgressSink | None) -> ProgressSink | None:
    """Make `sink` this process's; returns the one it replaces."""
    global _sink
    previous, _sink = _sink, sink
    return previous


def report(job: Job, percent: object, stage: object = None) -> None:
    """Check the value (ValueError in the handler when it is wrong) and hand it on."""
    value = check(percent, stage)
    sink = _sink
    if sink is not None and job.lease_token is not None:
        sink.report(job.id, job.lease_token, value, clean_stage(stage))


def check(percent: object, stage: object) -> float:
    # Compared, not passed to math.isfinite: an int beyond a float's range raised
    # OverflowError there; NaN and the infinities fail the comparison.
    if isinstance(percent, bool) or not isinstance(percent, int | float) or not 0 <= percent <= 100:
        raise ValueError(f"progress needs a percent from 0 to 100, got {_shown(percent)}")
    if stage is not None and not isinstance(stage, str):
        raise ValueError(f"progress stage must be a string or None, got {type(stage).__name__}")
    return float(percent)


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return "an integer of more than 20 digits"  # its repr may itself raise (4,300)
    return repr(value)[:100]


def clean_stage(stage: object) -> str | None:
    """A stage safe to store: NULs and lone surrogates escaped, at most MAX_STAGE_CHARS
    characters."""
    if not isinstance(stage, str):
        return None
    return storable_text(stage)[:MAX_STAGE_CHARS]


class DirectProgress:
    """Writes each report at once on the given connection: pgworkerd.testing's sink."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str) -> None:
        self.conn = conn
        self.schema = schema

    def report(self, job_id: int, token: uuid.UUID, percent: float, stage: str | None) -> None:
        write_progress(self.conn, self.schema, {job_id: (token, percent, stage)})


class ProgressWriter:
    """The worker process's sink: the latest value per job, written by a thread."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        schema: str,
        *,
        interval_s: float = WRITE_INTERVAL_S,
    ) -> None:
        self._connect = connect
        self._schema = schema
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[uuid.UUID, float, str | None]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None

    def report(self, job_id: int, token: uuid.UUID, percent: float, stage: str | None) -> None:
        with self._lock:
            self._pending[job_id] = (token, percent, stage)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="pgworkerd-progress", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                values, self._pending = self._pending, {}
            if values:
                self._write(values)
            # The throttle: whatever is reported meanwhile waits, and only the latest
            # value of each job is written after.
            time.sleep(self._interval_s)

    def _write(self, values: dict[int, tuple[uuid.UUID, float, str | None]]) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            write_progress(self._conn, self._schema, values)
        except Exception as exc:  # any: the thread must outlive one report it cannot write
            logs.event(log, logging.WARNING, "progress not written", error=_one_line(exc))
            if not isinstance(exc, psycopg.Error):
                return  # the connection is fine
            # Imported here, on a failure only: `import pgworkerd` loads this module.
            from pgworkerd.storage.connections import transaction_fault

            if transaction_fault(exc, self._conn) is not None:
                # A deadlock or a lock_timeout rolled the write back and left the
                # connection as it was: kept (the job's next report is written on it).
                return
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
