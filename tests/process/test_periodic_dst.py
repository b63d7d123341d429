"""Cron entries in Europe/Berlin across both DST changes, in the real daemon: the
PostgreSQL server runs under libfaketime, started LEAD_S before a slot near a change.
The daemon keeps true time: periodic slots are counted on the database's clock, which
this shows too. (The rules themselves, on a fake clock: tests/unit/test_periodic.py.)"""

from __future__ import annotations

import signal
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgworkerd.storage.embedded import FAST_UNSAFE_SETTINGS, EmbeddedCluster, free_port
from pgworkerd.storage.migrations import migrate
from pgworkerd.storage.store import DEFAULT_SCHEMA
from tests.daemon import HISTORY_TABLE, wait_until
from tests.process.test_faults_clock import LIBFAKETIME
from tests.tools import missing

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def _libfaketime() -> None:
    if not LIBFAKETIME:
        missing("libfaketime is not installed (Debian: apt-get install libfaketime)")


# 02:30 does not exist in Berlin that night; the entry runs at 03:00 CEST instead.
NIGHTLY = {"kind": "noop", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}
# Runs through the change: its slots are every minute of the database's clock.
WILD_HOUR = {"kind": "noop", "cron": "* * * * *", "timezone": "Europe/Berlin", "payload": {"m": 1}}
# The server's clock starts this long before the slot under test. It must cover the
# server's start, the migration and the daemon's start up to its first periodic round
# (which registers the entries: a slot before that is not missed, it never existed),
# ~1.5 s here, and the test waits it out in real time at each start (it was 30 s: a
# minute and a half of the suite's waiting).
LEAD_S = 10


def start_at(cluster: EmbeddedCluster, slot: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    """(Re)start `cluster` with its clock starting LEAD_S before `slot`."""
    moment = slot - timedelta(seconds=LEAD_S)
    faked = {
        "LD_PRELOAD": LIBFAKETIME[0],
        "FAKETIME": f"@{moment:%Y-%m-%d %H:%M:%S}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "TZ": "UTC",
    }
    for key, value in faked.items():
        monkeypatch.setenv(key, value)  # inherited by initdb, pg_ctl and the server
    try:
        cluster.stop()
        cluster.ensure_running()
    finally:
        for key in faked:
            monkeypatch.delenv(key)  # the daemon and this test keep true time


@pytest.fixture
def cluster():
    """A cluster of the test's own, started by start_at."""
    own = EmbeddedCluster(
        base_dir=Path(tempfile.mkdtemp(prefix="pgworkerd-dst-")),
        port=free_port(),
        settings=FAST_UNSAFE_SETTINGS,
    )
    yield own
    own.destroy()


def migrated(cluster: EmbeddedCluster) -> str:
    with psycopg.connect(cluster.dsn()) as conn:
        migrate(conn, DEFAULT_SCHEMA)
        conn.execute(HISTORY_TABLE)
    return cluster.dsn()


def jobs(conn: psycopg.Connection[Any]) -> list[tuple[dict[str, Any], datetime]]:
    rows = conn.execute("SELECT payload, run_at FROM pgworkerd.jobs ORDER BY run_at").fetchall()
    return sorted(rows, key=lambda job: (job[1], len(job[0])))


def run_until(daemons: Any, dsn: str, name: str, enough: Any) -> None:
    """A daemon with both entries, until `enough(jobs)`; then stopped."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        daemon = daemons(dsn, name, periodic=[NIGHTLY, WILD_HOUR])
        wait_until(
            lambda: enough(jobs(conn)),
            60,
            f"{name}: the slots (missed if the daemon was not up within LEAD_S of the server)",
        )
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0


def test_a_skipped_time_runs_once_just_after_the_gap(cluster, daemons, monkeypatch):
    # 2026-03-29 01:00 UTC: Berlin jumps from 02:00 CET to 03:00 CEST.
    at_0100 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    start_at(cluster, at_0100, monkeypatch)
    dsn = migrated(cluster)
    run_until(daemons, dsn, "spring", lambda found: len(found) >= 2)
    with psycopg.connect(dsn) as conn:
        assert jobs(conn) == [({}, at_0100), ({"m": 1}, at_0100)], (
            "02:30 ran once, at 03:00 CEST; the every-minute entry ran at 03:00 CEST too"
        )


def test_a_repeated_time_runs_once(cluster, daemons, monkeypatch):
    # 2026-10-25 01:00 UTC: Berlin goes from 03:00 CEST back to 02:00 CET; 02:30 passes
    # at 00:30 UTC (CEST) and again at 01:30 UTC (CET). A daemon sees each pass.
    first_pass = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    start_at(cluster, first_pass, monkeypatch)
    dsn = migrated(cluster)
    run_until(daemons, dsn, "first-pass", lambda found: len(found) >= 2)
    second_pass = first_pass + timedelta(hours=1)
    start_at(cluster, second_pass, monkeypatch)
    run_until(daemons, dsn, "second-pass", lambda found: found[-1][1] >= second_pass)
    with psycopg.connect(dsn) as conn:
        found = jobs(conn)
    assert [at for payload, at in found if not payload] == [first_pass], "02:30 ran once"
    assert [at for payload, at in found if payload][-1] == second_pass, (
        "an entry with `*` hours runs in the repeated hour too"
    )
