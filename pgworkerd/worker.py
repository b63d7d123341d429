"""The worker child: claim a batch, run each job, record each outcome, repeat.

A child runs one job at a time. It tells its supervisor over the status pipe what it
claimed, started and finished, so the supervisor can renew its leases, enforce max
runtime and settle its jobs if it dies. The child connects after the fork, reconnects
with jittered backoff when the database goes away, and ends with os._exit.

Signals: TERM = finish the running job, start no other (the supervisor releases the
rest of the batch when it reads `stopping`); USR1 = the job passed its max runtime,
raise JobTimeout in the handler; the supervisor's SIGKILL is the hard limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil
import psycopg
from setproctitle import setproctitle

from pgworkerd import db, logs
from pgworkerd.child_slot import ChildSlot
from pgworkerd.execution import Executor, Outcome
from pgworkerd.job import Job, JobTimeout
from pgworkerd.outcomes import OutcomeBuffer, Success
from pgworkerd.protocol import StatusWriter
from pgworkerd.store import Backoff, JobStore

log = logging.getLogger("pgworkerd.worker")

EXIT_RECYCLED = 0  # normal end: drained, or recycled after max jobs / memory
EXIT_BOOT_ERROR = 3  # the child could not even start: the supervisor stops
EXIT_ORPHANED = 4  # the supervisor is gone
RECONNECT_MAX_S = 10.0
MEMORY_CHECK_INTERVAL_S = 1.0  # reading our RSS costs a /proc read: not before every job
# The worker's statements (prepared by psycopg after a few runs) have plans that do not
# depend on their parameters' values (tests/test_claim_plan.py asserts the generic
# ones). Left to choose, PostgreSQL kept planning the claim afresh for every run: half
# a millisecond of each claim, and of an idle worker's pick-up of a new job.
WORKER_PLAN_CACHE_MODE = "force_generic_plan"
# Errors that end a connection's use. A server that cannot write any more (a failover
# left us on a read-only node, or a standby) is one: the job is not at fault, nothing
# is charged, we reconnect (with backoff) until a writable server answers (§21).
CONNECTION_FAULTS = (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a child needs, fixed at fork time."""

    pool: str
    index: int  # 1-based within the pool
    queues: tuple[str, ...]  # in claim order
    queue_max_attempts: tuple[int, ...]
    batch_size: int
    lease_ttl_s: float
    poll_interval_s: float
    database_url: str
    schema: str
    backoff: Backoff
    registry: Mapping[str, Callable[..., Any]]
    max_jobs: int | None
    max_memory_bytes: int | None
    log_format: str
    log_level: str
    supervisor_pid: int
    worker_id: str  # written into jobs.worker: hostname:supervisor pid/pool#index


def child_main(spec: WorkerSpec, status_fd: int, control_fd: int, slot: ChildSlot) -> int:
    """Entry point in the forked child; returns the exit status."""
    writer = StatusWriter(status_fd)
    try:
        worker = Worker(spec, writer, control_fd, slot)
    except Exception as exc:
        writer.send("boot_error", reason=f"{type(exc).__name__}: {exc}")
        return EXIT_BOOT_ERROR
    return worker.run()


class Worker:
    def __init__(
        self, spec: WorkerSpec, writer: StatusWriter, control_fd: int, slot: ChildSlot
    ) -> None:
        self.spec = spec
        self.writer = writer
        self.slot = slot  # where we post each job start for the supervisor
        self._control_lines_read = 0  # the slot's count of control lines when last read
        # Deciding to start a job and posting the start are one step for the
        # supervisor: a SIGTERM that comes in between says `stopping` only after.
        self._deciding = False
        self._stopping_deferred = False
        # Claims are numbered in the order we will run them; the supervisor numbers
        # them alike from our "claimed" messages.
        self._claimed_count = 0
        self._claim_number: dict[int, int] = {}  # job id -> its number, current batch
        self.control_fd = control_fd  # "skip <id>" lines: leases the supervisor saw lost
        os.set_blocking(control_fd, False)
        self._control_buffer = b""
        self._skip: set[tuple[int, str]] = set()  # (job id, lease token)
        self.store = JobStore(spec.schema, backoff=spec.backoff)
        self.executor = Executor()
        self.outcomes = OutcomeBuffer(spec.batch_size)
        self._process = psutil.Process()
        self._next_memory_check = 0.0
        self.conn: psycopg.Connection[Any] | None = None
        self.stopping = False  # set by SIGTERM; read before every job start
        self.jobs_done = 0
        self.title = f"pgworkerd: worker {spec.pool} #{spec.index}"
        self._running: Job | None = None  # the job whose handler runs; for USR1
        # Counts connections made: a batch claimed on an earlier connection is given
        # back rather than run, since its leases may have lapsed while we were away.
        self._connection_epoch = 0
        self._read_only_delay_s = 0.0  # backoff between read-only faults in a row
        self._wake_r, self._wake_w = os.pipe()
        self._boot()

    # -- set-up ---------------------------------------------------------------------------

    def _boot(self) -> None:
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_soft_timeout)
        logs.setup(
            self.spec.log_format,
            role=f"worker {self.spec.pool}#{self.spec.index}",
            level=self.spec.log_level,
        )
        # Two lines a job at info: not even built when the level leaves them out.
        self._log_jobs = log.isEnabledFor(logging.INFO)
        setproctitle(f"{self.title} idle")

    def _on_term(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self._deciding:
            self._stopping_deferred = True  # said by _run_batch once the decision is out
        else:
            self.writer.send("stopping")

    def _on_soft_timeout(self, signum: int, frame: Any) -> None:
        job = self._running
        if job is not None and self.executor.in_handler:
            raise JobTimeout(f"job {job.id} ({job.kind}) passed its max runtime")

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        try:
            code = self._loop()
            self._flush()  # drained, recycled or orphaned: what succeeded is written first
            return code
        finally:
            self.executor.close()

    def _loop(self) -> int:
        while not self.stopping:
            if os.getppid() != self.spec.supervisor_pid:
                return EXIT_ORPHANED
            if self._should_recycle():
                return EXIT_RECYCLED
            batch = self._claim()
            if batch:
                self._run_batch(batch)
            elif batch is not None:
                self._wait_for_work()
        return EXIT_RECYCLED

    def _claim(self) -> list[Job] | None:
        """A batch (maybe empty), or None when the database could not be reached. The
        successes still pending are written in the same transaction."""
        successes = self.outcomes.take()
        try:
            conn = self._connection()
            # Before the claim is sent: its leases run from no earlier than this.
            claimed_at = time.monotonic()
            if successes:
                self.writer.send("finishing", ids=[s.job.id for s in successes])
            kept, batch = self.store.complete_and_claim(
                conn,
                [(s.job.lease, s.result_json) for s in successes],
                queues=self.spec.queues,
                limit=self.spec.batch_size,
                lease_ttl_s=self.spec.lease_ttl_s,
                worker=self.spec.worker_id,
                max_attempts=self.spec.queue_max_attempts,
            )
        except CONNECTION_FAULTS as exc:
            self.outcomes.put_back(successes)  # neither the write nor the claim happened
            self._lost_connection(exc)
            return None
        self._read_only_delay_s = 0.0
        self._written(successes, kept)
        if batch:
            first = self._claimed_count + 1
            self._claimed_count += len(batch)
            self._claim_number = {job.id: first + n for n, job in enumerate(batch)}
            self.writer.send(
                "claimed",
                first=first,
                at=claimed_at,
                full=len(batch) == self.spec.batch_size,
                jobs=[[j.id, str(j.lease_token), j.kind, j.queue, j.max_runtime_s] for j in batch],
            )
        return batch

    def _run_batch(self, batch: list[Job]) -> None:
        epoch = self._connection_epoch
        for position, job in enumerate(batch):
            if self.outcomes.due_before(job):
                self._flush()
            # One step for the supervisor (see _on_term). Python runs signal handlers
            # between bytecodes of this one thread, so a flag does what masking SIGTERM
            # would, without two system calls a job.
            self._deciding = True
            try:
                if self.stopping:
                    return  # the supervisor releases the rest when it reads `stopping`
                rest = batch[position:]
                if self._connection_epoch != epoch or self._should_recycle():
                    self._release(rest)
                    return
                if (job.id, str(job.lease_token)) in self._skipped():
                    continue  # cancelled or rescued before it started: not ours to run
                self.slot.post_start(self._claim_number[job.id])
            finally:
                self._deciding = False
                if self._stopping_deferred:
                    self._stopping_deferred = False
                    self.writer.send("stopping")
            self._run_one(job)

    def _run_one(self, job: Job) -> None:
        handler = self.spec.registry.get(job.kind)
        if self._log_jobs:
            logs.event(
                log,
                logging.INFO,
                "job started",
                job=job.id,
                kind=job.kind,
                queue=job.queue,
                attempt=job.attempt,
            )
        setproctitle(f"{self.title} job {job.id} {job.kind}")
        started = time.monotonic()
        if handler is None:
            # Only configured code runs: an unknown kind never selects an import.
            outcome = Outcome("discarded", error=f"no handler configured for kind {job.kind!r}")
        else:
            self._running = job
            try:
                outcome = self.executor.run(handler, job)
            finally:
                self._running = None
        ran_s = time.monotonic() - started
        duration_ms = round(ran_s * 1000, 1)
        self.outcomes.ran(job, ran_s)
        if outcome.kind == "succeeded":
            # Written with the next claim, or sooner (see outcomes.py).
            self.outcomes.add(Success(job, outcome.result_json, duration_ms))
        else:
            # Said before the write: a supervisor whose renewal finds the lease gone
            # then knows it was this write, not a rescue, and lets it be.
            self.writer.send("finishing", ids=[job.id])
            self._record(job, outcome, duration_ms)
            self.writer.send("done", ids=[job.id])
        self.jobs_done += 1
        setproctitle(f"{self.title} idle")

    def _skipped(self) -> set[tuple[int, str]]:
        """(job id, lease token) pairs the supervisor told us not to start: their
        lease is gone. By token: the same job may come back to us, claimed anew."""
        if self.slot.control_lines() != self._control_lines_read:
            self._read_control()
        return self._skip

    def _read_control(self) -> bool:
        """Take in the supervisor's lines: `skip <id> <token>`, `wake`. True if woken."""
        self._control_lines_read = self.slot.control_lines()  # before: none is missed
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.control_fd, 4096):
                self._control_buffer += chunk
        *lines, self._control_buffer = self._control_buffer.split(b"\n")
        woken = False
        for line in lines:
            verb, job_id, token = [*line.decode().split(" "), "", ""][:3]
            if verb == "skip" and job_id.isdigit():
                self._skip.add((int(job_id), token))
            elif verb == "wake":
                woken = True
        return woken

    # -- outcomes -------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write the pending successes now, retried across reconnects (an unwritten
        success would make its job run again)."""
        successes = self.outcomes.take()
        if not successes:
            return
        self.writer.send("finishing", ids=[s.job.id for s in successes])
        leases = [(s.job.lease, s.result_json) for s in successes]
        while True:
            try:
                kept = self.store.complete(self._connection(for_outcome=True), leases)
                self._read_only_delay_s = 0.0
                break
            except CONNECTION_FAULTS as exc:
                self._lost_connection(exc)
                if os.getppid() != self.spec.supervisor_pid:
                    return  # orphaned: the leases lapse and the jobs are rescued
        self._written(successes, kept)

    def _written(self, successes: list[Success], kept: set[int]) -> None:
        """Log written successes (`kept`: whose lease still held) and tell the
        supervisor they are settled."""
        if not successes:
            return
        for success in successes:
            job = success.job
            if job.id in kept and not self._log_jobs:
                continue
            fields = {
                "job": job.id,
                "kind": job.kind,
                "attempt": job.attempt,
                "duration_ms": success.duration_ms,
            }
            if job.id in kept:
                logs.event(log, logging.INFO, "job succeeded", **fields)
            else:
                logs.event(log, logging.WARNING, "job lease lost; outcome discarded", **fields)
        self.writer.send("done", ids=[s.job.id for s in successes])

    def _record(self, job: Job, outcome: Outcome, duration_ms: float) -> None:
        """Write the outcome, fenced by the lease; retried across reconnects, since an
        unwritten outcome would make the job run again."""
        while True:
            try:
                self._write_outcome(self._connection(for_outcome=True), job, outcome, duration_ms)
                self._read_only_delay_s = 0.0
                return
            except CONNECTION_FAULTS as exc:
                self._lost_connection(exc)
                if os.getppid() != self.spec.supervisor_pid:
                    return

    def _write_outcome(
        self, conn: psycopg.Connection[Any], job: Job, outcome: Outcome, duration_ms: float
    ) -> None:
        fields = {
            "job": job.id,
            "kind": job.kind,
            "attempt": job.attempt,
            "duration_ms": duration_ms,
        }
        lease = job.lease
        if outcome.kind == "retry":
            result = self.store.retry_after(conn, lease, outcome.delay_s or 0.0, outcome.error)
        else:
            discard = outcome.kind == "discarded"
            result = self.store.fail(conn, lease, outcome.error or outcome.kind, discard=discard)
        if result is None:
            logs.event(
                log,
                logging.WARNING,
                "job lease lost; outcome discarded",
                outcome=outcome.kind,
                **fields,
            )
            return
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

    def _release(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        with contextlib.suppress(*CONNECTION_FAULTS):
            self.store.release(self._connection(), [job.lease for job in jobs])
        # Said either way: if the release did not reach the database, the supervisor's
        # renewals stop and the leases expire into a rescue.
        self.writer.send("released", ids=[job.id for job in jobs])

    # -- waiting and connecting -----------------------------------------------------------

    def _wait_for_work(self) -> None:
        """Sleep until the supervisor wakes us (it listens for enqueues: one listening
        connection per daemon, and only as many children woken as there is work), a
        signal, the next scheduled job or the poll interval, whichever comes first."""
        conn = self.conn
        if conn is None:
            return
        try:
            next_in = self.store.next_run_in(conn, self.spec.queues)
        except CONNECTION_FAULTS as exc:
            self._lost_connection(exc)
            return
        timeout = self.spec.poll_interval_s
        if next_in is not None:
            timeout = min(timeout, max(0.0, next_in))
        woken = self._read_control()
        if not woken and timeout > 0:
            self.writer.send("idle")
            select.select([self.control_fd, self._wake_r], [], [], timeout)
            _drain_pipe(self._wake_r)
            woken = self._read_control()
        if woken:
            logs.event(log, logging.DEBUG, "woken by the supervisor: a job was enqueued")

    def _connection(self, *, for_outcome: bool = False) -> psycopg.Connection[Any]:
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
                self.conn = db.connect(
                    self.spec.database_url,
                    application_name=f"pgworkerd worker {self.spec.pool} #{self.spec.index}",
                    tcp_user_timeout=int(min(30.0, self.spec.lease_ttl_s) * 1000),
                    options=f"-c plan_cache_mode={WORKER_PLAN_CACHE_MODE}",
                )
                self._connection_epoch += 1
                self.writer.send("ready")
                return self.conn
            except CONNECTION_FAULTS as exc:
                if self.conn is not None:
                    with contextlib.suppress(Exception):
                        self.conn.close()
                self.conn = None
                logs.event(
                    log,
                    logging.WARNING,
                    "database unreachable; retrying",
                    error=db.describe_error(exc, self.spec.database_url),
                    retry_in_s=round(delay, 2),
                )
                if os.getppid() != self.spec.supervisor_pid or (self.stopping and not for_outcome):
                    raise
                _sleep_interruptibly(self._wake_r, delay)
                delay = min(RECONNECT_MAX_S, delay * 2) * random.uniform(0.5, 1.0) + 0.05

    def _lost_connection(self, exc: BaseException) -> None:
        logs.event(
            log,
            logging.WARNING,
            "database connection lost",
            error=db.describe_error(exc, self.spec.database_url),
        )
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            # Connecting works, writing does not: reconnecting at once would spin.
            self._read_only_delay_s = min(RECONNECT_MAX_S, max(0.1, self._read_only_delay_s * 2))
            _sleep_interruptibly(self._wake_r, self._read_only_delay_s * random.uniform(0.5, 1.0))

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


def _drain_pipe(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, OSError):
        os.set_blocking(fd, False)
        while os.read(fd, 4096):
            pass


def _sleep_interruptibly(wake_fd: int, seconds: float) -> None:
    select.select([wake_fd], [], [], seconds)
    _drain_pipe(wake_fd)
