"""The worker child that runs one job at a time: claim a batch, run each job in the
main thread, record each outcome, repeat. What it shares with the child that runs
several at once (concurrent.py) is in base.py.

USR1 (the control pipe says the running job passed its max runtime or was cancelled)
raises JobTimeout or JobCancelled in the handler, which runs in this thread. It also
follows the skips of jobs cancelled after their claim, before their start: while a
handler runs, jobs after it in the batch may be cancelled, and each holds its place
under a concurrency limit (its cancelled row keeps our lease) until it is released.
The USR1 handler reads the skips and says `skipping` for those jobs, and the
supervisor releases them at once, not after the handler has ended.
"""

from __future__ import annotations

import logging
import select
import time
from types import FrameType

from setproctitle import setproctitle

from pgworkerd import logs
from pgworkerd.encoding import Undecodable
from pgworkerd.ipc import (
    ControlReader,
    ExitCode,
    Idle,
    Skipping,
    StartBoard,
    StatusWriter,
)
from pgworkerd.job import Job, JobCancelled, JobTimeout
from pgworkerd.worker.base import BaseWorker, NoStart
from pgworkerd.worker.connection import drain_pipe
from pgworkerd.worker.execution import (
    Executor,
    OutcomeKind,
    outcome_of_undecodable,
    outcome_of_unknown_kind,
)
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
        # The job started and not yet returned from `_run_one` (its handler runs, is
        # about to, or has just returned); for USR1.
        self._running: Job | None = None
        self._batch: list[Job] = []  # the batch being run, for the skips read meanwhile
        self._said_skipping: set[int] = set()  # its jobs we said `skipping` for
        self._unread_interrupt = False  # a USR1 came while no job was in `_run_one`
        super().__init__(spec, status, control, board)

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        job = self._running
        if job is None:
            # Between jobs: the main thread may be reading the pipe itself. The next
            # decision reads it, and the next `_run_one` says what its skips are.
            self._unread_interrupt = True
            return
        # The main thread is in `_run_one`: if it is reading the pipe (`_take_skips`),
        # this read returns at once and that one takes the lines in.
        self._take_skips(job)
        if self.executor.in_handler:
            self._stop_if_asked(job)
        # Else the handler has not begun (Executor.run asks again as it begins) or has
        # returned: nothing to interrupt.

    def _stop_if_asked(self, job: Job) -> None:
        """Raise in `job` the stop the control pipe asked for it, if any: from the USR1
        handler while its handler runs, and by Executor.run as the handler begins (a
        USR1 that came between the start's post and then found no handler to raise in:
        the supervisor sends a job's `cancel` or `timeout` only once it saw it start)."""
        control = self.control
        if job.id in control.cancels:
            control.cancels.discard(job.id)
            raise JobCancelled(f"job {job.id} ({job.kind}) was cancelled")
        if job.id in control.timeouts:
            control.timeouts.discard(job.id)
            raise JobTimeout(f"job {job.id} ({job.kind}) passed its max runtime")

    def _say_skipping(self, running: Job) -> None:
        """Say `skipping` for the jobs of the batch after `running` (not come to yet)
        whose skips we have read: none of them will start, since the decision step
        finds their skips (ControlReader.skipped keeps them), so the supervisor may
        release the leases their cancelled rows hold now, while `running` runs on. Only
        jobs after it: the job `running` itself was decided and started, and those
        before it were decided too (a start of one, undone by a release, would free its
        place under its handler). They are still skipped, and released, when we come to
        them: the supervisor's release or ours, whichever comes second, finds nothing
        (jobs_release_cancelled wants the row still leased, under that token)."""
        control = self.control
        control.new_skips = False
        numbers, said = self._claim_number, self._said_skipping
        after = numbers.get(running.id, 0)
        skipping = tuple(
            [
                job.id
                for job in self._batch
                if numbers.get(job.id, 0) > after
                and job.id not in said
                and (job.id, str(job.lease_token)) in control.skipped
            ]
        )
        if skipping:
            said.update(skipping)
            self.status.send(Skipping(skipping))

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
            self._release([job for job in batch[position:] if job.id not in given_back])
            return True

        successes = self.outcomes.successes
        # The jobs of the batch given back because a job before them paused their key
        # (BaseWorker._give_back_key): empty unless a handler raised PauseKey.
        given_back: set[int] = set()
        self._batch = batch
        self._said_skipping.clear()
        try:
            for position, job in enumerate(batch):  # give_up reads `position` too
                if given_back and job.id in given_back:
                    continue
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
                if started is NoStart.PAUSED:
                    # Paused by an operator, or another worker's PauseKey, after our
                    # claim: this job and the rest of the batch of its key wait for the
                    # pause's end, given back (in the database: its claims skip them).
                    assert job.key is not None  # a key-less job is never paused
                    given_back |= self._give_back_key(job.key, batch[position:])
                    continue
                if self._run_one(job) == "key_paused" and job.key is not None:
                    # Its key is paused now: the rest of the batch of that key must not
                    # start before the pause ends.
                    given_back |= self._give_back_key(job.key, batch[position + 1 :])
        finally:
            self._batch = []
            # Once a batch, not after every job: between two jobs of a batch the title
            # would say `idle` for microseconds, at the cost of a call per job.
            setproctitle(f"{self.title} idle")

    def _run_one(self, job: Job) -> OutcomeKind:
        """Run `job` and record its outcome; returns the outcome's kind."""
        outcomes = self.outcomes
        # The handler straight from the registry unless its start is logged: a call a job.
        registry = self.spec.registry
        handler = self._handler_of(job) if outcomes.log_jobs else registry.get(job.kind)
        setproctitle(f"{self.title} job {job.id} {job.kind}")
        started = time.monotonic()
        if handler is None:
            outcome = outcome_of_unknown_kind(job)
        elif job.payload.__class__ is Undecodable:  # execution.runnable, inline: a call a job
            outcome = outcome_of_undecodable(job)
        else:
            control = self.control
            if control.cancels or control.timeouts:
                # Of an earlier run (came as its handler returned): moot now. None can
                # be of this one yet: the supervisor asks for a stop only once it has
                # seen the start posted, and nothing read the pipe since.
                control.cancels.clear()
                control.timeouts.clear()
            self._running = job
            try:
                if self._unread_interrupt or control.new_skips:
                    self._take_skips(job)
                outcome = self.executor.run(handler, job, self._stop_if_asked)
            finally:
                self._running = None
        ran_s = time.monotonic() - started
        self.guard.ended(job.id)
        outcomes.record(job, outcome, ran_s)  # BaseWorker._finished, written out
        self.jobs_done += 1
        return outcome.kind

    def _take_skips(self, job: Job) -> None:
        """Read what the control pipe holds, and say `skipping` for the jobs after
        `job` whose skips have been read: on USR1 while `job` is in `_run_one`, and
        before `job`'s handler when a USR1 came while no job was in `_run_one` or the
        decision step read such skips (rare). A USR1 during this read reads nothing
        itself (ControlReader.read is under way) and, before the handler, raises
        nothing."""
        self._unread_interrupt = False
        control = self.control
        if control.has_news():
            control.read()
        if control.new_skips:
            self._say_skipping(job)

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
