"""The config's `periodic:` entries: a job kind enqueued at each slot of a schedule."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from pgworkerd import encoding
from pgworkerd.config import schedules
from pgworkerd.config.units import Seconds, Section
from pgworkerd.errors import InvalidJob

_MAX_PAYLOAD_BYTES = 1 << 20


class PeriodicEntry(Section):
    """One line of `periodic:`: a job enqueued at each slot of `cron` or `every`."""

    kind: str = Field(min_length=1, max_length=255)
    cron: str | None = Field(None, description="five fields, read in `timezone`")
    # At least 1 s: each slot costs the periodic duty a database round and a job row, and
    # slots are microsecond timestamps, so a tiny interval made the duty a busy loop
    # (1e-9: 14,501 jobs in 8 s) and `check` print one instant as three slots. Cron's
    # unit is the minute, sidekiq-cron's the second, as here.
    every: Seconds | None = Field(
        None, ge=1, description="slots at multiples of it since the epoch"
    )
    timezone: str | None = Field(None, description="IANA zone of `cron` (default UTC)")
    queue: str = Field("default", min_length=1, max_length=255)
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(0, ge=-(2**31), le=2**31 - 1)
    name: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the entry's identity; absent: derived from kind, schedule, queue, "
        "payload (so editing one of them makes a new entry)",
    )
    missed: schedules.Missed = Field(
        "latest", description="slots passed while no daemon ran: latest, all, or none"
    )

    @field_validator("timezone")
    @classmethod
    def _zone(cls, timezone: str | None) -> str | None:
        if timezone is not None:
            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown timezone {timezone!r}") from None
        return timezone

    @field_validator("payload")
    @classmethod
    def _json(cls, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            encoding.dump_payload(payload, max_bytes=_MAX_PAYLOAD_BYTES)
        except InvalidJob as exc:
            # YAML reads an unquoted 2024-01-01 as a date, which JSON has no type for.
            raise ValueError(f"{exc} (quote dates and times)") from None
        return payload

    @model_validator(mode="after")
    def _one_schedule(self) -> PeriodicEntry:
        if (self.cron is None) == (self.every is None):
            raise ValueError("needs exactly one of cron or every")
        if self.every is not None and self.timezone is not None:
            raise ValueError("timezone applies to cron only (every counts from the epoch)")
        if self.cron is not None:  # a bad expression, or one naming no date: refused at load
            schedules.CronSchedule(self.cron, self.timezone or "UTC").check_dates()
        return self

    def schedule(self) -> schedules.Schedule:
        if self.every is not None:
            return schedules.EverySchedule(self.every)
        assert self.cron is not None
        return schedules.CronSchedule(self.cron, self.timezone or "UTC")

    @property
    def key(self) -> str:
        return schedules.entry_key(
            name=self.name,
            kind=self.kind,
            schedule=self.schedule().describe(),
            queue=self.queue,
            payload=self.payload,
        )


def check_entries(
    entries: list[PeriodicEntry],
    queues: dict[str, Any],
    handlers: dict[str, str],
    *,
    tasks_too: bool = False,
) -> None:
    """Cross-checks against the rest of the config: a declared queue, a configured
    handler, and no two entries with one identity (they would share their slots).
    `tasks_too`: task functions or Django tasks are configured too, whose kinds are
    known only once their modules are imported (handlers.check_periodic_kinds)."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"periodic[{index}]"
        if entry.queue not in queues:
            raise ValueError(f"{where}.queue: {entry.queue!r} is not declared under queues")
        if entry.kind not in handlers and not tasks_too:
            raise ValueError(f"{where}.kind: {entry.kind!r} has no entry under handlers")
        if entry.key in seen:
            raise ValueError(
                f"{where}: the same entry as periodic[{seen[entry.key]}] "
                "(give one of them a distinct name)"
            )
        seen[entry.key] = index
