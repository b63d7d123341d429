"""Wake-ups: which idle child to wake when the daemon's listener hears of new jobs.

One idle child per notified queue, not a herd; a child whose claim comes back full
wakes the next. A queue notified while no idle child could take it is remembered, and
the next child to go idle for it is woken at once: a notification that raced that
child's `idle` is not lost. Draining, no child is woken.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Set

from pgworkerd import logs
from pgworkerd.housekeeping import ALL_QUEUES
from pgworkerd.supervisor.children import ChildProcess

log = logging.getLogger("pgworkerd.supervisor")


class Wakeups:
    def __init__(self) -> None:
        self.unclaimed: set[str] = set()  # queues notified while no idle child took them

    def notified(
        self, queues: Iterable[str], children: Collection[ChildProcess], *, accepting: bool
    ) -> None:
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

    def went_idle(self, child: ChildProcess, *, accepting: bool) -> None:
        if accepting and (ALL_QUEUES in self.unclaimed or child.queues & self.unclaimed):
            self.unclaimed -= child.queues | {ALL_QUEUES}
            child.wake()

    @staticmethod
    def possible(children: Iterable[ChildProcess], *, accepting: bool) -> bool:
        """Some child waits for a `wake`: a notification may have one to send now."""
        return accepting and any(child.idle for child in children)

    @staticmethod
    def wake_one(queues: Set[str], children: Iterable[ChildProcess], *, accepting: bool) -> bool:
        if not accepting:
            return False
        for child in children:
            if child.idle and child.queues & queues:
                child.wake()
                return True
        return False
