"""Tasks for the faults a review found in the Django integration (tests/django/
test_faults.py): the daemon of those tests lists this module beside `shop.tasks`. Each
task that has side effects records each run as an Order whose ref starts with the ref it
was given, so that a test counts the runs."""

from __future__ import annotations

import uuid

from django.tasks import task
from django.utils import timezone
from shop.models import Order
from shop.unlisted_tasks import never  # noqa: F401 - imported, not this module's: never runs


def _ran(ref: str) -> None:
    Order.objects.create(ref=f"{ref}-{uuid.uuid4().hex[:8]}")


@task
def returns_a_datetime(ref: str):
    _ran(ref)
    return timezone.now()


@task
async def areturns_a_datetime(ref: str):
    await Order.objects.acreate(ref=f"{ref}-{uuid.uuid4().hex[:8]}")
    return timezone.now()


@task
def sleeps_in_a_query(seconds: float) -> None:
    from django.db import connection

    # No `with`: the cursor's close would fail on the busy connection, and its error
    # replace the JobTimeout (which marks the connection broken: not the case tested).
    connection.cursor().execute("SELECT pg_sleep(%s)", [seconds])


@task
def counts_orders() -> int:
    return Order.objects.count()


@task
async def asleeps_in_a_query(seconds: float) -> None:
    from asgiref.sync import sync_to_async

    # The ORM from async code: in asgiref's thread-sensitive executor, one thread.
    await sync_to_async(sleeps_in_a_query.call)(seconds)


@task
def sleeps(seconds: float) -> str:
    import time

    time.sleep(seconds)
    return "slept"


@task
def returns(ref: str, what: str):
    """Returns JSON pgworkerd cannot keep as it is: a NaN, over 1 MiB, or a NUL."""
    _ran(ref)
    return {"nan": {"ratio": float("nan")}, "big": "x" * (1024 * 1024 + 1), "nul": "a\x00b"}[what]


class Refused(Exception):
    """A project's own exception class."""


@task(queue_name="fragile")
def raises(how: str) -> None:
    """Raises an exception whose traceback does not end with its class."""
    if how == "lines":
        raise ValueError("the first line\nsecond: line")
    if how == "note":
        error = KeyError("k")
        error.add_note("a note: here")
        raise error
    if how == "group":
        raise ExceptionGroup("several", [ValueError("a"), TypeError("b")])
    try:  # "long": the cause's traceback fills the 4000 characters a kept error keeps
        raise KeyError("x" * 5000)
    except KeyError as cause:
        raise Refused("after the long one") from cause


@task(takes_context=True)
def worker_ids_seen(context) -> list[str]:
    return list(context.task_result.worker_ids)


def _begin_and_fail(ref: str) -> None:
    from django.db import connection

    # A transaction begun by hand (not atomic(), which would roll it back) and left.
    connection.cursor().execute("BEGIN")
    raise RuntimeError(f"{ref}: failed inside a transaction")


@task
def begins_and_fails(ref: str) -> None:
    _begin_and_fail(ref)


@task
async def abegins_and_fails(ref: str) -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(_begin_and_fail)(ref)


@task
def records(ref: str) -> None:
    _ran(ref)


@task
async def arecords(ref: str) -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(_ran)(ref)


@task
def echoes(value):
    """Returns its argument (the payload's JSON): a result the test knows."""
    return value


@task
async def aechoes(value):
    return value


def _times(context) -> dict:
    result = context.task_result
    stamps = [result.enqueued_at, result.started_at, result.last_attempted_at]
    return {
        "naive": [timezone.is_naive(stamp) for stamp in stamps],
        "waited_s": (result.started_at - result.enqueued_at).total_seconds(),
    }


@task(takes_context=True)
def times(context) -> dict:
    return _times(context)


@task(takes_context=True)
async def atimes(context) -> dict:
    return _times(context)


def doubles(n: int) -> int:
    return 2 * n


# Bound under another name than its function's: its kind is `...faults.doubles`, where
# the module holds the plain function (tests/django/test_faults.py).
doubles_task = task(doubles)
