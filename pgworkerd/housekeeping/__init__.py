"""The supervisor's database work, behind one facade: renew its children's leases and
heartbeat, rescue expired leases (of any daemon), prune old rows, settle the jobs of
children that died, and listen for enqueue and cancel notifications.

    session.py        the one connection: short timeouts, reconnects, typed results
    deadline.py       the client-side deadline every round trip runs under
    schedule.py       when a periodic duty is due (pure: the caller brings the time)
    duties.py         renewal + heartbeat, rescue, unregister
    retention.py      pruning finished jobs by state (or archiving them)
    periodic.py       enqueuing the slots of the periodic entries
    settlements.py    the queue of writes for the jobs of dead children
    notifications.py  LISTEN and what it brought
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pgworkerd.channels import cancel_channel
from pgworkerd.config import Config
from pgworkerd.housekeeping import duties, retention
from pgworkerd.housekeeping.duties import Renewal
from pgworkerd.housekeeping.notifications import ALL_QUEUES, Notifications, Notified
from pgworkerd.housekeeping.periodic import PeriodicDuty
from pgworkerd.housekeeping.schedule import Every
from pgworkerd.housekeeping.session import Answer, DatabaseSession, Failure, Result
from pgworkerd.housekeeping.settlements import PendingSettlements, Settlement
from pgworkerd.job import Lease
from pgworkerd.metrics import METRICS
from pgworkerd.store import JobStore

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
        self._configured: Config | None = None  # the config the duties below follow
        self.retention = retention.Policy.from_config(config())
        self.periodic = PeriodicDuty(store.schema)
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
        # Each due at once (the supervisor's first loop turn), then at its interval.
        self.renewal_schedule = Every(duties.renewal_interval_s(lease_ttl_s))
        self.rescue_schedule = Every(duties.rescue_interval_s(lease_ttl_s))
        self.prune_schedule = Every(retention.PRUNE_INTERVAL_S)
        self.sample_schedule = Every(duties.SAMPLE_INTERVAL_S)
        self.sampled_queues: Sequence[str] = ()  # set when the metrics are served
        self.last_renewal_at: float | None = None  # monotonic: the last one that answered

    # -- periodic work --------------------------------------------------------------------

    def next_due_at(self) -> float:
        """The earliest moment (monotonic) a duty is due; -inf: now."""
        return min(
            self.renewal_schedule.next_at,
            self.rescue_schedule.next_at,
            self.prune_schedule.next_at,
            self.sample_schedule.next_at if self.sampled_queues else math.inf,
            self._periodic_due_at(),
        )

    def _periodic_due_at(self) -> float:
        due_in_s = self.periodic.next_due_in_s()
        return math.inf if due_in_s is None else time.monotonic() + due_in_s

    def _follow_config(self) -> None:
        config = self.config()
        if config is not self._configured:
            self._configured = config
            self.retention = retention.Policy.from_config(config)
            self.periodic.configure(config.periodic)

    def run_due(
        self,
        now: float,
        leases: Callable[[], Sequence[Lease]],
        info: Callable[[], dict[str, Any]],
    ) -> Renewal | None:
        """Run each duty due at `now` (monotonic), in this order: renewal (of `leases()`,
        with `info()` in the heartbeat), rescue, periodic slots, prune; then write
        pending settlements.
        The Renewal when a renewal ran and answered, else None."""
        renewal = None
        self._follow_config()
        if self.renewal_schedule.due(now):
            self.renewal_schedule.done(now)
            renewal = duties.renew(
                self.session,
                self.store,
                leases=leases(),
                info=info(),
                daemon_id=self.daemon_id,
                lease_ttl_s=self.lease_ttl_s,
                sent_at=now,
            )
            if renewal is None:
                METRICS.renewals_failed.inc()
            else:
                self.last_renewal_at = now
        if self.rescue_schedule.due(now):
            self.rescue_schedule.done(now)
            duties.rescue(self.session, self.store)
        if self.sampled_queues and self.sample_schedule.due(now):
            self.sample_schedule.done(now)
            sample = duties.sample_queues(self.session, self.store, self.sampled_queues)
            if sample.ok:
                METRICS.queues_sampled(sample.value)
        due_in_s = self.periodic.next_due_in_s()
        if due_in_s is not None and due_in_s <= 0:
            self.periodic.run(self.session)
        if self.prune_schedule.due(now):
            self.prune_schedule.done(now)
            pruned = retention.prune(
                self.session, self.store, self.retention, lease_ttl_s=self.lease_ttl_s
            )
            if pruned.ok and pruned.value.backlog:
                self.prune_schedule.next_at = now + retention.PRUNE_BACKLOG_INTERVAL_S
        self.flush_settlements()
        return renewal

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
