"""Every state transition of a job, one method each, over the statements of
`storage/sql/queries.sql`.

    queued --claim--> running --complete--> succeeded
                         |--fail / retry_after / rescue--> queued (later) | dead
                         |--release--> queued (start not charged)
    queued | running --cancel--> cancelled;   dead | cancelled --retry--> queued

A running job cancelled keeps its lease on the cancelled row (HELD in sql/queries.sql)
until its handler has ended: each write of an outcome that finds its lease on a
cancelled row (the handler ran on after the cancel) releases it instead
(`release_cancelled`), and `rescue` releases those whose lease expired.

Each method runs one statement on the caller's connection and leaves the transaction
to the caller (workers use autocommit connections). Writes after a claim take the
job's Lease and report which leases still held: a write on a lost lease changes
nothing. The producer's inserts are in `storage/inserts.py`, which an application that
only enqueues loads without this module.
"""

from __future__ import annotations

import functools
import operator
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

import psycopg
from psycopg.rows import dict_row

from pgworkerd.encoding import clean_error
from pgworkerd.job import Job, Lease
from pgworkerd.storage import queries
from pgworkerd.storage.arrays import int_array, text_array, timestamptz_array, uuid_array
from pgworkerd.storage.channels import cancel_channel, notify_channel
from pgworkerd.storage.connections import json_loads

# Defined with the producer's statements (an enqueue loads that module alone); named here
# too, where the daemon's side and the client's other calls have always found it.
from pgworkerd.storage.inserts import DEFAULT_SCHEMA as DEFAULT_SCHEMA
from pgworkerd.storage.limits import QueueLimits, claim_limit_params, limited_queues
from pgworkerd.storage.rows import c_namedtuple_row, execute


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: the n-th failure waits a uniform time in
    [0, min(max_s, base_s * 2**(n-1))] seconds."""

    base_s: float = 30.0
    max_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """An attempt charged without success (the handler failed or asked for a retry, or
    the lease expired): where its job went."""

    job_id: int
    state: str  # 'queued' (to run again at run_at) or 'dead'
    run_at: datetime
    attempt: int


@dataclass(frozen=True, slots=True)
class Completions:
    """Successes to write (`complete`, `complete_and_claim`) as the statement's three
    columns: the jobs' ids, their lease tokens, their JSON results (None: no result).
    A worker builds them from its successes' jobs as they are, with no `Lease` and no
    pair per job (bench/results/worker-round14-20261128.md); `of` takes the pairs."""

    ids: Sequence[int]
    tokens: Sequence[uuid.UUID]
    results: Sequence[str | None]

    @classmethod
    def of(cls, done: Iterable[tuple[Lease, str | None]] | Completions) -> Completions:
        if isinstance(done, Completions):
            return done
        pairs = list(done)
        return cls(
            [lease.job_id for lease, _ in pairs],
            [lease.token for lease, _ in pairs],
            [result for _, result in pairs],
        )

    def __len__(self) -> int:
        return len(self.ids)


# Levels remembered beyond those a sweep finds, before the ones it did not find go.
MAX_IDLE_LEVELS = 100

# A position in a level of the claim index: (run_at, id) of the last job passed.
Position = tuple[datetime, int]


class ClaimPositions:
    """Where this process's claims have got to in each level (queue, priority) of the
    claim index: the next claim starts after that position (POSITIONS in
    sql/queries.sql), so the dead entries that claimed jobs leave behind, which no
    vacuum can remove while an old snapshot exists, are never read again.

    Kept in memory, per process: the claim path writes nothing more, and a position
    that is lost (a new process) or behind (another process claimed further) only
    costs one scan from the old place. A position never passes `now() - lag_s`
    (database clock): a producer's job gets run_at = the start of its transaction and
    becomes visible at its commit, so a claim must look back over the jobs of the last
    `lag_s` in case one commits late. What a position passes anyway (a transaction that
    committed later than that, a job released or given a run_at in the past, a level
    never seen) is found by the sweep: every `sweep_every_s` a claim learns the levels
    afresh and scans each from its start. Written and read by the thread that claims.
    """

    def __init__(self, *, lag_s: float = 1.0, sweep_every_s: float = 5.0) -> None:
        self.lag = timedelta(seconds=lag_s)
        self.sweep_every_s = sweep_every_s
        self._after: dict[tuple[str, int], Position | None] = {}
        self._swept_at: dict[tuple[str, ...], float] = {}  # monotonic, per queue list
        # The levels as literals (`literals`), kept until a position moves: an idle
        # worker's look for its next due job writes them, and the claim that follows its
        # wake-up finds them written (one step less between the wake and the claim).
        self._moves = 0  # counts changes of _after
        self._literals: dict[tuple[tuple[str, ...], bool], tuple[int, dict[str, str]]] = {}

    def sweep_due(self, queues: Sequence[str]) -> bool:
        swept_at = self._swept_at.get(tuple(queues))
        return swept_at is None or time.monotonic() - swept_at >= self.sweep_every_s

    def sweep_soon(self) -> None:
        """The next claim of every queue list sweeps (jobs were put back behind us)."""
        self._swept_at.clear()

    def learn(self, queues: Sequence[str], levels: Iterable[tuple[str, int]]) -> None:
        """The levels a sweep found; priority 0 of every queue is always known (most
        jobs are there, and a queue that is empty at a sweep must not wait for the
        next one to claim its first job)."""
        found = [*levels, *((q, 0) for q in queues)]
        if len(self._after) > MAX_IDLE_LEVELS:
            # Levels are kept between sweeps (one that empties and fills again is not
            # missed until the next sweep), but not without bound: priorities are ints.
            kept = set(found)
            self._after = {level: a for level, a in self._after.items() if level in kept}
        for level in found:
            self._after.setdefault(level, None)
        self._moves += 1

    def params(self, queues: Sequence[str], *, sweep: bool) -> dict[str, list[Any]]:
        """The levels of `queues` with their positions, as claim_picks takes them; a
        sweep passes no position (every level from its start)."""
        wanted = set(queues)
        levels = [(level, after) for level, after in self._after.items() if level[0] in wanted]
        return {
            "level_queues": [queue for (queue, _), _ in levels],
            "level_priorities": [priority for (_, priority), _ in levels],
            "level_after_run_at": [None if sweep or a is None else a[0] for _, a in levels],
            "level_after_id": [None if sweep or a is None else a[1] for _, a in levels],
        }

    def single_level(self, queues: Sequence[str]) -> bool:
        """Whether one level of `queues` is known, no more (jobs_claim_one's case)."""
        wanted = set(queues)
        return sum(1 for queue, _ in self._after if queue in wanted) == 1

    def literals(self, queues: Sequence[str], *, sweep: bool) -> dict[str, str]:
        """`params` as the statements take them: array literals (arrays.py)."""
        key = (tuple(queues), sweep)
        kept = self._literals.get(key)
        if kept is not None and kept[0] == self._moves:
            return kept[1]
        levels = self.params(queues, sweep=sweep)
        literals = {
            "level_queues": text_array(levels["level_queues"]),
            "level_priorities": int_array(levels["level_priorities"]),
            "level_after_run_at": timestamptz_array(levels["level_after_run_at"]),
            "level_after_id": int_array(levels["level_after_id"]),
        }
        if len(self._literals) >= 16:  # a few queue lists a process at most
            self._literals.clear()
        self._literals[key] = (self._moves, literals)
        return literals

    def advance(
        self,
        queues: Sequence[str],
        jobs: Sequence[Job],
        *,
        db_now: datetime,
        exhausted: bool,
        paused: Iterable[str],
    ) -> None:
        """Move the positions past the jobs claimed; past every ready job when the
        claim found fewer than it asked for (`exhausted`: each level of an unpaused
        queue was scanned to its end). Never beyond `db_now - lag`, never backwards.

        `jobs` come in claim order (_jobs_in_claim_order): within a level, by (run_at,
        id), so the last job of each level is the furthest, and no comparison is made
        per job. Jobs out of that order would leave a position short of the furthest
        (one scan more next time), never past a job not claimed."""
        horizon: Position = (db_now - self.lag, -1)
        reached: dict[tuple[str, int], Position] = {}
        for job in jobs:
            if job.run_at is not None:  # always, from a claim: every claimed row has one
                reached[(job.queue, job.priority)] = (job.run_at, job.id)
        if exhausted:
            skipped = set(paused)
            for queue, priority in self._after:
                if queue in queues and queue not in skipped:
                    reached[(queue, priority)] = horizon
        for level, position in reached.items():
            capped = min(position, horizon)
            before = self._after.get(level)
            self._after[level] = capped if before is None else max(before, capped)
        self._moves += 1

    def step_back(self, jobs: Iterable[Job]) -> None:
        """These jobs were given back (released, their run_at kept): the positions of
        their levels move back to just before them, so this process's next claims and
        its idle look for the next due job see them again. A sweep alone would not do
        when they are held back by a key pause: the sweep that follows at once finds
        them paused, and a position held still by the pause stays past them, so the
        claim when the pause ends would miss them until the next sweep (the poll of an
        idle worker, 5 s at best)."""
        after = self._after
        for job in jobs:
            level = (job.queue, job.priority)
            position = after.get(level)
            if position is not None and job.run_at is not None:
                after[level] = min(position, (job.run_at, job.id - 1))
        self._moves += 1

    def claimed(self, queues: Sequence[str], sweep: bool) -> None:
        if sweep:
            self._swept_at[tuple(queues)] = time.monotonic()


@dataclass(frozen=True, slots=True)
class PruneBatch:
    """What one batch of pruning removed: how many rows, and the newest finished_at among
    them (where the next batch of the round starts; the batch's own `after` when it
    removed nothing)."""

    removed: int
    position: datetime | None


class ClaimScope(TypedDict):
    """The keyword arguments of `claim`, `claim_one`, `complete_and_claim` and `warm`
    that a worker's every claim repeats (fixed for its life), to be passed as
    `**scope`."""

    queues: Sequence[str]
    lease_ttl_s: float
    worker: str
    max_attempts: Sequence[int] | int


class JobStore:
    """The jobs table of one schema."""

    def __init__(
        self,
        schema: str = DEFAULT_SCHEMA,
        *,
        backoff: Backoff | None = None,
        positions: ClaimPositions | None = None,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> None:
        self.schema = schema
        # The limited queues (storage/limits.py): a claim that includes one of them
        # takes their lock and claims within their room; any other claims as before.
        self.limits = dict(limits or {})
        # What the last limited claim found full: queue -> monotonic time its rate frees
        # a place (None: its concurrency, freed by a completion). An idle wait leaves
        # these queues' ready jobs out (next_run_in) instead of spinning on them.
        self._held: dict[str, float | None] = {}
        # WAKE (sql/queries.sql, wake_limited): the limited queues whose idle workers a
        # failure, release or rescue (a place freed), or a snooze (a place and a start),
        # wakes. Empty without limits: those statements then notify nothing.
        self._wake_on_settle = [q for q, lim in self.limits.items() if lim.frees_on_completion]
        self._wake_on_snooze = [q for q, lim in self.limits.items() if lim.frees_on_snooze]
        self.backoff = backoff or Backoff()
        # Per store, so per process: each worker process makes its own JobStore.
        self.positions = positions or ClaimPositions()
        self._claim_cursor: psycopg.Cursor[Any] | None = None  # _claim_rows'
        self._sql = queries.statements(schema)
        self.notify_channel = notify_channel(schema)

    # -- the lease life cycle -------------------------------------------------------------

    def claim(
        self,
        conn: psycopg.Connection[Any],
        *,
        queues: Sequence[str],
        limit: int,
        lease_ttl_s: float,
        worker: str,
        max_attempts: Sequence[int] | int = 5,
    ) -> list[Job]:
        """Lease up to `limit` ready jobs of `queues` (in that order of preference),
        returned in the order they should run. `max_attempts` (one per queue, or one for
        all) applies to jobs enqueued without their own."""
        jobs, _ = self._claim_fresh(
            conn, queues, limit, lease_ttl_s, worker, max_attempts, one=False
        )
        return jobs

    def claim_one(
        self,
        conn: psycopg.Connection[Any],
        *,
        queues: Sequence[str],
        limit: int,
        lease_ttl_s: float,
        worker: str,
        max_attempts: Sequence[int] | int = 5,
    ) -> tuple[list[Job], bool]:
        """The claim of a worker just woken for a new job: (the jobs leased, whether
        there may be more to claim). For one queue without limits of which one level is
        known, at most one job, by the cheaper jobs_claim_one, and whether a ready job
        stands after it; for any other queue list, `claim` of up to `limit`, and whether
        it brought that many."""
        return self._claim_fresh(conn, queues, limit, lease_ttl_s, worker, max_attempts, one=True)

    def _claim_fresh(
        self,
        conn: psycopg.Connection[Any],
        queues_named: Sequence[str],
        limit: int,
        lease_ttl_s: float,
        worker: str,
        max_attempts: Sequence[int] | int,
        *,
        one: bool,
    ) -> tuple[list[Job], bool]:
        """`claim` and `claim_one` (`one`): a claim that writes no successes; (the jobs
        leased, whether there may be more to claim)."""
        queues = list(dict.fromkeys(queues_named))  # a queue named twice is claimed once
        params = self._claim_params(queues, limit, lease_ttl_s, worker, max_attempts)
        if limited_queues(queues, self.limits):
            jobs = self._claim_limited(conn, Completions.of(()), queues, limit, params)[1]
            return jobs, len(jobs) == limit
        sweep = self._prepare_levels(conn, queues)
        literals = self.positions.literals(queues, sweep=sweep)
        if not (one and self.positions.single_level(queues)):
            rows = self._claim_rows(conn, self._sql["jobs_claim"], {**params, **literals})
            jobs = self._claimed(queues, limit, sweep, rows)
            return jobs, len(jobs) == limit
        rows = self._claim_rows(conn, self._sql["jobs_claim_one"], {**params, **literals})
        jobs = [_job_from_row(row) for row in rows]
        more = bool(rows) and rows[0].more
        # No row, no clock: the positions stay (the next claim scans from there).
        if rows and not rows[0].keys_paused:  # KEY PAUSES, as in _claimed
            self.positions.advance(
                queues, jobs, db_now=rows[0].db_now, exhausted=not more, paused=()
            )
        self.positions.claimed(queues, sweep)
        return jobs, more

    def complete(
        self,
        conn: psycopg.Connection[Any],
        done: Iterable[tuple[Lease, str | None]] | Completions,
    ) -> set[int]:
        """End jobs `succeeded` with their JSON result text (or None), given as (lease,
        result) pairs or as Completions; returns the ids whose lease still held. One
        statement for the whole batch."""
        done = Completions.of(done)
        if not done:
            return set()
        params = _complete_params(done)
        kept = {row[0] for row in execute(conn, self._sql["jobs_complete"], params)}
        return self._with_own_earlier_completions(conn, done, params, kept)

    def complete_and_claim(
        self,
        conn: psycopg.Connection[Any],
        done: Iterable[tuple[Lease, str | None]] | Completions,
        *,
        queues: Sequence[str],
        limit: int,
        lease_ttl_s: float,
        worker: str,
        max_attempts: Sequence[int] | int = 5,
    ) -> tuple[set[int], list[Job]]:
        """`complete` a batch of successes and `claim` the next batch in one statement:
        one round trip and one commit per batch of jobs, not two of each. If it fails,
        neither happened (the successes are still to be written)."""
        done = Completions.of(done)
        if not done:
            return set(), self.claim(
                conn,
                queues=queues,
                limit=limit,
                lease_ttl_s=lease_ttl_s,
                worker=worker,
                max_attempts=max_attempts,
            )
        params = _complete_params(done)
        queues = list(dict.fromkeys(queues))
        if limited_queues(queues, self.limits):
            claim_params = self._claim_params(queues, limit, lease_ttl_s, worker, max_attempts)
            kept, claimed = self._claim_limited(conn, done, queues, limit, claim_params)
            return self._with_own_earlier_completions(conn, done, params, kept), claimed
        sweep = self._prepare_levels(conn, queues)
        rows = self._claim_rows(
            conn,
            self._sql["jobs_complete_and_claim"],
            {
                **params,
                **self._claim_params(queues, limit, lease_ttl_s, worker, max_attempts),
                **self.positions.literals(queues, sweep=sweep),
            },
        )
        kept = next(set(row.completed_ids) for row in rows if row.id is None)
        claimed = self._claimed(queues, limit, sweep, rows)
        return self._with_own_earlier_completions(conn, done, params, kept), claimed

    def _claim_limited(
        self,
        conn: psycopg.Connection[Any],
        done: Completions,
        queues: list[str],
        limit: int,
        claim_params: dict[str, Any],
    ) -> tuple[set[int], list[Job]]:
        """Complete `done` and claim, for a queue list with limited queues: one
        transaction of limits_lock, the completions (so that the claim's count no longer
        sees them running), and jobs_claim_limited (LIMITS in sql/queries.sql)."""
        limited = limited_queues(queues, self.limits)
        sweep = self._prepare_levels(conn, queues)
        with conn.transaction():
            conn.execute(self._sql["limits_lock"], {"schema_name": self.schema, "queues": limited})
            kept: set[int] = set()
            if done:
                completed = execute(conn, self._sql["jobs_complete"], _complete_params(done))
                kept = {row[0] for row in completed}
                freed = [q for q in limited if self.limits[q].frees_on_completion]
                if kept and freed:
                    conn.execute(
                        self._sql["limits_notify"],
                        {"channel": self.notify_channel, "queues": freed},
                    )
            rows = self._claim_rows(
                conn,
                self._sql["jobs_claim_limited"],
                {
                    **claim_params,
                    **claim_limit_params(limited, self.limits),
                    **self.positions.literals(queues, sweep=sweep),
                },
            )
        meta = next(row for row in rows if row.id is None)
        rate_wake_at = (
            None if meta.rate_wake_in_s is None else time.monotonic() + meta.rate_wake_in_s
        )
        self._held = {
            queue: rate_wake_at if self.limits[queue].rate is not None else None
            for queue in meta.held_queues
        }
        # A keyed queue's claims walk keys, not its levels' positions: claimed jobs of
        # some keys say nothing of the other keys' jobs before them, so its positions
        # never move (its idle look for work starts where the last sweep left it).
        keyed = [queue for queue in limited if self.limits[queue].keyed]
        claimed = self._claimed(queues, limit, sweep, rows, held=meta.held_queues, frozen=keyed)
        return kept, claimed

    def _claim_params(
        self,
        queues: list[str],
        limit: int,
        lease_ttl_s: float,
        worker: str,
        max_attempts: Sequence[int] | int,
    ) -> dict[str, Any]:
        """_claim_params with its arguments made hashable, for its cache."""
        return _claim_params(
            tuple(queues),
            limit,
            float(lease_ttl_s),
            worker,
            max_attempts if isinstance(max_attempts, int) else tuple(max_attempts),
        )

    def _prepare_levels(self, conn: psycopg.Connection[Any], queues: list[str]) -> bool:
        """Whether this claim sweeps (see ClaimPositions); if it does, the levels are
        learnt afresh first."""
        if not self.positions.sweep_due(queues):
            return False
        rows = execute(conn, self._sql["jobs_levels"], {"queues": queues}).fetchall()
        self.positions.learn(queues, [(queue, priority) for queue, priority in rows])
        return True

    def _claimed(
        self,
        queues: list[str],
        limit: int,
        sweep: bool,
        rows: Sequence[Any],
        held: Sequence[str] = (),
        frozen: Sequence[str] = (),
    ) -> list[Job]:
        """The jobs of a claim's rows, the positions moved past them. The row with no
        job is claim_meta's. `held`: queues a limit left full (their positions move
        past the jobs claimed only); `frozen`: keyed queues (theirs do not move)."""
        meta = next(row for row in rows if row.id is None)
        jobs = _jobs_in_claim_order([row for row in rows if row.id is not None])
        # While a key is paused, the claim passed over its jobs: a position moved past
        # them would miss them when the pause ends (KEY PAUSES in sql/queries.sql).
        if not meta.keys_paused:
            self.positions.advance(
                queues,
                [job for job in jobs if job.queue not in frozen] if frozen else jobs,
                db_now=meta.db_now,
                exhausted=len(jobs) < limit,
                # A queue a limit held back has ready jobs left where its claim
                # stopped: like a paused queue's, its positions do not jump ahead.
                paused=[*meta.paused_queues, *held, *frozen],
            )
        self.positions.claimed(queues, sweep)
        return jobs

    def _claim_rows(
        self, conn: psycopg.Connection[Any], query: bytes, params: dict[str, Any]
    ) -> list[Any]:
        """A claim statement's rows, as named tuples (fields: its columns). Not dicts:
        dict_row decodes every column's name and builds a dict per row on every claim;
        namedtuple_row keeps its class per set of column names. ~0.1 ms less CPU per claim
        in a loop that sleeps between claims, though not visible in the daemon's hop marks
        (bench/results/idle-latency-round2-20261125.md). In binary: the server sends a
        timestamp, an id or a token as its bytes instead of formatting it as text, and the
        worker reads it without parsing, for every claimed job; the values are the same
        (psycopg gives a timestamptz in the connection's time zone either way). On one
        cursor per connection, kept: a new one copies the connection's adapters map and
        sets up its own loaders, on every claim (0.06 ms of CPU on a woken worker's claim,
        caches cold: bench/results/idle-latency-round6-20261127.md)."""
        cursor = self._claim_cursor
        if cursor is None or cursor.connection is not conn or cursor.closed:
            cursor = self._claim_cursor = conn.cursor(row_factory=c_namedtuple_row)
        return cursor.execute(query, params, binary=True).fetchall()

    def _with_own_earlier_completions(
        self,
        conn: psycopg.Connection[Any],
        done: Completions,
        params: dict[str, Any],
        kept: set[int],
    ) -> set[int]:
        """`kept`, plus the jobs these very leases (`done`, as `params`) had completed
        before (the first write committed, its reply was lost: docs/faults.md, "Outcome
        committed, reply lost"). Rarely any are missing."""
        if len(kept) == len(done):
            return kept
        rows = execute(conn, self._sql["jobs_completed_by_leases"], params).fetchall()
        kept = kept | {row[0] for row in rows}
        # The others' leases are gone; those cancelled under them held on (HELD) while
        # the handler ran, which it no longer does.
        self.release_cancelled(
            conn,
            [Lease(i, t) for i, t in zip(done.ids, done.tokens, strict=True) if i not in kept],
        )
        return kept

    def fail(
        self,
        conn: psycopg.Connection[Any],
        lease: Lease,
        error: str,
        *,
        discard: bool = False,
    ) -> FailedAttempt | None:
        """Record a failed attempt: retry after backoff, or `dead` when attempts are
        exhausted or `discard`. None when the lease was lost."""
        return self._fail(conn, lease, clean_error(error), discard=discard, delay_s=None)

    def retry_after(
        self,
        conn: psycopg.Connection[Any],
        lease: Lease,
        delay_s: float,
        error: str | None = None,
    ) -> FailedAttempt | None:
        """Run the job again after `delay_s` (the start stays charged: `dead` if it was
        the last attempt). None when the lease was lost."""
        if error is None:
            error = f"retry requested in {delay_s:g}s"
        return self._fail(conn, lease, clean_error(error), discard=False, delay_s=delay_s)

    def snooze(
        self,
        conn: psycopg.Connection[Any],
        lease: Lease,
        *,
        delay_s: float | None,
        until: datetime | None = None,
        pause_key: bool = False,
    ) -> FailedAttempt | None:
        """Put the job back to `queued` uncharged (the start is given back), to run at
        `until` or `delay_s` from now; `pause_key`: its key (if it has one) is paused
        until then too, in the same fenced statement. None when the lease was lost."""
        params = {
            "id": lease.job_id,
            "token": lease.token,
            "delay_s": float(delay_s or 0.0),
            "until": until,
            "pause_key": pause_key,
            "channel": cancel_channel(self.schema),  # KEY PAUSE NOTICE in queries.sql
            "wake_queues": self._wake_on_snooze,
        }
        row = execute(conn, self._sql["jobs_snooze"], params).fetchone()
        if row is None:
            self.release_cancelled(conn, [lease])
            return None
        return FailedAttempt(*row[:4])

    def release(self, conn: psycopg.Connection[Any], leases: Iterable[Lease]) -> set[int]:
        """Give jobs back to `queued` at once without charging the start."""
        # They keep their run_at, behind the positions claims have passed: this
        # process's next claim sweeps (others find them at their own next sweep).
        self.positions.sweep_soon()
        leases = list(leases)
        released = self._by_leases(conn, "jobs_release", leases, wake_queues=self._wake_on_settle)
        if len(released) < len(leases):
            self.release_cancelled(
                conn, [lease for lease in leases if lease.job_id not in released]
            )
        return released

    def release_cancelled(self, conn: psycopg.Connection[Any], leases: Iterable[Lease]) -> set[int]:
        """The handlers that ran under these leases have ended: the rows cancelled
        under them give their lease up (and their place under a concurrency limit);
        they stay cancelled. Returns their ids. Called when a fenced write missed: a
        lease that is not on a cancelled row (rescued, already released) is left alone."""
        return self._by_leases(conn, "jobs_release_cancelled", leases)

    def renew(
        self, conn: psycopg.Connection[Any], leases: Iterable[Lease], lease_ttl_s: float
    ) -> set[int]:
        """Extend leases to now() + lease_ttl_s; returns the ids whose lease held."""
        return self._by_leases(conn, "jobs_renew", leases, lease_ttl_s=float(lease_ttl_s))

    def limit_lock_wait(self, conn: psycopg.Connection[Any], ms: int) -> None:
        """Within the transaction open on `conn`: a statement that would wait on a lock
        longer than `ms` fails (LockNotAvailable) instead."""
        execute(conn, self._sql["lock_wait_limit"], {"ms": str(int(ms))})

    def unrenewed_among(
        self, conn: psycopg.Connection[Any], leases: Iterable[Lease]
    ) -> tuple[set[int], set[int]]:
        """Of `leases`, which a renewal did not renew: (the ids still held, their row
        locked by another transaction when the renewal came; the ids of the jobs
        cancelled while held under them: see pgworkerd/housekeeping/cancelling.py)."""
        leases = list(leases)
        held: set[int] = set()
        cancelled: set[int] = set()
        if not leases:
            return held, cancelled
        rows = execute(conn, self._sql["jobs_unrenewed_among"], _lease_params(leases))
        for job_id, state in rows:
            (held if state == "running" else cancelled).add(job_id)
        return held, cancelled

    def rescue(
        self,
        conn: psycopg.Connection[Any],
        *,
        limit: int = 1000,
        spared: Iterable[Lease] = (),
    ) -> list[FailedAttempt]:
        """Retry or dead-letter up to `limit` jobs whose lease expired, but those held
        under the `spared` leases, and release the leases, expired too, of up to `limit`
        jobs cancelled while they ran (their holder never said the handler ended):
        those stay `cancelled`."""
        params = {
            "limit": limit,
            "spared": [lease.token for lease in spared],
            "wake_queues": self._wake_on_settle,
            **self._backoff_params(),
        }
        rows = conn.execute(self._sql["jobs_rescue"], params).fetchall()
        released = conn.execute(self._sql["jobs_rescue_cancelled"], {"limit": limit}).fetchall()
        return [FailedAttempt(*row[:4]) for row in [*rows, *released]]

    def next_run_in(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> float | None:
        """Seconds until the earliest queued job of `queues` may run (<= 0: now), or
        None when they hold no queued job."""
        queues = list(dict.fromkeys(queues))
        # As a claim would look, sweep included, but without counting as one: only a
        # claim's sweep takes the jobs that were behind the positions.
        sweep = self._prepare_levels(conn, queues)
        # The queues the last claim found full are left out: their ready jobs cannot be
        # claimed until a place frees (a completion's NOTIFY wakes the worker, or the
        # poll), or, for a rate, until the soonest start leaves the window.
        held = self._held
        open_queues = [queue for queue in queues if queue not in held]
        # The levels as literals, as the claim takes them: written here, before the worker
        # sleeps, they are found written by the claim after its wake-up.
        params = {"queues": open_queues, **self.positions.literals(open_queues, sweep=sweep)}
        row = conn.execute(self._sql["jobs_next_run_at"], params).fetchone()
        next_in = None if row is None else row[0]
        rate_wakes = [at for at in held.values() if at is not None]
        if rate_wakes:
            rate_in = min(rate_wakes) - time.monotonic()
            next_in = rate_in if next_in is None else min(next_in, rate_in)
        return next_in

    def warm(
        self, conn: psycopg.Connection[Any], *, limit: int, **scope: Unpack[ClaimScope]
    ) -> None:
        """Prepare on `conn` (server-side, as psycopg prepares a statement at its sixth
        run) the statements of a worker's claims, completions and idle looks, before it
        runs any of them: otherwise each of its first five runs of each statement is
        parsed and planned, on the path from an enqueue to its handler (the first jobs
        after a start or a reconnect: bench/results/idle-tail-round13-20261128.md).

        Each is run once with `prepare=True` and the parameters of the worker's own runs,
        of the same types (psycopg knows a prepared statement by its text and its
        parameters' types, and the claims go in binary as `_claim_rows` sends them), but
        with no level to claim from and no job to complete: they match no row, lock no
        row, write nothing (no transaction id, no WAL), and count as no claim (no
        position moves, nothing is announced). The reads (the levels, the next run) read
        what they would read. The plans are the generic ones the worker's connection
        asks for (plan_cache_mode), made without looking at these values, and kept
        until the table's statistics change: a connection that warms them must not
        allow seq scans (worker.connection.WORKER_OPTIONS), or a plan made on an empty
        table updates the rows by id by a seq scan of jobs. A queue list
        with limited queues claims by a transaction of locks (jobs_claim_limited): its
        claims are not warmed, its completions and looks are."""
        queues = list(dict.fromkeys(scope["queues"]))

        def prepare(name: str, params: Mapping[str, Any], *, binary: bool = False) -> None:
            conn.cursor().execute(self._sql[name], params, prepare=True, binary=binary)

        no_levels = ClaimPositions().literals(queues, sweep=True)  # it knows no level
        no_successes = _complete_params(Completions.of(()))
        prepare("jobs_levels", {"queues": queues})
        prepare("jobs_next_run_at", {"queues": queues, **no_levels})
        prepare("jobs_complete", no_successes)
        if limited_queues(queues, self.limits):
            return
        claim = {
            **self._claim_params(
                queues, limit, scope["lease_ttl_s"], scope["worker"], scope["max_attempts"]
            ),
            **no_levels,
        }
        prepare("jobs_claim_one", claim, binary=True)
        prepare("jobs_claim", claim, binary=True)
        prepare("jobs_complete_and_claim", {**no_successes, **claim}, binary=True)

    # -- operator actions -----------------------------------------------------------------

    def cancel(self, conn: psycopg.Connection[Any], ids: Sequence[int]) -> list[int]:
        """Cancel queued or running jobs (their holders notified); returns their ids."""
        params = {"ids": list(ids), "channel": cancel_channel(self.schema)}
        rows = execute(conn, self._sql["jobs_cancel"], params).fetchall()
        return sorted(row[0] for row in rows)

    def retry_finished(
        self,
        conn: psycopg.Connection[Any],
        *,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
    ) -> list[int]:
        """Queue dead jobs again (all of them, or `ids`, which may also name cancelled
        jobs), optionally only of `queue`; returns the ids queued."""
        states = ["dead"] if ids is None else ["dead", "cancelled"]
        params = {"states": states, "ids": list(ids) if ids is not None else None, "queue": queue}
        rows = execute(conn, self._sql["jobs_retry_finished"], params).fetchall()
        return sorted(row[0] for row in rows)

    def ready_by_queue(
        self, conn: psycopg.Connection[Any], queues: Sequence[str]
    ) -> list[tuple[str, int, float | None]]:
        """(queue, jobs ready now, age of the oldest in seconds) for each of `queues`."""
        rows = conn.execute(self._sql["queues_ready"], {"queues": list(queues)}).fetchall()
        return [(str(name), int(depth), age) for name, depth, age in rows]

    def waiting_by_queue(
        self, conn: psycopg.Connection[Any], queues: Sequence[str]
    ) -> list[tuple[str, int]]:
        """(queue, jobs waiting for the jobs they run after) for each of `queues`."""
        rows = conn.execute(self._sql["queues_waiting"], {"queues": list(queues)}).fetchall()
        return [(str(name), int(count)) for name, count in rows]

    def prune_batch(
        self,
        conn: psycopg.Connection[Any],
        *,
        state: str,
        retention_s: float,
        limit: int,
        archive: bool,
        after: datetime | None = None,
    ) -> PruneBatch:
        """Deletes (or moves to jobs_archive) up to `limit` jobs of a final `state` that
        finished more than `retention_s` ago, from `after` on (a finished_at: the
        previous batch's position; None from the oldest)."""
        name = "jobs_archive_move" if archive else "jobs_prune"
        params = {"state": state, "retention_s": retention_s, "limit": limit, "after": after}
        row = conn.execute(self._sql[name], params).fetchone()
        assert row is not None  # an aggregate: always one row
        removed, position = row
        return PruneBatch(removed, position if position is not None else after)

    def get(self, conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any] | None:
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["jobs_get"], {"id": job_id}).fetchone()

    # -- daemons ----------------------------------------------------------------------------

    def dependencies(self, conn: psycopg.Connection[Any], job_id: int) -> list[dict[str, Any]]:
        """The jobs `job_id` was enqueued after ('dependency') and those enqueued after
        it ('dependent'), each with its id, state (None: pruned) and kind."""
        cursor = conn.cursor(row_factory=dict_row)
        return cursor.execute(self._sql["jobs_dependencies"], {"id": job_id}).fetchall()

    def heartbeat(
        self,
        conn: psycopg.Connection[Any],
        *,
        daemon_id: str,
        hostname: str,
        pid: int,
        info: str = "{}",
    ) -> None:
        conn.execute(
            self._sql["daemons_heartbeat"],
            {"id": daemon_id, "hostname": hostname, "pid": pid, "info": info},
        )

    def remove_daemon(self, conn: psycopg.Connection[Any], daemon_id: str) -> None:
        conn.execute(self._sql["daemons_remove"], {"id": daemon_id})

    def prune_stale_daemons(self, conn: psycopg.Connection[Any], stale_after_s: float) -> int:
        return conn.execute(
            self._sql["daemons_prune_stale"], {"stale_after_s": float(stale_after_s)}
        ).rowcount

    # -- internals ------------------------------------------------------------------------

    def _fail(
        self,
        conn: psycopg.Connection[Any],
        lease: Lease,
        error: str,
        *,
        discard: bool,
        delay_s: float | None,
    ) -> FailedAttempt | None:
        params = {
            "id": lease.job_id,
            "token": lease.token,
            "error": error,
            "discard": discard,
            "delay_s": delay_s,
            "wake_queues": self._wake_on_settle,
            **self._backoff_params(),
        }
        row = execute(conn, self._sql["jobs_fail"], params).fetchone()
        if row is None:
            self.release_cancelled(conn, [lease])
            return None
        return FailedAttempt(*row[:4])

    def _by_leases(
        self, conn: psycopg.Connection[Any], statement: str, leases: Iterable[Lease], **extra: Any
    ) -> set[int]:
        leases = list(leases)
        if not leases:
            return set()
        params = {**_lease_params(leases), **extra}
        return {row[0] for row in execute(conn, self._sql[statement], params)}

    def _backoff_params(self) -> dict[str, float]:
        return {"backoff_base_s": self.backoff.base_s, "backoff_max_s": self.backoff.max_s}


def _lease_params(leases: list[Lease]) -> dict[str, list[Any]]:
    """The leases as the statements that take leases read them: `ids` and `tokens`, in
    step."""
    return {
        "ids": [lease.job_id for lease in leases],
        "tokens": [lease.token for lease in leases],
    }


# Kept: a worker asks with the same arguments every time, and the literals need not be
# written again (the dict is only ever read: the statements' parameters are spread from it).
@functools.lru_cache(maxsize=16)
def _claim_params(
    queues: tuple[str, ...],
    limit: int,
    lease_ttl_s: float,
    worker: str,
    max_attempts: tuple[int, ...] | int,
) -> dict[str, Any]:
    """The claim's parameters but its levels; the arrays as literals (arrays.py)."""
    per_queue = (max_attempts,) * len(queues) if isinstance(max_attempts, int) else max_attempts
    return {
        "queues": text_array(queues),
        "queue_max_attempts": int_array(per_queue),
        "limit": limit,
        "lease_ttl_s": float(lease_ttl_s),
        "worker": worker,
    }


def _complete_params(done: Completions) -> dict[str, Any]:
    """The completion's parameters, the arrays as literals (arrays.py). Results that are
    all None (handlers that return nothing) go as one NULL: the statement then looks up
    no row's place in the id list (complete_update's subscript of a NULL array is NULL
    without evaluating its subscript)."""
    results = done.results
    return {
        "ids": int_array(done.ids),
        "tokens": uuid_array(done.tokens),
        "results": None if results.count(None) == len(results) else text_array(results),
    }


_by_run_at_and_id = operator.attrgetter("run_at", "id")
_by_priority = operator.attrgetter("priority")
_by_queue_order = operator.attrgetter("queue_order")


def _jobs_in_claim_order(rows: Sequence[Any]) -> list[Job]:
    """The jobs of a claim's rows by queue (as listed), priority (highest first), run_at
    and id: three stable sorts by keys made in C (attrgetter), least significant first
    (a stable sort with reverse=True keeps the order of equal keys), not one sort with a
    Python lambda called per job."""
    jobs = [_job_from_row(row) for row in rows]
    jobs.sort(key=_by_run_at_and_id)
    jobs.sort(key=_by_priority, reverse=True)
    jobs.sort(key=_by_queue_order)
    return jobs


def _slot_setter(name: str) -> Callable[[Job, Any], None]:
    """The setter of Job's slot `name` (its member descriptor's `__set__`, a C call)."""
    setter: Callable[[Job, Any], None] = getattr(Job, name).__set__
    return setter


# A claimed Job is made by setting its slots straight: the frozen dataclass's __init__
# goes through object.__setattr__ for each of its fifteen fields, twice the cost, on
# every claimed job (bench/results/worker-round14-20261128.md). The Job is the same
# (frozen to a handler all the same: only these setters skip its __setattr__).
_new_job = functools.partial(object.__new__, Job)
_set_id, _set_kind, _set_queue, _set_payload, _set_attempt = map(
    _slot_setter, ("id", "kind", "queue", "payload", "attempt")
)
_set_max_attempts, _set_priority, _set_max_runtime_s, _set_run_at, _set_created_at = map(
    _slot_setter, ("max_attempts", "priority", "max_runtime_s", "run_at", "created_at")
)
_set_key, _set_lease_token, _set_queue_order, _set_trace_context, _set_after = map(
    _slot_setter, ("key", "lease_token", "queue_order", "trace_context", "after")
)


def _job_from_row(row: Any) -> Job:
    """A claimed job of a claim's row (claim_update's RETURNING, a named tuple), every
    one of Job's fields set (tests/unit/test_job_rows.py pins each to its column, and
    fails on a field left unset)."""
    job = _new_job()
    _set_id(job, row.id)
    _set_kind(job, row.kind)
    _set_queue(job, row.queue)
    _set_payload(job, json_loads(row.payload_json))  # its text (claim_update in queries.sql)
    _set_attempt(job, row.attempt)
    _set_max_attempts(job, row.max_attempts)
    _set_priority(job, row.priority)
    _set_max_runtime_s(job, row.max_runtime_s)
    _set_run_at(job, row.run_at)
    _set_created_at(job, row.created_at)
    _set_key(job, row.key)
    _set_lease_token(job, row.lease_token)
    _set_queue_order(job, row.queue_ord)
    _set_trace_context(job, row.trace_context)
    _set_after(job, tuple(row.after_ids or ()))
    return job
