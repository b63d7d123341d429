"""The public API's types: what mypy and editors read. At run time each name is
loaded on first use (pgworkerd/__init__.py), from the module this file names."""

from .client.key_pauses import pause_key, resume_key
from .client.operations import cancel, retry
from .client.pausing import pause_queue, resume_queue
from .client.producer import (
    EnqueueOptions,
    Producer,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)
from .client.results import result, wait, wait_async
from .client.tasks import Task, task
from .client.workflows import batch, batch_async, chain, chain_async
from .errors import InvalidJob, JobNotFound, NoResult, PgworkerdError, WaitError
from .job import Discard, Job, JobCancelled, JobTimeout, PauseKey, Retry, Snooze

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
