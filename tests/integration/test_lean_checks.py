"""The jobs table's CHECK constraints after migration 0012: the same rows refused, by
constraints PostgreSQL re-reads at every INSERT and UPDATE, so written short."""

from __future__ import annotations

import psycopg
import pytest

INSERT = (
    "INSERT INTO pgworkerd.jobs (queue, kind, payload{columns}) VALUES ('q', 'k', '{{}}'{values})"
)


def test_the_checks_are_stored_without_array_constructors_or_null_guards(conn):
    # ARRAY['a', 'b'] is one Const node per item, folded again at every statement; a
    # `x IS NULL OR` guard says nothing a CHECK does not (NULL passes). Before 0012,
    # jobs_state_valid, jobs_final_has_finished_at, jobs_after_failure_valid,
    # jobs_max_attempts_valid, jobs_max_runtime_valid and jobs_progress_valid had them.
    definitions = dict(
        conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'pgworkerd.jobs'::regclass AND contype = 'c'"
        ).fetchall()
    )
    assert len(definitions) == 9
    long_winded = {
        name: text
        for name, text in definitions.items()
        if "ARRAY[" in text or "IS NULL) OR" in text
    }
    assert long_winded == {}


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
