"""The statements of the periodic entries' duty (housekeeping/periodic.py): register
the entries, read their last slots, enqueue one slot's job once whatever the number of
daemons (the compare-and-set of `periodic_enqueue` in storage/sql/queries.sql)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.storage import queries
from pgworkerd.storage.channels import notify_channel


def register_entries(conn: psycopg.Connection[Any], schema: str, keys: Sequence[str]) -> datetime:
    """Registers the entries not seen before (from now on: the slots before an entry
    existed are not missed); returns the database clock the slots are read on."""
    statement = queries.statements(schema)["periodic_entries_register"]
    row = conn.execute(statement, {"keys": list(keys)}).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def last_slots(
    conn: psycopg.Connection[Any], schema: str, keys: Sequence[str]
) -> dict[str, datetime]:
    """The last slot enqueued of each entry of `keys` (by any daemon)."""
    statement = queries.statements(schema)["periodic_entries_last"]
    return {key: slot_at for key, slot_at, _ in conn.execute(statement, {"keys": list(keys)})}


def enqueue_slot(
    conn: psycopg.Connection[Any], schema: str, entry: PeriodicEntry, slot: datetime
) -> int | None:
    """The id of the job enqueued for `slot` of `entry`; None when this slot or a newer
    one was enqueued already (by any daemon, however long ago its job finished)."""
    params = {
        "key": entry.key,
        "slot_at": slot,
        "sequence": f"{sql.Identifier(schema).as_string(None)}.jobs_id_seq",
        "queue": entry.queue,
        "kind": entry.kind,
        "payload": json.dumps(entry.payload),
        "priority": entry.priority,
        "channel": notify_channel(schema),
    }
    row = conn.execute(queries.statements(schema)["periodic_enqueue"], params).fetchone()
    return None if row is None else int(row[0])
