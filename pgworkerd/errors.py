"""The exceptions pgworkerd raises. Each one's message is a single line for a user."""

from __future__ import annotations


class PgworkerdError(Exception):
    """Base of every error pgworkerd raises on purpose."""


class ConfigError(PgworkerdError):
    """The configuration is unusable. `problems` holds one line per problem. Here, not
    in `pgworkerd.config` (which re-exports it), so that the CLI can catch it without
    loading pydantic."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class InvalidJob(PgworkerdError, ValueError):
    """An enqueue was refused before any SQL ran."""


class DatabaseURLError(PgworkerdError, ValueError):
    """The database URL (or connection string) cannot be parsed: bad input, not a
    database fault. Its message never repeats the URL, which may hold a password."""


class SchemaError(PgworkerdError):
    """The database schema is missing, too old or newer than this pgworkerd."""


class JobNotFound(PgworkerdError, LookupError):
    """No job has this id (it never existed, or was pruned after its retention)."""


class NoResult(PgworkerdError):
    """`pgworkerd.result` of a job that did not succeed (yet): `state` says where it is."""

    def __init__(self, job_id: int, state: str) -> None:
        super().__init__(f"job {job_id} is {state}: only a succeeded job has a result")
        self.job_id = job_id
        self.state = state


class WaitError(PgworkerdError, ValueError):
    """`pgworkerd.wait` was given a connection inside a transaction, where a LISTEN
    hears nothing until the transaction commits."""
