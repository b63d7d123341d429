"""HUP reloads with a real daemon and real signals (docs/configuration.md, "Reloading";
docs/design.md): a load whose import hangs is refused past reload_timeout and the
respawns go on; a HUP that changes nothing replaces no worker; a reload that changes a
start-up-only setting says so."""

from __future__ import annotations

import os
import signal
import time

import psutil

import pgworkerd
from pgworkerd.storage.embedded import free_port
from tests.daemon import BASE_CONFIG, REPO, Daemon, job_in_state, wait_until, write_config
from tests.process.test_http import get, metric

ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def other_worker(daemon: Daemon, old_pid: int) -> psutil.Process | None:
    return next((p for p in daemon.wait_for_workers(1, 40) if p.pid != old_pid), None)


def test_a_reload_whose_import_hangs_is_refused_and_the_respawns_go_on(
    start_daemon, history_conn, tmp_path
):
    """A handler module that never finishes importing (a network call at import time),
    added by a HUP. The respawns waited for the load (no fork while a thread imports):
    a worker killed afterwards was never replaced, for ever, with the health checks
    green. Now the load is refused past reload_timeout, with a line naming the module;
    the worker is replaced, the stuck load shows in /readyz and /metrics, and a later
    HUP is applied."""
    (tmp_path / "hangs_on_import.py").write_text(
        "import time\ntime.sleep(3600)\n\ndef fn(job):\n    return None\n"
    )
    (tmp_path / "quick_import.py").write_text("def fn(job):\n    return 'quick'\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PYTHONDONTWRITEBYTECODE": "1"}
    port = free_port()
    settings = {
        "workers": ONE_WORKER,
        "reload_timeout": "3s",
        "http": {"listen": f"127.0.0.1:{port}"},
    }
    daemon = start_daemon(env=env, **settings)
    (worker,) = daemon.wait_for_workers(1)
    path = tmp_path / "pgworkerd.yaml"
    hanging = {**BASE_CONFIG["handlers"], "hangs": "hangs_on_import:fn"}
    write_config(path, handlers=hanging, **settings)
    daemon.signal(signal.SIGHUP)
    wait_until(lambda: "reload: loading" in daemon.log(), what="the load to start")
    worker.kill()  # while the load hangs

    replaced = wait_until(lambda: other_worker(daemon, worker.pid), 40, "the worker's respawn")
    log = daemon.log()
    assert "reload refused; keeping the running config" in log
    assert "did not finish within reload_timeout (3s)" in log
    assert "importing the module hangs_on_import" in log
    status, body = get(port, "/readyz")
    assert status == 200 and "a reload's load has been stuck" in body, body
    metrics = get(port, "/metrics")[1]
    assert metric(metrics, "pgworkerd_reload_loads_stuck") == 1, metrics
    assert metric(metrics, "pgworkerd_reloads_total", outcome="timed_out") == 1, metrics
    old_config = pgworkerd.enqueue(history_conn, "record", {})
    wait_until(job_in_state(history_conn, old_config, "succeeded"), what="a job of the old config")

    quick = {**BASE_CONFIG["handlers"], "quick": "quick_import:fn"}
    write_config(path, handlers=quick, **settings)
    daemon.signal(signal.SIGHUP)  # a later HUP: applied as ever
    wait_until(lambda: other_worker(daemon, replaced.pid), 40, "the reload's new worker")
    new_kind = pgworkerd.enqueue(history_conn, "quick", {})
    wait_until(job_in_state(history_conn, new_kind, "succeeded"), what="a job of the new handler")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_hup_that_changes_nothing_replaces_no_worker(start_daemon, history_conn, tmp_path):
    """Each HUP started a full set of new workers beside the old ones, which drained
    their running jobs meanwhile: ten HUPs of an unchanged file with 40 s jobs took 2
    workers to 22 (and their connections). The config and the handler modules' files
    unchanged, nothing is replaced; a changed file is a change (test_daemon_signals.py's
    test_a_reload_does_not_re_import_handler_code_a_restart_does pins that)."""
    daemon = start_daemon(workers=ONE_WORKER)
    (worker,) = daemon.wait_for_workers(1)
    running = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 4})
    daemon.worker_running(running, started_in=history_conn)
    for _ in range(3):
        daemon.signal(signal.SIGHUP)
        time.sleep(0.5)
    wait_until(
        lambda: daemon.log().count("reload: nothing changed") == 3, 20, "three unchanged reloads"
    )
    assert [p.pid for p in daemon.workers()] == [worker.pid]
    assert "replacing workers" not in daemon.log()
    wait_until(job_in_state(history_conn, running, "succeeded"), what="the running job")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_hup_after_a_change_to_a_helper_imported_after_the_fork_replaces_the_workers(
    start_daemon, history_conn, tmp_path
):
    """A handler that imports its helper inside its function: the supervisor never
    imports the helper, only the workers do, after the fork. A deploy that changes only
    the helper (same size, its mtime kept as rsync -a and tar keep it) and a HUP must
    replace the workers, which import it afresh: the reload had taken it for "nothing
    changed" (only the supervisor's own modules were stamped, by mtime)."""
    package = tmp_path / "lazypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(
        "def fn(job):\n    from lazypkg import helper\n\n    return helper.VALUE\n"
    )
    helper = package / "helper.py"
    helper.write_text("VALUE = 1\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PYTHONDONTWRITEBYTECODE": "1"}
    handlers = {**BASE_CONFIG["handlers"], "lazy": "lazypkg.jobs:fn"}
    daemon = start_daemon(env=env, workers=ONE_WORKER, handlers=handlers)
    (worker,) = daemon.wait_for_workers(1)
    before = helper.stat()
    helper.write_text("VALUE = 2\n")  # the same size
    os.utime(helper, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    daemon.signal(signal.SIGHUP)
    wait_until(lambda: "replacing workers" in daemon.log(), 20, "the workers' replacement")
    assert "reload: nothing changed" not in daemon.log()
    assert "helper.py" in daemon.log()
    replaced = wait_until(lambda: other_worker(daemon, worker.pid), 40, "a new worker")
    assert replaced is not None
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_reload_that_changes_a_start_up_setting_says_it_keeps_it(
    start_daemon, history_conn, tmp_path
):
    """http.listen moved by a HUP: the old address kept answering and the new one never
    listened, without a word (a trap when /metrics is moved off 0.0.0.0); log_format
    likewise. Both are kept from start-up, and the reload now says so."""
    old_port, new_port = free_port(), free_port()
    daemon = start_daemon(workers=ONE_WORKER, http={"listen": f"127.0.0.1:{old_port}"})
    daemon.wait_for_workers(1)
    write_config(
        tmp_path / "pgworkerd.yaml",
        workers=ONE_WORKER,
        http={"listen": f"127.0.0.1:{new_port}"},
        log_format="json",
    )
    daemon.signal(signal.SIGHUP)
    wait_until(
        lambda: "nothing changed" in daemon.log() or "replacing workers" in daemon.log(),
        what="the reload",
    )
    log = daemon.log()
    keeps = "reload keeps a setting from start-up; restart the daemon to change it"
    assert f"{keeps} setting=http running=listen=127.0.0.1:{old_port}" in log, log
    assert f"{keeps} setting=log_format running=text file=json" in log, log
    assert get(old_port, "/healthz")[0] == 200
    assert get(new_port, "/healthz")[0] == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
