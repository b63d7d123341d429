"""pgworkerd: background jobs on the PostgreSQL you already run.

The public API: enqueue jobs in your own transaction (on a psycopg Connection or
AsyncConnection), and the values a handler receives and raises.
"""

from pgworkerd.errors import InvalidJob, PgworkerdError
from pgworkerd.job import Discard, Job, JobCancelled, JobTimeout, Retry
from pgworkerd.operations import cancel, retry
from pgworkerd.producer import (
    EnqueueOptions,
    Producer,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)

__all__ = [
    "Discard",
    "EnqueueOptions",
    "InvalidJob",
    "Job",
    "JobCancelled",
    "JobTimeout",
    "PgworkerdError",
    "Producer",
    "Retry",
    "cancel",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "retry",
]
