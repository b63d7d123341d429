"""The exceptions pgworkerd raises. Each one's message is a single line for a user, and
shows no password (`mask_passwords`)."""

from __future__ import annotations

import re
from urllib.parse import unquote


class PgworkerdError(Exception):
    """Base of every error pgworkerd raises on purpose."""


class ConfigError(PgworkerdError):
    """The configuration is unusable. `problems` holds one line per problem. Here, not
    in `pgworkerd.config` (which re-exports it), so that the CLI can catch it without
    loading pydantic."""

    def __init__(self, problems: list[str]) -> None:
        # A problem line may quote a value, and a database URL put in the wrong setting
        # (or named as the config file) would be quoted with its password.
        problems = [mask_passwords(problem) for problem in problems]
        super().__init__("; ".join(problems))
        self.problems = problems


class InvalidJob(PgworkerdError, ValueError):
    """An enqueue was refused before any SQL ran."""


class WrongConnection(InvalidJob, TypeError):
    """A client call was given what it cannot run on (a sync connection to an `_async`
    function, an AsyncConnection to a sync one, a DSN, None, Django's `connection`):
    refused before any statement ran. An InvalidJob, as the SQLAlchemy objects refused by
    enqueue always were, and a TypeError, which it is."""


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


# A URL's password: from the ":" after its user to the last "@" of the text (libpq reads
# to the first "@" or "/": a password holding "?", "#", "/" or an unencoded "@" is
# masked whole). "scheme:/" too: a path (-c, $PGWORKERD_CONFIG) collapses the "//".
# The lookbehind starts a scheme only at the start of a word: no quadratic backtracking
# on a long run of letters. The user stops at "/" (none holds an unencoded one), else
# "/+" and the user would split a run of slashes O(n^2) ways ("a:" + 100,000 slashes +
# "@" took 37 s); it may hold a space (libpq refuses that URL, but masking more is safe).
_URL_PASSWORD = re.compile(
    r"((?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*:/+[^:@/\n]*:).*@", re.DOTALL
)
# A key and what assigns it a value: `key=` (a conninfo's, or a URL's query string's,
# whose key may be percent-encoded: ?%70assword=) or `'key':` (a mapping's repr, JSON).
_ASSIGNED_KEY = re.compile(
    r"""(?<![A-Za-z0-9_%])((?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+)(?:\s|\\[tnr])*=(?:\s|\\[tnr])*"""
    r"""|(['"])([^'"\n]*)\2\s*:\s*"""
)
# The value after it: quoted ('...' with libpq's backslash escapes, or "..."), maybe
# unterminated, else up to whitespace that no backslash escapes (libpq's `abc\ def`).
# Any run of backslashes escapes the next character: a repr doubles each one
# ('abc\\ def'), and libpq's own `\\` then a space is only masked further.
_ASSIGNED_VALUE = re.compile(
    r"""'(?:[^'\\]|\\+.)*'?|"(?:[^"\\]|\\+.)*"?|(?:\\+.|[^\s\\])*\\*""", re.DOTALL
)


def mask_passwords(text: str) -> str:
    """`text` with `***` for whatever may be a password in it: a URL's userinfo password
    and the value of any key naming a password (password=, sslpassword=, ?password=,
    'password': ...). For text pgworkerd shows that may quote a value it was given (an
    error line, a database error): a regular expression cannot read a URL or conninfo
    as libpq does, so this masks more than libpq would read, never less. What shows
    the database URL itself reads it with libpq (storage.connections.shown_url)."""
    last_at = text.rfind("@")
    if last_at >= 0:  # past the last "@", no URL has a password: not searched
        text = _URL_PASSWORD.sub(r"\1***@", text[: last_at + 1]) + text[last_at + 1 :]
    parts, pos = [], 0
    while (key := _ASSIGNED_KEY.search(text, pos)) is not None:
        parts.append(text[pos : key.end()])
        pos = key.end()
        name = key.group(1) if key.group(1) is not None else key.group(3)
        if "password" in unquote(name).lower():
            value = _ASSIGNED_VALUE.match(text, pos)
            assert value is not None  # it matches the empty string
            parts.append("***")
            pos = value.end()
    parts.append(text[pos:])
    return "".join(parts)
