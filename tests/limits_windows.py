"""The pure counting of the limits' history checker (tests/limits_history.py): the
most intervals that overlap, the most times in a window."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta


def most_at_once(intervals: Iterable[tuple[datetime, datetime]]) -> int:
    """The most intervals that overlap at one moment (an end before a start at the same
    instant: the place was freed first)."""
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda e: (e[0], e[1]),
    )
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def most_in_window(times: Iterable[datetime], period_s: float) -> int:
    """The most start times in any window (t - period, t]."""
    ordered = sorted(times)
    period = timedelta(seconds=period_s)
    most = first = 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - period:
            first += 1
        most = max(most, last - first + 1)
    return most
