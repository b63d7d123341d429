"""Debounce and throttle with a real daemon running the jobs while two producers race
(issue 19): a burst from both becomes one run, with a payload of the burst, DUR after
the burst; a throttled key runs once per window; an enqueue that comes while the
debounced job runs makes exactly one more run."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

import pgworkerd
from tests.daemon import history, job_in_state, wait_until

CONFIG = {"workers": [{"queues": ["default"], "concurrency": 2}]}


def race(db_dsn: str, n: int, **options: Any) -> list[int]:
    """Two producers, each on its own connection, enqueue `n` jobs of one key at once."""
    ids: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(2)

    def produce(who: int) -> None:
        try:
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                start.wait(timeout=10)
                for i in range(n):
                    job = pgworkerd.enqueue(conn, "record", {"who": who, "i": i}, **options)
                    with lock:
                        ids.append(job)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    producers = [threading.Thread(target=produce, args=(who,)) for who in (1, 2)]
    for producer in producers:
        producer.start()
    for producer in producers:
        producer.join(timeout=60)
    assert errors == []
    return ids


def test_two_racing_producers_debounce_into_one_run(start_daemon, history_conn, db_dsn):
    start_daemon(**CONFIG).wait_for_workers(2)
    ids = race(db_dsn, 20, unique_key="doc", debounce=2)
    assert len(ids) == 40 and len(set(ids)) == 1
    [job] = set(ids)
    wait_until(job_in_state(history_conn, job, "succeeded"), timeout_s=30, what="the run")
    [(payload, run_in, started_late)] = history_conn.execute(
        "SELECT payload, run_at - created_at,"
        " (SELECT at FROM history WHERE job_id = j.id) >= run_at"
        " FROM pgworkerd.jobs AS j WHERE kind = 'record'"
    ).fetchall()
    assert payload["i"] == 19, "the payload of the enqueue that committed last"
    assert run_in.total_seconds() >= 2, "run_at was pushed back by each fold"
    assert started_late, "not before DUR after the last enqueue"
    assert len(history(history_conn)) == 1, "one run for the whole burst"


def test_two_racing_producers_throttle_to_one_run(start_daemon, history_conn, db_dsn):
    start_daemon(**CONFIG).wait_for_workers(2)
    ids = race(db_dsn, 20, unique_key="sync", throttle=600)
    assert len(set(ids)) == 1
    [job] = set(ids)
    wait_until(job_in_state(history_conn, job, "succeeded"), timeout_s=30, what="the run")
    again = race(db_dsn, 5, unique_key="sync", throttle=600)
    assert set(again) == {job}, "the succeeded job's id, within the window"
    assert [j for j, *_ in history(history_conn)] == [job]
    assert history_conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 1


def test_a_debounce_while_the_job_runs_makes_one_more_run(start_daemon, history_conn):
    start_daemon(**CONFIG).wait_for_workers(2)
    first = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 3}, unique_key="d", debounce=0.1)
    wait_until(lambda: history(history_conn, first) != [], what="the first run to start")
    later = [
        pgworkerd.enqueue(
            history_conn, "sleep", {"seconds": 0.1, "n": n}, unique_key="d", debounce=1
        )
        for n in range(3)
    ]
    assert len(set(later)) == 1 and later[0] != first
    for job_id in (first, later[0]):
        wait_until(job_in_state(history_conn, job_id, "succeeded"), timeout_s=30, what="runs")
    assert [e for j, _, e, *_ in history(history_conn) if j == later[0]] == ["start", "end"]
    assert history_conn.execute(
        "SELECT payload FROM pgworkerd.jobs WHERE id = %s", [later[0]]
    ).fetchone()[0] == {"seconds": 0.1, "n": 2}
    assert history_conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 2
