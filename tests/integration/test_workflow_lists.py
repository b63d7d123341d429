"""`enqueue_many` lists with jobs `after` others, `batch` and `chain`, sync and async
(producer_ways.py): the jobs with `after` go in by one `jobs_insert_after` statement
whatever their count (a fan-out of thousands was one statement, and one commit, per
job), with the rows that enqueueing them one by one makes; and a call that needs
several statements (jobs with and without `after`, uniqueness modes, a batch and its
callback) is all or nothing: refused halfway, it leaves none of its jobs, on an
autocommit connection and inside the caller's transaction, which stays usable. A
batch's callback is checked with its jobs, before any statement."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgworkerd import InvalidJob
from pgworkerd.client import producer
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim

Conn = psycopg.Connection[Any]

# What a job's row and edges say about its dependencies.
ROWS = """
SELECT j.kind, j.state, j.deps_pending, j.finished_at IS NULL, j.last_error, j.after_ids,
       j.after_failure,
       ARRAY(SELECT d.dependency_id FROM pgworkerd.job_dependencies AS d
             WHERE d.job_id = j.id ORDER BY 1)
FROM pgworkerd.jobs AS j WHERE j.id = ANY(%s) ORDER BY j.id
"""


def count(conn: Conn, table: str = "jobs") -> int:
    value: int = conn.execute(f"SELECT count(*) FROM pgworkerd.{table}").fetchone()[0]
    return value


def finished(store: JobStore, conn: Conn, job_id: int, *, ok: bool) -> None:
    (job,) = claim(store, conn, limit=1)
    assert job.id == job_id
    if ok:
        store.complete(conn, [(job.lease, None)])
    else:
        store.fail(conn, job.lease, "boom", discard=True)


def test_a_list_makes_the_rows_that_one_by_one_enqueues_make(way, pconn, conn, store):
    succeeded = way.enqueue(pconn, "dep", {})
    finished(store, conn, succeeded, ok=True)
    dead = way.enqueue(pconn, "dep", {})
    finished(store, conn, dead, ok=False)
    queued = way.enqueue(pconn, "dep", {})
    fresh = way.enqueue(pconn, "dep", {})  # no dependent yet: its first one flags it
    specs: list[dict[str, Any]] = [
        {"after": [succeeded]},
        {"after": [dead]},
        {"after": [dead], "after_failure": "run"},
        {"after": [queued]},
        {"after": [queued, succeeded]},
        {"after": [succeeded, dead], "after_failure": "run"},
        {"after": [fresh, queued, dead]},
        {"after": [fresh]},
    ]
    items = [{"kind": f"k{n}", "payload": {"n": n}, **spec} for n, spec in enumerate(specs)]
    one_by_one = [
        way.enqueue(pconn, item["kind"], item["payload"], **spec)
        for item, spec in zip(items, specs, strict=True)
    ]
    flags = conn.execute(
        "SELECT has_dependents FROM pgworkerd.jobs WHERE id = ANY(%s)", [[queued, fresh]]
    ).fetchall()
    conn.execute("UPDATE pgworkerd.jobs SET has_dependents = false WHERE id = %s", [fresh])
    listed = way.enqueue_many(pconn, items)
    assert conn.execute(ROWS, [listed]).fetchall() == conn.execute(ROWS, [one_by_one]).fetchall()
    assert [row[1] for row in conn.execute(ROWS, [listed]).fetchall()] == [
        "queued",
        "cancelled",
        "queued",
        "waiting",
        "waiting",
        "queued",
        "cancelled",
        "waiting",
    ]
    assert flags == [(True,), (True,)]
    assert conn.execute(
        "SELECT has_dependents FROM pgworkerd.jobs WHERE id = %s", [fresh]
    ).fetchone() == (True,), "the list flagged the dependency that had none"


def test_a_fan_out_is_one_statement(way, pconn, conn):
    parent = way.enqueue(pconn, "parent", {})
    with way.count_statements() as execute:
        ids = way.enqueue_many(
            pconn, [{"kind": "child", "payload": {"n": n}, "after": [parent]} for n in range(2000)]
        )
    assert execute.call_count == 1
    assert ids == sorted(ids) and len(set(ids)) == 2000
    payloads = conn.execute(
        "SELECT payload->'n' FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id", [ids]
    ).fetchall()
    assert payloads == [(n,) for n in range(2000)], "ids in the list's order"
    assert count(conn, "job_dependencies") == 2000
    assert conn.execute(
        "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'waiting'"
    ).fetchone() == (2000,)


def refused_list(parent: int) -> list[dict[str, Any]]:
    """Every kind of statement of a list that goes in by parts, then a job whose
    dependency does not exist: refused at jobs[4], after the others ran."""
    return [
        {"kind": "plain", "payload": {}},
        {"kind": "debounced", "payload": {}, "unique_key": "d", "debounce": 60},
        {"kind": "child", "payload": {}, "after": [parent]},
        {"kind": "throttled", "payload": {}, "unique_key": "t", "throttle": 60},
        {"kind": "orphan", "payload": {}, "after": [parent, 999_999]},
    ]


def test_a_list_refused_halfway_leaves_nothing_on_an_autocommit_connection(way, pconn, conn):
    parent = way.enqueue(pconn, "parent", {})
    refused = r"^jobs\[4\]: after names jobs that do not exist: 999999$"
    with pytest.raises(InvalidJob, match=refused):
        way.enqueue_many(pconn, refused_list(parent))
    assert count(conn) == 1
    assert count(conn, "unique_slots") == 0
    assert count(conn, "job_dependencies") == 0
    assert conn.execute("SELECT has_dependents FROM pgworkerd.jobs").fetchone() == (False,)


@pytest.mark.parametrize("begun", [True, False], ids=["begun", "not-begun"])
def test_a_list_refused_halfway_leaves_the_callers_transaction_as_it_was(
    way, pconn, db_dsn, conn, begun
):
    parent = way.enqueue(pconn, "parent", {})  # committed
    with way.connect(db_dsn) as tx:  # not autocommit: the caller's transaction
        if begun:
            way.enqueue(tx, "before", {})
        with pytest.raises(InvalidJob, match=r"^jobs\[4\]: "):
            way.enqueue_many(tx, refused_list(parent))
        assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        way.enqueue(tx, "after", {})  # the transaction is still usable
        tx.commit()
    kinds = conn.execute("SELECT kind FROM pgworkerd.jobs ORDER BY id").fetchall()
    assert kinds == [("parent",), *([("before",)] if begun else []), ("after",)]
    assert count(conn, "unique_slots") == 0


def test_a_list_in_a_transaction_not_begun_yet_is_taken_back_by_its_rollback(
    way, pconn, db_dsn, conn
):
    # The savepoint, not conn.transaction(): on a connection whose transaction has not
    # begun (Django's atomic() before its first query), the latter would BEGIN and then
    # COMMIT, and the caller's rollback would keep the jobs.
    parent = way.enqueue(pconn, "parent", {})
    with way.connect(db_dsn) as tx:
        assert tx.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        ids = way.enqueue_many(tx, refused_list(parent)[:4])
        assert len(ids) == 4
        tx.rollback()
    assert count(conn) == 1
    assert count(conn, "unique_slots") == 0


@pytest.mark.parametrize(
    ("then", "message"),
    [
        ({"kind": "cb", "payload": {1, 2}}, "then: payload is not JSON-serialisable"),
        ({"kind": "cb", "payload": "x" * (1 << 20)}, "then: payload is 1048578 bytes of JSON"),
        (
            {"kind": "cb", "payload": {}, "unique_key": "u"},
            "then: a batch's then may not have a unique_key",
        ),
        ({"kind": "", "payload": {}}, "then: kind must not be empty"),
        ({"kind": "cb", "payload": {}, "after": [1]}, "then: a batch sets after itself"),
    ],
)
def test_a_batch_whose_callback_is_refused_inserts_nothing(way, pconn, conn, then, message):
    # The callback was checked without its payload, and went in after the jobs: a
    # refused one left the batch's jobs behind, committed on an autocommit connection.
    with pytest.raises(InvalidJob) as refused:
        way.batch(pconn, [{"kind": "k", "payload": {}}] * 2, then)
    assert str(refused.value).startswith(message)
    assert count(conn) == 0


def test_a_batch_over_the_callbacks_limit_is_refused_before_any_sql(way, pconn, conn, monkeypatch):
    monkeypatch.setattr(producer, "MAX_AFTER_IDS", 3)
    too_many = r"^a batch holds at most 3 jobs, got 4$"
    with way.count_statements() as execute, pytest.raises(InvalidJob, match=too_many):
        way.batch(pconn, [{"kind": "k", "payload": {}}] * 4, {"kind": "cb", "payload": {}})
    assert execute.call_count == 0
    assert count(conn) == 0


def test_a_batch_waits_for_a_job_two_items_share_once(way, pconn, conn):
    item = {"kind": "k", "payload": {}, "unique_key": "same"}
    jobs = [item, {"kind": "k", "payload": {}}, item]
    ids, then = way.batch(pconn, jobs, {"kind": "cb", "payload": {}})
    assert ids[0] == ids[2] != ids[1]
    assert conn.execute(ROWS, [[then]]).fetchone()[-1] == sorted({ids[0], ids[1]})


def test_a_chain_refuses_after_failure_on_its_items(way, pconn, conn):
    # It was checked, then dropped: a link asking for "run" was cancelled all the same.
    with pytest.raises(InvalidJob, match=r"^jobs\[1\]: a chain sets after_failure itself$"):
        way.chain(
            pconn,
            [{"kind": "a", "payload": {}}, {"kind": "b", "payload": {}, "after_failure": "run"}],
        )
    assert count(conn) == 0
