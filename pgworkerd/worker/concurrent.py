"""A worker child that runs several jobs at once (`threads: N`, N > 1).

The main thread claims, starts, records and waits; the jobs run in the execution
slots (slots.py). It claims only when it has a free slot and nothing claimed waits
to start, and then at most its free slots plus batch_size - 1 jobs: a slow job never
sits behind a long batch of this process while a sibling process idles.

One database connection a process, the main thread's: handlers never share it, and
claims and outcome writes are a few short statements a job, so a pool of 2 processes
of 100 slots each holds 2 connections (plus the supervisor's), not 200.
"""

from __future__ import annotations

import logging
import os
import select
from collections import deque

from setproctitle import setproctitle

from pgworkerd.ipc import ControlReader, ExitCode, Idle, StartBoard, StatusWriter
from pgworkerd.job import Job, JobCancelled, JobTimeout
from pgworkerd.worker.base import BaseWorker, NoStart
from pgworkerd.worker.connection import drain_pipe
from pgworkerd.worker.execution import outcome_of_unknown_kind
from pgworkerd.worker.slots import Finished, SlotPool
from pgworkerd.worker.spec import WorkerSpec

log = logging.getLogger("pgworkerd.worker")

BUSY_WAIT_S = 1.0  # while every slot is busy: wake at least this often (orphan check)


class ConcurrentWorker(BaseWorker):
    def __init__(
        self, spec: WorkerSpec, status: StatusWriter, control: ControlReader, board: StartBoard
    ) -> None:
        super().__init__(spec, status, control, board)
        self._jobs_r, jobs_w = os.pipe()  # the slots write a byte per finished job
        os.set_blocking(jobs_w, False)
        self.slots = SlotPool(spec.threads, jobs_w)  # its threads start on first use
        self.backlog: deque[Job] = deque()  # claimed, not started, in claim order
        self._backlog_epoch = 0  # the connection the backlog was claimed on
        self._recycle = False  # max jobs or memory reached: finish, then exit
        self._said_idle = False  # told the supervisor we wait for a `wake`

    def _loop(self) -> int:
        try:
            return self._turns()
        finally:
            self._wait_for_running()
            self.slots.close()

    def _turns(self) -> int:
        while True:
            self._collect()
            if self.connection.orphaned():
                return ExitCode.ORPHANED
            self._recycle = self._recycle or self._should_recycle()
            if self.stopping or self._recycle:
                # Stopping: the supervisor releases what waits when it reads `stopping`.
                if self._recycle and not self.stopping:
                    self._release(list(self.backlog))
                self.backlog.clear()
                if not self.slots.busy:
                    return ExitCode.RECYCLED
            else:
                if self.backlog and self.connection.epoch != self._backlog_epoch:
                    # Claimed on a connection since lost: their leases may have lapsed
                    # while we were away.
                    self._release(list(self.backlog))
                    self.backlog.clear()
                self._start_waiting()
                if not self.backlog and self.slots.free:
                    self._claim_more()
            self._wait()

    def _claim_more(self) -> None:
        limit = self.slots.free + self.spec.batch_size - 1
        batch = self._claim(limit)
        if batch is None:
            return
        self.backlog.extend(batch)
        self._backlog_epoch = self.connection.epoch  # the connection the claim ran on
        self._start_waiting()
        if batch:
            self._said_idle = False  # `claimed` made the supervisor count us busy
        if len(batch) < limit and self.slots.free and not self._said_idle:
            # Nothing more to claim now: the supervisor wakes us when there is.
            self.status.send(Idle())
            self._said_idle = True

    def _start_waiting(self) -> None:
        """Start claimed jobs, in claim order, while there are free slots."""
        while self.backlog and self.slots.free:
            job = self.backlog[0]
            slot = self._decide_start(job, self.slots.take_slot)
            if slot is NoStart.STOP:
                return  # it stays in the backlog, which stopping clears
            self.backlog.popleft()
            if slot is not NoStart.SKIP:
                self._start(job, slot)

    def _start(self, job: Job, slot: int) -> None:
        handler = self._handler_of(job, slot=slot)
        if handler is None:
            self.slots.hand_back(Finished(job, slot, outcome_of_unknown_kind(job), 0.0))
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
        for item in finished:
            self._finished(item.job, item.outcome, item.ran_s)
        if finished:
            self._title()
        if self.outcomes.successes.due() or (self.stopping and not self.slots.busy):
            self.outcomes.flush()

    def _wait(self) -> None:
        """Until a job ends, the supervisor writes (wake, skip, timeout, cancel), a signal, or a
        moment to act: the successes' deadline, the next scheduled job, the poll."""
        if self.backlog and self.slots.free and not self.stopping:
            return  # more to start at once
        timeout = BUSY_WAIT_S
        successes_due_in = self.outcomes.successes.due_in_s()
        if successes_due_in is not None:
            timeout = min(timeout, successes_due_in)
        if self.slots.free and not self.backlog and not (self.stopping or self._recycle):
            idle_s = self._idle_wait_s()  # None: the connection is lost, reconnect now
            timeout = min(timeout, 0.0 if idle_s is None else idle_s)
        if not self.control.has_news() and timeout > 0:
            select.select([self._jobs_r, self.control.fd, self._wake_r], [], [], timeout)
            drain_pipe(self._jobs_r)
            drain_pipe(self._wake_r)
        self.control.read()
        if self.control.woken:  # the supervisor no longer counts us idle
            self.control.woken = False
            self._said_idle = False

    def _wait_for_running(self) -> None:
        """Draining or recycling: every slot finishes; their outcomes are written."""
        while self.slots.busy and not self.connection.orphaned():
            if self.control.has_news():
                self.control.read()  # a `timeout` still reaches a job that runs late
            self._collect()
            if self.slots.busy:
                select.select([self._jobs_r, self.control.fd, self._wake_r], [], [], BUSY_WAIT_S)
                drain_pipe(self._jobs_r)
                drain_pipe(self._wake_r)
        self._collect()

    def _title(self) -> None:
        busy = self.slots.busy
        setproctitle(
            f"{self.title} {busy}/{self.slots.size} busy" if busy else f"{self.title} idle"
        )
