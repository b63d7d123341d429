"""The supervisor's children: spawning them into seats, reaping them, and replacing
them with backoff. A seat is one place for a child in a pool, kept across the
children that fill it in turn, with the crash streak of a place whose children keep
dying."""

from __future__ import annotations

import logging
import selectors
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pgworkerd import logs
from pgworkerd.config import Config, PoolConfig
from pgworkerd.storage.store import Backoff
from pgworkerd.supervisor import osutil
from pgworkerd.supervisor.children import ChildProcess, spawn
from pgworkerd.supervisor.ledger import KillReason
from pgworkerd.supervisor.metrics import METRICS
from pgworkerd.supervisor.reaping import ExitReport, reaped, report_exit
from pgworkerd.worker import WorkerSpec

log = logging.getLogger("pgworkerd.supervisor")

RESPAWN_BASE_DELAY_S = 0.1
RESPAWN_MAX_DELAY_S = 30.0
HEALTHY_LIFETIME_S = 30.0  # a child that lived this long resets its seat's crash streak


@dataclass
class Seat:
    pool: PoolConfig
    pool_name: str
    index: int  # 1-based within the pool
    child: ChildProcess | None = None
    crash_streak: int = 0  # children in a row that died on their own, unhealthy
    respawn_at: float = 0.0  # monotonic: no new child before
    retired: bool = False  # dropped by a reload: removed once its child is gone
    spawned: int = 0  # children it had: from the second on, a restart

    def due(self, now: float) -> bool:
        return self.child is None and not self.retired and now >= self.respawn_at

    def vacate(self, *, clean: bool, healthy: bool, our_doing: bool, now: float) -> float:
        """Its child is gone. Replace at once a child that exited cleanly, was stopped by
        us or had been healthy; back off exponentially on one that keeps dying on its
        own. Returns the delay before the next child."""
        self.child = None
        if clean or healthy:
            self.crash_streak = 0
        elif not our_doing:
            self.crash_streak += 1
        delay = respawn_delay_s(self.crash_streak)
        self.respawn_at = now + delay
        return delay


def respawn_delay_s(crash_streak: int) -> float:
    if not crash_streak:
        return 0.0
    return float(min(RESPAWN_MAX_DELAY_S, RESPAWN_BASE_DELAY_S * 2**crash_streak))


def seats_for(config: Config, keep: list[Seat]) -> list[Seat]:
    """The seats of `config`'s pools, after `keep` (seats whose child still drains)."""
    seats = list(keep)
    for pool in config.pools():
        name = ",".join(pool.queues)
        seats.extend(Seat(pool, name, n) for n in range(1, pool.concurrency + 1))
    return seats


class Workforce:
    """The live children (by pid) and the seats they fill. Each child's status pipe is
    registered in `selector` with the child as its data."""

    def __init__(
        self, selector: selectors.BaseSelector, spec_for: Callable[[Seat], WorkerSpec]
    ) -> None:
        self.selector = selector
        self.spec_for = spec_for
        self.children: dict[int, ChildProcess] = {}
        self.seats: list[Seat] = []

    def staff(self, config: Config) -> None:
        """Seats for `config`'s pools; the old seats retire as their children go."""
        for seat in self.seats:
            seat.retired = True
        self.seats = seats_for(config, keep=[s for s in self.seats if s.child is not None])

    def spawn_due(self) -> None:
        now = time.monotonic()
        for seat in self.seats:
            if seat.due(now):
                child = spawn(self.spec_for(seat))
                if seat.spawned:
                    METRICS.restarted()
                seat.spawned += 1
                seat.child = child
                self.children[child.pid] = child
                self.selector.register(child.status.fd, selectors.EVENT_READ, child)

    def retire_all(self) -> None:
        """Drain every child: it finishes its running jobs and exits, not replaced."""
        for child in self.children.values():
            child.retiring = True
            osutil.signal_process(child.pid, signal.SIGTERM)

    def kill_all(self, reason: KillReason) -> None:
        for child in self.children.values():
            child.retiring = True
            child.kill(reason)

    def reaped(self, *, block: bool = False) -> Iterator[tuple[ChildProcess, int]]:
        """(child, wait status) of each of our children that ended. Any other process
        reaped on the way is not ours to report: as PID 1 of a container (or a
        subreaper), orphans re-parent to us, handlers' double-forked grandchildren
        among them, and waiting for every pid is what keeps them from staying zombies;
        so this waits even with no child left."""
        for pid, status in reaped(block=block):
            child = self.children.pop(pid, None)
            if child is not None:
                # Whatever its handler started in its process group dies with it,
                # however it ended: a child that crashed or exited was not killed by
                # group, and its grandchildren would live on, orphaned, running a job no
                # one holds. Safe after the reap: a group id stays reserved while any
                # member lives, and when none does, there is nothing to hit (pids are
                # handed out cyclically, so the number just freed is not reused now).
                osutil.kill_group(child.pid, signal.SIGKILL)
                yield child, status

    def release(self, child: ChildProcess, status: int) -> ExitReport:
        """Close a reaped child's channels, log how it ended, free its seat."""
        self.selector.unregister(child.status.fd)
        child.close()
        report = report_exit(status, child.kill_reason, retiring=child.retiring)
        logs.event(
            log,
            report.level,
            "worker exited",
            worker=child.name,
            pid=child.pid,
            how=report.how,
            reason=report.reason,
        )
        seat = next((s for s in self.seats if s.child is child), None)
        if seat is not None:
            now = time.monotonic()
            healthy = child.finished_any or now - child.spawned_at >= HEALTHY_LIFETIME_S
            delay = seat.vacate(
                clean=report.clean, healthy=healthy, our_doing=report.our_doing, now=now
            )
            if delay >= 1:
                logs.event(
                    log,
                    logging.WARNING,
                    "worker keeps dying; respawn delayed",
                    worker=child.name,
                    crash_streak=seat.crash_streak,
                    delay_s=round(delay, 1),
                )
            if seat.retired:
                self.seats.remove(seat)
        return report

    def next_respawn_at(self) -> float | None:
        return min(
            (s.respawn_at for s in self.seats if s.child is None and not s.retired), default=None
        )


def worker_spec(
    seat: Seat,
    config: Config,
    *,
    database_url: str,
    backoff: Backoff,
    registry: Mapping[str, Callable[..., Any]],
    log_format: str,
    supervisor_pid: int,
    boot: Callable[[str], Mapping[str, Callable[..., Any]]] | None = None,
) -> WorkerSpec:
    """What the child for `seat` is told at its fork, under `config`."""
    queues = tuple(config.claim_order(seat.pool))
    return WorkerSpec(
        pool=seat.pool_name,
        index=seat.index,
        queues=queues,
        queue_max_attempts=tuple(config.max_attempts_for(q) for q in queues),
        batch_size=config.batch_size_for(seat.pool),
        lease_ttl_s=config.lease_ttl,
        poll_interval_s=config.poll_interval,
        database_url=database_url,
        schema=config.database.schema_name,
        backoff=backoff,
        registry=registry,
        max_jobs=config.max_jobs_per_child,
        max_memory_bytes=config.max_memory_per_child,
        log_format=log_format,
        log_level=config.log_level,
        shutdown_timeout_s=config.shutdown_timeout,
        supervisor_pid=supervisor_pid,
        worker_id=f"{socket.gethostname()}:{supervisor_pid}/{seat.pool_name}#{seat.index}",
        threads=seat.pool.threads,
        boot=boot,
        limits=config.queue_limits(queues),
    )
