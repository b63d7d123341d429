"""A task whose decorator option no enqueue accepts: importing the module fails, so
`pgworkerd check` on a config listing it under task_modules refuses it."""

from __future__ import annotations

import pgworkerd


@pgworkerd.task(max_attempts=0)
def never_attempted(job: pgworkerd.Job) -> None:
    return None
