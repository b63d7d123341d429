"""Task functions in `pgworkerd run`: a periodic entry naming a task's kind enqueues it on
schedule and a worker runs it (the registry of task_modules)."""

from __future__ import annotations

from tests.daemon import wait_until


def test_a_periodic_entry_runs_a_task_function(start_daemon, history_conn):
    start_daemon(
        handlers={},
        task_modules=["tests.tasks.shop"],
        queues={"default": {}, "payments": {}},
        periodic=[
            {"kind": "tests.tasks.shop.send_receipt", "every": "1s", "payload": {"to": "cron"}}
        ],
    )

    def succeeded() -> list[tuple[object, ...]]:
        return history_conn.execute(
            "SELECT result FROM pgworkerd.jobs"
            " WHERE kind = 'tests.tasks.shop.send_receipt' AND state = 'succeeded'"
        ).fetchall()

    rows = wait_until(succeeded, what="a periodic task's job succeeded")
    assert rows[0][0] == {"sent_to": "cron", "attempt": 1}
