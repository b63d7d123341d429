"""Handlers for tests/process/test_otel_exit.py, importable as
`tests.otel_batch_handlers:<name>`.

Importing this module (in the daemon's supervisor, before any fork) installs an
OpenTelemetry SDK TracerProvider with a BatchSpanProcessor, as a production setup has
(an OTLP exporter behind it): spans wait in the processor's queue and leave in batches.
Its schedule delay is far longer than any test, so a span reaches the exporter only
when something flushes the processor, which is what a worker must do before it exits.
The exporter appends one JSON line per span (name, pid) to the file
PGWORKERD_TEST_SPAN_FILE names; with PGWORKERD_TEST_EXPORT_HANGS set, an export never
returns, as with a collector that accepts the connection and then never answers.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import pgworkerd

NEVER_BY_SCHEDULE_MS = 600_000  # ten minutes: only a flush exports


class FileExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if os.environ.get("PGWORKERD_TEST_EXPORT_HANGS"):
            threading.Event().wait()  # forever
        lines = "".join(
            json.dumps(
                {
                    "name": span.name,
                    "job": (span.attributes or {}).get("messaging.message.id"),
                    "pid": os.getpid(),
                }
            )
            + "\n"
            for span in spans
        )
        with open(os.environ["PGWORKERD_TEST_SPAN_FILE"], "a") as file:
            file.write(lines)
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(
    BatchSpanProcessor(FileExporter(), schedule_delay_millis=NEVER_BY_SCHEDULE_MS)
)
trace.set_tracer_provider(_provider)


def noop(job: pgworkerd.Job) -> None:
    """Ends at once: its CONSUMER span is all there is to export."""
