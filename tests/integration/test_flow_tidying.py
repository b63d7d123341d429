"""The rows of flow control on a real server: what a key pause holds back is counted
through jobs_key_queued_idx (0008), never by a pass over the queued jobs; the tidying
duty's statement forgets ended pauses and idle uniqueness slots, and never one that a
pause or a producer still needs."""

from __future__ import annotations

import time
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.config import Config
from pgworkerd.housekeeping import Housekeeper
from pgworkerd.housekeeping.duty import Round
from pgworkerd.housekeeping.tidying import TIDY_INTERVAL_S
from pgworkerd.storage.key_pauses import KeyPauseStore
from pgworkerd.storage.store import JobStore
from pgworkerd.storage.tidying import FlowTidying, Tidied


def age_rows(conn: psycopg.Connection[Any], seconds: int) -> None:
    """Every pause ended, and every slot was last touched, `seconds` ago."""
    conn.execute(
        "UPDATE pgworkerd.paused_keys SET until = now() - make_interval(secs => %s)", [seconds]
    )
    conn.execute(
        "UPDATE pgworkerd.unique_slots SET touched_at = now() - make_interval(secs => %s),"
        " window_ends_at = CASE WHEN mode = 'throttle'"
        "   THEN now() - make_interval(secs => %s) END",
        [seconds, seconds],
    )


def _scans(node: dict[str, Any]) -> Any:
    """(node type, index or relation) of every scan in a JSON plan."""
    if "Scan" in node["Node Type"]:
        yield node["Node Type"], node.get("Index Name") or node.get("Relation Name")
    for child in node.get("Plans", []):
        yield from _scans(child)


def slots(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT unique_key FROM pgworkerd.unique_slots ORDER BY 1").fetchall()
    return [r[0] for r in rows]


def test_holding_counts_the_ready_jobs_of_paused_keys_by_key_and_by_queue(conn):
    pgworkerd.enqueue_many(
        conn,
        [
            {"kind": "k", "payload": {}, "key": "a"},
            {"kind": "k", "payload": {}, "key": "a", "queue": "mail"},
            {"kind": "k", "payload": {}, "key": "a", "delay": 3600},  # not ready: not held
            {"kind": "k", "payload": {}, "key": "b"},
            {"kind": "k", "payload": {}},
        ],
    )
    pgworkerd.pause_key(conn, "a", 60)
    store = KeyPauseStore("pgworkerd")
    assert [(r["key"], r["held_back"]) for r in store.holding(conn, limit=10)] == [("a", 2)]
    assert store.holding_by_queue(conn, ["default", "mail", "other"]) == {"default": 1, "mail": 1}
    assert store.holding_by_queue(conn, ["default"]) == {"default": 1}
    pgworkerd.resume_key(conn, "a")
    assert store.holding(conn, limit=10) == [] and store.holding_by_queue(conn, ["default"]) == {}


def test_the_counts_read_the_key_index_not_the_table(conn):
    """100,000 queued jobs over 1,000 keys: the count for one paused key is a range
    scan of jobs_key_queued_idx, with no JIT (paused_keys is analysed by 0008)."""
    conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, key)"
        " SELECT 'default', 'k', '{}', 'tenant:' || (n % 1000) FROM generate_series(1, 100000) n"
    )
    conn.execute("ANALYZE pgworkerd.jobs")
    pgworkerd.pause_key(conn, "tenant:7", 60)
    for name, params in [
        ("keys_paused_holding", {"limit": 21}),
        ("keys_paused_holding_by_queue", {"queues": ["default"]}),
    ]:
        query = pgworkerd.storage.queries.statements("pgworkerd")[name]
        plan = conn.execute(b"EXPLAIN (FORMAT JSON) " + query, params).fetchone()[0]
        scans = list(_scans(plan[0]["Plan"]))
        assert "JIT" not in plan[0], f"{name}: JIT compiling costs more than the counts"
        assert any(rel == "jobs_key_queued_idx" for _, rel in scans), (name, scans)
        assert not any(node == "Seq Scan" and rel == "jobs" for node, rel in scans), scans
    held = KeyPauseStore("pgworkerd").holding(conn, limit=10)
    assert [(r["key"], r["held_back"]) for r in held] == [("tenant:7", 100)]


def test_tidying_forgets_ended_pauses_and_idle_slots_only(conn):
    pgworkerd.pause_key(conn, "ended", 60)
    done = pgworkerd.enqueue(conn, "k", {}, unique_key="debounce-done", debounce=60)
    pgworkerd.cancel(conn, done)
    pgworkerd.enqueue(conn, "k", {}, unique_key="debounce-queued", debounce=60)
    pgworkerd.enqueue(conn, "k", {}, unique_key="throttle-ended", throttle=60)
    age_rows(conn, 3600)
    pgworkerd.pause_key(conn, "running", 60)
    pgworkerd.enqueue(conn, "k", {}, unique_key="throttle-open", throttle=60)
    tidying = FlowTidying("pgworkerd")

    assert tidying.tidy(conn, keep_s=7200) == Tidied(0, 0), "not old enough yet"
    assert tidying.tidy(conn, keep_s=600) == Tidied(pauses=1, slots=2)
    assert [r[0] for r in conn.execute("SELECT key FROM pgworkerd.paused_keys")] == ["running"]
    assert slots(conn) == ["debounce-queued", "throttle-open"]


def test_a_producer_that_touched_its_slot_keeps_it_from_a_concurrent_tidy(db_dsn, conn):
    """The tidy waits for the producer's lock, then re-reads the row: touched now, kept;
    the debounce still folds into the one job."""
    job = pgworkerd.enqueue(conn, "k", {"n": 1}, unique_key="d", debounce=60)
    pgworkerd.cancel(conn, job)
    age_rows(conn, 3600)
    with psycopg.connect(db_dsn) as producer:
        second = pgworkerd.enqueue(producer, "k", {"n": 2}, unique_key="d", debounce=60)
        assert second != job
        with psycopg.connect(db_dsn) as tidier:
            tidier.execute("SET lock_timeout = '200ms'")
            try:
                FlowTidying("pgworkerd").tidy(tidier, keep_s=600)
                raise AssertionError("the tidy should wait on the producer's row")
            except psycopg.errors.LockNotAvailable:
                tidier.rollback()
            producer.commit()
            tidier.execute("SET lock_timeout = 0")
            assert FlowTidying("pgworkerd").tidy(tidier, keep_s=600) == Tidied(0, 0)
            tidier.commit()
    assert slots(conn) == ["d"]
    assert pgworkerd.enqueue(conn, "k", {"n": 3}, unique_key="d", debounce=60) == second


def test_the_housekeepers_tidying_duty_runs_the_tidy_at_its_interval(db_dsn, conn):
    pgworkerd.pause_key(conn, "ended", 60)
    pgworkerd.enqueue(conn, "k", {}, unique_key="t", throttle=60)
    age_rows(conn, 3600)
    keeper = Housekeeper(
        store=JobStore(),
        database_url=db_dsn,
        lease_ttl_s=30,
        config=lambda: Config(),
        daemon_id="test",
        listen=False,
    )
    try:
        assert keeper.tidying in keeper.duties
        assert keeper.tidying.due(time.monotonic()), "due at once"
        keeper.tidying.perform(
            Round(time.monotonic(), keeper.session, keeper.store, lambda: [], lambda: {})
        )
        assert not keeper.tidying.due(time.monotonic()), "then only after its interval"
        assert keeper.tidying.next_at() - time.monotonic() > TIDY_INTERVAL_S - 5
    finally:
        keeper.session.close()
    assert conn.execute("SELECT count(*) FROM pgworkerd.paused_keys").fetchone()[0] == 0
    assert slots(conn) == []
