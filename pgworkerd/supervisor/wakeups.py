"""Wake-ups: which idle child to wake when the daemon's listener hears of new jobs.

One idle child per notified queue, not a herd; a child whose claim comes back full
wakes the next. A queue notified while no idle child could take it is remembered, and
the next child to go idle for it is woken at once: a notification that raced that
child's `idle` is not lost. Draining, no child is woken.

A pool's #1 may listen itself (worker/listener.py; docs/design.md, "Round 9: a
listening worker"). Its marker, read here from the same notification stream, designates
it: from the marker on, the enqueue notifications naming its queues are counted (D)
instead of woken for, until it reports what it heard (k, `Heard`) with its next claim.
D > k: some came after its claim began, one sibling is woken; D < k: the next k - D are
its own (a credit). A listener that dies designated with D > 0 is woken for once.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Set
from dataclasses import dataclass, field

from pgworkerd import logs
from pgworkerd.housekeeping import ALL_QUEUES, Marker
from pgworkerd.ipc import Heard
from pgworkerd.storage.listening import parse_marker
from pgworkerd.supervisor.children import ChildProcess

log = logging.getLogger("pgworkerd.supervisor")


@dataclass
class Designation:
    """One listening child's count of the stream, from its markers on."""

    current: int | None = None  # the latest of its markers read from the stream
    counts: dict[int, int] = field(default_factory=dict)  # D by marker, not yet answered
    early: dict[int, int] = field(default_factory=dict)  # k by marker read after its Heard
    credit: int = 0  # notifications it heard that the stream has not shown us yet

    @property
    def designated(self) -> bool:
        return self.current is not None and self.current in self.counts


class Wakeups:
    def __init__(self, daemon: str = "") -> None:
        self.unclaimed: set[str] = set()  # queues notified while no idle child took them
        self.daemon = daemon  # "<host>:<supervisor pid>", as our children's markers begin
        self.listeners: dict[int, Designation] = {}  # by pid

    def notified(
        self,
        arrivals: Iterable[str | Marker],
        children: Collection[ChildProcess],
        *,
        accepting: bool,
    ) -> None:
        """The enqueues and markers read from the stream, in its order."""
        by_pid = {child.pid: child for child in children}
        queues: dict[str, None] = {}  # woken for the usual way, once each, in order
        for item in arrivals:
            if isinstance(item, Marker):
                self._marked(item.payload, by_pid)
            elif item == ALL_QUEUES:
                # Listening afresh: the stream had a gap, every count is void. Every
                # idle child, listeners too, is woken by the pipe and claims.
                self.listeners.clear()
                queues[item] = None
            elif not self._covered(item, by_pid):
                queues[item] = None
        for queue in queues:
            idle = [child for child in children if child.idle]
            if not accepting:
                woken = 0
            elif queue == ALL_QUEUES:  # anything may wait: every idle child looks
                for child in idle:
                    child.wake()
                woken = len(idle)
            else:
                woken = int(self.wake_one({queue}, children, accepting=accepting))
                if not woken:
                    self.unclaimed.add(queue)
            logs.event(log, logging.DEBUG, "notified", queue=queue, idle=len(idle), woken=woken)

    def heard(
        self,
        child: ChildProcess,
        heard: Heard,
        children: Collection[ChildProcess],
        *,
        accepting: bool,
    ) -> None:
        """A listener's claim since its marker `heard.marker`, and what it had heard:
        no longer designated; the stream read so far has shown us D of them."""
        d = self.listeners.setdefault(child.pid, Designation())
        counted = d.counts.pop(heard.marker, None)
        if counted is None:
            if d.current is None or heard.marker > d.current:
                d.early[heard.marker] = heard.enqueues  # its marker is still on the way
            return  # else: a marker from before a gap in the stream (void)
        # Older markers it never answered (a claim lost with its connection): moot.
        d.counts = {n: c for n, c in d.counts.items() if n > heard.marker}
        if counted > heard.enqueues:
            # Some came after its claim began: one sibling for them (at most one empty
            # claim: the listener's claim may have taken that job).
            self._wake_for(child.queues, children, accepting=accepting)
        elif counted < heard.enqueues and heard.marker == d.current:
            d.credit = heard.enqueues - counted
        logs.event(
            log,
            logging.DEBUG,
            "listener claimed",
            worker=child.name,
            heard=heard.enqueues,
            counted=counted,
        )

    def forget(
        self, child: ChildProcess, children: Collection[ChildProcess], *, accepting: bool
    ) -> None:
        """A child was reaped: if it listened designated and was counted for, whatever
        it heard may not have been claimed."""
        d = self.listeners.pop(child.pid, None)
        if d is not None and any(d.counts.values()):
            self._wake_for(child.queues, children, accepting=accepting)

    def went_idle(self, child: ChildProcess, *, accepting: bool) -> None:
        if accepting and (ALL_QUEUES in self.unclaimed or child.queues & self.unclaimed):
            self.unclaimed -= child.queues | {ALL_QUEUES}
            child.wake()

    def possible(self, children: Iterable[ChildProcess], *, accepting: bool) -> bool:
        """Some child waits for a `wake`: a notification may have one to send now. Not
        while a designated listener covers the queues of every idle child: it wakes
        itself, and a supervisor woken too takes a CPU at that moment (the listener's
        gain goes: bench/results/idle-latency-round8-20261127.md)."""
        if not accepting:
            return False
        children = list(children)
        covered: set[str] = set()
        for child in children:
            d = self.listeners.get(child.pid)
            if d is not None and d.designated:
                covered |= child.queues
        return any(
            child.idle and not self._designated(child) and not child.queues <= covered
            for child in children
        )

    def wake_one(
        self, queues: Set[str], children: Iterable[ChildProcess], *, accepting: bool
    ) -> bool:
        if not accepting:
            return False
        for child in children:
            if child.idle and child.queues & queues and not self._designated(child):
                child.wake()
                return True
        return False

    def _wake_for(
        self, queues: Set[str], children: Collection[ChildProcess], *, accepting: bool
    ) -> None:
        if accepting and not self.wake_one(queues, children, accepting=accepting):
            self.unclaimed |= queues

    def _designated(self, child: ChildProcess) -> bool:
        d = self.listeners.get(child.pid)
        return d is not None and d.designated

    def _marked(self, payload: str, by_pid: dict[int, ChildProcess]) -> None:
        parsed = parse_marker(payload)
        if parsed is None or parsed[0] != self.daemon or parsed[1] not in by_pid:
            return  # another daemon's listener, or a child already reaped
        _, pid, number = parsed
        d = self.listeners.setdefault(pid, Designation())
        d.current, d.credit = number, 0
        enqueues = d.early.pop(number, None)
        d.early = {n: k for n, k in d.early.items() if n > number}
        if enqueues is None:
            d.counts[number] = 0  # designated: counting from here
        else:
            d.credit = enqueues  # it claimed already: the next k are its own

    def _covered(self, queue: str, by_pid: dict[int, ChildProcess]) -> bool:
        """Whether a listener covers this enqueue: designated (counted), or its credit."""
        covered = False
        for pid, d in self.listeners.items():
            child = by_pid.get(pid)
            if child is None or queue not in child.queues:
                continue
            if d.designated:
                assert d.current is not None
                d.counts[d.current] += 1
                covered = True
            elif d.credit > 0:
                d.credit -= 1
                covered = True
        return covered
