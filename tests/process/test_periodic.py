"""Periodic entries in the real daemon against the real server: two daemons on one
entry enqueue each slot once, a daemon back after a gap enqueues the missed slots its
policy allows, a reload brings new entries, and `check` and `status` show the slots."""

from __future__ import annotations

import itertools
import json
import signal
import statistics
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.daemon import BASE_CONFIG, wait_until, write_config
from tests.process.test_cli import assert_one_line_error, pgworkerd

REPO = Path(__file__).resolve().parents[2]
EVERY_SECOND = [{"kind": "noop", "every": "1s"}]
ONE_SECOND = timedelta(seconds=1)


def slots(conn):
    """(run_at, created_at) of every job, by run_at: a periodic job's run_at is its slot."""
    return conn.execute("SELECT run_at, created_at FROM pgworkerd.jobs ORDER BY run_at").fetchall()


def first_slots_succeeded(conn, count: int) -> int:
    """How many of the first `count` slots' jobs have succeeded."""
    return conn.execute(
        "SELECT count(*) FILTER (WHERE state = 'succeeded')"
        " FROM (SELECT state FROM pgworkerd.jobs ORDER BY run_at LIMIT %s) AS first",
        (count,),
    ).fetchone()[0]


def enqueued_lines(daemon) -> int:
    return daemon.log().count("periodic job enqueued")


def stop(*daemons) -> None:
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait() == 0


def test_two_daemons_on_one_entry_enqueue_each_slot_once(start_daemon, history_conn):
    conn = history_conn
    first = start_daemon("a", periodic=EVERY_SECOND)
    second = start_daemon("b", periodic=EVERY_SECOND)
    first.wait_for_workers(2)
    second.wait_for_workers(2)
    wait_until(lambda: len(slots(conn)) >= 1, what="the first slot")
    began = time.monotonic()
    wait_until(lambda: len(slots(conn)) >= 11, 30, "ten more slots")
    elapsed_s = time.monotonic() - began
    # Each ran: checked while both daemons run. After SIGTERM they drain and claim
    # nothing new, so the slot enqueued in the moment before the stop may stay queued.
    wait_until(lambda: first_slots_succeeded(conn, 11) == 11, what="the eleven slots' jobs")
    stop(first, second)

    rows = slots(conn)
    run_ats = [r[0] for r in rows]
    assert len(set(run_ats)) == len(run_ats), "no slot twice"
    assert all(b - a == ONE_SECOND for a, b in itertools.pairwise(run_ats)), (
        "no slot skipped while both ran"
    )
    assert all(at.microsecond == 0 for at in run_ats), "slots on whole seconds, on both daemons"
    assert enqueued_lines(first) + enqueued_lines(second) == len(rows), "each logged by its winner"
    late_ms = [(created - run_at).total_seconds() * 1000 for run_at, created in rows]
    print(
        f"{len(rows)} slots in {elapsed_s:.1f}s; enqueued after the slot by "
        f"median {statistics.median(late_ms):.0f} ms, max {max(late_ms):.0f} ms; "
        f"won by a: {enqueued_lines(first)}, b: {enqueued_lines(second)}"
    )


@pytest.mark.parametrize("missed", ["latest", "all"])
def test_a_daemon_back_after_a_gap_enqueues_what_its_policy_allows(
    start_daemon, history_conn, missed
):
    conn = history_conn
    periodic = [{"kind": "noop", "every": "1s", "missed": missed}]
    before = start_daemon("before", periodic=periodic)
    wait_until(lambda: len(slots(conn)) >= 2, what="two slots")
    stop(before)
    last_before = slots(conn)[-1][0]
    gap_s = 4
    time.sleep(gap_s)  # the outage itself: no daemon runs the entry
    restarted_at = conn.execute("SELECT now()").fetchone()[0]
    after = start_daemon("after", periodic=periodic)
    wait_until(lambda: slots(conn)[-1][0] >= restarted_at + 2 * ONE_SECOND, what="slots again")
    stop(after)

    run_ats = [r[0] for r in slots(conn)]
    assert len(set(run_ats)) == len(run_ats)
    in_gap = [at for at in run_ats if last_before < at < restarted_at]
    if missed == "latest":
        assert len(in_gap) <= 1, f"at most the newest missed slot, got {in_gap}"
    else:
        assert len(in_gap) >= gap_s - 1, "each missed slot"
        assert all(b - a == ONE_SECOND for a, b in itertools.pairwise(run_ats))
    after_restart = [at for at in run_ats if at > restarted_at]
    assert all(b - a == ONE_SECOND for a, b in itertools.pairwise(after_restart))


def test_a_reload_brings_a_new_entry(start_daemon, history_conn, tmp_path):
    daemon = start_daemon("reload")
    daemon.wait_for_workers(2)
    assert slots(history_conn) == []
    write_config(tmp_path / "reload.yaml", periodic=EVERY_SECOND)
    daemon.signal(signal.SIGHUP)
    wait_until(lambda: len(slots(history_conn)) >= 2, what="the new entry's slots")
    stop(daemon)


def test_check_prints_next_run_times_and_refuses_a_bad_expression(db_dsn, tmp_path):
    config = {
        **BASE_CONFIG,
        "periodic": [
            {"kind": "noop", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
            {"kind": "noop", "every": "15m"},
        ],
    }
    path = tmp_path / "pgworkerd.yaml"
    path.write_text(json.dumps(config))
    repo_env = {"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(REPO)}
    result = pgworkerd("check", "-c", str(path), env=repo_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("periodic noop (30 2 * * * Europe/Berlin): next at ")
    assert lines[2].startswith("periodic noop (every 900s): next at ")
    assert lines[1].count(":30:00+00:00") == 3, "three next times, 02:30 Berlin in UTC"

    config["periodic"] = [{"kind": "noop", "cron": "0 25 * * *"}]
    path.write_text(json.dumps(config))
    bad = pgworkerd("check", "-c", str(path), env=repo_env, cwd=tmp_path)
    assert_one_line_error(bad, 2, "periodic[0]: not a valid cron expression: '0 25 * * *'")


def test_status_lists_each_entry_with_its_next_slot(start_daemon, history_conn, db_dsn, tmp_path):
    periodic = [
        {"kind": "noop", "every": "1s", "name": "heartbeat"},
        {"kind": "noop", "cron": "0 8 * * *", "timezone": "Europe/Berlin"},
    ]
    daemon = start_daemon("status", periodic=periodic)
    wait_until(lambda: len(slots(history_conn)) >= 1, what="a slot")
    env = {"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(REPO)}
    config = str(tmp_path / "status.yaml")
    report = json.loads(pgworkerd("status", "--json", "-c", config, env=env).stdout)
    heartbeat, nightly = report["periodic"]
    assert heartbeat["key"] == "name:heartbeat" and heartbeat["schedule"] == "every 1s"
    assert heartbeat["last_slot_at"] is not None and heartbeat["last_job_id"] is not None
    assert heartbeat["next_slot_at"] > heartbeat["last_slot_at"]
    assert nightly["schedule"] == "0 8 * * * Europe/Berlin"
    assert nightly["last_job_id"] is None, "registered, never due yet"
    assert nightly["next_slot_at"].endswith(("T06:00:00+00:00", "T07:00:00+00:00"))
    human = pgworkerd("status", "-c", config, env=env)
    assert human.returncode == 0, human.stderr
    assert "PERIODIC" in human.stdout and "0 8 * * * Europe/Berlin" in human.stdout
    stop(daemon)
