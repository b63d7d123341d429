"""The worker child that runs one job at a time: claim a batch, run each job in the
main thread, record each outcome, repeat. What it shares with the child that runs
several at once (concurrent.py) is in base.py.

USR1 (the control pipe says the running job passed its max runtime or was cancelled)
raises JobTimeout or JobCancelled in the handler, which runs in this thread.
"""

from __future__ import annotations

import logging
import select
import time
from types import FrameType

from setproctitle import setproctitle

from pgworkerd import logs
from pgworkerd.ipc import (
    ControlReader,
    ExitCode,
    Idle,
    StartBoard,
    StatusWriter,
)
from pgworkerd.job import Job, JobCancelled, JobTimeout
from pgworkerd.worker.base import BaseWorker, NoStart
from pgworkerd.worker.connection import drain_pipe
from pgworkerd.worker.execution import Executor, outcome_of_unknown_kind
from pgworkerd.worker.spec import WorkerSpec

log = logging.getLogger("pgworkerd.worker")


def _the_only_slot() -> int:
    """Where every start of this child is posted: its start board has one record."""
    return 0


class Worker(BaseWorker):
    def __init__(
        self, spec: WorkerSpec, status: StatusWriter, control: ControlReader, board: StartBoard
    ) -> None:
        self.executor = Executor()
        self._running: Job | None = None  # the job whose handler runs; for USR1
        super().__init__(spec, status, control, board)

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
            return super().run()
        finally:
            self.executor.close()

    def _loop(self) -> int:
        woken = False
        while not self.stopping:
            if self.connection.orphaned():
                return ExitCode.ORPHANED
            if self._should_recycle():
                return ExitCode.RECYCLED
            batch = self._claim(woken=woken)
            woken = False
            if batch:
                self._run_batch(batch)
            elif batch is not None:
                woken = self._wait_for_work()
        return ExitCode.RECYCLED

    def _run_batch(self, batch: list[Job]) -> None:
        connection = self.connection
        epoch = connection.epoch
        should_recycle = self._should_recycle
        position = 0

        def give_up() -> bool:  # one per batch, reading `position` as it moves on
            """Whether the batch from `position` on is given back: it was claimed on a
            connection since lost (its leases may have lapsed while we were away), or
            this child is to recycle. Asked before every job start, so the test is here,
            and `_should_recycle` asked once (it logs its reason, and its memory check
            answers once a second)."""
            if connection.epoch == epoch and not should_recycle():
                return False
            self._release(batch[position:])
            return True

        successes = self.outcomes.successes
        try:
            for position, job in enumerate(batch):  # noqa: B007 (give_up reads it)
                if successes.due_before(job):
                    setproctitle(f"{self.title} idle")  # a write, no job, runs now
                    self.outcomes.flush()
                started = self._decide_start(job, _the_only_slot, give_up)
                if started is NoStart.STOP:
                    return
                if started is NoStart.SKIP:
                    # At once, not after the batch: the jobs after it may run for long,
                    # and a cancelled one's place under a concurrency limit waits on
                    # this write. Rare (a cancel or a lost lease before the start).
                    self._release_skipped()
                    continue
                self._run_one(job)
        finally:
            # Once a batch, not after every job: between two jobs of a batch the title
            # would say `idle` for microseconds, at the cost of a call per job.
            setproctitle(f"{self.title} idle")

    def _run_one(self, job: Job) -> None:
        outcomes = self.outcomes
        # The handler straight from the registry unless its start is logged: a call a job.
        registry = self.spec.registry
        handler = self._handler_of(job) if outcomes.log_jobs else registry.get(job.kind)
        setproctitle(f"{self.title} job {job.id} {job.kind}")
        started = time.monotonic()
        if handler is None:
            outcome = outcome_of_unknown_kind(job)
        else:
            self._running = job
            try:
                outcome = self.executor.run(handler, job)
            finally:
                self._running = None
        ran_s = time.monotonic() - started
        self.guard.ended(job.id)
        control = self.control
        if control.cancels or control.timeouts:  # came as the handler returned: moot now
            control.cancels.discard(job.id)
            control.timeouts.discard(job.id)
        outcomes.record(job, outcome, ran_s)  # BaseWorker._finished, written out
        self.jobs_done += 1

    # -- waiting --------------------------------------------------------------------------

    def _wait_for_work(self) -> bool:
        """Sleep until the supervisor wakes us (it listens for enqueues: one listening
        connection per daemon, and only as many children woken as there is work), a
        signal, the next scheduled job or the poll interval, whichever comes first.
        Whether the supervisor woke us."""
        timeout = self._idle_wait_s()
        if timeout is None:
            return False
        woken = self.control.read()
        if not woken and timeout > 0:
            self.status.send(Idle())
            ready, _, _ = select.select([self.control.fd, self._wake_r], [], [], timeout)
            if self._wake_r in ready:  # a signal's byte: left there, it would end every wait
                drain_pipe(self._wake_r)
            woken = self.control.read()
        if woken:
            logs.event(log, logging.DEBUG, "woken by the supervisor: a job was enqueued")
        return woken
