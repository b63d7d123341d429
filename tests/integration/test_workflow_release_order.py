"""The release locks the dependents of one outcome statement in id order, all of them
(migration 0019): two completions of batches that cross shared dependents wait for one
another, never each for the other. Review 25 F3: with one release per row of the
statement, each in id order only among its own dependents, they deadlocked under
ordinary load (two daemons, no-op jobs) and one batch was rolled back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim, wait_blocked

Conn = psycopg.Connection[Any]


def test_batches_crossing_shared_dependents_complete_without_a_deadlock(
    db_dsn: str, conn: Conn, store: JobStore
):
    # a < b < c < e < d by id. X waits for a and d, Y for b and c, Z for e.
    a, b, c, e, d = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": i} for i in range(5)])
    x = pgworkerd.enqueue(conn, "k", {}, after=[a, d])
    y = pgworkerd.enqueue(conn, "k", {}, after=[b, c])
    z = pgworkerd.enqueue(conn, "k", {}, after=[e])
    leases = {job.id: job.lease for job in claim(store, conn, limit=10)}
    assert sorted(leases) == [a, b, c, e, d]

    holder, first, second = (psycopg.connect(db_dsn) for _ in range(3))
    errors: dict[str, BaseException] = {}
    done: dict[str, set[int]] = {}

    def complete(name: str, session: Conn, ids: list[int]) -> Callable[[], None]:
        def run() -> None:
            try:
                done[name] = store.complete(session, [(leases[i], None) for i in ids])
                session.commit()
            except BaseException as exc:  # reported by the assertion below
                errors[name] = exc
                session.rollback()

        return run

    try:
        for session in (first, second):
            session.execute("SET deadlock_timeout = '50ms'")  # a deadlock found in 50 ms
            # Each batch's rows found by an index scan of the primary key, so updated
            # (and their row triggers fired) in id order; a sequential or bitmap scan
            # takes them as they lie in the heap, an order the test does not choose.
            session.execute("SET enable_seqscan = off")
            session.execute("SET enable_bitmapscan = off")
            session.commit()
        # Z is held, so the first batch stops between its dependents: with one release
        # per row (c, e, d in id order) it has locked Y (c's) and waits for Z (e's)
        # before it locks X (d's).
        holder.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [z])
        one = threading.Thread(target=complete("first", first, [c, e, d]))
        one.start()
        wait_blocked(conn, first, "the first batch")
        # The second batch locks X (a's), then waits for Y (b's), which the first holds.
        two = threading.Thread(target=complete("second", second, [a, b]))
        two.start()
        wait_blocked(conn, second, "the second batch")
        # Z free: the first goes on to X, held by the second, which waits for Y: a
        # cycle, unless the first took X and Y before it ever waited for Z.
        holder.rollback()
        one.join(timeout=30)
        two.join(timeout=30)
        assert not one.is_alive() and not two.is_alive()
    finally:
        for session in (holder, first, second):
            session.close()

    assert {name: type(exc).__name__ for name, exc in errors.items()} == {}
    assert done == {"first": {c, e, d}, "second": {a, b}}
    rows = conn.execute(
        "SELECT id, state, deps_pending FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id",
        [[x, y, z]],
    ).fetchall()
    assert rows == [(x, "queued", 0), (y, "queued", 0), (z, "queued", 0)]
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)


def test_a_cancel_of_thousands_with_dependents_releases_each_once(conn: Conn, store: JobStore):
    """More outcomes with dependents in one statement than the noted list holds
    (0019: released in chunks): every dependent is cancelled, or queued for
    after_failure='run', exactly once, and no edge is left."""
    parents = pgworkerd.enqueue_many(conn, [{"kind": "p", "payload": i} for i in range(5000)])
    children = pgworkerd.enqueue_many(
        conn,
        [
            {"kind": "c", "payload": i, "after": [p], "after_failure": "run" if i % 2 else "cancel"}
            for i, p in enumerate(parents)
        ],
    )
    callback = pgworkerd.enqueue(conn, "cb", {}, after=parents[:3] + parents[-3:])
    assert sorted(store.cancel(conn, parents)) == parents
    rows = conn.execute(
        "SELECT state, deps_pending, count(*) FROM pgworkerd.jobs WHERE kind = 'c'"
        " GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert rows == [("cancelled", 0, 2500), ("queued", 0, 2500)]
    assert [
        r[0]
        for r in conn.execute(
            "SELECT id FROM pgworkerd.jobs WHERE kind = 'c' AND state = 'queued' ORDER BY id"
        )
    ] == children[1::2]
    assert conn.execute(
        "SELECT state FROM pgworkerd.jobs WHERE id = %s", [callback]
    ).fetchone() == ("cancelled",)
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)


def test_one_batch_completing_several_dependencies_of_a_job_counts_each(
    conn: Conn, store: JobStore
):
    """A dependent with edges from several jobs of one statement is counted down by
    all of them at once (0019's fast path: n edges, one update)."""
    a, b, c = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": i} for i in range(3)])
    both = pgworkerd.enqueue(conn, "k", {}, after=[a, b])
    all_three = pgworkerd.enqueue(conn, "k", {}, after=[a, b, c])
    leases = {job.id: job.lease for job in claim(store, conn, limit=10)}
    assert store.complete(conn, [(leases[a], None), (leases[b], None)]) == {a, b}
    rows = conn.execute(
        "SELECT id, state, deps_pending FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id",
        [[both, all_three]],
    ).fetchall()
    assert rows == [(both, "queued", 0), (all_three, "waiting", 1)]
