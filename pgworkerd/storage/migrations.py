"""Forward-only schema migrations: numbered `.sql` files in `pgworkerd/storage/sql/`.

`migrate` applies the missing ones in one read committed transaction under an advisory
lock, so two hosts migrating at once serialise (the second, which sees what the first
committed, finds nothing to do) and a failing migration leaves the schema as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import pq, sql

from pgworkerd.errors import SchemaError
from pgworkerd.storage import queries

_MIGRATION_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql_text: str


def available() -> list[Migration]:
    """Every migration shipped with this pgworkerd, in order."""
    found = []
    for entry in resources.files("pgworkerd.storage").joinpath("sql").iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    return sorted(found, key=lambda m: m.version)


def latest_version() -> int:
    return available()[-1].version


def migrate(
    conn: psycopg.Connection[Any], schema: str, *, target: int | None = None
) -> list[Migration]:
    """Bring `schema` up to date (or up to version `target`); returns the migrations
    applied, none if it was current. SchemaError, nothing changed, when a newer
    pgworkerd migrated it."""
    statements = queries.statements(schema)
    # A transaction of our own is read committed (see migrations_read_committed); inside
    # a caller's transaction, whose snapshot may be taken already, the caller's level
    # stands.
    own_transaction = conn.info.transaction_status == pq.TransactionStatus.IDLE
    with conn.transaction():
        if own_transaction:
            conn.execute(statements["migrations_read_committed"])
        conn.execute(statements["migrations_lock"], {"schema_name": schema})
        schema_exists = _check_may_migrate(conn, schema)
        if not schema_exists:
            conn.execute(statements["migrations_create_schema"])
        conn.execute(statements["migrations_create_table"])
        applied = {row[0] for row in conn.execute(statements["migrations_applied"])}
        # A newer pgworkerd's schema: refused as check_version refuses it (`run` and
        # `check` would), before anything is applied; not "up to date".
        if applied and max(applied) > latest_version():
            raise _newer_than_this(schema, max(applied))
        missing = [
            m
            for m in available()
            if m.version not in applied and (target is None or m.version <= target)
        ]
        if missing:
            # Migration files use unqualified names; this transaction resolves them in
            # our schema (set_config(..., true) ends with the transaction).
            conn.execute(
                statements["search_path_set"],
                {"search_path": sql.Identifier(schema).as_string(conn)},
            )
        for migration in missing:
            conn.execute(migration.sql_text.encode("utf-8"))
            conn.execute(
                statements["migrations_record"],
                {"version": migration.version, "name": migration.name},
            )
    return missing


def _check_may_migrate(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether `schema` exists already; SchemaError when this role may not migrate it
    (the runtime role of docs/deploy.md: no CREATE), before anything is changed."""
    row = conn.execute(
        queries.statements(schema)["migrations_privileges"], {"schema_name": schema}
    ).fetchone()
    assert row is not None
    role, exists, may_create = row
    if not may_create:
        where = f"schema {schema!r}" if exists else "the database"
        raise SchemaError(
            f"role {role!r} may not migrate schema {schema!r}: it has no CREATE privilege "
            f"on {where}; run `pgworkerd migrate` as the schema's owner role "
            "(see docs/deploy.md)"
        )
    return bool(exists)


def current_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's version (its highest applied migration), or None when it was never
    migrated."""
    applied = applied_versions(conn, schema)
    return max(applied, default=None) if applied is not None else None


def applied_versions(conn: psycopg.Connection[Any], schema: str) -> set[int] | None:
    """The versions of the migrations applied to `schema`, or None when it was never
    migrated."""
    statements = queries.statements(schema)
    table = f"{sql.Identifier(schema).as_string(conn)}.migrations"
    present = conn.execute(statements["migrations_table_exists"], {"migrations_table": table})
    row = present.fetchone()
    if row is None or not row[0]:
        return None
    return {row[0] for row in conn.execute(statements["migrations_applied"])}


def check_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's version, or SchemaError when it is missing, behind, ahead, or lacks
    a migration below its version."""
    applied = applied_versions(conn, schema)
    latest = latest_version()
    if not applied:
        raise SchemaError(f"schema {schema!r} is not set up: run `pgworkerd migrate`")
    version = max(applied)
    if version > latest:
        raise _newer_than_this(schema, version)
    # Not the highest version alone: migrations are numbered per branch, so a schema
    # migrated by one branch's build (0001-0006 and 0010) has a version as high as the
    # merged build's without 0007-0009, which `migrate` applies (it fills every gap).
    gaps = [m for m in available() if m.version < version and m.version not in applied]
    if gaps:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in gaps)
        raise SchemaError(
            f"schema {schema!r} is at version {version} without migration(s) {names}: "
            "run `pgworkerd migrate`"
        )
    if version < latest:
        raise SchemaError(
            f"schema {schema!r} is at version {version}, this pgworkerd needs {latest}: "
            "run `pgworkerd migrate`"
        )
    return version


def _newer_than_this(schema: str, version: int) -> SchemaError:
    return SchemaError(
        f"schema {schema!r} is at version {version}, newer than this pgworkerd "
        f"({latest_version()}): upgrade pgworkerd"
    )
