"""What the dashboard's routes need to know, set once by `create_app`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.storage.limits import QueueLimits


@dataclass(frozen=True)
class Settings:
    """What the routes need; the DSN stays here and is never rendered."""

    dsn: str
    schema: str
    read_only: bool
    queues: tuple[str, ...]  # configured queues: shown even before any job names them
    periodic: tuple[PeriodicEntry, ...]
    # The config's limited queues (Config.queue_limits()): limits live in the config,
    # not the database, so a dashboard created without one shows none.
    limits: Mapping[str, QueueLimits] = field(default_factory=dict)
