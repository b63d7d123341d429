"""A handler whose bookkeeping costs microseconds, for the daemon tests of the one-slot
worker's claims (tests/process/test_claim_guards.py): tests/handlers.py records each
start through a new connection (milliseconds), which would hide the no-op path these
tests are about. Each start and end is one line appended to the file that
PGWORKERD_TEST_NOTES names; `load` copies the lines into the `history` table that
tests/invariants.py reads."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psycopg

import pgworkerd


def _append(event: str, job: pgworkerd.Job) -> None:
    line = f"{job.id} {job.attempt} {os.getpid()} {event} {time.time():.6f}\n"
    # One write of a short line with O_APPEND: lines of concurrent writers never mix.
    fd = os.open(os.environ["PGWORKERD_TEST_NOTES"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def note(job: pgworkerd.Job) -> None:
    """Notes its start, sleeps payload["ms"] milliseconds (default none), notes its end."""
    _append("start", job)
    ms = job.payload.get("ms", 0)
    if ms:
        time.sleep(ms / 1000)
    _append("end", job)


Note = tuple[int, int, int, str, float]  # job id, attempt, pid, event, time.time()


def read(path: Path) -> list[Note]:
    """The notes written so far, in the order they were written."""
    if not path.exists():
        return []
    notes = []
    for line in path.read_text().splitlines():
        job_id, attempt, pid, event, at = line.split()
        notes.append((int(job_id), int(attempt), int(pid), event, float(at)))
    return notes


def load(conn: psycopg.Connection[Any], path: Path) -> list[Note]:
    """Copy the notes into `history` (tests/daemon.py's HISTORY_TABLE); returns them."""
    notes = read(path)
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO history (job_id, attempt, pid, event, at)"
            " VALUES (%s, %s, %s, %s, to_timestamp(%s))",
            notes,
        )
    return notes
