"""The LISTEN/NOTIFY channels of one schema (their names are quoted identifiers, so a
schema name of any spelling is fine)."""

from __future__ import annotations

from psycopg import sql


def notify_channel(schema: str) -> str:
    """The channel on which enqueues announce their queue's name."""
    return f"{schema}.jobs"


def cancel_channel(schema: str) -> str:
    """The channel that names the leases of running jobs just cancelled (see
    housekeeping/cancelling.py)."""
    return f"{schema}.cancel"


def finished_channel(schema: str) -> str:
    """The channel on which a job that pgworkerd.wait() waits for is announced when it
    becomes final; the payload is its id."""
    return f"{schema}.finished"


def listen_statement(channel: str) -> sql.Composed:
    """LISTEN on `channel` (a name with a dot needs the quotes of an identifier)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))
