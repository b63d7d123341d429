"""What a handler's return or raise becomes, and the one-line summary of its error."""

from __future__ import annotations

from typing import Any

import pytest

import pgworkerd
from pgworkerd.job import Job
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
