"""FastAPI with pgworkerd: a request writes its row and enqueues its job in one
transaction, then waits for the job's end (docs/integrations.md).

    PGWORKERD_DATABASE_URL=postgresql://... uvicorn examples.fastapi_app:app
    PYTHONPATH=. pgworkerd run -c examples/fastapi.yaml   # task_modules: [examples.fastapi_app]

The job is enqueued with `enqueue_async` on the request's own AsyncConnection, inside its
transaction: if the request fails before the commit, neither the photo nor its job
exists. After the commit, `wait_async` sleeps on the same connection (LISTEN, no
polling) until a worker has finished the job, without blocking the event loop.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException

import pgworkerd

app = FastAPI()


@pgworkerd.task(queue="default", max_attempts=3)
async def make_thumbnail(job: pgworkerd.Job) -> dict[str, Any]:
    """The job: what a real app would resize; here, a name to derive."""
    return {"thumbnail": f"thumbs/{job.payload['name']}.small.jpg"}


async def database() -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """One connection a request (a real app takes it from a pool)."""
    dsn = os.environ["PGWORKERD_DATABASE_URL"]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        yield aconn


Connection = Annotated[psycopg.AsyncConnection[Any], Depends(database)]


@app.post("/photos/{name}")
async def upload(name: str, aconn: Connection, wait_s: float = 10.0) -> dict[str, Any]:
    async with aconn.transaction():  # the photo and its job: both or neither
        await aconn.execute(
            "CREATE TABLE IF NOT EXISTS photos (name text PRIMARY KEY)"  # example only
        )
        await aconn.execute("INSERT INTO photos (name) VALUES (%s)", (name,))
        job_id = await make_thumbnail.enqueue_async(aconn, {"name": name})
        if name.startswith("bad"):
            raise HTTPException(422, "refused after the enqueue: nothing is kept")
    try:
        state = await pgworkerd.wait_async(aconn, job_id, timeout=wait_s)
    except TimeoutError:
        return {"job": job_id, "state": "not finished yet"}
    return {"job": job_id, "state": state}
