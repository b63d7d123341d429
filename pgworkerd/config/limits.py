"""Flow-control limits of a queue (docs/configuration.md, "Flow control"): `concurrency`
(running jobs of the queue, fleet-wide), `rate` (starts per period, fleet-wide, by the
database clock) and `per_key` (the same for each job key of the queue). Parsed here, kept
by the claim as `storage.limits.QueueLimits`."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from pgworkerd.config.units import Count, Section, parse_duration

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(.+?)\s*$")
# `N/s` is `N/1s`: a bare unit is one of it.
_BARE_UNITS = {"ms": "1ms", "s": "1s", "m": "1m", "h": "1h", "d": "1d"}
MAX_PERIOD_S = 366 * 86400.0


def parse_rate(value: Any) -> tuple[int, float]:
    """(starts, period in seconds) from `100/s`, `10/m`, `5/h`, `20/30s`, `3/1.5m`.
    Refuses anything else with one line saying what a rate looks like."""
    if isinstance(value, (list, tuple)) and len(value) == 2:  # a parsed rate, as stored
        count, period_s = value
        value = f"{count}/{period_s}s"
    if not isinstance(value, str):
        raise ValueError(f"must be a rate such as 100/s, 10/m or 20/30s, not {value!r}")
    match = _RATE.match(value)
    if match is None:
        raise ValueError(f"must be a rate such as 100/s, 10/m or 20/30s, not {value!r}")
    count = int(match[1])
    period = _BARE_UNITS.get(match[2], match[2])
    try:
        period_s = parse_duration(period)
    except ValueError:
        period_s = None
    if not isinstance(period_s, float) or not 0 < period_s <= MAX_PERIOD_S:
        raise ValueError(f"{value!r}: the period must be a duration such as s, m, h or 30s")
    if not 1 <= count <= 1_000_000:
        raise ValueError(f"{value!r}: the count must be from 1 to 1000000")
    return count, period_s


Rate = Annotated[tuple[int, float], BeforeValidator(parse_rate)]
LimitConcurrency = Annotated[Count, Field(ge=1, le=1_000_000)]


class PerKeyLimits(Section):
    concurrency: LimitConcurrency | None = Field(
        None, description="running jobs of each key of the queue, fleet-wide"
    )
    rate: Rate | None = Field(None, description="starts of each key per period, fleet-wide")
