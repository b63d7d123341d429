"""The example shop's tables: orders, and a log of the task signals its workers sent."""

from django.db import models


class Order(models.Model):
    ref = models.CharField(max_length=100, unique=True)
    receipt_sent = models.BooleanField(default=False)


class SignalLog(models.Model):
    """One row per task_started / task_finished signal a worker sent."""

    signal = models.CharField(max_length=20)
    task_id = models.CharField(max_length=40)
    status = models.CharField(max_length=20)
