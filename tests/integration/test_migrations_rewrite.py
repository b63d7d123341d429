"""No migration rewrites the jobs table or rebuilds one of its indexes (docs/deploy.md:
a migration runs on the live table under a lock), unless it is listed here with why.

Each migration is applied to a schema one version behind it that holds a job in each of
the states a long-lived table holds: the files (pg_relation_filenode) of jobs, of every
index and of jobs' TOAST table that exist before and after must be the same files. A
rewrite (ALTER COLUMN TYPE to a type that is not binary-coercible, ADD COLUMN with a
volatile default, SET LOGGED, CLUSTER, VACUUM FULL) or a rebuild (REINDEX, ALTER
COLUMN TYPE of an indexed column) gives a relation a new file."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgworkerd.storage import migrations

# version -> the relations it replaces on purpose, each said in its migration.
ALLOWED: dict[int, list[str]] = {
    # 0003: jobs_finished_idx dropped and made again on (state, finished_at), for pruning
    # by state: a new index under the old name.
    3: ["jobs_finished_idx"],
}

# The schema's own relations and the TOAST tables of its tables, by name.
FILES = """
SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c
WHERE c.relnamespace = 'pgworkerd'::regnamespace AND c.relkind IN ('r', 'i', 'm')
UNION ALL
SELECT 'toast of ' || c.relname, pg_relation_filenode(c.reltoastrelid) FROM pg_class c
WHERE c.relnamespace = 'pgworkerd'::regnamespace AND c.relkind = 'r' AND c.reltoastrelid <> 0
"""

# A job in each state a table holds for long, with only the columns of 0001 (present at
# every version): queued, running (leased), succeeded, dead.
ROWS = """
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, lease_token,
                            lease_expires_at, finished_at)
VALUES ('q', 'k', '{"n": 1}', 'queued', 0, NULL, NULL, NULL),
       ('q', 'k', '{"n": 2}', 'running', 1, gen_random_uuid(), now() + interval '1 h', NULL),
       ('q', 'k', '{"n": 3}', 'succeeded', 1, gen_random_uuid(), NULL, now()),
       ('q', 'k', '{"n": 4}', 'dead', 5, gen_random_uuid(), NULL, now())
"""


def files(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute(FILES).fetchall())


@pytest.mark.parametrize(
    "version", [m.version for m in migrations.available() if m.version > 1], ids=str
)
def test_a_migration_keeps_the_files_of_jobs_and_of_its_indexes(empty_db_dsn, version):
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrations.migrate(conn, "pgworkerd", target=version - 1)
        conn.execute(ROWS)
        before = files(conn)
        assert "jobs" in before and "jobs_pkey" in before, "the query saw no relations"
        applied = migrations.migrate(conn, "pgworkerd", target=version)
        assert [m.version for m in applied] == [version]
        after = files(conn)
        kept = before.keys() & after.keys()
        changed = sorted(name for name in kept if before[name] != after[name])
        assert changed == ALLOWED.get(version, []), f"migration {version} rewrote {changed}"
        states = conn.execute("SELECT state FROM pgworkerd.jobs ORDER BY id").fetchall()
        assert states == [("queued",), ("running",), ("succeeded",), ("dead",)]
