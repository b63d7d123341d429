"""The worker child's loop: claim a batch, run each job, record each outcome, repeat.

A child runs one job at a time today (one execution slot). It tells its supervisor
what it claimed, started and finished (pgworkerd/ipc), so the supervisor can renew its
leases, enforce max runtime and settle its jobs if it dies.

Signals: TERM = finish the running job, start no other (the supervisor releases the
rest of the batch when it reads `stopping`); USR1 = the control pipe says the job
passed its max runtime or was cancelled: raise JobTimeout or JobCancelled in the
handler; the supervisor's SIGKILL is the hard limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import psutil
import psycopg
from setproctitle import setproctitle

from pgworkerd import logs, progress
from pgworkerd.ipc import (
    Claimed,
    ClaimedJob,
    ControlReader,
    ExitCode,
    Finishing,
    Idle,
    Released,
    StartBoard,
    StatusWriter,
    Stopping,
)
from pgworkerd.job import Job, JobCancelled, JobTimeout
from pgworkerd.progress import ProgressWriter
from pgworkerd.storage import connections
from pgworkerd.storage.store import JobStore
from pgworkerd.worker.connection import (
    CONNECTION_FAULTS,
    WorkerConnection,
    drain_pipe,
)
from pgworkerd.worker.execution import Executor, Outcome
from pgworkerd.worker.outcome_writer import OutcomeWriter
from pgworkerd.worker.spec import WorkerSpec
from pgworkerd.worker.success_buffer import Success, SuccessBuffer

log = logging.getLogger("pgworkerd.worker")

MEMORY_CHECK_INTERVAL_S = 1.0  # reading our RSS costs a /proc read: not before every job


class Worker:
    def __init__(
        self, spec: WorkerSpec, status: StatusWriter, control: ControlReader, board: StartBoard
    ) -> None:
        self.spec = spec
        self.status = status
        self.control = control  # `skip` and `wake` lines from the supervisor
        self.board = board  # where we post each job start for the supervisor
        self.stopping = False  # set by SIGTERM; read before every job start
        # Deciding to start a job and posting the start are one step for the
        # supervisor: a SIGTERM that comes in between says `stopping` only after.
        self._deciding = False
        self._stopping_deferred = False
        self.decision = _DecisionStep(self)
        # Claims are numbered in the order we start them; the supervisor numbers them
        # alike from our `claimed` messages.
        self._claimed_count = 0
        self._claim_number: dict[int, int] = {}  # job id -> its number, current batch
        self.store = JobStore(spec.schema, backoff=spec.backoff)
        self.executor = Executor()
        self._wake_r, self._wake_w = os.pipe()
        self.connection = WorkerConnection(spec, self._wake_r, lambda: self.stopping)
        self.outcomes = OutcomeWriter(
            self.store, self.connection, status, SuccessBuffer(spec.batch_size)
        )
        self._process = psutil.Process()
        self._next_memory_check = 0.0
        self.jobs_done = 0
        self.title = f"pgworkerd: worker {spec.pool} #{spec.index}"
        self._running: Job | None = None  # the job whose handler runs; for USR1
        self._boot()

    def _boot(self) -> None:
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_interrupt)
        logs.setup(self.spec.log_format, role=f"worker {self.spec.name}", level=self.spec.log_level)
        # Its thread and connection start on a handler's first job.progress() call.
        progress.install(ProgressWriter(self._progress_connection, self.spec.schema))
        self.outcomes.log_jobs = log.isEnabledFor(logging.INFO)
        setproctitle(f"{self.title} idle")

    def _progress_connection(self) -> psycopg.Connection[Any]:
        spec = self.spec
        return connections.connect(
            spec.database_url,
            application_name=f"pgworkerd progress {spec.pool} #{spec.index}",
            tcp_user_timeout=int(min(30.0, spec.lease_ttl_s) * 1000),
        )

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self._deciding:
            self._stopping_deferred = True  # said by _run_batch once the decision is out
        else:
            self.status.send(Stopping())

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        job = self._running
        if job is None or not self.executor.in_handler:
            return  # the handler returned: nothing left to interrupt
        # The main thread runs the handler, so it is not inside a read of the pipe.
        control = self.control
        control.read()
        if job.id in control.cancels:
            control.cancels.discard(job.id)
            raise JobCancelled(f"job {job.id} ({job.kind}) was cancelled")
        control.timeouts.discard(job.id)  # the supervisor sends USR1 for nothing else
        raise JobTimeout(f"job {job.id} ({job.kind}) passed its max runtime")

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        try:
            code = self._loop()
            self.outcomes.flush()  # drained, recycled or orphaned: successes written first
            return code
        finally:
            self.executor.close()

    def _loop(self) -> int:
        while not self.stopping:
            if self.connection.orphaned():
                return ExitCode.ORPHANED
            if self._should_recycle():
                return ExitCode.RECYCLED
            batch = self._claim()
            if batch:
                self._run_batch(batch)
            elif batch is not None:
                self._wait_for_work()
        return ExitCode.RECYCLED

    def _claim(self, limit: int | None = None) -> list[Job] | None:
        """A batch of at most `limit` (default: the batch size; maybe empty), or None
        when the database could not be reached. The successes still pending are written
        in the same transaction."""
        limit = limit or self.spec.batch_size
        buffer = self.outcomes.successes
        successes = buffer.take()
        try:
            conn = self.connection.get()
            # Before the claim is sent: its leases run from no earlier than this.
            claimed_at = time.monotonic()
            if successes:
                self.status.send(Finishing(tuple(s.job.id for s in successes)))
            kept, batch = self.store.complete_and_claim(
                conn,
                [(s.job.lease, s.result_json) for s in successes],
                queues=self.spec.queues,
                limit=limit,
                lease_ttl_s=self.spec.lease_ttl_s,
                worker=self.spec.worker_id,
                max_attempts=self.spec.queue_max_attempts,
            )
        except CONNECTION_FAULTS as exc:
            buffer.put_back(successes)  # neither the write nor the claim happened
            self.connection.lost(exc)
            return None
        self.connection.succeeded()
        self.outcomes.written(successes, kept)
        if batch:
            first = self._claimed_count + 1
            self._claimed_count += len(batch)
            self._claim_number = {job.id: first + n for n, job in enumerate(batch)}
            jobs = tuple(
                ClaimedJob(j.id, str(j.lease_token), j.kind, j.queue, j.max_runtime_s)
                for j in batch
            )
            self.status.send(Claimed(first, claimed_at, len(batch) == limit, jobs))
        return batch

    def _run_batch(self, batch: list[Job]) -> None:
        epoch = self.connection.epoch
        for position, job in enumerate(batch):
            if self.outcomes.successes.due_before(job):
                self.outcomes.flush()
            with self.decision:
                if self.stopping:
                    return  # the supervisor releases the rest when it reads `stopping`
                if self.connection.epoch != epoch or self._should_recycle():
                    self._release(batch[position:])
                    return
                if self.control.is_skipped(job.id, str(job.lease_token)):
                    continue  # cancelled or rescued before it started: not ours to run
                self.board.post_start(self._claim_number[job.id])
            self._run_one(job)

    def _handler_of(self, job: Job, **log_fields: object) -> Callable[..., Any] | None:
        """The job's handler, None for a kind without one; logs the start."""
        if self.outcomes.log_jobs:
            logs.event(
                log,
                logging.INFO,
                "job started",
                job=job.id,
                kind=job.kind,
                queue=job.queue,
                attempt=job.attempt,
                **log_fields,
            )
        return self.spec.registry.get(job.kind)

    def _run_one(self, job: Job) -> None:
        handler = self._handler_of(job)
        setproctitle(f"{self.title} job {job.id} {job.kind}")
        started = time.monotonic()
        if handler is None:
            outcome = unknown_kind(job)
        else:
            self._running = job
            try:
                outcome = self.executor.run(handler, job)
            finally:
                self._running = None
        ran_s = time.monotonic() - started
        duration_ms = round(ran_s * 1000, 1)
        control = self.control
        if control.cancels or control.timeouts:  # came as the handler returned: moot now
            control.cancels.discard(job.id)
            control.timeouts.discard(job.id)
        self.outcomes.successes.ran(job, ran_s)
        if outcome.kind == "succeeded":
            # Written with the next claim, or sooner (see success_buffer.py).
            self.outcomes.successes.add(Success(job, outcome.result_json, duration_ms))
        else:
            self.outcomes.record(job, outcome, duration_ms)
        self.jobs_done += 1
        setproctitle(f"{self.title} idle")

    def _release(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        with contextlib.suppress(*CONNECTION_FAULTS):
            self.store.release(self.connection.get(), [job.lease for job in jobs])
        # Said either way: if the release did not reach the database, the supervisor's
        # renewals stop and the leases expire into a rescue.
        self.status.send(Released(tuple(job.id for job in jobs)))

    # -- waiting --------------------------------------------------------------------------

    def _wait_for_work(self) -> None:
        """Sleep until the supervisor wakes us (it listens for enqueues: one listening
        connection per daemon, and only as many children woken as there is work), a
        signal, the next scheduled job or the poll interval, whichever comes first."""
        conn = self.connection.conn
        if conn is None:
            return
        try:
            next_in = self.store.next_run_in(conn, self.spec.queues)
        except CONNECTION_FAULTS as exc:
            self.connection.lost(exc)
            return
        timeout = self.spec.poll_interval_s
        if next_in is not None:
            timeout = min(timeout, max(0.0, next_in))
        woken = self.control.read()
        if not woken and timeout > 0:
            self.status.send(Idle())
            select.select([self.control.fd, self._wake_r], [], [], timeout)
            drain_pipe(self._wake_r)
            woken = self.control.read()
        if woken:
            logs.event(log, logging.DEBUG, "woken by the supervisor: a job was enqueued")

    def _should_recycle(self) -> bool:
        spec = self.spec
        if spec.max_jobs is not None and self.jobs_done >= spec.max_jobs:
            logs.event(
                log,
                logging.INFO,
                "recycling worker",
                reason="max_jobs_per_child",
                jobs=self.jobs_done,
            )
            return True
        if spec.max_memory_bytes is not None and time.monotonic() >= self._next_memory_check:
            self._next_memory_check = time.monotonic() + MEMORY_CHECK_INTERVAL_S
            rss = self._process.memory_info().rss
            if rss > spec.max_memory_bytes:
                logs.event(
                    log,
                    logging.INFO,
                    "recycling worker",
                    reason="max_memory_per_child",
                    rss_bytes=rss,
                )
                return True
        return False


def unknown_kind(job: Job) -> Outcome:
    # Only configured code runs: an unknown kind never selects an import.
    return Outcome("discarded", error=f"no handler configured for kind {job.kind!r}")


class _DecisionStep:
    """`with worker.decision:` around deciding to start a job and posting its start.
    Python runs signal handlers between bytecodes of this one thread, so a flag does
    what masking SIGTERM would, without two system calls a job (nor a generator-based
    context manager's cost)."""

    __slots__ = ("worker",)

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def __enter__(self) -> None:
        self.worker._deciding = True

    def __exit__(self, *exc_info: object) -> None:
        worker = self.worker
        worker._deciding = False
        if worker._stopping_deferred:
            worker._stopping_deferred = False
            worker.status.send(Stopping())
