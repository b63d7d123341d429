"""Array parameters of the claim and of the completion, written as PostgreSQL array
literals.

psycopg adapts a Python list afresh on every execution: it walks the list for the
element type and builds a dumper for it, in Python, for each of the claim's six array
parameters. On an idle worker's wake-up that was a fifth of a millisecond of CPU
between the `wake` and the claim leaving (bench/results/idle-latency-20261124.md). A
literal is a plain `str`: psycopg sends it as it is, with no type (`unknown`), and the
statement's own cast (`%(queues)s::text[]`: every array parameter of the claim has one)
makes the server read it as that array type. The values are the same either way.
The completion's ids, tokens and results (a hundred each at batch_size 100) went
element by element through psycopg's list dumper, a regex per element
(bench/results/noop-round5-20261125.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime


def text_array(values: Iterable[str | None]) -> str:
    """`text[]`: each element double-quoted, its backslashes and double quotes escaped
    (array_in's rules), so any text, commas and braces included, reads back as it was."""
    return "{" + ",".join(_quoted(v) for v in values) + "}"


def int_array(values: Iterable[int | None]) -> str:
    """`int[]` or `bigint[]`."""
    return "{" + ",".join(["NULL" if v is None else str(int(v)) for v in values]) + "}"


# A UUID's 32 hex digits from its 128-bit int, UUID.hex's own formula without its
# property call or str()'s hyphens: `HEX_DIGITS % token.int`. The printf form: it runs
# in about half the time of format(token.int, "032x") (a builtin looked up and called
# with a format spec parsed each time), on every claimed job, twice (its `claimed`
# message and its completion).
HEX_DIGITS = "%032x"


def uuid_array(values: Iterable[uuid.UUID]) -> str:
    """`uuid[]`, each as its 32 hex digits (uuid_in reads them without hyphens)."""
    return "{" + ",".join([HEX_DIGITS % v.int for v in values]) + "}"


def timestamptz_array(values: Iterable[datetime | None]) -> str:
    """`timestamptz[]`, each an aware datetime written in UTC to the microsecond (the
    type's own precision): the claim compares positions with `>`, so they must read back
    exactly."""
    return "{" + ",".join("NULL" if v is None else _utc(v) for v in values) + "}"


def _quoted(value: str | None) -> str:
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _utc(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"a timestamptz parameter needs an aware datetime, not {value!r}")
    return '"' + value.astimezone(UTC).isoformat() + '"'
