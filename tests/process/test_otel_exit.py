"""OpenTelemetry spans buffered in a worker when it exits (contrib/otel_worker.py,
`flush_spans`): a worker child ends with os._exit, which runs no atexit handler, so the
SDK's own flush at exit (TracerProvider.shutdown) never ran and every span still in a
BatchSpanProcessor's queue was lost: all of them with max_jobs_per_child: 1, and those
of the last seconds at each drain. The daemon is a real `pgworkerd run`; its handlers'
module (tests/otel_batch_handlers.py) installs the real SDK with a BatchSpanProcessor
that exports only when flushed, into a file the children write."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pgworkerd
from tests.daemon import job, wait_until

HANDLERS = {"batch_noop": "tests.otel_batch_handlers:noop"}
ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def exported(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def succeeded(conn: Any, ids: list[int]) -> bool:
    return all(job(conn, job_id)["state"] == "succeeded" for job_id in ids)


def test_each_recycled_worker_exports_its_spans_before_it_exits(
    start_daemon, history_conn, tmp_path
):
    """max_jobs_per_child: 1: each job's worker exits after it, and its span was lost
    with it (none ever reached the exporter)."""
    span_file = tmp_path / "spans.jsonl"
    ids = [pgworkerd.enqueue(history_conn, "batch_noop", {}) for _ in range(3)]
    start_daemon(
        handlers=HANDLERS,
        workers=ONE_WORKER,
        max_jobs_per_child=1,
        env={"PGWORKERD_TEST_SPAN_FILE": str(span_file)},
    )
    wait_until(lambda: succeeded(history_conn, ids), what="the jobs to succeed")

    # While the daemon runs on: written by each worker on its way out.
    spans = wait_until(
        lambda: (found := exported(span_file)) and len(found) >= 3 and found,
        timeout_s=10,
        what="the three jobs' spans",
    )
    assert sorted(span["job"] for span in spans) == sorted(str(i) for i in ids)
    assert {span["name"] for span in spans} == {"process batch_noop"}
    assert len({span["pid"] for span in spans}) == 3, "one worker each"


def test_a_drained_worker_exports_its_spans_before_it_exits(start_daemon, history_conn, tmp_path):
    """SIGTERM soon after the jobs (before the processor's schedule would have sent
    them): the drain ends with their spans exported."""
    span_file = tmp_path / "spans.jsonl"
    ids = [pgworkerd.enqueue(history_conn, "batch_noop", {}) for _ in range(2)]
    daemon = start_daemon(
        handlers=HANDLERS,
        workers=ONE_WORKER,
        env={"PGWORKERD_TEST_SPAN_FILE": str(span_file)},
    )
    wait_until(lambda: succeeded(history_conn, ids), what="the jobs to succeed")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log()
    assert sorted(span["job"] for span in exported(span_file)) == sorted(str(i) for i in ids)


def test_an_export_that_hangs_does_not_hold_the_drain_past_its_deadline(
    start_daemon, history_conn, tmp_path
):
    """A collector that never answers: the worker gives up flushing before the drain's
    deadline (shutdown_timeout, here shorter than the flush's own bound), says so, and
    exits by itself: the supervisor never has to kill it."""
    ids = [pgworkerd.enqueue(history_conn, "batch_noop", {})]
    daemon = start_daemon(
        handlers=HANDLERS,
        workers=ONE_WORKER,
        shutdown_timeout="2s",
        env={
            "PGWORKERD_TEST_SPAN_FILE": str(tmp_path / "spans.jsonl"),
            "PGWORKERD_TEST_EXPORT_HANGS": "1",
        },
    )
    wait_until(lambda: succeeded(history_conn, ids), what="the job to succeed")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.log()
    log = daemon.log()
    # No timing: a worker still flushing at the deadline is killed by the supervisor,
    # which logs that it reached the shutdown timeout; one that gave up in time
    # exits drained by itself.
    assert "shutdown timeout reached" not in log, log
    assert re.search(r"worker exited .*how=\"exited with status 0\" reason=drained", log), log
    assert log.count("OpenTelemetry spans not exported before the worker exited") == 1, log


def test_a_recycled_worker_with_an_export_that_hangs_exits_after_the_flush_bound(
    start_daemon, history_conn, tmp_path
):
    """A recycle has no deadline of its own: the flush's bound (FLUSH_TIMEOUT_S) is all
    that keeps the seat empty, and the next job runs in a new worker once it passes."""
    from pgworkerd.contrib.otel_worker import FLUSH_TIMEOUT_S

    first = pgworkerd.enqueue(history_conn, "batch_noop", {})
    second = pgworkerd.enqueue(history_conn, "batch_noop", {})
    start_daemon(
        handlers=HANDLERS,
        workers=ONE_WORKER,
        max_jobs_per_child=1,
        defaults={"batch_size": 1},
        env={
            "PGWORKERD_TEST_SPAN_FILE": str(tmp_path / "spans.jsonl"),
            "PGWORKERD_TEST_EXPORT_HANGS": "1",
        },
    )
    wait_until(
        lambda: succeeded(history_conn, [first, second]),
        timeout_s=FLUSH_TIMEOUT_S + 15,
        what="both jobs, the second in the next worker",
    )
    gap = history_conn.execute(
        "SELECT extract(epoch FROM b.started_at - a.finished_at) FROM pgworkerd.jobs a,"
        " pgworkerd.jobs b WHERE a.id = %s AND b.id = %s",
        (first, second),
    ).fetchone()[0]
    assert FLUSH_TIMEOUT_S - 0.5 <= float(gap) < FLUSH_TIMEOUT_S + 5, gap
