"""Forgetting the flow-control rows that no longer mean anything: key pauses that ended
and uniqueness slots (debounce, throttle) that are idle, so that `paused_keys` and
`unique_slots` stay about as big as the keys in use (`flow_tidy` in sql/queries.sql
says why a concurrent producer or pause is never undone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from pgworkerd.storage import queries


@dataclass(frozen=True, slots=True)
class Tidied:
    pauses: int  # ended key pauses deleted
    slots: int  # idle uniqueness slots deleted


class FlowTidying:
    def __init__(self, schema: str) -> None:
        self._sql = queries.statements(schema)

    def tidy(self, conn: psycopg.Connection[Any], *, keep_s: float) -> Tidied:
        """Delete the rows that stopped mattering more than `keep_s` seconds ago."""
        row = conn.execute(self._sql["flow_tidy"], {"keep_s": float(keep_s)}).fetchone()
        assert row is not None  # an aggregate always has its row
        return Tidied(int(row[0]), int(row[1]))
