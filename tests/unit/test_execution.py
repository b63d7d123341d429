"""What a handler's return or raise becomes, and the one-line summary of its error."""

from __future__ import annotations

import json
from typing import Any

import pytest

import pgworkerd
from pgworkerd.encoding import encode_result
from pgworkerd.job import Job, JobTimeout
from pgworkerd.worker.execution import Executor, Outcome

JOB = Job(id=1, kind="k", queue="q", payload={}, attempt=1, max_attempts=3)


def run(handler: Any) -> Outcome:
    executor = Executor()
    try:
        return executor.run(handler, JOB)
    finally:
        executor.close()


@pytest.mark.parametrize("error", [None, "", " ", "\n\n", " \n \t"])
def test_a_blank_error_summarises_as_empty(error: str | None) -> None:
    assert Outcome("failed", error=error).summary == ""


def test_a_traceback_summarises_as_its_exception_line() -> None:
    error = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n\n'
    assert Outcome("failed", error=error).summary == "ValueError: bad"


def test_discard_with_a_blank_reason_does_not_crash_the_summary() -> None:
    def handler(job: Job) -> None:
        raise pgworkerd.Discard(" ")

    outcome = run(handler)
    assert outcome.kind == "discarded" and outcome.summary == ""


def test_each_way_out_of_a_handler() -> None:
    def retry(job: Job) -> None:
        raise pgworkerd.Retry(after=5)

    def fail(job: Job) -> None:
        raise KeyError("missing")

    async def coroutine(job: Job) -> dict[str, int]:
        return {"n": job.id}

    assert run(lambda job: [1, 2]) == Outcome("succeeded", result_json="[1, 2]")
    assert run(coroutine).result_json == '{"n": 1}'
    assert (run(retry).kind, run(retry).delay_s) == ("retry", 5.0)
    failed = run(fail)
    assert failed.kind == "failed" and failed.summary == "KeyError: 'missing'"


def test_a_result_the_handler_encoded_is_stored_as_it_is() -> None:
    """contrib/django's handlers return their value encoded (EncodedResult): the worker
    writes that very text, not a second encoding of it (nor of the marker object)."""
    encoded = encode_result({"a": "b\x00c", "n": [1, 2.5]})
    # The NUL kept escaped, as the six characters \u0000 (jsonb holds no NUL).
    assert json.loads(encoded.text or "") == {"a": "b\\u0000c", "n": [1, 2.5]}

    async def coroutine(job: Job) -> object:
        return encoded

    assert run(lambda job: encoded).result_json is encoded.text
    assert run(coroutine).result_json is encoded.text
    assert run(lambda job: encode_result(None)) == Outcome("succeeded", result_json=None)


def test_in_handler_is_true_exactly_while_the_handler_runs() -> None:
    # SIGUSR1 raises JobTimeout/JobCancelled only while it is true (loop.py).
    executor = Executor()
    seen: list[bool] = []

    def returns(job: Job) -> None:
        seen.append(executor.in_handler)

    def raises(job: Job) -> None:
        seen.append(executor.in_handler)
        raise ValueError("no")

    async def awaits(job: Job) -> int:
        seen.append(executor.in_handler)
        return 1

    def interrupted(job: Job) -> None:
        raise KeyboardInterrupt

    try:
        for handler in (returns, raises, awaits):
            executor.run(handler, JOB)
            assert not executor.in_handler
        with pytest.raises(KeyboardInterrupt):
            executor.run(interrupted, JOB)
        assert not executor.in_handler
    finally:
        executor.close()
    assert seen == [True, True, True]


def test_a_coroutine_that_raised_leaves_a_fresh_event_loop_for_the_next() -> None:
    executor = Executor()

    async def timed_out(job: Job) -> None:
        raise JobTimeout("passed its max runtime")

    async def returns(job: Job) -> int:
        return 7

    try:
        assert executor.run(returns, JOB).result_json == "7"
        assert executor.run(timed_out, JOB).kind == "timed_out"
        assert executor._loop is None  # closed: it may be unusable
        assert executor.run(returns, JOB).result_json == "7"
    finally:
        executor.close()


def test_an_exception_carrying_its_error_text_is_recorded_with_it() -> None:
    """contrib/django names a task's exception class on its error's first line so."""
    from pgworkerd.worker.execution import ERROR_TEXT

    def handler(job: Job) -> None:
        error = ValueError("bad")
        setattr(error, ERROR_TEXT, "builtins.ValueError: bad\nTraceback ...\nValueError: bad")
        raise error

    outcome = run(handler)
    assert outcome.kind == "failed"  # retried as any failure
    assert outcome.error == "builtins.ValueError: bad\nTraceback ...\nValueError: bad"
    assert outcome.summary == "ValueError: bad"


def test_an_error_text_never_makes_a_timeout_a_failure() -> None:
    from pgworkerd.worker.execution import ERROR_TEXT

    def handler(job: Job) -> None:
        error = JobTimeout("late")
        setattr(error, ERROR_TEXT, "not this")
        raise error

    outcome = run(handler)
    assert outcome.kind == "timed_out" and outcome.error is not None
    assert outcome.error.startswith("JobTimeout: late")
