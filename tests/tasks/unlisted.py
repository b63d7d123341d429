"""Never listed in a config: importing it leaves a mark the tests look for."""

from __future__ import annotations

import pgworkerd

IMPORTED = True


@pgworkerd.task
def never_run(job: pgworkerd.Job) -> None:
    raise AssertionError("a task of a module the config does not list ran")
