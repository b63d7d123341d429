"""The supervisor's view of one worker child, and the fork that starts it.

Only the supervisor's loop reads and writes these records; the child's status
messages (see protocol.py) are their only input besides the supervisor's own kills.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field

from pgworkerd import osutil
from pgworkerd.child_slot import ChildSlot
from pgworkerd.job import Lease
from pgworkerd.protocol import StatusReader
from pgworkerd.worker import EXIT_ORPHANED, WorkerSpec, child_main

# Why the supervisor killed a child: decides how its running job is settled.
KILL_TIMEOUT = "timeout"  # past max runtime: charged, retried or dead
KILL_SHUTDOWN = "shutdown"  # drain timed out or QUIT: released, uncharged
KILL_LEASE_LOST = "lease_lost"  # the job is no longer ours: not touched
KILL_UNFENCED = "unfenced"  # renewals failed: cannot keep running unregistered

EXIT_CRASHED = 70  # the child's code raised: reported with its traceback, then replaced


@dataclass
class HeldJob:
    """A job a child holds a lease on."""

    lease: Lease
    kind: str
    queue: str
    max_runtime_s: float  # resolved: job, else queue, else defaults
    number: int  # its place among the child's claims: the child runs them in this order
    started_at: float | None = None  # host's monotonic clock; None: not started
    finishing: bool = False  # its handler returned: only the outcome write is left
    # When its lease was last known good (claim, or a renewal sent then that succeeded):
    # by the database's clock it expires no earlier than this plus lease_ttl.
    renewed_at: float = field(default_factory=time.monotonic)


@dataclass(eq=False)  # identity: a child is itself, whatever its state
class Child:
    pid: int
    pool: str
    index: int  # 1-based within the pool
    reader: StatusReader
    control_fd: int  # supervisor -> child: "skip <id> <token>" lines
    slot: ChildSlot  # shared memory: job starts, control lines written (child_slot.py)
    queues: frozenset[str]  # the queues it claims from
    spawned_at: float = field(default_factory=time.monotonic)
    held: dict[int, HeldJob] = field(default_factory=dict)
    running: int | None = None  # id of the job whose handler runs
    soft_timeout_sent_at: float | None = None
    kill_reason: str | None = None
    stopping: bool = False  # said `stopping`: will start no job
    retiring: bool = False  # drained on purpose (reload, shutdown): not replaced
    finished_any: bool = False
    lost_leases: set[Lease] = field(default_factory=set)  # renewals no longer return them
    given_up: set[int] = field(default_factory=set)  # claim numbers we told it to skip
    started_number: int = 0  # the last claim number read from `slot` and acted on
    boot_error: str | None = None
    idle: bool = False  # said `idle` and was not woken since: waits for a "wake" line

    @property
    def name(self) -> str:
        return f"{self.pool}#{self.index}"

    def running_job(self) -> HeldJob | None:
        return self.held.get(self.running) if self.running is not None else None

    def unstarted(self) -> list[HeldJob]:
        return [job for job in self.held.values() if job.started_at is None]

    def deadline(self) -> float | None:
        job = self.running_job()
        if job is None or job.started_at is None or job.finishing:
            return None
        return job.started_at + job.max_runtime_s

    def kill(self, reason: str) -> None:
        """SIGKILL the child's process group (its handler's own children too)."""
        if self.kill_reason is None:
            self.kill_reason = reason
        osutil.kill_group(self.pid, signal.SIGKILL)

    def give_up(self, job_id: int) -> None:
        """Forget an unstarted job whose lease is gone, and tell the child not to start
        it. By lease, not id: the same job may come back to this child, claimed anew."""
        job = self.held.pop(job_id)
        self.lost_leases.add(job.lease)
        self.given_up.add(job.number)
        self._control(f"skip {job_id} {job.lease.token}\n".encode())

    def wake(self) -> None:
        """Tell an idle child to claim now: a job it can run was enqueued."""
        self.idle = False
        self._control(b"wake\n")

    def _control(self, line: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.control_fd, line)
            self.slot.wrote_control_line()  # after the write: the child then finds it

    def close(self) -> None:
        self.reader.close()
        self.slot.close()
        with contextlib.suppress(OSError):
            os.close(self.control_fd)


def spawn(spec: WorkerSpec) -> Child:
    """Fork a worker child running `spec`. The child leads its own process group, dies
    with the supervisor, and closes every descriptor it inherited but its pipes."""
    status_r, status_w = os.pipe()
    control_r, control_w = os.pipe()
    slot = ChildSlot()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = EXIT_CRASHED  # a bug past boot: replaced like any crash, not a stop
        try:
            os.setpgid(0, 0)
            osutil.die_with_parent()
            if os.getppid() != spec.supervisor_pid:  # the supervisor died before prctl
                os._exit(EXIT_ORPHANED)
            signal.set_wakeup_fd(-1)
            osutil.close_inherited_fds(keep={status_w, control_r})
            code = child_main(spec, status_w, control_r, slot)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(status_w)
    os.close(control_r)
    with contextlib.suppress(OSError):  # also done by the child; whichever runs first
        os.setpgid(pid, pid)
    os.set_blocking(control_w, False)
    return Child(
        pid=pid,
        pool=spec.pool,
        index=spec.index,
        reader=StatusReader(status_r),
        control_fd=control_w,
        slot=slot,
        queues=frozenset(spec.queues),
    )


def lease_from_message(job_id: int, token: str) -> Lease:
    return Lease(job_id, uuid.UUID(token))
