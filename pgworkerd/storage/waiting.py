"""The statements of `pgworkerd.result` and `pgworkerd.wait` (the protocol is told in
client/results.py), as `Statement`s: the sync and the async wait run the same ones."""

from __future__ import annotations

from typing import Any

from pgworkerd.storage import queries
from pgworkerd.storage.connections import json_loads
from pgworkerd.storage.rows import Statement

# A job's state and stored result; None: no such job.
Outcome = tuple[str, Any] | None


class FinishedJobs:
    """The finished channel of one schema, and the reads of a job's end."""

    def __init__(self, schema: str) -> None:
        self._sql = queries.statements(schema)

    def listen(self) -> Statement[None]:
        # No parameters (None): psycopg leaves the text as it is (queries.py).
        return Statement(self._sql["finished_listen"], None, _nothing)

    def unlisten(self) -> Statement[None]:
        return Statement(self._sql["finished_unlisten"], None, _nothing)

    def mark_waited(self, job_id: int) -> Statement[bool]:
        """Marks a job that is not final yet as waited on, so the statement that makes it
        final announces it; False: it is final already, or does not exist."""
        return Statement(self._sql["jobs_wait_mark"], {"id": job_id}, bool)

    def outcome(self, job_id: int) -> Statement[Outcome]:
        return Statement(self._sql["jobs_outcome"], {"id": job_id}, _first_row)


def _nothing(rows: list[Any]) -> None:
    return None


def _first_row(rows: list[Any]) -> Outcome:
    if not rows:
        return None
    state, result_json = rows[0]
    return str(state), None if result_json is None else json_loads(result_json)
