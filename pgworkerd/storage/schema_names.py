"""Which schema names pgworkerd accepts: the one check every way of naming a schema
(the config's `database.schema`, `PGWORKERD_DATABASE__SCHEMA`, `Producer(schema=)`,
`JobStore(schema)`, ...) goes through, in `queries.statements`. No psycopg here: the
config loads it."""

from __future__ import annotations

# The suffixes of a schema's channels (channels.py): `<schema>.jobs`, `.cancel`,
# `.finished`. Here, not there, because channels.py loads psycopg.
CHANNEL_SUFFIXES = (".jobs", ".cancel", ".finished")

# PostgreSQL cuts an identifier to 63 bytes (NAMEDATALEN - 1) without an error, and
# pg_notify refuses a channel name of 64 bytes or more: the longest channel,
# `<schema>.finished`, must fit, so the name itself has 63 - 9 = 54 bytes of UTF-8.
MAX_IDENTIFIER_BYTES = 63
MAX_SCHEMA_BYTES = MAX_IDENTIFIER_BYTES - max(len(s.encode()) for s in CHANNEL_SUFFIXES)

# In a search_path, PostgreSQL reads the name `$user` (after taking the quotes off a
# quoted one, and folding an unquoted one to lower case) as the current role's own
# schema (namespace.c, strcmp with "$user"). migrate sets search_path to the quoted
# schema name for the migration files, so exactly `$user` is special; `"$USER"` is not.
SEARCH_PATH_USER = "$user"

# Names PostgreSQL keeps for itself. CREATE SCHEMA refuses the prefix `pg_` (exactly,
# case and all: IsReservedName), and pg_catalog exists and refuses new tables: migrate
# failed with a server error (exit 1). information_schema, the standard's views, took
# pgworkerd's tables, but pg_dump leaves that schema out: a backup had no jobs.
RESERVED_PREFIX = "pg_"
INFORMATION_SCHEMA = "information_schema"


def schema_name_problem(schema: str) -> str | None:
    """Why `schema` cannot be pgworkerd's schema, or None when it can."""
    if not schema:
        return "must not be empty"
    if schema == SEARCH_PATH_USER:
        return (
            f"{SEARCH_PATH_USER} names the current role's schema in a search_path, where "
            "migrate puts this schema: its tables would go there; choose another name"
        )
    if schema.startswith(RESERVED_PREFIX):
        return f"names starting with {RESERVED_PREFIX} are reserved for PostgreSQL's own schemas"
    if schema == INFORMATION_SCHEMA:
        return (
            f"{INFORMATION_SCHEMA} is PostgreSQL's schema of the standard's views, which "
            "pg_dump leaves out; choose another name"
        )
    try:
        size = len(schema.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8 text"
    if size > MAX_SCHEMA_BYTES:
        return (
            f"must be at most {MAX_SCHEMA_BYTES} bytes of UTF-8, got {size}: the "
            f"notification channel `<schema>.finished` must fit PostgreSQL's "
            f"{MAX_IDENTIFIER_BYTES}-byte names"
        )
    return None


def check_schema_name(schema: str) -> str:
    """`schema`, or ValueError naming what is wrong with it."""
    problem = schema_name_problem(schema)
    if problem is not None:
        raise ValueError(f"schema {schema!r}: {problem}")
    return schema
