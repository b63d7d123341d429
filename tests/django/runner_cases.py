"""A project's own tests, run by Django's test runner (`python -m django test`), not by
pytest: tests/django/test_test_runner.py runs them, on the test database the runner
creates, as docs/django.md's "Testing your project" shows them."""

from __future__ import annotations

import psycopg
from django.db import connection
from django.tasks import TaskResultStatus
from django.test import TestCase, TransactionTestCase
from shop.tasks import add

from pgworkerd import config
from pgworkerd.testing import assert_enqueued, drain


class EnqueueInATestCase(TestCase):
    def test_an_enqueued_task_is_a_queued_job(self):
        result = add.enqueue(1, 2)
        self.assertEqual(add.get_result(result.id).status, TaskResultStatus.READY)
        # On Django's connection: the job is in the test's transaction.
        assert_enqueued(connection.connection, "shop.tasks.add", {"args": [1, 2]})


class DrainInATransactionTestCase(TransactionTestCase):
    def setUp(self):
        # Django's flush empties the models' tables only: the jobs of earlier tests stay.
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE pgworkerd.jobs")

    def test_drain_runs_the_task(self):
        result = add.enqueue(20, 22)
        self.assertEqual(self.drained(), [("shop.tasks.add", "succeeded", 42)])
        self.assertEqual(add.get_result(result.id).return_value, 42)

    def test_no_job_of_the_previous_test_is_left(self):
        add.enqueue(1, 1)
        self.assertEqual(self.drained(), [("shop.tasks.add", "succeeded", 2)])

    def drained(self):
        cfg = config.parse(
            "django: {settings: tests.django.settings_testrunner, tasks: [shop.tasks]}\n"
            "queues: {default: {}}\n"
        )
        db = connection.settings_dict  # the test database's, once the runner made it
        keys = {"dbname": "NAME", "host": "HOST", "port": "PORT", "user": "USER"}
        params = {key: db[name] for key, name in keys.items()}
        with psycopg.connect(**params, password=db["PASSWORD"], autocommit=True) as conn:
            return [(d.kind, d.state, d.result) for d in drain(conn, cfg)]
