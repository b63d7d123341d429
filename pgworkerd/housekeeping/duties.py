"""The supervisor's lease duties: renew its children's leases and heartbeat, rescue
expired leases (of any daemon), sample the queues' depth for the metrics; pruning is
retention.py, periodic jobs periodic.py. Each is a function over a session and the
store, and a Duty (duty.py) that says when it runs."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgworkerd import logs
from pgworkerd.config import Config
from pgworkerd.housekeeping.duty import NEVER, IntervalDuty, Round
from pgworkerd.housekeeping.session import DatabaseSession, Result
from pgworkerd.job import Lease
from pgworkerd.storage.key_pauses import KeyPauseStore
from pgworkerd.storage.limits import LimitReads, QueueLimits
from pgworkerd.storage.reads import Horizon, Reads
from pgworkerd.storage.store import JobStore
from pgworkerd.supervisor.metrics import METRICS

log = logging.getLogger("pgworkerd.supervisor")


def renewal_interval_s(lease_ttl_s: float) -> float:
    return lease_ttl_s / 3


def rescue_interval_s(lease_ttl_s: float) -> float:
    return min(5.0, lease_ttl_s / 2)


@dataclass(frozen=True, slots=True)
class Renewal:
    """A renewal round trip that answered."""

    renewed: frozenset[int]  # ids of the leases still ours
    sent_at: float  # monotonic time the renewal was sent: the new expiries are later
    # Of the leases not renewed, the ids of jobs cancelled under them (the others were
    # rescued, released or ended by their holder, or are `locked`).
    cancelled: frozenset[int] = frozenset()
    # Of the leases not renewed, the ids still ours whose row another transaction had
    # locked: skipped, not waited on (jobs_renew). Their leases keep their old expiry:
    # the next renewal tries again, and a job whose lease stays unrenewed is stopped by
    # its own lapse (supervisor/limits.py).
    locked: frozenset[int] = frozenset()


def renew(
    session: DatabaseSession,
    store: JobStore,
    *,
    leases: Sequence[Lease],
    info: dict[str, Any],
    daemon_id: str,
    lease_ttl_s: float,
    sent_at: float,
) -> Renewal | None:
    """Renew `leases` and refresh our heartbeat, in one transaction; None when the
    database did not answer. A lease not renewed is looked up (cancelled? its row
    locked?) in the same round of statements: the usual renewal finds every lease and
    pays nothing more. No statement waits on a job's row lock."""

    def work(conn: psycopg.Connection[Any]) -> tuple[set[int], set[int], set[int]]:
        with conn.transaction():
            store.heartbeat(
                conn,
                daemon_id=daemon_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                info=json.dumps(info),
            )
            renewed = store.renew(conn, leases, lease_ttl_s)
            missing = [lease for lease in leases if lease.job_id not in renewed]
            locked, cancelled = store.unrenewed_among(conn, missing)
            return renewed, cancelled, locked

    result = session.attempt("renew leases", work)
    if not result.ok:
        return None
    renewed, cancelled, locked = result.value
    return Renewal(frozenset(renewed), sent_at, frozenset(cancelled), frozenset(locked))


def rescue(session: DatabaseSession, store: JobStore, spared: Sequence[Lease] = ()) -> Result[int]:
    """Retry or dead-letter jobs whose lease expired, but those under `spared`; how
    many."""

    def work(conn: psycopg.Connection[Any]) -> int:
        rescued = store.rescue(conn, spared=spared)
        for failed in rescued:
            # A cancelled row here was not rescued: it stays cancelled and is not run
            # again; only the place its lease held under a limit is given back.
            message = (
                "released the expired lease of a cancelled job"
                if failed.state == "cancelled"
                else "rescued job with expired lease"
            )
            logs.event(
                log,
                logging.WARNING,
                message,
                job=failed.job_id,
                attempt=failed.attempt,
                next_state=failed.state,
            )
        return sum(1 for failed in rescued if failed.state != "cancelled")

    return session.attempt("rescue", work)


def unregister(session: DatabaseSession, store: JobStore, daemon_id: str) -> Result[None]:
    """Remove our heartbeat row: we are leaving."""
    return session.attempt("unregister", lambda conn: store.remove_daemon(conn, daemon_id))


SAMPLE_INTERVAL_S = 5.0  # queue depth for the metrics: not per scrape


@dataclass(frozen=True, slots=True)
class Sample:
    """What the metrics show of the database, read every SAMPLE_INTERVAL_S."""

    queues: list[tuple[str, int, float | None]]  # queue, jobs ready now, oldest's age (s)
    horizon: Horizon | None  # the oldest holder of the xmin horizon
    jobs_table: dict[str, Any] | None  # live_tuples, dead_tuples, last_vacuum_at
    held_back: list[tuple[str, int]]  # limited queue, ready jobs a limit holds back
    waiting: list[tuple[str, int]]  # queue, jobs waiting for the jobs they run after
    # queue -> ready jobs held back by a key pause (queues without any: left out)
    held_by_key_pause: dict[str, int] = field(default_factory=dict)


def sample(
    session: DatabaseSession,
    store: JobStore,
    queues: Sequence[str],
    limits: Mapping[str, QueueLimits] | None = None,
) -> Result[Sample]:
    """The queues' depth, what the limits and the key pauses hold back, and what holds
    back vacuum."""
    reads = Reads(store.schema)
    limit_reads = LimitReads(store.schema)
    key_pauses = KeyPauseStore(store.schema)

    def work(conn: psycopg.Connection[Any]) -> Sample:
        ready = store.ready_by_queue(conn, queues)
        held = [
            (row["queue"], int(row["held_back"])) for row in limit_reads.sample(conn, limits or {})
        ]
        held_by_key_pause = key_pauses.holding_by_queue(conn, queues)
        waiting = store.waiting_by_queue(conn, queues)
        return Sample(
            ready,
            reads.horizon(conn),
            reads.jobs_table(conn),
            held,
            waiting,
            held_by_key_pause,
        )

    return session.attempt("sample queues", work)


class RenewalDuty(IntervalDuty):
    """Renews every lease_ttl / 3: a lease survives two failed renewals in a row."""

    def __init__(self, *, lease_ttl_s: float, daemon_id: str) -> None:
        super().__init__(renewal_interval_s(lease_ttl_s))
        self.lease_ttl_s = lease_ttl_s
        self.daemon_id = daemon_id
        self.answered: Renewal | None = None  # of the last run; None: failed (or none yet)
        self.last_answered_at: float | None = None  # monotonic: the last one that answered
        self._locked: frozenset[int] = frozenset()  # skipped by the last one that answered

    def work(self, round_: Round) -> None:
        self.answered = renew(
            round_.session,
            round_.store,
            leases=round_.leases(),
            info=round_.info(),
            daemon_id=self.daemon_id,
            lease_ttl_s=self.lease_ttl_s,
            sent_at=round_.now,
        )
        if self.answered is None:
            METRICS.renewal_failed()
        else:
            self.last_answered_at = round_.now
            # A row locked for a moment (its own completion being written) is skipped
            # once, routinely: said only when the same lease is skipped twice in a row.
            locked, self._locked = self._locked, self.answered.locked
            if locked & self._locked:
                logs.event(
                    log,
                    logging.WARNING,
                    "leases not renewed: their rows are locked by another transaction",
                    jobs=sorted(locked & self._locked),
                )


class RescueDuty(IntervalDuty):
    """Rescues the expired leases of every daemon but the ones this daemon spares:
    those its live workers hold (it renews them, or settles them when a worker dies),
    among them those of jobs claimed and never started whose renewals failed (the
    database down, or out of reach, for longer than the lease). Those starts were never
    made, so they are not charged (docs/design.md, "Leases that lapse while the
    database is away"): this daemon gives them back uncharged, and its own rescue must
    not win that race when the database answers again."""

    def __init__(self, *, lease_ttl_s: float) -> None:
        super().__init__(rescue_interval_s(lease_ttl_s))

    def work(self, round_: Round) -> None:
        rescue(round_.session, round_.store, round_.spared())


class QueueSampling(IntervalDuty):
    """The depth and age of each queue, and what holds back vacuum, for the metrics and
    /readyz; only while they are served."""

    def __init__(self) -> None:
        super().__init__(SAMPLE_INTERVAL_S)
        self.queues: Sequence[str] = ()
        self.limits: Mapping[str, QueueLimits] = {}  # the config's limited queues
        self.latest: Sample | None = None  # the last sample that answered

    def follow(self, config: Config) -> None:
        self.limits = config.queue_limits()

    def next_at(self) -> float:
        return super().next_at() if self.queues else NEVER

    def due(self, now: float) -> bool:
        return bool(self.queues) and super().due(now)

    def work(self, round_: Round) -> None:
        result = sample(round_.session, round_.store, self.queues, self.limits)
        if result.ok:
            self.latest = result.value
            METRICS.queues_sampled(result.value.queues)
            METRICS.key_pauses_sampled(self.queues, result.value.held_by_key_pause)
            METRICS.limits_sampled(result.value.held_back)
            METRICS.waiting_sampled(result.value.waiting)
            METRICS.database_sampled(result.value.horizon, result.value.jobs_table)
