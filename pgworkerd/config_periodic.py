"""The config's `periodic:` entries and `retention:` section (models kept beside
config.py so it stays small; config.py imports them into `Config`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from pgworkerd import encoding, periodic
from pgworkerd.errors import InvalidJob

# The same bounds and parsing as config.py's (imported lazily there: no cycle).
_Duration = Annotated[float, Field(gt=0, le=366 * 86400)]
_MAX_PAYLOAD_BYTES = 1 << 20

STATE_RETENTION_DEFAULTS_S = {"succeeded": 86400.0, "dead": 30 * 86400.0, "cancelled": 7 * 86400.0}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _duration(value: Any) -> Any:
    from pgworkerd.config import parse_duration

    return parse_duration(value)


Seconds = Annotated[_Duration, BeforeValidator(_duration)]


class PeriodicEntry(_Section):
    """One line of `periodic:`: a job enqueued at each slot of `cron` or `every`."""

    kind: str = Field(min_length=1, max_length=255)
    cron: str | None = Field(None, description="five fields, read in `timezone`")
    every: Seconds | None = Field(None, description="slots at multiples of it since the epoch")
    timezone: str | None = Field(None, description="IANA zone of `cron` (default UTC)")
    queue: str = Field("default", min_length=1, max_length=255)
    payload: dict[str, Any] = {}
    priority: int = Field(0, ge=-(2**31), le=2**31 - 1)
    name: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the entry's identity; absent: derived from kind, schedule, queue, "
        "payload (so editing one of them makes a new entry)",
    )
    missed: periodic.Missed = Field(
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
        if self.cron is not None:
            self.schedule()  # refuses a bad expression here, at load
        return self

    def schedule(self) -> periodic.Schedule:
        if self.every is not None:
            return periodic.EverySchedule(self.every)
        assert self.cron is not None
        return periodic.CronSchedule(self.cron, self.timezone or "UTC")

    @property
    def key(self) -> str:
        return periodic.entry_key(
            name=self.name,
            kind=self.kind,
            schedule=self.schedule().describe(),
            queue=self.queue,
            payload=self.payload,
        )


class Retention(_Section):
    """How long finished jobs are kept, by state. A state left out falls back on
    `defaults.retention` when that is set, else on its default below."""

    succeeded: Seconds | None = Field(None, description="default 1d")
    dead: Seconds | None = Field(None, description="default 30d")
    cancelled: Seconds | None = Field(None, description="default 7d")
    archive: bool = Field(
        False, description="move pruned rows to the jobs_archive table instead of deleting"
    )


FinishedState = Literal["succeeded", "dead", "cancelled"]


def retention_s(retention: Retention, fallback_s: float | None, state: FinishedState) -> float:
    configured: float | None = getattr(retention, state)
    if configured is not None:
        return configured
    return fallback_s if fallback_s is not None else STATE_RETENTION_DEFAULTS_S[state]


def check_entries(
    entries: list[PeriodicEntry], queues: dict[str, Any], handlers: dict[str, str]
) -> None:
    """Cross-checks against the rest of the config: a declared queue, a configured
    handler, and no two entries with one identity (they would share their slots)."""
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"periodic[{index}]"
        if entry.queue not in queues:
            raise ValueError(f"{where}.queue: {entry.queue!r} is not declared under queues")
        if entry.kind not in handlers:
            raise ValueError(f"{where}.kind: {entry.kind!r} has no entry under handlers")
        if entry.key in seen:
            raise ValueError(
                f"{where}: the same entry as periodic[{seen[entry.key]}] "
                "(give one of them a distinct name)"
            )
        seen[entry.key] = index
