"""What every worker child does, whether it runs one job at a time (loop.py) or several
(concurrent.py): boot and signals, claim, the start decision, give back, record an
outcome, how long to wait for work, and when to recycle.

It tells its supervisor what it claimed, started and finished (pgworkerd/ipc), so the
supervisor can renew its leases, enforce max runtime and settle its jobs if it dies.

Signals: TERM = finish the running jobs, start no other (the supervisor releases the
rest of what was claimed when it reads `stopping`); USR1 = the control pipe says a
running job passed its max runtime or was cancelled; the supervisor's SIGKILL is the
hard limit.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import psutil
import psycopg
from setproctitle import setproctitle

from pgworkerd import logs, progress
from pgworkerd.client import producer
from pgworkerd.ipc import (
    Claimed,
    ControlReader,
    Released,
    Skipping,
    StartBoard,
    StatusWriter,
    Stopping,
    claimed_job,
)
from pgworkerd.job import Job, Lease
from pgworkerd.progress import ProgressWriter
from pgworkerd.storage import connections
from pgworkerd.storage.arrays import HEX_DIGITS
from pgworkerd.storage.store import Completions, JobStore
from pgworkerd.worker.connection import CONNECTION_FAULTS, WorkerConnection
from pgworkerd.worker.execution import Outcome
from pgworkerd.worker.lease_guard import GUARD_FRACTION, LeaseGuard
from pgworkerd.worker.outcome_writer import OutcomeWriter
from pgworkerd.worker.spec import WorkerSpec
from pgworkerd.worker.success_buffer import Success, SuccessBuffer

log = logging.getLogger("pgworkerd.worker")

MEMORY_CHECK_INTERVAL_S = 1.0  # reading our RSS costs a /proc read: not before every job
# What a drained worker keeps of the drain's time for its exit and the supervisor's reap
# (the supervisor's deadline began a little before our SIGTERM came): what it does on
# its way out (child_main) ends this long before the supervisor would kill it.
EXIT_MARGIN_S = 0.5


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A claim on its way: the successes it writes, how many jobs it asks for, when it
    was sent (its leases run from no earlier), and the call that sends it, which
    returns the successes written whose lease held, the jobs leased, and whether there
    may be more to claim (`Claimed.full`)."""

    successes: list[Success]
    limit: int
    sent_at: float
    call: Callable[[], tuple[set[int], list[Job], bool]]


class NoStart(enum.Enum):
    """Why `BaseWorker._decide_start` did not start a job."""

    STOP = "stop"  # start none of the rest
    SKIP = "skip"  # not this one: cancelled or rescued before it started
    PAUSED = "paused"  # not this one: its key was paused after our claim took it


class BaseWorker:
    def __init__(
        self, spec: WorkerSpec, status: StatusWriter, control: ControlReader, board: StartBoard
    ) -> None:
        self.spec = spec
        self.status = status
        self.control = control  # `skip` and `wake` lines from the supervisor
        self.board = board  # where we post each job start for the supervisor
        self.stopping = False  # set by SIGTERM; read before every job start
        # Set by SIGTERM too: when our way out must end (the drain's deadline, less
        # EXIT_MARGIN_S), as time.monotonic(); None when not drained (a recycle).
        self.exit_deadline: float | None = None
        # Deciding to start a job and posting the start are one step for the
        # supervisor: a SIGTERM that comes in between says `stopping` only after.
        self._deciding = False
        self._stopping_deferred = False
        # Claims are numbered in the order we start them; the supervisor numbers them
        # alike from our `claimed` messages.
        self._claimed_count = 0
        self._claim_number: dict[int, int] = {}  # job id -> its number, current batch
        self._claim_sent_at = 0.0  # when the current batch's claim was sent
        # The leases of the jobs skipped (cancelled or rescued before they started)
        # whose release is still to be written. A job cancelled under our lease keeps
        # it on its cancelled row (HELD in storage/sql/queries.sql), and with it its
        # place under a concurrency limit, until its holder says no handler runs it:
        # the supervisor gave it up and settles it only if we die, so unreleased it
        # would hold the place until the lease expired and a rescue ran.
        self.skipped: list[Lease] = []
        self.guard = LeaseGuard(board.renewal, spec.lease_ttl_s, self._on_lease_lapse)
        self.store = JobStore(spec.schema, backoff=spec.backoff, limits=spec.limits)
        self._wake_r, self._wake_w = os.pipe()
        self.connection = WorkerConnection(spec, self._wake_r, lambda: self.stopping, self.store)
        self.outcomes = OutcomeWriter(
            self.store, self.connection, status, SuccessBuffer(spec.batch_size)
        )
        self._claim_of = spec.claim_scope()
        self._process = psutil.Process()
        self._next_memory_check = 0.0
        self.jobs_done = 0
        self.title = f"pgworkerd: worker {spec.pool} #{spec.index}"
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
        producer.set_default_schema(self.spec.schema)  # the handlers' enqueues go there
        # Its thread and connection start on a handler's first job.progress() call.
        progress.install(ProgressWriter(self._progress_connection, self.spec.schema))
        self.outcomes.log_jobs = log.isEnabledFor(logging.INFO)
        setproctitle(f"{self.title} idle")
        self.guard.start()

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
        self.exit_deadline = time.monotonic() + self.spec.shutdown_timeout_s - EXIT_MARGIN_S
        if self._deciding:
            self._stopping_deferred = True  # said by the decision step once it is out
        else:
            self.status.send(Stopping())

    def _on_lease_lapse(self, job_ids: list[int]) -> None:
        """In the guard's thread: our supervisor has not renewed these running jobs'
        leases for GUARD_FRACTION of lease_ttl (it would have stopped them at 80 %):
        end this process and its handlers' children before a rescue runs them again."""
        logs.event(
            log,
            logging.CRITICAL,
            "leases not renewed by the supervisor; killing this worker before they run out",
            jobs=job_ids,
            unrenewed_s=round(GUARD_FRACTION * self.spec.lease_ttl_s, 1),
        )
        self.board.post_guard_fired()  # for the supervisor's account of our death
        # The supervisor made us a process group's leader: the handlers' children too.
        pid = os.getpid()
        if os.getpgid(0) == pid:
            os.killpg(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        """USR1 follows a `timeout` or `cancel` line. Here it only wakes the loop (by the
        wakeup fd), which reads the pipe; loop.py raises in the handler instead."""

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        code = self._loop()
        self.outcomes.flush()  # drained, recycled or orphaned: successes written first
        return code

    def _loop(self) -> int:
        """Run jobs until told to stop; returns the exit status."""
        raise NotImplementedError

    def _claim(self, limit: int | None = None, *, woken: bool = False) -> list[Job] | None:
        """A batch of at most `limit` (default: the batch size; maybe empty), or None
        when the database could not be reached. The successes still pending are written
        in the same transaction. `woken`: the supervisor has just woken us for a new job
        (see `_claim_request`)."""
        claim = self._claim_request(limit or self.spec.batch_size, woken=woken)
        if claim is None:
            return None
        try:
            kept, batch, full = claim.call()
        except CONNECTION_FAULTS as exc:
            self._claim_failed(claim.successes, exc)
            return None
        return self._claim_answered(claim, kept, batch, full)

    def _claim_request(self, limit: int, *, woken: bool = False) -> ClaimRequest | None:
        """A claim of at most `limit` jobs that writes the pending successes, ready to
        send (`call()`, here or in another thread), and announced; None when the
        database could not be reached. `woken`, with no successes to write: the claim
        of an idle worker woken for a new job, which is on the path from the enqueue to
        the handler, JobStore.claim_one (one job by a cheaper statement, for the usual
        queue list; the next claim, after it, takes a batch)."""
        buffer = self.outcomes.successes
        successes = buffer.take()
        if self.control.paused_keys:
            # The pauses read so far committed before this claim begins: it sees them,
            # and what we claimed before has started or been given back.
            self.control.paused_keys.clear()
        try:
            conn = self.connection.get()
        except CONNECTION_FAULTS as exc:
            self._claim_failed(successes, exc)
            return None
        # Before the claim is sent: its leases run from no earlier than this.
        claimed_at = time.monotonic()
        if woken and not successes:
            call = functools.partial(self._claim_one, conn, limit)
        else:
            call = functools.partial(
                self._complete_and_claim, conn, self.outcomes.announce(successes), limit
            )
        return ClaimRequest(successes, limit, claimed_at, call)

    def _complete_and_claim(
        self, conn: psycopg.Connection[Any], done: Completions, limit: int
    ) -> tuple[set[int], list[Job], bool]:
        kept, batch = self.store.complete_and_claim(conn, done, limit=limit, **self._claim_of)
        return kept, batch, len(batch) == limit

    def _claim_one(
        self, conn: psycopg.Connection[Any], limit: int
    ) -> tuple[set[int], list[Job], bool]:
        batch, more = self.store.claim_one(conn, limit=limit, **self._claim_of)
        return set(), batch, more

    def _claim_failed(self, successes: list[Success], exc: BaseException) -> None:
        """A claim failed on its connection: neither its write of `successes` nor the
        claim happened (they are still to be written). The next claim writes them, on
        this connection after a transaction fault, else on a new one."""
        self.outcomes.successes.put_back(successes)
        self.connection.failed(exc, "the claim and the outcomes it writes")

    def _claim_answered(
        self, claim: ClaimRequest, kept: set[int], batch: list[Job], full: bool
    ) -> list[Job]:
        """The claim went through: `kept`, the successes written whose lease held; the
        jobs it leased, announced (and numbered) here; `full`: there may be more."""
        self.connection.succeeded()
        claimed = None
        if batch:
            first = self._claimed_count + 1
            self._claimed_count += len(batch)
            self._claim_number = {job.id: first + n for n, job in enumerate(batch)}
            self._claim_sent_at = claim.sent_at
            # The token as its hex digits (storage.arrays.HEX_DIGITS), not str(): a
            # fraction of the cost, on every job. Every claimed job has a token (the
            # field is optional in Job for the handlers' sake). The tuples are made in
            # C (ipc.claimed_job).
            jobs = tuple(
                [
                    claimed_job(
                        (
                            j.id,
                            HEX_DIGITS % j.lease_token.int,  # type: ignore[union-attr]
                            j.kind,
                            j.queue,
                            j.max_runtime_s,
                        )
                    )
                    for j in batch
                ]
            )
            claimed = Claimed(first, claim.sent_at, full, jobs)
        # `done` for the successes written, then `claimed`: in that order, one write.
        self.outcomes.written(claim.successes, kept, then=claimed)
        return batch

    def _decide_start(
        self,
        job: Job,
        take_slot: Callable[[], int],
        give_up: Callable[[], bool] | None = None,
    ) -> int | NoStart:
        """Start `job` or not, and post its start in the slot `take_slot` gives: that
        slot, or why not. `give_up`, asked after `stopping`, may give back the rest
        and say True: then none of it starts."""
        # Python runs signal handlers between bytecodes of this one thread, so a flag
        # does what masking SIGTERM would, without two system calls a job (nor a
        # context manager's two calls).
        self._deciding = True
        try:
            if self.stopping:
                return NoStart.STOP  # the supervisor releases the rest when it reads `stopping`
            if give_up is not None and give_up():
                return NoStart.STOP
            if self.control.is_skipped(job.id, job.lease_token):
                # Cancelled or rescued before it started, or its lease lapsed unrenewed
                # (the database away): not ours to run. Its lease, if its row was
                # cancelled under it, is released at our next write; a lapsed one is
                # given back uncharged by the supervisor, told here that this job will
                # never start (it was waiting for that word: docs/design.md).
                self.skipped.append(job.lease)
                self.status.send(Skipping((job.id,)))
                return NoStart.SKIP
            paused = self.control.paused_keys  # read by is_skipped just now; mostly empty
            if paused and job.key in paused:
                return NoStart.PAUSED  # the caller gives back the claimed jobs of the key
            slot = take_slot()
            number = self._claim_number[job.id]
            self.board.post_start(number, slot)
            self.guard.started(job.id, number, self._claim_sent_at)
            return slot
        finally:
            self._deciding = False
            if self._stopping_deferred:
                self._stopping_deferred = False
                self.status.send(Stopping())

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

    def _finished(self, job: Job, outcome: Outcome, ran_s: float) -> None:
        """A job's handler ran for `ran_s` seconds and ended with `outcome`."""
        self.guard.ended(job.id)
        self.outcomes.record(job, outcome, ran_s)
        self.jobs_done += 1

    def _release(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        leases = [job.lease for job in jobs]
        while True:
            try:
                self.store.release(self.connection.get(), leases)
            except CONNECTION_FAULTS as exc:
                # A transaction fault (a deadlock) left the connection as it was: the
                # release, fenced by the leases, is tried again on it (failed() bounds
                # the tries). Any other fault is left to the connection's next use.
                conn = self.connection.conn
                if connections.transaction_fault(exc, conn) is None:
                    break
                self.connection.failed(exc, "the give-back of claimed jobs")
                if self.connection.conn is not conn:
                    break
            else:
                break
        # Said either way: if the release did not reach the database, the supervisor's
        # renewals stop and the leases expire into a rescue.
        self._say_released(tuple(job.id for job in jobs))

    def _say_released(self, ids: tuple[int, ...]) -> None:
        """Tell the supervisor these claimed jobs were given back unstarted, and count
        it on the start board: a job given back (of a paused key) is numbered below the
        starts after it, which would tell the supervisor it started and returned; it
        acts on those starts only once it has read this `released` (ipc's ordering)."""
        self.status.send(Released(ids))
        self.board.sent_released()

    def _give_back_key(self, key: str, waiting: list[Job]) -> set[int]:
        """`key` was just paused, by one of our handlers' PauseKey (its outcome is
        written) or as a `pause` line says (an operator, another worker): give back
        now, uncharged, the jobs of `waiting` (claimed by us, not started) of that
        key, which our claim took before the pause: no job of a paused key starts
        before the pause ends (docs/design.md, "A key pause and the jobs already
        claimed"). Back in their queue with their run_at, they are claimed again, by
        anyone, once the pause has ended (KEY PAUSES in storage/sql/queries.sql).
        Those we were told to skip are left to the decision step, which releases a
        cancelled one's held lease. Returns the ids given back. Also when the
        PauseKey's write found the lease lost (no pause was written): a give-back
        costs those jobs nothing but a later claim."""
        control = self.control
        jobs = [
            job
            for job in waiting
            if job.key == key and not control.is_skipped(job.id, job.lease_token)
        ]
        if jobs:
            self.store.positions.step_back(jobs)  # else missed when the pause ends
            self._release(jobs)
        return {job.id for job in jobs}

    def _release_skipped(self) -> None:
        """Release the skipped jobs' leases now, on this thread's connection (the
        one-thread worker; the concurrent one sends the same call to its database
        thread). A lease not on a cancelled row (rescued) is left alone. Not written
        (the connection is lost): they expire into a rescue, or the supervisor settles
        them when we exit."""
        leases, self.skipped = self.skipped, []
        conn = self.connection.conn
        if conn is None:
            return
        while True:
            try:
                released = self.store.release_cancelled(conn, leases)
            except CONNECTION_FAULTS as exc:
                # Fenced by each lease: tried again as it is, while the connection stays.
                self.connection.failed(exc, "the release of skipped jobs")
                if self.connection.conn is not conn:
                    return
            else:
                break
        self._skipped_released(released)

    def _skipped_released(self, released: set[int]) -> None:
        """The cancelled rows of these skipped jobs gave their lease up: the supervisor,
        which would settle them if we died, forgets them (only those: a skipped job
        that was rescued may be claimed anew, by us too, under another lease)."""
        if released:
            self._say_released(tuple(released))

    # -- waiting --------------------------------------------------------------------------

    def _idle_wait_s(self) -> float | None:
        """How long to wait for work when there is nothing to run: until the next
        scheduled job, at most the poll interval; None when the look failed (not worth
        waiting: claim again, or reconnect if the connection is lost)."""
        conn = self.connection.conn
        if conn is None:
            return None
        try:
            next_in = self.store.next_run_in(conn, self.spec.queues)
        except CONNECTION_FAULTS as exc:
            self.connection.failed(exc, "the look for work")
            return None
        timeout = self.spec.poll_interval_s
        return timeout if next_in is None else min(timeout, max(0.0, next_in))

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
