"""pgworkerd.testing with Django: `drain` runs the tasks of a config's `django:` section
through the registry a worker builds (handlers.child_loader), in the test process."""

from __future__ import annotations

from django.tasks import TaskResultStatus, default_task_backend

from pgworkerd import config
from pgworkerd.testing import drain

CONFIG = config.parse(
    """
handlers: {}
django: {settings: mysite.settings, tasks: [shop.tasks]}
queues: {drained: {max_attempts: 1}}
"""
)


def test_drain_runs_the_django_tasks_of_the_config(django_dsn, pg):
    from shop.tasks import add, explode, which_attempt

    # A queue of this test's own: the tier's database is shared.
    added = add.using(queue_name="drained").enqueue(20, 22)
    attempt = which_attempt.using(queue_name="drained").enqueue()
    exploded = explode.using(queue_name="drained").enqueue("boom")
    ran = {d.job_id: d for d in drain(pg, CONFIG)}
    assert len(ran) == 3
    assert ran[int(added.id)].state == "succeeded" and ran[int(added.id)].result == 42
    assert ran[int(attempt.id)].result == 1
    assert ran[int(exploded.id)].state == "dead"
    assert "ValueError: boom" in (ran[int(exploded.id)].error or "")
    assert default_task_backend.get_result(added.id).status == TaskResultStatus.SUCCESSFUL
    assert default_task_backend.get_result(added.id).return_value == 42
    failed = default_task_backend.get_result(exploded.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[-1].exception_class_path == "builtins.ValueError"
