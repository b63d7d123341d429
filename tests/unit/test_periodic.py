"""Periodic slots on a fake clock: `every` and cron schedules, DST in Europe/Berlin,
the catch-up policies, entry keys, and when the duty wants its next round."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgworkerd import config
from pgworkerd.config import schedules
from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.config.schedules import CronSchedule, EverySchedule, due_slots, upcoming
from pgworkerd.housekeeping.periodic import CLOCK_REFRESH_S, RETRY_S, PeriodicDuty
from tests.fresh_python import printed_by_new_python


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# -- every --------------------------------------------------------------------------------


def test_every_counts_from_the_epoch_so_every_host_has_the_same_slots() -> None:
    every = EverySchedule(30.0)
    assert every.latest(utc(2026, 1, 1, 12, 0, 44)) == utc(2026, 1, 1, 12, 0, 30)
    assert every.latest(utc(2026, 1, 1, 12, 0, 30)) == utc(2026, 1, 1, 12, 0, 30), "inclusive"
    assert every.next_after(utc(2026, 1, 1, 12, 0, 30)) == utc(2026, 1, 1, 12, 1, 0), "strict"


# -- cron and DST -------------------------------------------------------------------------


def test_cron_reads_its_fields_in_its_timezone() -> None:
    daily = CronSchedule("0 8 * * *", "Europe/Berlin")
    # 08:00 in Berlin is 07:00 UTC in winter (CET) and 06:00 UTC in summer (CEST).
    assert daily.next_after(utc(2026, 1, 10, 0, 0)) == utc(2026, 1, 10, 7, 0)
    assert daily.next_after(utc(2026, 7, 10, 0, 0)) == utc(2026, 7, 10, 6, 0)
    assert daily.latest(utc(2026, 7, 10, 6, 0)) == utc(2026, 7, 10, 6, 0), "inclusive"
    assert daily.latest(utc(2026, 7, 10, 5, 59)) == utc(2026, 7, 9, 6, 0)


def test_a_time_the_clock_skips_runs_once_just_after_the_gap() -> None:
    # 2026-03-29: Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 does not exist.
    nightly = CronSchedule("30 2 * * *", "Europe/Berlin")
    slots = upcoming(nightly, utc(2026, 3, 28, 12, 0), 3)
    assert slots == [
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, the first moment after the gap
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]


def test_a_time_the_clock_passes_twice_runs_once() -> None:
    # 2026-10-25: Berlin goes from 03:00 CEST back to 02:00 CET; 02:30 happens twice.
    nightly = CronSchedule("30 2 * * *", "Europe/Berlin")
    slots = upcoming(nightly, utc(2026, 10, 24, 12, 0), 3)
    assert slots == [
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST, the first pass
        utc(2026, 10, 26, 1, 30),  # 02:30 CET the next day: the second pass was skipped
        utc(2026, 10, 27, 1, 30),
    ]
    # Seen from inside the repeated hour, the slot is the first pass's.
    assert nightly.latest(utc(2026, 10, 25, 1, 45)) == utc(2026, 10, 25, 0, 30)


def test_an_entry_with_a_wildcard_hour_runs_through_the_repeated_hour() -> None:
    half_hourly = CronSchedule("*/30 * * * *", "Europe/Berlin")
    slots = upcoming(half_hourly, utc(2026, 10, 24, 23, 50), 5)
    # 02:00 and 02:30 CEST, then 02:00 and 02:30 CET: elapsed time, every 30 minutes.
    assert slots == [utc(2026, 10, 25, 0, 0) + timedelta(minutes=30 * i) for i in range(5)]


def test_bad_expressions_are_refused() -> None:
    for bad in ("61 * * * *", "* * * *", "* * * * * *", "every day", "* * 32 * *"):
        with pytest.raises(ValueError):
            CronSchedule(bad)


# -- which slots are due ------------------------------------------------------------------

MINUTELY = EverySchedule(60.0)
NOW = utc(2026, 5, 1, 12, 0, 5)


def test_latest_enqueues_one_slot_however_long_the_gap() -> None:
    assert due_slots(MINUTELY, now=NOW, last=utc(2026, 5, 1, 9, 0), missed="latest") == [
        utc(2026, 5, 1, 12, 0)
    ]
    assert due_slots(MINUTELY, now=NOW, last=utc(2026, 5, 1, 12, 0), missed="latest") == []
    assert due_slots(MINUTELY, now=NOW, last=None, missed="latest") == [utc(2026, 5, 1, 12, 0)]


def test_all_enqueues_every_missed_slot_oldest_first_up_to_the_cap() -> None:
    last = utc(2026, 5, 1, 11, 57)
    assert due_slots(MINUTELY, now=NOW, last=last, missed="all") == [
        utc(2026, 5, 1, 11, 58),
        utc(2026, 5, 1, 11, 59),
        utc(2026, 5, 1, 12, 0),
    ]
    long_ago = utc(2026, 4, 1)
    slots = due_slots(MINUTELY, now=NOW, last=long_ago, missed="all")
    assert len(slots) == schedules.MAX_CATCH_UP
    assert slots[-1] == utc(2026, 5, 1, 12, 0) and slots == sorted(slots), "the newest ones"


def test_none_enqueues_only_a_slot_that_is_on_time() -> None:
    last = utc(2026, 5, 1, 9, 0)
    assert due_slots(MINUTELY, now=NOW, last=last, missed="none") == [utc(2026, 5, 1, 12, 0)]
    late = NOW + timedelta(seconds=schedules.ON_TIME_S)
    assert due_slots(EverySchedule(3600.0), now=late, last=last, missed="none") == []


def test_a_running_daemon_that_comes_late_enqueues_each_slot_it_passed() -> None:
    every = EverySchedule(1.0)
    now = utc(2026, 5, 1, 12, 0, 1) + timedelta(milliseconds=500)
    settled = utc(2026, 5, 1, 11, 59, 58)  # its loop was held up for three slots
    expected = [utc(2026, 5, 1, 11, 59, 59), utc(2026, 5, 1, 12, 0), utc(2026, 5, 1, 12, 0, 1)]
    for missed in ("latest", "none", "all"):
        assert due_slots(every, now=now, last=settled, missed=missed, settled=settled) == expected
    # The same gap seen by a daemon that just started: slots missed, not late.
    assert due_slots(every, now=now, last=settled, missed="latest") == [expected[-1]]


def test_slots_passed_in_a_long_outage_are_missed_even_for_a_running_daemon() -> None:
    last = utc(2026, 5, 1, 11, 50)
    outage = {"now": NOW, "last": last, "settled": last}
    assert due_slots(MINUTELY, missed="latest", **outage) == [utc(2026, 5, 1, 12, 0)]
    assert len(due_slots(MINUTELY, missed="all", **outage)) == 10
    nightly = CronSchedule("0 3 * * *")
    day_ago = utc(2026, 4, 30, 12)
    away = {"now": NOW, "last": day_ago, "settled": day_ago}
    assert due_slots(nightly, missed="latest", **away) == [utc(2026, 5, 1, 3, 0)]
    assert due_slots(nightly, missed="none", **away) == []


def test_an_entry_key_is_its_name_or_its_content() -> None:
    base = {"kind": "k", "schedule": "every 60s", "queue": "default", "payload": {"a": 1}}
    assert schedules.entry_key(name="nightly", **base) == "name:nightly"  # type: ignore[arg-type]
    auto = schedules.entry_key(name=None, **base)  # type: ignore[arg-type]
    assert auto == schedules.entry_key(name=None, **{**base, "payload": {"a": 1}})  # type: ignore[arg-type]
    assert auto != schedules.entry_key(name=None, **{**base, "payload": {"a": 2}})  # type: ignore[arg-type]


# -- the duty's next round ----------------------------------------------------------------


class FakeWall:
    def __init__(self, at: datetime) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now


def entries(text: str) -> list[PeriodicEntry]:
    return list(config.parse("handlers: {k: m:f}\nperiodic:\n" + text).periodic)


def settle(duty: PeriodicDuty, indexes: list[int], offset_s: float = 0.0) -> None:
    """What a round that answered leaves behind: the database clock read (`offset_s`
    ahead of ours), the due slot of each entry at `indexes` settled."""
    duty.clock_offset_s, duty.clock_read_at = offset_s, duty.wall()
    for index in indexes:
        tracked = duty.tracked[index]
        tracked.tried = tracked.schedule.latest(duty.now())
    duty.due_at = None


def test_the_duty_is_due_at_once_then_at_each_slot() -> None:
    wall = FakeWall(utc(2026, 5, 1, 12) + timedelta(milliseconds=200))
    duty = PeriodicDuty("pgworkerd", wall=wall)
    assert duty.next_due_in_s() is None, "no entries"
    duty.configure(entries("  - {kind: k, every: 1s}\n  - {kind: k, every: 10s}"))
    assert duty.next_due_in_s() == 0.0, "first round at once: registers the entries"
    settle(duty, [0, 1])
    assert duty.next_due_in_s() == pytest.approx(0.8), "the next 1 s slot"
    wall.now += 0.8
    assert duty.next_due_in_s() == pytest.approx(0.0)
    settle(duty, [0])  # a round at 12:00:01 settled the 1 s entry's slot
    assert duty.next_due_in_s() == pytest.approx(1.0)
    wall.now += 10 * CLOCK_REFRESH_S
    assert (duty.next_due_in_s() or 1) <= 0, "slots passed (and the clock wants reading)"


def test_the_duty_counts_on_the_database_clock() -> None:
    wall = FakeWall(utc(2026, 5, 1, 12, 0, 0))
    duty = PeriodicDuty("pgworkerd", wall=wall)
    duty.configure(entries("  - {kind: k, every: 10s}"))
    settle(duty, [0], offset_s=3.0)  # the database is 3 s ahead: its 12:00:03
    assert duty.next_due_in_s() == pytest.approx(7.0), "12:00:10 on its clock"


def test_a_failed_round_is_tried_again_a_second_later() -> None:
    wall = FakeWall(NOW)
    duty = PeriodicDuty("pgworkerd", wall=wall)
    duty.configure(entries("  - {kind: k, every: 1m}"))
    duty.retry_at, duty.due_at = wall.now + RETRY_S, None  # as run() leaves a failure
    assert duty.next_due_in_s() == pytest.approx(RETRY_S)


def test_reconfiguring_keeps_what_an_unchanged_entry_settled() -> None:
    duty = PeriodicDuty("pgworkerd", wall=FakeWall(NOW))
    duty.configure(entries("  - {kind: k, every: 1s}\n  - {kind: k, every: 1m, name: n}"))
    settled = utc(2026, 5, 1, 12)
    for tracked in duty.tracked:
        tracked.tried = settled
    duty.configure(entries("  - {kind: k, every: 1s}\n  - {kind: k, every: 2m, name: n}"))
    assert [t.tried for t in duty.tracked] == [settled, None], "the edited one starts over"
    assert duty.clock_offset_s is None, "a round at once, to register it"


def test_croniter_is_imported_by_the_first_cron_entry_not_by_the_config() -> None:
    """A daemon without cron entries (and the workers it forks) does without croniter
    and the dateutil it brings."""
    code = (
        "import sys; import pgworkerd.config.settings; "
        "from pgworkerd.config.schedules import CronSchedule, EverySchedule; "
        "EverySchedule(60.0); print('croniter' in sys.modules, end=' '); "
        "CronSchedule('0 3 * * *'); print('croniter' in sys.modules)"
    )
    assert printed_by_new_python(code) == ["False", "True"]
