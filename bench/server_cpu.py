"""The CPU a PostgreSQL cluster spends, split by kind of process (issue 23, round 15).

From /proc (psutil): the postmaster and each of its children, named by their process
title (`postgres: walwriter`, `postgres: autovacuum worker`, a backend's
`postgres: user db host ...`); the children that ended in between (autovacuum workers,
or a backend whose client left) are in the postmaster's children_* times, as "ended",
each by its share after the first sample only.
One connection's backend (the measuring one) can be left out.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import psutil
import psycopg

KINDS = ("backends", "walwriter", "autovacuum", "checkpointer", "other", "ended")


def postmaster(data_dir: Path) -> psutil.Process:
    return psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))


def _kind(title: str) -> str:
    if "walwriter" in title:
        return "walwriter"
    if "autovacuum" in title:
        return "autovacuum"
    if "checkpointer" in title:
        return "checkpointer"
    if any(
        name in title for name in ("background writer", "logical replication", "stats", "archiver")
    ):
        return "other"
    return "backends"


class ServerCpu:
    """CPU seconds by kind since this object was made; `exclude`: pids left out."""

    def __init__(self, data_dir: Path, exclude: tuple[int, ...] = ()) -> None:
        self.postmaster = postmaster(data_dir)
        self.exclude = set(exclude)
        self.start = self.sample()

    def sample(self) -> dict[int | str, tuple[str, float]]:
        """Per pid: (kind, user + system); the postmaster's own and its reaped
        children's under "postmaster" and "ended"."""
        times = self.postmaster.cpu_times()
        out: dict[int | str, tuple[str, float]] = {
            "postmaster": ("other", times.user + times.system),
            # Children that exited in between: autovacuum workers, or a backend whose
            # client went away (a measured window must have none: see `ended`).
            "ended": ("ended", times.children_user + times.children_system),
        }
        for child in self.postmaster.children():
            if child.pid in self.exclude:
                continue
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                out[child.pid] = (_kind(" ".join(child.cmdline())), t.user + t.system)
        return out

    def since_start(self) -> dict[str, float]:
        """CPU seconds by kind (KINDS) and their "total" since the object was made: a
        process that started meanwhile counts from zero; one that was there at the start
        and has ended since counts, under "ended", only what it spent after the start."""
        now = self.sample()
        by_kind = dict.fromkeys(KINDS, 0.0)
        for key, (kind, seconds) in now.items():
            before = self.start.get(key)
            by_kind[kind] += seconds - (before[1] if before else 0.0)
        # The postmaster's children_* times grow by an ended child's whole lifetime; the
        # part it had spent by the start sample was before the window: take it off, so
        # that it is counted once, in its share of the window, and still under "ended"
        # (its kind is kept apart from the live processes': a window should have none).
        for key, (_, seconds) in self.start.items():
            if isinstance(key, int) and key not in now:
                by_kind["ended"] -= seconds
        by_kind["total"] = sum(by_kind[k] for k in KINDS)
        return by_kind


def wal_position(conn: psycopg.Connection[Any]) -> int:
    """The cluster's WAL insert position in bytes: two readings' difference is the WAL
    written between them."""
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0
