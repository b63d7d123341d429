"""The supervisor's ledger of one child's jobs: which it holds, in which state, and
what to write for each if the child dies. Pure: no I/O, times come from the caller
(host's CLOCK_MONOTONIC), so every transition is unit-tested with a fake clock.

A job enters the ledger when the child says it claimed it, and leaves it when the
child says its outcome is written (`done`) or that it gave it back (`released`: also a
job GIVEN_UP by a cancel, whose cancelled row's lease the child released as it skipped
it), or when the supervisor releases it itself (also a job GIVEN_UP by a cancel that
the child says `skipping` for: it will not start it, and its cancelled row's lease is
released by the supervisor at once, not by the child when it comes to it). In between:

    CLAIMED --start posted--> RUNNING --returned--> FINISHING --done--> (gone)
       |                         |   |                    ^
       |  renewal lost it        |   | cancelled          | returned
       v                         v   v                    |
    GIVEN_UP (told to skip)    LOST  CANCELLING ----------+
                                     (JobCancelled asked for; killed after the grace)
    LOST and CANCELLING: the lease is no longer ours to renew. A CANCELLING job's
    cancelled row still holds it (HELD in storage/sql/queries.sql: its place under a
    concurrency limit stays taken while the handler runs), so if its child dies it is
    settled all the same: the settlement releases the lease and the job stays
    cancelled. Unrenewed, that lease lapses: the child is killed before it does
    (limits.check_lapses), so the place is never freed while the handler runs.

A child runs several jobs at once when it has several execution slots: the ledger
holds any number of RUNNING jobs, each with its own start, deadline and blame.

A claim is kept as its message's rows (`_Batch`); a job gets its own `LedgerJob` only
when something asks about it: its start seen on the board, a state change no claim
order implies (a `finishing` of a job not seen started, a skip, a kill), or any reader
of `jobs` (renewals, settlements, drain, status: they all see the same records as if
every job had one from its claim). Until then a job of a batch is CLAIMED, or, once a
later start passed it (`_passed`), FINISHING: a no-op job of a busy child is claimed,
passed and done without an object of its own (bench/results/supervisor-round14-20261128.md).
"""

from __future__ import annotations

import math
import operator
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum

from pgworkerd.housekeeping import Settlement
from pgworkerd.ipc import Claimed, StartRecord
from pgworkerd.ipc.messages import ClaimedRow
from pgworkerd.job import Lease


class JobState(Enum):
    CLAIMED = "claimed"  # leased to the child, not started: released uncharged if it ends
    RUNNING = "running"  # its handler runs
    FINISHING = "finishing"  # its handler returned: only its fenced outcome write is left
    GIVEN_UP = "given_up"  # lease lost before it started: the child was told to skip it
    LOST = "lost"  # lease lost while it ran: its child is killed; never settled by us
    CANCELLING = "cancelling"  # cancelled while it ran: JobCancelled asked for in it
    # (its cancelled row holds the lease until settled: the handler's end, or its kill)


class KillReason(Enum):
    """Why the supervisor killed a child: decides how its jobs are settled."""

    TIMEOUT = "timeout"  # a job passed its max runtime: that job is charged
    SHUTDOWN = "shutdown"  # drain timed out, or QUIT: everything released uncharged
    LEASE_LOST = "lease_lost"  # a running job is no longer ours: that job is not touched
    UNFENCED = "unfenced"  # renewals failed: its running jobs cannot go on unfenced
    CANCELLED = "cancelled"  # a cancelled job outlived its grace: the others released


SOFT_TIMEOUT_GRACE_S = 3.0  # from the soft timeout (JobTimeout) to SIGKILL
CANCEL_GRACE_S = 3.0  # from JobCancelled to SIGKILL

# States whose lease the supervisor renews and must settle if the child dies.
HELD = frozenset({JobState.CLAIMED, JobState.RUNNING, JobState.FINISHING})
# States of a job whose handler runs.
_IN_HANDLER = (JobState.RUNNING, JobState.CANCELLING)
# States a `finishing` moves to FINISHING: not started yet (started and returned
# unseen), or in its handler.
_UNFINISHED = (JobState.CLAIMED, *_IN_HANDLER)
# Kills for the sake of named jobs: the child's other jobs are not to blame.
# UNFENCED included: a renewal that answered may leave one job's lease unrenewed (its
# row locked by another transaction) while the others of its process were renewed.
_FOR_ONE_JOB = frozenset(
    {KillReason.TIMEOUT, KillReason.LEASE_LOST, KillReason.CANCELLED, KillReason.UNFENCED}
)


@dataclass(slots=True)
class LedgerJob:
    id: int
    # The lease token as the child sent it (text): made a UUID only when the lease is
    # asked for (a renewal, a settlement, a skip), which a short job never sees.
    token: str
    kind: str
    queue: str
    max_runtime_s: float  # resolved: job, else queue, else defaults
    number: int  # its place among the child's claims: started in this order
    # When its lease was last known good (sent at claim, or a renewal sent then that
    # succeeded): by the database's clock it expires no earlier than this + lease_ttl.
    renewed_at: float
    state: JobState = JobState.CLAIMED
    started_at: float | None = None  # None: not seen started
    slot: int | None = None  # the child's execution slot running it
    soft_timeout_at: float | None = None  # when JobTimeout was asked for
    cancelled_at: float | None = None  # when JobCancelled was asked for
    _lease: Lease | None = None  # `lease`, once asked for

    @property
    def lease(self) -> Lease:
        lease = self._lease
        if lease is None:
            lease = self._lease = Lease(self.id, uuid.UUID(self.token))
        return lease

    def deadline(self) -> float | None:
        """When its max runtime ends, for a job whose handler runs."""
        if self.state is not JobState.RUNNING or self.started_at is None:
            return None
        return self.started_at + self.max_runtime_s


@dataclass(frozen=True, slots=True)
class RenewalVerdict:
    """What a renewal that answered says about the jobs it did not find."""

    lost_running: list[LedgerJob]  # their child must be killed (LEASE_LOST)
    given_up: list[LedgerJob]  # unstarted: the child must be told to skip them
    cancelled: list[LedgerJob]  # running, cancelled: JobCancelled must be asked for


@dataclass(frozen=True, slots=True)
class Moments:
    """What the supervisor's loop asks of a ledger on every turn, computed once per
    change of the ledger (a busy child holds a claim's worth of jobs)."""

    held: bool  # any job whose lease we renew
    earliest_renewal: float | None  # of the jobs that need us if their lease lapses
    next_runtime: float | None  # the next runtime deadline, or end of a grace (a
    # timeout's or a cancel's)


_ID = operator.itemgetter(0)
_NUMBER = operator.attrgetter("number")
Labelled = tuple[str, str]  # a job's (queue, kind), as the metrics count it


@dataclass(slots=True)
class _Batch:
    """One `claimed` message's jobs, numbered first, first + 1, ...: those of its jobs
    still in the ledger's `_unmade` have no LedgerJob yet."""

    first: int
    rows: tuple[ClaimedRow, ...]
    ids: tuple[int, ...]
    at: float  # the claim's time: its jobs' renewed_at until a renewal
    runtime_for: Callable[[str, float | None], float]  # the config of the claim's time

    def unmade(self, unmade: dict[int, int], start: int = 0) -> bool:
        """Whether a job of it, from index `start` on, has no record yet: looked for
        from the last (a batch's last jobs leave the ledger last: one look, mostly)."""
        ids, first = self.ids, self.first
        for index in range(len(ids) - 1, start - 1, -1):
            if unmade.get(ids[index]) == first + index:
                return True
        return False


@dataclass
class ChildLedger:
    _jobs: dict[int, LedgerJob] = field(default_factory=dict)  # the made records, by id
    claimed_through: int = 0  # the highest claim number announced so far
    starts_seen: int = -1  # the start board's counter last acted on in full
    blamed: set[int] = field(default_factory=set)  # ids of the jobs a kill is for
    _fresh: list[LedgerJob] = field(default_factory=list)  # started: for the metrics
    # Spans [lo, hi) of claim numbers a later start passed: their jobs without a record
    # were started there (for the metrics too).
    _fresh_spans: list[tuple[int, int]] = field(default_factory=list)
    _by_number: dict[int, LedgerJob] = field(default_factory=dict)  # by claim number
    _in_slot: dict[int, LedgerJob] = field(default_factory=dict)  # last seen start a slot
    _next_start: int = 1  # claim numbers below it were all seen started or skipped
    _moments: Moments | None = None  # None: to be computed again
    _batches: list[_Batch] = field(default_factory=list)  # in claim order
    _unmade: dict[int, int] = field(default_factory=dict)  # id -> number: no record yet
    # (lo, hi, started_at): the jobs numbered lo..hi-1 without a record were passed by
    # a start at started_at (their started_at when a record is made).
    _passes: list[tuple[int, int, float]] = field(default_factory=list)
    # The first claim number kept as a batch since every job last had a record: the
    # records from there on are put in claim order when all are made.
    _reorder_from: float = math.inf

    # -- the records ----------------------------------------------------------------------

    @property
    def jobs(self) -> dict[int, LedgerJob]:
        """Every job held, by id, each with its record (made now for those without)."""
        self._make_all()
        return self._jobs

    @property
    def fresh_starts(self) -> list[LedgerJob]:
        """The jobs seen or inferred started since the last take_started (records)."""
        self._make_fresh()
        return self._fresh

    def _make_fresh(self) -> None:
        """Records for the jobs of the spans still to be counted, in `_fresh`."""
        for lo, hi in self._fresh_spans:
            for number in range(lo, hi):
                self._make(number)  # appends itself to _fresh: inside a fresh span
        self._fresh_spans.clear()

    def take_started(self) -> Iterator[Labelled]:
        """The (queue, kind) of each job started since the last take, and forget them:
        iterate at once (what a span names is read from the jobs still without a
        record), or not at all."""
        fresh, spans = self._fresh, self._fresh_spans
        if not fresh and not spans:
            return iter(())
        self._fresh, self._fresh_spans = [], []
        return self._started_labels(fresh, spans)

    def _started_labels(
        self, fresh: list[LedgerJob], spans: list[tuple[int, int]]
    ) -> Iterator[Labelled]:
        for job in fresh:
            yield job.queue, job.kind
        for lo, hi in spans:
            for number in range(lo, hi):
                found = self._unmade_row(number)
                if found is not None:
                    _, row = found
                    yield row[3], row[2]

    def labels(self, job_id: int) -> Labelled | None:
        """The (queue, kind) of a job held, None if not held; makes no record."""
        job = self._jobs.get(job_id)
        if job is not None:
            return job.queue, job.kind
        number = self._unmade.get(job_id)
        found = None if number is None else self._unmade_row(number)
        return None if found is None else (found[1][3], found[1][2])

    def _unmade_row(self, number: int) -> tuple[_Batch, ClaimedRow] | None:
        """The batch and row of job `number` if it is held without a record."""
        for batch in self._batches:
            index = number - batch.first
            if 0 <= index < len(batch.ids):
                row = batch.rows[index]
                return (batch, row) if self._unmade.get(row[0]) == number else None
        return None

    def _make(self, number: int) -> LedgerJob | None:
        """Make the record of job `number` if it has none yet (None: it is not held
        without one): CLAIMED, or FINISHING if a later start passed it."""
        found = self._unmade_row(number)
        if found is None:
            return None
        batch, (job_id, token, kind, queue, max_runtime_s) = found
        del self._unmade[job_id]
        job = LedgerJob(
            job_id, token, kind, queue, batch.runtime_for(queue, max_runtime_s), number, batch.at
        )
        if number < self._next_start:
            job.state, job.started_at = JobState.FINISHING, self._passed_at(number)
            if any(lo <= number < hi for lo, hi in self._fresh_spans):
                self._fresh.append(job)  # its start is still to be counted
        self._jobs[job_id] = self._by_number[number] = job
        return job

    def _passed_at(self, number: int) -> float | None:
        for lo, hi, started_at in reversed(self._passes):
            if lo <= number < hi:
                return started_at
        return None

    def _make_all(self) -> None:
        """Give every job a record, in claim order as if each had one from its claim
        (readers walk `jobs`; a record made early, for a start seen, is put back in
        its place)."""
        start = self._reorder_from
        if start == math.inf:
            return
        self._moments = None
        for batch in self._batches:
            for number in range(batch.first, batch.first + len(batch.ids)):
                self._make(number)  # nothing for a job with a record or gone
        jobs = self._jobs
        made = sorted(
            (job for n, job in self._by_number.items() if n >= start and jobs.get(job.id) is job),
            key=_NUMBER,
        )
        for job in made:
            del jobs[job.id]
        for job in made:
            jobs[job.id] = job
        self._batches.clear()
        self._passes.clear()
        self._reorder_from = math.inf

    # -- what the child said --------------------------------------------------------------

    def claimed(self, message: Claimed, runtime_for: Callable[[str, float | None], float]) -> None:
        # The lease runs from the claim (`at`), not from our reading of it.
        rows, first = message.jobs, message.first
        ids = tuple(map(_ID, rows))
        fresh = self._unmade.keys().isdisjoint(ids) and self._jobs.keys().isdisjoint(ids)
        if ids and fresh:
            # Kept as it came: no record a job until one is asked for (module doc).
            self._unmade.update(zip(ids, range(first, first + len(ids)), strict=True))
            self._batches.append(_Batch(first, rows, ids, message.at, runtime_for))
            self._reorder_from = min(self._reorder_from, first)
        elif ids:
            # A job claimed anew while still held (another lease): one record each, at
            # once, so the new one replaces the old as it always has.
            self._make_all()
            self._enter(message, runtime_for)
        last = first + len(rows) - 1
        self.claimed_through = max(self.claimed_through, last)
        self._moments = None

    def _enter(self, message: Claimed, runtime_for: Callable[[str, float | None], float]) -> None:
        at = message.at
        jobs, by_number = self._jobs, self._by_number
        runtimes: dict[str, float] = {}  # by queue, for the jobs that set none themselves
        for number, (job_id, token, kind, queue, max_runtime_s) in enumerate(
            message.jobs, start=message.first
        ):
            if max_runtime_s is None:
                runtime = runtimes.get(queue)
                if runtime is None:
                    runtime = runtimes[queue] = runtime_for(queue, None)
            else:
                runtime = runtime_for(queue, max_runtime_s)
            entry = LedgerJob(job_id, token, kind, queue, runtime, number, at)
            jobs[job_id] = by_number[number] = entry

    def observe_starts(self, records: Iterable[StartRecord]) -> tuple[list[LedgerJob], bool]:
        """Take in the start board's records. Returns the jobs found started although
        their lease is gone (LOST: their child must be killed; CANCELLING: JobCancelled
        must be asked for), and whether every record was understood (False: one names
        a claim whose message is still unread)."""
        forbidden: list[LedgerJob] = []
        complete = True
        # In claim order: a job's start says every job claimed before it has started.
        for record in sorted(records, key=lambda r: r.number):
            job = self._by_number.get(record.number) or self._make(record.number)
            if job is None:
                # Above what we know: its `claimed` is still unread; look again later.
                # At or below: settled already.
                complete = complete and record.number <= self.claimed_through
                continue
            previous = self._in_slot.get(record.slot)
            if previous is job:
                continue  # seen already
            self._moments = None
            if previous is not None and previous.state in _IN_HANDLER:
                previous.state = JobState.FINISHING  # its slot started another job since
            self._in_slot[record.slot] = job
            if job.state is JobState.CLAIMED:
                self._fresh.append(job)
                job.state, job.started_at, job.slot = (
                    JobState.RUNNING,
                    record.started_at,
                    record.slot,
                )
            elif job.state is JobState.GIVEN_UP and job.cancelled_at is not None:
                # Cancelled as it started: JobCancelled for it, its grace from now on.
                job.state, job.started_at, job.slot = (
                    JobState.CANCELLING,
                    record.started_at,
                    record.slot,
                )
                job.cancelled_at = max(job.cancelled_at, record.started_at)
                forbidden.append(job)
            elif job.state is JobState.GIVEN_UP:
                job.state = JobState.LOST
                forbidden.append(job)
            self._passed(job.number, record.started_at)
        return forbidden, complete

    def _passed(self, number: int, started_at: float) -> None:
        """Job `number` started: those claimed before it and still unstarted were
        started, and returned, before we looked (their records were overwritten)."""
        lo = self._next_start
        if lo < number:
            # The records among them (few: starts seen, skips), one by one; the rest,
            # jobs of a batch without a record, as one span: FINISHING from here on.
            by_number = self._by_number
            # Whichever walk is shorter: the numbers passed, or the records held.
            if number - lo <= len(by_number):
                records = [by_number.get(n) for n in range(lo, number)]
            else:
                records = [job for n, job in by_number.items() if lo <= n < number]
            for earlier in sorted((j for j in records if j is not None), key=_NUMBER):
                if earlier.state is JobState.CLAIMED:
                    self._fresh.append(earlier)
                    earlier.state, earlier.started_at = JobState.FINISHING, started_at
            if self._batches:
                self._passes.append((lo, number, started_at))
                self._fresh_spans.append((lo, number))
        self._next_start = max(lo, number + 1)

    def finishing(self, ids: Iterable[int]) -> None:
        unmade, next_start, jobs = self._unmade, self._next_start, self._jobs
        for job_id in ids:
            number = unmade.get(job_id)
            if number is not None:
                if number < next_start:
                    continue  # passed by a later start: FINISHING already, no record
                job = self._make(number)  # not seen started: a record, to change
            else:
                job = jobs.get(job_id)
            if job is not None and job.state in _UNFINISHED:
                if job.state is JobState.CLAIMED:
                    self._fresh.append(job)  # started and returned unseen
                job.state = JobState.FINISHING
                self._moments = None

    def done(self, ids: Iterable[int]) -> None:
        """Their outcomes are written (or found fenced off): nothing left to do."""
        if self._fresh_spans:  # not taken yet (the supervisor takes them at once)
            self._make_fresh()
        unmade, jobs, by_number = self._unmade, self._jobs, self._by_number
        for job_id in ids:
            if unmade.pop(job_id, None) is not None:
                continue  # no record: its batch forgets it with it (_drop_batches)
            # _forget's body, inlined: this runs for every job with a record.
            job = jobs.pop(job_id, None)
            if job is not None and by_number.get(job.number) is job:
                del by_number[job.number]
        self._drop_batches()
        self._moments = None

    def _drop_batches(self) -> None:
        """Forget the batches (and passes) whose every job has a record or is gone."""
        batches = self._batches
        if not self._unmade:  # a one-slot child's `done` of its batch: all gone
            batches.clear()
            self._passes.clear()
            return
        if not batches or batches[0].unmade(self._unmade):
            return
        while batches and not batches[0].unmade(self._unmade):
            del batches[0]
        # A pass below every batch left names no job without a record.
        first = batches[0].first if batches else math.inf
        self._passes = [p for p in self._passes if p[1] > first]

    released = done  # given back by the child: the database has them queued again

    def skipping(self, ids: Iterable[int]) -> list[LedgerJob]:
        """The child says it will not start these (it read their skips, or skipped
        them): those given up are returned, their leases for the caller to release
        uncharged, and forgotten. A cancelled row holds its lease (HELD) until then; a
        job given up as its lease was lapsing is still `running` under it, unless a
        rescue came first (the release, fenced by the token, then finds nothing)."""
        skipped = []
        for job_id in ids:
            job = self._jobs.get(job_id)  # a job given up has its record
            if job is not None and job.state is JobState.GIVEN_UP:
                skipped.append(job)
                self._forget(job_id)
        return skipped

    def release_unstarted(self) -> list[LedgerJob]:
        """The child will start nothing more: its unstarted jobs are ours to give back."""
        unstarted = self.in_state(JobState.CLAIMED)
        for job in unstarted:
            self._forget(job.id)
        return unstarted

    def _forget(self, job_id: int) -> None:
        job = self.jobs.pop(job_id, None)
        if job is not None:
            if self._by_number.get(job.number) is job:
                del self._by_number[job.number]
            self._moments = None

    # -- what the supervisor learnt -------------------------------------------------------

    def renewal(
        self,
        sent: Collection[Lease],
        renewed: Collection[int],
        sent_at: float,
        cancelled: Collection[int] = (),
        locked: Collection[int] = (),
    ) -> RenewalVerdict:
        """A renewal of the `sent` leases, sent at `sent_at`, answered with the ids of
        the `renewed` ones (and, of the others, those `cancelled` under our lease, and
        those still ours but `locked`: skipped, their lease keeps its last renewal and
        lapses from it, limits.check_lapses). A held job it did not find was ended by
        its own holder (FINISHING: let be), was cancelled, or is no longer ours. Jobs
        claimed after the send (the same job claimed anew included: another lease) are
        not judged."""
        lost, given_up, stopping = [], [], []
        self._moments = None
        for job in self.held():
            if job.lease not in sent or job.id in locked:
                continue
            if job.id in renewed:
                job.renewed_at = sent_at  # the new expiry is later still
            elif job.state is JobState.RUNNING and job.id in cancelled:
                stopping.append(job)  # the caller asks for JobCancelled: cancelling()
            elif job.state is JobState.RUNNING:
                job.state = JobState.LOST
                lost.append(job)
            elif job.state is JobState.CLAIMED:
                job.state = JobState.GIVEN_UP
                if job.id in cancelled:
                    job.cancelled_at = sent_at  # if it started meanwhile: interrupt it
                given_up.append(job)
        return RenewalVerdict(lost, given_up, stopping)

    def cancelling(self, job: LedgerJob, at: float) -> bool:
        """The running job was cancelled (its lease is gone): JobCancelled is asked
        for at `at`, its grace runs from there. False when it is not running (any
        more): nothing to interrupt."""
        if job.state is not JobState.RUNNING:
            return False
        job.state, job.cancelled_at = JobState.CANCELLING, at
        self._moments = None
        return True

    def give_up(self, job: LedgerJob, cancelled_at: float | None = None) -> None:
        """An unstarted job whose lease is about to lapse or is gone: left to a rescue,
        or, `cancelled_at` that moment, cancelled (if it turns out to have started
        meanwhile, it is interrupted, not killed: see observe_starts)."""
        if job.state is JobState.CLAIMED:
            job.state, job.cancelled_at = JobState.GIVEN_UP, cancelled_at
            self._moments = None

    def soft_timeout_sent(self, job: LedgerJob, at: float) -> None:
        """JobTimeout was asked for in the job at `at`: its grace runs from there."""
        job.soft_timeout_at = at
        self._moments = None

    def blame(self, jobs: Iterable[LedgerJob]) -> None:
        """Name the jobs a kill of the child is for (charged, or left alone if lost)."""
        self.blamed.update(job.id for job in jobs)

    # -- reading --------------------------------------------------------------------------

    def spared(self) -> list[Lease]:
        """The leases our rescue leaves alone, expired or not: those we renew (after an
        outage the rescue may run before the renewal: a handler that returned would
        lose its outcome to it), and those of the jobs given up unstarted, not
        cancelled (their leases were lapsing, or are gone), whose give-back is still
        to come: the child's own when it comes to them or reconnects, or ours when it
        says `skipping` or dies."""
        return [
            job.lease
            for job in self.jobs.values()
            if job.state in HELD or (job.state is JobState.GIVEN_UP and job.cancelled_at is None)
        ]

    def in_state(self, state: JobState) -> list[LedgerJob]:
        return [job for job in self.jobs.values() if job.state is state]

    def held(self) -> list[LedgerJob]:
        return [job for job in self.jobs.values() if job.state in HELD]

    def leases(self) -> list[Lease]:
        return [job.lease for job in self.held()]

    def last_renewed(self, sent: Collection[Lease]) -> float:
        """The oldest last good renewal of the held jobs among `sent` (inf: none): what
        a renewal that skipped some of them may tell the child's lease guard."""
        return min((job.renewed_at for job in self.held() if job.lease in sent), default=math.inf)

    def __bool__(self) -> bool:
        return self.moments().held

    def moments(self) -> Moments:
        if self._moments is not None:
            return self._moments
        # One pass, no calls (not even min()), the states in locals: this runs once per
        # change, a busy child's loop turn, over every job of a claim or two.
        claimed, running, finishing = JobState.CLAIMED, JobState.RUNNING, JobState.FINISHING
        held, earliest_renewal, next_runtime = False, math.inf, math.inf
        for job in self._jobs.values():
            state = job.state
            if state is finishing:
                held = True
            elif state is claimed or state is running:
                held = True
                if job.renewed_at < earliest_renewal:
                    earliest_renewal = job.renewed_at
                if state is running and job.started_at is not None:
                    moment = (
                        job.started_at + job.max_runtime_s
                        if job.soft_timeout_at is None
                        else job.soft_timeout_at + SOFT_TIMEOUT_GRACE_S
                    )
                    if moment < next_runtime:
                        next_runtime = moment
            elif state is JobState.CANCELLING and job.cancelled_at is not None:
                next_runtime = min(next_runtime, job.cancelled_at + CANCEL_GRACE_S)
                # Not renewed any more: its lease lapses from its last renewal on.
                if job.renewed_at < earliest_renewal:
                    earliest_renewal = job.renewed_at
        next_start, unmade = self._next_start, self._unmade
        for batch in self._batches:
            # Its jobs without a record: CLAIMED from _next_start on, FINISHING before.
            if batch.unmade(unmade, max(0, next_start - batch.first)):
                held = True
                if batch.at < earliest_renewal:
                    earliest_renewal = batch.at
            elif batch.unmade(unmade):
                held = True
        self._moments = Moments(
            held,
            None if earliest_renewal == math.inf else earliest_renewal,
            None if next_runtime == math.inf else next_runtime,
        )
        return self._moments

    # -- the end of the child -------------------------------------------------------------

    def settlements(self, reason: KillReason | None, how: str) -> list[Settlement]:
        """What to write for each job of a child that is gone: `reason` is why we killed
        it (None: it died by itself), `how` its wait status in words."""
        settled = []
        for job in self.jobs.values():
            if job.state in HELD:
                error = None if job.state is JobState.CLAIMED else self._charge(job, reason, how)
                settled.append(Settlement(job.lease, error))
            elif job.state is JobState.CANCELLING or (
                job.state is JobState.GIVEN_UP and job.cancelled_at is not None
            ):
                # Cancelled under our lease, which its row still holds (HELD): the
                # handler is over now, so the release gives the place up (the row is
                # cancelled: it stays so, nothing is charged).
                settled.append(Settlement(job.lease, None))
            elif job.state is JobState.GIVEN_UP and job.number >= self._next_start:
                # Given up as its lease lapsed, and never started: no start of it, nor
                # of any job claimed after it, was posted, and none will be now. Given
                # back uncharged, fenced by the token: a lease rescued meanwhile (by
                # another daemon) is left as the rescue left it.
                settled.append(Settlement(job.lease, None))
        return settled

    def _charge(self, job: LedgerJob, reason: KillReason | None, how: str) -> str | None:
        """The error to charge a started job with, or None to release it uncharged."""
        if reason is KillReason.SHUTDOWN:
            return None  # shutdown is not the job's fault: back to queued, uncharged
        if reason in _FOR_ONE_JOB and job.id not in self.blamed:
            return None  # killed for a neighbour's sake: not this job's fault
        if job.state is JobState.FINISHING:
            # Its handler returned but its outcome was not written yet (successes are
            # written in batches): it runs again, and this start counts.
            return (
                f"worker process {how} after the job's handler returned, before its "
                "outcome was recorded"
            )
        if reason is KillReason.UNFENCED:
            return "worker killed: its supervisor could not renew the job's lease"
        if reason is KillReason.TIMEOUT:
            return f"exceeded its max runtime of {job.max_runtime_s:g}s: worker killed (SIGKILL)"
        return f"worker process {how} while running the job"
