"""Schema names on a real PostgreSQL: every accepted name works end to end (migrate,
enqueue, claim, the channels of its notifications), and a name PostgreSQL would cut
short, or whose channels it would refuse, is refused before anything is created."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgworkerd
from pgworkerd.client.operations import Operations
from pgworkerd.storage import migrations
from pgworkerd.storage.schema_names import MAX_SCHEMA_BYTES
from pgworkerd.storage.store import JobStore

Conn = psycopg.Connection[Any]

LONGEST = ["s" * 54, "é" * 27]  # 54 bytes of UTF-8 each
TOO_LONG = ["s" * 55, "é" * 28, "é" * 40]  # 55, 56 and 80 bytes (28 and 40 characters)


def migrate_cli(dsn: str, schema: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    env |= {"PGWORKERD_DATABASE_URL": dsn, "PGWORKERD_DATABASE__SCHEMA": schema}
    return subprocess.run(
        [sys.executable, "-m", "pgworkerd", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def schemas(conn: Conn) -> list[str]:
    rows = conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%'"
        " AND nspname NOT IN ('public', 'information_schema') ORDER BY 1"
    )
    return [row[0] for row in rows]


def test_the_limit_is_what_the_longest_channel_leaves() -> None:
    assert MAX_SCHEMA_BYTES == 63 - len(".finished") == 54


@pytest.mark.parametrize("schema", LONGEST)
def test_a_schema_name_of_54_bytes_works_with_every_channel(empty_db_dsn: str, schema: str) -> None:
    assert migrate_cli(empty_db_dsn, schema).returncode == 0
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert schemas(conn) == [schema]  # not cut short
        store = JobStore(schema)
        job_id = pgworkerd.Producer(schema=schema).enqueue(conn, "k", {})  # `<schema>.jobs`
        (job,) = store.claim(conn, queues=["default"], limit=1, lease_ttl_s=30, worker="h:1")
        with pytest.raises(TimeoutError):  # marks the job waited on
            pgworkerd.wait(conn, job_id, timeout=0.1, schema=schema)
        # Completing a waited job notifies `<schema>.finished`, the longest channel.
        assert store.complete(conn, [(job.lease, None)]) == {job_id}
        assert pgworkerd.wait(conn, job_id, timeout=5, schema=schema) == "succeeded"
        other = pgworkerd.Producer(schema=schema).enqueue(conn, "k", {})
        assert store.cancel(conn, [other]) == [other]  # `<schema>.cancel`


@pytest.mark.parametrize("schema", TOO_LONG)
def test_migrate_refuses_a_longer_schema_name_with_one_line(empty_db_dsn: str, schema: str) -> None:
    done = migrate_cli(empty_db_dsn, schema)
    assert done.returncode == 2, done
    size = len(schema.encode())
    assert done.stderr == (
        "pgworkerd: error: environment (PGWORKERD_DATABASE__SCHEMA): database.schema: "
        f"must be at most 54 bytes of UTF-8, got {size}: the notification channel "
        "`<schema>.finished` must fit PostgreSQL's 63-byte names\n"
    )
    with psycopg.connect(empty_db_dsn) as conn:
        assert schemas(conn) == []


@pytest.mark.parametrize("schema", TOO_LONG)
def test_the_python_api_refuses_a_longer_schema_name(empty_db_dsn: str, schema: str) -> None:
    message = f"schema {schema!r}: must be at most 54 bytes of UTF-8"
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with pytest.raises(ValueError, match=message):
            pgworkerd.Producer(schema=schema)
        with pytest.raises(ValueError, match=message):
            JobStore(schema)
        with pytest.raises(ValueError, match=message):
            migrations.migrate(conn, schema)
        assert schemas(conn) == []


@pytest.mark.parametrize("schema", ["jobs%prod", "50%_off", "%(version)s", "%s%%"])
def test_a_percent_in_the_schema_name_is_just_a_character(empty_db_dsn: str, schema: str) -> None:
    done = migrate_cli(empty_db_dsn, schema)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert schemas(conn) == [schema]
        assert migrations.check_version(conn, schema) == migrations.latest_version()
        producer = pgworkerd.Producer(schema=schema)
        first = producer.enqueue(conn, "k", {})  # the barest enqueue (jobs_insert_one)
        keyed = producer.enqueue(conn, "k", {"n": 1}, unique_key="u", priority=5)
        assert producer.enqueue(conn, "k", {"n": 2}, unique_key="u") == keyed
        many = producer.enqueue_many(conn, [{"kind": "k", "payload": {"n": i}} for i in range(3)])
        store = JobStore(schema)
        claimed = store.claim(conn, queues=["default"], limit=10, lease_ttl_s=30, worker="h:1")
        assert sorted(job.id for job in claimed) == sorted([first, keyed, *many])
        waited = next(job for job in claimed if job.id == first)
        with pytest.raises(TimeoutError):  # LISTEN, marks it waited on, UNLISTEN
            pgworkerd.wait(conn, first, timeout=0.1, schema=schema)
        assert store.complete(conn, [(waited.lease, '"ok"')]) == {first}  # FINISHED
        assert pgworkerd.wait(conn, first, timeout=5, schema=schema) == "succeeded"
        assert pgworkerd.result(conn, first, schema=schema) == "ok"
        assert store.cancel(conn, [keyed]) == [keyed]
        operations = Operations(schema)
        status = operations.status(conn)
        assert status["queues"], status
        listed = operations.list_jobs(conn, state="succeeded")
        assert [row["id"] for row in listed] == [first]
        table = conn.execute(
            sql.SQL("SELECT state, count(*) FROM {}.jobs GROUP BY 1 ORDER BY 1").format(
                sql.Identifier(schema)
            )
        ).fetchall()
        assert table == [("cancelled", 1), ("running", 3), ("succeeded", 1)]


def test_migrate_refuses_the_search_path_name_of_the_role_schema(empty_db_dsn: str) -> None:
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        role = conn.execute("SELECT current_user").fetchone()[0]
        # The role's own schema: where `$user` in a search_path leads.
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(role)))
    done = migrate_cli(empty_db_dsn, "$user")
    assert done.returncode == 2, done
    assert done.stderr == (
        "pgworkerd: error: environment (PGWORKERD_DATABASE__SCHEMA): database.schema: "
        "$user names the current role's schema in a search_path, where migrate puts "
        "this schema: its tables would go there; choose another name\n"
    )
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert schemas(conn) == [role]
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (role,))
        assert tables.fetchone() == (0,)
        with pytest.raises(ValueError, match=r"schema '\$user': \$user names"):
            pgworkerd.Producer(schema="$user")
        with pytest.raises(ValueError, match=r"schema '\$user': \$user names"):
            migrations.migrate(conn, "$user")
    # Quoted, as pgworkerd always quotes it, only `$user` itself is special.
    assert migrate_cli(empty_db_dsn, "$USER").returncode == 0
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert migrations.check_version(conn, "$USER") == migrations.latest_version()
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (role,))
        assert tables.fetchone() == (0,)


@pytest.mark.parametrize("schema", ["pg_x", "pg_catalog", "information_schema"])
def test_names_postgresql_keeps_for_itself_are_refused_before_anything(
    empty_db_dsn: str, schema: str
) -> None:
    # pg_x and pg_catalog: a server error, exit 1; information_schema was migrated into.
    done = migrate_cli(empty_db_dsn, schema)
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "pgworkerd: error: environment (PGWORKERD_DATABASE__SCHEMA): database.schema: "
    ), lines
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'migrations'")
        assert tables.fetchone() == (0,)
        with pytest.raises(ValueError, match=f"schema {schema!r}: "):
            pgworkerd.Producer(schema=schema)
        with pytest.raises(ValueError, match=f"schema {schema!r}: "):
            migrations.migrate(conn, schema)
