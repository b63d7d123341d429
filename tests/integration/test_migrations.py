"""Schema migrations: idempotent, all-or-nothing, safe from several hosts at once, and
a schema built in one go equals one upgraded version by version."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgworkerd.errors import SchemaError
from pgworkerd.storage import migrations, queries
from pgworkerd.storage.migrations import Migration
from tests.integration.test_schema_names import migrate_cli


def describe_schema(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[Any]]:
    """Tables, columns, constraints (of tables and of domains), indexes and storage
    options, names without schema."""

    def rows(query: str) -> list[Any]:
        return conn.execute(query, {"s": schema}).fetchall()

    return {
        "columns": rows("""
            SELECT table_name, column_name, data_type, is_nullable, column_default,
                   is_identity, identity_generation
            FROM information_schema.columns WHERE table_schema = %(s)s
            ORDER BY table_name, ordinal_position"""),
        # A constraint's text names a type of the schema with the schema (0015's cast).
        "constraints": rows("""
            SELECT r.relname, c.conname,
                   replace(pg_get_constraintdef(c.oid), %(s)s || '.', '')
            FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
            JOIN pg_class r ON r.oid = c.conrelid
            WHERE n.nspname = %(s)s ORDER BY 2"""),
        "domain_constraints": rows("""
            SELECT t.typname, c.conname, pg_get_constraintdef(c.oid)
            FROM pg_constraint c JOIN pg_type t ON t.oid = c.contypid
            JOIN pg_namespace n ON n.oid = t.typnamespace
            WHERE n.nspname = %(s)s ORDER BY 1, 2"""),
        "indexes": rows("""
            SELECT tablename, indexname, replace(indexdef, %(s)s || '.', '')
            FROM pg_indexes WHERE schemaname = %(s)s ORDER BY indexname"""),
        "options": rows("""
            SELECT c.relname, c.reloptions FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %(s)s AND c.relkind = 'r' ORDER BY 1"""),
    }


def test_migrate_is_idempotent(empty_db_dsn):
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert migrations.current_version(conn, "pgworkerd") is None
        applied = migrations.migrate(conn, "pgworkerd")
        assert [m.version for m in applied] == [m.version for m in migrations.available()]
        assert migrations.migrate(conn, "pgworkerd") == []
        assert migrations.check_version(conn, "pgworkerd") == migrations.latest_version()
        recorded = conn.execute("SELECT count(*) FROM pgworkerd.migrations").fetchone()[0]
        assert recorded == len(migrations.available())


def test_schema_built_at_once_equals_schema_upgraded_step_by_step(empty_db_dsn):
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrations.migrate(conn, "at_once")
        for migration in migrations.available():
            migrations.migrate(conn, "stepwise", target=migration.version)
            assert migrations.current_version(conn, "stepwise") == migration.version
        assert describe_schema(conn, "at_once") == describe_schema(conn, "stepwise")
        assert describe_schema(conn, "at_once")["columns"], "the comparison saw no tables"


def test_a_failing_migration_changes_nothing(empty_db_dsn, monkeypatch):
    good = migrations.available()
    broken = Migration(
        version=good[-1].version + 1,
        name="broken",
        sql_text="CREATE TABLE half_done (x int); SELECT 1/0;",
    )
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrations.migrate(conn, "pgworkerd")
        before = describe_schema(conn, "pgworkerd")
        monkeypatch.setattr(migrations, "available", lambda: [*good, broken])
        with pytest.raises(psycopg.errors.DivisionByZero):
            migrations.migrate(conn, "pgworkerd")
        assert describe_schema(conn, "pgworkerd") == before
        assert migrations.current_version(conn, "pgworkerd") == good[-1].version
        assert conn.execute("SELECT to_regclass('pgworkerd.half_done')").fetchone()[0] is None


def test_concurrent_migrate_commands_from_several_hosts(empty_db_dsn):
    env = {**os.environ, "PGWORKERD_DATABASE_URL": empty_db_dsn}
    env.pop("PGWORKERD_CONFIG", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pgworkerd", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    for proc in procs:
        proc.stdout.close()
        proc.stderr.close()
    assert [code for code, _, _ in results] == [0] * 6, results
    outputs = sorted(out for _, out, _ in results)
    assert sum("migrated to version" in out for out in outputs) == 1, outputs
    assert sum("up to date" in out for out in outputs) == 5, outputs
    with psycopg.connect(empty_db_dsn) as conn:
        assert migrations.check_version(conn, "pgworkerd") == migrations.latest_version()


def test_check_version_names_what_to_do(empty_db_dsn):
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with pytest.raises(SchemaError, match="run `pgworkerd migrate`"):
            migrations.check_version(conn, "pgworkerd")
        migrations.migrate(conn, "pgworkerd")
        conn.execute("INSERT INTO pgworkerd.migrations (version, name) VALUES (9999, 'future')")
        with pytest.raises(SchemaError, match="newer than this pgworkerd"):
            migrations.check_version(conn, "pgworkerd")


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_a_migrate_that_waited_for_another_sees_it_whatever_the_default_isolation(
    empty_db_dsn: str, level: str
) -> None:
    with psycopg.connect(empty_db_dsn, autocommit=True) as admin:
        dbname = admin.info.dbname
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = {}").format(
                sql.Identifier(dbname), sql.Literal(level)
            )
        )
    statements = queries.statements("pgworkerd")
    with psycopg.connect(empty_db_dsn) as first, psycopg.connect(empty_db_dsn) as waiting:
        assert first.execute("SHOW transaction_isolation").fetchone() == (level,)
        first.rollback()
        # The first host holds the lock (as its migrate does) while the second starts.
        first.execute(statements["migrations_lock"], {"schema_name": "pgworkerd"})
        with ThreadPoolExecutor(1) as pool:
            second = pool.submit(migrations.migrate, waiting, "pgworkerd")
            with psycopg.connect(empty_db_dsn, autocommit=True) as watcher:
                deadline = time.monotonic() + 10
                while not watcher.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()[0]:
                    assert time.monotonic() < deadline, "the second migrate never waited"
                    time.sleep(0.02)
            applied = migrations.migrate(first, "pgworkerd")  # in its transaction, locked
            first.commit()
            assert [m.version for m in applied] == [m.version for m in migrations.available()]
            assert second.result(timeout=30) == []  # it saw the first one's migrations
        waiting.commit()
        assert migrations.check_version(waiting, "pgworkerd") == migrations.latest_version()


def test_migrate_refuses_a_schema_of_a_newer_pgworkerd_as_check_does(empty_db_dsn: str) -> None:
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrations.migrate(conn, "pgworkerd")
        conn.execute("INSERT INTO pgworkerd.migrations (version, name) VALUES (9999, 'future')")
        line = (
            "schema 'pgworkerd' is at version 9999, newer than this pgworkerd "
            f"({migrations.latest_version()}): upgrade pgworkerd"
        )
        with pytest.raises(SchemaError) as refused:
            migrations.migrate(conn, "pgworkerd")
        assert str(refused.value) == line
        with pytest.raises(SchemaError) as checked:
            migrations.check_version(conn, "pgworkerd")
        assert str(checked.value) == line
    done = migrate_cli(empty_db_dsn, "pgworkerd")
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"pgworkerd: error: {line}\n")


def test_check_version_refuses_a_schema_missing_a_migration_below_its_version(
    empty_db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = migrations.available()
    branch = [m for m in shipped if m.version != 14]  # a build whose later ones came without it
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with monkeypatch.context() as patched:
            patched.setattr(migrations, "available", lambda: branch)
            migrations.migrate(conn, "pgworkerd")
        latest = migrations.latest_version()
        assert migrations.current_version(conn, "pgworkerd") == latest
        with pytest.raises(SchemaError) as refused:
            migrations.check_version(conn, "pgworkerd")
        assert str(refused.value) == (
            f"schema 'pgworkerd' is at version {latest} without migration(s) "
            "0014_dead_or_waiting_index: run `pgworkerd migrate`"
        )
        applied = migrations.migrate(conn, "pgworkerd")  # fills the gap
        assert [m.version for m in applied] == [14]
        assert migrations.check_version(conn, "pgworkerd") == latest
