"""Pruning: finished jobs past their state's retention are deleted, or moved to
jobs_archive with `retention.archive: true`, in small batches.

Each batch is one short autocommit statement that locks only the rows it removes and
skips any row another transaction holds (FOR UPDATE SKIP LOCKED): it never waits on a
lock, and nothing waits long on it. A round stops after PRUNE_BUDGET_S, since the
supervisor's loop (which also renews leases) waits for it; with rows left over, the
next round comes after PRUNE_BACKLOG_INTERVAL_S instead of PRUNE_INTERVAL_S.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from pgworkerd import logs
from pgworkerd.config import Config
from pgworkerd.config.retention import FinishedState, retention_s
from pgworkerd.housekeeping.duty import IntervalDuty, Round
from pgworkerd.housekeeping.session import DatabaseSession, Result
from pgworkerd.storage.store import JobStore

log = logging.getLogger("pgworkerd.supervisor")

PRUNE_INTERVAL_S = 60.0
PRUNE_BACKLOG_INTERVAL_S = 1.0
PRUNE_BATCH = 1000
PRUNE_BUDGET_S = 0.5
FINISHED_STATES: tuple[FinishedState, ...] = ("succeeded", "dead", "cancelled")


@dataclass(frozen=True, slots=True)
class Policy:
    """Seconds each finished state is kept, and whether pruned rows are archived."""

    keep_s: dict[FinishedState, float]
    archive: bool = False

    @classmethod
    def from_config(cls, config: Config) -> Policy:
        fallback = config.defaults.retention
        keep = {s: retention_s(config.retention, fallback, s) for s in FINISHED_STATES}
        return cls(keep, config.retention.archive)


@dataclass(frozen=True, slots=True)
class Pruned:
    counts: dict[FinishedState, int]  # rows removed, by state
    backlog: bool  # a round stopped with rows past retention left: come back soon

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def prune_round(
    conn: psycopg.Connection[Any],
    schema: str,
    policy: Policy,
    *,
    batch: int = PRUNE_BATCH,
    budget_s: float = PRUNE_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
    positions: dict[FinishedState, datetime | None] | None = None,
) -> Pruned:
    """Batches of each state in turn until each is done or the budget is spent.

    Each batch starts where the one before it stopped (its position: the newest
    finished_at it removed), kept in `positions` across the rounds of a backlog: while
    a snapshot holds back vacuum, the rows already pruned stay in the index, and a batch
    that started from the oldest would walk past all of them each time. A state that a
    round finishes starts from the oldest again at its next round: what a position
    passed by (a row locked at that moment, a finish committed late) is found then."""
    store = JobStore(schema)
    positions = {} if positions is None else positions
    stop_at = clock() + budget_s
    counts: dict[FinishedState, int] = dict.fromkeys(FINISHED_STATES, 0)
    backlog = False
    for state in FINISHED_STATES:
        while True:
            if clock() >= stop_at:
                return Pruned(counts, backlog=True)
            done = store.prune_batch(
                conn,
                state=state,
                retention_s=policy.keep_s[state],
                limit=batch,
                archive=policy.archive,
                after=positions.get(state),
            )
            counts[state] += done.removed
            if done.removed < batch:
                positions.pop(state, None)
                break
            positions[state] = done.position
    return Pruned(counts, backlog)


def prune(
    session: DatabaseSession,
    store: JobStore,
    policy: Policy,
    *,
    lease_ttl_s: float,
    positions: dict[FinishedState, datetime | None] | None = None,
) -> Result[Pruned]:
    """A round of pruning, then the daemons long silent."""

    def work(conn: psycopg.Connection[Any]) -> Pruned:
        pruned = prune_round(conn, store.schema, policy, positions=positions)
        store.prune_stale_daemons(conn, stale_after_s=max(300.0, 10 * lease_ttl_s))
        return pruned

    result = session.attempt("prune", work)
    if result.ok and result.value.total:
        logs.event(
            log,
            logging.INFO,
            "archived finished jobs" if policy.archive else "pruned finished jobs",
            **{state: n for state, n in result.value.counts.items() if n},
        )
    return result


class PruneDuty(IntervalDuty):
    """A round of pruning every PRUNE_INTERVAL_S; sooner while a backlog is left."""

    def __init__(self, config: Config, *, lease_ttl_s: float) -> None:
        super().__init__(PRUNE_INTERVAL_S)
        self.policy = Policy.from_config(config)
        self.lease_ttl_s = lease_ttl_s
        # Where the next batch of each state starts while a backlog lasts (prune_round).
        self.positions: dict[FinishedState, datetime | None] = {}

    def follow(self, config: Config) -> None:
        self.policy = Policy.from_config(config)

    def work(self, round_: Round) -> None:
        pruned = prune(
            round_.session,
            round_.store,
            self.policy,
            lease_ttl_s=self.lease_ttl_s,
            positions=self.positions,
        )
        if pruned.ok and pruned.value.backlog:
            self.schedule.next_at = round_.now + PRUNE_BACKLOG_INTERVAL_S
