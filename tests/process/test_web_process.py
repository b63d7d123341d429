"""A real `pgworkerd web` process over real HTTP: what only the served app does (the
loopback Host check) and what a page does while the database holds it up."""

from __future__ import annotations

import http.client
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

import pgworkerd
from tests.daemon import REPO, daemon_env


def get(url: str, path: str, host: str | None = None, timeout: float = 30) -> tuple[int, bytes]:
    address = url.removeprefix("http://")
    conn = http.client.HTTPConnection(address, timeout=timeout)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host or address)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_another_host_name_is_refused_as_dns_rebinding_would_send_it(dashboards, conn):
    # A page of attacker.example, its name resolved to 127.0.0.1, read the dashboard and
    # ran its actions: its requests carry its own Host, which the origin check trusted.
    job_id = pgworkerd.enqueue(conn, "k", {"secret": "s3"})
    dashboard = dashboards()
    port = dashboard.port

    for host in (f"attacker.example:{port}", "attacker.example", f"10.0.0.1:{port}"):
        status, body = get(dashboard.url, f"/jobs/{job_id}", host=host)
        assert status == 421, (host, status)
        assert b"s3" not in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"127.0.0.2:{port}"):
        status, body = get(dashboard.url, f"/jobs/{job_id}", host=host)
        assert status == 200 and b"s3" in body, (host, status)


def test_with_auth_the_host_is_not_checked(dashboards):
    # Behind a reverse proxy the Host is the proxy's name; credentials guard the pages.
    dashboard = dashboards(
        env={"PGWORKERD_WEB_PASSWORD": "pw-of-the-test"}, auth={"username": "admin"}
    )
    assert dashboard  # it answered (with 401) as it started
    status, _ = get(dashboard.url, "/", host="jobs.example.com")
    assert status == 401


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_it_with_exit_0(dashboards, stop):
    # uvicorn raises the signal again once it has shut down: a TERM was the process's death
    # by that signal (exit -15 here, 143 in a container) and a Ctrl-C "interrupted", exit 1.
    dashboard = dashboards()
    dashboard.proc.send_signal(stop)
    assert dashboard.proc.wait(timeout=20) == 0, dashboard.log_path.read_text()
    log = dashboard.log_path.read_text()
    assert "Traceback" not in log and "interrupted" not in log, log


def test_a_lock_on_the_jobs_table_is_a_503_not_a_hang(dashboards, db_dsn):
    # Every page waited for the lock, holding a thread and a connection each, until the
    # static files too went unanswered.
    dashboard = dashboards()
    locked = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with psycopg.connect(db_dsn) as holder:
            holder.execute("LOCK TABLE pgworkerd.jobs IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        started = time.monotonic()
        status, body = get(dashboard.url, "/jobs")
        waited = time.monotonic() - started
        assert status == 503 and b"did not answer in time" in body, (status, body[:200])
        assert waited < 20, waited
        assert get(dashboard.url, "/static/dashboard.css")[0] == 200
    finally:
        release.set()
        holder.join()
    assert get(dashboard.url, "/jobs")[0] == 200


def test_a_database_without_the_schema_is_refused_at_start(empty_db_dsn, tmp_path: Path):
    # It served, every page a 500 (UndefinedTable), with nothing said at start.
    config = tmp_path / "c.yaml"
    for text in ("{}", "database: {schema: pgworker}"):
        config.write_text(text)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pgworkerd",
                "web",
                "-c",
                str(config),
                "--listen",
                "127.0.0.1:1",
            ],
            env=daemon_env(empty_db_dsn),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not set up: run `pgworkerd migrate`" in lines[0], lines
        assert done.stdout == ""
