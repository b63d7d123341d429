"""The claim's and the completion's array parameters go as literals (storage/arrays.py):
every value must read back in PostgreSQL exactly as it was, whatever its text, and a
position's time to the microsecond (the claim compares positions with `>`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pgworkerd
from pgworkerd.storage.arrays import int_array, text_array, timestamptz_array, uuid_array
from pgworkerd.storage.store import ClaimPositions, JobStore
from tests.integration.store_helpers import claim

AWKWARD = ["plain", "", "a,b", "{braces}", 'say "hi"', "back\\slash", "NULL", " sp ", "ü✓", None]


def test_text_reads_back_exactly(conn):
    (back,) = conn.execute("SELECT %s::text[]", (text_array(AWKWARD),)).fetchone()
    assert back == AWKWARD


def test_ints_read_back_exactly(conn):
    values = [0, -1, 2**62, None, 7]
    (back,) = conn.execute("SELECT %s::bigint[]", (int_array(values),)).fetchone()
    assert back == values
    assert conn.execute("SELECT %s::int[]", (int_array([]),)).fetchone() == ([],)


def test_uuids_read_back_exactly(conn):
    values = [uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), uuid.UUID(int=255)]
    (back,) = conn.execute("SELECT %s::uuid[]", (uuid_array(values),)).fetchone()
    assert back == values
    assert conn.execute("SELECT %s::uuid[]", (uuid_array([]),)).fetchone() == ([],)


def test_times_read_back_to_the_microsecond_whatever_their_zone(conn):
    zone = timezone(timedelta(hours=5, minutes=45))
    values = [
        datetime(2026, 11, 24, 22, 0, 0, 123457, tzinfo=UTC),
        datetime(2026, 3, 29, 2, 30, 0, 1, tzinfo=zone),
        None,
    ]
    (back,) = conn.execute("SELECT %s::timestamptz[]", (timestamptz_array(values),)).fetchone()
    assert back == values  # aware datetimes compare as instants


def test_a_claim_of_queues_with_awkward_names_takes_their_jobs_in_order(conn):
    store = JobStore(positions=ClaimPositions(sweep_every_s=3600))
    queues = ['q "one", {x}', "q\\two"]
    ids = [pgworkerd.enqueue(conn, "k", {}, queue=q) for q in reversed(queues)]
    claimed = claim(store, conn, queues=queues, limit=1)
    assert [j.id for j in claimed] == [ids[1]]  # the first queue named first
    claimed = claim(store, conn, queues=queues, limit=5)
    assert [j.id for j in claimed] == [ids[0]]
    # A position now stands in each level: the next job goes past it, none is missed.
    later = pgworkerd.enqueue(conn, "k", {}, queue=queues[1])
    assert [j.id for j in claim(store, conn, queues=queues, limit=5)] == [later]


def test_the_kept_literals_follow_every_move_of_a_position(conn):
    store = JobStore(positions=ClaimPositions(sweep_every_s=3600))
    positions = store.positions

    def written_afresh() -> dict[str, str]:
        levels = positions.params(["default"], sweep=False)
        return {
            "level_queues": text_array(levels["level_queues"]),
            "level_priorities": int_array(levels["level_priorities"]),
            "level_after_run_at": timestamptz_array(levels["level_after_run_at"]),
            "level_after_id": int_array(levels["level_after_id"]),
        }

    pgworkerd.enqueue(conn, "k", {})
    claim(store, conn)
    before = positions.literals(["default"], sweep=False)
    assert before == written_afresh()
    assert positions.literals(["default"], sweep=False) is before, "kept while nothing moves"
    later = pgworkerd.enqueue(conn, "k", {}, priority=3)  # a new level too
    positions.sweep_soon()
    assert [j.id for j in claim(store, conn)] == [later]
    after = positions.literals(["default"], sweep=False)
    assert after != before and after == written_afresh()
    assert positions.literals(["default"], sweep=True)["level_after_id"] == "{NULL,NULL}"
