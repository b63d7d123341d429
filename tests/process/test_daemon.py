"""`pgworkerd run` as a real process tree against the real server: jobs, order, retries,
runtime kills, crashes, and what the signals do."""

from __future__ import annotations

import signal
import time

import pgworkerd
from tests.daemon import history, job, job_in_state, states, wait_until


def test_two_hundred_jobs_succeed_with_two_workers_and_readable_titles(start_daemon, history_conn):
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {"n": n}} for n in range(200)]
    )
    daemon = start_daemon()
    workers = daemon.wait_for_workers(2)
    wait_until(lambda: states(history_conn) == {"succeeded": 200}, what="200 jobs succeeded")

    titles = daemon.titles()
    assert titles == ["pgworkerd: worker default #1 idle", "pgworkerd: worker default #2 idle"]
    import psutil

    assert " ".join(psutil.Process(daemon.pid).cmdline()).strip() == "pgworkerd: supervisor"
    pids = {row[3] for row in history(history_conn)}
    assert pids <= {w.pid for w in workers} and len(pids) == 2, "both workers took jobs"
    assert job(history_conn, ids[0])["result"]["pid"] in pids
    assert {row[1] for row in history(history_conn)} == {1}, "each ran once, attempt 1"

    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert daemon.alive_children() == []


def test_a_handler_finds_the_public_api_loaded_before_the_fork(start_daemon, history_conn):
    """`import pgworkerd` loads each public name on first use; the daemon loads them all
    before it forks, so a handler calling pgworkerd.result or cancel does not import
    their modules in every worker, after the fork."""
    probe = pgworkerd.enqueue(history_conn, "public_names_not_loaded", {})
    daemon = start_daemon()
    wait_until(job_in_state(history_conn, probe, "succeeded"), what="the probe job")
    assert job(history_conn, probe)["result"] == []
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_worker_sets_its_start_up_heap_aside_from_the_collector(start_daemon, history_conn):
    """The supervisor's and the worker's start-up objects (modules, psycopg, the config)
    live as long as the process: frozen (supervisor/osutil.py), a full collection no
    longer walks them. Before, it walked them all, 13-47 ms a pass, and a job woken
    meanwhile waited for it."""
    probe = pgworkerd.enqueue(history_conn, "collector_generations", {})
    daemon = start_daemon()
    wait_until(job_in_state(history_conn, probe, "succeeded"), what="the probe job")
    seen = job(history_conn, probe)["result"]
    assert seen["frozen"] > 20_000, seen
    assert seen["walked"] < seen["frozen"] / 5, seen
    assert seen["workers"] == 0, "the worker's own boot (after the fork) is frozen too"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_jobs_a_handler_enqueues_go_to_the_schema_of_its_daemon(start_daemon, history_conn):
    """With database.schema set in the config file alone, a handler's pgworkerd.enqueue
    went to `pgworkerd`: another application's jobs table, or none."""
    from pgworkerd.storage.migrations import migrate

    migrate(history_conn, "app_a")
    first = pgworkerd.Producer(schema="app_a").enqueue(history_conn, "follow_up", {})
    daemon = start_daemon(database={"schema": "app_a"})

    def both_succeeded() -> bool:
        rows = history_conn.execute("SELECT id, kind, state FROM app_a.jobs ORDER BY id")
        return rows.fetchall() == [
            (first, "follow_up", "succeeded"),
            (first + 1, "record", "succeeded"),
        ]

    wait_until(both_succeeded, what="the job and its follow-up, in app_a")
    assert history_conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


# Imported by the supervisor only for what uses them, before its fork: /metrics
# (http.listen) and cron entries. A worker inherits every module its supervisor
# imported, and counts it in its RSS (bench: worker RSS after 100,000 jobs).
OPTIONAL_LIBRARIES = ["prometheus_client", "croniter", "dateutil"]


def test_a_worker_carries_no_library_its_daemon_does_not_use(start_daemon, history_conn):
    probe = pgworkerd.enqueue(history_conn, "modules_loaded", {"names": OPTIONAL_LIBRARIES})
    daemon = start_daemon()
    wait_until(job_in_state(history_conn, probe, "succeeded"), what="the probe job")
    assert job(history_conn, probe)["result"] == []
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_daemon_that_serves_metrics_and_runs_cron_entries_loads_them(start_daemon, history_conn):
    """The other side of the test above: configured, each is loaded before the fork
    (the workers share its pages), and /metrics answers."""
    from pgworkerd.storage.embedded import free_port
    from tests.process.test_http import get

    port = free_port()
    probe = pgworkerd.enqueue(history_conn, "modules_loaded", {"names": OPTIONAL_LIBRARIES})
    daemon = start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        periodic=[{"kind": "noop", "cron": "0 3 * * *"}],
    )
    wait_until(job_in_state(history_conn, probe, "succeeded"), what="the probe job")
    assert job(history_conn, probe)["result"] == OPTIONAL_LIBRARIES
    status, text = get(port, "/metrics")
    assert status == 200 and "pgworkerd_jobs_succeeded_total" in text, (status, text)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_one_worker_runs_jobs_in_priority_order(start_daemon, history_conn):
    now = history_conn.execute("SELECT now()").fetchone()[0]
    from datetime import timedelta

    specs = [
        ("low", -1, None),
        ("high", 5, None),
        ("mid-old", 2, now - timedelta(minutes=5)),
        ("mid-new", 2, None),
        ("highest", 9, None),
    ]
    ids = {
        name: pgworkerd.enqueue(history_conn, "record", {}, priority=p, run_at=at)
        for name, p, at in specs
    }
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 1}])
    wait_until(lambda: states(history_conn) == {"succeeded": 5}, what="all jobs done")
    order = [row[0] for row in history(history_conn)]
    by_id = {v: k for k, v in ids.items()}
    assert [by_id[i] for i in order] == ["highest", "high", "mid-old", "mid-new", "low"]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_queue_priority_wins_across_queues(start_daemon, history_conn):
    bulk = pgworkerd.enqueue_many(
        history_conn,
        [{"kind": "record", "payload": {}, "queue": "bulk", "priority": 100} for _ in range(3)],
    )
    urgent = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}, "queue": "urgent"} for _ in range(3)]
    )
    daemon = start_daemon(
        queues={"bulk": {}, "urgent": {"priority": 10}},
        workers=[{"queues": ["bulk", "urgent"], "concurrency": 1}],
    )
    wait_until(lambda: states(history_conn) == {"succeeded": 6}, what="all jobs done")
    assert [row[0] for row in history(history_conn)] == urgent + bulk
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_failures_retry_with_backoff_then_dead_letter(start_daemon, history_conn):
    dead = pgworkerd.enqueue(history_conn, "fail", {}, max_attempts=3)
    flaky = pgworkerd.enqueue(history_conn, "fail_then_succeed", {"succeed_at": 3})
    asynchronous = pgworkerd.enqueue(history_conn, "record_async", {})
    daemon = start_daemon()
    wait_until(job_in_state(history_conn, dead, "dead"), what="the failing job dead")
    wait_until(job_in_state(history_conn, flaky, "succeeded"), what="the flaky job succeeded")
    wait_until(job_in_state(history_conn, asynchronous, "succeeded"), what="async job")

    row = job(history_conn, dead)
    assert row["attempt"] == 3
    assert "RuntimeError: failing on purpose, attempt 3" in row["last_error"]
    assert "Traceback" in row["last_error"]
    assert [e["attempt"] for e in row["errors"]] == [1, 2, 3]
    assert [r[1] for r in history(history_conn, dead)] == [1, 2, 3]
    flaky_row = job(history_conn, flaky)
    assert flaky_row["attempt"] == 3 and flaky_row["result"] == "finally"
    assert job(history_conn, asynchronous)["result"] == "async ok"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_discard_and_unknown_kind_are_dead_at_once(start_daemon, history_conn):
    discarded = pgworkerd.enqueue(history_conn, "discard", {})
    unknown = pgworkerd.enqueue(history_conn, "os.system", {"cmd": "touch /tmp/pwned"})
    daemon = start_daemon()
    wait_until(job_in_state(history_conn, discarded, "dead"), what="discarded job dead")
    wait_until(job_in_state(history_conn, unknown, "dead"), what="unknown kind dead")
    assert job(history_conn, discarded)["last_error"] == "this job can never work"
    assert job(history_conn, discarded)["attempt"] == 1
    row = job(history_conn, unknown)
    assert row["last_error"] == "no handler configured for kind 'os.system'"
    assert row["attempt"] == 1
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_handler_blocking_in_c_with_signals_masked_is_killed_at_its_max_runtime(
    start_daemon, history_conn
):
    hung = pgworkerd.enqueue(history_conn, "block_in_c", {}, max_runtime=1, max_attempts=1)
    daemon = start_daemon()
    worker = daemon.worker_running(hung)
    started = time.monotonic()
    wait_until(job_in_state(history_conn, hung, "dead"), what="the hung job dead")
    killed_after = time.monotonic() - started
    row = job(history_conn, hung)
    assert row["last_error"] == "exceeded its max runtime of 1s: worker killed (SIGKILL)"
    deadline_to_kill_s = (row["finished_at"] - row["started_at"]).total_seconds() - 1
    print(f"hung handler: deadline -> killed and charged: {deadline_to_kill_s:.3f}s")
    assert not worker.is_running() or worker.status() == "zombie"
    assert killed_after < 10, killed_after

    after = pgworkerd.enqueue(history_conn, "record", {})
    wait_until(job_in_state(history_conn, after, "succeeded"), what="pool keeps working")
    daemon.wait_for_workers(2)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_the_soft_timeout_raises_job_timeout_in_the_handler(start_daemon, history_conn):
    slow = pgworkerd.enqueue(history_conn, "catch_timeout", {}, max_runtime=1, max_attempts=1)
    daemon = start_daemon()
    wait_until(job_in_state(history_conn, slow, "dead"), what="timed-out job dead")
    assert [r[2] for r in history(history_conn, slow)] == ["start", "soft_timeout"]
    assert job(history_conn, slow)["last_error"].startswith("JobTimeout")
    assert "killing worker" not in daemon.log(), "it ended at the soft limit"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_sigkill_of_a_child_mid_job_reruns_the_job_as_attempt_two(start_daemon, history_conn):
    victim = pgworkerd.enqueue(history_conn, "sleep_first_attempt", {"seconds": 60})
    daemon = start_daemon()
    worker = daemon.worker_running(victim, started_in=history_conn)
    killed_at = time.time()
    worker.kill()
    wait_until(job_in_state(history_conn, victim, "succeeded"), what="the job run again")
    starts = [r for r in history(history_conn, victim) if r[2] == "start"]
    assert [r[1] for r in starts] == [1, 2]
    row = job(history_conn, victim)
    assert row["attempt"] == 2 and row["result"] == "attempt 2"
    assert "killed by SIGKILL" in row["errors"][0]["error"]
    rerun_after_s = starts[1][4].timestamp() - killed_at
    print(f"SIGKILL of a child -> job running again: {rerun_after_s:.3f}s")
    daemon.wait_for_workers(2)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_poison_job_that_crashes_its_worker_ends_dead_and_respawns_back_off(
    start_daemon, history_conn
):
    poison = pgworkerd.enqueue(history_conn, "crash", {}, max_attempts=3)
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 1}])
    wait_until(job_in_state(history_conn, poison, "dead"), what="poison job dead")
    row = job(history_conn, poison)
    assert row["attempt"] == 3
    assert [e["error"] for e in row["errors"]] == [
        "worker process exited with status 17 while running the job"
    ] * 3
    fine = pgworkerd.enqueue(history_conn, "record", {})
    wait_until(job_in_state(history_conn, fine, "succeeded"), what="a good job after it")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
