"""Loads `storage/sql/queries.sql` once and renders its statements for one schema, each
at its first use.

The schema name enters SQL only as a `psycopg.sql.Identifier`, never by string
formatting, so a schema called `"; DROP TABLE x; --` is just an odd name; a `%` in it
is doubled in the statements psycopg parses for their parameters (`jobs%prod`).

A process renders only the statements it runs, when it first runs them: a producer's
first enqueue renders its insert (and no claim, prune or dashboard query), where
rendering all 83 cost ~3 ms and splitting and cleaning the whole file ~2.5 ms more
(bench/results/first-call-round14-20261128.md).
"""

from __future__ import annotations

import functools
import os
import re
import string
from typing import TYPE_CHECKING, cast

from psycopg import sql

from pgworkerd.storage.channels import finished_channel, notify_channel
from pgworkerd.storage.schema_names import check_schema_name

if TYPE_CHECKING:
    from importlib.abc import ResourceLoader

_NAME = re.compile(r"\w+")
_MARKER = "\n-- name: "  # a statement's first line: `-- name: <name>`, nothing more
# Fragments spliced into other statements rather than run on their own; a fragment may
# splice others in (each is rendered once a schema, when a statement first needs it).
_FRAGMENTS = (
    "wake_limited",
    "apply_failure",
    "queue_levels",
    "claim_levels",
    "level_ready",
    "claim_picks",
    "claim_update",
    "claim_meta",
    "limit_settings",
    "complete_update",
    "prune_picks",
)
# Fragments that leave a name open, rendered once per value under a name of their own:
# claim_update's `{started_at}` (the claim's start) and `{picked_ids}` (a batch or one
# row; see its comment in queries.sql).
_BATCH = "= ANY(ARRAY(SELECT picked.id FROM picked))"
_VARIANTS: dict[str, dict[str, dict[str, str]]] = {
    "claim_update": {
        "claim_update": {"started_at": "now()", "picked_ids": _BATCH},
        "claim_update_after_lock": {"started_at": "statement_timestamp()", "picked_ids": _BATCH},
        "claim_update_one": {
            "started_at": "now()",
            "picked_ids": "= (SELECT picked.id FROM picked)",
        },
    },
}
# Each name a statement may splice in: (the fragment's source name, its open names' values).
_SPLICED = {
    variant: (name, values)
    for name in _FRAGMENTS
    for variant, values in _VARIANTS.get(name, {name: {}}).items()
}


@functools.cache
def _source_by_name() -> dict[str, str]:
    """Each statement's text as the file has it, comments included (see `_body`)."""
    # Read by the loader that imported this module, as importlib.resources and pkgutil
    # do, without importing them (~1.3 ms).
    path = os.path.join(os.path.dirname(__file__), "sql", "queries.sql")
    loader = cast("ResourceLoader", __spec__.loader)
    text = "\n" + loader.get_data(path).decode("utf-8")
    bodies = {}
    for part in text.split(_MARKER)[1:]:  # [0]: the file's header
        name, _, body = part.partition("\n")
        name = name.rstrip()
        if not _NAME.fullmatch(name):
            raise ValueError(f"queries.sql: {_MARKER.strip()}{name!r} is not a statement name")
        bodies[name] = body
    return bodies


def _body(name: str) -> str:
    """The statement `name` to render: whole-line comments go (psycopg would read a
    `%(x)s` in them as a parameter), and the final semicolon."""
    lines = [line for line in _source_by_name()[name].splitlines() if not _comment(line)]
    return "\n".join(lines).strip().rstrip(";")


def _comment(line: str) -> bool:
    return line.lstrip().startswith("--")


def _spliced_in(body: str) -> list[str]:
    """The fragments `body` names (`{claim_update_one}`)."""
    fields = (field for _, field, _, _ in string.Formatter().parse(body) if field)
    return [field for field in fields if field in _SPLICED]


class Statements(dict[str, bytes]):
    """The named statements of one schema, each rendered at its first look-up to the
    bytes sent to the server, and kept: psycopg then recognises a statement it has seen
    (and prepared) without composing it again on every call of the hot path. Holds the
    statements rendered so far (a look-up of a name not in queries.sql is a KeyError)."""

    def __init__(self, schema: str) -> None:
        super().__init__()
        # Every class that works on a schema renders its statements here first: a name
        # PostgreSQL would cut short, or whose channels it would refuse, stops here.
        check_schema_name(schema)
        names: dict[str, sql.Composable] = {
            "schema": sql.Identifier(schema),
            # A literal, not a parameter: the statements that make a job final announce
            # it there (FINISHED) without their callers passing anything more.
            "finished_channel": sql.Literal(finished_channel(schema)),
            "finished_channel_name": sql.Identifier(finished_channel(schema)),
            # The queues' channel (jobs_insert's), for WAKE: a literal for the same reason.
            "queue_channel": sql.Literal(notify_channel(schema)),
        }
        # psycopg reads every `%` of a statement it is given parameters for, inside quotes
        # too: there a schema `jobs%prod` would be a placeholder `%p`. Such statements
        # (`_parsed_by_psycopg`) get the names with each `%` written `%%`, which psycopg
        # turns back into the `%` of the name; the others get them as they are.
        self._names: dict[bool, dict[str, sql.Composable]] = {
            False: names,
            True: {key: _percent_escaped(value) for key, value in names.items()},
        }
        self._fragments: dict[tuple[str, bool], sql.Composed] = {}

    def __missing__(self, name: str) -> bytes:
        if name in _SPLICED:
            raise KeyError(name)  # a fragment, not a statement
        body = _body(name)
        rendered = self._render(body, _parsed_by_psycopg(name)).as_bytes(None)
        self[name] = rendered  # two threads at once store equal bytes: either is right
        return rendered

    def _render(self, body: str, escaped: bool, **open_names: sql.Composable) -> sql.Composed:
        spliced = {name: self._fragment(name, escaped) for name in _spliced_in(body)}
        return sql.SQL(body).format(**self._names[escaped], **open_names, **spliced)

    def _fragment(self, variant: str, escaped: bool) -> sql.Composed:
        fragment = self._fragments.get((variant, escaped))
        if fragment is None:
            name, values = _SPLICED[variant]
            open_names = {key: sql.SQL(value) for key, value in values.items()}
            fragment = self._render(_body(name), escaped, **open_names)
            self._fragments[variant, escaped] = fragment
        return fragment


@functools.cache
def _parsed_by_psycopg(name: str) -> bool:
    """Whether statement (or fragment) `name` is run with parameters, so psycopg reads
    its `%`s: the file's rule (its header) is that a statement with parameters, and only
    such a one, has a `%` (a placeholder, or a literal one written `%%`), here or in a
    fragment it splices in; the others are run without parameters (None, not {})."""
    body = _body(name)
    return "%" in body or any(_parsed_by_psycopg(_SPLICED[f][0]) for f in _spliced_in(body))


def _percent_escaped(name: sql.Composable) -> sql.Composable:
    """`name` rendered, each `%` doubled, for a statement psycopg parses."""
    text = name.as_bytes(None).decode("utf-8")
    return sql.SQL(text.replace("%", "%%")) if "%" in text else name


def names() -> list[str]:
    """The names of every statement (fragments left out), in the file's order."""
    return [name for name in _source_by_name() if name not in _SPLICED]


@functools.cache
def statements(schema: str) -> Statements:
    """The statements of `schema`, one `Statements` a schema for the process's life."""
    return Statements(schema)
