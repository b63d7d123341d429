"""The daemon when the database misbehaves: dropped connections, blocked renewals; and
what it shows the world: recycling, JSON logs, no password anywhere."""

from __future__ import annotations

import json
import signal

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgworkerd
from tests.daemon import job, job_in_state, states, wait_until

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
    # Hold the job's row lock: the supervisor's renewals time out (statement_timeout).
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
