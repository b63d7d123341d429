"""The locks a release takes and the locks an enqueue `after` takes are taken in orders
that cannot cross (review 25, after F3). Each test holds one row with a third session
so that the two statements stop where, with the old order, each held what the other
needed next; the row is then let go. Before the fixes, PostgreSQL broke the cycle by
rolling one of them back (DeadlockDetected)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import blocked, claim, wait_blocked

Conn = psycopg.Connection[Any]


class _Sessions:
    """Sessions that each run one call in a thread of its own and commit it; their
    errors are kept by name."""

    def __init__(self, db_dsn: str) -> None:
        self.db_dsn = db_dsn
        self.errors: dict[str, str] = {}
        self.results: dict[str, Any] = {}
        self.sessions: list[Conn] = []
        self.threads: list[threading.Thread] = []

    def session(self) -> Conn:
        session = psycopg.connect(self.db_dsn)
        self.sessions.append(session)
        session.execute("SET deadlock_timeout = '50ms'")  # a deadlock found in 50 ms
        # A batch's rows found by an index scan of the primary key, so locked in id order
        # (a sequential or bitmap scan takes them as they lie in the heap).
        session.execute("SET enable_seqscan = off")
        session.execute("SET enable_bitmapscan = off")
        session.commit()
        return session

    def start(self, name: str, session: Conn, call: Callable[[Conn], Any]) -> None:
        def run() -> None:
            try:
                self.results[name] = call(session)
                session.commit()
            except psycopg.Error as exc:  # reported by the caller's assertion
                self.errors[name] = type(exc).__name__
                session.rollback()

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in self.threads)

    def close(self) -> None:
        for session in self.sessions:
            session.close()


def test_an_enqueue_after_a_waiting_and_a_running_job_never_deadlocks_with_their_batch(
    db_dsn: str, conn: Conn, store: JobStore
):
    """A worker completes A and R in one statement; W waits for A; a producer enqueues
    a job after W and R (A < W < R by id). The completion locks A and R, then (its
    release) W; the producer locked W, then R: in id order. Now it locks the jobs that
    are not waiting first (R), then the waiting ones (W)."""
    a = pgworkerd.enqueue(conn, "k", {})
    w = pgworkerd.enqueue(conn, "k", {}, after=[a])
    z = pgworkerd.enqueue(conn, "k", {}, queue="other")  # held: the producer stops there
    r = pgworkerd.enqueue(conn, "k", {})
    conn.commit()
    leases = {job.id: job.lease for job in claim(store, conn, limit=10)}
    conn.commit()
    assert sorted(leases) == [a, r]

    run = _Sessions(db_dsn)
    try:
        holder, producer, worker = run.session(), run.session(), run.session()
        holder.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [z])
        # Before: the producer has locked W and waits for Z. Now: it waits for Z (not
        # waiting, so before W), holding nothing of this test's.
        run.start("producer", producer, lambda c: pgworkerd.enqueue(c, "k", {}, after=[w, z, r]))
        wait_blocked(conn, producer, "the producer")
        # The batch locks A and R; its release then needs W. Before: held by the
        # producer, so it waits. Now it is free and the batch commits.
        run.start(
            "worker", worker, lambda c: store.complete(c, [(leases[a], None), (leases[r], None)])
        )
        deadline = time.monotonic() + 10
        while "worker" not in run.results and "worker" not in run.errors:
            if blocked(conn, worker):
                break
            assert time.monotonic() < deadline, "the batch neither ended nor waited"
            time.sleep(0.02)
        # Z let go: before, the producer went on to R, held by the batch, which waited
        # for W, held by the producer: a cycle.
        holder.rollback()
        run.join()
    finally:
        run.close()

    assert run.errors == {}
    assert run.results["worker"] == {a, r}
    job = run.results["producer"]
    rows = conn.execute(
        "SELECT id, state FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id",
        [[a, w, r, job]],
    ).fetchall()
    assert rows == [(a, "succeeded"), (w, "queued"), (r, "succeeded"), (job, "waiting")]
    # R had succeeded when the producer read it: the job waits for W and Z only.
    assert conn.execute(
        "SELECT deps_pending FROM pgworkerd.jobs WHERE id = %s", [job]
    ).fetchone() == (2,)
    assert conn.execute(
        "SELECT dependency_id FROM pgworkerd.job_dependencies WHERE job_id = %s"
        " ORDER BY dependency_id",
        [job],
    ).fetchall() == [(w,), (z,)]


def _cascade_across(conn: Conn) -> tuple[int, int, int, int, int, int]:
    """R and S; P1 after R; Q after P1 and S; P2 after R and S; H after R (by id in
    that order). A cancel of R cancels P1, P2, H (the first level), then Q (after P1).
    S's release needs Q and P2."""
    r, s = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": i} for i in range(2)])
    p1 = pgworkerd.enqueue(conn, "k", {}, after=[r])
    q = pgworkerd.enqueue(conn, "k", {}, after=[p1, s])
    p2 = pgworkerd.enqueue(conn, "k", {}, after=[r, s])
    h = pgworkerd.enqueue(conn, "k", {}, after=[r])
    conn.commit()
    return r, s, p1, q, p2, h


def _cancel_cascading_across(
    db_dsn: str, conn: Conn, jobs: tuple[int, ...], other: Callable[[Conn], Any]
) -> _Sessions:
    """Cancel R while `other` releases S's dependents; H is held meanwhile. Before, the
    cancel locked its first level (P1, P2) and waited for H, `other` then locked Q and
    waited for P2, and the cancel, let go, went on to its second level, Q: a cycle. Now
    the cancel locks P1, Q, P2 (all it can reach, in id order) and waits for H; `other`
    waits for Q."""
    r, _, _, _, _, h = jobs
    run = _Sessions(db_dsn)
    try:
        holder, cancelling, releasing = run.session(), run.session(), run.session()
        holder.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [h])
        run.start("cancel", cancelling, lambda c: pgworkerd.cancel(c, r))
        wait_blocked(conn, cancelling, "the cancel")
        run.start("other", releasing, other)
        wait_blocked(conn, releasing, "the other release")
        holder.rollback()
        run.join()
    finally:
        run.close()
    return run


def test_a_cancellation_cascade_never_deadlocks_with_a_completion(
    db_dsn: str, conn: Conn, store: JobStore
):
    jobs = _cascade_across(conn)
    r, s, p1, q, p2, h = jobs
    (lease,) = [job.lease for job in claim(store, conn, limit=10) if job.id == s]
    conn.commit()
    run = _cancel_cascading_across(db_dsn, conn, jobs, lambda c: store.complete(c, [(lease, None)]))
    assert run.errors == {}
    assert run.results == {"cancel": True, "other": {s}}
    states = dict(
        conn.execute(
            "SELECT id, state FROM pgworkerd.jobs WHERE id = ANY(%s)", [list(jobs)]
        ).fetchall()
    )
    assert states == {
        r: "cancelled",
        s: "succeeded",
        p1: "cancelled",
        q: "cancelled",
        p2: "cancelled",
        h: "cancelled",
    }
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)


def test_two_cancellation_cascades_crossing_never_deadlock(db_dsn: str, conn: Conn):
    jobs = _cascade_across(conn)
    s = jobs[1]
    run = _cancel_cascading_across(db_dsn, conn, jobs, lambda c: pgworkerd.cancel(c, s))
    assert run.errors == {}
    assert run.results == {"cancel": True, "other": True}
    assert conn.execute(
        "SELECT count(*) FROM pgworkerd.jobs WHERE id = ANY(%s) AND state = 'cancelled'",
        [list(jobs)],
    ).fetchone() == (6,)
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)


def test_two_cancels_in_each_of_two_transactions_may_deadlock_and_a_rerun_succeeds(
    db_dsn: str, conn: Conn
):
    """Not fixed (docs/design.md, "Not fixed: two outcome statements in one application
    transaction"): each cancel locks its dependents until its transaction ends, so two
    transactions of two cancels each, over jobs that share dependents, can deadlock. What
    is promised: the transaction PostgreSQL picks is rolled back whole, and run again it
    succeeds, every dependent counted down once."""
    a, b, c, e = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": i} for i in range(4)])
    d = pgworkerd.enqueue(conn, "k", {}, after=[a, c], after_failure="run")
    f = pgworkerd.enqueue(conn, "k", {}, after=[e, b], after_failure="run")
    run = _Sessions(db_dsn)
    try:
        first, second = run.session(), run.session()
        assert pgworkerd.cancel(first, a)  # D locked until `first` ends
        assert pgworkerd.cancel(second, b)  # F locked until `second` ends
        run.start("first", first, lambda s: pgworkerd.cancel(s, e))  # waits for F
        wait_blocked(conn, first, "the first transaction")
        run.start("second", second, lambda s: pgworkerd.cancel(s, c))  # waits for D: a cycle
        run.join()
        assert list(run.errors.values()) == ["DeadlockDetected"]
        (victim,) = run.errors
        assert len(run.results) == 1
        # Rolled back whole: its first cancel too. Run again, it goes through.
        rerun = run.session()
        ids = (a, e) if victim == "first" else (b, c)
        assert conn.execute(
            "SELECT count(*) FROM pgworkerd.jobs WHERE id = ANY(%s) AND state = 'queued'",
            [list(ids)],
        ).fetchone() == (2,)
        with rerun.transaction():
            assert all(pgworkerd.cancel(rerun, job) for job in ids)
    finally:
        run.close()
    rows = conn.execute(
        "SELECT id, state, deps_pending FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id",
        [[a, b, c, e, d, f]],
    ).fetchall()
    assert rows == [
        (a, "cancelled", 0),
        (b, "cancelled", 0),
        (c, "cancelled", 0),
        (e, "cancelled", 0),
        (d, "queued", 0),
        (f, "queued", 0),
    ]
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)
