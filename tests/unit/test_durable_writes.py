"""Durability is a promise (promise 1: a job whose enqueue committed is never lost, a
PostgreSQL restart and host loss included): nothing pgworkerd runs on a user's database
may trade it for speed. No statement, migration or connection option of the package
turns off synchronous_commit or fsync, makes a table UNLOGGED, or delays commits. Only
the throwaway test clusters of storage/embedded.py (FAST_UNSAFE_SETTINGS, never a
user's server) may. Read from the source, not run."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pgworkerd"
# What would let a commit return before its WAL is on disk, or keep a table out of it:
# one of these settings given a value (`name = x`, `SET name TO x`, `-c name=x`,
# set_config('name', ...), a dict's `"name": ...`), or UNLOGGED (the keyword). A comment
# that names a setting without setting it is left alone.
_SETTINGS = r"(synchronous_commit|fsync|full_page_writes|commit_delay|wal_writer_delay)"
UNSAFE = re.compile(
    rf"\b{_SETTINGS}\s*(=|\bTO\b)|\b{_SETTINGS}['\"]\s*[:,]|(?-i:\bUNLOGGED\b)",
    re.IGNORECASE,
)
# The test clusters' settings: a throwaway cluster, where durability is worth nothing.
ALLOWED = {PACKAGE / "storage" / "embedded.py"}


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in {".py", ".sql", ".pyi"})


def test_the_package_has_sources_to_read() -> None:
    names = {p.name for p in sources()}
    assert {"queries.sql", "0001_jobs.sql", "store.py", "connections.py"} <= names


def test_no_source_trades_durability_for_speed() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sources()
        if path not in ALLOWED
        for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1)
        if UNSAFE.search(line)
    ]
    assert found == []
