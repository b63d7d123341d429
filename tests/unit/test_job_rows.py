"""A claim's row becomes a Job (storage/store.py's _job_from_row): every field must be
set, each to its column's value."""

from __future__ import annotations

import uuid
from collections import namedtuple
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from pgworkerd.job import Job
from pgworkerd.storage.store import _job_from_row, _jobs_in_claim_order

# claim_update's RETURNING columns (sql/queries.sql), in its order.
Row = namedtuple(
    "Row",
    "id queue kind payload_json priority attempt max_attempts max_runtime_s run_at created_at "
    "lease_token queue_ord key trace_context after_ids",
)


def _row(**overrides: object) -> Any:
    values: dict[str, object] = {
        "id": 7,
        "queue": "q",
        "kind": "k",
        "payload_json": '{"i": 1}',
        "priority": 3,
        "attempt": 2,
        "max_attempts": 9,
        "max_runtime_s": 12.5,
        "run_at": datetime(2026, 11, 25, 1, 2, 3, tzinfo=UTC),
        "created_at": datetime(2026, 11, 24, 1, 2, 3, tzinfo=UTC),
        "lease_token": uuid.UUID(int=42),
        "queue_ord": 4,
        "key": "the-key",
        "trace_context": {"traceparent": "00-ab-cd-01"},
        "after_ids": [5, 6],
    }
    values.update(overrides)
    return Row(**values)


def _as_dict(job: Job) -> dict[str, Any]:
    return {field.name: getattr(job, field.name) for field in fields(Job)}  # unset: raises


def test_every_field_is_set_from_its_column() -> None:
    job = _job_from_row(_row())
    assert _as_dict(job) == _as_dict(
        Job(
            id=7,
            kind="k",
            queue="q",
            payload={"i": 1},
            attempt=2,
            max_attempts=9,
            priority=3,
            max_runtime_s=12.5,
            run_at=datetime(2026, 11, 25, 1, 2, 3, tzinfo=UTC),
            created_at=datetime(2026, 11, 24, 1, 2, 3, tzinfo=UTC),
            key="the-key",
            lease_token=uuid.UUID(int=42),
            queue_order=4,
            trace_context={"traceparent": "00-ab-cd-01"},
            after=(5, 6),
        )
    )
    assert job.lease.token == uuid.UUID(int=42)


def test_no_dependencies_is_an_empty_tuple_and_the_job_stays_frozen() -> None:
    job = _job_from_row(_row(after_ids=None, key=None, trace_context=None))
    assert job.after == () and job.key is None and job.trace_context is None
    try:
        job.attempt = 3  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a claimed Job must stay frozen")
    assert job == Job(**_as_dict(job))


def test_a_claims_jobs_run_by_queue_then_highest_priority_then_run_at_then_id() -> None:
    """_jobs_in_claim_order's three stable sorts give the order of one sort by (queue
    order, -priority, run_at, id), rows in any order, ties on every key but the id."""
    at = [datetime(2026, 11, 28, 1, 0, s, tzinfo=UTC) for s in (0, 1)]
    rows = [
        _row(id=i, queue_ord=qo, priority=pr, run_at=ra)
        for i, (qo, pr, ra) in enumerate(
            (qo, pr, ra) for qo in (2, 1) for pr in (0, 5, -1) for ra in (at[1], at[0])
        )
    ]
    rows += [_row(id=100 + i, queue_ord=1, priority=5, run_at=at[0]) for i in (3, 1, 2)]
    expected = sorted(rows, key=lambda r: (r.queue_ord, -r.priority, r.run_at, r.id))
    for shuffled in (rows, rows[::-1], rows[1::2] + rows[::2]):
        assert [j.id for j in _jobs_in_claim_order(shuffled)] == [r.id for r in expected]
