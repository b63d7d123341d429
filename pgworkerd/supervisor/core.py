"""The supervisor: forks the worker children, reaps them, enforces max runtime, renews
leases, drains on TERM/INT, stops on QUIT, reloads on HUP.

One thread, one loop, each turn a few verbs (gunicorn's arbiter): wait for a signal, a
child's message or the nearest deadline, and dispatch it; reap; enforce the limits;
run the housekeeping that is due; manage the children. Its parts: signals.py
(recording), workforce.py (spawn, reap, respawn), children.py (one child and its
channels), ledger.py (each child's jobs), limits.py and enforcement.py (runtime and
lease lapses), wakeups.py; the database work is pgworkerd/housekeeping.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel
from setproctitle import setproctitle

from pgworkerd import handlers, logs
from pgworkerd.config import Config
from pgworkerd.handlers import Handler
from pgworkerd.housekeeping import Housekeeper, Renewal, Settlement
from pgworkerd.ipc import Claimed, Idle, Skipping, Stopping
from pgworkerd.job import Lease
from pgworkerd.storage.store import Backoff, JobStore
from pgworkerd.supervisor import enforcement, operating, osutil
from pgworkerd.supervisor.children import ChildProcess
from pgworkerd.supervisor.http import HttpListener
from pgworkerd.supervisor.ledger import JobState, KillReason, LedgerJob
from pgworkerd.supervisor.metrics import METRICS
from pgworkerd.supervisor.reloading import Loading, Stamps, changed_files, module_files
from pgworkerd.supervisor.signals import SignalInbox
from pgworkerd.supervisor.systemd import Notifier
from pgworkerd.supervisor.wakeups import Wakeups
from pgworkerd.supervisor.workforce import Seat, Workforce, worker_spec
from pgworkerd.worker import WorkerSpec

log = logging.getLogger("pgworkerd.supervisor")

MAX_LOOP_WAIT_S = 1.0
# While children hold jobs the loop turns at least this often, to read the starts on
# their boards: the runtime deadlines start from there.
BUSY_LOOP_WAIT_S = 0.1
_SIGNALS, _LISTENER = "signals", "listener"  # selector data of those two descriptors


class State(Enum):
    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


@dataclass
class Supervisor:
    config: Config
    config_path: str | None
    registry: dict[str, Handler]
    database_url: str
    log_format: str = "text"

    def __post_init__(self) -> None:
        self.pid = os.getpid()
        self.daemon_id = f"{socket.gethostname()}:{self.pid}:{int(time.time())}"
        self.state = State.RUNNING
        self.exit_code = 0
        self.store = self._store()
        self.selector = selectors.DefaultSelector()
        self.signals = SignalInbox()
        self.workforce = Workforce(self.selector, self._spec)
        self.children = self.workforce.children  # by pid, the live ones
        self.wakeups = Wakeups()
        self.drain_deadline: float | None = None
        self.housekeeper: Housekeeper | None = None
        self.notifier = Notifier.from_environment()  # before any fork: see systemd.py
        self.listen_fd: int | None = None  # the listening connection's socket
        # listen_fd is in the selector: only while a wake is possible (_watch_listener).
        self.listener_selected = False
        self.http: HttpListener | None = None
        self._renewing: dict[ChildProcess, set[Lease]] = {}  # leases sent in the renewal
        self.loading: Loading | None = None  # a HUP's load, under way in its thread
        self.hup_again = False  # a HUP came during that load: load again after it
        # Loads refused past reload_timeout whose threads still run (reloading.py).
        self.stuck_loads: list[Loading] = []
        # The module files' stamps the running config was loaded with (module_files):
        # a HUP that changes neither them nor the config replaces nothing.
        self.code_files: Stamps = {}
        # Each child's highest claim number known when the renewal was sent: the held
        # jobs numbered up to it were all in it (a child's claims are read in order).
        self._renewing_through: dict[ChildProcess, int] = {}

    # -- life cycle -----------------------------------------------------------------------

    def run(self) -> int:
        setproctitle("pgworkerd: supervisor")
        self.signals.install()
        self.selector.register(self.signals.fd, selectors.EVENT_READ, _SIGNALS)
        self.http = operating.start(self)  # None: no `http.listen` in the config
        self.workforce.staff(self.config)
        self.code_files = module_files(self.config)
        osutil.freeze_start_up_heap()  # before the forks: the children share it frozen
        self.workforce.spawn_due()  # forks first: no connection of ours exists to inherit
        self.housekeeper = self._housekeeper()
        operating.sample_queues(self)
        osutil.freeze_start_up_heap()  # and what the housekeeper and the listener added
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
            while self.state is not State.STOPPED:
                self._turn()
        except Exception:
            # A bug of ours: say so loudly, then still put every job back on the way out.
            log.critical("supervisor crashed", exc_info=True)
            self.exit_code = 1
        finally:
            self._finish()
        return self.exit_code

    def _turn(self) -> None:
        self._wait_and_dispatch()
        self._reloaded()
        self._reap()
        enforcement.enforce_runtimes(self.children.values(), time.monotonic())
        self._housekeeping()
        enforcement.stop_lapsing_leases(
            self.children.values(), time.monotonic(), self.config.lease_ttl
        )
        self._manage_children()
        self.notifier.turned(time.monotonic(), lambda: operating.status_line(self))

    def _finish(self) -> None:
        self.workforce.kill_all(KillReason.SHUTDOWN)
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
        if self.http is not None:
            self.http.close()
        logs.event(log, logging.INFO, "supervisor stopped", exit_code=self.exit_code)

    # -- waiting and dispatching ----------------------------------------------------------

    def _wait_and_dispatch(self) -> None:
        self._watch_listener()
        for key, mask in self.selector.select(self._wait_s()):
            if isinstance(key.data, HttpListener):
                key.data.ready(key.fileobj, mask)
            elif key.data == _SIGNALS:
                self._dispatch_signals()
            elif key.data == _LISTENER:
                self._on_notifications()
            else:
                self._read_child(key.data)
        if self.listen_fd is not None and not self.listener_selected:
            # Left in the socket while no child could be woken: read now, after the
            # children's messages (one may have gone idle), for that and the cancels.
            self._on_notifications()
        for child in self.children.values():
            child.sync_starts()
        if self.http is not None:
            self.http.expire(time.monotonic())

    def _dispatch_signals(self) -> None:
        for sig in self.signals.take():
            if sig in (signal.SIGTERM, signal.SIGINT):
                self.handle_term(sig)
            elif sig == signal.SIGQUIT:
                self.handle_quit()
            elif sig == signal.SIGHUP:
                self.handle_hup()
            # SIGCHLD: the loop reaps after every wake-up anyway

    def _read_child(self, child: ChildProcess) -> None:
        accepting = self.state is State.RUNNING
        for message in child.read_messages(self.config.max_runtime_for):
            if isinstance(message, Claimed) and message.full:
                # There may be more: wake a sibling to share them.
                self.wakeups.wake_one(child.queues, self.children.values(), accepting=accepting)
            elif isinstance(message, Idle):
                self.wakeups.went_idle(child, accepting=accepting)
            elif isinstance(message, Stopping):
                self._settle(child.ledger.release_unstarted(), None)
            elif isinstance(message, Skipping):
                self._release_skipping(child, message.ids)

    def _release_skipping(self, child: ChildProcess, ids: Iterable[int]) -> None:
        """Jobs claimed, given up, and never to start: the child has read their skips
        (see ChildProcess.give_up) while a handler of its runs, or skipped them. Their
        leases are released as a dead child's would be: fenced by the token, and
        retried until written. A cancelled row's lease is let go (the child's own
        release, when it comes to it, finds nothing left); a job given up as its lease
        was lapsing goes back to `queued` uncharged, unless a rescue came first."""
        jobs = child.ledger.skipping(ids)
        for job in jobs:
            logs.event(
                log,
                logging.INFO,
                "releasing the lease of a cancelled job its worker will not start"
                if job.cancelled_at is not None
                else "giving back uncharged a job its worker skipped: its lease was not renewed",
                job=job.id,
                queue=job.queue,
                worker=child.name,
            )
        self._settle(jobs, None)

    # -- signals --------------------------------------------------------------------------

    def handle_term(self, sig: signal.Signals) -> None:
        if self.state is State.DRAINING:
            logs.event(log, logging.WARNING, "second signal; stopping now", signal=sig.name)
            self.workforce.kill_all(KillReason.SHUTDOWN)
            return
        logs.event(
            log,
            logging.INFO,
            "draining",
            signal=sig.name,
            shutdown_timeout_s=self.config.shutdown_timeout,
        )
        self.notifier.notify("STOPPING=1", "STATUS=draining")
        self.state = State.DRAINING
        self.drain_deadline = time.monotonic() + self.config.shutdown_timeout
        self.workforce.retire_all()

    def handle_quit(self) -> None:
        logs.event(log, logging.INFO, "stopping now", signal="SIGQUIT")
        self.notifier.notify("STOPPING=1", "STATUS=stopping")
        self.state = State.DRAINING
        self.workforce.kill_all(KillReason.SHUTDOWN)

    def handle_hup(self) -> None:
        """Start loading the file and its handlers in a thread (reloading.py); the loop
        applies the result once it is there (_reloaded). A HUP during a load reads the
        file again after it."""
        if self.state is not State.RUNNING:
            return
        if self.loading is not None:
            self.hup_again = True
            return
        logs.event(log, logging.INFO, "reload: loading the config and its handlers")
        self.loading = Loading(self.config_path).start()

    def _reloaded(self) -> None:
        if self.stuck_loads:
            self._count_stuck_loads()
        loading = self.loading
        if loading is None:
            return
        if not loading.done:
            if time.monotonic() - loading.started_at >= self.config.reload_timeout:
                self._abandon(loading)
            return
        self.loading = None
        if self.state is State.RUNNING:
            self._apply_reload(loading)
        # What the load imported, applied or refused (a module imported before the
        # refusal stays imported), is frozen before the respawns and the new pools fork
        # (_manage_children, later in this turn), and before a HUP that came meanwhile
        # starts the next load's thread (nothing imports while this runs); the Loading,
        # its thread and a refused config are dropped first, not frozen.
        del loading
        osutil.freeze_after_reload()
        if self.hup_again:
            self.hup_again = False
            self.handle_hup()

    def _abandon(self, loading: Loading) -> None:
        """A load past reload_timeout (an import that hangs): refused, and the loop
        forks again. Its thread cannot be stopped and is left behind; why forking
        beside it is safe for the running config's children: reloading.py."""
        self.loading = None
        logs.event(
            log,
            logging.ERROR,
            "reload refused; keeping the running config",
            problem=f"the load did not finish within reload_timeout "
            f"({self.config.reload_timeout:g}s): still {loading.doing()}",
        )
        METRICS.reloaded("timed_out")
        self.stuck_loads.append(loading)
        self._count_stuck_loads()
        if self.hup_again:  # a HUP sent after this one: load it now
            self.hup_again = False
            self.handle_hup()

    def _count_stuck_loads(self) -> None:
        self.stuck_loads = [loading for loading in self.stuck_loads if not loading.done]
        METRICS.loads_stuck(len(self.stuck_loads))

    def _apply_reload(self, loading: Loading) -> None:
        if loading.loaded is None:
            for problem in loading.problems:
                logs.event(
                    log,
                    logging.ERROR,
                    "reload refused; keeping the running config",
                    problem=problem,
                )
            METRICS.reloaded("refused")
            return
        new_config, new_registry = loading.loaded
        if new_config.database != self.config.database:
            logs.event(
                log,
                logging.ERROR,
                "reload refused; keeping the running config",
                problem="database settings changed: they need a restart",
            )
            METRICS.reloaded("refused")
            return
        new_config = self._keep_start_up_settings(new_config)
        changed = changed_files(self.code_files, loading.files)
        if new_config == self.config and not changed and new_config.django is None:
            # Replacing them anyway, every HUP started a full set of workers beside the
            # old ones, still draining their jobs (10 HUPs with 40 s jobs: 2 -> 22).
            # Under `django:` the workers import their modules after the fork, files
            # this process never sees: such a reload always replaces them.
            logs.event(log, logging.INFO, "reload: nothing changed; keeping the workers")
            METRICS.reloaded("unchanged")
            # A reload all the same, to systemd (`systemctl reload` waits for its end).
            self.notifier.notify("RELOADING=1", "STATUS=reloading")
            self.notifier.notify("READY=1", "STATUS=reloaded")
            return
        logs.event(
            log,
            logging.INFO,
            "reloading: replacing workers",
            changed=_what_changed(new_config != self.config, changed),
        )
        METRICS.reloaded("applied")
        self.code_files = loading.files
        self.notifier.notify("RELOADING=1", "STATUS=reloading")
        self.config, self.registry = new_config, new_registry
        logging.getLogger("pgworkerd").setLevel(new_config.log_level.upper())
        self.store = self._store()
        if self.housekeeper is not None:
            self.housekeeper.store = self.store
        self.workforce.retire_all()
        self.workforce.staff(new_config)
        self.notifier.notify("READY=1", "STATUS=reloaded")

    def _keep_start_up_settings(self, new_config: Config) -> Config:
        """`new_config` with the running start-up settings (docs/configuration.md,
        "Reloading"), each one a reload changes said in a warning. `lease_ttl` and
        `notifications`: the housekeeping's renewal, rescue and connection were built
        from them at start-up. Applied only halfway, a new lease_ttl in the new workers'
        claims and the lapse checks but not in the renewals, killed long jobs (lowered)
        or let a job be rescued while it still ran (raised); so the reload keeps them
        everywhere. `http`: the listener was bound at start-up, and a reload that moved
        it (/metrics off 0.0.0.0) silently left the old address answering. `log_format`:
        the logging of the supervisor and of the workers it forks was set up at start."""
        kept = {
            "lease_ttl": self.config.lease_ttl,
            "notifications": self.config.notifications,
            "http": self.config.http,
            "log_format": self.config.log_format,
        }
        changed = [name for name, value in kept.items() if getattr(new_config, name) != value]
        for name in changed:
            logs.event(
                log,
                logging.WARNING,
                "reload keeps a setting from start-up; restart the daemon to change it",
                setting=name,
                running=_shown(getattr(self.config, name)),
                file=_shown(getattr(new_config, name)),
            )
        return new_config.model_copy(update=kept) if changed else new_config

    # -- children -------------------------------------------------------------------------

    def _manage_children(self) -> None:
        if self.state is State.RUNNING and self.loading is None:
            # No fork while a reload's thread imports (reloading.py): respawns wait.
            self.workforce.spawn_due()
        elif self.state is State.DRAINING:
            if not self.children:
                self.state = State.STOPPED
            elif self.drain_deadline is not None and time.monotonic() >= self.drain_deadline:
                logs.event(
                    log,
                    logging.WARNING,
                    "shutdown timeout reached; killing workers",
                    remaining=len(self.children),
                )
                self.workforce.kill_all(KillReason.SHUTDOWN)
                self.drain_deadline = None

    def _reap(self, *, block: bool = False) -> None:
        for child, status in self.workforce.reaped(block=block):
            self._read_child(child)  # what it said before it died still counts
            if child.kill_reason is None and child.board.guard_fired():
                # Its lease guard killed it: our renewals had stopped (this loop did not
                # turn), as our own kill for unrenewed leases would have, and said so.
                child.sync_starts()
                child.kill_reason = KillReason.UNFENCED
                child.ledger.blame(child.ledger.in_state(JobState.RUNNING))
            report = self.workforce.release(child, status)
            if self.housekeeper is not None:
                self.housekeeper.settle(child.ledger.settlements(child.kill_reason, report.how))
            if report.boot_error:
                reason = child.boot_error or "see the worker's log above"
                logs.event(log, logging.CRITICAL, "worker failed to boot; stopping", reason=reason)
                self.exit_code = 1
                self.handle_quit()

    def _settle(self, jobs: Iterable[LedgerJob], error: str | None) -> None:
        settlements = [Settlement(job.lease, error) for job in jobs]
        if settlements and self.housekeeper is not None:
            self.housekeeper.settle(settlements)

    def _spec(self, seat: Seat) -> WorkerSpec:
        return worker_spec(
            seat,
            self.config,
            database_url=self.database_url,
            backoff=self.store.backoff,
            registry=self.registry,
            log_format=self.log_format,
            supervisor_pid=self.pid,
            boot=handlers.child_loader(self.config, self.registry),
        )

    # -- housekeeping and leases ----------------------------------------------------------

    def _housekeeping(self) -> None:
        keeper = self.housekeeper
        if keeper is None:
            return
        renewal = keeper.run_due(
            time.monotonic(), self._leases_to_renew, self._heartbeat, self._spared_leases
        )
        if renewal is not None:
            self._after_renewal(renewal)
        # A notification that came while the connection ran a housekeeping query was
        # read with that query's answer: it waits in psycopg's backlog, and the socket
        # will not wake us for it.
        if self.listen_fd is not None and keeper.queried_since_drain:
            self._on_notifications()

    def _leases_to_renew(self) -> list[Lease]:
        self._renewing = {child: set(child.ledger.leases()) for child in self.children.values()}
        self._renewing_through = {
            child: child.ledger.claimed_through for child in self.children.values()
        }
        return [lease for leases in self._renewing.values() for lease in leases]

    def _spared_leases(self) -> list[Lease]:
        """The leases our rescue leaves alone: those our live children hold, which we
        renew, settle when they die, or see given back; among them, of the jobs our
        children were told not to start as their leases lapsed (the database was
        away). A child gives those back itself, uncharged, when it reconnects or comes
        to them (it says `skipping`, and we do); at its death we do
        (ledger.settlements). Charging them would count a start never made
        (docs/design.md, "Leases that lapse while the database is away")."""
        return [lease for child in self.children.values() for lease in child.ledger.spared()]

    def jobs_running(self) -> int:
        """Jobs whose handlers run in this daemon's workers now."""
        return sum(len(c.ledger.in_state(JobState.RUNNING)) for c in self.children.values())

    def _heartbeat(self) -> dict[str, Any]:
        """What `pgworkerd status` shows of this daemon beside its heartbeat."""
        return {
            "workers": len(self.children),
            "state": self.state.value,
            "running": self.jobs_running(),
        }

    def _after_renewal(self, renewal: Renewal) -> None:
        for child, sent in self._renewing.items():
            if child.pid in self.children and sent:
                # A lease the renewal did not find may have been ended by its own
                # holder: what the child wrote before that write is readable now.
                self._read_child(child)
                enforcement.judge_renewal(child, sent, renewal)
            if child.pid in self.children and child.kill_reason is None:
                # For the child's lease guard: its handlers run on only while renewals
                # answer (a frozen supervisor posts nothing, and they stop themselves).
                self._post_renewal(child, sent, renewal)
        self._renewing = {}
        self._renewing_through = {}

    def _post_renewal(self, child: ChildProcess, sent: set[Lease], renewal: Renewal) -> None:
        """Tell the child's lease guard which of its claims the renewal covered, and
        when: the send, or, when it skipped a locked lease of this child, that lease's
        own last renewal (the oldest of the child's), never later: the guard must not
        think a lease renewed that was not. The board only moves forward: when that
        moment is older than the one it shows (a lease claimed before the board's
        renewal was sent, and not in it), nothing is posted, and the board keeps
        what it said, still true of the claims it covered."""
        sent_at = renewal.sent_at
        if renewal.locked and any(lease.job_id in renewal.locked for lease in sent):
            sent_at = min(sent_at, child.ledger.last_renewed(sent))
            if sent_at < child.board.renewal()[1]:
                return
        child.board.post_renewal(self._renewing_through.get(child, 0), sent_at)

    def _next_lapse(self) -> float | None:
        return enforcement.next_lapse(self.children.values(), self.config.lease_ttl)

    # -- wake-ups -------------------------------------------------------------------------

    def _watch_listener(self) -> None:
        """Keep the housekeeper's listening socket, across reconnects, in the selector
        while a child could be woken. While none is idle a notification can wake no one
        (a woken child claims anyway), and each one in the selector cost every daemon a
        turn of its loop: at the peak, with two daemons, half their turns
        (bench/results/two-daemons-20261125.md). Then the notifications wait in the
        socket and each turn reads them, after the children's messages."""
        if self.listen_fd is None and self.housekeeper is not None:
            fd = self.housekeeper.listen_fd()
            if fd is not None:
                self.listen_fd = fd
                # Listening afresh: whatever was enqueued while we were not is woken
                # for now, not at the next notification.
                self._on_notifications()
        accepting = self.state is State.RUNNING
        if self.listen_fd is None or not self.wakeups.possible(
            self.children.values(), accepting=accepting
        ):
            self._unselect_listener()
        elif not self.listener_selected:
            self.selector.register(self.listen_fd, selectors.EVENT_READ, _LISTENER)
            self.listener_selected = True

    def _forget_listener(self) -> None:
        """The housekeeper is about to close the listening connection."""
        self._unselect_listener()
        self.listen_fd = None

    def _unselect_listener(self) -> None:
        if self.listen_fd is not None and self.listener_selected:
            with contextlib.suppress(KeyError, OSError, ValueError):
                self.selector.unregister(self.listen_fd)
        self.listener_selected = False

    def _on_notifications(self) -> None:
        assert self.housekeeper is not None
        accepting = self.state is State.RUNNING
        notified = self.housekeeper.notified()
        self.wakeups.notified(notified.queues, list(self.children.values()), accepting=accepting)
        enforcement.stop_cancelled(self.children.values(), notified.cancelled, time.monotonic())
        if notified.paused_keys:
            # Any child, busy or not, may hold claimed jobs of the key that its claim took
            # before the pause: it gives them back rather than start them (pause_keys
            # tells only those holding unstarted jobs, a bounded number of lines).
            for child in self.children.values():
                child.pause_keys(notified.paused_keys)

    # -- timing and construction ----------------------------------------------------------

    def _wait_s(self) -> float:
        """Until the nearest deadline: a duty, a lease, a runtime, a respawn, the drain."""
        now = time.monotonic()
        busy = any(child.ledger for child in self.children.values())
        moments = [
            # A reload's load is looked at every BUSY_LOOP_WAIT_S: nothing wakes us
            # when its thread is done.
            now + (BUSY_LOOP_WAIT_S if busy or self.loading is not None else MAX_LOOP_WAIT_S),
            self.housekeeper.next_due_at() if self.housekeeper is not None else None,
            self._next_lapse(),
            enforcement.next_runtime_moment(self.children.values()),
            self.workforce.next_respawn_at(),
            self.drain_deadline,
            self.notifier.next_due_at(),  # the watchdog's next ping
        ]
        return max(0.0, min(m for m in moments if m is not None) - now)

    def _store(self) -> JobStore:
        defaults = self.config.defaults
        backoff = Backoff(base_s=defaults.backoff_base, max_s=defaults.backoff_max)
        # The limits, for WAKE only: a rescue or a settlement of a limited queue's job
        # frees a place, and wakes that queue's idle workers (the supervisor never claims).
        return JobStore(
            self.config.database.schema_name, backoff=backoff, limits=self.config.queue_limits()
        )

    def _housekeeper(self) -> Housekeeper:
        return Housekeeper(
            store=self.store,
            database_url=self.database_url,
            lease_ttl_s=self.config.lease_ttl,
            config=lambda: self.config,
            daemon_id=self.daemon_id,
            listen=self.config.notifications,
            on_disconnect=self._forget_listener,
            answer_by=self._next_lapse,
        )


def _shown(value: object) -> object:
    """A setting as a warning shows it: a section as its keys (http: listen=...)."""
    if isinstance(value, BaseModel):
        return " ".join(f"{key}={item}" for key, item in value.model_dump().items())
    return value


def _what_changed(config: bool, files: list[str]) -> str:
    """What made a reload replace the workers, for its log line."""
    parts = ["the config"] if config else []
    if files:
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        parts.append(f"module files: {shown}")
    return "; ".join(parts) or "the django modules (always)"
