"""Writing a worker child's outcomes: fenced by each job's lease, retried across
reconnects (an unwritten outcome would make its job run again), and announced to the
supervisor (`finishing` before the write, `done` after: see pgworkerd/ipc)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from pgworkerd import logs
from pgworkerd.ipc import Done, Finishing, Message, StatusWriter
from pgworkerd.job import Job
from pgworkerd.storage.store import Completions, FailedAttempt, JobStore
from pgworkerd.worker.connection import CONNECTION_FAULTS, WorkerConnection
from pgworkerd.worker.execution import Outcome
from pgworkerd.worker.success_buffer import Success, SuccessBuffer

log = logging.getLogger("pgworkerd.worker")

T = TypeVar("T")


class OutcomeWriter:
    def __init__(
        self,
        store: JobStore,
        connection: WorkerConnection,
        status: StatusWriter,
        successes: SuccessBuffer,
    ) -> None:
        self.store = store
        self.connection = connection
        self.status = status
        self.successes = successes  # written with the next claim, or by flush()
        # Two lines a job at info: not even built when the level leaves them out.
        self.log_jobs = log.isEnabledFor(logging.INFO)

    def flush(self) -> None:
        """Write the pending successes now."""
        successes = self.successes.take()
        if not successes:
            return
        leases = self.announce(successes)
        kept = self._until_written(lambda conn: self.store.complete(conn, leases))
        if kept is not None:
            self.written(successes, kept)

    def announce(self, successes: list[Success]) -> Completions:
        """Tell the supervisor `successes` are about to be written (`finishing`, said
        before the write: see _write_at_once), and return what the write takes: their
        ids, lease tokens and results, as columns (no Lease made per job)."""
        ids = tuple([s.job.id for s in successes])
        if ids:
            self.status.send(Finishing(ids))
        return Completions(
            ids,
            [s.job.lease_token for s in successes],  # type: ignore[misc]  # claimed: set
            [s.result_json for s in successes],
        )

    def written(
        self, successes: list[Success], kept: set[int], then: Message | None = None
    ) -> None:
        """Log written successes (`kept`: whose lease still held) and tell the
        supervisor they are settled; `then`, a message to send right after, goes in
        the same write."""
        if not successes:
            if then is not None:
                self.status.send(then)
            return
        ids = tuple([s.job.id for s in successes])
        if len(kept) == len(ids):  # `kept` is of these ids: every lease held
            if self.log_jobs:
                logs.events(log, [_succeeded_line(s) for s in successes])
            # Without a look per job at `kept`: the usual batch, on every batch.
            ended = tuple([("succeeded", s.duration_ms / 1000) for s in successes])
        else:
            self._log_some_lost(successes, kept)
            ended = tuple(
                [
                    ("succeeded" if s.job.id in kept else "lost", s.duration_ms / 1000)
                    for s in successes
                ]
            )
        done = Done(ids, ended)
        if then is None:
            self.status.send(done)
        else:
            self.status.send(done, then)

    def _log_some_lost(self, successes: list[Success], kept: set[int]) -> None:
        """The lines of a batch some of whose leases were lost, in one write(), not one a
        line: they are written at once, before anything else runs (the jobs have ended;
        their lines are not held back)."""
        lines: list[logs.Event] = []
        for success in successes:
            if success.job.id in kept:
                if self.log_jobs:
                    lines.append(_succeeded_line(success))
            else:
                lines.append(
                    (
                        logging.WARNING,
                        "job lease lost; outcome discarded",
                        _log_fields(success.job, success.duration_ms),
                    )
                )
        logs.events(log, lines)

    def record(self, job: Job, outcome: Outcome, ran_s: float) -> None:
        """A job's handler ran for `ran_s` seconds: a success waits in the buffer (written
        with the next claim, or sooner: see success_buffer.py), any other outcome is
        written at once."""
        duration_ms = round(ran_s * 1000, 1)
        if outcome.kind == "succeeded":
            self.successes.succeeded(Success(job, outcome.result_json, duration_ms), ran_s)
        else:
            self.successes.ran(job, ran_s)
            self._write_at_once(job, outcome, duration_ms)

    def _write_at_once(self, job: Job, outcome: Outcome, duration_ms: float) -> None:
        # Said before the write: a supervisor whose renewal finds the lease gone then
        # knows it was this write, not a rescue, and lets it be.
        self.status.send(Finishing((job.id,)))
        written = self._until_written(lambda conn: self._write(conn, job, outcome, duration_ms))
        if written is None:
            written = "lost"
        self.status.send(Done((job.id,), ((written, duration_ms / 1000),)))

    def _until_written(self, write: Callable[[psycopg.Connection[Any]], T]) -> T | None:
        """What `write` returned once it went through, tried again as often as it takes
        (an unwritten outcome would make its job run again): on the same connection
        after a transaction fault (a deadlock), else on a new one; None when the
        supervisor is gone: the leases lapse and the jobs are rescued. Each try is the
        same write, fenced by the jobs' leases: what a failed try committed before it
        failed (its first statement) is found by them, not written twice."""
        while True:
            try:
                done = write(self.connection.get(for_outcome=True))
            except CONNECTION_FAULTS as exc:
                self.connection.failed(exc, "the outcomes")
                if self.connection.orphaned():
                    return None
            else:
                self.connection.succeeded()
                return done

    def _write(
        self, conn: psycopg.Connection[Any], job: Job, outcome: Outcome, duration_ms: float
    ) -> str:
        """Write it; returns the outcome kind for `done`: failed, dead, cancelled or lost."""
        fields = _log_fields(job, duration_ms)
        result = write_unsuccessful(self.store, conn, job, outcome)
        if result is None and outcome.kind == "cancelled":
            # The cancel ended the job (and its lease) before the handler returned.
            logs.event(log, logging.INFO, "job cancelled while running", **fields)
            return "cancelled"
        if result is None:
            logs.event(
                log,
                logging.WARNING,
                "job lease lost; outcome discarded",
                outcome=outcome.kind,
                **fields,
            )
            return "lost"
        if outcome.kind in ("snoozed", "key_paused"):
            logs.event(
                log,
                logging.INFO,
                f"job {outcome.kind.replace('_', ' ')}",
                **fields,
                run_at=result.run_at.isoformat(),
            )
            return "failed"  # back to queued; the supervisor settles it as any retry
        level = logging.ERROR if result.state == "dead" else logging.WARNING
        logs.event(
            log,
            level,
            f"job {outcome.kind.replace('_', ' ')}",
            **fields,
            next_state=result.state,
            run_at=result.run_at.isoformat(),
            error=outcome.summary,
        )
        return "failed" if result.state == "queued" else "dead"


def _succeeded_line(success: Success) -> logs.Event:
    return (logging.INFO, "job succeeded", _log_fields(success.job, success.duration_ms))


def _log_fields(job: Job, duration_ms: float) -> dict[str, Any]:
    """What the log line of a written outcome says about its job."""
    return {"job": job.id, "kind": job.kind, "attempt": job.attempt, "duration_ms": duration_ms}


def write_unsuccessful(
    store: JobStore, conn: psycopg.Connection[Any], job: Job, outcome: Outcome
) -> FailedAttempt | None:
    """The write of an outcome other than success (also pgworkerd.testing's): retried
    at the handler's delay, or with backoff, or dead. None when the lease was lost."""
    if outcome.kind == "retry":
        return store.retry_after(conn, job.lease, outcome.delay_s or 0.0, outcome.error)
    if outcome.kind in ("snoozed", "key_paused"):
        return store.snooze(
            conn,
            job.lease,
            delay_s=outcome.delay_s,
            until=outcome.until,
            pause_key=outcome.kind == "key_paused",
        )
    discard = outcome.kind == "discarded"
    return store.fail(conn, job.lease, outcome.error or outcome.kind, discard=discard)
