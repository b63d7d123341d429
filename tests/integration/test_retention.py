"""Pruning against a real server: each finished state by its own retention, never a
queued or running job, archiving, batches under a time budget, and rows another
transaction holds skipped rather than waited for."""

from __future__ import annotations

import itertools

import psycopg
import pytest

from pgworkerd.housekeeping.retention import Policy, prune_round

SCHEMA = "pgworkerd"
HOUR = 3600.0
DAY = 86400.0
POLICY = Policy({"succeeded": HOUR, "dead": 30 * DAY, "cancelled": 7 * DAY})


def add(conn, state: str, age_s: float, n: int = 1) -> list[int]:
    """n jobs in `state`, created (and, if finished, finished) `age_s` ago."""
    rows = conn.execute(
        """
        INSERT INTO pgworkerd.jobs
            (queue, kind, payload, state, attempt, created_at, finished_at, lease_token,
             lease_expires_at, result)
        SELECT 'default', 'k', jsonb_build_object('i', i), %(state)s, 1,
               now() - make_interval(secs => %(age)s),
               CASE WHEN %(state)s IN ('succeeded', 'dead', 'cancelled')
                    THEN now() - make_interval(secs => %(age)s) END,
               CASE WHEN %(state)s = 'running' THEN gen_random_uuid() END,
               CASE WHEN %(state)s = 'running' THEN now() + interval '1 minute' END,
               CASE WHEN %(state)s = 'succeeded' THEN '{"ok": true}'::jsonb END
        FROM generate_series(1, %(n)s) AS i
        RETURNING id
        """,
        {"state": state, "age": age_s, "n": n},
    ).fetchall()
    return [r[0] for r in rows]


def ids(conn, table: str = "jobs") -> set[int]:
    return {r[0] for r in conn.execute(f"SELECT id FROM pgworkerd.{table}")}


def landscape(conn) -> tuple[set[int], set[int]]:
    """(ids past their retention, ids to keep): each state on both sides of its line,
    and live jobs older than every retention."""
    gone = [
        *add(conn, "succeeded", 2 * HOUR, 3),
        *add(conn, "dead", 31 * DAY, 2),
        *add(conn, "cancelled", 8 * DAY, 2),
    ]
    kept = [
        *add(conn, "succeeded", HOUR / 2, 2),
        *add(conn, "dead", 2 * DAY, 2),
        *add(conn, "cancelled", 6 * DAY, 2),
        *add(conn, "queued", 100 * DAY, 3),
        *add(conn, "running", 100 * DAY, 2),
    ]
    return set(gone), set(kept)


def test_each_state_is_pruned_by_its_own_retention_and_live_jobs_never(conn):
    gone, kept = landscape(conn)
    pruned = prune_round(conn, SCHEMA, POLICY)
    assert not gone & ids(conn)
    assert pruned.counts == {"succeeded": 3, "dead": 2, "cancelled": 2}
    assert not pruned.backlog
    assert ids(conn) == kept
    assert prune_round(conn, SCHEMA, POLICY).total == 0, "nothing more to do"


def test_archiving_moves_the_same_rows_whole(conn):
    gone, kept = landscape(conn)
    before = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT id, state, payload, result, attempt, created_at, finished_at"
            " FROM pgworkerd.jobs WHERE id = ANY(%s)",
            (list(gone),),
        )
    }
    pruned = prune_round(conn, SCHEMA, Policy(POLICY.keep_s, archive=True))
    assert pruned.total == len(gone)
    assert ids(conn) == kept
    archived = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT id, state, payload, result, attempt, created_at, finished_at"
            " FROM pgworkerd.jobs_archive"
        )
    }
    assert archived == before
    assert conn.execute(
        "SELECT bool_and(archived_at IS NOT NULL) FROM pgworkerd.jobs_archive"
    ).fetchone() == (True,)


def test_the_archive_has_every_column_a_finished_job_keeps(conn):
    """A migration that adds a column to jobs must add it to jobs_archive (and to
    jobs_archive_move), or archiving would drop it."""

    def columns(table: str) -> set[str]:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'pgworkerd' AND table_name = %s",
            (table,),
        )
        return {row[0] for row in rows}

    # meaningless once final (a final job has no dependency left to count, and its
    # dependents have heard of it)
    live_only = {"lease_token", "lease_expires_at", "waited_on", "deps_pending", "has_dependents"}
    assert columns("jobs") - live_only <= columns("jobs_archive")


def test_a_round_stops_at_its_budget_and_says_rows_are_left(conn):
    add(conn, "succeeded", 2 * HOUR, 25)
    ticks = itertools.count()
    pruned = prune_round(conn, SCHEMA, POLICY, batch=10, budget_s=2, clock=lambda: next(ticks))
    assert pruned.backlog and pruned.counts["succeeded"] == 10, "one batch, then time ran out"
    rest = prune_round(conn, SCHEMA, POLICY, batch=10)
    assert not rest.backlog and rest.counts["succeeded"] == 15


@pytest.mark.timeout(30)
def test_a_row_another_transaction_holds_is_skipped_not_waited_for(conn, db_dsn):
    held, *_ = add(conn, "succeeded", 2 * HOUR, 5)
    with psycopg.connect(db_dsn) as other:
        other.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", (held,))
        conn.execute("SET lock_timeout = '2s'")  # a wait would fail the test, not hang it
        pruned = prune_round(conn, SCHEMA, POLICY)
        assert pruned.counts["succeeded"] == 4
        assert ids(conn) == {held}
        other.rollback()
    assert prune_round(conn, SCHEMA, POLICY).counts["succeeded"] == 1
    assert ids(conn) == set()


def jobs_blocks_touched(conn) -> int:
    """Buffers of the jobs table and its indexes read or hit so far in this database,
    once this backend's statistics are flushed."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(
        "SELECT coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0)"
        " + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)"
        " FROM pg_statio_user_tables WHERE schemaname = 'pgworkerd' AND relname = 'jobs'"
    ).fetchone()[0]


@pytest.mark.timeout(120)
def test_pruning_under_a_held_snapshot_does_not_walk_what_it_pruned_before(conn, db_dsn):
    """While a transaction holds back vacuum, the rows a batch deletes stay in
    jobs_finished_idx: a batch that scanned from the oldest would walk past every row
    pruned since the snapshot began, its cost growing with the hold (issue 18). The
    rounds of a backlog start where the batch before them stopped: the last round of
    twenty costs what the first did (within 1.5x), while the dead rows grow to 20,000."""
    rounds, batches_per_round, batch = 20, 10, 100
    conn.execute(
        """
        INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, finished_at)
        SELECT 'default', 'k', '{}', 'succeeded', 1,
               now() - interval '2 days' + i * interval '1 ms'
        FROM generate_series(1, %s) AS i
        """,
        (rounds * batches_per_round * batch,),
    )
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")
    positions: dict = {}
    with psycopg.connect(db_dsn) as holder:
        holder.execute("SELECT txid_current()")  # the horizon stops here
        touched = []
        for _ in range(rounds):
            clock = itertools.count().__next__
            before = jobs_blocks_touched(conn)
            pruned = prune_round(
                conn,
                SCHEMA,
                POLICY,
                batch=batch,
                budget_s=batches_per_round + 1,  # a tick to start, then one a batch
                clock=clock,
                positions=positions,
            )
            touched.append(jobs_blocks_touched(conn) - before)
            assert pruned.counts["succeeded"] == batches_per_round * batch
        holder.rollback()
    assert ids(conn) == set()
    print(f"blocks touched per round: {touched}")
    assert touched[-1] <= 1.5 * touched[0], f"blocks per round grew: {touched}"
