"""Snooze and PauseKey: their arguments, and the outcome a handler's raise becomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgworkerd
from pgworkerd.worker.execution import outcome_of_exception


def test_snooze_becomes_an_uncharged_snooze_outcome() -> None:
    outcome = outcome_of_exception(pgworkerd.Snooze(timedelta(minutes=2)))
    assert (outcome.kind, outcome.delay_s, outcome.until) == ("snoozed", 120.0, None)


def test_pause_key_after_or_until_becomes_a_key_paused_outcome() -> None:
    assert outcome_of_exception(pgworkerd.PauseKey(30)).delay_s == 30.0
    until = datetime(2030, 1, 1, tzinfo=UTC)
    outcome = outcome_of_exception(pgworkerd.PauseKey(until=until))
    assert (outcome.kind, outcome.delay_s, outcome.until) == ("key_paused", None, until)


@pytest.mark.parametrize(
    "after",
    # 1e11 s (3,000 years) was taken: a run_at or a pause's end no reader could load.
    [-1, float("nan"), float("inf"), True, "5", timedelta(seconds=-1), 1e11, timedelta.max],
)
def test_bad_snooze_after_is_a_value_error(after: Any) -> None:
    with pytest.raises(ValueError, match="seconds or a timedelta from 0 to 100 years"):
        pgworkerd.Snooze(after)
    with pytest.raises(ValueError, match="seconds or a timedelta from 0 to 100 years"):
        pgworkerd.PauseKey(after)


def test_pause_key_needs_exactly_one_of_after_and_an_aware_until() -> None:
    with pytest.raises(ValueError, match="one of them"):
        pgworkerd.PauseKey()
    with pytest.raises(ValueError, match="one of them"):
        pgworkerd.PauseKey(5, until=datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="timezone-aware"):
        pgworkerd.PauseKey(until=datetime(2030, 1, 1))
    # Year 10000 in a session at +14 hours: stored, then unreadable by `keys`, `status`.
    with pytest.raises(ValueError, match="must fall between 0001-01-02 and 9999-12-30"):
        pgworkerd.PauseKey(until=datetime(9999, 12, 31, 12, tzinfo=UTC))


@pytest.mark.parametrize("after", [-1, float("nan"), float("inf"), 1e11, 1e12, 1e16, True, "5"])
def test_bad_retry_after_is_a_value_error(after: Any) -> None:
    # inf and 1e16 were taken, and the retry's write then failed in the database (the
    # worker exited) at every attempt until the job was dead; 1e11 wrote a run_at in
    # year ~5,000 that no reader could load.
    with pytest.raises(ValueError, match=r"Retry\(after=...\) needs seconds from 0 to 100 years"):
        pgworkerd.Retry(after=after)
    assert pgworkerd.Retry(after=100 * 365.25 * 86_400).after > 0  # the bound itself


def test_a_discard_or_retry_reason_given_an_exception_is_its_text() -> None:
    error = ValueError("invalid literal")
    assert pgworkerd.Discard(error).reason == "invalid literal"  # type: ignore[arg-type]
    assert pgworkerd.Retry(5, reason=error).reason == "invalid literal"  # type: ignore[arg-type]
    assert pgworkerd.Retry(5).reason is None
    assert outcome_of_exception(pgworkerd.Discard(error)).error == "invalid literal"  # type: ignore[arg-type]
