"""The jobs table's CHECK constraints after migrations 0012, 0013 and 0015: the same rows
refused, by constraints written short (PostgreSQL re-reads a table's CHECKs at every
INSERT and UPDATE) and kept in domains (read once per session): six in the domains of
their columns, the three that read state in a domain over a row of four columns."""

from __future__ import annotations

import itertools
from typing import Any

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
# 0015: the three that read state, in the domain over (state, finished_at,
# lease_expires_at, lease_token) that the table's one CHECK casts those columns to.
LIFECYCLE_CHECKS = {"jobs_state_valid", "jobs_running_is_leased", "jobs_final_has_finished_at"}
TABLE_CHECKS = {"jobs_lifecycle_valid"}


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
            "                 WHERE attrelid = 'pgworkerd.jobs'::regclass)"
            " OR contypid = 'pgworkerd.job_lifecycle_checked'::regtype)"
        ).fetchall()
    )
    assert len(definitions) == 10
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
        ("lease_expires_at = now()", "jobs_running_is_leased"),
        ("state = 'running', lease_expires_at = now()", "jobs_running_is_leased"),
        ("state = 'succeeded'", "jobs_final_has_finished_at"),
    ],
)
def test_an_update_is_refused_what_an_insert_is(conn, assignment, constraint):
    # A domain's CHECK runs wherever a value is stored into its column: the claim and
    # the outcomes are UPDATEs, and they must be held to the same predicates.
    job_id = conn.execute(INSERT.format(columns="", values="") + " RETURNING id").fetchone()[0]
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute(f"UPDATE pgworkerd.jobs SET {assignment} WHERE id = %s", (job_id,))
    assert refused.value.diag.constraint_name == constraint


def test_the_three_checks_on_state_are_in_one_domain_over_its_columns(conn):
    # 0015: jobs_state_valid, jobs_running_is_leased and jobs_final_has_finished_at read
    # state and up to one other column; a domain over the row of the four holds them
    # (read and planned once per session), and the table's one CHECK is a cast to it.
    in_domain = {
        row[0]
        for row in conn.execute(
            "SELECT conname FROM pg_constraint"
            " WHERE contypid = 'pgworkerd.job_lifecycle_checked'::regtype"
        )
    }
    assert in_domain == LIFECYCLE_CHECKS
    (definition,) = conn.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'pgworkerd.jobs'::regclass AND conname = 'jobs_lifecycle_valid'"
    ).fetchone()
    assert "job_lifecycle_checked" in definition
    # The stored tree the table re-reads at each statement: the three were 2,954 bytes.
    (length,) = conn.execute(
        "SELECT sum(length(conbin)) FROM pg_constraint"
        " WHERE conrelid = 'pgworkerd.jobs'::regclass AND contype = 'c'"
    ).fetchone()
    assert length < 1000


FILES = (
    "SELECT c.relname, pg_relation_filenode(c.oid) FROM pg_class c"
    " WHERE c.relnamespace = 'pgworkerd'::regnamespace AND c.relname LIKE 'jobs%'"
    " AND c.relkind IN ('r', 'i') ORDER BY 1"
)


def test_0013_rewrites_nothing_and_rebuilds_no_index(empty_db_dsn):
    # To a domain with constraints, ALTER COLUMN TYPE rewrites the table and its indexes
    # (tablecmds.c, ATColumnChangeRequiresRewrite); 0013 alters to bare domains, then
    # adds their constraints NOT VALID: the files of jobs and of every index stay.
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrate(conn, "pgworkerd", target=12)
        conn.execute(
            INSERT.format(columns=", state, finished_at, attempt", values=", 'dead', now(), 3")
        )
        conn.execute(INSERT.format(columns=", progress", values=", 50"))
        before = conn.execute(FILES).fetchall()
        assert [m.version for m in migrate(conn, "pgworkerd", target=13)] == [13]
        assert conn.execute(FILES).fetchall() == before
        rows = conn.execute("SELECT state, attempt, progress FROM pgworkerd.jobs ORDER BY id")
        assert rows.fetchall() == [("dead", 3, None), ("queued", 0, 50.0)]


def test_0015_rewrites_nothing_and_keeps_every_row(empty_db_dsn):
    # 0015 changes no column's type and adds its CHECK NOT VALID: no pass over the rows.
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrate(conn, "pgworkerd", target=14)
        conn.execute(
            INSERT.format(
                columns=", state, lease_expires_at, lease_token, started_at",
                values=", 'running', now(), gen_random_uuid(), now()",
            )
        )
        conn.execute(INSERT.format(columns=", state, finished_at", values=", 'dead', now()"))
        before = conn.execute(FILES).fetchall()
        assert [m.version for m in migrate(conn, "pgworkerd", target=15)] == [15]
        assert conn.execute(FILES).fetchall() == before
        rows = conn.execute("SELECT state FROM pgworkerd.jobs ORDER BY id").fetchall()
        assert rows == [("running",), ("dead",)]
        # The rows it did not read are held to the predicates at their next write.
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute("UPDATE pgworkerd.jobs SET lease_token = NULL WHERE state = 'running'")
        assert refused.value.diag.constraint_name == "jobs_running_is_leased"


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


def _outcomes(conn: psycopg.Connection[Any]) -> dict[tuple[str, bool, bool, bool], str]:
    """What the jobs table says to every combination of the four columns 0015's domain
    reads: 'accepted', or the name of the constraint that refused the row."""
    said = {}
    for state, finished, expires, token in itertools.product(
        ("waiting", "queued", "running", "succeeded", "dead", "cancelled", "bogus"),
        (False, True),
        (False, True),
        (False, True),
    ):
        values = (state, *("now()" if x else "NULL" for x in (finished, expires)))
        row = INSERT.format(
            columns=", state, finished_at, lease_expires_at, lease_token",
            values=", '{}', {}, {}, {}".format(*values, "gen_random_uuid()" if token else "NULL"),
        )
        try:
            conn.execute(row)
            said[(state, finished, expires, token)] = "accepted"
        except psycopg.errors.CheckViolation as refused:
            said[(state, finished, expires, token)] = str(refused.diag.constraint_name)
    return said


def test_0015_refuses_exactly_the_rows_the_three_table_checks_refused(conn, empty_db_dsn):
    with psycopg.connect(empty_db_dsn, autocommit=True) as before:
        migrate(before, "pgworkerd", target=14)
        expected = _outcomes(before)
    assert sorted(set(expected.values())) == [
        "accepted",
        "jobs_final_has_finished_at",
        "jobs_running_is_leased",
        "jobs_state_valid",
    ]
    with psycopg.connect(empty_db_dsn, autocommit=True) as after:
        migrate(after, "pgworkerd", target=15)
        assert _outcomes(after) == expected


def test_0017_lets_only_a_cancelled_row_with_its_token_keep_a_lease(conn, empty_db_dsn):
    """A job cancelled while it ran keeps its lease until its handler has ended (HELD in
    storage/sql/queries.sql): 0017 accepts that one combination more, and refuses every
    other row 0015 refused, under the same names."""
    with psycopg.connect(empty_db_dsn, autocommit=True) as before:
        migrate(before, "pgworkerd", target=16)
        expected = _outcomes(before)
    assert expected[("cancelled", True, True, True)] == "jobs_running_is_leased"
    expected[("cancelled", True, True, True)] = "accepted"
    assert _outcomes(conn) == expected
