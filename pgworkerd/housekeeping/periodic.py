"""The periodic entries' duty: enqueue each slot's job when it comes (the slots are
computed by config/schedules.py; the once-only guarantee is periodic_enqueue's
compare-and-set in storage/sql/queries.sql; the statements: storage/periodic.py).

Every daemon runs every entry of its config; none is elected. Each wakes at a slot
(the supervisor's loop sleeps until next_due_at), tries to enqueue it, and one
transaction wins. Times are read on the database clock: the local clock is only used
to count from the last reading of the database's (`clock_offset_s`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from pgworkerd import logs
from pgworkerd.config import Config, schedules
from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.housekeeping.duty import NEVER, Round
from pgworkerd.housekeeping.session import DatabaseSession
from pgworkerd.storage.periodic import enqueue_slot, last_slots, register_entries

log = logging.getLogger("pgworkerd.supervisor")

RETRY_S = 1.0  # after the database did not answer, try again this soon
# Read the database clock again at least this often (a cheap statement), so a local
# clock that drifts or steps does not move the slots by more than its drift over it.
CLOCK_REFRESH_S = 60.0


@dataclass
class _Tracked:
    entry: PeriodicEntry
    schedule: schedules.Schedule = field(init=False)
    tried: datetime | None = None  # newest slot this daemon has settled (won or lost)

    def __post_init__(self) -> None:
        self.schedule = self.entry.schedule()


@dataclass
class PeriodicDuty:
    schema: str
    wall: Callable[[], float] = time.time  # seconds since the epoch; tests bring their own
    tracked: list[_Tracked] = field(default_factory=list)
    clock_offset_s: float | None = None  # database clock minus ours; None: not read yet
    clock_read_at: float = -1e18  # our wall time of that reading
    retry_at: float | None = None  # wall: after a failed round
    entries: Sequence[PeriodicEntry] = ()
    # Our wall time of the next round, worked out once after each round: the loop asks
    # on every turn, and cron arithmetic is not free. None: work it out at the next ask.
    due_at: float | None = None

    def configure(self, entries: Sequence[PeriodicEntry]) -> None:
        """Take (a reloaded config's) entries. An entry unchanged keeps what this daemon
        settled of it; a new or edited one is registered at the next round."""
        if tuple(entries) == self.entries:
            return
        before = {t.entry.key: t for t in self.tracked}
        self.entries = tuple(entries)
        self.tracked = [
            before[e.key] if e.key in before and before[e.key].entry == e else _Tracked(e)
            for e in entries
        ]
        self.clock_offset_s = None  # a round at once: registers the new entries
        self.due_at = None

    # -- timing -------------------------------------------------------------------------

    def now(self) -> datetime:
        """The database's time, as our clock counts from its last reading."""
        return datetime.fromtimestamp(self.wall() + (self.clock_offset_s or 0.0), UTC)

    def next_due_in_s(self) -> float | None:
        """Seconds until the next round is due (≤ 0: now); None: no entries."""
        if not self.tracked:
            return None
        if self.due_at is None:
            self.due_at = self._next_round_at()
        return self.due_at - self.wall()

    def _next_round_at(self) -> float:
        """Our wall time of the next round: at once when an entry has a slot not
        settled; else at the nearest next slot, or to read the clock again; never
        before a failed round's retry."""
        wall = self.wall()
        if self.clock_offset_s is None:
            due_at = wall
        else:
            now = self.now()
            nearest = min(
                t.schedule.next_after(now) if self._settled(t, now) else now for t in self.tracked
            )
            due_at = min(
                nearest.timestamp() - self.clock_offset_s, self.clock_read_at + CLOCK_REFRESH_S
            )
        return max(due_at, self.retry_at) if self.retry_at is not None else due_at

    def _settled(self, tracked: _Tracked, now: datetime) -> bool:
        return tracked.tried is not None and tracked.schedule.latest(now) <= tracked.tried

    # -- the round ----------------------------------------------------------------------

    # -- as a Duty (duty.py) ------------------------------------------------------------

    def next_at(self) -> float:
        due_in_s = self.next_due_in_s()
        return NEVER if due_in_s is None else time.monotonic() + due_in_s

    def due(self, now: float) -> bool:
        # On our wall clock, not the loop's monotonic `now`: the slots are wall times.
        due_in_s = self.next_due_in_s()
        return due_in_s is not None and due_in_s <= 0

    def perform(self, round_: Round) -> None:
        self.run(round_.session)

    def follow(self, config: Config) -> None:
        self.configure(config.periodic)

    def run(self, session: DatabaseSession) -> int | None:
        """Enqueue whatever slot is due; how many jobs this daemon enqueued (None: the
        database did not answer; the round is tried again in RETRY_S)."""
        result = session.attempt("periodic", self._round)
        self.retry_at = None if result.ok else self.wall() + RETRY_S
        self.due_at = None
        return result.value if result.ok else None

    def _round(self, conn: psycopg.Connection[Any]) -> int:
        database_now = register_entries(conn, self.schema, [t.entry.key for t in self.tracked])
        read_at = self.wall()
        self.clock_offset_s, self.clock_read_at = database_now.timestamp() - read_at, read_at
        now = self.now()
        due = [t for t in self.tracked if not self._settled(t, now)]
        if not due:
            return 0
        last = last_slots(conn, self.schema, [t.entry.key for t in due])
        enqueued = 0
        for tracked in due:
            entry = tracked.entry
            slots = schedules.due_slots(
                tracked.schedule,
                now=now,
                last=last.get(entry.key),
                missed=entry.missed,
                settled=tracked.tried,
            )
            for slot in slots:
                job_id = enqueue_slot(conn, self.schema, entry, slot)
                if job_id is not None:  # else another daemon enqueued it (or a newer one)
                    enqueued += 1
                    logs.event(
                        log,
                        logging.INFO,
                        "periodic job enqueued",
                        job=job_id,
                        kind=entry.kind,
                        slot=slot.isoformat(),
                        late_s=round(max(0.0, (self.now() - slot).total_seconds()), 3),
                    )
            tracked.tried = tracked.schedule.latest(now)
        return enqueued
