"""deploy/sql/roles.sql for real: an owner role migrates, a runtime role with only
SELECT/INSERT/UPDATE/DELETE (and USAGE on schema and sequences) runs the daemon, the
producer and the operator's commands end to end, and `pgworkerd migrate` refuses it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgworkerd
from pgworkerd.storage.embedded import find_bin_dir
from tests.daemon import HISTORY_TABLE, job, job_in_state, wait_until

REPO = Path(__file__).resolve().parents[2]
ROLES_SQL = REPO / "deploy" / "sql" / "roles.sql"
ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def psql_roles(admin_dsn: str, owner: str, runtime: str) -> None:
    psql = find_bin_dir() / "psql"
    subprocess.run(
        [
            *(str(psql), "-X", "-q", "-v", "ON_ERROR_STOP=1"),
            *("-v", f"owner={owner}", "-v", f"runtime={runtime}"),
            *("-f", str(ROLES_SQL), admin_dsn),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


def cli(*args: str, dsn: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`cwd`: where the default config file is looked for (config/pgworkerd.yaml); the
    repository's own, the demo's, names only the demo's handlers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    env.update(PGWORKERD_DATABASE_URL=dsn, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "pgworkerd", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def roles(pg_admin_dsn, empty_db_dsn):
    """(owner DSN, runtime DSN, their passwords), made by roles.sql; dropped after."""
    suffix = uuid.uuid4().hex[:8]
    owner, runtime = f"pgw_owner_{suffix}", f"pgw_runtime_{suffix}"
    passwords = {owner: f"owner-secret-{suffix}", runtime: f"runtime-secret-{suffix}"}
    psql_roles(empty_db_dsn, owner, runtime)
    with psycopg.connect(empty_db_dsn, autocommit=True) as admin:
        for role, password in passwords.items():
            admin.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
        admin.execute(HISTORY_TABLE)  # the test handlers' record, written as admin
    yield (
        make_conninfo(empty_db_dsn, user=owner, password=passwords[owner]),
        make_conninfo(empty_db_dsn, user=runtime, password=passwords[runtime]),
        list(passwords.values()),
    )
    # Their privileges and default privileges live in the database: gone with it.
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(psycopg.conninfo.conninfo_to_dict(empty_db_dsn)["dbname"])
            )
        )
        for role in passwords:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def migrations_table(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT to_regclass('pgworkerd.migrations') IS NOT NULL").fetchone()[0]


def test_the_runtime_role_runs_everything_but_migrations(roles, empty_db_dsn, daemons, tmp_path):
    owner_dsn, runtime_dsn, passwords = roles
    outputs: list[str] = []

    # Migrations refuse the runtime role before anything is created: one line, exit 1.
    refused = cli("migrate", dsn=runtime_dsn)
    outputs.append(refused.stdout + refused.stderr)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1
    assert "may not migrate schema 'pgworkerd'" in refused.stderr
    assert "owner role" in refused.stderr and "Traceback" not in refused.stderr
    assert not migrations_table(empty_db_dsn)

    migrated = cli("migrate", dsn=owner_dsn)
    outputs.append(migrated.stdout + migrated.stderr)
    assert migrated.returncode == 0, migrated.stderr
    psql_roles(empty_db_dsn, *_roles_of(owner_dsn, runtime_dsn))  # again: idempotent
    again = cli("migrate", dsn=runtime_dsn)  # refused after the migration too
    outputs.append(again.stdout + again.stderr)
    assert again.returncode == 1 and "may not migrate" in again.stderr

    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        # Only what it needs: no DDL, no writing the schema version.
        for statement in (
            "CREATE TABLE pgworkerd.extra (x int)",
            "INSERT INTO pgworkerd.migrations (version, name) VALUES (999, 'x')",
            "TRUNCATE pgworkerd.jobs",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)

        # The daemon, as the runtime role, end to end.
        daemon = daemons(
            runtime_dsn,
            history_dsn=empty_db_dsn,
            workers=ONE_WORKER,
            defaults={"max_attempts": 2, "backoff_base": "100ms", "backoff_max": "200ms"},
        )
        daemon.wait_for_workers(1)
        ok = pgworkerd.enqueue(conn, "noop", {})
        flaky = pgworkerd.enqueue(conn, "fail_then_succeed", {"succeed_at": 2})
        failing = pgworkerd.enqueue(conn, "fail", {})
        [many] = pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {"n": 1}}])
        # Not from the repository, whose config names the demo's handlers alone.
        enqueued = cli("enqueue", "noop", "--payload", "{}", dsn=runtime_dsn, cwd=tmp_path)
        outputs.append(enqueued.stdout + enqueued.stderr)
        assert enqueued.returncode == 0, enqueued.stderr
        by_cli = int(enqueued.stdout)
        later = pgworkerd.enqueue(conn, "noop", {}, delay=3600)

        for job_id in (ok, flaky, many, by_cli):
            wait_until(job_in_state(conn, job_id, "succeeded"), what=f"job {job_id}")
        wait_until(job_in_state(conn, failing, "dead"), what="the failing job dead")
        assert job(conn, flaky)["attempt"] == 2
        assert job(conn, failing)["attempt"] == 2

        cancelled = cli("jobs", "cancel", str(later), dsn=runtime_dsn)
        outputs.append(cancelled.stdout + cancelled.stderr)
        assert cancelled.returncode == 0, cancelled.stderr
        assert job(conn, later)["state"] == "cancelled"
        retried = cli("jobs", "retry", str(failing), dsn=runtime_dsn)
        outputs.append(retried.stdout + retried.stderr)
        assert retried.returncode == 0, retried.stderr
        wait_until(job_in_state(conn, failing, "dead"), what="the retried job dead again")

        status = cli("status", "--json", dsn=runtime_dsn)
        outputs.append(status.stdout + status.stderr)
        assert status.returncode == 0, status.stderr
        assert '"succeeded"' in status.stdout

        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout_s=20) == 0
        assert conn.execute("SELECT count(*) FROM pgworkerd.daemons").fetchone()[0] == 0

    log = daemon.log()
    assert "permission denied" not in log
    assert "supervisor stopped" in log
    for text in [*outputs, log]:
        for password in passwords:
            assert password not in text


def _roles_of(owner_dsn: str, runtime_dsn: str) -> tuple[str, str]:
    info = psycopg.conninfo.conninfo_to_dict
    return str(info(owner_dsn)["user"]), str(info(runtime_dsn)["user"])


def test_migrate_refuses_a_role_that_may_not_create_the_schema(pg_admin_dsn, empty_db_dsn):
    """No roles.sql at all: a plain login role on a database with no schema yet."""
    role = f"pgw_plain_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_db_dsn, autocommit=True) as admin:
        # PUBLIC has CONNECT and TEMP on a database, not CREATE.
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        refused = cli("migrate", dsn=make_conninfo(empty_db_dsn, user=role))
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            f"pgworkerd: error: role '{role}' may not migrate schema 'pgworkerd': it has no "
            "CREATE privilege on the database; run `pgworkerd migrate` as the schema's "
            "owner role (see docs/deploy.md)"
        )
        with psycopg.connect(empty_db_dsn) as conn:
            absent = conn.execute("SELECT to_regnamespace('pgworkerd') IS NULL").fetchone()[0]
        assert absent
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
