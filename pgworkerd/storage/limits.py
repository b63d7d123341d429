"""The flow-control limits a claim enforces (LIMITS in sql/queries.sql): what a worker
knows of each limited queue, and the parameters the limited claim takes.

A claim whose queue list includes a limited queue runs in its own transaction: first
`limits_lock` (one advisory lock per limited queue, in a fixed order), then
`jobs_claim_limited`, which counts the queue's running rows and its starts in the
rate's window and takes at most the room left. A queue list without a limited queue
claims exactly as before (JobStore.claim), with no extra statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgworkerd.storage import queries


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """The limits of one queue. None: that limit is not set."""

    concurrency: int | None = None
    rate: tuple[int, float] | None = None  # (starts, period in seconds)
    key_concurrency: int | None = None  # per_key: the same, for each key of the queue
    key_rate: tuple[int, float] | None = None
    fair: bool = False  # keys take turns (round-robin)

    @property
    def keyed(self) -> bool:
        """Whether its claims walk keys (KEYED in sql/queries.sql), not levels."""
        return self.fair or self.key_concurrency is not None or self.key_rate is not None

    @property
    def frees_on_completion(self) -> bool:
        """Whether a completion frees a place (so idle workers are woken for it); so
        does any end of a lease: a failure, a release, a rescue, a cancel."""
        return self.concurrency is not None or self.key_concurrency is not None

    @property
    def frees_on_snooze(self) -> bool:
        """Whether a Snooze or PauseKey frees a place: its lease's, and its start, which
        it gives back to the rate."""
        return self.frees_on_completion or self.rate is not None or self.key_rate is not None


def limited_queues(queues: Sequence[str], limits: Mapping[str, QueueLimits]) -> list[str]:
    return [queue for queue in queues if queue in limits]


def claim_limit_params(limited: Sequence[str], limits: Mapping[str, QueueLimits]) -> dict[str, Any]:
    """jobs_claim_limited's limits, as parallel arrays (NULL where a limit is not set)."""
    chosen = [limits[queue] for queue in limited]
    return {
        "limit_queues": list(limited),
        "limit_concurrency": [q.concurrency for q in chosen],
        "limit_rate_count": [q.rate[0] if q.rate else None for q in chosen],
        "limit_rate_period_s": [q.rate[1] if q.rate else None for q in chosen],
        "limit_key_concurrency": [q.key_concurrency for q in chosen],
        "limit_key_rate_count": [q.key_rate[0] if q.key_rate else None for q in chosen],
        "limit_key_rate_period_s": [q.key_rate[1] if q.key_rate else None for q in chosen],
        "limit_fair": [q.fair for q in chosen],
    }


def describe(limits: QueueLimits) -> dict[str, Any]:
    """A queue's limits as status and keys show them (JSON values): rates as `N/Ps`."""
    per_key = {
        "concurrency": limits.key_concurrency,
        "rate": rate_text(limits.key_rate),
    }
    return {
        "concurrency": limits.concurrency,
        "rate": rate_text(limits.rate),
        "per_key": per_key if any(v is not None for v in per_key.values()) else None,
        "fair": limits.fair,
    }


def reported(row: Mapping[str, Any], limits: Mapping[str, QueueLimits]) -> dict[str, Any]:
    """One row of LimitReads.sample as `status` and the dashboard show it: the queue's
    limits (describe) and, now, running, starts_in_window, ready and held_back."""
    return {
        "queue": row["queue"],
        **describe(limits[row["queue"]]),
        "running": int(row["running"]),
        "starts_in_window": int(row["window_starts"]),
        "ready": int(row["ready"]),
        "held_back": int(row["held_back"]),
    }


_PERIOD_UNITS = {1.0: "s", 60.0: "m", 3600.0: "h"}


def rate_text(rate: tuple[int, float] | None) -> str | None:
    """`100/s`, `10/m`, `5/h`, or `20/30s`: as the config writes it."""
    if rate is None:
        return None
    count, period_s = rate
    return f"{count}/{_PERIOD_UNITS.get(period_s) or f'{period_s:g}s'}"


class LimitReads:
    """What the limits do now, for `status` and the metrics' sample (limits_sample)."""

    def __init__(self, schema: str) -> None:
        self._sql = queries.statements(schema)

    def sample(
        self, conn: psycopg.Connection[Any], limits: Mapping[str, QueueLimits]
    ) -> list[dict[str, Any]]:
        """For each limited queue: running, window_starts (in its rate's window), ready
        and held_back (ready jobs a limit holds back now)."""
        if not limits:
            return []
        params = claim_limit_params(sorted(limits), limits)
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["limits_sample"], params).fetchall()
