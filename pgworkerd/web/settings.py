"""What the dashboard's routes need to know, set once by `create_app`."""

from __future__ import annotations

from dataclasses import dataclass

from pgworkerd.config.periodic import PeriodicEntry


@dataclass(frozen=True)
class Settings:
    """What the routes need; the DSN stays here and is never rendered."""

    dsn: str
    schema: str
    read_only: bool
    queues: tuple[str, ...]  # configured queues: shown even before any job names them
    periodic: tuple[PeriodicEntry, ...]
