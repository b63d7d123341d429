"""examples/fastapi_app.py, called through httpx's ASGI transport, with a real `pgworkerd run` whose
task_modules list the example: the request's transaction carries the job (a refused
request leaves neither row nor job), and wait_async returns once a worker ran it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from examples import fastapi_app
from tests.daemon import job


class Client:
    """Requests to the app in this process, each on an event loop of its own."""

    def post(self, path: str, **kwargs) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=fastapi_app.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                return await http.post(path, **kwargs)

        return asyncio.run(send())


@pytest.fixture
def client(db_dsn, monkeypatch):
    monkeypatch.setenv("PGWORKERD_DATABASE_URL", db_dsn)
    return Client()


def test_a_request_enqueues_in_its_transaction_and_waits_for_the_job(
    client, start_daemon, history_conn
):
    start_daemon(handlers={}, task_modules=["examples.fastapi_app"])
    answer = client.post("/photos/cat")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["state"] == "succeeded"
    row = job(history_conn, body["job"])
    assert row["kind"] == "examples.fastapi_app.make_thumbnail"
    assert row["result"] == {"thumbnail": "thumbs/cat.small.jpg"}


def test_a_refused_request_leaves_neither_its_row_nor_its_job(client, history_conn):
    client.post("/photos/cat", params={"wait_s": 0.1})  # no daemon: its job stays queued
    answer = client.post("/photos/bad-dog", params={"wait_s": 0.1})
    assert answer.status_code == 422
    names = [r[0] for r in history_conn.execute("SELECT name FROM photos").fetchall()]
    payloads = [r[0] for r in history_conn.execute("SELECT payload FROM pgworkerd.jobs")]
    assert (names, payloads) == (["cat"], [{"name": "cat"}])
