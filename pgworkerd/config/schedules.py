"""Periodic entries: their schedules and which slots are due. Pure: every function takes
the time from its caller, so the DST rules and the catch-up policy are unit-tested on
a fake clock (tests/unit/test_periodic.py); the database part is
housekeeping/periodic.py.

A *slot* is one moment an entry is scheduled for, as an aware UTC datetime. Every
daemon computes the same slots from the same entry (cron in the entry's timezone;
`every` counted from the Unix epoch), which is what lets the database keep each slot
to one job without a leader.

DST, for a cron entry in a zone that has it (`timezone: Europe/Berlin`):
- a time the clock skips (02:30 on the spring-forward day) runs once, at the first
  moment after the gap (03:00), as Vixie cron does (croniter's rule);
- a time the clock passes twice (02:30 on the fall-back day) runs once, in its first
  pass, unless the hour field is `*`: an entry that runs every hour (or more often)
  keeps running through the repeated hour, since what it counts is elapsed time.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo

Missed = Literal["latest", "all", "none"]

# `missed: none`: a slot is on time (not missed) when found at most this late.
ON_TIME_S = 60.0
# `missed: all`: at most this many slots of one entry per round, the newest ones.
MAX_CATCH_UP = 100


class Schedule(Protocol):
    def latest(self, now: datetime) -> datetime:
        """The newest slot at or before `now`."""
        ...

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after `moment`."""
        ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class EverySchedule:
    """Slots at each multiple of `interval_s` since the Unix epoch (UTC): the same
    instants on every host, whenever each daemon started."""

    interval_s: float

    def latest(self, now: datetime) -> datetime:
        index = math.floor(now.timestamp() / self.interval_s)
        return _utc(index * self.interval_s)

    def next_after(self, moment: datetime) -> datetime:
        index = math.floor(moment.timestamp() / self.interval_s) + 1
        return _utc(index * self.interval_s)

    def describe(self) -> str:
        return f"every {self.interval_s:g}s"


class CronSchedule:
    """Five cron fields read in `timezone` (croniter does the parsing and the
    arithmetic; only the repeated-hour rule above is ours). croniter, and the dateutil
    it brings, are imported by the first cron entry, not with the config: a daemon
    without one does not carry them, nor do the children it forks."""

    __slots__ = ("expression", "hour_wild", "timezone", "zone")

    def __init__(self, expression: str, timezone: str = "UTC") -> None:
        fields = expression.split()
        if len(fields) != 5:
            raise ValueError(f"cron must have five fields, not {len(fields)}: {expression!r}")
        from croniter import croniter

        if not croniter.is_valid(expression):
            raise ValueError(f"not a valid cron expression: {expression!r}")
        self.expression = expression
        self.hour_wild = fields[1] == "*"
        self.timezone = timezone
        self.zone = ZoneInfo(timezone)

    def check_dates(self) -> None:
        """ValueError unless the expression names a date that exists: a valid one may
        not ("0 0 30 2 *": February 30th), and croniter then raises at the first step,
        which crashed the supervisor's periodic duty, `check` and `status`. One step,
        run by the config's validation (not by every schedule made from the entry)."""
        from croniter import CroniterBadDateError  # in sys.modules since __init__

        try:
            self.latest(datetime.now(UTC))
        except CroniterBadDateError:
            raise ValueError(f"cron {self.expression!r} names no date that exists") from None

    def latest(self, now: datetime) -> datetime:
        local = now.astimezone(self.zone)
        # croniter's get_prev is strict: a slot exactly at `now` is found forwards.
        candidate = self._step(local, forwards=False)
        following = self._step(candidate, forwards=True)
        return (following if following <= now else candidate).astimezone(UTC)

    def next_after(self, moment: datetime) -> datetime:
        return self._step(moment.astimezone(self.zone), forwards=True).astimezone(UTC)

    def describe(self) -> str:
        return f"{self.expression} {self.timezone}"

    def _step(self, start: datetime, *, forwards: bool) -> datetime:
        from croniter import croniter  # in sys.modules since __init__: a dict look-up

        it = croniter(self.expression, start)
        while True:
            slot = it.get_next(datetime) if forwards else it.get_prev(datetime)
            # The second pass of a repeated hour (fold=1) is skipped by fixed-hour entries.
            # Read through UTC: croniter marks fold=1 on times that are not ambiguous.
            if self.hour_wild or not slot.astimezone(UTC).astimezone(self.zone).fold:
                return slot

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, {self.timezone!r})"


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def entry_key(
    *, name: str | None, kind: str, schedule: str, queue: str, payload: dict[str, Any]
) -> str:
    """The entry's identity in the database: its `name` when it has one, else a digest
    of what it enqueues and when (so an edited entry is a new entry)."""
    if name is not None:
        return f"name:{name}"
    content = json.dumps(
        {"kind": kind, "schedule": schedule, "queue": queue, "payload": payload},
        sort_keys=True,
        separators=(",", ":"),
    )
    return f"auto:{kind}:{hashlib.sha256(content.encode()).hexdigest()[:16]}"


def due_slots(
    schedule: Schedule,
    *,
    now: datetime,
    last: datetime | None,
    missed: Missed,
    settled: datetime | None = None,
) -> list[datetime]:
    """The slots to enqueue at `now`, oldest first, for an entry whose newest enqueued
    (or registered) slot is `last` (None: unknown), seen by a daemon that has settled
    the slots up to `settled` (None: it just started).

    A slot after `settled` at most ON_TIME_S old is *late*, not missed: the daemon was
    up, its loop merely came late (or another daemon was first); each one is enqueued.
    The others passed while no daemon ran (or reached the database): *missed*, and
    - latest: the newest of them only, and only when no late slot follows it (a daemon
      back from a day away runs a minutely job once, not a day's worth);
    - none: not one (at a start, the newest slot still counts when on time);
    - all: each, oldest first.
    At most MAX_CATCH_UP slots, the newest ones, in any case."""
    newest = schedule.latest(now)
    if last is not None and newest <= last:
        return []
    if last is None:
        candidates = [newest]
    else:
        candidates = list(reversed(list(_back_from(schedule, newest, after=last))))

    def on_time(slot: datetime) -> bool:
        recent = (now - slot).total_seconds() <= ON_TIME_S
        return recent and (slot > settled if settled is not None else slot == newest)

    late = [slot for slot in candidates if on_time(slot)]
    overdue = [slot for slot in candidates if not on_time(slot)]
    if missed == "all":
        return overdue + late
    if missed == "latest" and overdue and not late:
        return [overdue[-1]]
    return late


def _back_from(schedule: Schedule, newest: datetime, *, after: datetime) -> Iterator[datetime]:
    slot = newest
    for _ in range(MAX_CATCH_UP):
        yield slot
        previous = schedule.latest(slot - timedelta(microseconds=1))
        if previous <= after:
            return
        slot = previous


def upcoming(schedule: Schedule, now: datetime, count: int) -> list[datetime]:
    """The next `count` slots after `now` (for `pgworkerd check`)."""
    slots: list[datetime] = []
    moment = now
    for _ in range(count):
        moment = schedule.next_after(moment)
        slots.append(moment)
    return slots
