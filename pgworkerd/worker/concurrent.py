"""A worker child that runs several jobs at once (`threads: N`, N > 1).

The main thread claims, starts, records and waits; the jobs run in the execution
slots (slots.py). Its claims and writes of successes go through the database thread
(db_thread.py), one at a time, so the main thread keeps starting and collecting jobs
while a round trip is under way.

It claims only when it has a free slot and nothing claimed waits to start, and then
at most its free slots plus batch_size - 1 jobs: a slow job never sits behind a long
batch of this process while a sibling process idles. The successes written since the
last claim go with it, in its transaction: one round trip and one commit for both.

One database connection a process, the main thread's: handlers never share it, and
claims and outcome writes are a few short statements a job, so a pool of 2 processes
of 100 slots each holds 2 connections (plus the supervisor's), not 200.
"""

from __future__ import annotations

import functools
import logging
import os
import select
from collections import deque
from dataclasses import dataclass

from setproctitle import setproctitle

from pgworkerd.ipc import ControlReader, ExitCode, Idle, Skipping, StartBoard, StatusWriter
from pgworkerd.job import Job, JobCancelled, JobTimeout, Lease
from pgworkerd.worker.base import BaseWorker, ClaimRequest, NoStart
from pgworkerd.worker.connection import CONNECTION_FAULTS
from pgworkerd.worker.db_thread import DatabaseThread
from pgworkerd.worker.execution import outcome_of_undecodable, outcome_of_unknown_kind, runnable
from pgworkerd.worker.slots import Finished, SlotPool
from pgworkerd.worker.spec import WorkerSpec
from pgworkerd.worker.success_buffer import Success

log = logging.getLogger("pgworkerd.worker")

BUSY_WAIT_S = 1.0  # while every slot is busy: wake at least this often (orphan check)


@dataclass(frozen=True, slots=True)
class SkippedRelease:
    """A release of skipped jobs' leases on its way (BaseWorker.skipped)."""

    leases: list[Lease]


class ConcurrentWorker(BaseWorker):
    def __init__(
        self, spec: WorkerSpec, status: StatusWriter, control: ControlReader, board: StartBoard
    ) -> None:
        super().__init__(spec, status, control, board)
        # The slots write a byte per finished job, the database thread one per answer.
        self._jobs_r, jobs_w = os.pipe()
        os.set_blocking(jobs_w, False)
        self.slots = SlotPool(spec.threads, jobs_w)  # its threads start on first use
        self.database = DatabaseThread(jobs_w)  # likewise
        self._sent: ClaimRequest | list[Success] | SkippedRelease | None = None  # under way
        self.backlog: deque[Job] = deque()  # claimed, not started, in claim order
        self._backlog_epoch = 0  # the connection the backlog was claimed on
        self._recycle = False  # max jobs or memory reached: finish, then exit
        self._said_idle = False  # told the supervisor we wait for a `wake`
        # The last claim found fewer jobs than it asked for: claim again only after a
        # wait (a job ends, a `wake`, the poll), as a child that claims in its own
        # thread does, not in a loop of round trips.
        self._drained = False

    def _loop(self) -> int:
        try:
            return self._turns()
        finally:
            self._wait_for_running()
            self._settle()
            self.database.close()
            self.slots.close()

    def _turns(self) -> int:
        while True:
            self._collect()
            if self.database.answered():
                self._take_answer()
            if self.connection.orphaned():
                return ExitCode.ORPHANED
            self._recycle = self._recycle or self._should_recycle()
            if self.stopping or self._recycle:
                # Stopping: the supervisor releases what waits when it reads `stopping`.
                self._settle()  # a claim under way gives its jobs back as it answers
                if self._recycle and not self.stopping:
                    self._release(list(self.backlog))
                self.backlog.clear()
                if not self.slots.busy:
                    return ExitCode.RECYCLED
                self._send_writes()
            else:
                if self.backlog and self.connection.epoch != self._backlog_epoch:
                    # Claimed on a connection since lost: their leases may have lapsed
                    # while we were away.
                    self._settle()
                    self._release(list(self.backlog))
                    self.backlog.clear()
                self._start_waiting()
                if self._wants_claim() and not self.skipped:
                    self._send_claim()
                else:
                    # The skipped jobs' release first: the place under a concurrency
                    # limit it frees may be the next claim's.
                    self._send_writes()
            self._wait()

    # -- claims and writes, through the database thread -------------------------------------

    def _wants_claim(self) -> bool:
        """A slot is free, nothing claimed waits to start, and the database thread is
        free (a claim under way has not answered yet: it may bring enough)."""
        return (
            not self.backlog
            and self.slots.free > 0
            and not self.database.busy
            and not self._drained
        )

    def _send_claim(self) -> None:
        claim = self._claim_request(self.slots.free + self.spec.batch_size - 1)
        if claim is None:
            return  # the connection is lost: a later turn reconnects
        self._sent = claim
        self.database.send(claim.call)

    def _send_writes(self) -> None:
        """The release of the skipped jobs' leases if there are any (at once: a place
        under a concurrency limit may wait on it), else the successes if they are due;
        when the database thread is free."""
        if self.skipped:
            self._send_skipped_release()
        else:
            self._send_successes_if_due()

    def _send_skipped_release(self) -> None:
        if self.database.busy:
            return
        try:
            conn = self.connection.get(for_outcome=True)
        except CONNECTION_FAULTS:
            return  # orphaned: the turn ends it (the supervisor settles them)
        sent = self._sent = SkippedRelease(self.skipped)
        self.skipped = []
        self.database.send(functools.partial(self.store.release_cancelled, conn, sent.leases))

    def _send_successes_if_due(self) -> None:
        """Write the pending successes if they are due (full, or the oldest waited long
        enough) and the database thread is free; a claim writes them otherwise."""
        if self.database.busy or not self.outcomes.successes.due():
            return
        successes = self.outcomes.successes.take()
        try:
            conn = self.connection.get(for_outcome=True)
        except CONNECTION_FAULTS:
            self.outcomes.successes.put_back(successes)  # orphaned: the turn ends it
            return
        leases = self.outcomes.announce(successes)
        self._sent = successes
        self.database.send(functools.partial(self.store.complete, conn, leases))

    def _settle(self) -> None:
        """Take the answer of the call under way, waiting for it if need be: before any
        other use of the connection, and before giving back what waits to start."""
        if self.database.busy:
            self._take_answer()

    def _take_answer(self) -> None:
        sent, self._sent = self._sent, None
        try:
            answer = self.database.answer()
        except CONNECTION_FAULTS as exc:
            if isinstance(sent, SkippedRelease):
                self.skipped[:0] = sent.leases  # sent again (on a new connection if lost)
                self.connection.failed(exc, "the release of skipped jobs")
                return
            # Neither the write nor the claim happened: the successes are written again
            # (BaseWorker._claim_failed).
            self._claim_failed(
                sent.successes if isinstance(sent, ClaimRequest) else sent or [], exc
            )
            return
        if isinstance(sent, ClaimRequest):
            kept, batch, full = answer
            self._claimed(sent, self._claim_answered(sent, kept, batch, full))
        elif isinstance(sent, SkippedRelease):
            self.connection.succeeded()
            self._skipped_released(answer)
        else:
            self.connection.succeeded()
            self.outcomes.written(sent or [], answer)

    def _claimed(self, claim: ClaimRequest, batch: list[Job]) -> None:
        """A claim answered with `batch` (announced to the supervisor already)."""
        if self.stopping or self._recycle:
            self._release(batch)  # none of it will start
            return
        self.backlog.extend(batch)  # empty when the claim was sent, and since
        # The connection the claim ran on: none is opened while a call is under way.
        self._backlog_epoch = self.connection.epoch
        if batch:
            self._said_idle = False  # `claimed` made the supervisor count us busy
        self._drained = len(batch) < claim.limit
        if self._drained and self.slots.free > len(self.backlog) and not self._said_idle:
            # Nothing more to claim now: the supervisor wakes us when there is.
            self.status.send(Idle())
            self._said_idle = True

    # -- the jobs ---------------------------------------------------------------------------

    def _start_waiting(self) -> None:
        """Start claimed jobs, in claim order, while there are free slots."""
        while self.backlog and self.slots.free:
            job = self.backlog[0]
            slot = self._decide_start(job, self.slots.take_slot)
            if slot is NoStart.STOP:
                return  # it stays in the backlog, which stopping clears
            if slot is NoStart.PAUSED:
                # Its key was paused after our claim: it and the backlog's other jobs
                # of the key are given back (on the connection, so nothing under way).
                self._settle()
                assert job.key is not None  # a key-less job is never paused
                self._give_back_waiting(job.key)
                continue
            self.backlog.popleft()
            if slot is not NoStart.SKIP:
                self._start(job, slot)

    def _start(self, job: Job, slot: int) -> None:
        handler = self._handler_of(job, slot=slot)
        if handler is None:
            self.slots.hand_back(Finished(job, slot, outcome_of_unknown_kind(job), 0.0))
        elif not runnable(job):
            self.slots.hand_back(Finished(job, slot, outcome_of_undecodable(job), 0.0))
        else:
            self.slots.start(job, handler, slot)
        self._title()

    def _collect(self) -> None:
        """Record the outcomes of the jobs that ended, and act on runtime timeouts and
        cancels."""
        control = self.control
        for asked, exception in ((control.timeouts, JobTimeout), (control.cancels, JobCancelled)):
            while asked:
                self.slots.interrupt(asked.pop(), exception)
        finished = self.slots.finished()
        if not finished:
            return
        for item in finished:
            if item.outcome.kind != "succeeded":
                self._settle()  # written at once, on the connection: nothing under way
            self._finished(item.job, item.outcome, item.ran_s)
            if item.outcome.kind == "key_paused" and item.job.key is not None and self.backlog:
                # Its key is paused now: what waits to start of that key must not start
                # before the pause ends (the connection is settled: its write just ran).
                self._give_back_waiting(item.job.key)
        self._title()

    def _give_back_waiting(self, key: str) -> None:
        """Give back the jobs of `key` that wait in the backlog (BaseWorker._give_back_key)."""
        given_back = self._give_back_key(key, list(self.backlog))
        if given_back:
            self.backlog = deque([job for job in self.backlog if job.id not in given_back])

    # -- waiting ----------------------------------------------------------------------------

    def _wait(self) -> None:
        """Until a job ends, the database thread answers, the supervisor writes (wake,
        skip, timeout, cancel), a signal, or a moment to act: the successes' deadline,
        the next scheduled job, the poll."""
        if self.backlog and self.slots.free and not self.stopping:
            return  # more to start at once
        timeout = BUSY_WAIT_S
        if not self.database.busy:  # else its answer wakes us
            successes_due_in = self.outcomes.successes.due_in_s()
            if successes_due_in is not None:
                timeout = min(timeout, successes_due_in)
            if self.slots.free and not self.backlog and not (self.stopping or self._recycle):
                idle_s = self._idle_wait_s()  # None: the connection is lost, reconnect now
                timeout = min(timeout, 0.0 if idle_s is None else idle_s)
        if not self.control.has_news() and timeout > 0:
            self._select(timeout)
        self._drained = False  # something happened, or the wait ran out: claim again
        if self.control.has_news():
            self.control.read()
        if self.control.woken:  # the supervisor no longer counts us idle
            self.control.woken = False
            self._said_idle = False
        if self.control.new_skips:
            self._set_aside_skipped()

    def _set_aside_skipped(self) -> None:
        """Take the jobs we were told to skip out of the backlog now, not when a slot
        frees for them: one cancelled there holds its place under a concurrency limit
        (its row keeps our lease) until we release it, which the next turn sends."""
        self.control.new_skips = False
        waiting: deque[Job] = deque()
        skipping: list[int] = []
        for job in self.backlog:
            if self.control.is_skipped(job.id, job.lease_token):
                self.skipped.append(job.lease)
                skipping.append(job.id)
            else:
                waiting.append(job)
        self.backlog = waiting
        if skipping:
            # Never to start: the supervisor gives back those whose leases lapsed.
            self.status.send(Skipping(tuple(skipping)))

    def _wait_for_running(self) -> None:
        """Draining or recycling: every slot finishes; their outcomes are written."""
        while self.slots.busy and not self.connection.orphaned():
            if self.control.has_news():
                self.control.read()  # a `timeout` still reaches a job that runs late
            self._collect()
            if self.database.answered():
                self._take_answer()
            self._send_writes()
            if self.slots.busy:
                timeout = BUSY_WAIT_S
                successes_due_in = self.outcomes.successes.due_in_s()
                if successes_due_in is not None and not self.database.busy:
                    timeout = min(timeout, successes_due_in)
                self._select(timeout)
        self._collect()

    def _select(self, timeout: float) -> None:
        """Wait up to `timeout` for a job's end, the database thread's answer, a control
        line or a signal, and take the wake-up bytes that came: one read of each pipe
        select found readable (it does not block), a byte or a few a wake-up."""
        control = self.control.fd
        ready, _, _ = select.select([self._jobs_r, control, self._wake_r], [], [], timeout)
        for fd in ready:
            if fd != control:  # the control pipe is read by lines, by its reader
                os.read(fd, 4096)

    def _title(self) -> None:
        busy = self.slots.busy
        setproctitle(
            f"{self.title} {busy}/{self.slots.size} busy" if busy else f"{self.title} idle"
        )
