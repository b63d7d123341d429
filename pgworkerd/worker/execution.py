"""Running one handler and turning what it did into an outcome to record.

Plain functions and `async def` coroutines are both handlers; what a handler returns
or raises decides the job's next state (see docs/design.md, "Handler contract").
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pgworkerd.encoding import UNDECODABLE, EncodedResult, Undecodable, dump_result
from pgworkerd.job import Discard, Job, JobCancelled, JobTimeout, PauseKey, Retry, Snooze

OutcomeKind = Literal[
    "succeeded", "retry", "snoozed", "key_paused", "discarded", "failed", "timed_out", "cancelled"
]


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    result_json: str | None = None  # succeeded
    delay_s: float | None = None  # retry, snoozed, key_paused (with no until)
    until: datetime | None = None  # key_paused until then (database clock)
    error: str | None = None  # retry (reason), discarded, failed, timed_out

    @property
    def summary(self) -> str:
        """The error in one line, for a log line: its last non-blank line (a
        traceback's is the exception itself); empty for a blank error."""
        lines = (self.error or "").strip().splitlines()
        return lines[-1] if lines else ""


# An Exception may carry the error text to record for it in this attribute, in place of
# its formatted traceback (contrib/django: the raised class's import path on the first
# line, which the errors' cut to their first characters keeps, then the traceback).
ERROR_TEXT = "pgworkerd_error_text"


def outcome_of_value(value: Any) -> Outcome:
    """A handler returned `value`: the job succeeded, its result kept as JSON (an
    EncodedResult's text as it is: contrib/django's tasks encode their value once)."""
    # An exact type test: the one comparison every other result pays.
    if type(value) is EncodedResult:
        return Outcome("succeeded", result_json=value.text)
    return Outcome("succeeded", result_json=dump_result(value))


_SUCCEEDED_WITHOUT_RESULT = outcome_of_value(None)


def outcome_of_unknown_kind(job: Job) -> Outcome:
    """No handler is configured for the job's kind: discarded (only configured code
    runs: an unknown kind never selects an import)."""
    return Outcome("discarded", error=f"no handler configured for kind {job.kind!r}")


def runnable(job: Job) -> bool:
    """Whether the job's payload was decoded (it is not the marker Undecodable): the
    check a worker makes of a job it has a handler for, before running it. A class
    test, the one more step of every job."""
    return job.payload.__class__ is not Undecodable


def outcome_of_undecodable(job: Job) -> Outcome:
    """The job's payload could not be decoded (nested too deeply: storage/connections.
    json_loads): discarded, dead at once, as an unknown kind, since every attempt would
    fail alike; its handler is not called. The rest of its batch runs as ever: before,
    the worker exited while decoding the claim, and every job of it waited for its lease
    to expire, charged an attempt, again at each claim of this one."""
    return Outcome("discarded", error=f"payload could not be decoded: {job.payload[UNDECODABLE]}")


def outcome_of_exception(exc: BaseException) -> Outcome:
    """A handler raised `exc` (KeyboardInterrupt is not the handler's: it goes on up)."""
    if isinstance(exc, Retry):
        return Outcome("retry", delay_s=exc.after, error=str(exc))
    if isinstance(exc, Snooze):
        return Outcome("snoozed", delay_s=exc.after, error=str(exc))
    if isinstance(exc, PauseKey):
        return Outcome("key_paused", delay_s=exc.after, until=exc.until, error=str(exc))
    if isinstance(exc, Discard):
        return Outcome("discarded", error=exc.reason or "discarded by handler")
    own = getattr(exc, ERROR_TEXT, None)
    if isinstance(own, str) and isinstance(exc, Exception):
        return Outcome("failed", error=own)
    text = "".join(traceback.format_exception(exc))
    if isinstance(exc, JobTimeout):
        detail = f": {exc}" if str(exc) else ""
        return Outcome("timed_out", error=f"JobTimeout{detail}\n{text}")
    if isinstance(exc, JobCancelled):
        # Written as a failure, fenced: a real cancel already ended the job, so the
        # write matches no row; a handler that raised it on its own fails like any.
        return Outcome("cancelled", error=f"JobCancelled\n{text}")
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    return Outcome("failed", error=text)


class Executor:
    """Calls handlers in this process; owns the event loop that coroutines run on.

    `in_handler` is True exactly while user code runs: the SIGUSR1 handler raises
    JobTimeout or JobCancelled only then, never inside pgworkerd's own bookkeeping.
    """

    def __init__(self) -> None:
        self.in_handler = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(
        self,
        handler: Callable[..., Any],
        job: Job,
        stop_if_asked: Callable[[Job], None] | None = None,
    ) -> Outcome:
        """`stop_if_asked(job)` raises JobCancelled or JobTimeout for a stop asked for
        the job before its handler began (loop.py); asked with `in_handler` already set,
        so a stop asked after this look raises from the signal's handler instead."""
        # The handler is called here, not through a helper of its own: a frame a job.
        self.in_handler = True
        try:
            if stop_if_asked is not None:
                stop_if_asked(job)
            value = handler(job)
            # None first: most handlers return it, and isawaitable() is three isinstance
            # checks (two against ABCs) on every job.
            if value is not None and inspect.isawaitable(value):
                value = self._event_loop().run_until_complete(value)
        except BaseException as exc:
            self.in_handler = False
            # A coroutine interrupted by JobTimeout can leave the loop unusable.
            if self._loop is not None and inspect.iscoroutinefunction(handler):
                self.close()
            return outcome_of_exception(exc)
        self.in_handler = False
        if value is None:  # most handlers return None: one outcome, frozen, for them all
            return _SUCCEEDED_WITHOUT_RESULT
        return outcome_of_value(value)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop
