"""No statement of ours calls a function someone else put on the search_path.

A built-in whose argument types a call matches only through a cast, a polymorphic or a
variadic parameter loses to a function of the same name with the exact types, in any
schema of the session's search_path: `public`, where every role could create before
PostgreSQL 15. The round-21 review made a plain role superuser that way, through the
migration lock's hashtextextended(text, 0). Here the same overloads sit in public, as
a role could leave them, each raising if it is ever called, while the paths that used
them run: the migration lock, a limited claim, a failure's backoff, a dependent's
release (succeeded and dead), lease renewal, pruning, key pauses."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.storage.limits import QueueLimits
from pgworkerd.storage.migrations import migrate
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim

HOSTILE = [
    "hashtextextended(text, integer) RETURNS bigint",
    "make_interval(secs integer) RETURNS interval",
    "make_interval(secs smallint) RETURNS interval",
    "make_interval(secs bigint) RETURNS interval",
    "make_interval(secs numeric) RETURNS interval",
    "power(integer, integer) RETURNS double precision",
    "cardinality(bigint[]) RETURNS integer",
    "format(text, bigint) RETURNS text",
]


# Operators over the schema's domains (0013): an operator is found along the
# search_path as a function is, and one whose operand types are the domains themselves
# beats the built-in that takes their base types (round 22: `j.attempt >= j.max_attempts`
# in jobs_fail, `j.attempt + 1` in the claim, `errors || ...` in the failure, the release's
# `after_failure = 'cancel'`).
HOSTILE_OPERATORS = [
    (">=", "pgworkerd.job_attempt", "pgworkerd.job_max_attempts", "boolean"),
    ("+", "pgworkerd.job_attempt", "integer", "integer"),
    ("-", "pgworkerd.job_attempt", "integer", "integer"),
    ("||", "pgworkerd.job_errors", "jsonb", "jsonb"),
    ("=", "pgworkerd.job_after_failure", "pgworkerd.job_after_failure", "boolean"),
]


@pytest.fixture
def hostile(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    for signature in HOSTILE:
        conn.execute(
            f"CREATE FUNCTION public.{signature} LANGUAGE plpgsql AS"
            f" $$BEGIN RAISE EXCEPTION 'hijacked: public.{signature.split(')')[0]})'; END$$"
        )
    for number, (operator, left, right, result) in enumerate(HOSTILE_OPERATORS):
        conn.execute(
            f"CREATE FUNCTION public.hostile_operator_{number}({left}, {right})"
            f" RETURNS {result} LANGUAGE plpgsql AS"
            f" $$BEGIN RAISE EXCEPTION 'hijacked: public.{operator}({left}, {right})'; END$$"
        )
        conn.execute(
            f"CREATE OPERATOR public.{operator} (LEFTARG = {left}, RIGHTARG = {right},"
            f" FUNCTION = public.hostile_operator_{number})"
        )
    return conn


def test_no_statement_calls_a_public_overload_of_a_built_in(hostile):
    conn = hostile
    # A user's audit trigger on jobs, naming its table unqualified, fires inside the
    # release too: it must find its table by the session's search_path (a first 0016
    # pinned the release's search_path, and such a trigger failed every completion).
    conn.execute("CREATE TABLE public.audit (job_id bigint, state text)")
    conn.execute(
        "CREATE FUNCTION public.audit_jobs() RETURNS trigger LANGUAGE plpgsql AS"
        " $$BEGIN INSERT INTO audit VALUES (NEW.id, NEW.state); RETURN NULL; END$$"
    )
    conn.execute(
        "CREATE TRIGGER audit AFTER UPDATE ON pgworkerd.jobs"
        " FOR EACH ROW EXECUTE FUNCTION public.audit_jobs()"
    )
    assert conn.execute("SHOW search_path").fetchone()[0] == '"$user", public'
    assert migrate(conn, "pgworkerd") == [], "up to date: the lock alone runs"

    limited = JobStore(limits={"default": QueueLimits(concurrency=5)})
    store = JobStore()
    first = pgworkerd.enqueue(conn, "k", {}, max_attempts=2)
    pgworkerd.enqueue_many(conn, [{"kind": "d", "payload": {}, "after": [first]}] * 2)
    doomed = pgworkerd.enqueue(conn, "k", {}, queue="other", max_attempts=1)
    pgworkerd.enqueue(conn, "d", {}, queue="other", after=[doomed])

    [job] = claim(limited, conn, limit=1)
    assert job.id == first
    assert store.renew(conn, [job.lease], 30) == {first}
    retried = store.fail(conn, job.lease, "boom")  # backoff: power()
    assert retried is not None and retried.state == "queued"
    conn.execute("UPDATE pgworkerd.jobs SET run_at = now() WHERE id = %s", [first])
    [job] = claim(limited, conn, limit=1)
    store.complete(conn, [(job.lease, None)])  # its dependents released
    [dead] = claim(store, conn, limit=1, queues=["other"])
    assert store.fail(conn, dead.lease, "boom").state == "dead"  # its dependent cancelled
    states = conn.execute(
        "SELECT state, count(*) FROM pgworkerd.jobs GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert states == [("cancelled", 1), ("dead", 1), ("queued", 2), ("succeeded", 1)]
    released = conn.execute("SELECT count(*) FROM audit WHERE state IN ('queued', 'cancelled')")
    assert released.fetchone()[0] >= 3, "the audit trigger saw the releases"

    store.prune_stale_daemons(conn, 60)
    store.prune_batch(conn, state="succeeded", retention_s=0, limit=10, archive=False)
    until = pgworkerd.pause_key(conn, "tenant:1", 60)
    assert until is not None and pgworkerd.resume_key(conn, "tenant:1")
