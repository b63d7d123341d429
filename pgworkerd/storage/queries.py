"""Loads `storage/sql/queries.sql` once and renders its statements for one schema.

The schema name enters SQL only as a `psycopg.sql.Identifier`, never by string
formatting, so a schema called `"; DROP TABLE x; --` is just an odd name.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

from pgworkerd.storage.channels import finished_channel, notify_channel

_NAME_MARKER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
# Fragments spliced into other statements rather than run on their own; a fragment may
# use the ones before it.
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


@functools.cache
def _source_by_name() -> dict[str, str]:
    text = resources.files("pgworkerd.storage").joinpath("sql/queries.sql").read_text("utf-8")
    parts = _NAME_MARKER.split(text)
    # parts = [header, name1, body1, name2, body2, ...]
    bodies = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        # Whole-line comments go: psycopg would read a `%(x)s` in them as a parameter.
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        bodies[name] = "\n".join(lines).strip().rstrip(";")
    return bodies


@functools.cache
def statements(schema: str) -> dict[str, bytes]:
    """Every named statement, rendered once for `schema` to the bytes sent to the
    server: psycopg then recognises a statement it has seen (and prepared) without
    composing it again on every call of the hot path."""
    source = _source_by_name()
    names = {
        "schema": sql.Identifier(schema),
        # A literal, not a parameter: the statements that make a job final announce it
        # there (FINISHED) without their callers passing anything more.
        "finished_channel": sql.Literal(finished_channel(schema)),
        "finished_channel_name": sql.Identifier(finished_channel(schema)),
        # The queues' channel (jobs_insert's), for WAKE: a literal for the same reason.
        "queue_channel": sql.Literal(notify_channel(schema)),
    }
    fragments: dict[str, sql.Composed] = {}
    for name in _FRAGMENTS:
        for variant, values in _VARIANTS.get(name, {name: {}}).items():
            open_names = {key: sql.SQL(value) for key, value in values.items()}
            fragments[variant] = sql.SQL(source[name]).format(**names, **open_names, **fragments)
    return {
        name: sql.SQL(body).format(**names, **fragments).as_bytes(None)
        for name, body in source.items()
        if name not in _FRAGMENTS
    }
