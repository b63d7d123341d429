"""A payload too deep for Python to decode, among plain jobs claimed in one batch, on
the real daemon: the one job goes dead at once with a clear error, its handler never
called; the others succeed at their first attempt; no worker exits (review 24, F2: the
worker exited 70 while decoding the claim, every job of the batch was charged and held
until its lease expired, and the deep job did it again at each attempt).

The deep row is written by SQL, as a row of an older version, a bug or another client
would be: enqueue refuses such a payload (encoding.MAX_PAYLOAD_DEPTH)."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest

from tests.daemon import BASE_CONFIG, states, wait_until

Conn = psycopg.Connection[Any]
DEPTH = 5000  # deeper than any stack Python decodes in (recursion limit 1000)


@pytest.mark.parametrize("threads", [1, 3], ids=["one-slot", "threads"])
def test_an_undecodable_payload_kills_its_job_alone(
    start_daemon: Any, recorder: Conn, threads: int
) -> None:
    deep = "[" * DEPTH + "]" * DEPTH
    ids: list[int] = []
    # One run_at for all: one claim takes them all, the deep one amid the others.
    for payload in ["{}", "{}", deep, "{}", "{}"]:
        row = recorder.execute(
            "INSERT INTO pgworkerd.jobs (queue, kind, payload, run_at)"
            " VALUES ('default', 'noop', %s::jsonb, '2000-01-01Z') RETURNING id",
            (payload,),
        ).fetchone()
        assert row is not None
        ids.append(row[0])
    deep_id = ids[2]
    daemon = start_daemon(
        workers=[{"queues": ["default"], "concurrency": 1, "threads": threads}],
        defaults={**BASE_CONFIG["defaults"], "max_attempts": 3, "batch_size": 10},
    )
    worker_pids = {p.pid for p in daemon.wait_for_workers(1)}
    wait_until(
        lambda: all(_outcome(recorder, i)[0] in ("succeeded", "dead") for i in ids),
        timeout_s=20,
        what="every job final",
    )
    state, attempt, error = _outcome(recorder, deep_id)
    assert (state, attempt) == ("dead", 1), (error, states(recorder))
    assert error.startswith("payload could not be decoded: nested too deeply"), error
    for i in ids:
        if i != deep_id:
            assert _outcome(recorder, i)[:2] == ("succeeded", 1), _outcome(recorder, i)
    assert {p.pid for p in daemon.workers()} == worker_pids  # none exited, none replaced
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=20) == 0
    log = daemon.log()
    assert "crashed" not in log, log
    assert "Traceback" not in log, log


def _outcome(conn: Conn, job_id: int) -> tuple[str, int, str | None]:
    """The job's state, attempt and last error: not its payload, which a plain psycopg
    connection (json.loads) could not decode either."""
    row = conn.execute(
        "SELECT state, attempt, last_error FROM pgworkerd.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return row
