"""The config's `retention:` section: how long finished jobs are kept, by state."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pgworkerd.config.units import Seconds, Section

STATE_RETENTION_DEFAULTS_S = {"succeeded": 86400.0, "dead": 30 * 86400.0, "cancelled": 7 * 86400.0}


class Retention(Section):
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
