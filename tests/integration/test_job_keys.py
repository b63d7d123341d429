"""Job keys on a real server (issue 19): every enqueue path stores `key`, the claim
hands it to the handler's Job, and `jobs show` reads it back."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import pgworkerd
from pgworkerd.client.operations import Operations
from pgworkerd.errors import InvalidJob
from tests.integration.store_helpers import claim


def test_enqueue_and_enqueue_many_store_the_key_and_the_claim_returns_it(conn, store):
    one = pgworkerd.enqueue(conn, "k", {}, key="tenant:42")
    many = pgworkerd.enqueue_many(
        conn,
        [
            {"kind": "k", "payload": {}, "key": "tenant:7"},
            {"kind": "k", "payload": {}},
            {"kind": "k", "payload": {}, "key": "tenant:7", "unique_key": "u"},
        ],
    )
    keys = {job.id: job.key for job in claim(store, conn)}
    assert keys == {one: "tenant:42", many[0]: "tenant:7", many[1]: None, many[2]: "tenant:7"}
    assert Operations().show(conn, one)["key"] == "tenant:42"
    assert Operations().show(conn, many[1])["key"] is None


def test_the_async_producers_store_the_key(db_dsn, conn, store):
    async def produce() -> list[int]:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            first = await pgworkerd.enqueue_async(aconn, "k", {}, key="a")
            items = [{"kind": "k", "payload": {}, "key": "b"}]
            rest = await pgworkerd.enqueue_many_async(aconn, items)
            return [first, *rest]

    ids = asyncio.run(produce())
    claimed = {job.id: job.key for job in claim(store, conn)}
    assert claimed == dict(zip(ids, ["a", "b"], strict=True))


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("x" * 256, "key is 256 characters"),
        ("a\nb", "key must not contain control characters"),
        ("a\x9b31mb", "key must not contain control characters"),
        ("", "key must not be empty"),
        (42, "key must be a string"),
    ],
)
def test_a_bad_key_is_refused_before_any_sql(conn, key, message):
    with pytest.raises(InvalidJob, match=message):
        pgworkerd.enqueue(conn, "k", {}, key=key)
    with pytest.raises(InvalidJob, match=rf"jobs\[0\]: {message}"):
        pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "key": key}])
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
