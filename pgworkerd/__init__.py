"""pgworkerd: background jobs on the PostgreSQL you already run.

The public API: enqueue jobs in your own transaction, and the values a handler
receives and raises.
"""

from pgworkerd.errors import InvalidJob, PgworkerdError
from pgworkerd.job import Discard, Job, JobTimeout, Retry
from pgworkerd.producer import Producer, enqueue, enqueue_many

__all__ = [
    "Discard",
    "InvalidJob",
    "Job",
    "JobTimeout",
    "PgworkerdError",
    "Producer",
    "Retry",
    "enqueue",
    "enqueue_many",
]
