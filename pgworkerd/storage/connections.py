"""Connections to the database: where the URL comes from, how a connection is opened,
and how its errors are told without a password."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.types.json import set_json_loads

from pgworkerd.config import Config
from pgworkerd.encoding import Undecodable
from pgworkerd.errors import DatabaseURLError, mask_passwords
from pgworkerd.storage.embedded import local_cluster

# Half-open TCP after a network cut would otherwise hang a worker for hours: probe an
# idle connection after 10 s, give up after 3 unanswered probes 5 s apart, and fail a
# write that stays unacknowledged for 30 s.
KEEPALIVE_OPTIONS = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
    "connect_timeout": 10,
}

# What libpq quotes in its messages: "…" or '…'.
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
# Up to its first "@", then on: one way to match, where `"[^"]*@` backtracked over every
# "@" of an unclosed quote (quadratic).
_QUOTED_WITH_AT = re.compile(r"\"[^\"@]*@[^\"]*\"|'[^'@]*@[^']*'")
# The options of a connection string that are secrets.
_SECRET_OPTIONS = ("password", "sslpassword")
# The options `shown_url` puts first, in the order a URL has them.
_SHOWN_FIRST = ("host", "hostaddr", "port", "dbname", "user")


def database_url(config: Config) -> str:
    """The configured URL, or the embedded local cluster's (started if need be)."""
    if config.database.url is not None:
        return config.database.url.get_secret_value()
    return local_cluster().ensure_running().dsn()


def connect(
    url: str, *, application_name: str, autocommit: bool = True, **options: Any
) -> psycopg.Connection[Any]:
    """A connection with keepalives and a name that shows in pg_stat_activity."""
    conninfo = parsed_conninfo(
        url, **{**KEEPALIVE_OPTIONS, **options}, application_name=application_name
    )
    try:
        conn = psycopg.connect(conninfo, autocommit=autocommit, cursor_factory=Cursor)
    except psycopg.Error as exc:
        raise psycopg.OperationalError(describe_error(exc, url)) from None
    set_json_loads(json_loads, conn)
    return conn


class StalePreparedStatement(psycopg.OperationalError):
    """A statement prepared on this connection before a column it returns changed type
    could not run, inside a transaction, which that failure ended: the caller treats it
    as a lost connection (reconnects, runs the transaction again)."""


def stale_prepared_statement(exc: psycopg.Error) -> bool:
    """Whether `exc` is PostgreSQL's refusal to run a statement prepared before the
    type of a column it returns changed (an ALTER TABLE ... TYPE, as a migration may
    run: 0013): "cached plan must not change result type", SQLSTATE 0A000, raised
    before the statement does anything. Known by the server function that raises it,
    which lc_messages does not translate, or else by its message."""
    if not isinstance(exc, psycopg.errors.FeatureNotSupported):
        return False
    diag = exc.diag
    return (
        diag.source_function == "RevalidateCachedQuery"
        or diag.message_primary == "cached plan must not change result type"
    )


class Cursor(psycopg.Cursor[Any]):
    """The cursor of every connection `connect` opens (the daemon's, the dashboard's,
    the CLI's). psycopg prepares a statement at its sixth run on a connection, and the
    worker prepares its own at connect (JobStore.warm); a migration that changes the
    type of a column one of them returns makes each fail at its next run. A statement
    that ran on its own (autocommit, no transaction open; it did nothing) is run again,
    once, after the connection's prepared statements are dropped (psycopg then prepares
    them afresh); one inside a transaction ended it: StalePreparedStatement, which the
    daemon handles as a lost connection. A failure that is not this one costs nothing
    more than psycopg's own; a statement one call frame more."""

    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Cursor:
        try:
            return super().execute(query, params, prepare=prepare, binary=binary)
        except psycopg.errors.FeatureNotSupported as exc:
            if not stale_prepared_statement(exc):
                raise
            pgconn = self.connection.pgconn
            if pgconn.transaction_status != TransactionStatus.IDLE or pgconn.pipeline_status:
                raise StalePreparedStatement(describe_error(exc)) from exc
        # psycopg sees the DEALLOCATE ALL and forgets the names it prepared.
        self.connection.execute("DEALLOCATE ALL")
        return super().execute(query, params, prepare=prepare, binary=binary)


# Errors that end one transaction and leave its connection as it was: the server rolled
# the transaction back, and the session is idle and usable (psycopg makes each an
# OperationalError, as it does a lost connection). What each is, in a few words:
TRANSACTION_FAULTS: dict[type[BaseException], str] = {
    # 40P01: a worker's outcome statement releases workflow dependents in its triggers,
    # which an application transaction that cancels or completes jobs may hold while it
    # waits for the job's row (docs/workflows.md): PostgreSQL rolls one of the two back.
    psycopg.errors.DeadlockDetected: "deadlock detected",
    # 40001: a database or role whose default isolation is serializable.
    psycopg.errors.SerializationFailure: "serialization failure",
    # 55P03: a lock_timeout (a role's or database's, or the supervisor's settlements'):
    # the lock was another transaction's.
    psycopg.errors.LockNotAvailable: "lock wait timed out (lock_timeout)",
    # 57014: a statement_timeout, or an operator's pg_cancel_backend.
    psycopg.errors.QueryCanceled: "statement canceled (statement_timeout or a cancel)",
}


def transaction_fault(exc: BaseException, conn: psycopg.Connection[Any] | None) -> str | None:
    """What `exc` is, in a few words, if it ended only the transaction on `conn` and left
    the connection idle (open, no transaction: autocommit, or a `with
    conn.transaction()` that rolled back); None for anything else, a lost connection
    among them. An error of the transaction whose connection broke as well (UNKNOWN, or
    closed) is not one."""
    what = TRANSACTION_FAULTS.get(type(exc))
    if what is None or conn is None or conn.info.transaction_status != TransactionStatus.IDLE:
        return None
    return what


def bound_transaction(
    conn: psycopg.Connection[Any], *, statement_timeout_ms: int, lock_timeout_ms: int
) -> None:
    """In the transaction `conn` has begun: no statement of it may run longer, or wait
    for a lock longer, than given, and its timestamps come in UTC. SET LOCAL, not the
    connection's `options`: PgBouncer refuses that startup parameter, and in transaction
    mode a session's SET would land on another server connection."""
    conn.execute(
        "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true),"
        " set_config('TimeZone', 'UTC', true)",
        [str(statement_timeout_ms), str(lock_timeout_ms)],
    )


# The C scanner json.loads ends up in, called directly: what json.loads does around it
# (its keyword checks, guessing the bytes' encoding, a regex for whitespace on either
# side) was three quarters of a job's payload decoding, on every claimed job
# (bench/results/noop-round5-20261125.md).
_scan_json = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def json_loads(data: bytes | str) -> Any:
    """json.loads(data) for a json or jsonb value as the server sends it (UTF-8 text,
    no whitespace around it: jsonb's output never has any); anything else goes through
    json.loads itself, so the value, or the error, is always json.loads's. A value
    nested too deeply to decode here is the marker `Undecodable`, not RecursionError:
    the worker's claim and every reader of a job (CLI, dashboard, `pgworkerd.result`)
    decode through this, and the whole read failed on one such value (a worker exited,
    its other claimed jobs held until their leases expired)."""
    try:
        text = data.decode() if isinstance(data, bytes) else data
        value, end = _scan_json(text, 0)
    except (UnicodeDecodeError, StopIteration):
        return _json_loads(data)
    except RecursionError:  # the one exception: no cost to the values that decode
        return Undecodable.of(text)
    if end != len(text):
        return _json_loads(data)
    return value


def _json_loads(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        return Undecodable.of(data.decode(errors="replace") if isinstance(data, bytes) else data)


def parsed_conninfo(url: str, **options: Any) -> str:
    """`make_conninfo(url, **options)`, or DatabaseURLError when `url` cannot be parsed:
    libpq's reason without the parts of the URL it quotes (a password among them: a
    missing "=", a bad percent-encoding)."""
    try:
        return make_conninfo(url, **options)
    except psycopg.ProgrammingError as exc:
        reason = _QUOTED.sub("…", " ".join(str(exc).split()))
        raise DatabaseURLError(
            f"database.url is not a PostgreSQL URL or connection string ({reason});"
            " a password's @, % or / must be percent-encoded"
        ) from None


def shown_url(url: str) -> str:
    """The database URL as `pgworkerd check` shows it: the options libpq reads from it
    (PQconninfoParse), as a connection string, with `***` for the password and the
    sslpassword. libpq's own reading, not a pattern over the text: a password holding
    "?" or "#", a percent-encoded key (?%70assword=), a conninfo value with escapes
    (password=abc\\ def) are all one option's value. A value holding an "@" is
    masked too (but a user's, name@server): it is a host read from a password's
    unencoded "@" (u:pa@ss@h1,h2). A URL libpq cannot read is not shown at all."""
    if "\0" in url:  # libpq would read only the text before it
        return "(the database URL, not shown: it holds a NUL character)"
    try:
        options = conninfo_to_dict(url)
    except (psycopg.Error, ValueError):  # ValueError: not UTF-8 (a lone surrogate)
        return "(the database URL, not shown: libpq cannot read it)"
    ordered = {key: options[key] for key in _SHOWN_FIRST if key in options}
    shown = {}
    for key, value in {**ordered, **options}.items():
        secret = key in _SECRET_OPTIONS or (key != "user" and "@" in str(value))
        shown[key] = "***" if secret else value
    try:
        text = make_conninfo("", **shown)
    except psycopg.Error:  # not expected: libpq's own reading, written back
        return "(the database URL, not shown: libpq cannot read it)"
    # mask_passwords, to be sure: an option's value that holds a URL or a password=.
    return mask_passwords(text)


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """One line about a database error, with no password in it even if libpq or the
    server repeated one."""
    text = str(exc)
    if url:  # before the spaces are joined: a password may hold two in a row
        for secret in _secrets_of(url):
            text = text.replace(secret, "***")
    text = " ".join(text.split()) or type(exc).__name__
    # A quoted part with an @ in it is a URL, or a host read from a password's unencoded
    # @ ('etpw@127.0.0.1'): either may hold what the password was meant to be.
    text = _QUOTED_WITH_AT.sub("'***'", text)
    return mask_passwords(text)


def _secrets_of(url: str) -> list[str]:
    """The password and sslpassword libpq reads from `url` (none if it cannot)."""
    try:
        options = conninfo_to_dict(url)
    except (psycopg.Error, ValueError):
        return []
    return [str(options[key]) for key in _SECRET_OPTIONS if options.get(key)]
