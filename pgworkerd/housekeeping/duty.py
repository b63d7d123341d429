"""What every housekeeping duty is to the Housekeeper: it says when it is next due,
runs in a round, and follows a reloaded config. `Housekeeper.run_due` loops over its
duties in order; a new duty (limits, workflows) plugs in by being one of them.

River's `maintenance/` services and Oban's plugins are the model: each periodic task
owns its own timing and work; the loop that drives them knows neither."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pgworkerd.config import Config
from pgworkerd.housekeeping.schedule import Every
from pgworkerd.housekeeping.session import DatabaseSession
from pgworkerd.job import Lease
from pgworkerd.storage.store import JobStore


@dataclass(frozen=True, slots=True)
class Round:
    """What a duty may use in one turn of the supervisor's loop."""

    now: float  # monotonic
    session: DatabaseSession
    store: JobStore  # the running config's: the supervisor swaps it on reload
    leases: Callable[[], Sequence[Lease]]  # the leases of the jobs our children hold
    info: Callable[[], dict[str, Any]]  # what the heartbeat says of this daemon
    # The leases our rescue leaves alone though they expired: those our live children
    # hold, and of jobs never started that we give back uncharged (Housekeeper.run_due).
    spared: Callable[[], Sequence[Lease]] = lambda: ()


class Duty(Protocol):
    def next_at(self) -> float:
        """When it is next due (monotonic); -inf: now; inf: nothing to do."""

    def due(self, now: float) -> bool: ...

    def perform(self, round_: Round) -> None: ...

    def follow(self, config: Config) -> None:
        """A config was loaded (at start, and on HUP): take what concerns the duty."""


class IntervalDuty:
    """A duty due at once, then every `interval_s` (counted from each run's start,
    whether or not the database answered: an outage is retried at the next interval)."""

    def __init__(self, interval_s: float) -> None:
        self.schedule = Every(interval_s)

    def next_at(self) -> float:
        return self.schedule.next_at

    def due(self, now: float) -> bool:
        return self.schedule.due(now)

    def perform(self, round_: Round) -> None:
        self.schedule.done(round_.now)
        self.work(round_)

    def work(self, round_: Round) -> None:
        raise NotImplementedError

    def follow(self, config: Config) -> None:
        """Interval duties take nothing from the config unless they say so."""


NEVER = math.inf
