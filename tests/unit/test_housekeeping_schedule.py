"""When the supervisor's housekeeping duties run: the schedules on a fake clock, and
Housekeeper.run_due over a fake session and store (no database: what the duties do
against a real one is covered by the daemon, fault and wake-up tests)."""

from __future__ import annotations

import inspect
import math
import uuid
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import Any

import pytest

from pgworkerd.config import Config
from pgworkerd.housekeeping import Answer, Failure, Housekeeper, Renewal, Settlement
from pgworkerd.housekeeping.schedule import Every
from pgworkerd.housekeeping.session import DatabaseSession
from pgworkerd.job import Lease
from pgworkerd.storage.store import JobStore

LEASE_TTL_S = 30.0  # renewal every 10 s, rescue every 5 s, prune every 60 s
T0 = 1000.0  # the fake clock's first reading
CONFIG = Config()  # no periodic entries: those are tests/unit/test_periodic.py's
PRUNED = ["prune succeeded", "prune dead", "prune cancelled", "prune daemons"]
TIDIED = ["tidy flow control"]  # ended key pauses, idle uniqueness slots: every 60 s


# -- Every ------------------------------------------------------------------------------


def test_a_schedule_is_due_at_once_then_one_interval_after_each_run() -> None:
    every = Every(10.0)
    assert every.next_at == -math.inf
    assert every.due(T0), "first run at once, whatever the clock reads"
    every.done(T0)
    assert every.next_at == T0 + 10
    assert not every.due(T0 + 9.999)
    assert every.due(T0 + 10)
    every.done(T0 + 13)  # a late run: the next is counted from it
    assert every.next_at == T0 + 23
    assert not every.due(T0 + 22)


def test_a_schedule_can_start_later_and_refuses_a_useless_interval() -> None:
    assert not Every(5.0, first_at=T0).due(T0 - 1)
    for interval in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError):
            Every(interval)


# -- run_due ----------------------------------------------------------------------------


class FakeStore:
    schema = "pgworkerd"
    notify_channel = "pgworkerd.jobs"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def heartbeat(
        self, conn: Any, *, daemon_id: str, hostname: str, pid: int, info: str = "{}"
    ) -> None:
        self.calls.append("heartbeat")

    def renew(self, conn: Any, leases: Iterable[Lease], lease_ttl_s: float) -> set[int]:
        self.calls.append("renew")
        return {lease.job_id for lease in leases if lease.job_id % 2}  # odd ids still ours

    def unrenewed_among(self, conn: Any, leases: Iterable[Lease]) -> tuple[set[int], set[int]]:
        return set(), set()  # of the leases a renewal missed, none was locked or cancelled

    def rescue(self, conn: Any, *, limit: int = 1000, spared: Iterable[Lease] = ()) -> list[Any]:
        self.calls.append("rescue")
        self.spared = list(spared)
        return []

    def prune_stale_daemons(self, conn: Any, stale_after_s: float) -> int:
        self.calls.append("prune daemons")
        return 0

    def release(self, conn: Any, leases: Iterable[Lease]) -> set[int]:
        self.calls.append(f"release {next(iter(leases)).job_id}")
        return set()

    def fail(self, conn: Any, lease: Lease, error: str, *, discard: bool = False) -> None:
        self.calls.append(f"charge {lease.job_id}")

    def limit_lock_wait(self, conn: Any, ms: int) -> None:
        pass  # a settlement's row is never locked here


class FakeConnection:
    """Runs what the duties send as plain statements (pruning, tidying): counts them,
    finds nothing."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def transaction(self) -> nullcontext[None]:
        return nullcontext()

    def execute(self, statement: bytes, params: dict[str, Any]) -> Any:
        if "keep_s" in params:
            self.calls.append("tidy flow control")
            return self
        assert "state" in params, "pruning and tidying are the statements run here"
        self.calls.append(f"prune {params['state']}")
        return self

    def fetchone(self) -> tuple[int, int | None]:
        if self.calls[-1] == "tidy flow control":
            return (0, 0)  # tidying: nothing deleted
        return (0, None)  # a batch of pruning that removed nothing (count, position)


class FakeSession:
    """DatabaseSession's round trips without a database: the work runs on a fake
    connection, or fails when `down`."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.down = False
        self.queried_since_drain = False
        self.conn = None

    def attempt(self, what: str, work: Callable[[Any], Any]) -> Answer[Any] | Failure:
        if self.down:
            return Failure(what, "database down")
        self.queried_since_drain = True
        return Answer(work(FakeConnection(self.calls)))

    def close(self) -> None:
        pass


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """Names, kinds and defaults: what a caller's arguments must fit."""
    parameters = inspect.signature(function).parameters.values()
    return [(p.name, p.kind, p.default) for p in parameters]


@pytest.mark.parametrize(("fake", "real"), [(FakeStore, JobStore), (FakeSession, DatabaseSession)])
def test_the_fakes_are_called_as_the_real_ones_are(fake: type, real: type) -> None:
    # They stand in for JobStore and DatabaseSession past the type check (the
    # `type: ignore[arg-type]` below): a method of theirs that no longer takes what the
    # real one takes would let the duties call it in a way the real one refuses.
    methods = [n for n, v in vars(fake).items() if callable(v) and not n.startswith("_")]
    assert methods
    for name in methods:
        assert hasattr(real, name), f"{real.__name__} has no {name}"
        wanted = _parameters(getattr(real, name))
        assert _parameters(getattr(fake, name)) == wanted, f"{fake.__name__}.{name}"


class Loop:
    """The supervisor's side of run_due: counts what it is asked for."""

    def __init__(self, leases: list[Lease]) -> None:
        self.leases = leases
        self.asked = 0

    def get_leases(self) -> list[Lease]:
        self.asked += 1
        return self.leases

    def info(self) -> dict[str, Any]:
        return {"workers": 1, "state": "running"}


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def session(calls: list[str]) -> FakeSession:
    return FakeSession(calls)


@pytest.fixture
def keeper(calls: list[str], session: FakeSession) -> Housekeeper:
    return Housekeeper(
        store=FakeStore(calls),  # type: ignore[arg-type]
        database_url="postgresql://unused",
        lease_ttl_s=LEASE_TTL_S,
        config=lambda: CONFIG,
        daemon_id="test",
        session=session,  # type: ignore[arg-type]
    )


def lease(job_id: int) -> Lease:
    return Lease(job_id, uuid.uuid4())


def run(keeper: Housekeeper, calls: list[str], now: float, loop: Loop) -> Renewal | None:
    calls.clear()
    return keeper.run_due(now, loop.get_leases, loop.info)


def test_every_duty_runs_at_the_first_turn_renewal_first(
    keeper: Housekeeper, calls: list[str]
) -> None:
    assert keeper.next_due_at() == -math.inf, "due at once"
    loop = Loop([lease(1), lease(2), lease(3)])
    renewal = run(keeper, calls, T0, loop)
    assert calls == ["heartbeat", "renew", "rescue", *PRUNED, *TIDIED]
    assert renewal == Renewal(renewed=frozenset({1, 3}), sent_at=T0)
    assert loop.asked == 1
    assert keeper.next_due_at() == T0 + 5, "the rescue, every min(5, lease_ttl / 2) s"


def test_only_what_is_due_runs(keeper: Housekeeper, calls: list[str]) -> None:
    loop = Loop([lease(1)])
    run(keeper, calls, T0, loop)

    assert run(keeper, calls, T0 + 4.9, loop) is None
    assert calls == [], "nothing due yet"
    assert loop.asked == 1, "the leases are only gathered for a renewal"

    assert run(keeper, calls, T0 + 5, loop) is None
    assert calls == ["rescue"]
    assert keeper.next_due_at() == T0 + 10

    renewal = run(keeper, calls, T0 + 10.2, loop)  # a loop turn that came a little late
    assert calls == ["heartbeat", "renew", "rescue"]
    assert renewal is not None and renewal.sent_at == T0 + 10.2
    assert keeper.renewal.schedule.next_at == T0 + 20.2, "lease_ttl / 3 after the renewal"

    for now in (T0 + 15.2, T0 + 20.2, T0 + 25.2, T0 + 30.2, T0 + 35.2, T0 + 40.2):
        run(keeper, calls, now, loop)
    run(keeper, calls, T0 + 59.9, loop)
    assert not any(c.startswith("prune") for c in calls), "pruning waits its 60 s"
    run(keeper, calls, T0 + 60, loop)
    assert calls == [*PRUNED, *TIDIED], "each finished state, the silent daemons, tidying"


def test_intervals_follow_the_lease_ttl(calls: list[str], session: FakeSession) -> None:
    keeper = Housekeeper(
        store=FakeStore(calls),  # type: ignore[arg-type]
        database_url="postgresql://unused",
        lease_ttl_s=3.0,
        config=lambda: CONFIG,
        daemon_id="test",
        session=session,  # type: ignore[arg-type]
    )
    run(keeper, calls, T0, Loop([]))
    assert keeper.renewal.schedule.next_at == T0 + 1.0
    assert keeper.rescue.schedule.next_at == T0 + 1.5
    assert keeper.pruning.schedule.next_at == T0 + 60
    assert keeper.next_due_at() == T0 + 1.0


def test_a_failed_renewal_gives_none_and_waits_its_interval(
    keeper: Housekeeper, calls: list[str], session: FakeSession
) -> None:
    loop = Loop([lease(1)])
    session.down = True
    assert run(keeper, calls, T0, loop) is None
    assert calls == [], "no work reached the store"
    assert keeper.renewal.schedule.next_at == T0 + 10, "tried again at the next interval"
    session.down = False
    assert run(keeper, calls, T0 + 9, loop) is None
    renewal = run(keeper, calls, T0 + 10, loop)
    assert renewal is not None and renewal.renewed == frozenset({1})


def test_a_renewal_of_nothing_still_answers(keeper: Housekeeper, calls: list[str]) -> None:
    renewal = run(keeper, calls, T0, Loop([]))
    assert renewal == Renewal(renewed=frozenset(), sent_at=T0), "answered: not a failure"


def test_pending_settlements_are_written_on_every_turn_in_order(
    keeper: Housekeeper, calls: list[str], session: FakeSession
) -> None:
    run(keeper, calls, T0, Loop([]))
    session.down = True
    keeper.settle([Settlement(lease(7), None), Settlement(lease(8), "worker killed")])
    assert keeper.pending == 2
    assert run(keeper, calls, T0 + 1, Loop([])) is None
    assert keeper.pending == 2, "kept while the database is away"
    session.down = False
    run(keeper, calls, T0 + 2, Loop([]))  # no duty due: the settlements go anyway
    assert calls == ["release 7", "charge 8"]
    assert keeper.pending == 0 and not keeper.pending


def test_after_an_outage_the_give_backs_are_written_before_the_rescue_which_spares_them(
    keeper: Housekeeper, calls: list[str], session: FakeSession
) -> None:
    """Jobs never started whose leases lapsed while the database was away: their
    uncharged give-backs go before our rescue, and the rescue spares them (and what the
    supervisor names: leases its live children hold) while one is still unwritten."""
    store = keeper.store
    run(keeper, calls, T0, Loop([]))
    session.down = True
    keeper.settle([Settlement(lease(7), None), Settlement(lease(8), "worker killed")])
    assert run(keeper, calls, T0 + 5, Loop([])) is None  # the rescue's turn: it fails
    session.down = False
    held = lease(9)
    calls.clear()
    keeper.run_due(T0 + 10, lambda: [held], Loop([]).info, lambda: [held])
    assert calls[:5] == ["heartbeat", "renew", "release 7", "charge 8", "rescue"]
    assert store.spared == [held]  # type: ignore[attr-defined]
    session.down = True
    keeper.settle([Settlement(lease(10), None), Settlement(lease(11), "worker killed")])
    session.down = False
    keeper.settlements.flush = lambda session, store: None  # type: ignore[method-assign]
    keeper.run_due(T0 + 15, lambda: [], Loop([]).info, lambda: [held])
    assert [lease.job_id for lease in store.spared] == [9, 10]  # type: ignore[attr-defined]


def test_queried_since_drain_follows_the_session(
    keeper: Housekeeper, calls: list[str], session: FakeSession
) -> None:
    assert not keeper.queried_since_drain
    run(keeper, calls, T0, Loop([]))
    assert keeper.queried_since_drain
    keeper.queried_since_drain = False
    assert not session.queried_since_drain
    run(keeper, calls, T0 + 1, Loop([]))
    assert not keeper.queried_since_drain, "no duty due: no query"


def test_a_turn_with_nothing_due_still_writes_a_pending_settlement(
    keeper: Housekeeper, calls: list[str], session: FakeSession
) -> None:
    loop = Loop([lease(1)])
    run(keeper, calls, T0, loop)
    session.down = True
    keeper.settle([Settlement(lease(7), None)])  # not written: the database is down
    session.down = False
    assert run(keeper, calls, T0 + 1, loop) is None
    assert calls == ["release 7"], "no duty due, the settlement written"
    assert keeper.pending == 0


def test_queues_to_sample_make_the_sampling_due_at_once(keeper: Housekeeper) -> None:
    run(keeper, [], T0, Loop([]))
    assert keeper.next_due_at() == T0 + 5
    keeper.sample_queues(["default"])
    assert keeper.next_due_at() == -math.inf
