"""OpenTelemetry (contrib/otel.py) across a real `pgworkerd run`: a trace begun in the
producer continues in the handler, on every attempt (a retry included), with the
messaging attributes and the failure recorded; the SDK is the real one, in the test
process (an in-memory exporter) and in the daemon (tests/otel_handlers.py, an exporter
into a table)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pgworkerd
from tests.daemon import REPO, job, wait_until
from tests.process.test_cli import pgworkerd as pgworkerd_cli

# Not imported here: importing it installs the daemon's TracerProvider.
SPANS_TABLE = """
CREATE TABLE spans (
    seq            bigserial PRIMARY KEY,
    name           text,
    kind           text,
    trace_id       text,
    span_id        text,
    parent_span_id text,
    status         text,
    attributes     jsonb,
    events         jsonb
)"""


HANDLERS = {
    "fail_once": "tests.otel_handlers:fail_once",
    "succeed_async": "tests.otel_handlers:succeed_async",
    "put_back_once": "tests.otel_handlers:put_back_once",
    "async_task_fails": "tests.otel_handlers:async_task_fails",
}
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """The test process's spans. The global provider can be set once per process."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


def consumer_spans(conn: Any, job_id: int, count: int) -> list[dict[str, Any]]:
    def read() -> list[dict[str, Any]] | None:
        rows = conn.execute(
            "SELECT name, kind, trace_id, span_id, parent_span_id, status, attributes, events"
            " FROM spans WHERE attributes->>'messaging.message.id' = %s ORDER BY seq",
            (str(job_id),),
        ).fetchall()
        names = ("name", "kind", "trace_id", "span_id", "parent", "status", "attributes", "events")
        return [dict(zip(names, row, strict=True)) for row in rows] if len(rows) >= count else None

    return wait_until(read, what=f"{count} span(s) of job {job_id}")


def test_a_trace_begun_in_the_producer_continues_in_the_handler_across_a_retry(
    start_daemon, history_conn, exporter
):
    history_conn.execute(SPANS_TABLE)
    tracer = trace.get_tracer("the-app")
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = pgworkerd.enqueue(history_conn, "fail_once", {"order": 1})
    trace_id = f"{request.get_span_context().trace_id:032x}"

    (send,) = [s for s in exporter.get_finished_spans() if s.name == "send fail_once"]
    assert send.kind is trace.SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert send.attributes["messaging.system"] == "pgworkerd"
    assert send.attributes["messaging.destination.name"] == "default"
    assert send.attributes["messaging.message.id"] == str(job_id)
    send_span_id = f"{send.context.span_id:016x}"

    stored = job(history_conn, job_id)["trace_context"]
    assert stored["traceparent"].startswith(f"00-{trace_id}-{send_span_id}-")
    assert job(history_conn, job_id)["payload"] == {"order": 1}, "the payload stays the user's"

    start_daemon(handlers=HANDLERS)
    first, second = consumer_spans(history_conn, job_id, 2)
    for attempt, span in enumerate((first, second), start=1):
        assert span["name"] == "process fail_once" and span["kind"] == "CONSUMER"
        assert (span["trace_id"], span["parent"]) == (trace_id, send_span_id)
        assert span["attributes"]["messaging.system"] == "pgworkerd"
        assert span["attributes"]["messaging.destination.name"] == "default"
        assert span["attributes"]["pgworkerd.job.attempt"] == attempt
    assert first["status"] == "ERROR" and first["events"] == ["exception"]
    assert second["status"] == "UNSET" and second["events"] == []
    wait_until(lambda: job(history_conn, job_id)["state"] == "succeeded", what="succeeded")


def test_a_snooze_or_a_pause_key_is_an_event_of_its_span_not_an_error(
    start_daemon, history_conn, exporter
):
    """Like a Retry, they are what the handler asked for: each span stays OK (UNSET)
    with an event saying which; they were recorded as exceptions with status ERROR."""
    history_conn.execute(SPANS_TABLE)
    snoozed = pgworkerd.enqueue(history_conn, "put_back_once", {"how": "snooze"})
    paused = pgworkerd.enqueue(history_conn, "put_back_once", {"how": "pause_key"}, key="k")
    start_daemon(handlers=HANDLERS)
    for job_id, event in ((snoozed, "pgworkerd.snooze"), (paused, "pgworkerd.pause_key")):
        put_back, ran = consumer_spans(history_conn, job_id, 2)
        assert (put_back["status"], put_back["events"]) == ("UNSET", [event])
        assert (ran["status"], ran["events"]) == ("UNSET", [])
        wait_until(lambda j=job_id: job(history_conn, j)["state"] == "succeeded", what="succeeded")


def test_an_enqueue_outside_a_request_starts_the_trace_at_its_producer_span(
    start_daemon, history_conn, exporter
):
    history_conn.execute(SPANS_TABLE)
    job_id = pgworkerd.enqueue(history_conn, "succeed_async", {})
    (send,) = exporter.get_finished_spans()
    assert send.name == "send succeed_async" and send.parent is None
    start_daemon(handlers=HANDLERS)
    (span,) = consumer_spans(history_conn, job_id, 1)
    assert span["parent"] == f"{send.context.span_id:016x}"
    wait_until(lambda: job(history_conn, job_id)["state"] == "succeeded", what="succeeded")
    # The async handler ran inside its span: it read the span's trace id.
    assert job(history_conn, job_id)["result"] == span["trace_id"]


def test_an_async_task_named_under_handlers_fails_inside_its_span(
    start_daemon, history_conn, exporter
):
    """The Task object named under `handlers:` (not through task_modules) is its async
    function: the span holds the run and its failure. It was taken for a plain
    function: the span ended before the coroutine ran (UNSET, no event)."""
    history_conn.execute(SPANS_TABLE)
    job_id = pgworkerd.enqueue(history_conn, "async_task_fails", {}, max_attempts=1)
    start_daemon(handlers=HANDLERS)
    (span,) = consumer_spans(history_conn, job_id, 1)
    assert span["name"] == "process async_task_fails"
    assert (span["status"], span["events"]) == ("ERROR", ["exception"])
    wait_until(lambda: job(history_conn, job_id)["state"] == "dead", what="dead")


def test_a_producer_without_a_tracer_provider_stores_no_context(
    db_dsn, start_daemon, history_conn, tmp_path
):
    """`pgworkerd enqueue` has the API but no TracerProvider configured: no span, no
    context to pass on, the column stays NULL and the handler's span is a root."""
    history_conn.execute(SPANS_TABLE)
    # Not from the repository, whose config names the demo's handlers alone.
    result = pgworkerd_cli(
        "enqueue", "succeed_async", env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.strip())
    assert job(history_conn, job_id)["trace_context"] is None
    start_daemon(handlers=HANDLERS)
    (span,) = consumer_spans(history_conn, job_id, 1)
    assert span["name"] == "process succeed_async" and span["parent"] is None
    wait_until(lambda: job(history_conn, job_id)["state"] == "succeeded", what="succeeded")


def test_without_opentelemetry_nothing_of_it_loads_and_handlers_run_bare(db_dsn):
    """As on a machine without the extra: `sys.modules[name] = None` makes find_spec
    answer None and any import of it fail, as when it is not installed."""
    script = f"""
import sys
sys.modules["opentelemetry"] = None
import psycopg, pgworkerd
from pgworkerd.contrib import otel
from pgworkerd.handlers import load_registry
import tests.handlers
assert not otel.AVAILABLE
assert load_registry({{"noop": "tests.handlers:noop"}})["noop"] is tests.handlers.noop
with psycopg.connect({db_dsn!r}) as conn:
    job_id = pgworkerd.enqueue(conn, "noop", {{}})
    row = conn.execute("SELECT trace_context FROM pgworkerd.jobs WHERE id = %s", (job_id,))
    assert row.fetchone()[0] is None
loaded = [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m]]
assert loaded == [], loaded
print("bare")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "bare"


def test_installed_but_unused_nothing_of_it_loads_until_a_provider_is_set(db_dsn):
    """With the extra installed and no TracerProvider configured, neither the daemon's
    imports, nor loading handlers, nor an enqueue, nor a job load any of OpenTelemetry;
    a provider configured late (after all that) is still found, and spans are made."""
    script = f"""
import sys
import psycopg, pgworkerd
import pgworkerd.cli.main, pgworkerd.supervisor.core, pgworkerd.worker
from pgworkerd.contrib import otel
from pgworkerd.handlers import load_registry

def loaded():
    return [m for m in sys.modules if m.startswith("opentelemetry")]

assert otel.AVAILABLE
registry = load_registry({{"noop": "tests.handlers:noop"}})
with psycopg.connect({db_dsn!r}) as conn:
    job_id = pgworkerd.enqueue(conn, "noop", {{}})
    row = conn.execute("SELECT trace_context FROM pgworkerd.jobs WHERE id = %s", (job_id,))
    assert row.fetchone()[0] is None
job = pgworkerd.Job(id=job_id, kind="noop", queue="default", payload={{}}, attempt=1,
                    max_attempts=5)
assert registry["noop"](job) is None
assert not otel.tracing()
assert loaded() == [], loaded()

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
assert otel.tracing()
registry["noop"](job)
with psycopg.connect({db_dsn!r}) as conn:
    pgworkerd.enqueue(conn, "noop", {{}})
print(sorted(span.name for span in exporter.get_finished_spans()))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['process noop', 'send noop']"


def test_only_the_w3c_trace_context_is_stored_and_read_never_baggage(conn, exporter):
    """The global propagator (by default W3C trace context and W3C baggage) wrote the
    caller's baggage into the job's row too: application key-values, maybe personal
    data (an e-mail here), kept in the jobs table; and the worker read it back into
    the handler's context. Only `traceparent` and `tracestate` go either way."""
    from opentelemetry import baggage, context, propagate
    from opentelemetry.propagators.composite import CompositePropagator

    from pgworkerd.contrib.otel_worker import traced

    token = context.attach(baggage.set_baggage("user.email", "alice@example.com"))
    try:
        with trace.get_tracer("the-app").start_as_current_span("POST /signup"):
            job_id = pgworkerd.enqueue(conn, "read_baggage", {})
    finally:
        context.detach(token)
    stored = job(conn, job_id)["trace_context"]
    assert set(stored) == {"traceparent"}, stored

    # A row written before (or by another producer) with baggage in it: not read. The
    # global propagator here reads nothing at all, so the `process` span finds its
    # parent only if the worker reads the row as it was written (W3C trace context),
    # not through whatever propagator the application installed: with the default
    # global one (which reads baggage too) this half could not fail.
    (send,) = [s for s in exporter.get_finished_spans() if s.name == "send read_baggage"]
    handler = traced(lambda job: dict(baggage.get_all()))  # what its handler would see
    row = pgworkerd.Job(
        id=job_id,
        kind="read_baggage",
        queue="default",
        payload={},
        attempt=1,
        max_attempts=5,
        trace_context={**stored, "baggage": "user.email=alice%40example.com"},
    )
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([]))
    try:
        assert handler(row) == {}
    finally:
        propagate.set_global_textmap(before)
    (process,) = [s for s in exporter.get_finished_spans() if s.name == "process read_baggage"]
    assert process.parent is not None and process.parent.span_id == send.context.span_id
