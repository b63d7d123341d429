"""The duty that deletes the flow-control rows that stopped mattering (ended key pauses,
idle debounce and throttle slots), every TIDY_INTERVAL_S, once they are TIDY_AFTER_S
old: `paused_keys` and `unique_slots` stay a few rows, whatever handlers and producers
did over the months."""

from __future__ import annotations

import logging

from pgworkerd import logs
from pgworkerd.housekeeping.duty import IntervalDuty, Round
from pgworkerd.storage.tidying import FlowTidying

log = logging.getLogger("pgworkerd.supervisor")

TIDY_INTERVAL_S = 60.0
TIDY_AFTER_S = 600.0  # an operator still sees a pause that ended a few minutes ago


class TidyingDuty(IntervalDuty):
    def __init__(self, *, interval_s: float = TIDY_INTERVAL_S, keep_s: float = TIDY_AFTER_S):
        super().__init__(interval_s)
        self.keep_s = keep_s

    def work(self, round_: Round) -> None:
        tidying = FlowTidying(round_.store.schema)
        result = round_.session.attempt(
            "tidy flow control", lambda conn: tidying.tidy(conn, keep_s=self.keep_s)
        )
        if result.ok and (result.value.pauses or result.value.slots):
            logs.event(
                log,
                logging.DEBUG,
                "tidied flow control",
                ended_pauses=result.value.pauses,
                idle_slots=result.value.slots,
            )
