"""The child's status messages: typed, and their one-line JSON encoding.

The encoding is compact on purpose: a busy child sends a few of these per batch of
jobs. `decode` never raises on a malformed or unknown line (a child killed mid-write
leaves a fragment): it returns None and the reader moves on.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, NamedTuple, cast


class ClaimedJob(NamedTuple):
    """A tuple, so a claim of many jobs encodes and decodes as plain JSON arrays (a
    busy child sends one such message per batch)."""

    id: int
    token: str  # the lease token as text: UUID.hex from a worker, any form UUID() reads
    kind: str
    queue: str
    max_runtime_s: float | None  # the job's own; None: the queue's or the defaults'


# A ClaimedJob from a tuple of its five fields, made in C (tuple.__new__), not through
# the NamedTuple's generated __new__: a hundred of them a message, on both sides of the
# pipe (the worker's `claimed`, the supervisor's decoding of it).
claimed_job = functools.partial(tuple.__new__, ClaimedJob)


@dataclass(frozen=True, slots=True)
class Claimed:
    """Leased jobs, numbered `first`, `first + 1`, ... in the order they will start."""

    first: int
    at: float  # monotonic time the claim was sent: the leases run from no earlier
    full: bool  # as many as asked for: there may be more to claim
    jobs: tuple[ClaimedJob, ...]


@dataclass(frozen=True, slots=True)
class Finishing:
    """Their handlers returned; their outcomes are being written."""

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Done:
    """Their outcomes are written, or their leases were found lost. `outcomes`, when
    given, is parallel to `ids`: (succeeded | failed | dead | cancelled | lost, handler
    seconds);
    a child that sends none is understood too (encoded as the key "o", absent)."""

    ids: tuple[int, ...]
    outcomes: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Released:
    """Given back unstarted and uncharged."""

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to claim: the child waits for a `wake` (or a timeout)."""


@dataclass(frozen=True, slots=True)
class Stopping:
    """No job will start after this message."""


@dataclass(frozen=True, slots=True)
class BootError:
    reason: str


Message = Claimed | Finishing | Done | Released | Idle | Stopping | BootError


def encode(message: Message) -> bytes:
    fields: dict[str, Any]
    match message:
        case Claimed(first, at, full, jobs):
            fields = {
                "t": "claimed",
                "first": first,
                "at": at,
                "full": full,
                "jobs": jobs,  # tuples: JSON arrays
            }
        case Done(ids, outcomes) if outcomes:
            fields = {"t": "done", "ids": list(ids), "o": outcomes}
        case Finishing(ids) | Done(ids) | Released(ids):
            fields = {"t": _TAGS[type(message)], "ids": list(ids)}
        case BootError(reason):
            fields = {"t": "boot_error", "reason": reason}
        case _:
            fields = {"t": _TAGS[type(message)]}
    return (json.dumps(fields, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> Message | None:
    """The message on `line`, or None for a fragment or an unknown message."""
    try:
        fields = json.loads(line)
        tag = fields["t"]
        if tag == "claimed":
            rows = fields["jobs"]
            # A line from a child of ours carries what encode() wrote: each job and
            # outcome is built from its JSON array in C, with only the arity checked (a
            # wrong one: the line is dropped like a fragment).
            if not _all_of_length(rows, len(ClaimedJob._fields)):
                return None
            jobs = cast(tuple[ClaimedJob, ...], tuple(map(claimed_job, rows)))
            return Claimed(int(fields["first"]), float(fields["at"]), bool(fields["full"]), jobs)
        if tag == "done" and "o" in fields:
            pairs = fields["o"]
            if not _all_of_length(pairs, 2):
                return None
            outcomes = cast(tuple[tuple[str, float], ...], tuple(map(tuple, pairs)))
            return Done(tuple(fields["ids"]), outcomes)
        if tag in _ID_MESSAGES:
            return _ID_MESSAGES[tag](tuple(fields["ids"]))
        if tag == "idle":
            return Idle()
        if tag == "stopping":
            return Stopping()
        if tag == "boot_error":
            return BootError(str(fields["reason"]))
    except (ValueError, TypeError, KeyError):
        return None
    return None


def _all_of_length(rows: Any, length: int) -> bool:
    """Whether `rows` are JSON arrays, each of `length` items (TypeError: not arrays)."""
    return set(map(len, rows)) <= {length} and set(map(type, rows)) <= {list}


_ID_MESSAGES: dict[str, type[Finishing] | type[Done] | type[Released]] = {
    "finishing": Finishing,
    "done": Done,
    "released": Released,
}
_TAGS: dict[type, str] = {
    Finishing: "finishing",
    Done: "done",
    Released: "released",
    Idle: "idle",
    Stopping: "stopping",
}
