"""Paused keys: the Python `pause_key` and `resume_key`, and what `pgworkerd keys`
reads and writes.

A key pause is a row in the schema's `paused_keys` table with an end (`until`, on the
database clock), so it holds for every daemon and host and ends by itself: no claim
takes a job of a paused key until then (storage/sql/queries.sql, KEY PAUSES); jobs of
the key already running finish, and other keys go on. A handler pauses its own job's
key with `raise pgworkerd.PauseKey(...)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pgworkerd.client.connections import checked
from pgworkerd.client.producer import (
    MAX_DURATION_S,
    brief,
    check_instant,
    check_name,
    schema_of,
)
from pgworkerd.errors import InvalidJob
from pgworkerd.storage.key_pauses import KeyPauseStore
from pgworkerd.storage.limits import QueueLimits, describe
from pgworkerd.storage.store import DEFAULT_SCHEMA

DEFAULT_KEYS_LIMIT = 1000


def pause_key(
    conn: psycopg.Connection[Any],
    key: str,
    until: datetime | timedelta | float,
    *,
    schema: str | None = None,
) -> datetime:
    """Pause `key`: no daemon starts a job of that key before `until`, which is a
    timezone-aware datetime, or a timedelta or seconds from now (the database's clock).
    A pause of the key already set is replaced (to shorten one, pause again; to end it,
    `resume_key`). Runs in the caller's transaction, like `enqueue`; `schema` defaults
    as `enqueue`'s does. Returns when the pause ends (database clock)."""
    return KeyPauses(schema_of(schema)).pause(checked(conn, "pause_key"), key, until)


def resume_key(conn: psycopg.Connection[Any], key: str, *, schema: str | None = None) -> bool:
    """End `key`'s pause; idle workers are told at commit and claim its jobs at once.
    True if it was paused."""
    return KeyPauses(schema_of(schema)).resume(checked(conn, "resume_key"), key)


class KeyPauses:
    """The paused keys of one schema."""

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        self._store = KeyPauseStore(schema)

    def pause(
        self,
        conn: psycopg.Connection[Any],
        key: str,
        until: datetime | timedelta | float,
        *,
        extend: bool = False,
    ) -> datetime:
        """Pauses `key` (checked as enqueue checks keys: InvalidJob) until `until`;
        `extend`: a pause that already runs longer is kept. Returns its end."""
        check_name("key", key)
        if isinstance(until, datetime):
            if until.tzinfo is None or until.utcoffset() is None:
                raise InvalidJob("until must be timezone-aware (a naive datetime is ambiguous)")
            check_instant("until", until)
            # In UTC, as enqueue sends run_at: PostgreSQL refuses offsets past ±15:59.
            return self._store.pause_until(conn, key, until.astimezone(UTC), extend=extend)
        return self._store.pause_for(conn, key, pause_seconds(until), extend=extend)

    def resume(self, conn: psycopg.Connection[Any], key: str) -> bool:
        check_name("key", key)  # as pause checks it: InvalidJob, not a database error
        return self._store.resume(conn, key)

    def keys(
        self,
        conn: psycopg.Connection[Any],
        *,
        limit: int = DEFAULT_KEYS_LIMIT,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> list[dict[str, Any]]:
        """Keys of queued or running jobs, or paused now: JSON values, the `keys --json`
        output. `limits` (the config's limited queues) adds, for each key, the per-key
        limits of the queues its jobs are in."""
        return [_key(row, limits or {}) for row in self._store.keys(conn, limit=limit)]


def pause_seconds(duration: Any) -> float:
    """A pause's length, seconds or a timedelta, as seconds >= 0 (InvalidJob if not)."""
    if isinstance(duration, timedelta):
        duration = duration.total_seconds()
    if isinstance(duration, bool) or not isinstance(duration, int | float):
        raise InvalidJob(
            f"until must be a datetime, a timedelta or seconds, got {type(duration).__name__}"
        )
    if not duration >= 0 or duration == float("inf"):
        raise InvalidJob(f"a pause must be a finite number of seconds >= 0, got {duration!r}")
    if duration > MAX_DURATION_S:  # its end must be a timestamp that can be read back
        raise InvalidJob(f"a pause must be at most 100 years, got {brief(duration)} seconds")
    return float(duration)


def _key(row: dict[str, Any], limits: Mapping[str, QueueLimits]) -> dict[str, Any]:
    until = row["paused_until"]
    key_limits = {}
    for queue in row["queues"]:
        described = describe(limits[queue]) if queue in limits else None
        if described and (described["per_key"] or described["fair"]):
            key_limits[queue] = {**(described["per_key"] or {}), "fair": described["fair"]}
    return {
        "key": row["key"],
        "running": int(row["running"]),
        "ready": int(row["ready"]),
        "queued": int(row["queued"]),
        "queues": list(row["queues"]),
        "limits": key_limits,  # queue -> its per-key limits, for the queues that have them
        "paused": until is not None,
        "paused_until": None if until is None else until.isoformat(),
        "paused_at": None if row["paused_at"] is None else row["paused_at"].isoformat(),
        "paused_for_s": row["paused_for_s"],
    }
