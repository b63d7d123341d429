"""Tasks made by a factory, each given its kind: their functions are nested, and the
registry finds them at this module's top level (tests/integration/test_tasks.py)."""

from __future__ import annotations

from typing import Any

import pgworkerd


def _echo_task(kind: str) -> pgworkerd.Task[Any]:
    @pgworkerd.task(kind=kind)
    def echo(job: pgworkerd.Job) -> Any:
        return [job.kind, job.payload]

    return echo


ping = _echo_task("made.ping")
pong = pgworkerd.task(kind="made.pong")(lambda job: "pong")
