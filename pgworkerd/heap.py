"""The daemon's processes and Python's cyclic garbage collector: what each process has
built by the end of its start-up is set aside from the collector's full passes.

Why: a full (oldest-generation) collection walks every container object the process
holds. The supervisor's and a worker's start-up leave 50,000 and more of them (the
imported modules, psycopg, pydantic's models, the config; a Django project's apps many
more), so each full pass took 13-47 ms on the bench machine, and the collector runs one
every few seconds in a process that keeps allocating (the supervisor's housekeeping, a
worker's jobs). A job woken during one waited for it: the slowest jobs of the idle
latency runs (bench/results/issue23-round23-20261129.md). Those objects live as long as
the process, so walking them finds nothing; `gc.freeze()` moves them to the permanent
generation, which no collection walks, and a full pass then walks only what was made
since.

Here, not in either side, because both the supervisor and the worker call it.
"""

from __future__ import annotations

import gc


def freeze_start_up_heap() -> None:
    """Collect once (start-up's own garbage must not be frozen with the rest: a frozen
    object is never collected), then move every object still tracked to the permanent
    generation. Called when a process has finished starting: objects frozen then are
    the process's own for its life, and what it builds later (a reload's config, a
    job's objects) is collected as before. In the supervisor, before it forks: the
    children inherit the frozen generation, so their own call walks only what their
    boot added, and their collections no longer write to the pages of the objects they
    share with the supervisor (copy-on-write keeps them shared)."""
    gc.collect()
    gc.freeze()
