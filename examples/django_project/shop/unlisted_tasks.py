"""Tasks of a module that pgworkerd.yaml does not list: a worker never runs them (their
jobs end `dead`, "no handler"), whatever a caller enqueues."""

from django.tasks import task

from shop.models import Order


@task
def never(ref: str) -> None:
    Order.objects.create(ref=ref)
