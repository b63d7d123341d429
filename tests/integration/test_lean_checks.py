"""The jobs table's CHECK constraints after migrations 0012 and 0013: the same rows
refused, by constraints written short (PostgreSQL re-reads a table's CHECKs at every
INSERT and UPDATE) and, for six of them, kept in domains (read once per session)."""

from __future__ import annotations

import psycopg
import pytest

from pgworkerd.storage.migrations import migrate

INSERT = (
    "INSERT INTO pgworkerd.jobs (queue, kind, payload{columns}) VALUES ('q', 'k', '{{}}'{values})"
)

# 0013: the single-column CHECKs, each in the domain of its column, under its name.
DOMAIN_CHECKS = {
    "attempt": ("job_attempt", "jobs_attempt_valid"),
    "max_attempts": ("job_max_attempts", "jobs_max_attempts_valid"),
    "max_runtime": ("job_max_runtime", "jobs_max_runtime_valid"),
    "errors": ("job_errors", "jobs_errors_is_array"),
    "progress": ("job_progress", "jobs_progress_valid"),
    "after_failure": ("job_after_failure", "jobs_after_failure_valid"),
}
TABLE_CHECKS = {"jobs_state_valid", "jobs_running_is_leased", "jobs_final_has_finished_at"}


def test_the_checks_are_stored_without_array_constructors_or_null_guards(conn):
    # ARRAY['a', 'b'] is one Const node per item, folded again at every statement; a
    # `x IS NULL OR` guard says nothing a CHECK does not (NULL passes). Before 0012,
    # jobs_state_valid, jobs_final_has_finished_at, jobs_after_failure_valid,
    # jobs_max_attempts_valid, jobs_max_runtime_valid and jobs_progress_valid had them.
    definitions = dict(
        conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'c' AND (conrelid = 'pgworkerd.jobs'::regclass"
            " OR contypid IN (SELECT atttypid FROM pg_attribute"
            "                 WHERE attrelid = 'pgworkerd.jobs'::regclass))"
        ).fetchall()
    )
    assert len(definitions) == 9
    long_winded = {
        name: text
        for name, text in definitions.items()
        if "ARRAY[" in text or "IS NULL) OR" in text
    }
    assert long_winded == {}


def test_six_checks_are_in_the_domains_of_their_columns(conn):
    # A table CHECK is read back (stringToNode) and planned at every INSERT and UPDATE
    # statement in PostgreSQL 15; a domain's, once per session (the type cache).
    on_table = {
        row[0]
        for row in conn.execute(
            "SELECT conname FROM pg_constraint"
            " WHERE conrelid = 'pgworkerd.jobs'::regclass AND contype = 'c'"
        )
    }
    assert on_table == TABLE_CHECKS
    in_domains = {
        column: (domain, constraint)
        for column, domain, constraint in conn.execute(
            "SELECT a.attname, t.typname, c.conname FROM pg_attribute a"
            " JOIN pg_type t ON t.oid = a.atttypid"
            " JOIN pg_constraint c ON c.contypid = t.oid"
            " WHERE a.attrelid = 'pgworkerd.jobs'::regclass AND t.typtype = 'd'"
        )
    }
    assert in_domains == DOMAIN_CHECKS
    # Readers see the same columns: information_schema and the wire give the base types.
    types = dict(
        conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'pgworkerd' AND table_name = 'jobs'"
            " AND column_name = ANY(%s)",
            (list(DOMAIN_CHECKS),),
        ).fetchall()
    )
    assert types == {
        "attempt": "integer",
        "max_attempts": "integer",
        "max_runtime": "interval",
        "errors": "jsonb",
        "progress": "double precision",
        "after_failure": "text",
    }
    cursor = conn.execute("SELECT attempt, max_attempts, errors FROM pgworkerd.jobs LIMIT 0")
    assert [column.type_code for column in cursor.description] == [23, 23, 3802]


@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        ("attempt = -1", "jobs_attempt_valid"),
        ("attempt = attempt - 1", "jobs_attempt_valid"),
        ("max_attempts = 0", "jobs_max_attempts_valid"),
        ("max_runtime = interval '-1 ms'", "jobs_max_runtime_valid"),
        ("errors = '{}'::jsonb", "jobs_errors_is_array"),
        ("errors = '1'", "jobs_errors_is_array"),
        ("progress = 101", "jobs_progress_valid"),
        ("after_failure = 'never'", "jobs_after_failure_valid"),
        ("state = 'lost'", "jobs_state_valid"),
        ("finished_at = now()", "jobs_final_has_finished_at"),
    ],
)
def test_an_update_is_refused_what_an_insert_is(conn, assignment, constraint):
    # A domain's CHECK runs wherever a value is stored into its column: the claim and
    # the outcomes are UPDATEs, and they must be held to the same predicates.
    job_id = conn.execute(INSERT.format(columns="", values="") + " RETURNING id").fetchone()[0]
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute(f"UPDATE pgworkerd.jobs SET {assignment} WHERE id = %s", (job_id,))
    assert refused.value.diag.constraint_name == constraint


def test_0013_rewrites_nothing_and_rebuilds_no_index(empty_db_dsn):
    # To a domain with constraints, ALTER COLUMN TYPE rewrites the table and its indexes
    # (tablecmds.c, ATColumnChangeRequiresRewrite); 0013 alters to bare domains, then
    # adds their constraints NOT VALID: the files of jobs and of every index stay.
    files = (
        "SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c"
        " WHERE c.relnamespace = 'pgworkerd'::regnamespace AND c.relname LIKE 'jobs%'"
        " AND c.relkind IN ('r', 'i') ORDER BY 1"
    )
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrate(conn, "pgworkerd", target=12)
        conn.execute(
            INSERT.format(columns=", state, finished_at, attempt", values=", 'dead', now(), 3")
        )
        conn.execute(INSERT.format(columns=", progress", values=", 50"))
        before = conn.execute(files).fetchall()
        assert [m.version for m in migrate(conn, "pgworkerd", target=13)] == [13]
        assert conn.execute(files).fetchall() == before
        rows = conn.execute("SELECT state, attempt, progress FROM pgworkerd.jobs ORDER BY id")
        assert rows.fetchall() == [("dead", 3, None), ("queued", 0, 50.0)]


@pytest.mark.parametrize(
    ("columns", "values", "constraint"),
    [
        ("state", "'bogus'", "jobs_state_valid"),
        ("state", "'succeeded'", "jobs_final_has_finished_at"),  # final without finished_at
        ("finished_at", "now()", "jobs_final_has_finished_at"),  # queued with finished_at
        ("max_attempts", "0", "jobs_max_attempts_valid"),
        ("max_runtime", "interval '0'", "jobs_max_runtime_valid"),
        ("max_runtime", "interval '-1 second'", "jobs_max_runtime_valid"),
        ("after_failure", "'maybe'", "jobs_after_failure_valid"),
        ("progress", "100.5", "jobs_progress_valid"),
        ("progress", "-1", "jobs_progress_valid"),
        ("attempt", "-1", "jobs_attempt_valid"),
        ("errors", "'{}'", "jobs_errors_is_array"),
        (
            "state, lease_expires_at, lease_token",
            "'running', now(), NULL",
            "jobs_running_is_leased",
        ),
    ],
)
def test_each_check_refuses_what_it_refused(conn, columns, values, constraint):
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute(INSERT.format(columns=", " + columns, values=", " + values))
    assert refused.value.diag.constraint_name == constraint


@pytest.mark.parametrize(
    ("columns", "values"),
    [
        ("max_attempts, max_runtime, after_failure, progress", "NULL, NULL, NULL, NULL"),
        ("max_attempts, max_runtime, after_failure, progress", "1, interval '1 ms', 'run', 0"),
        ("after_failure, progress", "'cancel', 100"),
        ("state", "'waiting'"),
        ("state, finished_at", "'cancelled', now()"),
        (
            "state, lease_expires_at, lease_token, started_at",
            "'running', now(), gen_random_uuid(), now()",
        ),
    ],
)
def test_what_they_accepted_still_goes_in(conn, columns, values):
    inserted = conn.execute(
        INSERT.format(columns=", " + columns, values=", " + values) + " RETURNING id"
    ).fetchone()
    assert inserted is not None
