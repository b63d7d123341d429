"""What every producer path refuses, and takes, at the edges review 24 found (F2, F3,
F4): a payload nested deeper than MAX_PAYLOAD_DEPTH, numbers past a float or a bigint,
and run_at offsets PostgreSQL cannot parse. Each refusal is InvalidJob with nothing
sent to the server (the caller's transaction untouched); each instant is stored as the
same instant. Both ways: a Connection and an AsyncConnection (producer_ways.py)."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd import InvalidJob
from pgworkerd.encoding import MAX_PAYLOAD_DEPTH, RESULT_OMITTED, UNDECODABLE, dump_result
from pgworkerd.storage.connections import connect
from pgworkerd.storage.store import JobStore
from tests.integration.producer_ways import AsyncWay, SyncWay
from tests.tasks import shop

Conn = psycopg.Connection[Any]
Way = SyncWay | AsyncWay


def nested(depth: int) -> Any:
    """Objects in objects, `depth` levels: `{}` is one, `{"a": {}}` two."""
    return functools.reduce(lambda inner, _: {"a": inner}, range(depth - 1), {})


def count_jobs(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()
    assert row is not None
    return int(row[0])


# Every producer call, given one job's payload and options (in a list of 150 plain jobs
# where the call takes a list: over MAX_PAYLOAD_DEPTH brackets in the whole text, the
# bulk encoding's check walks its payloads).
PLAIN = [{"kind": "k", "payload": {"i": i}} for i in range(150)]


def _calls(way: Way) -> dict[str, Callable[[Any, Any, dict[str, Any]], Any]]:
    def task(conn: Any, payload: Any, options: dict[str, Any]) -> Any:
        if isinstance(way, AsyncWay):
            return way.call(shop.send_receipt.enqueue_async(conn.aconn, payload, **options))
        return shop.send_receipt.enqueue(conn, payload, **options)

    return {
        "enqueue": lambda c, p, o: way.enqueue(c, "k", p, **o),
        "enqueue_many": lambda c, p, o: way.enqueue_many(
            c, [*PLAIN, {"kind": "k", "payload": p, **o}]
        ),
        "chain": lambda c, p, o: way.chain(
            c, [{"kind": "k", "payload": {}}, {"kind": "k", "payload": p, **o}]
        ),
        "batch": lambda c, p, o: way.batch(
            c, [*PLAIN[:3], {"kind": "k", "payload": p, **o}], then={"kind": "done", "payload": {}}
        ),
        "task": task,
    }


CALLS = ["enqueue", "enqueue_many", "chain", "batch", "task"]


def _refused(way: Way, pconn: Any, call: str, payload: Any, options: dict[str, Any]) -> str:
    """The one-line InvalidJob of `call`, checked to have run no statement."""
    with pytest.raises(InvalidJob) as refused:
        _calls(way)[call](pconn, payload, options)
    message = str(refused.value)
    assert "\n" not in message
    status = pconn.info.transaction_status
    if call in ("chain", "batch"):
        # Their statements run all or nothing: a savepoint is taken (and here rolled
        # back) before the payloads are checked, as for any bad input of theirs. The
        # caller's transaction stays usable.
        assert status != psycopg.pq.TransactionStatus.INERROR
        assert way.fetch_all(pconn, "SELECT 1") == [(1,)]
    else:
        assert status == psycopg.pq.TransactionStatus.IDLE, "no statement may run"
    return message


# -- depth (F2) -----------------------------------------------------------------------------


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(nested(MAX_PAYLOAD_DEPTH + 1), id="one-over"),
        pytest.param(functools.reduce(lambda a, _: [a], range(989), []), id="990"),
        pytest.param(functools.reduce(lambda a, _: [a], range(99_999), []), id="100000"),
    ],
)
def test_a_payload_nested_too_deep_is_refused_by_every_path(
    way: Way, db_dsn: str, conn: Conn, call: str, payload: Any
) -> None:
    with way.connect(db_dsn) as pconn:  # not autocommit: any statement would open a tx
        message = _refused(way, pconn, call, payload, {})
    assert f"nested more than {MAX_PAYLOAD_DEPTH} levels deep" in message
    assert count_jobs(conn) == 0


def test_the_deepest_payload_allowed_is_stored_and_read_back(
    way: Way, pconn: Any, db_dsn: str
) -> None:
    deepest = nested(MAX_PAYLOAD_DEPTH)
    wide = {"rows": [{"cells": [[i, {"v": [i]}] for i in range(50)]}] * 3}  # many brackets
    ids = [
        way.enqueue(pconn, "k", deepest),
        *way.enqueue_many(pconn, [*PLAIN, {"kind": "k", "payload": wide}]),
    ]
    with connect(db_dsn, application_name="test") as reader:
        assert JobStore().get(reader, ids[0])["payload"] == deepest
        assert JobStore().get(reader, ids[-1])["payload"] == wide


def test_a_payload_within_the_bound_from_a_nearly_full_stack_is_encoded_or_refused() -> None:
    """From any depth of the caller's stack, a 100-level payload is encoded or refused
    with InvalidJob: at a few depths the list's two levels overflowed where the payload
    alone did not, and an AssertionError came out."""
    from pgworkerd.client.producer import Producer

    producer, payload = Producer(), nested(MAX_PAYLOAD_DEPTH)
    seen: set[str] = set()

    def at(depth: int) -> None:
        if depth:
            at(depth - 1)
            return
        try:
            producer._encode([{"kind": "k", "queue": "q", "payload": payload}], label_index=False)
            seen.add("encoded")
        except InvalidJob:
            seen.add("refused")

    for depth in range(600, sys.getrecursionlimit()):
        try:
            at(depth)
        except RecursionError:  # the recursion to get there, not the encoding
            break
    assert seen == {"encoded", "refused"}


def test_a_result_nested_too_deep_is_kept_as_the_omitted_marker() -> None:
    assert dump_result(nested(MAX_PAYLOAD_DEPTH)) is not None
    assert RESULT_OMITTED not in (dump_result(nested(MAX_PAYLOAD_DEPTH)) or "")
    for depth in (MAX_PAYLOAD_DEPTH + 1, 990, 100_000):
        deep = functools.reduce(lambda a, _: [a], range(depth - 1), [])
        assert dump_result(deep) == (
            f'{{"{RESULT_OMITTED}": "nested more than {MAX_PAYLOAD_DEPTH} levels deep"}}'
        )


def test_a_stored_payload_or_result_too_deep_to_decode_reads_as_the_marker(
    db_dsn: str, conn: Conn
) -> None:
    """Written by SQL (enqueue refuses it): `pgworkerd.result` and every reader on a
    pgworkerd connection get the marker, not RecursionError."""
    deep = "[" * 5000 + "]" * 5000
    row = conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, state, result, finished_at)"
        " VALUES ('q', 'k', %s::jsonb, 'succeeded', %s::jsonb, now()) RETURNING id",
        (deep, deep),
    ).fetchone()
    assert row is not None
    with connect(db_dsn, application_name="test") as reader:
        detail = JobStore().get(reader, row[0])
        assert detail is not None
        for value in (detail["payload"], detail["result"], pgworkerd.result(reader, row[0])):
            assert value[UNDECODABLE].startswith("nested too deeply to decode")
            assert value["text"] == deep


def test_result_and_wait_on_the_callers_own_connection_read_a_too_deep_result_as_the_marker(
    db_dsn: str, conn: Conn
) -> None:
    """On a plain psycopg connection (an application's own), whose jsonb loader is
    json.loads: `pgworkerd.result` and `wait` raised RecursionError."""
    deep = "[" * 5000 + "]" * 5000
    row = conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, state, result, finished_at)"
        " VALUES ('q', 'k', '{}', 'succeeded', %s::jsonb, now()) RETURNING id",
        (deep,),
    ).fetchone()
    assert row is not None
    with psycopg.connect(db_dsn, autocommit=True) as own:
        value = pgworkerd.result(own, row[0])
        assert value[UNDECODABLE].startswith("nested too deeply to decode")
        assert value["text"] == deep
        assert pgworkerd.wait(own, row[0], timeout=5) == "succeeded"

    async def async_wait() -> str:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aown:
            return await pgworkerd.wait_async(aown, row[0], timeout=5)

    assert asyncio.run(async_wait()) == "succeeded"


# -- numbers past a float or a bigint (F4) ---------------------------------------------------


BIG_NUMBERS = [
    ({"delay": 10**400}, "delay must be at most 100 years"),
    ({"delay": -(10**400)}, "delay must be a finite number of seconds >= 0"),
    ({"max_runtime": 10**400}, "max_runtime must be at most 100 years"),
    ({"max_runtime": 10**5000}, "an integer of 16610 bits"),
    ({"after": [2**63]}, "after must hold job ids (integers from 1 to 2**63-1)"),
    ({"priority": 10**5000}, "priority must fit in 32 bits"),
    ({"max_attempts": 10**5000}, "max_attempts must be an integer from 1"),
]


@pytest.mark.parametrize(
    ("call", "options", "message"),
    [
        (call, options, message)
        for call in CALLS
        for options, message in BIG_NUMBERS
        if not (call == "chain" and "after" in options)  # a chain sets after itself
    ],
)
def test_numbers_past_a_float_or_a_bigint_are_refused_before_any_sql(
    way: Way, db_dsn: str, conn: Conn, call: str, options: dict[str, Any], message: str
) -> None:
    with way.connect(db_dsn) as pconn:
        assert message in _refused(way, pconn, call, {}, options)
    assert count_jobs(conn) == 0


def test_wait_takes_a_timeout_past_a_float(conn: Conn) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {})
    assert pgworkerd.cancel(conn, job_id)
    assert pgworkerd.wait(conn, job_id, timeout=10**400) == "cancelled"  # final: at once
    queued = pgworkerd.enqueue(conn, "k", {})
    with pytest.raises(TimeoutError, match="not final after -infs"):
        pgworkerd.wait(conn, queued, timeout=-(10**400))

    async def wait_async() -> str:
        async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as aconn:
            return await pgworkerd.wait_async(aconn, job_id, timeout=10**400)

    assert asyncio.run(wait_async()) == "cancelled"


# -- run_at offsets (F3) ---------------------------------------------------------------------

OFFSETS = [
    pytest.param(timedelta(hours=20), id="+20:00"),
    pytest.param(-timedelta(hours=23, minutes=59), id="-23:59"),
    pytest.param(timedelta(hours=23, minutes=59, seconds=59, microseconds=999_999), id="max"),
    pytest.param(timedelta(microseconds=500_000), id="+00:00:00.5"),
    pytest.param(timedelta(hours=5, minutes=30, seconds=17), id="+05:30:17"),
]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("offset", OFFSETS)
def test_run_at_of_any_offset_is_stored_as_the_same_instant(
    way: Way, db_dsn: str, conn: Conn, call: str, offset: timedelta
) -> None:
    run_at = datetime(2027, 3, 4, 5, 6, 7, 891_011, tzinfo=timezone(offset))
    with way.connect(db_dsn) as pconn:  # in the caller's transaction, which goes on
        way.fetch_all(pconn, "SELECT 1")
        _calls(way)[call](pconn, {}, {"run_at": run_at})
        assert way.fetch_all(pconn, "SELECT 2") == [(2,)]
        pconn.commit()
    stored = conn.execute(
        "SELECT run_at FROM pgworkerd.jobs WHERE run_at <> created_at ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert stored is not None and stored[0] == run_at  # the instant, to the microsecond


def test_key_pause_until_any_offset_ends_at_the_same_instant(conn: Conn) -> None:
    until = datetime(2027, 3, 4, 5, 6, 7, 891_011, tzinfo=timezone(timedelta(hours=20)))
    assert pgworkerd.pause_key(conn, "tenant:1", until) == until
