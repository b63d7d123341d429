"""Shared memory between a worker child and its supervisor, for what happens once per
job and would cost a system call each way through a pipe:

  * which claimed job each execution slot of the child started last, and when
    (child -> supervisor);
  * how many lines the supervisor wrote to the child's control pipe (supervisor ->
    child), so the child reads that pipe only when there is something in it;
  * how many `released` messages the child had sent when it posted its last start
    (child -> supervisor): a job the child gave back is below the claim numbers of
    the starts after it, which would say it started (see pgworkerd/ipc, ordering
    rules), until the supervisor reads that `released`;
  * the last renewal of the child's leases that answered: when it was sent and the
    highest claim number it covered (supervisor -> child), so a child whose supervisor
    stopped renewing (frozen, stopped, stuck in a slow import) stops its handlers
    before their leases run out (worker/lease_guard.py), and whether that guard
    killed the child (child -> supervisor), so its reap says why.

Each start record is (the job's claim number, its start time in integer nanoseconds, a
check): integers only, so the check is two XORs, not a float's bits through struct on
every job. A read that catches a write half done finds a check that does not match, and
reads again. After
writing a record the child bumps a counter of starts posted, so a supervisor that
finds the counter unchanged skips the records. Every field has one writer.
"""

from __future__ import annotations

import mmap
import struct
import time
from dataclasses import dataclass

# Starts posted (child), control lines written (supervisor), `released` messages sent
# before the last start posted (child).
_HEADER = struct.Struct("<qqq")
_COUNTER = struct.Struct("<q")  # one of the header's three
_CONTROL_LINES_OFFSET = 8
_RELEASED_OFFSET = 16
# Claim number, start time (time.monotonic_ns(): the clock of time.monotonic()), check.
_RECORD = struct.Struct("<qqq")
_CHECK_SEED = 0x5A17_0F_C0FFEE
# After the slots: the highest claim number a renewal covered, its send time (the
# monotonic clock's ns: the renewed leases run from no earlier), check; as a record.
_RENEWAL = _RECORD
# After it: non-zero once the child's lease guard killed the child (a counter's size).
_GUARD = _COUNTER


@dataclass(frozen=True, slots=True)
class StartRecord:
    slot: int  # the child's execution slot, 0-based
    number: int  # the job's claim number
    started_at: float  # CLOCK_MONOTONIC


class StartBoard:
    """Created by the supervisor before the fork, so both processes map the same page."""

    def __init__(self, slots: int = 1) -> None:
        self.slots = slots
        # Anonymous and shared (mmap's default on Unix): the forked child writes the
        # very page the supervisor reads, and the other way round.
        self._renewal_offset = _HEADER.size + slots * _RECORD.size
        self._guard_offset = self._renewal_offset + _RENEWAL.size
        self._memory = mmap.mmap(-1, self._guard_offset + _GUARD.size)
        for slot in range(slots):
            self._write_record(slot, 0, 0)
        _RENEWAL.pack_into(self._memory, self._renewal_offset, 0, 0, _CHECK_SEED)
        self._starts_posted = 0  # the child's own count
        self._released_sent = 0  # the child's own count of `released` messages sent
        self._released_posted = 0  # what the header says of it
        self._control_lines = 0  # the supervisor's own count

    # -- the child's side -----------------------------------------------------------------

    def post_start(self, claim_number: int, slot: int = 0) -> None:
        """Execution slot `slot` is about to run the job numbered `claim_number`."""
        started_ns = time.monotonic_ns()
        _RECORD.pack_into(  # _write_record's body: this runs for every job
            self._memory,
            _HEADER.size + slot * _RECORD.size,
            claim_number,
            started_ns,
            claim_number ^ started_ns ^ _CHECK_SEED,
        )
        released = self._released_sent
        if released != self._released_posted:  # rare: a give-back since the last start
            self._released_posted = released
            _COUNTER.pack_into(self._memory, _RELEASED_OFFSET, released)
        self._starts_posted += 1
        _COUNTER.pack_into(self._memory, 0, self._starts_posted)

    def sent_released(self) -> None:
        """The child sent a `released` message (after sending it): the next start
        posted says so."""
        self._released_sent += 1

    def control_lines(self) -> int:
        """How many lines the supervisor has written to the control pipe so far."""
        return int(_COUNTER.unpack_from(self._memory, _CONTROL_LINES_OFFSET)[0])

    def renewal(self) -> tuple[int, float]:
        """(the highest claim number the last renewal that answered covered, when it
        was sent); (0, 0.0) before the first. The jobs numbered up to it that the
        child still held were in it: the supervisor knows a child's claims in order."""
        while True:
            number, sent_ns, check = _RENEWAL.unpack_from(self._memory, self._renewal_offset)
            if check == number ^ sent_ns ^ _CHECK_SEED:
                return number, sent_ns / 1e9

    def post_guard_fired(self) -> None:
        """The child's lease guard is about to kill the child."""
        _GUARD.pack_into(self._memory, self._guard_offset, 1)

    # -- the supervisor's side ------------------------------------------------------------

    def guard_fired(self) -> bool:
        """Whether the child's lease guard killed it (read before close())."""
        return bool(_GUARD.unpack_from(self._memory, self._guard_offset)[0])

    def post_renewal(self, covered: int, sent_at: float) -> None:
        """A renewal sent at `sent_at` (monotonic) answered for the child's jobs numbered
        up to `covered`. Only ever moves forward."""
        number, previous = self.renewal()
        covered, sent_at = max(covered, number), max(sent_at, previous)
        sent_ns = int(sent_at * 1e9)
        _RENEWAL.pack_into(
            self._memory, self._renewal_offset, covered, sent_ns, covered ^ sent_ns ^ _CHECK_SEED
        )

    def starts_posted(self) -> int:
        """A counter that moves whenever a start is posted: unchanged, nothing is new."""
        return int(_COUNTER.unpack_from(self._memory, 0)[0])

    def snapshot(self) -> tuple[int, int, list[StartRecord]]:
        """(starts posted, `released` messages the child had sent when it posted the
        last of them, the last start of each slot) as of one moment. The child posts
        one start at a time (record and count of `released`, then counter): a read that
        the counter did not see change in between saw no post half done, and no slot
        older than a later one it shows (a seqlock with one writer)."""
        while True:
            posted = self.starts_posted()
            released = int(_COUNTER.unpack_from(self._memory, _RELEASED_OFFSET)[0])
            records = self.records()
            if self.starts_posted() == posted:
                return posted, released, records

    def records(self) -> list[StartRecord]:
        """The last start of each slot that has started a job (see snapshot())."""
        found = []
        for slot in range(self.slots):
            offset = _HEADER.size + slot * _RECORD.size
            while True:
                number, started_ns, check = _RECORD.unpack_from(self._memory, offset)
                if check == number ^ started_ns ^ _CHECK_SEED:
                    break
            if number:
                found.append(StartRecord(slot, number, started_ns / 1e9))
        return found

    def wrote_control_line(self) -> None:
        """Count a line written to the control pipe (after writing it)."""
        self._control_lines += 1
        _COUNTER.pack_into(self._memory, _CONTROL_LINES_OFFSET, self._control_lines)

    def close(self) -> None:
        self._memory.close()

    def _write_record(self, slot: int, number: int, started_ns: int) -> None:
        offset = _HEADER.size + slot * _RECORD.size
        _RECORD.pack_into(
            self._memory, offset, number, started_ns, number ^ started_ns ^ _CHECK_SEED
        )
