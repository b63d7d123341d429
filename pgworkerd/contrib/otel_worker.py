"""OpenTelemetry (extra `otel`), the worker's half: each handler runs inside a CONSUMER
span `process <kind>` whose parent is the context its enqueue stored (contrib/otel.py,
the producer's half, tells whether a TracerProvider is configured). Apart from the
producer's half so that an application that only enqueues loads neither this nor what
a handler receives (`pgworkerd.job` and its progress reporting).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pgworkerd.contrib.otel import (
    AVAILABLE,
    PROVIDER_FROM_ENV,
    SYSTEM,
    TRACE_MODULE,
    TRACER_NAME,
    one_line,
    tracing,
)
from pgworkerd.job import Job, PauseKey, Retry, Snooze

if TYPE_CHECKING:
    from opentelemetry.trace import Span

_modules = sys.modules

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
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    # The stored context is the parent; a job enqueued outside any trace starts one.
    parent = propagate.extract(job.trace_context) if job.trace_context else None
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
