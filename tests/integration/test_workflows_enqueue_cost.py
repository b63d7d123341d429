"""Enqueueing many dependents in one transaction costs each insert the same (issue 22).

A producer that enqueues thousands of jobs `after` others, in one transaction, runs
`jobs_insert_after` once per call: once per job when it enqueues them one by one
(`pairs`), once per list of them with `enqueue_many` (`fan-out`: a window's 500 jobs,
one statement since issue 23's round 20). psycopg prepares a statement after its
fifth run, and a worker's connection plans every statement generically: a plan made
while the table was small (or blind to how many ids `after` holds) that scans `jobs`,
or joins it by hash, is kept for the rest of the transaction, and each insert then
reads every job inserted before it (it did: 1,435 inserts/s for the first thousand,
167/s by the tenth). pg_stat_statements counts the buffers the statement touches per
call, in a window near the start and one at the end: the end's must stay within 2x of
the start's. Buffers, not time: the machine's speed is not the subject. Run on a fresh
table (never analysed), as the producer's own connection plans and as a worker's
(generic plans).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.worker import WORKER_PLAN_CACHE_MODE

DEPENDENTS = 3_000
WINDOW = 500  # inserts per sample

Conn = psycopg.Connection[Any]


def per_call(conn: Conn, marker: str) -> float:
    """Buffers touched per call by the statements whose text contains `marker`, since
    the last reset."""
    calls, buffers = conn.execute(
        "SELECT coalesce(sum(calls), 0), coalesce(sum(shared_blks_hit + shared_blks_read), 0)"
        " FROM pg_stat_statements WHERE query LIKE %s"
        "   AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
        [f"%{marker}%"],
    ).fetchone()
    assert calls > 0, f"no statement with {marker!r} ran"
    return float(buffers) / float(calls)


def windows(conn: Conn, total: int, marker: str, enqueue: Callable[[int], None]) -> list[float]:
    """Run `enqueue(start)` for WINDOW jobs at a time up to `total`, in one transaction;
    the buffers per call of the `marker` statements in each window."""
    samples = []
    with conn.transaction():
        for start in range(0, total, WINDOW):
            conn.execute("SELECT pg_stat_statements_reset()")
            enqueue(start)
            samples.append(per_call(conn, marker))
    return samples


def fan_out(conn: Conn) -> Callable[[int], None]:
    """One parent; each window enqueues WINDOW more of its dependents in one call."""
    parent = pgworkerd.enqueue(conn, "parent", {})
    return lambda _: pgworkerd.enqueue_many(
        conn, [{"kind": "child", "payload": {}, "after": [parent]}] * WINDOW
    )


def pairs(conn: Conn) -> Callable[[int], None]:
    """Each window enqueues WINDOW parents, each followed by one dependent of its own
    (the insert marks a new parent every time: has_dependents)."""

    def enqueue(_: int) -> None:
        for _ in range(WINDOW):
            parent = pgworkerd.enqueue(conn, "parent", {})
            pgworkerd.enqueue(conn, "child", {}, after=[parent])

    return enqueue


@pytest.mark.parametrize("shape", [fan_out, pairs], ids=["fan-out", "pairs"])
@pytest.mark.parametrize("plan_cache_mode", ["auto", WORKER_PLAN_CACHE_MODE])
def test_each_dependent_insert_reads_the_same_whatever_came_before(
    stats_dsn: str, plan_cache_mode: str, shape: Callable[[Conn], Callable[[int], None]]
) -> None:
    with psycopg.connect(
        stats_dsn, autocommit=True, options=f"-c plan_cache_mode={plan_cache_mode}"
    ) as conn:
        # only jobs_insert_after names job_dependencies
        samples = windows(conn, DEPENDENTS, "job_dependencies", shape(conn))
        waiting = conn.execute(
            "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'waiting'"
        ).fetchone()
    print(f"buffers per call, each window {WINDOW} dependents: {samples}")
    assert waiting == (DEPENDENTS,)
    # The first window's plans read a small table; the last's must read no more than
    # twice that (before the fix, fan-out: 23 buffers per insert in the first window,
    # 147 in the sixth: a scan of every job inserted so far).
    assert samples[-1] <= 2 * samples[0], f"buffers per call grew: {samples}"
