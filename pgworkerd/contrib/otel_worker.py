"""OpenTelemetry (extra `otel`), the worker's half: each handler runs inside a CONSUMER
span `process <kind>` whose parent is the context its enqueue stored (contrib/otel.py,
the producer's half, tells whether a TracerProvider is configured). Apart from the
producer's half so that an application that only enqueues loads neither this nor what
a handler receives (`pgworkerd.job` and its progress reporting).

A worker child ends with os._exit (supervisor/children.py), which runs no atexit
handler: the SDK's own flush at exit (TracerProvider.shutdown) never runs there, and
the spans a BatchSpanProcessor still holds would be lost with the process. The worker
calls `flush_spans` on its way out.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pgworkerd import logs
from pgworkerd.contrib.otel import (
    AVAILABLE,
    PROVIDER_FROM_ENV,
    SYSTEM,
    TRACE_MODULE,
    TRACER_NAME,
    one_line,
    tracing,
    w3c_propagator,
)
from pgworkerd.job import Job, PauseKey, Retry, Snooze

if TYPE_CHECKING:
    from opentelemetry.trace import Span

_modules = sys.modules
log = logging.getLogger("pgworkerd.worker")

# The longest a worker on its way out waits for its spans to be exported. A batch
# reaches a live collector in milliseconds (a second with a new TLS connection); the
# SDK's own bounds (an OTLP export's 10 s, a BatchSpanProcessor's 30 s) are made for a
# background thread, not for a process whose seat stays empty until it is gone (a
# recycle) or whose drain an operator waits on. Never past the drain's deadline either
# (see flush_spans).
FLUSH_TIMEOUT_S = 5.0

Handler = Callable[..., Any]


def instrument(registry: Mapping[str, Handler]) -> dict[str, Handler]:
    """The registry with each handler wrapped in its CONSUMER span; the same handlers,
    unwrapped, without OpenTelemetry."""
    if not AVAILABLE:
        return dict(registry)
    return {kind: traced(handler) for kind, handler in registry.items()}


def traced(handler: Handler) -> Handler:
    """`handler` inside a `process <kind>` span; a coroutine function stays one (the
    worker runs it on its event loop). Until something loads the API, each call asks
    no more than that (a dict lookup, not a call: it is paid on every job)."""
    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def run_async(job: Job) -> Any:
            if (TRACE_MODULE not in _modules and not PROVIDER_FROM_ENV) or not tracing():
                return await handler(job)
            with _consumer_span(job):
                return await handler(job)

        return run_async

    @functools.wraps(handler)
    def run(job: Job) -> Any:
        if (TRACE_MODULE not in _modules and not PROVIDER_FROM_ENV) or not tracing():
            return handler(job)
        with _consumer_span(job):
            return handler(job)

    return run


@contextlib.contextmanager
def _consumer_span(job: Job) -> Iterator[Span]:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    # The stored context is the parent; a job enqueued outside any trace starts one.
    # Read as it was written: W3C trace context alone (a row from before that holds
    # baggage too keeps it unread).
    parent = w3c_propagator().extract(job.trace_context) if job.trace_context else None
    attributes: dict[str, str | int] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.id),
        "pgworkerd.job.kind": job.kind,
        "pgworkerd.job.attempt": job.attempt,
        "pgworkerd.job.max_attempts": job.max_attempts,
    }
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"process {job.kind}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,  # recorded below, where Retry, Snooze, PauseKey are told apart
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        # Asked for by the handler, not failures: an event each, and the span stays OK
        # (a Snooze or PauseKey is not even charged: an error there would page someone
        # for a job doing what it was written to do).
        except Retry as exc:
            span.add_event("pgworkerd.retry", {"pgworkerd.retry.after_s": exc.after})
            raise
        except Snooze as exc:
            span.add_event("pgworkerd.snooze", {"pgworkerd.snooze.after_s": exc.after})
            raise
        except PauseKey as exc:
            span.add_event("pgworkerd.pause_key", _pause_attributes(exc))
            raise
        except BaseException as exc:  # JobTimeout and JobCancelled included
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, one_line(exc)))
            raise


def _pause_attributes(exc: PauseKey) -> dict[str, float | str]:
    if exc.until is not None:
        return {"pgworkerd.pause_key.until": exc.until.isoformat()}
    return {"pgworkerd.pause_key.after_s": exc.after or 0.0}


def flush_spans(deadline: float | None = None) -> None:
    """Export the spans the application's TracerProvider still holds (a
    BatchSpanProcessor's queue) before this worker exits; nothing if no provider was
    set (none is imported for it). Waits at most FLUSH_TIMEOUT_S, and never past
    `deadline` (time.monotonic(): the drain's, after which the supervisor kills us);
    logs a line when the spans were not exported by then."""
    trace: Any = _modules.get(TRACE_MODULE)
    if trace is None:
        return  # nothing loaded the API: no provider was set, no span was made
    # The provider set by code, or loaded from OTEL_PYTHON_TRACER_PROVIDER by a first
    # use; read directly, not through get_tracer_provider(), which would load the one
    # the environment names here, only to flush it empty (or fail: tracing() said so).
    provider = getattr(trace, "_TRACER_PROVIDER", None)
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return  # none set, or one without a buffer of its own (the API's no-op)
    timeout_s = FLUSH_TIMEOUT_S
    if deadline is not None:
        timeout_s = min(timeout_s, deadline - time.monotonic())
    outcome: list[BaseException | None] = []
    if timeout_s > 0:
        # In a thread of its own, which os._exit ends: the SDK's force_flush does not
        # honour its timeout (1.45's BatchSpanProcessor exports until its exporter
        # returns), and an exporter stuck on a dead collector would hold the worker.
        flusher = threading.Thread(
            target=_flush,
            args=(force_flush, int(timeout_s * 1000), outcome),
            name="pgworkerd otel flush",
            daemon=True,
        )
        flusher.start()
        flusher.join(timeout_s)
    error = outcome[0] if outcome else None
    if outcome and error is None:
        return
    fields: dict[str, Any] = {"timeout_s": round(max(timeout_s, 0.0), 1)}
    if error is not None:
        fields["error"] = one_line(error)
    logs.event(
        log, logging.WARNING, "OpenTelemetry spans not exported before the worker exited", **fields
    )


def _flush(
    force_flush: Callable[[int], object], timeout_ms: int, outcome: list[BaseException | None]
) -> None:
    try:
        flushed = force_flush(timeout_ms)
    except Exception as exc:  # the exporter's: the worker exits all the same
        outcome.append(exc)
    else:
        # False: the SDK gave up within its own timeout (an exporter that answered
        # late, a processor that could not empty its queue): spans were dropped.
        outcome.append(TimeoutError("force_flush gave up") if flushed is False else None)
