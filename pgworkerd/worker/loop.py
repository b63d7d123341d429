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
    Heard,
    Idle,
    StartBoard,
    StatusWriter,
)
from pgworkerd.job import Job, JobCancelled, JobTimeout
from pgworkerd.worker.base import BaseWorker, NoStart
from pgworkerd.worker.connection import drain_pipe
from pgworkerd.worker.execution import Executor, outcome_of_unknown_kind
from pgworkerd.worker.listener import Listener
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
        # A pool's #1 listens for its queues itself while it waits (worker/listener.py).
        self.listener = Listener(spec) if spec.listen else None
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
            if self.listener is not None:
                self.listener.close()

    def _loop(self) -> int:
        woken = False
        while not self.stopping:
            if self.connection.orphaned():
                return ExitCode.ORPHANED
            if self._should_recycle():
                return ExitCode.RECYCLED
            batch = self._claim(woken=woken)
            if woken and batch == []:
                # Woken or heard for a job another worker took: the herd's measure.
                logs.event(log, logging.DEBUG, "woken; claimed nothing")
            woken = False
            if batch:
                if self.listener is not None:
                    self.listener.busy()
                self._run_batch(batch)
            elif batch is not None:
                woken = self._wait_for_work()
        return ExitCode.RECYCLED

    def _run_batch(self, batch: list[Job]) -> None:
        epoch = self.connection.epoch
        position = 0

        def give_up() -> bool:  # one per batch, reading `position` as it moves on
            return self._given_back(batch, position, epoch)

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
                    continue
                self._run_one(job)
        finally:
            # Once a batch, not after every job: between two jobs of a batch the title
            # would say `idle` for microseconds, at the cost of a call per job.
            setproctitle(f"{self.title} idle")

    def _given_back(self, batch: list[Job], position: int, epoch: int) -> bool:
        """Whether the batch from `position` on was given back: it was claimed on a
        connection since lost (its leases may have lapsed while we were away), or this
        child is to recycle."""
        if self.connection.epoch == epoch and not self._should_recycle():
            return False
        self._release(batch[position:])
        return True

    def _run_one(self, job: Job) -> None:
        handler = self._handler_of(job)
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
        control = self.control
        if control.cancels or control.timeouts:  # came as the handler returned: moot now
            control.cancels.discard(job.id)
            control.timeouts.discard(job.id)
        self._finished(job, outcome, ran_s)

    # -- waiting --------------------------------------------------------------------------

    def _take_heard(self) -> Heard | None:
        return self.listener.take_heard() if self.listener is not None else None

    def _wait_for_work(self) -> bool:
        """Sleep until the supervisor wakes us (it listens for enqueues: one listening
        connection per daemon, and only as many children woken as there is work), a
        signal, the next scheduled job or the poll interval, whichever comes first.
        A listening worker also wakes on an enqueue of its queues that it hears itself;
        its marker goes first, before the look, so that no enqueue falls between the
        two (docs/design.md, "Round 9: a listening worker"). Whether a new job woke us."""
        listener = self.listener
        if listener is not None and listener.mark():
            logs.event(log, logging.DEBUG, "heard an enqueue: a job was enqueued")
            return True
        timeout = self._idle_wait_s()
        if timeout is None:
            return False
        woken = self.control.read()
        if not woken and timeout > 0:
            self.status.send(Idle())
            heard = self._sleep(timeout)
            if heard:
                logs.event(log, logging.DEBUG, "heard an enqueue: a job was enqueued")
                return True
            woken = self.control.read()
        if listener is not None and listener.fileno() is not None:
            # About to claim unheard (a ready job, a wake, the timeout): what the socket
            # holds already is counted, so that the supervisor, which counts it too,
            # does not wake a sibling for a job this claim may take.
            listener.read()
        if woken:
            logs.event(log, logging.DEBUG, "woken by the supervisor: a job was enqueued")
        return woken

    def _sleep(self, timeout: float) -> bool:
        """Wait on the control pipe, the signal pipe and the listening socket (if we
        listen) for at most `timeout` s: whether the socket named one of our queues."""
        listener = self.listener
        listen_fd = listener.fileno() if listener is not None else None
        fds = [self.control.fd, self._wake_r]
        if listen_fd is not None:
            fds.append(listen_fd)
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select(fds, [], [], timeout)
            if self._wake_r in ready:  # a signal's byte: left there, it would end every wait
                drain_pipe(self._wake_r)
            if listen_fd is None or listen_fd not in ready:
                return False
            assert listener is not None
            if listener.read():
                return True
            timeout = deadline - time.monotonic()
            if len(ready) > 1 or timeout <= 0 or listener.fileno() is None:
                return False  # the pipe's turn, the time is up, or the connection is lost
