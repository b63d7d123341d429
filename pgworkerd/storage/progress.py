"""The fenced write of `job.progress()`: a value lands only under the lease it was
reported under (see pgworkerd/progress.py for when it is sent)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from pgworkerd.storage import queries
from pgworkerd.storage.rows import execute


def write_progress(
    conn: psycopg.Connection[Any],
    schema: str,
    values: dict[int, tuple[uuid.UUID, float, str | None]],
) -> set[int]:
    """Write the latest value of each job; returns the ids whose lease let it."""
    params = {
        "ids": list(values),
        "tokens": [token for token, _, _ in values.values()],
        "percents": [percent for _, percent, _ in values.values()],
        "stages": [stage for _, _, stage in values.values()],
    }
    statement = queries.statements(schema)["jobs_progress"]
    return {row[0] for row in execute(conn, statement, params)}
