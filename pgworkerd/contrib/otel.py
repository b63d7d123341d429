"""OpenTelemetry (extra `otel`): a trace begun where a job is enqueued continues in its
handler, as the Celery instrumentation does across a broker.

- At enqueue: a PRODUCER span `send <kind>`, child of the caller's current span; its W3C
  context (`traceparent`, `tracestate`) goes into the job's `trace_context` column,
  never into the payload. Written (and read by the worker) with the W3C TraceContext
  propagator alone, not the application's global one: that one's default also carries
  W3C baggage, application key-values (a user id, an e-mail) that would sit in the jobs
  table for as long as the row is kept.
- In the worker: each handler runs inside a CONSUMER span `process <kind>` whose parent
  is that stored context (every attempt: a retry stays in the same trace), with the
  messaging attributes (system `pgworkerd`, destination = queue, message id = job id),
  the attempt, and a failure recorded on the span: contrib/otel_worker.py, the worker's
  half, which an application that only enqueues does not load.

Whether OpenTelemetry is installed is asked once, when this module loads, without
importing it (importlib.util.find_spec). Without it, `start_send` returns None at once
and `instrument` hands the registry back untouched: the worker runs the bare handlers
and pays nothing per job. With it but no TracerProvider configured (the API alone),
no span is made and no context stored: the spans go wherever the application's
TracerProvider sends them, and there is none.

Nor is OpenTelemetry imported here until a TracerProvider may be configured: setting
one (`trace.set_tracer_provider`, an SDK's or an auto-instrumentation's) imports
`opentelemetry.trace`, so while that module is not loaded, none is, unless
OTEL_PYTHON_TRACER_PROVIDER names one for the API to load at its first use (then the
API is imported at the first enqueue or job, to ask). A daemon or producer that does
not trace loads none of its modules (23 of them, tens of milliseconds at each start).

A provider that OTEL_PYTHON_TRACER_PROVIDER names but that cannot be loaded (not
installed, a typo, a constructor that raises) makes the API raise at each of its calls
(StopIteration for a name it does not find). It never breaks an enqueue or a job: it
is no tracing, said once per process in one line naming the variable
(`env_provider_problem`; the daemon asks before its forks, so its workers inherit the
answer and say nothing), and a provider set in code later still counts.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from importlib.util import find_spec
from typing import Any

# Without importing it: find_spec of a top-level name loads nothing.
AVAILABLE = find_spec("opentelemetry") is not None

# A provider named by the environment is loaded by the API's first use, whoever makes
# it: with this set, the API is imported (at the first enqueue or job) to ask.
PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
PROVIDER_FROM_ENV = PROVIDER_VARIABLE in os.environ
# Where the API looks the name up: the entry points of the installed distributions.
PROVIDER_GROUP = "opentelemetry_tracer_provider"
TRACE_MODULE = "opentelemetry.trace"
_modules = sys.modules
log = logging.getLogger("pgworkerd.otel")

# Why the provider the environment names is not used, once found out; then it is never
# asked for again in this process (nor in its forks).
_env_problem: str | None = None
_env_looked_up = False

SYSTEM = "pgworkerd"
TRACER_NAME = "pgworkerd"


# -- the producer ---------------------------------------------------------------------------


def tracing() -> bool:
    """Whether the application configured a TracerProvider (an SDK's). Asked at each
    enqueue and job, as an application may configure it late (after the fork, say): with
    the API's default provider every span would be a no-op, which costs a handler
    microseconds for nothing, so none is made. Never raises: a provider the environment
    names that cannot be loaded is no tracing (`env_provider_problem`)."""
    trace: Any = _modules.get(TRACE_MODULE)
    if trace is None:
        if not (AVAILABLE and PROVIDER_FROM_ENV):
            return False  # nothing imported the API: nothing set a provider through it
        if _env_provider_unusable():
            return False  # the one the environment names is not there: not imported for it
        try:
            trace = importlib.import_module(TRACE_MODULE)
        except ImportError:
            return False
    if not PROVIDER_FROM_ENV and hasattr(trace, "_TRACER_PROVIDER"):
        # The global provider, once set (by code, or from the environment at its first
        # use), is `trace._TRACER_PROVIDER` and never goes back to None: read directly,
        # as get_tracer_provider() looks the environment up at each call (about 2 us,
        # twenty times a no-op job's call).
        return trace._TRACER_PROVIDER is not None
    if getattr(trace, "_TRACER_PROVIDER", None) is None and _env_provider_unusable():
        return False  # the API would try to load it again, and raise again
    try:
        provider = trace.get_tracer_provider()
    except Exception as exc:  # the environment's provider failed to load
        _give_up(_failed_to_load(exc))
        return False
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def env_provider_problem(*, load: bool = False) -> str | None:
    """Why the TracerProvider that OTEL_PYTHON_TRACER_PROVIDER names cannot be used, in
    one line naming the variable; None when it can, when none is named, or when one was
    set in code (the API then ignores the variable). Not logged: the caller says it.

    The name is looked up once per process among the installed entry points, as the API
    looks it up, without importing OpenTelemetry: `pgworkerd run` asks before its forks,
    and its workers inherit the answer. A provider found may still fail to load: the
    first enqueue or job finds that out (`tracing`), or `load` (`pgworkerd check`) loads
    it now, as they would."""
    global _env_looked_up
    if not (AVAILABLE and PROVIDER_FROM_ENV) or _set_in_code():
        return None
    if not _env_looked_up:
        _env_looked_up = True
        from importlib.metadata import entry_points

        if not entry_points(group=PROVIDER_GROUP, name=os.environ.get(PROVIDER_VARIABLE, "")):
            _set_problem(
                f"no TracerProvider of that name is installed (entry point group {PROVIDER_GROUP})"
            )
    if load and _env_problem is None:
        _load_env_provider()
    return _env_problem


def _env_provider_unusable() -> bool:
    """Whether the environment's provider is known not to load; looked up (and said, in
    one log line) at the first call of this process that did not inherit the answer."""
    if not _env_looked_up and env_provider_problem() is not None:
        log.warning("%s", _env_problem)
    return _env_problem is not None


def _give_up(why: str) -> None:
    """The environment's provider failed to load: said once, never asked for again."""
    if _env_problem is None:
        _set_problem(why)
        log.warning("%s", _env_problem)


def _set_problem(why: str) -> None:
    global _env_problem
    value = os.environ.get(PROVIDER_VARIABLE, "")
    _env_problem = (
        f"{PROVIDER_VARIABLE}={value!r}: {why}; "
        "pgworkerd traces nothing unless a TracerProvider is set in code"
    )


def _failed_to_load(exc: BaseException) -> str:
    return f"the TracerProvider of that name failed to load ({one_line(exc)})"


def _set_in_code() -> bool:
    trace: Any = _modules.get(TRACE_MODULE)
    return trace is not None and getattr(trace, "_TRACER_PROVIDER", None) is not None


def _load_env_provider() -> None:
    """Load the environment's provider as the first enqueue would, for `check`: its
    failure is our line alone (the API's own traceback, logged as it fails, is kept
    out of the command's output)."""
    try:
        trace: Any = importlib.import_module(TRACE_MODULE)
    except ImportError:
        return
    api_log = logging.getLogger("opentelemetry.util._providers")
    disabled, api_log.disabled = api_log.disabled, True
    try:
        trace.get_tracer_provider()
    except Exception as exc:
        _set_problem(_failed_to_load(exc))
    finally:
        api_log.disabled = disabled


def start_send(records: list[dict[str, Any]]) -> Any:
    """Open the PRODUCER span of one enqueue call and write its context into each
    record (`trace_context`); None without OpenTelemetry or a configured TracerProvider.
    End it with `end_send`."""
    if not tracing():
        return None
    from opentelemetry import trace

    kinds = {record["kind"] for record in records}
    queues = {record["queue"] for record in records}
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    if len(queues) == 1:
        attributes["messaging.destination.name"] = next(iter(queues))
    if len(records) > 1:
        attributes["messaging.batch.message_count"] = len(records)
    name = f"send {next(iter(kinds))}" if len(kinds) == 1 else "send"
    # Not made current: the caller's context is left as it was, whatever the steps do.
    span = trace.get_tracer(TRACER_NAME).start_span(
        name, kind=trace.SpanKind.PRODUCER, attributes=attributes
    )
    carrier: dict[str, str] = {}
    w3c_propagator().inject(carrier, context=trace.set_span_in_context(span))
    if carrier:  # empty when there is no valid context to pass on
        for record in records:
            record["trace_context"] = carrier
    return span


@functools.cache
def w3c_propagator() -> Any:
    """The W3C TraceContext propagator (`traceparent`, `tracestate`), the only one a
    job's `trace_context` is written and read with (never baggage: see the top)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def end_send(span: Any, ids: list[int] | None = None, error: BaseException | None = None) -> None:
    """End `start_send`'s span: with the job id (one job), or the error that stopped it."""
    if span is None:
        return
    if error is not None and not isinstance(error, GeneratorExit):
        from opentelemetry.trace import Status, StatusCode

        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, one_line(error)))
    elif ids is not None and len(ids) == 1:
        span.set_attribute("messaging.message.id", str(ids[0]))
    span.end()


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
