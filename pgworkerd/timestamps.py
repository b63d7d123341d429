"""The times a job may carry: instants that every reader can load back, and durations
that keep an instant so.

PostgreSQL stores timestamps far past year 9999, but psycopg (Python's datetime) loads
only years 1 to 9999, and loads them in the session's time zone: 9999-12-31T23:30Z is
year 10000 in Berlin. A stored instant outside that range breaks every later read of
its row (`jobs list`, the dashboard, a worker's claim), so it is refused before it is
written, with a day's margin on either side for any session's time zone (PostgreSQL's
offsets stay within ±16 hours).
"""

from __future__ import annotations

from datetime import UTC, datetime

# A delay, a runtime, a pause, a retry's wait: at most this. From any instant a job
# may run at, 100 years later is still readable.
MAX_DURATION_S = 100 * 365.25 * 86_400

EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999_999, tzinfo=UTC)


def readable(value: datetime) -> bool:
    """Whether `value` (timezone-aware) loads back in any session's time zone."""
    try:
        return EARLIEST <= value.astimezone(UTC) <= LATEST
    except OverflowError:  # years 1 to 9999 in its own zone, but not in UTC
        return False


def bounds() -> str:
    return f"{EARLIEST.date().isoformat()} and {LATEST.date().isoformat()} (UTC)"
