"""A task whose kind a `handlers:` entry of the test's config also claims."""

from __future__ import annotations

import pgworkerd


@pgworkerd.task(kind="noop")
def also_noop(job: pgworkerd.Job) -> None:
    return None
