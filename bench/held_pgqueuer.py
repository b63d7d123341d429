"""PgQueuer's side of bench/held.py, run by the peers' venv's interpreter (pgqueuer and
asyncpg; nothing of pgworkerd is imported).

    held_pgqueuer.py install DSN
    held_pgqueuer.py worker DSN OUT       until SIGTERM; then writes [t_enqueued, t_started]
                                          per job to OUT, one JSON array a line
    held_pgqueuer.py producer DSN RATE SECONDS

The worker is one QueueManager on one connection with batch size 10, as the peers'
harness runs it (bench_pgqueuer.py); the producer enqueues every 20 ms what is due at
RATE, one call per tick (PgQueuer's batch enqueue), each job carrying time.time().
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from datetime import timedelta

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

EP = "stamp"
TICK_S = 0.02


async def install(dsn: str) -> None:
    await Queries(AsyncpgDriver(await asyncpg.connect(dsn))).install()


async def worker(dsn: str, out: str) -> None:
    pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(dsn)))
    pairs: list[tuple[float, float]] = []

    @pgq.entrypoint(EP)
    async def stamp(job: Job) -> None:
        pairs.append((json.loads(job.payload or b"{}")["t"], time.time()))

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
    await pgq.run(batch_size=10, dequeue_timeout=timedelta(seconds=5))
    with open(out, "w") as f:
        f.writelines(json.dumps(p) + "\n" for p in pairs)


async def producer(dsn: str, rate: float, seconds: float) -> None:
    q = Queries(AsyncpgDriver(await asyncpg.connect(dsn)))
    sent = 0
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < seconds:
        due = int(elapsed * rate) - sent
        if due > 0:
            payload = json.dumps({"t": time.time()}).encode()
            await q.enqueue([EP] * due, [payload] * due, [0] * due)
            sent += due
        await asyncio.sleep(max(0.0, TICK_S - (time.monotonic() - t0 - elapsed)))


if __name__ == "__main__":
    command, dsn, *rest = sys.argv[1:]
    if command == "install":
        asyncio.run(install(dsn))
    elif command == "worker":
        asyncio.run(worker(dsn, rest[0]))
    else:
        asyncio.run(producer(dsn, float(rest[0]), float(rest[1])))
