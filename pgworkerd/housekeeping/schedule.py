"""When a periodic duty is due. Pure: time comes from the caller (a monotonic `now`)."""

from __future__ import annotations

import math


class Every:
    """Due at once, then `interval_s` after each run (counted from the run's start)."""

    __slots__ = ("interval_s", "next_at")

    def __init__(self, interval_s: float, *, first_at: float = -math.inf) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval must be > 0 s, got {interval_s!r}")
        self.interval_s = interval_s
        self.next_at = first_at  # monotonic; -inf: due at the first look

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def done(self, now: float) -> None:
        """The duty runs (or ran) at `now`: next due one interval later, whether or
        not the database answered (an outage is retried at the next interval)."""
        self.next_at = now + self.interval_s

    def __repr__(self) -> str:
        return f"Every({self.interval_s!r}, next_at={self.next_at!r})"
