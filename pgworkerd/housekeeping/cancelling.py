"""How the holder of a running job learns it was cancelled.

`jobs_cancel` (storage/sql/queries.sql) ends the job `cancelled` and, in the same statement,
notifies the cancel channel with the job's id and the lease token it was running
under. The supervisor that holds that lease (it LISTENs on the channel beside the
enqueue one) tells the worker, which raises `pgworkerd.JobCancelled` in the handler;
after the grace the process is killed. Behind PgBouncer in transaction mode (no
LISTEN) or when a notification is missed, the next lease renewal is the fallback: a
lease it does not renew is looked up with `JobStore.unrenewed_among`, and a cancelled job
is stopped the same way, not treated as rescued.
"""

from __future__ import annotations

import uuid

from pgworkerd.job import Lease


def leases_in(payload: str) -> list[Lease]:
    """The leases a cancel notification names ("id:token" pairs, space-separated);
    a malformed pair is skipped (the renewal still catches its job)."""
    leases = []
    for pair in payload.split():
        job_id, _, token = pair.partition(":")
        try:
            leases.append(Lease(int(job_id), uuid.UUID(token)))
        except ValueError:
            continue
    return leases
