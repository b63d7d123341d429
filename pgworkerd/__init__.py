"""pgworkerd: background jobs on the PostgreSQL you already run.

The public API: enqueue jobs in your own transaction (on a psycopg Connection or
AsyncConnection), and the values a handler receives and raises; read a job's result and
wait for its end.
"""

from typing import TYPE_CHECKING

from pgworkerd import _lazy

if TYPE_CHECKING:  # what mypy checks; at run time each name loads on first use
    from pgworkerd.client.key_pauses import pause_key, resume_key
    from pgworkerd.client.operations import cancel, retry
    from pgworkerd.client.pausing import pause_queue, resume_queue
    from pgworkerd.client.producer import (
        EnqueueOptions,
        Producer,
        enqueue,
        enqueue_async,
        enqueue_many,
        enqueue_many_async,
    )
    from pgworkerd.client.results import result, wait, wait_async
    from pgworkerd.client.tasks import Task, task
    from pgworkerd.client.workflows import batch, batch_async, chain, chain_async
    from pgworkerd.errors import InvalidJob, JobNotFound, NoResult, PgworkerdError, WaitError
    from pgworkerd.job import Discard, Job, JobCancelled, JobTimeout, PauseKey, Retry, Snooze

_EXPORTS = {
    "Discard": "pgworkerd.job",
    "EnqueueOptions": "pgworkerd.client.producer",
    "InvalidJob": "pgworkerd.errors",
    "Job": "pgworkerd.job",
    "JobCancelled": "pgworkerd.job",
    "JobNotFound": "pgworkerd.errors",
    "JobTimeout": "pgworkerd.job",
    "NoResult": "pgworkerd.errors",
    "PauseKey": "pgworkerd.job",
    "PgworkerdError": "pgworkerd.errors",
    "Producer": "pgworkerd.client.producer",
    "Retry": "pgworkerd.job",
    "Snooze": "pgworkerd.job",
    "Task": "pgworkerd.client.tasks",
    "WaitError": "pgworkerd.errors",
    "batch": "pgworkerd.client.workflows",
    "batch_async": "pgworkerd.client.workflows",
    "cancel": "pgworkerd.client.operations",
    "chain": "pgworkerd.client.workflows",
    "chain_async": "pgworkerd.client.workflows",
    "enqueue": "pgworkerd.client.producer",
    "enqueue_async": "pgworkerd.client.producer",
    "enqueue_many": "pgworkerd.client.producer",
    "enqueue_many_async": "pgworkerd.client.producer",
    "pause_key": "pgworkerd.client.key_pauses",
    "pause_queue": "pgworkerd.client.pausing",
    "result": "pgworkerd.client.results",
    "resume_key": "pgworkerd.client.key_pauses",
    "resume_queue": "pgworkerd.client.pausing",
    "retry": "pgworkerd.client.operations",
    "task": "pgworkerd.client.tasks",
    "wait": "pgworkerd.client.results",
    "wait_async": "pgworkerd.client.results",
}

__all__ = [
    "Discard",
    "EnqueueOptions",
    "InvalidJob",
    "Job",
    "JobCancelled",
    "JobNotFound",
    "JobTimeout",
    "NoResult",
    "PauseKey",
    "PgworkerdError",
    "Producer",
    "Retry",
    "Snooze",
    "Task",
    "WaitError",
    "batch",
    "batch_async",
    "cancel",
    "chain",
    "chain_async",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "pause_key",
    "pause_queue",
    "result",
    "resume_key",
    "resume_queue",
    "retry",
    "task",
    "wait",
    "wait_async",
]

if not TYPE_CHECKING:  # mypy reads the imports above, not a catch-all __getattr__
    __getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS)
