"""The supervisor's view of one live worker child, and the fork that starts it.

Only the supervisor's loop reads and writes these records. Their inputs: the child's
status messages and start board (pgworkerd/ipc), and the supervisor's own kills.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pgworkerd.ipc import (
    BootError,
    Claimed,
    ControlWriter,
    Done,
    ExitCode,
    Finishing,
    Idle,
    Message,
    Released,
    Skip,
    StartBoard,
    StatusReader,
)
from pgworkerd.supervisor import osutil
from pgworkerd.supervisor.ledger import ChildLedger, JobState, KillReason, LedgerJob
from pgworkerd.supervisor.metrics import METRICS
from pgworkerd.worker import WorkerSpec, child_main

# At most this many `pause` lines to a child between two of its claims: each is at most
# 262 bytes, so they fill at most a quarter of a pipe's 64 KiB (Linux's default).
PAUSE_LINES_MAX = 64


@dataclass(eq=False)  # identity: a child is itself, whatever its state
class ChildProcess:
    pid: int
    pool: str
    index: int  # 1-based within the pool
    status: StatusReader
    control: ControlWriter
    board: StartBoard
    queues: frozenset[str]  # the queues it claims from
    # Those of them whose concurrency limit (the queue's or per key) counts leased
    # rows: a cancelled job of one holds a place until its lease is released.
    placed_queues: frozenset[str] = frozenset()
    ledger: ChildLedger = field(default_factory=ChildLedger)
    spawned_at: float = field(default_factory=time.monotonic)
    kill_reason: KillReason | None = None
    retiring: bool = False  # drained on purpose (reload, shutdown): not replaced
    finished_any: bool = False
    boot_error: str | None = None
    idle: bool = False  # said `idle` and was not woken since: waits for a `wake`
    pause_lines: int = 0  # `pause` lines written since its last claim (PAUSE_LINES_MAX)
    released_read: int = 0  # `released` messages read (StartBoard.snapshot)

    @property
    def name(self) -> str:
        return f"{self.pool}#{self.index}"

    def sync_starts(self) -> None:
        """Act on the starts the child posted on its board, if any is new to us."""
        if self.board.starts_posted() == self.ledger.starts_seen:
            return
        # One consistent view across slots: a slot read before its newest post, beside
        # one read after a later post, would make the ledger infer its job returned.
        posted, released, records = self.board.snapshot()
        if released > self.released_read:
            # A start posted after a `released` still unread: it would say the jobs
            # given back below its number started (a key pause's give-back leaves such
            # gaps). That `released` is in the pipe already: looked at again once it is
            # read, this turn or the next. The messages before it need none of these
            # starts: none is `stopping`, after which nothing starts.
            return
        forbidden, complete = self.ledger.observe_starts(records)
        if complete:
            self.ledger.starts_seen = posted
        self._count_starts()
        for job in forbidden:
            if job.state is JobState.CANCELLING:  # a cancel caught it starting
                self.interrupt_cancelled(job)
        lost = [job for job in forbidden if job.state is JobState.LOST]
        if lost:
            # Given up before the child read our `skip`: it runs without a lease.
            self.kill(KillReason.LEASE_LOST, lost)

    def read_messages(self, runtime_for: Callable[[str, float | None], float]) -> list[Message]:
        """Read what the child said and enter it in the ledger; the starts it posted are
        read before each message (a message may depend on them: `stopping` releases
        only jobs not started). Returns the messages for the caller's own part."""
        messages = []
        for message in self.status.read():
            self.sync_starts()
            self._enter(message, runtime_for)
            messages.append(message)
        self.sync_starts()
        return messages

    def _enter(self, message: Message, runtime_for: Callable[[str, float | None], float]) -> None:
        match message:
            case Claimed():
                self.ledger.claimed(message, runtime_for)
                METRICS.claimed(message)
                self.idle = False
                self.pause_lines = 0
            case Finishing(ids):
                self.ledger.finishing(ids)
                self._count_starts()
            case Done(ids):
                METRICS.done(message, self.ledger.labels)
                self.ledger.done(ids)
                self.finished_any = True
            case Released(ids):
                self.ledger.released(ids)
                self.released_read += 1
            case Idle():
                self.idle = True
            case BootError(reason):
                self.boot_error = reason

    def kill(self, reason: KillReason, blamed: Iterable[LedgerJob] = ()) -> None:
        """SIGKILL the child's process group (its handlers' own children too)."""
        if self.kill_reason is None:
            self.kill_reason = reason
        blamed = list(blamed)
        if reason is KillReason.TIMEOUT:
            METRICS.jobs_killed((job.queue, job.kind) for job in blamed)
        elif reason is KillReason.CANCELLED:
            METRICS.jobs_cancelled((job.queue, job.kind) for job in blamed)
        self.ledger.blame(blamed)
        osutil.kill_group(self.pid, signal.SIGKILL)

    def _count_starts(self) -> None:
        METRICS.jobs_started(self.ledger.take_started())

    def give_up(self, jobs: Iterable[LedgerJob], *, cancelled_at: float | None = None) -> None:
        """Tell the child not to start these jobs: their leases are gone (cancelled at
        `cancelled_at`, if that is why). By lease, not id: the same job may come back to
        this child, claimed anew."""
        holds_a_place = False
        for job in jobs:
            self.ledger.give_up(job, cancelled_at)
            self.control.skip(Skip(job.id, str(job.lease.token)))
            holds_a_place = holds_a_place or (
                job.cancelled_at is not None and job.queue in self.placed_queues
            )
        if holds_a_place and self.board.slots == 1:
            # A one-thread child reads its pipe between jobs, and in its handler's
            # thread on USR1: woken so, it says `skipping` for the cancelled jobs it has
            # not come to, whose held leases we then release (core.py) while its
            # handler runs on. Never released before it says so: it may have decided
            # to start one just before the skip came (the start is posted after the
            # decision), and a release then would free the place under its handler.
            # A child with threads reads the pipe in its main thread, which selects on
            # it, and releases them itself. Only for a job whose held lease takes a
            # place: USR1 cuts short a C call of the handler running (one that does not
            # retry on EINTR, as Python's own calls do), which has nothing to do with
            # the cancel; a job of a queue without such a limit waits for its turn.
            osutil.signal_process(self.pid, signal.SIGUSR1)

    def interrupt_cancelled(self, job: LedgerJob) -> None:
        """JobCancelled in the job (the ledger has it CANCELLING): the control line says
        which job, the signal wakes the child."""
        self.control.cancel(job.id)
        osutil.signal_process(self.pid, signal.SIGUSR1)

    def pause_keys(self, keys: Iterable[str]) -> None:
        """These keys were just paused: the child starts none of the jobs of theirs it
        claimed before (it reads the pipe before each start). Only a child holding jobs
        not seen started is told (another has none to give back, and an idle one would
        claim again for nothing), and at most PAUSE_LINES_MAX lines between two of its
        claims: a child in a long handler reads nothing, and a full pipe would drop the
        `cancel` or `skip` lines that must reach it (ControlWriter drops a line it
        cannot write); past the bound, its claimed jobs of a key paused later may
        start, as they did before key pauses were sent (docs/design.md)."""
        if not self.ledger.in_state(JobState.CLAIMED):
            return
        for key in keys:
            if self.pause_lines >= PAUSE_LINES_MAX:
                return
            self.control.pause_key(key)
            self.pause_lines += 1

    def wake(self) -> None:
        """Tell an idle child to claim now: a job it can run was enqueued."""
        self.idle = False
        self.control.wake()

    def close(self) -> None:
        self.status.close()
        self.board.close()
        self.control.close()


def spawn(spec: WorkerSpec) -> ChildProcess:
    """Fork a worker child running `spec`. The child leads its own process group, dies
    with the supervisor, and closes every descriptor it inherited but its pipes."""
    status_r, status_w = os.pipe()
    control_r, control_w = os.pipe()
    board = StartBoard(spec.threads)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code: int = ExitCode.CRASHED  # a bug past boot: replaced like any crash, not a stop
        try:
            os.setpgid(0, 0)
            osutil.die_with_parent()
            if os.getppid() != spec.supervisor_pid:  # the supervisor died before prctl
                os._exit(ExitCode.ORPHANED)
            signal.set_wakeup_fd(-1)
            osutil.close_inherited_fds(keep={status_w, control_r})
            # What the boot added (a Django project's apps, say) is the child's for life.
            code = child_main(spec, status_w, control_r, board, osutil.freeze_start_up_heap)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(status_w)
    os.close(control_r)
    with contextlib.suppress(OSError):  # also done by the child; whichever runs first
        os.setpgid(pid, pid)
    return ChildProcess(
        pid=pid,
        pool=spec.pool,
        index=spec.index,
        status=StatusReader(status_r),
        control=ControlWriter(control_w, board),
        board=board,
        queues=frozenset(spec.queues),
        placed_queues=frozenset(
            queue for queue, limits in spec.limits.items() if limits.frees_on_completion
        ),
    )
