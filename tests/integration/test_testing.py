"""pgworkerd.testing: drain and assert_enqueued on a real PostgreSQL, and the example
user test (examples/test_shop_jobs.py) run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd import config
from pgworkerd.testing import assert_enqueued, drain
from tests.daemon import REPO

Conn = psycopg.Connection[Any]
EXAMPLE = REPO / "examples" / "test_shop_jobs.py"


def succeed(job: pgworkerd.Job) -> Any:
    job.progress(50, "half")
    return {"got": job.payload}


def retry_now(job: pgworkerd.Job) -> None:
    raise pgworkerd.Retry(after=0)


def chain(job: pgworkerd.Job) -> None:
    if job.payload["left"] > 0:
        with psycopg.connect(job.payload["dsn"], autocommit=True) as conn:
            pgworkerd.enqueue(conn, "chain", {**job.payload, "left": job.payload["left"] - 1})


async def succeed_async(job: pgworkerd.Job) -> str:
    job.progress(100)
    return "awaited"


def snooze_now(job: pgworkerd.Job) -> None:
    raise pgworkerd.Snooze(0)


def fail_with_a_surrogate(job: pgworkerd.Job) -> None:
    job.progress(10, "stage \ud800")
    raise ValueError("bad \ud800 value")


def discard_an_exception(job: pgworkerd.Job) -> None:
    try:
        int("x")
    except ValueError as exc:
        raise pgworkerd.Discard(exc) from exc  # type: ignore[arg-type]  # as users write it


CONFIG = config.parse(
    """
handlers:
  succeed: tests.integration.test_testing:succeed
  retry_now: tests.integration.test_testing:retry_now
  chain: tests.integration.test_testing:chain
  succeed_async: tests.integration.test_testing:succeed_async
  snooze_now: tests.integration.test_testing:snooze_now
  fail_with_a_surrogate: tests.integration.test_testing:fail_with_a_surrogate
  discard_an_exception: tests.integration.test_testing:discard_an_exception
queues: {default: {}, other: {priority: 5}}
"""
)


def test_drain_runs_ready_jobs_through_the_daemons_statements(conn: Conn) -> None:
    first = pgworkerd.enqueue(conn, "succeed", {"n": 1})
    later = pgworkerd.enqueue(conn, "succeed", {"n": 2}, delay=3600)
    other = pgworkerd.enqueue(conn, "succeed_async", {}, queue="other")
    unknown = pgworkerd.enqueue(conn, "nobody_handles_this", {})
    outcomes = drain(conn, CONFIG)
    # The queue of higher priority first, then in order; the job scheduled later waits.
    assert [(o.job_id, o.outcome, o.state) for o in outcomes] == [
        (other, "succeeded", "succeeded"),
        (first, "succeeded", "succeeded"),
        (unknown, "discarded", "dead"),
    ]
    assert outcomes[1].result == {"got": {"n": 1}} and outcomes[0].result == "awaited"
    assert "no handler configured for kind 'nobody_handles_this'" in (outcomes[2].error or "")
    row = conn.execute(
        "SELECT state, attempt, worker, progress, progress_stage, result"
        " FROM pgworkerd.jobs WHERE id = %s",
        (first,),
    ).fetchone()
    assert row == ("succeeded", 1, "pgworkerd.testing", 50.0, "half", {"got": {"n": 1}})
    assert pgworkerd.result(conn, other) == "awaited"
    assert conn.execute("SELECT state FROM pgworkerd.jobs WHERE id = %s", (later,)).fetchone() == (
        "queued",
    )
    assert drain(conn, CONFIG) == []


def test_drain_runs_a_job_once_a_call_and_follows_chains(conn: Conn, db_dsn: str) -> None:
    again = pgworkerd.enqueue(conn, "retry_now", {}, max_attempts=10)
    pgworkerd.enqueue(conn, "chain", {"left": 3, "dsn": db_dsn})
    outcomes = drain(conn, CONFIG)
    assert sorted(o.kind for o in outcomes) == ["chain"] * 4 + ["retry_now"]
    (retried,) = [o for o in outcomes if o.kind == "retry_now"]
    assert (retried.outcome, retried.state, retried.attempt) == ("retry", "queued", 1)
    # Ready again at once, and released untouched: the attempt is not charged.
    row = conn.execute("SELECT state, attempt FROM pgworkerd.jobs WHERE id = %s", (again,))
    assert row.fetchone() == ("queued", 1)
    assert [(o.job_id, o.attempt) for o in drain(conn, CONFIG)] == [(again, 2)]


def test_drain_stops_at_max_jobs_and_leaves_the_rest_queued(conn: Conn) -> None:
    ids = [pgworkerd.enqueue(conn, "succeed", {"n": n}) for n in range(5)]
    assert [o.job_id for o in drain(conn, CONFIG, max_jobs=2)] == ids[:2]
    rows = conn.execute("SELECT state, attempt FROM pgworkerd.jobs ORDER BY id").fetchall()
    assert rows == [("succeeded", 1)] * 2 + [("queued", 0)] * 3


def test_drain_reaches_the_jobs_behind_a_full_batch_of_jobs_ready_again(conn: Conn) -> None:
    # 100 jobs that ran and were ready again filled a claim of 100, which drain took for
    # "nothing new" and stopped, the ready job behind them unrun.
    again = pgworkerd.enqueue_many(
        conn, [{"kind": "snooze_now", "payload": {}, "priority": 1}] * 100
    )
    behind = pgworkerd.enqueue(conn, "succeed", {"n": 1})
    outcomes = drain(conn, CONFIG)
    assert [o.job_id for o in outcomes] == [*again, behind]
    assert outcomes[-1].state == "succeeded"
    rows = conn.execute(
        "SELECT DISTINCT state, attempt, lease_token IS NULL FROM pgworkerd.jobs"
        " WHERE id = ANY(%s)",
        [again],
    ).fetchall()
    assert rows == [("queued", 0, True)], "given back as they were, uncharged"


def test_a_lone_surrogate_in_an_error_or_a_stage_is_stored_escaped(conn: Conn) -> None:
    # It made psycopg raise while writing the failure (the worker exited) or the
    # progress (the writer's thread died, and no later report of the process was kept).
    job_id = pgworkerd.enqueue(conn, "fail_with_a_surrogate", {})
    (outcome,) = drain(conn, CONFIG)
    assert (outcome.outcome, outcome.state) == ("failed", "queued")
    error, stage = conn.execute(
        "SELECT last_error, progress_stage FROM pgworkerd.jobs WHERE id = %s", [job_id]
    ).fetchone()
    assert "ValueError: bad \\ud800 value" in error
    assert stage == "stage \\ud800"


def test_discard_given_an_exception_stores_its_text(conn: Conn) -> None:
    job_id = pgworkerd.enqueue(conn, "discard_an_exception", {})
    (outcome,) = drain(conn, CONFIG)
    assert (outcome.outcome, outcome.state) == ("discarded", "dead")
    assert conn.execute(
        "SELECT last_error FROM pgworkerd.jobs WHERE id = %s", [job_id]
    ).fetchone() == ("invalid literal for int() with base 10: 'x'",)


def test_assert_enqueued_matches_a_payload_subset_and_says_what_there_is(conn: Conn) -> None:
    pgworkerd.enqueue(conn, "mail", {"to": "a@example.com", "meta": {"lang": "en", "n": 1}})
    found = assert_enqueued(conn, "mail", {"meta": {"lang": "en"}})
    assert found["payload"]["to"] == "a@example.com" and found["state"] == "queued"
    assert assert_enqueued(conn, "mail")["kind"] == "mail"
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(conn, "mail", {"to": "b@example.com"})
    assert str(raised.value) == (
        'no queued job of kind \'mail\' whose payload contains {"to": "b@example.com"};'
        ' there are: job 1: {"to": "a@example.com", "meta": {"n": 1, "lang": "en"}}'
    )
    with pytest.raises(AssertionError, match=r"^no queued job of kind 'sms' at all$"):
        assert_enqueued(conn, "sms")


def test_the_example_user_test_passes(db_dsn: str) -> None:
    env = {**os.environ, "PGWORKERD_DATABASE__URL": db_dsn}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "examples/test_shop_jobs.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_jobs_a_handler_enqueues_go_to_the_configs_schema(conn: Conn, db_dsn: str) -> None:
    # With database.schema set in the file alone, the follow-ups went to `pgworkerd`,
    # and drain (looking in app_a) never ran them.
    from pgworkerd.client.producer import default_producer
    from pgworkerd.storage.migrations import migrate

    migrate(conn, "app_a")
    before = os.environ.get("PGWORKERD_DATABASE__SCHEMA")
    other = config.parse(
        "database: {schema: app_a}\nhandlers: {chain: 'tests.integration.test_testing:chain'}\n"
    )
    pgworkerd.Producer(schema="app_a").enqueue(conn, "chain", {"left": 2, "dsn": db_dsn})

    outcomes = drain(conn, other)

    assert [(o.kind, o.state) for o in outcomes] == [("chain", "succeeded")] * 3
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    assert os.environ.get("PGWORKERD_DATABASE__SCHEMA") == before, "given back after the call"
    assert default_producer().store.schema == (before or "pgworkerd")
