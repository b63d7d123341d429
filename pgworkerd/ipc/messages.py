"""The child's status messages: typed, and their one-line JSON encoding.

The encoding is compact on purpose: a busy child sends a few of these per batch of
jobs. `decode` never raises on a malformed or unknown line (a child killed mid-write
leaves a fragment): it returns None and the reader moves on.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
from dataclasses import dataclass
from typing import Any, NamedTuple, cast


class ClaimedJob(NamedTuple):
    """A tuple, so a claim of many jobs is transposed into columns and back in C (a busy
    child sends one such message per batch: see _columns)."""

    id: int
    token: str  # the lease token as text: UUID.hex from a worker, any form UUID() reads
    kind: str
    queue: str
    max_runtime_s: float | None  # the job's own; None: the queue's or the defaults'


# A ClaimedJob from a tuple of its five fields, made in C (tuple.__new__), not through
# the NamedTuple's generated __new__: a hundred of them a message (the worker's
# `claimed`; the supervisor decodes plain tuples: ClaimedRow).
claimed_job = functools.partial(tuple.__new__, ClaimedJob)

# A claimed job's five fields as the supervisor decodes them: a plain tuple, as zip()
# makes it (a ClaimedJob from the worker is one too). Making each a ClaimedJob cost the
# supervisor a fifth of a µs a job that nothing used: the ledger unpacks the fields.
ClaimedRow = tuple[int, str, str, str, float | None]


@dataclass(frozen=True, slots=True)
class Claimed:
    """Leased jobs, numbered `first`, `first + 1`, ... in the order they will start."""

    first: int
    at: float  # monotonic time the claim was sent: the leases run from no earlier
    full: bool  # as many as asked for: there may be more to claim
    jobs: tuple[ClaimedRow, ...]  # ClaimedJobs from the worker; decoded, plain tuples


@dataclass(frozen=True, slots=True)
class Finishing:
    """Their handlers returned; their outcomes are being written."""

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Done:
    """Their outcomes are written, or their leases were found lost. `outcomes`, when
    given, is parallel to `ids`: (succeeded | failed | dead | cancelled | lost, handler
    seconds), the seconds to a tenth of a millisecond (a worker rounds its durations
    so): see _outcome_columns. A `done` without them is understood too."""

    ids: tuple[int, ...]
    outcomes: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Released:
    """Given back unstarted and uncharged."""

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Skipping:
    """Claimed, not started, and never to be: the child has read their `skip` lines, so
    its decision step skips them when it comes to them, or it has just skipped them.
    Said by a one-thread child whose handler runs while jobs after it in its batch are
    cancelled (the supervisor releases the leases their cancelled rows hold now, not
    when the child gets there), and by any child for the jobs it skips or sets aside:
    the supervisor gives back uncharged those whose leases it let lapse (the database
    away), which only this word makes safe (a start decided before the skip came would
    be posted after it)."""

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


Message = Claimed | Finishing | Done | Released | Skipping | Idle | Stopping | BootError


def encode(message: Message) -> bytes:
    fields: dict[str, Any]
    match message:
        case Claimed(first, at, full, jobs):
            fields = {"t": "claimed", "first": first, "at": at, "full": full, **_columns(jobs)}
        case Done(ids, outcomes) if outcomes:
            fields = {"t": "done", "ids": list(ids), **_outcome_columns(outcomes)}
        case Finishing(ids) | Done(ids) | Released(ids) | Skipping(ids):
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
            jobs = _jobs_of_columns(fields)
            if jobs is None:
                return None
            return Claimed(int(fields["first"]), float(fields["at"]), bool(fields["full"]), jobs)
        if tag == "done" and "dt" in fields:
            ids = tuple(fields["ids"])
            outcomes = _outcomes_of_columns(fields, len(ids))
            return None if outcomes is None else Done(ids, outcomes)
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


def _columns(jobs: tuple[ClaimedRow, ...]) -> dict[str, Any]:
    """A claim's jobs column by column: the ids, the tokens in one comma-separated
    string (a token is a UUID's text: never a comma), and the kinds, queues and max
    runtimes each as one value when every job has that one (a claim's usual case), else
    as the whole column. A hundred five-item arrays cost the child 1.2 µs a job to encode
    and the supervisor 0.8 to decode (bench/results/noop-round6-20261127.md)."""
    if not jobs:
        return {"ids": [], "tokens": "", "kinds": [], "queues": [], "runtimes": []}
    ids, tokens, kinds, queues, runtimes = zip(*jobs, strict=True)  # transposed in C
    return {
        "ids": ids,
        "tokens": ",".join(tokens),
        "kinds": _one_or_all(kinds),
        "queues": _one_or_all(queues),
        "runtimes": _one_or_all(runtimes),
    }


def _one_or_all(column: tuple[Any, ...]) -> Any:
    first = column[0]
    return first if column.count(first) == len(column) else column


def _jobs_of_columns(fields: dict[str, Any]) -> tuple[ClaimedRow, ...] | None:
    """The jobs _columns() wrote, each tuple made in C by zip; None for columns of
    different lengths or of the wrong types (the line is dropped like a fragment)."""
    ids, tokens = fields["ids"], fields["tokens"]
    if type(ids) is not list or type(tokens) is not str:
        return None
    count = len(ids)
    columns = [fields[name] for name in ("kinds", "queues", "runtimes")]
    columns = [c if type(c) is list else [c] * count for c in columns]
    rows = zip(ids, tokens.split(",") if count else [], *columns, strict=True)
    try:
        return cast(tuple[ClaimedRow, ...], tuple(rows))
    except ValueError:  # zip's: a column longer or shorter than the ids
        return None


# Handler seconds go as whole tenths of a millisecond: JSON's C scanner reads a hundred
# integers in about a third of the time it takes for a hundred floats (a `done` of 100
# pairs was the supervisor's dearest message: bench/results/supervisor-round13-20261128.md).
_TICKS_PER_S = 10_000.0


def _outcome_columns(outcomes: tuple[tuple[str, float], ...]) -> dict[str, Any]:
    """A `done`'s outcomes column by column: their names ("os": one when every job has
    it, a batch of successes' usual case) and their handler seconds in ticks ("dt")."""
    names, seconds = zip(*outcomes, strict=True)
    return {"os": _one_or_all(names), "dt": [round(s * _TICKS_PER_S) for s in seconds]}


def _outcomes_of_columns(
    fields: dict[str, Any], count: int
) -> tuple[tuple[str, float], ...] | None:
    """The outcomes _outcome_columns() wrote, paired in C; None for columns of other
    lengths than the ids' or of the wrong types (the line is dropped like a fragment)."""
    names, ticks = fields["os"], fields["dt"]
    if type(ticks) is not list or len(ticks) != count:
        return None
    if type(names) is str:
        names = [names] * count
    elif type(names) is not list or len(names) != count or not set(map(type, names)) <= {str}:
        return None
    # Divided in C; a tick that is no number raises TypeError, caught by decode.
    seconds = map(operator.truediv, ticks, itertools.repeat(_TICKS_PER_S, count))
    return tuple(zip(names, seconds, strict=True))


_ID_MESSAGES: dict[str, type[Finishing] | type[Done] | type[Released] | type[Skipping]] = {
    "finishing": Finishing,
    "done": Done,
    "released": Released,
    "skipping": Skipping,
}
_TAGS: dict[type, str] = {
    Finishing: "finishing",
    Done: "done",
    Released: "released",
    Skipping: "skipping",
    Idle: "idle",
    Stopping: "stopping",
}
