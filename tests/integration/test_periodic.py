"""Periodic slots against a real server: the compare-and-set that keeps each slot to one
job under racing daemons and after its job is gone, registration of a new entry, and
the catch-up after a gap."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg

from pgworkerd import config
from pgworkerd.config.schedules import due_slots
from pgworkerd.housekeeping import DatabaseSession
from pgworkerd.housekeeping.periodic import PeriodicDuty
from pgworkerd.storage.periodic import enqueue_slot

SCHEMA = "pgworkerd"
T = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def entry(line: str) -> config.PeriodicEntry:
    return config.parse(f"handlers: {{k: m:f}}\nperiodic:\n  - {line}").periodic[0]


def register(conn, key: str, at: datetime) -> None:
    conn.execute(
        "INSERT INTO pgworkerd.periodic_entries (entry_key, last_slot_at) VALUES (%s, %s)",
        (key, at),
    )


def periodic_jobs(conn) -> list[tuple[str, datetime]]:
    return conn.execute("SELECT kind, run_at FROM pgworkerd.jobs ORDER BY run_at, id").fetchall()


def test_racing_daemons_enqueue_each_slot_once(conn, db_dsn):
    every = entry("{kind: k, every: 1s}")
    register(conn, every.key, T)
    slots = [T + timedelta(seconds=i) for i in range(1, 41)]
    racers = 8
    barrier = threading.Barrier(racers)
    won: list[list[int]] = [[] for _ in range(racers)]

    def daemon(index: int) -> None:
        with psycopg.connect(db_dsn, autocommit=True) as own:
            for slot in slots:
                barrier.wait(timeout=30)  # all eight try the same slot at the same moment
                job_id = enqueue_slot(own, SCHEMA, every, slot)
                if job_id is not None:
                    won[index].append(job_id)

    threads = [threading.Thread(target=daemon, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(len(w) for w in won) == len(slots), "one winner a slot"
    assert periodic_jobs(conn) == [("k", slot) for slot in slots], "run_at is the slot"
    assert conn.execute("SELECT last_slot_at FROM pgworkerd.periodic_entries").fetchone() == (
        slots[-1],
    )


def test_a_slot_whose_job_is_gone_is_not_enqueued_again(conn):
    every = entry("{kind: k, every: 1m}")
    register(conn, every.key, T)
    job_id = enqueue_slot(conn, SCHEMA, every, T + timedelta(minutes=1))
    assert job_id is not None
    # Its job ran and was pruned: no unique key, no row left to conflict with.
    conn.execute("DELETE FROM pgworkerd.jobs WHERE id = %s", (job_id,))
    assert enqueue_slot(conn, SCHEMA, every, T + timedelta(minutes=1)) is None, "a late daemon"
    assert enqueue_slot(conn, SCHEMA, every, T) is None, "nor an older slot"
    assert enqueue_slot(conn, SCHEMA, every, T + timedelta(minutes=2)) is not None


def run_duty(db_dsn, entries: list[config.PeriodicEntry]) -> tuple[PeriodicDuty, int | None]:
    duty = PeriodicDuty(SCHEMA)
    duty.configure(entries)
    session = DatabaseSession(database_url=db_dsn, lease_ttl_s=30)
    try:
        return duty, duty.run(session)
    finally:
        session.close()


def test_a_new_entry_starts_from_now_and_slots_missed_in_a_gap_follow_its_policy(conn, db_dsn):
    latest = entry("{kind: k, every: 1m, name: latest, payload: {e: latest}}")
    catch_up = entry("{kind: k, every: 1m, name: all, missed: all, payload: {e: all}}")
    duty, enqueued = run_duty(db_dsn, [latest, catch_up])
    assert enqueued == 0, "registered at first sight: nothing before it was missed"
    assert 0 < (duty.next_due_in_s() or 0) <= 60, "due at the next minute"
    keys = conn.execute("SELECT entry_key FROM pgworkerd.periodic_entries ORDER BY 1").fetchall()
    assert keys == [("name:all",), ("name:latest",)]

    # Every daemon was down for ten and a half minutes.
    conn.execute(
        "UPDATE pgworkerd.periodic_entries SET last_slot_at = last_slot_at - interval '630 s'"
    )
    _, enqueued = run_duty(db_dsn, [latest, catch_up])
    by_entry: dict[str, list[datetime]] = {"latest": [], "all": []}
    for e, run_at in conn.execute(
        "SELECT payload->>'e', run_at FROM pgworkerd.jobs ORDER BY run_at"
    ).fetchall():
        by_entry[e].append(run_at)
    assert len(by_entry["latest"]) == 1, "latest: the newest missed slot only"
    assert len(by_entry["all"]) in (10, 11), "all: each minute slot of the gap"
    assert enqueued == len(by_entry["latest"]) + len(by_entry["all"])
    assert by_entry["all"][-1] == by_entry["latest"][0], "both end at the newest slot"
    steps = {b - a for a, b in zip(by_entry["all"], by_entry["all"][1:], strict=False)}
    assert steps == {timedelta(minutes=1)}
    _, again = run_duty(db_dsn, [latest, catch_up])
    assert again == 0, "a daemon that looks now finds nothing due"


def step_through(conn, entries: list[config.PeriodicEntry], start: datetime, end: datetime):
    """What a daemon does, on a clock stepped a minute at a time from `start` (when the
    entries are registered) to `end`: the due slots, through the real statement."""
    for e in entries:
        register(conn, e.key, start)
    settled: dict[str, datetime] = {}
    moment = start
    while moment <= end:
        for e in entries:
            (last,) = conn.execute(
                "SELECT last_slot_at FROM pgworkerd.periodic_entries WHERE entry_key = %s",
                (e.key,),
            ).fetchone()
            schedule = e.schedule()
            due = due_slots(
                schedule, now=moment, last=last, missed=e.missed, settled=settled.get(e.key)
            )
            for slot in due:
                enqueue_slot(conn, SCHEMA, e, slot)
            settled[e.key] = schedule.latest(moment)
        moment += timedelta(minutes=1)


def run_ats_by_entry(conn) -> dict[str, list[datetime]]:
    found: dict[str, list[datetime]] = {}
    for e, run_at in conn.execute(
        "SELECT payload->>'e', run_at FROM pgworkerd.jobs ORDER BY run_at"
    ).fetchall():
        found.setdefault(e, []).append(run_at)
    return found


BERLIN = [
    '{kind: k, cron: "30 2 * * *", timezone: Europe/Berlin, payload: {e: nightly}}',
    '{kind: k, cron: "*/30 * * * *", timezone: Europe/Berlin, payload: {e: half-hourly}}',
]


def test_cron_in_berlin_on_spring_forward_day(conn):
    # 2026-03-29 01:00 UTC: Berlin jumps from 02:00 CET to 03:00 CEST.
    start = datetime(2026, 3, 28, 23, 0, tzinfo=UTC)
    step_through(conn, [entry(line) for line in BERLIN], start, start + timedelta(hours=4))
    found = run_ats_by_entry(conn)
    assert found["nightly"] == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC)], "02:30 ran at 03:00"
    assert found["half-hourly"] == [start + timedelta(minutes=30 * i) for i in range(1, 9)]


def test_cron_in_berlin_on_fall_back_day(conn):
    # 2026-10-25 01:00 UTC: Berlin goes from 03:00 CEST back to 02:00 CET.
    start = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)
    step_through(conn, [entry(line) for line in BERLIN], start, start + timedelta(hours=4))
    found = run_ats_by_entry(conn)
    assert found["nightly"] == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)], "02:30 ran once"
    assert found["half-hourly"] == [start + timedelta(minutes=30 * i) for i in range(1, 9)], (
        "a wildcard hour runs through the repeated hour"
    )
