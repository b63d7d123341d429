"""The supervisor's database work, behind one facade: renew its children's leases and
heartbeat, rescue expired leases (of any daemon), prune old rows, settle the jobs of
children that died, and listen for enqueue and cancel notifications.

    session.py        the one connection: short timeouts, reconnects, typed results
    deadline.py       the client-side deadline every round trip runs under
    duty.py           what a duty is: when it is due, a round's run, following the config
    schedule.py       when an interval duty is due (pure: the caller brings the time)
    duties.py         renewal + heartbeat, rescue, queue sampling, unregister
    retention.py      pruning finished jobs by state (or archiving them)
    tidying.py        forgetting ended key pauses and idle debounce/throttle slots
    periodic.py       enqueuing the slots of the periodic entries
    settlements.py    the queue of writes for the jobs of dead children
    notifications.py  LISTEN and what it brought
    cancelling.py     the leases a cancel notification names
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pgworkerd.config import Config
from pgworkerd.housekeeping import duties
from pgworkerd.housekeeping.duties import QueueSampling, Renewal, RenewalDuty, RescueDuty
from pgworkerd.housekeeping.duty import Duty, Round
from pgworkerd.housekeeping.notifications import ALL_QUEUES, Notifications, Notified
from pgworkerd.housekeeping.periodic import PeriodicDuty
from pgworkerd.housekeeping.retention import PruneDuty
from pgworkerd.housekeeping.session import Answer, DatabaseSession, Failure, Result
from pgworkerd.housekeeping.settlements import PendingSettlements, Settlement
from pgworkerd.housekeeping.tidying import TidyingDuty
from pgworkerd.job import Lease
from pgworkerd.storage.channels import cancel_channel
from pgworkerd.storage.store import JobStore

__all__ = [
    "ALL_QUEUES",
    "Answer",
    "DatabaseSession",
    "Failure",
    "Housekeeper",
    "Notified",
    "Renewal",
    "Result",
    "Settlement",
]


class Housekeeper:
    def __init__(
        self,
        *,
        store: JobStore,
        database_url: str,
        lease_ttl_s: float,
        config: Callable[[], Config],  # the running config: the supervisor swaps it on HUP
        daemon_id: str,
        listen: bool = True,
        on_disconnect: Callable[[], None] | None = None,
        answer_by: Callable[[], float | None] = lambda: None,
        session: DatabaseSession | None = None,  # tests inject one; else made here
    ) -> None:
        self.store = store  # assignable: the supervisor swaps it on reload
        self.lease_ttl_s = lease_ttl_s
        self.config = config
        self._configured: Config | None = None  # the config the duties follow
        self.daemon_id = daemon_id
        self.session = session or DatabaseSession(
            database_url=database_url,
            lease_ttl_s=lease_ttl_s,
            listen_channels=(lambda: self._channels()) if listen else None,
            on_disconnect=on_disconnect,
            answer_by=answer_by,
        )
        self.notifications = Notifications(
            self.session, enabled=listen, cancel_channel=cancel_channel(store.schema)
        )
        self.settlements = PendingSettlements()
        self.renewal = RenewalDuty(lease_ttl_s=lease_ttl_s, daemon_id=daemon_id)
        self.rescue = RescueDuty(lease_ttl_s=lease_ttl_s)
        self.sampling = QueueSampling()
        self.periodic = PeriodicDuty(store.schema)
        self.pruning = PruneDuty(config(), lease_ttl_s=lease_ttl_s)
        self.tidying = TidyingDuty()
        # Run in this order when due together: the renewal first (leases are what must
        # not lapse), then the rescue, the metrics sample, periodic slots, pruning, and
        # the tidying of flow control's rows.
        self.duties: tuple[Duty, ...] = (
            self.renewal,
            self.rescue,
            self.sampling,
            self.periodic,
            self.pruning,
            self.tidying,
        )
        self._interval_due: float | None = None  # _interval_due_at's; None: to work out

    # -- periodic work --------------------------------------------------------------------

    def next_due_at(self) -> float:
        """The earliest moment (monotonic) a duty is due; -inf: now."""
        due = self._interval_due_at()
        return min(due, self.periodic.next_at()) if self.periodic.tracked else due

    def _interval_due_at(self) -> float:
        """The earliest next_at of the duties timed by the monotonic clock (all but the
        periodic one, whose slots are wall times): asked on every turn of the loop, and
        worked out again only once one of them ran, followed a config or took queues
        (nothing else moves their schedules)."""
        due = self._interval_due
        if due is None:
            due = self._interval_due = min(
                duty.next_at() for duty in self.duties if duty is not self.periodic
            )
        return due

    def sample_queues(self, queues: Sequence[str]) -> None:
        """Sample these queues for the metrics from now on (none: stop)."""
        self.sampling.queues = list(queues)
        self._interval_due = None

    @property
    def last_renewal_at(self) -> float | None:
        """Monotonic time of the last renewal that answered; None: none yet."""
        return self.renewal.last_answered_at

    def run_due(
        self,
        now: float,
        leases: Callable[[], Sequence[Lease]],
        info: Callable[[], dict[str, Any]],
        spared: Callable[[], Sequence[Lease]] = lambda: (),
    ) -> Renewal | None:
        """Run each duty due at `now` (monotonic), in the order of `duties` (the
        renewal of `leases()`, with `info()` in the heartbeat, first); then write
        pending settlements, or before the rescue when it is due. The rescue leaves
        alone the leases `spared()` names (those our children hold, and of jobs they
        were told not to start, not given back yet) and those of the settlements that
        give a job back uncharged: a lease that lapsed while the database was away is
        not charged for a start never made. The Renewal when a renewal ran and
        answered, else None."""
        config = self.config()
        if config is not self._configured:
            self._configured = config
            for duty in self.duties:
                duty.follow(config)
            self._interval_due = None
        if (
            now < self._interval_due_at()
            and not (self.periodic.tracked and self.periodic.due(now))
            and not self.settlements.due(now)
        ):
            return None  # the loop's usual turn: nothing due, nothing to settle
        settlements = self.settlements

        def all_spared() -> list[Lease]:
            return [*spared(), *settlements.uncharged()]

        round_ = Round(now, self.session, self.store, leases, info, all_spared)
        renewed = False
        for duty in self.duties:
            if duty is self.rescue and settlements.due(now) and duty.due(now):
                # The give-backs first: when the database answers again after an
                # outage, what we give back uncharged is written before any rescue
                # of ours runs (the rescue spares them anyway, until written).
                self.flush_settlements()
            if duty.due(now):
                duty.perform(round_)
                self._interval_due = None
                renewed = renewed or duty is self.renewal
        if self.settlements.due(now):
            self.flush_settlements()
        return self.renewal.answered if renewed else None

    # -- settlements ----------------------------------------------------------------------

    def settle(self, settlements: Iterable[Settlement]) -> None:
        """Queue settlements and write as many as the database takes now."""
        self.settlements.add(settlements)
        self.flush_settlements()

    def flush_settlements(self) -> None:
        self.settlements.flush(self.session, self.store)

    @property
    def pending(self) -> int:
        """How many settlements are not written yet."""
        return len(self.settlements)

    # -- notifications --------------------------------------------------------------------

    def listen_fd(self) -> int | None:
        return self.notifications.listen_fd()

    def notified(self) -> Notified:
        return self.notifications.received()

    def _channels(self) -> tuple[str, str]:
        return self.store.notify_channel, cancel_channel(self.store.schema)

    @property
    def queried_since_drain(self) -> bool:
        """A query ran since notified() last looked: its answer may have brought
        notifications with it, which the socket will not announce again."""
        return self.session.queried_since_drain

    @queried_since_drain.setter
    def queried_since_drain(self, value: bool) -> None:
        self.session.queried_since_drain = value

    # -- the end --------------------------------------------------------------------------

    def unregister(self) -> None:
        duties.unregister(self.session, self.store, self.daemon_id)

    def close(self) -> None:
        self.session.close()
