"""The shop's tasks, listed in pgworkerd.yaml under `django.tasks`: plain, async, one
that uses the ORM, one that fails, one that reads its context."""

from django.dispatch import receiver
from django.tasks import task
from django.tasks.signals import task_finished, task_started

from shop.models import Order, SignalLog


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


@task
def send_receipt(ref: str) -> int:
    order = Order.objects.get(ref=ref)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return order.pk


@task(queue_name="fragile")
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def which_attempt(context) -> int:
    return context.attempt


@receiver(task_started)
def _log_started(sender, task_result, **kwargs):
    SignalLog.objects.create(signal="started", task_id=task_result.id, status=task_result.status)


@receiver(task_finished)
def _log_finished(sender, task_result, **kwargs):
    SignalLog.objects.create(signal="finished", task_id=task_result.id, status=task_result.status)
