"""Helpers for your own test suite: run the queued jobs of a database inline, in the test
process, and check what was enqueued. See docs/testing.md.

`drain` is the daemon's own path, not a fake: the claim, success and failure writes
are the daemon's statements (`JobStore`), the handlers come from the config's registry
built as a worker builds it (`handlers.load_registry`, then `handlers.child_loader` for
the tasks of `django:`), a handler is called and its outcome decided by the code
the worker uses (`execution.Executor`), and a failure is written as the worker writes
it (`worker.outcome_writer.write_unsuccessful`). What it leaves out is what a daemon
adds around jobs: processes, leases renewed, runtime limits, rescues.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import psycopg

from pgworkerd import handlers, progress
from pgworkerd.client.producer import default_schema, schema_of
from pgworkerd.config import Config
from pgworkerd.job import Job, Lease
from pgworkerd.storage import migrations
from pgworkerd.storage.reads import Reads
from pgworkerd.storage.store import Backoff, JobStore
from pgworkerd.worker.execution import (
    Executor,
    OutcomeKind,
    outcome_of_undecodable,
    outcome_of_unknown_kind,
    runnable,
)
from pgworkerd.worker.outcome_writer import write_unsuccessful

CLAIM_BATCH = 100
WORKER_NAME = "pgworkerd.testing"


@dataclass(frozen=True, slots=True)
class Drained:
    """One job that `drain` ran, and what became of it."""

    job_id: int
    kind: str
    queue: str
    attempt: int  # the start this was (1 for a first run)
    outcome: OutcomeKind  # succeeded, retry, discarded or failed
    state: str  # where the job is now: succeeded, queued (to run again later), dead
    result: Any = None  # the stored result of a success, decoded
    error: str | None = None  # the error of any other outcome (a traceback for failed)


def drain(
    conn: psycopg.Connection[Any],
    config: Config,
    queue: str | None = None,
    *,
    max_jobs: int = 10_000,
) -> list[Drained]:
    """Run every job that is ready now in `queue` (None: every queue the config
    declares), one at a time in claim order, in this process; returns what each did, in
    the order they ran.

    Jobs that the handlers enqueue meanwhile run in the same call when they are ready.
    Each job runs at most once per call: a failed job goes back to its queue with the
    config's backoff (or its Retry delay) and runs in a later call once that has passed,
    so a handler that always fails cannot make `drain` loop; call it again to run the
    next attempts. Jobs scheduled for later (run_at in the future) are left alone.
    `job.progress()` is written at once, on `conn`.

    Use an autocommit connection, as the daemon does: on one inside a transaction, the
    jobs and their outcomes are only in that transaction (which handlers opening their
    own connections do not see).
    """
    registry = _registry(config)
    schema = config.database.schema_name
    store = JobStore(
        schema, backoff=Backoff(config.defaults.backoff_base, config.defaults.backoff_max)
    )
    if queue is not None:
        queues = [queue]
    else:
        queues = sorted(config.queues, key=lambda q: -config.queues[q].priority)
    executor = Executor()
    previous_sink = progress.install(progress.DirectProgress(conn, schema))
    ran: list[Drained] = []
    seen: set[int] = set()
    # Jobs claimed again after they ran in this call (a Retry or Snooze of 0 s): held
    # until the call ends, then back as they were, uncharged. Given back at once, they
    # came first in the next claim too, and a claim of nothing else ended the call
    # with ready jobs behind them unrun.
    held: list[Lease] = []
    with default_schema(schema):  # the jobs handlers enqueue go where drain looks
        try:
            while len(ran) < max_jobs:
                batch = store.claim(
                    conn,
                    queues=queues,
                    limit=CLAIM_BATCH,
                    lease_ttl_s=config.lease_ttl,
                    worker=WORKER_NAME,
                    max_attempts=[config.max_attempts_for(q) for q in queues],
                )
                if not batch:
                    break
                fresh = [job for job in batch if job.id not in seen][: max_jobs - len(ran)]
                fresh_ids = {job.id for job in fresh}
                held += [job.lease for job in batch if job.id in seen]
                # Beyond max_jobs: back as they were, uncharged.
                store.release(conn, [job.lease for job in batch if job.id not in seen | fresh_ids])
                for position, job in enumerate(fresh):
                    seen.add(job.id)
                    ran.append(_run(conn, store, executor, registry.get(job.kind), job))
                    if len(ran) >= max_jobs:
                        store.release(conn, [j.lease for j in fresh[position + 1 :]])
                        break
        finally:
            progress.install(previous_sink)
            executor.close()
            if held:
                store.release(conn, held)
    return ran


def _registry(config: Config) -> dict[str, handlers.Handler]:
    """The handlers a worker of `config` runs: those of `handlers` and `task_modules`,
    then what a worker child loads after its fork (handlers.child_loader: the tasks of
    `django:`), with the worker's own checks (a kind claimed twice is refused).
    Without the second part, a Django task's job ended dead, "no handler configured"."""
    registry = handlers.load_registry(config.handlers, config.task_modules)
    loader = handlers.child_loader(config, registry)
    if loader is None:
        return dict(registry)
    return {**registry, **loader(WORKER_NAME)}


def _run(
    conn: psycopg.Connection[Any],
    store: JobStore,
    executor: Executor,
    handler: handlers.Handler | None,
    job: Job,
) -> Drained:
    if handler is None:
        outcome = outcome_of_unknown_kind(job)
    elif not runnable(job):
        outcome = outcome_of_undecodable(job)
    else:
        outcome = executor.run(handler, job)
    drained = Drained(job.id, job.kind, job.queue, job.attempt, outcome.kind, "lost")
    if outcome.kind == "succeeded":
        if job.id in store.complete(conn, [(job.lease, outcome.result_json)]):
            result = None if outcome.result_json is None else json.loads(outcome.result_json)
            return dataclasses.replace(drained, state="succeeded", result=result)
        return drained
    written = write_unsuccessful(store, conn, job, outcome)
    state = "lost" if written is None else written.state
    return dataclasses.replace(drained, state=state, error=outcome.error)


def migrate(conn: psycopg.Connection[Any], schema: str | None = None) -> list[int]:
    """Create pgworkerd's schema on `conn`, or bring it up to date, as `pgworkerd
    migrate` does: for a test fixture. `schema` defaults as enqueue's does. Returns the
    versions applied (none when it was current)."""
    return [m.version for m in migrations.migrate(conn, schema_of(schema))]


def assert_enqueued(
    conn: psycopg.Connection[Any],
    kind: str,
    payload_subset: Any = None,
    *,
    states: tuple[str, ...] = ("queued",),
    schema: str | None = None,
) -> dict[str, Any]:
    """The newest job of `kind` in one of `states` whose payload contains
    `payload_subset` (PostgreSQL's jsonb containment: every key given, with the value
    given, nested objects alike; None: any payload). AssertionError naming the jobs of
    that kind there are, when none matches. The row has id, queue, kind, state,
    payload, run_at and priority. `schema` defaults as enqueue's does."""
    reads = Reads(schema_of(schema))
    subset = None if payload_subset is None else json.dumps(payload_subset)
    found = reads.enqueued_matching(
        conn, kind=kind, states=states, payload_subset_json=subset, limit=1
    )
    if found:
        return found[0]
    others = reads.enqueued_matching(
        conn, kind=kind, states=states, payload_subset_json=None, limit=10
    )
    wanted = f"no {'/'.join(states)} job of kind {kind!r}"
    if not others:
        raise AssertionError(f"{wanted} at all")
    listed = "; ".join(f"job {r['id']}: {json.dumps(r['payload'])}" for r in others)
    raise AssertionError(f"{wanted} whose payload contains {subset}; there are: {listed}")
