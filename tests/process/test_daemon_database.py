"""The daemon when the database misbehaves: dropped connections, blocked renewals; and
what it shows the world: recycling, JSON logs, no password anywhere."""

from __future__ import annotations

import json
import signal
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgworkerd
from pgworkerd.housekeeping.duties import renewal_interval_s
from tests.daemon import history, job, job_in_state, states, wait_until

ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def terminate_pgworkerd_backends(conn: psycopg.Connection, who: str) -> int:
    return conn.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name LIKE %s",
        (f"pgworkerd {who}%",),
    ).fetchone()[0]


def test_workers_reconnect_after_their_connections_are_killed_and_lose_nothing(
    start_daemon, history_conn
):
    daemon = start_daemon(poll_interval="100ms")
    daemon.wait_for_workers(2)
    first = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}} for _ in range(50)]
    )
    wait_until(lambda: states(history_conn).get("succeeded", 0) >= 10, what="some progress")
    for _ in range(3):
        killed = terminate_pgworkerd_backends(history_conn, "")
        assert killed >= 1
        more = pgworkerd.enqueue_many(
            history_conn, [{"kind": "record", "payload": {}} for _ in range(20)]
        )
        wait_until(job_in_state(history_conn, more[-1], "succeeded"), what="work resumed")
    wait_until(lambda: states(history_conn) == {"succeeded": 110}, what="every job done")
    starts = history_conn.execute(
        "SELECT job_id, count(*) FROM history GROUP BY job_id HAVING count(*) > 1"
    ).fetchall()
    for job_id, count in starts:  # a rerun only where a kill cut an outcome short
        assert job(history_conn, job_id)["attempt"] == count
    assert job(history_conn, first[0])["attempt"] >= 1
    assert "database connection lost" in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_when_renewals_fail_past_the_lease_the_supervisor_stops_the_job(
    start_daemon, history_conn, db_dsn
):
    victim = pgworkerd.enqueue(history_conn, "sleep_first_attempt", {"seconds": 60})
    daemon = start_daemon(workers=ONE_WORKER, lease_ttl="3s")
    daemon.worker_running(victim)
    # Hold the job's row lock: the supervisor's renewals skip the row (SKIP LOCKED), and
    # the job's lease goes unrenewed.
    with psycopg.connect(db_dsn) as blocker:
        blocker.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", (victim,))
        wait_until(
            lambda: "cannot renew leases; stopping their jobs" in daemon.log(),
            timeout_s=15,
            what="the supervisor to stop the unfenced job",
        )
        blocker.rollback()
    wait_until(job_in_state(history_conn, victim, "succeeded"), what="the job to run again")
    row = job(history_conn, victim)
    assert row["attempt"] == 2
    assert (
        "could not renew" in row["errors"][0]["error"]
        or "lease expired" in row["errors"][0]["error"]
    )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_row_lock_on_one_running_job_stops_that_job_alone(start_daemon, history_conn, db_dsn):
    """Review 25 F4: one renewal statement renewed every lease of the daemon, so it
    waited on any of their rows: a producer's open `enqueue(after=[a running job])` (its
    insert locks that row FOR SHARE), an uncommitted cancel or a user's SELECT ... FOR
    UPDATE held longer than 80 % of lease_ttl made the supervisor kill every worker, and
    a job nobody had touched ran again, charged. The renewal now skips a locked row:
    the other leases are renewed, and only the locked job's lease goes unrenewed; its
    worker is killed before that lease can lapse, the job charged and run again."""
    locked = pgworkerd.enqueue(history_conn, "sleep_first_attempt", {"seconds": 30})
    other = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 9})
    daemon = start_daemon(
        workers=[{"queues": ["default"], "concurrency": 2, "batch_size": 1}], lease_ttl="3s"
    )
    locked_worker = daemon.worker_running(locked, started_in=history_conn)
    daemon.worker_running(other, started_in=history_conn)
    with psycopg.connect(db_dsn) as blocker:
        blocker.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR SHARE", (locked,))
        held_since = time.monotonic()
        # Taken once any renewal under way committed: no renewal moves it from here on.
        expires = job(history_conn, locked)["lease_expires_at"]
        locked_worker.wait(timeout=10)
        (fenced,) = history_conn.execute("SELECT clock_timestamp() < %s", (expires,)).fetchone()
        assert fenced, "the locked job's worker was killed before its lease ran out"
        time.sleep(max(0.0, held_since + 7 - time.monotonic()))  # > 2 x lease_ttl
        assert job(history_conn, other)["lease_expires_at"] > expires, "still renewed"
        blocker.rollback()
    wait_until(job_in_state(history_conn, other, "succeeded"), what="the other job to end")
    assert job(history_conn, other)["attempt"] == 1, "the other job was neither killed nor charged"
    assert [event for _, _, event, _, _ in history(history_conn, other)] == ["start", "end"]
    wait_until(job_in_state(history_conn, locked, "succeeded"), what="the locked job to rerun")
    row = job(history_conn, locked)
    assert row["attempt"] == 2
    assert (
        "could not renew" in row["errors"][0]["error"]
        or "lease expired" in row["errors"][0]["error"]
    )
    stopped = [line for line in daemon.log().splitlines() if "cannot renew leases" in line]
    assert stopped and all(f"jobs=[{locked}]" in line for line in stopped), stopped
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


# Long enough that one skipped renewal (two renewal intervals without one, 10 s) stays
# well short of the worker's own stop at 80 % of lease_ttl unrenewed (12 s) on a busy
# machine: with 6 s the margin was 0.8 s.
SKIPPED_LEASE_TTL_S = 15.0


def test_a_lease_skipped_while_its_row_was_locked_is_renewed_once_the_lock_goes(
    start_daemon, history_conn, db_dsn, tmp_path
):
    """A row lock shorter than the lease: the renewals that found the row locked skip
    it, the next one renews it, and the job runs on to its end, once."""
    renewal_s = renewal_interval_s(SKIPPED_LEASE_TTL_S)
    done = tmp_path / "done"  # the job runs until the test has seen both renewals
    held = pgworkerd.enqueue(history_conn, "until_file", {"path": str(done)})
    daemon = start_daemon(workers=ONE_WORKER, lease_ttl=f"{SKIPPED_LEASE_TTL_S:g}s")
    daemon.worker_running(held, started_in=history_conn)
    with psycopg.connect(db_dsn) as blocker:
        blocker.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR SHARE", (held,))
        expires = job(history_conn, held)["lease_expires_at"]
        (locked_at,) = history_conn.execute("SELECT clock_timestamp()").fetchone()
        # The heartbeat is written in the renewal's transaction, before the renewal:
        # one begun after the lock that committed has answered while the row was locked.
        wait_until(
            lambda: history_conn.execute(
                "SELECT max(heartbeat_at) > %s FROM pgworkerd.daemons", (locked_at,)
            ).fetchone()[0],
            timeout_s=2 * renewal_s,
            what="a renewal to answer while the row is locked",
        )
        assert job(history_conn, held)["lease_expires_at"] == expires, "skipped, not renewed"
        blocker.rollback()
    wait_until(
        lambda: job(history_conn, held)["lease_expires_at"] > expires,
        timeout_s=2 * renewal_s,
        what="the next renewal to renew the lease",
    )
    done.touch()
    wait_until(job_in_state(history_conn, held, "succeeded"), what="the job to end")
    assert job(history_conn, held)["attempt"] == 1
    assert [event for _, _, event, _, _ in history(history_conn, held)] == ["start", "end"]
    assert "cannot renew leases" not in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_worker_recycles_itself_after_max_jobs(start_daemon, history_conn):
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}} for _ in range(9)]
    )
    daemon = start_daemon(workers=ONE_WORKER, max_jobs_per_child=3, defaults={"batch_size": 10})
    wait_until(lambda: states(history_conn) == {"succeeded": 9}, what="all jobs")
    pids = history_conn.execute(
        "SELECT pid, count(*) FROM history GROUP BY pid ORDER BY min(id)"
    ).fetchall()
    assert [count for _, count in pids] == [3, 3, 3], pids
    assert all(job(history_conn, i)["attempt"] == 1 for i in ids), "released, not charged"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_json_logs_and_no_password_in_titles_or_logs(start_daemon, history_conn, db_dsn, tmp_path):
    from tests.daemon import Daemon, write_config

    # Trust authentication ignores the password, so the daemon runs with it in its URL.
    parts = conninfo_to_dict(db_dsn)
    secret_url = make_conninfo(db_dsn, password="Sup3rS3cret")
    assert parts.get("password") is None
    config = write_config(tmp_path / "secret.yaml", workers=ONE_WORKER)
    failing = pgworkerd.enqueue(history_conn, "fail", {}, max_attempts=1)
    daemon = Daemon(config, secret_url, tmp_path / "secret.log")
    try:
        wait_until(job_in_state(history_conn, failing, "dead"), what="the job to die")
        titles = " ".join(daemon.titles())
        assert "Sup3rS3cret" not in titles
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
        assert "Sup3rS3cret" not in daemon.log()
    finally:
        daemon.kill_everything()

    json_config = write_config(tmp_path / "json.yaml", workers=ONE_WORKER)
    ok = pgworkerd.enqueue(history_conn, "record", {})
    json_daemon = Daemon(json_config, db_dsn, tmp_path / "json.log", log_format="json")
    try:
        wait_until(job_in_state(history_conn, ok, "succeeded"), what="the job to succeed")
        json_daemon.signal(signal.SIGTERM)
        assert json_daemon.wait() == 0
        events = [json.loads(line) for line in json_daemon.log().splitlines()]
        succeeded = [e for e in events if e["event"] == "job succeeded"]
        assert succeeded and succeeded[0]["job"] == ok and succeeded[0]["attempt"] == 1
        assert {"ts", "level", "pid", "duration_ms", "kind"} <= set(succeeded[0])
    finally:
        json_daemon.kill_everything()


def _blocked_worker_backend(conn: psycopg.Connection) -> int | None:
    row = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'pgworkerd worker%%'"
        " AND cardinality(pg_blocking_pids(pid)) > 0"
    ).fetchone()
    return row[0] if row else None


def test_a_worker_whose_outcome_a_deadlock_rolled_back_writes_it_again_without_reconnecting(
    start_daemon, history_conn, db_dsn
):
    # The worker's completion of `parent` releases `dependent` in a trigger; an
    # application transaction holds `dependent`, then waits for `parent`: a deadlock,
    # which the worker's backend finds first (300 ms; the application's: a minute), so
    # the worker's statement is rolled back. Taken for a lost connection, it was
    # logged as one, and the worker reconnected and warmed up before writing again.
    database = history_conn.info.dbname
    history_conn.execute(f"ALTER DATABASE \"{database}\" SET deadlock_timeout = '300ms'")
    try:
        parent = pgworkerd.enqueue(history_conn, "record", {})
        dependent = pgworkerd.enqueue(history_conn, "record", {}, after=[parent])
        with psycopg.connect(db_dsn) as application:
            application.execute("SET deadlock_timeout = '1min'")
            application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [dependent])
            daemon = start_daemon(workers=ONE_WORKER, poll_interval="100ms")
            worker_pid = wait_until(
                lambda: _blocked_worker_backend(history_conn),
                what="the worker's outcome waiting for the dependent's row",
            )
            # Returns once the worker's statement is rolled back; its next try then
            # waits for this transaction's end.
            application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [parent])
            time.sleep(0.2)
            application.commit()
        wait_until(job_in_state(history_conn, dependent, "succeeded"), what="the dependent ran")
        assert job(history_conn, parent)["state"] == "succeeded"
        assert [row[:3] for row in history(history_conn)] == [
            (parent, 1, "start"),
            (dependent, 1, "start"),
        ], "each ran once"
        log = daemon.log()
        assert "deadlock detected; retrying" in log and "sqlstate=40P01" in log
        assert "database connection lost" not in log
        still = history_conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s", [worker_pid]
        ).fetchone()
        assert still is not None and still[0].startswith("pgworkerd worker"), "no reconnect"
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
    finally:
        history_conn.execute(f'ALTER DATABASE "{database}" RESET deadlock_timeout')
