"""A task module that imports a Django model at its top level, listed under task_modules
(tests/django/test_daemon_config.py): the supervisor imports it before Django is set up."""

from __future__ import annotations

from shop.models import Order

import pgworkerd


@pgworkerd.task
def count_orders(job: pgworkerd.Job) -> int:
    return int(Order.objects.count())
