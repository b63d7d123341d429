"""/metrics of a real daemon shows the ready jobs a key pause holds back, by queue
(`pgworkerd_jobs_held_by_key_pause`, sampled by the housekeeping), and drops to 0 when
the pause is resumed."""

from __future__ import annotations

import pgworkerd
from pgworkerd.storage.embedded import free_port
from tests.daemon import wait_until
from tests.process.test_http import get, metric


def test_jobs_held_back_by_a_key_pause_are_a_gauge_by_queue(start_daemon, history_conn):
    port = free_port()
    # No worker takes "mail": its jobs stay ready once the pause is resumed.
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        queues={"default": {}, "mail": {}},
        workers=[{"queues": ["default"], "concurrency": 1}],
    )
    pgworkerd.pause_key(history_conn, "tenant:1", 600)
    pgworkerd.enqueue_many(
        history_conn,
        [
            *({"kind": "work", "payload": {}, "key": "tenant:1"} for _ in range(3)),
            *(
                {"kind": "work", "payload": {}, "key": "tenant:1", "queue": "mail"}
                for _ in range(2)
            ),
            {"kind": "work", "payload": {}, "key": "tenant:2", "queue": "mail"},
        ],
    )

    def held(default: int, mail: int) -> bool:
        _, text = get(port, "/metrics")
        return (
            metric(text, "pgworkerd_jobs_held_by_key_pause", queue="default") == default
            and metric(text, "pgworkerd_jobs_held_by_key_pause", queue="mail") == mail
            and f'pgworkerd_jobs_held_by_key_pause{{queue="default"}} {default}.0' in text
        )

    wait_until(lambda: held(3, 2), timeout_s=20, what="3 and 2 jobs held back", interval_s=0.2)
    _, text = get(port, "/metrics")
    assert metric(text, "pgworkerd_queue_depth", queue="mail") == 3

    assert pgworkerd.resume_key(history_conn, "tenant:1")
    wait_until(lambda: held(0, 0), timeout_s=20, what="nothing held back", interval_s=0.2)
