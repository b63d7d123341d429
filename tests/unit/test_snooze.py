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
    "after", [-1, float("nan"), float("inf"), True, "5", timedelta(seconds=-1)]
)
def test_bad_snooze_after_is_a_value_error(after: Any) -> None:
    with pytest.raises(ValueError, match="seconds or a timedelta >= 0"):
        pgworkerd.Snooze(after)
    with pytest.raises(ValueError, match="seconds or a timedelta >= 0"):
        pgworkerd.PauseKey(after)


def test_pause_key_needs_exactly_one_of_after_and_an_aware_until() -> None:
    with pytest.raises(ValueError, match="one of them"):
        pgworkerd.PauseKey()
    with pytest.raises(ValueError, match="one of them"):
        pgworkerd.PauseKey(5, until=datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="timezone-aware"):
        pgworkerd.PauseKey(until=datetime(2030, 1, 1))
