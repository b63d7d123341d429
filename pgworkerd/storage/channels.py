"""The LISTEN/NOTIFY channels of one schema (their names are quoted identifiers, so a
schema name of any spelling is fine; its length is bounded by schema_names.py so that
the longest channel name fits PostgreSQL's 63 bytes)."""

from __future__ import annotations

from psycopg import sql

from pgworkerd.storage.schema_names import CHANNEL_SUFFIXES

_JOBS, _CANCEL, _FINISHED = CHANNEL_SUFFIXES


def notify_channel(schema: str) -> str:
    """The channel on which enqueues announce their queue's name."""
    return schema + _JOBS


def cancel_channel(schema: str) -> str:
    """The channel that names the leases of running jobs just cancelled (see
    housekeeping/cancelling.py)."""
    return schema + _CANCEL


def finished_channel(schema: str) -> str:
    """The channel on which a job that pgworkerd.wait() waits for is announced when it
    becomes final; the payload is its id."""
    return schema + _FINISHED


def listen_statement(channel: str) -> sql.Composed:
    """LISTEN on `channel` (a name with a dot needs the quotes of an identifier)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))
