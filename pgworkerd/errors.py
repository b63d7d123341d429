"""The exceptions pgworkerd raises. Each one's message is a single line for a user."""

from __future__ import annotations


class PgworkerdError(Exception):
    """Base of every error pgworkerd raises on purpose."""


class InvalidJob(PgworkerdError, ValueError):
    """An enqueue was refused before any SQL ran."""


class SchemaError(PgworkerdError):
    """The database schema is missing, too old or newer than this pgworkerd."""
