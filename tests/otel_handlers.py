"""Handlers for tests/process/test_otel.py, importable as `tests.otel_handlers:<name>`.

Importing this module (in the daemon's supervisor, before any fork) installs an
OpenTelemetry SDK TracerProvider whose exporter writes every ended span to the test's
`spans` table, so the test reads what each worker's spans were: the SDK's own span
objects, exported synchronously as each ends (SimpleSpanProcessor).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import pgworkerd


class TableExporter(SpanExporter):
    """Writes ended spans to the `spans` table (tests/process/test_otel.py makes it) of
    PGWORKERD_TEST_HISTORY_DSN."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with psycopg.connect(os.environ["PGWORKERD_TEST_HISTORY_DSN"], autocommit=True) as conn:
            for span in spans:
                conn.execute(
                    "INSERT INTO spans (name, kind, trace_id, span_id, parent_span_id, status,"
                    " attributes, events) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        span.name,
                        span.kind.name,
                        f"{span.context.trace_id:032x}",
                        f"{span.context.span_id:016x}",
                        f"{span.parent.span_id:016x}" if span.parent else None,
                        span.status.status_code.name,
                        json.dumps(dict(span.attributes or {})),
                        json.dumps([event.name for event in span.events]),
                    ),
                )
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(TableExporter()))
trace.set_tracer_provider(_provider)


def put_back_once(job: pgworkerd.Job) -> str:
    """Puts the job back at its first start (payload["how"]: "snooze" or
    "pause_key"), counted in the `history` table; succeeds the next time."""
    with psycopg.connect(os.environ["PGWORKERD_TEST_HISTORY_DSN"], autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM history WHERE job_id = %s", (job.id,)).fetchone()
        conn.execute(
            "INSERT INTO history (job_id, attempt, pid, event) VALUES (%s, %s, %s, 'start')",
            (job.id, job.attempt, os.getpid()),
        )
    if row is not None and row[0] == 0:
        if job.payload["how"] == "pause_key":
            raise pgworkerd.PauseKey(0.2)
        raise pgworkerd.Snooze(0.2)
    return "ran"


def fail_once(job: pgworkerd.Job) -> str:
    """Fails its first attempt (recorded on that span), succeeds the next."""
    if job.attempt == 1:
        raise ValueError("first attempt fails")
    return "second attempt"


async def succeed_async(job: pgworkerd.Job) -> str:
    span = trace.get_current_span()
    return f"{span.get_span_context().trace_id:032x}"


@pgworkerd.task(kind="otel.async_task_fails")
async def async_task_fails(job: pgworkerd.Job) -> None:
    """An async `@pgworkerd.task` the test names under `handlers:` (the Task object)."""
    raise ValueError("the async task fails")
