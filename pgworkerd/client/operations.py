"""The operator's reads and writes: what `pgworkerd status` and `pgworkerd jobs ...` show
and do, and the Python `cancel` and `retry` (the paused queues: pausing.py).

Every read returns plain JSON values (timestamps as ISO 8601 strings, durations as
seconds): the `--json` output is these values as they are, and the human output is
formatted from the same values, so the two always agree. The shapes are documented in
docs/design.md (Operator commands).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgworkerd.client.connections import checked
from pgworkerd.client.producer import check_job_id, schema_of
from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.storage.key_pauses import KeyPauseStore
from pgworkerd.storage.limits import LimitReads, QueueLimits, reported
from pgworkerd.storage.queue_pauses import QueuePauseStore
from pgworkerd.storage.reads import HORIZON_WARN_LEASES, Horizon, Reads
from pgworkerd.storage.states import STATES
from pgworkerd.storage.store import DEFAULT_SCHEMA, JobStore

FINISHED_WINDOW_MIN = 5  # `finished_per_minute` averages over this many minutes
# `status` lists at most this many running jobs that reported progress (longest running
# first): a glance, not a listing; `jobs show ID` has any one job's.
STATUS_PROGRESS_JOBS = 10
STATUS_PAUSED_KEYS = 20  # `pgworkerd keys` lists them all
DEFAULT_LEASE_TTL_S = 30.0  # the config's default, for callers without a config

# The columns `jobs list` shows, in this order.
SUMMARY_KEYS = (
    "id",
    "queue",
    "kind",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "worker",
    "last_error",
)


def cancel(conn: psycopg.Connection[Any], job_id: int, *, schema: str | None = None) -> bool:
    """Cancel a queued or running job; True if it was cancelled. A running job's holder
    is told to stop the handler: whatever outcome it writes later changes nothing (the
    job stays cancelled). Until that handler has ended, the job keeps its place under
    its queue's (or key's) concurrency limit, and `retry` refuses it. Runs in the
    caller's transaction, like `enqueue`; `schema` defaults as `enqueue`'s does
    (`PGWORKERD_DATABASE__SCHEMA`, else `pgworkerd`)."""
    conn, job_id = checked(conn, "cancel"), check_job_id(job_id)
    return JobStore(schema_of(schema)).cancel(conn, [job_id]) == [job_id]


def retry(conn: psycopg.Connection[Any], job_id: int, *, schema: str | None = None) -> bool:
    """Queue a dead or cancelled job again, to run now (with one more attempt if it had
    used them all); True if it was queued. False for a job that is missing, in another
    state, whose unique_key a live job holds meanwhile, or cancelled while it ran and
    whose handler has not ended yet (within the cancel's grace of 3 s, or until its
    lease expires if its worker died): retried then, it could run beside itself."""
    conn, job_id = checked(conn, "retry"), check_job_id(job_id)
    return JobStore(schema_of(schema)).retry_finished(conn, ids=[job_id]) == [job_id]


class Operations:
    """The operator's statements over one schema."""

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        self.store = JobStore(schema)
        self._reads = Reads(schema)
        self._pauses = QueuePauseStore(schema)
        self._key_pauses = KeyPauseStore(schema)
        self._limits = LimitReads(schema)

    def status(
        self,
        conn: psycopg.Connection[Any],
        periodic: Sequence[PeriodicEntry] = (),
        *,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> dict[str, Any]:
        """Queues, live daemons, the `periodic` entries of the caller's config, what
        holds back vacuum (warned of past HORIZON_WARN_LEASES times the config's
        lease_ttl), and the config's limited queues (`limits`): their limits, running
        jobs, starts in the rate's current window, ready jobs and those held back."""
        rows = self._reads.status(
            conn,
            progress_limit=STATUS_PROGRESS_JOBS,
            periodic_keys=[entry.key for entry in periodic],
        )
        paused = self._pauses.paused(conn)
        queue_rows = rows.queues
        # A paused queue without jobs is shown too: the pause is what the operator looks for.
        queue_rows += [_no_jobs(name) for name in paused.keys() - {r["queue"] for r in queue_rows}]
        last = {row["entry_key"]: row for row in rows.periodic_last}
        # One more than shown: whether to say that there are more.
        paused_keys = self._key_pauses.holding(conn, limit=STATUS_PAUSED_KEYS + 1)
        return {
            "at": json_value(rows.now),
            "queues": [
                _queue_status(row, paused.get(row["queue"]))
                for row in sorted(queue_rows, key=lambda r: str(r["queue"]))
            ],
            "daemons": [_daemon_status(row) for row in rows.daemons],
            "paused_keys": [
                {key: json_value(row[key]) for key in row}
                for row in paused_keys[:STATUS_PAUSED_KEYS]
            ],
            "paused_keys_more": len(paused_keys) > STATUS_PAUSED_KEYS,
            "progress": [{key: json_value(row[key]) for key in row} for row in rows.progress],
            "periodic": [_periodic_status(e, last.get(e.key), rows.now) for e in periodic],
            "horizon": _horizon_status(rows.horizon, lease_ttl_s),
            "jobs_table": _table_status(rows.jobs_table),
            "limits": [
                reported(row, limits or {}) for row in self._limits.sample(conn, limits or {})
            ],
        }

    def list_jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        state: str | None = None,
        queue: str | None = None,
        kind: str | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        rows = self._reads.jobs(conn, state=state, queue=queue, kind=kind, limit=limit)
        return [{key: json_value(row[key]) for key in SUMMARY_KEYS} for row in rows]

    def show(self, conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any] | None:
        row = self.store.get(conn, job_id)
        if row is None:
            return None
        detail = job_detail(row)
        related = self.store.dependencies(conn, job_id)
        for relation, key in (("dependency", "dependencies"), ("dependent", "dependents")):
            detail[key] = [
                {"id": r["id"], "state": r["state"], "kind": r["kind"]}
                for r in related
                if r["relation"] == relation
            ]
        return detail

    def states(self, conn: psycopg.Connection[Any], ids: Sequence[int]) -> dict[int, str]:
        return self._reads.states(conn, ids)

    def cancel(self, conn: psycopg.Connection[Any], ids: Sequence[int]) -> list[int]:
        return self.store.cancel(conn, ids)

    def retry(
        self,
        conn: psycopg.Connection[Any],
        *,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
    ) -> list[int]:
        return self.store.retry_finished(conn, ids=ids, queue=queue)


def job_detail(row: dict[str, Any]) -> dict[str, Any]:
    """Everything known about one job, as JSON values. The lease token (the fence of
    the holder's writes) is left out; whether the job is leased is `lease_expires_at`."""
    return {
        "id": row["id"],
        "queue": row["queue"],
        "kind": row["kind"],
        "state": row["state"],
        "priority": row["priority"],
        "payload": row["payload"],
        "attempt": row["attempt"],
        "max_attempts": row["max_attempts"],
        "max_runtime_s": json_value(row["max_runtime"]),
        "unique_key": row["unique_key"],
        "key": row["key"],
        "worker": row["worker"],
        "lease_expires_at": json_value(row["lease_expires_at"]),
        "created_at": json_value(row["created_at"]),
        "run_at": json_value(row["run_at"]),
        "started_at": json_value(row["started_at"]),
        "finished_at": json_value(row["finished_at"]),
        "last_error": row["last_error"],
        "errors": row["errors"],
        "result": row["result"],
        "progress": row["progress"],
        "progress_stage": row["progress_stage"],
        "progress_at": json_value(row["progress_at"]),
        "after_failure": row.get("after_failure"),
    }


def json_value(value: Any) -> Any:
    """A database value as JSON: ISO 8601 for times, seconds for intervals."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _queue_status(row: dict[str, Any], paused_at: datetime | None) -> dict[str, Any]:
    return {
        "queue": row["queue"],
        "counts": {state: int(row[state]) for state in STATES},
        "oldest_ready_age_s": row["oldest_ready_age_s"],
        "finished_per_minute": round(int(row["finished_5m"]) / FINISHED_WINDOW_MIN, 2),
        "paused": paused_at is not None,
        "paused_at": json_value(paused_at),
    }


def _no_jobs(queue: str) -> dict[str, Any]:
    """A row of jobs_status_by_queue for a queue that no job names."""
    return {
        "queue": queue,
        **dict.fromkeys(STATES, 0),
        "oldest_ready_age_s": None,
        "finished_5m": 0,
    }


def _periodic_status(
    entry: PeriodicEntry, row: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    schedule = entry.schedule()
    return {
        "key": entry.key,
        "name": entry.name,
        "kind": entry.kind,
        "queue": entry.queue,
        "schedule": schedule.describe(),
        "missed": entry.missed,
        # None: no daemon has run this entry yet (it is registered at its first round).
        "last_slot_at": json_value(row["last_slot_at"]) if row else None,
        "last_job_id": row["last_job_id"] if row else None,
        "next_slot_at": json_value(schedule.next_after(now)),
    }


def _horizon_status(horizon: Horizon | None, lease_ttl_s: float) -> dict[str, Any] | None:
    if horizon is None:
        return None
    warning = None
    if horizon.too_old(lease_ttl_s):
        end_it = f": SELECT pg_terminate_backend({horizon.pid})" if horizon.pid else ""
        limit_s = HORIZON_WARN_LEASES * lease_ttl_s
        warning = (
            f"held over {HORIZON_WARN_LEASES} x lease_ttl ({limit_s:g}s): "
            "vacuum cannot remove the jobs finished since it began, and claims walk past "
            f"them; end it{end_it}"
        )
    return {**dataclasses.asdict(horizon), "describe": horizon.describe(), "warning": warning}


def _table_status(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "live_tuples": row["live_tuples"],
        "dead_tuples": row["dead_tuples"],
        "last_vacuum_at": json_value(row["last_vacuum_at"]),
    }


def _daemon_status(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "hostname": row["hostname"],
        "pid": row["pid"],
        "started_at": json_value(row["started_at"]),
        "heartbeat_at": json_value(row["heartbeat_at"]),
        "heartbeat_age_s": row["heartbeat_age_s"],
        **daemon_info(row),
    }


def daemon_info(row: dict[str, Any]) -> dict[str, Any]:
    """What a daemons row's `info` (the supervisor's heartbeat) says: its state, its
    workers and the jobs running, None for what it does not say; for `pgworkerd status`
    and the web overview."""
    info = row["info"] if isinstance(row["info"], dict) else {}
    running = info.get("running")
    return {
        "state": info.get("state"),
        "workers": info.get("workers"),
        # From the daemon's heartbeat: a job's `worker` names a pool slot, not the daemon.
        "jobs_running": running if isinstance(running, int) else None,
    }
