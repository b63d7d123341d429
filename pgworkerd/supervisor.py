"""The supervisor: forks the worker children, reaps them, enforces max runtime, renews
leases, drains on TERM/INT, stops on QUIT, reloads on HUP.

One thread, one loop: `selectors` over the signal wakeup fd and each child's status
pipe, its timeout set by the nearest deadline. Signal handlers do nothing; the byte
the wakeup fd receives is the record, dispatched by the loop (gunicorn's pattern).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from setproctitle import setproctitle

from pgworkerd import config as config_module
from pgworkerd import handlers, logs, osutil
from pgworkerd.children import (
    KILL_LEASE_LOST,
    KILL_SHUTDOWN,
    KILL_TIMEOUT,
    KILL_UNFENCED,
    Child,
    HeldJob,
    lease_from_message,
    spawn,
)
from pgworkerd.config import Config, ConfigError, PoolConfig
from pgworkerd.handlers import Handler, HandlerError
from pgworkerd.housekeeping import ALL_QUEUES, Housekeeper, Renewal, Settlement
from pgworkerd.job import Lease
from pgworkerd.store import Backoff, JobStore
from pgworkerd.systemd import Notifier
from pgworkerd.worker import EXIT_BOOT_ERROR, WorkerSpec

log = logging.getLogger("pgworkerd.supervisor")

LISTENER = "listener"  # selector data of the notification socket
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD)
SOFT_TIMEOUT_GRACE_S = 3.0  # from the soft signal to SIGKILL
RESPAWN_MAX_DELAY_S = 30.0
HEALTHY_LIFETIME_S = 30.0  # a child that lived this long resets its crash streak
UNFENCED_FRACTION = 0.8  # of lease_ttl without a renewal: stop the jobs ourselves
MAX_LOOP_WAIT_S = 1.0
# While children hold jobs the loop turns at least this often, to read which job each
# one started (child_slot.py): the runtime deadlines start from there.
BUSY_LOOP_WAIT_S = 0.1


@dataclass
class Slot:
    """One place for a child in a pool; keeps the crash streak across replacements."""

    pool: PoolConfig
    pool_name: str
    index: int
    child: Child | None = None
    crash_streak: int = 0
    respawn_at: float = 0.0
    retired: bool = False


@dataclass
class Supervisor:
    config: Config
    config_path: str | None
    registry: dict[str, Handler]
    database_url: str
    log_format: str = "text"
    children: dict[int, Child] = field(default_factory=dict)  # pid -> child, live ones
    slots: list[Slot] = field(default_factory=list)
    state: str = "running"  # running -> draining -> stopped
    exit_code: int = 0

    def __post_init__(self) -> None:
        self.pid = os.getpid()
        self.daemon_id = f"{socket.gethostname()}:{self.pid}:{int(time.time())}"
        self.store = self._store()
        self.selector = selectors.DefaultSelector()
        self.drain_deadline: float | None = None
        self.housekeeper: Housekeeper | None = None
        self.notifier = Notifier.from_environment()  # before any fork: see systemd.py
        self.listen_fd: int | None = None  # registered in the selector
        # Queues notified while no idle child could take them: the next child to go
        # idle is woken at once, so a notification that raced its `idle` is not lost.
        self.unclaimed_wakes: set[str] = set()

    # -- life cycle -----------------------------------------------------------------------

    def run(self) -> int:
        setproctitle("pgworkerd: supervisor")
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, _record_only)
        self.selector.register(wake_r, selectors.EVENT_READ, None)
        self._build_slots(self.config)
        self._spawn_due()  # forks first: no connection of ours exists yet to inherit
        self.housekeeper = self._housekeeper()
        logs.event(
            log,
            logging.INFO,
            "supervisor started",
            pid=self.pid,
            workers=len(self.children),
            daemon=self.daemon_id,
        )
        self.notifier.notify(
            "READY=1", f"STATUS={len(self.children)} workers", f"MAINPID={self.pid}"
        )
        try:
            while self.state != "stopped":
                self._loop_once(wake_r)
        except Exception:
            # A bug of ours: say so loudly, then still put every job back on the way out.
            log.critical("supervisor crashed", exc_info=True)
            self.exit_code = 1
        finally:
            self._finish()
        return self.exit_code

    def _loop_once(self, wake_r: int) -> None:
        self._watch_listener()
        for key, _ in self.selector.select(self._wait_s()):
            if key.data is None:
                self._dispatch_signals(wake_r)
            elif key.data == LISTENER:
                self._on_notifications()
            else:
                self._read_status(key.data)
        for child in self.children.values():
            self._sync_started(child)
        self._reap()
        self._enforce_runtimes()
        self._housekeeping()
        # A notification that came while the connection ran a housekeeping query was
        # read with that query's answer: it waits in psycopg's backlog, and the socket
        # will not wake us for it.
        if (
            self.listen_fd is not None
            and self.housekeeper is not None
            and self.housekeeper.queried_since_drain
        ):
            self._on_notifications()
        self._stop_lapsing_leases()
        if self.state == "running":
            self._spawn_due()
        elif self.state == "draining":
            if not self.children:
                self.state = "stopped"
            elif self.drain_deadline is not None and time.monotonic() >= self.drain_deadline:
                logs.event(
                    log,
                    logging.WARNING,
                    "shutdown timeout reached; killing workers",
                    remaining=len(self.children),
                )
                self._kill_all(KILL_SHUTDOWN)
                self.drain_deadline = None

    def _finish(self) -> None:
        for child in list(self.children.values()):
            child.kill(KILL_SHUTDOWN)
        while self.children:  # reap, so their jobs go back before we leave
            self._reap(block=True)
        if self.housekeeper is not None:
            self.housekeeper.flush_settlements()
            if self.housekeeper.pending:
                logs.event(
                    log,
                    logging.WARNING,
                    "could not settle every job; their leases will expire and be rescued",
                    jobs=self.housekeeper.pending,
                )
            self.housekeeper.unregister()
            self.housekeeper.close()
        logs.event(log, logging.INFO, "supervisor stopped", exit_code=self.exit_code)

    # -- signals --------------------------------------------------------------------------

    def _dispatch_signals(self, wake_r: int) -> None:
        try:
            received = os.read(wake_r, 1024)
        except BlockingIOError:
            return
        for signum in received:
            if signum in (signal.SIGTERM, signal.SIGINT):
                self.handle_term(signum)
            elif signum == signal.SIGQUIT:
                self.handle_quit()
            elif signum == signal.SIGHUP:
                self.handle_hup()
            # SIGCHLD: the loop reaps after every wake-up anyway

    def handle_term(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.state == "draining":
            logs.event(log, logging.WARNING, "second signal; stopping now", signal=name)
            self._kill_all(KILL_SHUTDOWN)
            return
        logs.event(
            log,
            logging.INFO,
            "draining",
            signal=name,
            shutdown_timeout_s=self.config.shutdown_timeout,
        )
        self.notifier.notify("STOPPING=1", "STATUS=draining")
        self.state = "draining"
        self.drain_deadline = time.monotonic() + self.config.shutdown_timeout
        for child in self.children.values():
            child.retiring = True
            osutil.signal_process(child.pid, signal.SIGTERM)

    def handle_quit(self) -> None:
        logs.event(log, logging.INFO, "stopping now", signal="SIGQUIT")
        self.notifier.notify("STOPPING=1", "STATUS=stopping")
        self.state = "draining"
        self._kill_all(KILL_SHUTDOWN)

    def handle_hup(self) -> None:
        if self.state != "running":
            return
        try:
            new_config = config_module.load(self.config_path)
            new_registry = handlers.load_registry(new_config.handlers)
        except (ConfigError, HandlerError) as exc:
            for problem in exc.problems:
                logs.event(
                    log,
                    logging.ERROR,
                    "reload refused; keeping the running config",
                    problem=problem,
                )
            return
        if new_config.database != self.config.database:
            logs.event(
                log,
                logging.ERROR,
                "reload refused; keeping the running config",
                problem="database settings changed: they need a restart",
            )
            return
        logs.event(log, logging.INFO, "reloading: replacing workers")
        self.notifier.notify("RELOADING=1", "STATUS=reloading")
        self.config, self.registry = new_config, new_registry
        logging.getLogger("pgworkerd").setLevel(new_config.log_level.upper())
        self.store = self._store()
        if self.housekeeper is not None:
            self.housekeeper.store = self.store
        for slot in self.slots:
            slot.retired = True
        for child in self.children.values():
            child.retiring = True
            osutil.signal_process(child.pid, signal.SIGTERM)
        self._build_slots(new_config)
        self.notifier.notify("READY=1", "STATUS=reloaded")

    # -- children ------------------------------------------------------------------------

    def _build_slots(self, config: Config) -> None:
        self.slots = [slot for slot in self.slots if slot.child is not None]  # draining ones
        for pool in config.pools():
            name = ",".join(pool.queues)
            self.slots.extend(Slot(pool, name, n) for n in range(1, pool.concurrency + 1))

    def _spawn_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.child is None and not slot.retired and now >= slot.respawn_at:
                child = spawn(self._spec(slot))
                slot.child = child
                self.children[child.pid] = child
                self.selector.register(child.reader.fd, selectors.EVENT_READ, child)

    def _spec(self, slot: Slot) -> WorkerSpec:
        config = self.config
        queues = tuple(config.claim_order(slot.pool))
        return WorkerSpec(
            pool=slot.pool_name,
            index=slot.index,
            queues=queues,
            queue_max_attempts=tuple(config.max_attempts_for(q) for q in queues),
            batch_size=config.batch_size_for(slot.pool),
            lease_ttl_s=config.lease_ttl,
            poll_interval_s=config.poll_interval,
            database_url=self.database_url,
            schema=config.database.schema_name,
            backoff=self.store.backoff,
            registry=self.registry,
            max_jobs=config.max_jobs_per_child,
            max_memory_bytes=config.max_memory_per_child,
            log_format=self.log_format,
            log_level=config.log_level,
            supervisor_pid=self.pid,
            worker_id=f"{socket.gethostname()}:{self.pid}/{slot.pool_name}#{slot.index}",
        )

    def _read_status(self, child: Child) -> None:
        # Job starts come through the slot, and a message may depend on them (a
        # `stopping` releases only jobs not started): the slot is read before each.
        for message in child.reader.read():
            self._sync_started(child)
            self._on_message(child, message)
        self._sync_started(child)

    def _sync_started(self, child: Child) -> None:
        """Act on the job start the child posted in its slot, if it is new to us."""
        posted = child.slot.last_start()
        if posted is None or posted[0] == child.started_number:
            return
        number, started_at = posted
        job = next((j for j in child.held.values() if j.number == number), None)
        if job is None:
            if number in child.given_up:
                # Given up before the child read our "skip": it runs without a lease.
                child.started_number = number
                child.kill(KILL_LEASE_LOST)
            return  # its "claimed" line is not read yet: acted on at the next read
        child.started_number = number
        for earlier in child.held.values():
            if earlier.number < number:  # run in claim order: these have returned
                if earlier.started_at is None:
                    earlier.started_at = started_at
                earlier.finishing = True
        job.started_at = started_at
        child.running = job.lease.job_id
        child.soft_timeout_sent_at = None
        if job.lease in child.lost_leases:
            child.kill(KILL_LEASE_LOST)

    def _on_message(self, child: Child, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "claimed":
            for number, (job_id, token, job_kind, queue, max_runtime_s) in enumerate(
                message["jobs"], start=message["first"]
            ):
                runtime = self.config.max_runtime_for(queue, max_runtime_s)
                # The lease runs from the claim, not from our reading of it (the host's
                # monotonic clock is one for all its processes).
                child.held[job_id] = HeldJob(
                    lease_from_message(job_id, token),
                    job_kind,
                    queue,
                    runtime,
                    number,
                    renewed_at=message.get("at", time.monotonic()),
                )
            child.idle = False
            if message.get("full"):  # there may be more: wake a sibling to share them
                self._wake_one(child.queues)
        elif kind == "finishing":
            for job_id in message["ids"]:
                job = child.held.get(job_id)
                if job is not None:
                    job.finishing = True
        elif kind == "done":
            for job_id in message["ids"]:
                child.held.pop(job_id, None)
                if child.running == job_id:
                    child.running = None
            child.finished_any = True
        elif kind == "released":
            for job_id in message["ids"]:
                child.held.pop(job_id, None)
        elif kind == "idle":
            child.idle = True
            if self.unclaimed_wakes and (
                ALL_QUEUES in self.unclaimed_wakes or child.queues & self.unclaimed_wakes
            ):
                self.unclaimed_wakes -= child.queues | {ALL_QUEUES}
                child.wake()
        elif kind == "stopping":
            child.stopping = True
            self._release_unstarted(child)
        elif kind == "boot_error":
            child.boot_error = str(message.get("reason"))

    # -- wake-ups -------------------------------------------------------------------------

    def _watch_listener(self) -> None:
        """Keep the housekeeper's listening socket in the selector, across reconnects."""
        if self.listen_fd is None and self.housekeeper is not None:
            fd = self.housekeeper.listen_fd()
            if fd is not None:
                self.selector.register(fd, selectors.EVENT_READ, LISTENER)
                self.listen_fd = fd
                # Listening afresh: whatever was enqueued while we were not is woken
                # for now, not at the next notification.
                self._on_notifications()

    def _forget_listener(self) -> None:
        """The housekeeper is about to close the listening connection."""
        if self.listen_fd is not None:
            with contextlib.suppress(KeyError, OSError, ValueError):
                self.selector.unregister(self.listen_fd)
            self.listen_fd = None

    def _on_notifications(self) -> None:
        """One idle child per notified queue: not a herd. A child whose claim comes
        back full wakes the next (see "claimed")."""
        assert self.housekeeper is not None
        for queue in self.housekeeper.notified_queues():
            idle = [child for child in self.children.values() if child.idle]
            if self.state != "running":
                woken = 0  # draining: no child is to take new work
            elif queue == ALL_QUEUES:
                for child in idle:
                    child.wake()
                woken = len(idle)
            else:
                woken = int(self._wake_one({queue}))
                if not woken:
                    self.unclaimed_wakes.add(queue)
            logs.event(log, logging.DEBUG, "notified", queue=queue, idle=len(idle), woken=woken)

    def _wake_one(self, queues: set[str] | frozenset[str]) -> bool:
        if self.state != "running":
            return False
        for child in self.children.values():
            if child.idle and child.queues & queues:
                child.wake()
                return True
        return False

    def _release_unstarted(self, child: Child) -> None:
        unstarted = child.unstarted()
        for job in unstarted:
            del child.held[job.lease.job_id]
        if unstarted and self.housekeeper is not None:
            self.housekeeper.settle(Settlement(job.lease, None) for job in unstarted)

    def _reap(self, *, block: bool = False) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self._on_child_exit(child, status)
            if block:
                return

    def _on_child_exit(self, child: Child, status: int) -> None:
        # Whatever its handler started in its process group dies with it, however it
        # ended: a child that crashed or exited was not killed by group, and its
        # grandchildren would live on, orphaned, running a job no one holds. Safe after
        # the reap: a group id stays reserved while any member lives, and when none
        # does, there is nothing to hit (pids are handed out cyclically, so the number
        # just freed is not reused in this instant).
        osutil.kill_group(child.pid, signal.SIGKILL)
        self._read_status(child)  # what it said before it died still counts
        self.selector.unregister(child.reader.fd)
        child.close()
        how = osutil.describe_exit(status, oom_hint=child.kill_reason is None)
        expected = child.retiring or child.kill_reason == KILL_SHUTDOWN
        clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        level = logging.INFO if (clean or expected) else logging.ERROR
        reason = child.kill_reason or (
            ("drained" if child.retiring else "recycled") if clean else "crashed"
        )
        logs.event(
            log, level, "worker exited", worker=child.name, pid=child.pid, how=how, reason=reason
        )
        self._settle_jobs_of(child, how)
        slot = next((s for s in self.slots if s.child is child), None)
        if slot is not None:
            slot.child = None
            self._plan_respawn(slot, child, clean)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_BOOT_ERROR:
            reason = child.boot_error or "see the worker's log above"
            logs.event(log, logging.CRITICAL, "worker failed to boot; stopping", reason=reason)
            self.exit_code = 1
            self.handle_quit()

    def _settle_jobs_of(self, child: Child, how: str) -> None:
        if self.housekeeper is None:
            return
        settlements = []
        for job in child.held.values():
            if job.started_at is None:
                settlements.append(Settlement(job.lease, None))
            elif job.lease not in child.lost_leases:
                settlements.append(Settlement(job.lease, self._charge_error(child, job, how)))
        self.housekeeper.settle(settlements)

    def _charge_error(self, child: Child, job: HeldJob, how: str) -> str | None:
        """The error to charge a started job with, or None to release it uncharged."""
        if child.kill_reason == KILL_SHUTDOWN:
            return None  # shutdown is not the job's fault: back to queued, uncharged
        if job.finishing:
            # Its handler returned but its outcome was not written yet (successes are
            # written in batches): it runs again, and this start counts.
            return (
                f"worker process {how} after the job's handler returned, before its "
                "outcome was recorded"
            )
        if child.kill_reason == KILL_TIMEOUT:
            return f"exceeded its max runtime of {job.max_runtime_s:g}s: worker killed (SIGKILL)"
        if child.kill_reason == KILL_UNFENCED:
            return "worker killed: its supervisor could not renew the job's lease"
        return f"worker process {how} while running the job"

    def _plan_respawn(self, slot: Slot, child: Child, clean: bool) -> None:
        """Replace at once a child that exited cleanly, was killed by us or had been
        healthy; back off exponentially on a child that keeps dying on its own."""
        healthy = child.finished_any or time.monotonic() - child.spawned_at >= HEALTHY_LIFETIME_S
        if clean or healthy:
            slot.crash_streak = 0
        elif child.kill_reason is None and not child.retiring:
            slot.crash_streak += 1
        delay = min(RESPAWN_MAX_DELAY_S, 0.1 * 2**slot.crash_streak) if slot.crash_streak else 0.0
        slot.respawn_at = time.monotonic() + delay
        if delay >= 1:
            logs.event(
                log,
                logging.WARNING,
                "worker keeps dying; respawn delayed",
                worker=child.name,
                crash_streak=slot.crash_streak,
                delay_s=round(delay, 1),
            )
        if slot.retired:
            self.slots.remove(slot)

    def _kill_all(self, reason: str) -> None:
        for child in self.children.values():
            child.retiring = True
            child.kill(reason)

    # -- runtime limits -------------------------------------------------------------------

    def _enforce_runtimes(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            deadline = child.deadline()
            if deadline is None or child.kill_reason is not None or now < deadline:
                continue
            job = child.running_job()
            assert job is not None
            if child.soft_timeout_sent_at is None:
                logs.event(
                    log,
                    logging.WARNING,
                    "job past its max runtime; soft timeout sent",
                    job=job.lease.job_id,
                    kind=job.kind,
                    worker=child.name,
                    max_runtime_s=job.max_runtime_s,
                )
                child.soft_timeout_sent_at = now
                osutil.signal_process(child.pid, signal.SIGUSR1)
            elif now >= child.soft_timeout_sent_at + SOFT_TIMEOUT_GRACE_S:
                logs.event(
                    log,
                    logging.ERROR,
                    "job past its max runtime; killing worker",
                    job=job.lease.job_id,
                    kind=job.kind,
                    worker=child.name,
                )
                child.kill(KILL_TIMEOUT)

    # -- leases and housekeeping -----------------------------------------------------------

    def _housekeeping(self) -> None:
        keeper = self.housekeeper
        if keeper is None:
            return
        # The leases sent for renewal, each with its child: filled if a renewal is due.
        held: dict[int, tuple[Child, Lease]] = {}

        def leases() -> list[Lease]:
            for child in self.children.values():
                for job_id, job in child.held.items():
                    held[job_id] = (child, job.lease)
            return [lease for _, lease in held.values()]

        renewal = keeper.run_due(
            time.monotonic(),
            leases,
            lambda: {"workers": len(self.children), "state": self.state},
        )
        if renewal is not None:
            self._renew(renewal, held)
        # None: _stop_lapsing_leases acts when the last good renewal is too old

    def _renew(self, renewal: Renewal, held: dict[int, tuple[Child, Lease]]) -> None:
        renewed = renewal.renewed
        # A lease the renewal did not find may have been ended by its own holder: what
        # the child wrote to its pipe before that write is readable now.
        for child in {child for child, _ in held.values()}:
            self._read_status(child)
        for job_id, (child, lease) in held.items():
            job = child.held.get(job_id)
            if job is None or job.lease != lease:
                continue  # ended, or claimed afresh since: not what the renewal was about
            if job_id in renewed:
                job.renewed_at = renewal.sent_at  # the new expiry is later still
                continue
            if job.finishing:
                continue
            if child.running == job_id:
                logs.event(
                    log,
                    logging.WARNING,
                    "job lease lost (cancelled or rescued); stopping its worker",
                    job=job_id,
                    worker=child.name,
                )
                child.lost_leases.add(job.lease)
                child.kill(KILL_LEASE_LOST)
            else:
                child.give_up(job_id)

    def _lapse_moments(self) -> list[tuple[float, int, Child]]:
        """(moment, job id, child) for each lease we would still have to act on when
        it goes unrenewed: the moment is its last good renewal + UNFENCED_FRACTION of
        lease_ttl (monotonic). Jobs of a child being killed, and jobs whose handler
        returned (only their fenced outcome write is left), need nothing from us."""
        limit = UNFENCED_FRACTION * self.config.lease_ttl
        return [
            (job.renewed_at + limit, job_id, child)
            for child in self.children.values()
            if child.kill_reason is None
            for job_id, job in child.held.items()
            if not job.finishing
        ]

    def _next_lapse(self) -> float | None:
        return min((moment for moment, _, _ in self._lapse_moments()), default=None)

    def _stop_lapsing_leases(self) -> None:
        """Checked on every turn of the loop, not only when a renewal fails: a renewal
        that hangs, or a loop that was busy, must not let a lease run out under a
        handler that is still running."""
        now = time.monotonic()
        lapsing = {
            job_id: child for moment, job_id, child in self._lapse_moments() if now >= moment
        }
        if lapsing:
            self._stop_unfenced(lapsing)

    def _stop_unfenced(self, lapsing: dict[int, Child]) -> None:
        """These leases are about to lapse unrenewed: a handler still running would soon
        run unfenced, so its worker is killed; jobs not started are given up (their
        workers are told to skip them) and left for a rescue."""
        # Started and not finishing (the caller left those out): its handler runs.
        running = {
            child for job_id, child in lapsing.items() if child.held[job_id].started_at is not None
        }
        unstarted = [
            (job_id, child)
            for job_id, child in lapsing.items()
            if child.held[job_id].started_at is None
        ]
        logs.event(
            log,
            logging.ERROR,
            "cannot renew leases; stopping their jobs",
            running=len(running),
            unstarted=len(unstarted),
        )
        for child in running:
            child.kill(KILL_UNFENCED)
        for job_id, child in unstarted:
            if child not in running:
                child.give_up(job_id)

    def _wait_s(self) -> float:
        now = time.monotonic()
        busy = any(child.held for child in self.children.values())
        moments = [now + (BUSY_LOOP_WAIT_S if busy else MAX_LOOP_WAIT_S)]
        if self.housekeeper is not None:
            moments.append(self.housekeeper.next_due_at())
        next_lapse = self._next_lapse()
        if next_lapse is not None:
            moments.append(next_lapse)
        for child in self.children.values():
            deadline = child.deadline()
            if deadline is not None:
                moments.append(
                    deadline
                    if child.soft_timeout_sent_at is None
                    else child.soft_timeout_sent_at + SOFT_TIMEOUT_GRACE_S
                )
        moments.extend(s.respawn_at for s in self.slots if s.child is None and not s.retired)
        if self.drain_deadline is not None:
            moments.append(self.drain_deadline)
        return max(0.0, min(moments) - now)

    # -- construction ----------------------------------------------------------------------

    def _store(self) -> JobStore:
        defaults = self.config.defaults
        return JobStore(
            self.config.database.schema_name,
            backoff=Backoff(base_s=defaults.backoff_base, max_s=defaults.backoff_max),
        )

    def _housekeeper(self) -> Housekeeper:
        return Housekeeper(
            store=self.store,
            database_url=self.database_url,
            lease_ttl_s=self.config.lease_ttl,
            retention_s=self.config.defaults.retention,
            daemon_id=self.daemon_id,
            listen=self.config.notifications,
            on_disconnect=self._forget_listener,
            answer_by=self._next_lapse,
        )


def _record_only(signum: int, frame: Any) -> None:
    """Signal handler: nothing. The wakeup fd has the signal number for the loop."""
