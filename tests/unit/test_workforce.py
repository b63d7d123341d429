"""Respawn backoff of a seat, and how a reaped child's exit is described."""

from __future__ import annotations

import logging
import signal

import pytest

from pgworkerd.config import parse
from pgworkerd.ipc import ExitCode
from pgworkerd.supervisor.ledger import KillReason
from pgworkerd.supervisor.reaping import report_exit
from pgworkerd.supervisor.workforce import RESPAWN_MAX_DELAY_S, Seat, respawn_delay_s

NOW = 100.0


def exited(code: int) -> int:
    return code << 8  # a wait status, as os.waitpid returns it


def seat() -> Seat:
    config = parse("handlers: {k: tests.handlers:noop}\n")
    return Seat(config.pools()[0], "default", 1)


def test_respawn_delay_doubles_with_the_crash_streak_up_to_a_cap() -> None:
    assert respawn_delay_s(0) == 0.0
    delays = [respawn_delay_s(n) for n in range(1, 12)]
    assert delays[:3] == [0.2, 0.4, 0.8]
    assert delays == sorted(delays) and delays[-1] == RESPAWN_MAX_DELAY_S


def test_a_child_dying_on_its_own_again_and_again_backs_off() -> None:
    place = seat()
    for streak in (1, 2, 3):
        delay = place.vacate(clean=False, healthy=False, our_doing=False, now=NOW)
        assert place.crash_streak == streak and delay == respawn_delay_s(streak)
        assert not place.due(NOW) and place.due(NOW + delay)


@pytest.mark.parametrize(
    "how",
    [dict(clean=True, healthy=False), dict(clean=False, healthy=True)],
    ids=["clean", "healthy"],
)
def test_a_clean_exit_or_a_healthy_life_resets_the_streak(how: dict[str, bool]) -> None:
    place = seat()
    place.crash_streak = 5
    assert place.vacate(our_doing=False, now=NOW, **how) == 0.0
    assert place.crash_streak == 0 and place.due(NOW)


def test_our_own_kill_does_not_add_to_the_streak() -> None:
    place = seat()
    place.crash_streak = 2
    place.vacate(clean=False, healthy=False, our_doing=True, now=NOW)
    assert place.crash_streak == 2


def test_a_retired_seat_is_never_due() -> None:
    place = seat()
    place.retired = True
    assert not place.due(NOW + 1000)


def test_exit_reports() -> None:
    recycled = report_exit(exited(0), None, retiring=False)
    assert (recycled.reason, recycled.clean, recycled.level) == ("recycled", True, logging.INFO)
    assert report_exit(exited(0), None, retiring=True).reason == "drained"
    crashed = report_exit(signal.SIGKILL, None, retiring=False)
    assert crashed.reason == "crashed" and crashed.level == logging.ERROR
    assert crashed.how == "killed by SIGKILL (perhaps out of memory?)" and not crashed.our_doing
    timeout = report_exit(signal.SIGKILL, KillReason.TIMEOUT, retiring=False)
    assert timeout.reason == "timeout" and timeout.how == "killed by SIGKILL" and timeout.our_doing
    shutdown = report_exit(signal.SIGKILL, KillReason.SHUTDOWN, retiring=True)
    assert shutdown.level == logging.INFO
    boot = report_exit(exited(ExitCode.BOOT_ERROR), None, retiring=False)
    assert boot.boot_error and boot.how == "exited with status 3"
    assert not report_exit(exited(ExitCode.CRASHED), None, retiring=False).boot_error
