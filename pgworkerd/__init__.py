"""pgworkerd: background jobs on the PostgreSQL you already run.

The public API: enqueue jobs in your own transaction (on a psycopg Connection or
AsyncConnection), and the values a handler receives and raises; read a job's result and
wait for its end.
"""

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
