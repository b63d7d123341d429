"""The uniqueness modes on a real server (issue 19): `debounce` folds a burst of enqueues
of one unique_key into one job that runs DUR after the last, with the last payload;
`throttle` creates at most one job per key per DUR. Every case runs sync and async
(producer_ways.py); the races use two real connections with interleaved, uncommitted
transactions, and threads hammering one key."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import pgworkerd
from pgworkerd import InvalidJob
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim, db_now
from tests.integration.test_producer import _wait_for_lock_waiter
from tests.integration.test_sqlalchemy import sqlalchemy_url
from tests.tasks import shop


def jobs(conn: psycopg.Connection[Any]) -> list[tuple[int, str, Any]]:
    return conn.execute("SELECT id, state, payload FROM pgworkerd.jobs ORDER BY id").fetchall()


def run_in(conn: psycopg.Connection[Any], job_id: int) -> timedelta:
    return conn.execute(
        "SELECT run_at - now() FROM pgworkerd.jobs WHERE id = %s", [job_id]
    ).fetchone()[0]


def end_window(conn: psycopg.Connection[Any], unique_key: str) -> None:
    """The throttle window's end passes, as the clock would."""
    conn.execute(
        "UPDATE pgworkerd.unique_slots SET window_ends_at = now() - interval '1 second'"
        " WHERE unique_key = %s",
        [unique_key],
    )


# -- debounce ------------------------------------------------------------------------------


def test_a_burst_debounces_into_one_job_with_the_last_payload(way, pconn, conn):
    ids = [way.enqueue(pconn, "k", {"n": n}, unique_key="doc:1", debounce=60) for n in range(3)]
    assert len(set(ids)) == 1
    assert jobs(conn) == [(ids[0], "queued", {"n": 2})]
    assert timedelta(seconds=59) < run_in(conn, ids[0]) <= timedelta(seconds=60)


def test_each_debounced_enqueue_pushes_the_run_back(way, pconn, conn):
    job = way.enqueue(pconn, "k", {}, unique_key="doc:1", debounce=timedelta(seconds=5))
    conn.execute("UPDATE pgworkerd.jobs SET run_at = now() - interval '1 hour'")
    assert way.enqueue(pconn, "k", {"v": 2}, unique_key="doc:1", debounce=30) == job
    assert timedelta(seconds=29) < run_in(conn, job) <= timedelta(seconds=30)


def test_debounce_while_the_job_runs_makes_one_new_queued_job(way, pconn, conn, store):
    first = way.enqueue(pconn, "k", {"n": 1}, unique_key="doc:1", debounce=0.001)
    conn.execute("SELECT pg_sleep(0.01)")
    assert [j.id for j in claim(store, conn)] == [first]
    second = way.enqueue(pconn, "k", {"n": 2}, unique_key="doc:1", debounce=60)
    third = way.enqueue(pconn, "k", {"n": 3}, unique_key="doc:1", debounce=60)
    assert second == third != first
    assert jobs(conn) == [(first, "running", {"n": 1}), (second, "queued", {"n": 3})]


@pytest.mark.parametrize("end", ["cancel", "prune"])
def test_debounce_after_the_job_was_cancelled_or_pruned_makes_a_new_job(way, pconn, conn, end):
    first = way.enqueue(pconn, "k", {}, unique_key="doc:1", debounce=60)
    if end == "cancel":
        assert pgworkerd.cancel(conn, first)
    else:
        conn.execute("DELETE FROM pgworkerd.jobs WHERE id = %s", [first])
    second = way.enqueue(pconn, "k", {"n": 2}, unique_key="doc:1", debounce=60)
    assert second != first
    assert [(i, s) for i, s, _ in jobs(conn) if s == "queued"] == [(second, "queued")]


# -- throttle ------------------------------------------------------------------------------


def test_throttle_creates_one_job_per_window(way, pconn, conn):
    first = way.enqueue(pconn, "k", {"n": 1}, unique_key="sync:a", throttle=60)
    assert way.enqueue(pconn, "k", {"n": 2}, unique_key="sync:a", throttle=60) == first
    assert jobs(conn) == [(first, "queued", {"n": 1})]
    end_window(conn, "sync:a")
    second = way.enqueue(pconn, "k", {"n": 3}, unique_key="sync:a", throttle=60)
    assert second != first
    assert way.enqueue(pconn, "k", {"n": 4}, unique_key="sync:a", throttle=60) == second
    assert [p for _, _, p in jobs(conn)] == [{"n": 1}, {"n": 3}]


def test_throttle_returns_the_windows_job_whatever_its_state(way, pconn, conn, store):
    first = way.enqueue(pconn, "k", {}, unique_key="sync:a", throttle=60)
    claimed = claim(store, conn)
    assert [j.id for j in claimed] == [first]
    assert way.enqueue(pconn, "k", {}, unique_key="sync:a", throttle=60) == first  # running
    store.complete(conn, [(claimed[0].lease, None)])
    assert way.enqueue(pconn, "k", {}, unique_key="sync:a", throttle=60) == first  # succeeded
    conn.execute("DELETE FROM pgworkerd.jobs")  # pruned: the window is a span of time
    assert way.enqueue(pconn, "k", {}, unique_key="sync:a", throttle=60) == first
    assert jobs(conn) == []


def test_throttle_keeps_the_jobs_own_delay(way, pconn, conn):
    job = way.enqueue(pconn, "k", {}, unique_key="sync:a", throttle=60, delay=600)
    assert timedelta(seconds=599) < run_in(conn, job) <= timedelta(seconds=600)


# -- both, and their neighbours ------------------------------------------------------------


def test_modes_leave_plain_unique_keys_alone(way, pconn, conn):
    plain = way.enqueue(pconn, "k", {}, unique_key="x")
    debounced = way.enqueue(pconn, "k", {}, unique_key="x", debounce=60)
    assert debounced != plain
    assert way.enqueue(pconn, "k", {}, unique_key="x") == plain
    row = JobStore().get(conn, debounced)
    assert row["unique_key"] is None, "the live-job index would forbid the running+queued pair"


def test_a_key_switching_mode_starts_afresh(way, pconn, conn):
    throttled = way.enqueue(pconn, "k", {}, unique_key="s", throttle=60)
    debounced = way.enqueue(pconn, "k", {}, unique_key="s", debounce=60)
    assert debounced != throttled
    assert way.enqueue(pconn, "k", {}, unique_key="s", throttle=60) not in {throttled, debounced}


def test_enqueue_many_items_take_the_modes_and_keep_their_order(way, pconn, conn):
    ids = way.enqueue_many(
        pconn,
        [
            {"kind": "k", "payload": {"n": 0}, "unique_key": "b", "debounce": 60},
            {"kind": "k", "payload": {"n": 1}},
            {"kind": "k", "payload": {"n": 2}, "unique_key": "a", "throttle": 60},
            {"kind": "k", "payload": {"n": 3}, "unique_key": "b", "debounce": 60},
            {"kind": "k", "payload": {"n": 4}, "unique_key": "a", "throttle": 60},
            {"kind": "k", "payload": {"n": 5}, "unique_key": "plain"},
        ],
    )
    assert ids[0] == ids[3] and ids[2] == ids[4]
    assert len({ids[0], ids[1], ids[2], ids[5]}) == 4
    payloads = {i: p for i, _, p in jobs(conn)}
    assert payloads == {ids[0]: {"n": 3}, ids[1]: {"n": 1}, ids[2]: {"n": 2}, ids[5]: {"n": 5}}


def test_a_list_with_dependents_keeps_its_modes(way, pconn, conn):
    # Such a list goes in one job at a time; its debounced jobs were once inserted as
    # plain unique keys there, running at once and beside the key's next debounced job.
    parent = way.enqueue(pconn, "k", {})
    ids = way.enqueue_many(
        pconn,
        [
            {"kind": "k", "payload": {"n": 0}, "unique_key": "d", "debounce": 60},
            {"kind": "k", "payload": {"n": 1}, "after": [parent]},
            {"kind": "k", "payload": {"n": 2}, "unique_key": "t", "throttle": 60},
            {"kind": "k", "payload": {"n": 3}, "unique_key": "d", "debounce": 60},
        ],
    )
    assert ids[0] == ids[3]
    assert timedelta(seconds=59) < run_in(conn, ids[0]) <= timedelta(seconds=60)
    assert way.enqueue(pconn, "k", {"n": 4}, unique_key="d", debounce=60) == ids[0]
    assert way.enqueue(pconn, "k", {"n": 5}, unique_key="t", throttle=60) == ids[2]
    expected = [
        (parent, "queued", {}),
        (ids[0], "queued", {"n": 4}),
        (ids[1], "waiting", {"n": 1}),
        (ids[2], "queued", {"n": 2}),
    ]
    assert jobs(conn) == sorted(expected, key=lambda row: row[0])


def test_a_chains_first_job_keeps_its_unique_key_and_mode(way, pconn, conn):
    first, second = way.chain(
        pconn, [{"kind": "k", "payload": {}, "unique_key": "c"}, {"kind": "k", "payload": {}}]
    )
    again, third = way.chain(
        pconn, [{"kind": "k", "payload": {}, "unique_key": "c"}, {"kind": "k", "payload": {}}]
    )
    assert again == first, "the key's live job stands for the first link"
    after = conn.execute(
        "SELECT after_ids FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id", [[second, third]]
    ).fetchall()
    assert after == [([first],), ([first],)]
    debounced, _ = way.chain(
        pconn,
        [
            {"kind": "k", "payload": {}, "unique_key": "e", "debounce": 60},
            {"kind": "k", "payload": {}},
        ],
    )
    assert timedelta(seconds=59) < run_in(conn, debounced) <= timedelta(seconds=60)


def test_a_chains_later_job_with_a_unique_key_is_refused(way, pconn, conn):
    message = r"^jobs\[1\]: only a chain's first job may have a unique_key"
    for later in ({"unique_key": "u"}, {"unique_key": "u", "debounce": 5}):
        with pytest.raises(InvalidJob, match=message):
            way.chain(pconn, [{"kind": "k", "payload": {}}, {"kind": "k", "payload": {}} | later])
    assert jobs(conn) == []


def test_a_throttled_link_whose_windows_job_was_pruned_is_refused_saying_so(way, pconn, conn):
    # It was refused as "after names jobs that do not exist: N", an after no one wrote.
    first = way.enqueue(pconn, "k", {}, unique_key="sync:a", throttle=60)
    conn.execute("DELETE FROM pgworkerd.jobs")  # retention pruned it; the window stands
    throttled = {"kind": "k", "payload": {}, "unique_key": "sync:a", "throttle": 60}
    plain = {"kind": "k", "payload": {}}
    with pytest.raises(InvalidJob) as refused:
        way.chain(pconn, [throttled, plain])
    assert str(refused.value) == (
        f"jobs[1]: cannot run after jobs[0] (job {first}): no such job (a unique or "
        "throttled job's id whose job retention has pruned since)"
    )
    with pytest.raises(InvalidJob) as refused:
        way.batch(pconn, [plain, throttled], then=plain)
    assert str(refused.value).startswith(
        f"then: cannot wait for jobs[1] (job {first}): no such job (a unique or throttled"
    )
    assert jobs(conn) == [], "all or nothing"


def test_a_job_without_a_mode_costs_the_statements_it_did(way, pconn):
    with way.count_statements() as execute:
        way.enqueue(pconn, "k", {})
        way.enqueue(pconn, "k", {}, unique_key="u")
        way.enqueue_many(pconn, [{"kind": "k", "payload": {}, "unique_key": "v"}] * 2)
    assert execute.call_count == 3


def test_the_first_enqueue_of_a_burst_is_one_statement_and_the_next_two(way, pconn):
    with way.count_statements() as execute:
        way.enqueue(pconn, "k", {}, unique_key="d", debounce=60)
    assert execute.call_count == 1
    with way.count_statements() as execute:
        way.enqueue(pconn, "k", {}, unique_key="d", debounce=60)
    assert execute.call_count == 2
    with way.count_statements() as execute:
        way.enqueue(pconn, "k", {}, unique_key="t", throttle=60)
        way.enqueue(pconn, "k", {}, unique_key="t", throttle=60)
    assert execute.call_count == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce": 5}, "debounce needs a unique_key"),
        ({"throttle": 5}, "throttle needs a unique_key"),
        ({"unique_key": "u", "debounce": 5, "throttle": 5}, "not both"),
        ({"unique_key": "u", "debounce": 0}, "debounce must be a finite number of seconds > 0"),
        ({"unique_key": "u", "throttle": -1}, "throttle must be a finite number"),
        ({"unique_key": "u", "throttle": timedelta(0)}, "throttle must be a finite number"),
        ({"unique_key": "u", "debounce": "5s"}, "debounce must be seconds or a timedelta"),
        ({"unique_key": "u", "debounce": 5, "delay": 1}, "give no delay or run_at"),
        ({"unique_key": "u", "throttle": 1e13}, "throttle must be at most 100 years"),
        ({"unique_key": "u", "debounce": 1e-7}, "debounce must be at least a microsecond"),
    ],
)
def test_bad_modes_are_refused_before_any_sql(way, pconn, conn, options, message):
    with way.count_statements() as execute:
        with pytest.raises(ValueError, match=message):
            way.enqueue(pconn, "k", {}, **options)
        with pytest.raises(InvalidJob, match=r"jobs\[1\]: "):
            way.enqueue_many(
                pconn,
                [
                    {"kind": "k", "payload": {}, "unique_key": "z", "throttle": 1},
                    {"kind": "k", "payload": {}, **options},
                ],
            )
    assert execute.call_count == 0
    assert jobs(conn) == []


# -- races between producers ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["debounce", "throttle"])
@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_transactions_racing_for_one_key_make_one_job(way, db_dsn, mode, first_ends):
    """The second producer waits on the first's uncommitted slot; after the first
    commits it joins the first's job (debounce: with its own, later payload), after a
    rollback it makes its own."""
    with way.connect(db_dsn) as first, way.connect(db_dsn) as second:
        first_id = way.enqueue(first, "k", {"by": 1}, unique_key="race", **{mode: 60})
        result: dict[str, Any] = {}

        def enqueue_second() -> None:
            try:
                result["id"] = way.enqueue(second, "k", {"by": 2}, unique_key="race", **{mode: 60})
                second.commit()
            except Exception as exc:  # pragma: no cover - reported below
                result["error"] = exc

        thread = threading.Thread(target=enqueue_second)
        thread.start()
        assert _wait_for_lock_waiter(db_dsn), "the second should wait on the first's slot"
        getattr(first, first_ends)()
        thread.join(timeout=30)
    with psycopg.connect(db_dsn) as check:
        rows = jobs(check)
    if first_ends == "rollback":
        assert rows == [(result["id"], "queued", {"by": 2})]
        return
    assert result == {"id": first_id}
    expected = {"debounce": {"by": 2}, "throttle": {"by": 1}}[mode]
    assert rows == [(first_id, "queued", expected)]


@pytest.mark.parametrize("mode", ["debounce", "throttle"])
def test_threads_hammering_one_key_make_one_job(db_dsn, mode):
    threads, rounds = 8, 25
    ids: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def hammer(n: int) -> None:
        try:
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                for r in range(rounds):
                    job = pgworkerd.enqueue(
                        conn, "k", {"t": n, "r": r}, unique_key="hot", **{mode: 60}
                    )
                    with lock:
                        ids.append(job)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=hammer, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert errors == []
    assert len(ids) == threads * rounds and len(set(ids)) == 1
    with psycopg.connect(db_dsn) as check:
        assert [i for i, _, _ in jobs(check)] == ids[:1]


def test_debounce_racing_a_claim_never_folds_into_a_running_job(db_dsn, store):
    """A fold that waits for a claim re-reads the job, now running, and makes a new one."""
    with psycopg.connect(db_dsn, autocommit=True) as conn, psycopg.connect(db_dsn) as claimer:
        job = pgworkerd.enqueue(conn, "k", {}, unique_key="c", debounce=0.001)
        conn.execute("SELECT pg_sleep(0.01)")
        assert [j.id for j in claim(store, claimer)] == [job]  # uncommitted claim
        result: dict[str, int] = {}
        thread = threading.Thread(
            target=lambda: result.update(
                id=pgworkerd.enqueue(conn, "k", {"n": 2}, unique_key="c", debounce=60)
            )
        )
        thread.start()
        assert _wait_for_lock_waiter(db_dsn), "the fold should wait on the claimed row"
        claimer.commit()
        thread.join(timeout=30)
        assert result["id"] != job
        states = {i: s for i, s, _ in jobs(conn)}
        assert states == {job: "running", result["id"]: "queued"}
        assert db_now(conn) is not None


# -- the paths that pass enqueue options through -------------------------------------------


def test_task_functions_take_the_modes_sync_and_async(db_dsn, conn):
    with psycopg.connect(db_dsn, autocommit=True) as producer:
        first = shop.refund.enqueue(producer, {"n": 1}, unique_key="r", debounce=60)
        assert shop.refund.enqueue(producer, {"n": 2}, unique_key="r", debounce=60) == first

    async def produce() -> int:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn:
            return await shop.refund.enqueue_async(aconn, {"n": 3}, unique_key="r", debounce=60)

    assert asyncio.run(produce()) == first
    assert jobs(conn) == [(first, "queued", {"n": 3})]
    assert JobStore().get(conn, first)["queue"] == "payments", "the decorator's options stay"


def test_sqlalchemy_sessions_take_the_modes(db_dsn, conn):
    engine = create_engine(sqlalchemy_url(db_dsn))
    try:
        with Session(engine) as session:
            first = pgworkerd.enqueue(session, "k", {}, unique_key="s", throttle=60)
            again = pgworkerd.enqueue_many(
                session, [{"kind": "k", "payload": {}, "unique_key": "s", "throttle": 60}]
            )
            assert again == [first] and jobs(conn) == [], "in the session's transaction"
            session.commit()
    finally:
        engine.dispose()
    assert [i for i, _, _ in jobs(conn)] == [first]
