"""Workflows against the real database: `after=` makes a job `waiting`; the outcome
statement of its last dependency releases it (complete, fail to dead, rescue to dead,
cancel), in the same statement; dead or cancelled dependencies cancel in cascade or,
with after_failure="run", queue; an insert racing a dependency's outcome in another
transaction counts it exactly once, whichever commits first."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim, expire_leases, wait_blocked

Conn = psycopg.Connection[Any]


def states(conn: Conn, *ids: int) -> list[str]:
    rows = dict(
        conn.execute(
            "SELECT id, state FROM pgworkerd.jobs WHERE id = ANY(%s)", [list(ids)]
        ).fetchall()
    )
    return [rows[i] for i in ids]


def run_one(store: JobStore, conn: Conn, job_id: int, *, ok: bool = True) -> None:
    jobs = claim(store, conn, limit=1)
    assert [j.id for j in jobs] == [job_id], f"job {job_id} is not the next claimable"
    if ok:
        assert store.complete(conn, [(jobs[0].lease, None)]) == {job_id}
    else:
        assert store.fail(conn, jobs[0].lease, "boom", discard=True) is not None


def test_a_dependent_waits_until_every_dependency_succeeded(conn: Conn, store: JobStore):
    a, b = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": 1}, {"kind": "k", "payload": 2}])
    c = pgworkerd.enqueue(conn, "k", 3, after=[a, b])
    assert states(conn, c) == ["waiting"]
    claimed = claim(store, conn, limit=10)
    assert sorted(j.id for j in claimed) == [a, b], "a waiting job is never claimed"
    store.complete(conn, [(claimed[0].lease, None)])
    assert states(conn, c) == ["waiting"]
    store.complete(conn, [(claimed[1].lease, None)])
    assert states(conn, c) == ["queued"]
    (job,) = claim(store, conn, limit=10)
    assert job.id == c and job.after == (a, b)


def test_a_dead_dependency_cancels_in_cascade_to_any_depth(conn: Conn, store: JobStore):
    ids = pgworkerd.chain(conn, [{"kind": "k", "payload": i} for i in range(50)])
    run_one(store, conn, ids[0], ok=False)
    assert set(states(conn, *ids[1:])) == {"cancelled"}
    last = conn.execute(
        "SELECT last_error, finished_at IS NOT NULL FROM pgworkerd.jobs WHERE id = %s",
        [ids[-1]],
    ).fetchone()
    assert last == (
        f"cancelled: job {ids[-2]}, which it was to run after, ended dead or cancelled",
        True,
    )
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)


def test_after_failure_run_queues_the_callback_once(conn: Conn, store: JobStore):
    ids, then = pgworkerd.batch(
        conn, [{"kind": "k", "payload": i} for i in range(3)], then={"kind": "cb", "payload": {}}
    )
    run_one(store, conn, ids[0], ok=False)
    run_one(store, conn, ids[1])
    assert states(conn, then) == ["waiting"]
    store.cancel(conn, [ids[2]])
    assert states(conn, then) == ["queued"]


def test_a_rescue_to_dead_releases(conn: Conn, store: JobStore):
    a = pgworkerd.enqueue(conn, "k", {}, max_attempts=1)
    b = pgworkerd.enqueue(conn, "k", {}, after=[a], after_failure="run")
    claim(store, conn)
    expire_leases(conn)
    store.rescue(conn)
    assert states(conn, a, b) == ["dead", "queued"]


def test_cancelling_a_waiting_job_by_hand_cascades(conn: Conn, store: JobStore):
    a = pgworkerd.enqueue(conn, "k", {})
    b = pgworkerd.enqueue(conn, "k", {}, after=[a])
    c = pgworkerd.enqueue(conn, "k", {}, after=[b])
    assert store.cancel(conn, [b]) == [b]
    assert states(conn, a, b, c) == ["queued", "cancelled", "cancelled"]
    run_one(store, conn, a)  # its edge to the cancelled b is dropped, b untouched
    assert states(conn, b) == ["cancelled"]


def test_dependencies_final_at_insert_count_at_once(conn: Conn, store: JobStore):
    a, d = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": 1}, {"kind": "k", "payload": 2}])
    run_one(store, conn, a)
    run_one(store, conn, d, ok=False)
    assert states(conn, pgworkerd.enqueue(conn, "k", {}, after=[a])) == ["queued"]
    assert states(conn, pgworkerd.enqueue(conn, "k", {}, after=[a, d])) == ["cancelled"]
    ran = pgworkerd.enqueue(conn, "k", {}, after=[a, d], after_failure="run")
    assert states(conn, ran) == ["queued"]
    flags = conn.execute("SELECT bool_or(has_dependents) FROM pgworkerd.jobs").fetchone()
    assert flags == (False,), "a final dependency gets no edge and no flag"


def test_unknown_ids_are_refused_and_nothing_is_inserted(conn: Conn):
    a = pgworkerd.enqueue(conn, "k", {})
    with pytest.raises(pgworkerd.InvalidJob, match=r"after names jobs that do not exist: 999"):
        pgworkerd.enqueue(conn, "k", {}, after=[a, 999])
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone() == (1,)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"after": []}, "after must name at least one job"),
        ({"after": "12"}, "after must be a list of job ids"),
        ({"after": [1.5]}, "after must hold job ids"),
        ({"after": [1], "after_failure": "skip"}, 'after_failure must be "cancel" or "run"'),
        ({"after": [1], "unique_key": "u"}, "give unique_key or after, not both"),
        # Review 25: "run" without `after` was dropped in silence.
        ({"after_failure": "run"}, "after_failure goes with after"),
        ({"after_failure": "cancel"}, "after_failure goes with after"),
    ],
)
def test_bad_after_options_are_refused(conn: Conn, options: dict[str, Any], message: str):
    with pytest.raises(pgworkerd.InvalidJob, match=message):
        pgworkerd.enqueue(conn, "k", {}, **options)


@pytest.mark.parametrize("insert_commits_first", [True, False])
def test_an_insert_racing_the_outcome_counts_it_exactly_once(
    db_dsn: str, conn: Conn, store: JobStore, insert_commits_first: bool
):
    a = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    producer = psycopg.connect(db_dsn)
    finisher = psycopg.connect(db_dsn)
    try:
        if insert_commits_first:
            b = pgworkerd.enqueue(producer, "k", {}, after=[a])
            done = threading.Thread(target=lambda: store.complete(finisher, [(job.lease, None)]))
            done.start()
            wait_blocked(conn, finisher, "the outcome (behind the insert's lock)")
            producer.commit()
            done.join()
            finisher.commit()
        else:
            store.complete(finisher, [(job.lease, None)])
            box: list[int] = []
            ins = threading.Thread(
                target=lambda: box.append(pgworkerd.enqueue(producer, "k", {}, after=[a]))
            )
            ins.start()
            wait_blocked(conn, producer, "the insert (behind the outcome's lock)")
            finisher.commit()
            ins.join()
            producer.commit()
            b = box[0]
    finally:
        producer.close()
        finisher.close()
    row = conn.execute(
        "SELECT state, deps_pending FROM pgworkerd.jobs WHERE id = %s", [b]
    ).fetchone()
    assert row == ("queued", 0)
    assert conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone() == (0,)


def test_the_async_twins_and_a_task_pass_after_through(db_dsn: str, conn: Conn):
    @pgworkerd.task(kind="t")
    def t(job: pgworkerd.Job) -> None:
        return None

    async def produce() -> tuple[list[int], list[int], int, int]:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn:
            links = await pgworkerd.chain_async(
                aconn, [{"kind": "k", "payload": i} for i in range(3)]
            )
            ids, then = await pgworkerd.batch_async(
                aconn, [{"kind": "k", "payload": 0}], then={"kind": "cb", "payload": {}}
            )
            one = await pgworkerd.enqueue_async(aconn, "k", {}, after=[links[-1]])
        return links, ids, then, one

    links, ids, then, one = asyncio.run(produce())
    by_task = t.enqueue(conn, {}, after=[one], after_failure="run")
    rows = {
        row[0]: row[1:]
        for row in conn.execute("SELECT id, state, after_ids, after_failure FROM pgworkerd.jobs")
    }
    assert rows[links[1]] == ("waiting", [links[0]], "cancel")
    assert rows[then] == ("waiting", ids, "run")
    assert rows[one] == ("waiting", [links[-1]], "cancel")
    assert rows[by_task] == ("waiting", [one], "run")


def test_producers_adding_a_parents_first_dependents_at_once_never_deadlock(db_dsn: str):
    """Two transactions that enqueue the first dependents of the same parent at the
    same moment. Both used to take the parent's share lock and then each wait, to set
    its has_dependents, for the other's: a deadlock, one producer's transaction
    aborted (about 1 round in 20). A parent without the flag is now locked at once in
    the mode the flag's write needs, so the second waits for the first and then sees
    the flag set."""
    rounds = 150
    producers = [psycopg.connect(db_dsn) for _ in range(2)]
    for p in producers:
        p.execute("SET deadlock_timeout = '10ms'")  # find a deadlock in 10 ms, not 1 s
        p.commit()
    errors: list[BaseException] = []
    try:
        with psycopg.connect(db_dsn, autocommit=True) as setup:
            parents = [pgworkerd.enqueue(setup, "parent", {}) for _ in range(rounds)]
        for parent in parents:
            gate = threading.Barrier(2)

            def produce(p: Conn, parent: int = parent, gate: threading.Barrier = gate) -> None:
                try:
                    gate.wait()
                    pgworkerd.enqueue(p, "child", {}, after=[parent])
                    p.commit()
                except BaseException as exc:  # recorded, the round goes on
                    errors.append(exc)
                    p.rollback()

            threads = [threading.Thread(target=produce, args=(p,)) for p in producers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        for p in producers:
            p.close()
    assert errors == []
    with psycopg.connect(db_dsn) as check:
        rows = check.execute(
            "SELECT count(*) FILTER (WHERE state = 'waiting'), count(DISTINCT after_ids)"
            " FROM pgworkerd.jobs WHERE kind = 'child'"
        ).fetchone()
        flags = check.execute(
            "SELECT count(*) FROM pgworkerd.jobs WHERE kind = 'parent' AND has_dependents"
        ).fetchone()
    assert rows == (2 * rounds, rounds)
    assert flags == (rounds,)
