"""Signals to the supervisor, its death and its freezing: drain, stop, reload, rescue."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

import pgworkerd
from tests.daemon import (
    REPO,
    Daemon,
    daemon_env,
    history,
    job,
    job_in_state,
    states,
    wait_until,
    write_config,
)

ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def test_sigterm_drains_running_jobs_and_leaves_unstarted_ones_queued(start_daemon, history_conn):
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 1.5}} for _ in range(5)]
    )
    daemon = start_daemon(workers=ONE_WORKER)
    daemon.worker_running(ids[0])
    daemon.signal(signal.SIGTERM)
    # The four unstarted jobs of the batch go back at once, not after the running one.
    wait_until(
        lambda: states(history_conn).get("queued") == 4,
        timeout_s=1.2,
        what="the unstarted jobs released at once",
    )
    assert daemon.wait(timeout_s=10) == 0
    assert job(history_conn, ids[0])["state"] == "succeeded"
    for job_id in ids[1:]:
        row = job(history_conn, job_id)
        assert (row["state"], row["attempt"], row["lease_token"]) == ("queued", 0, None)
    assert daemon.alive_children() == []
    assert history_conn.execute("SELECT count(*) FROM pgworkerd.daemons").fetchone()[0] == 0


def test_sigterm_past_shutdown_timeout_requeues_uncharged_and_leaves_no_child(
    start_daemon, history_conn
):
    long_job = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 60})
    daemon = start_daemon(workers=ONE_WORKER, shutdown_timeout="1s")
    worker = daemon.worker_running(long_job)
    signalled = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=10) == 0
    assert time.monotonic() - signalled < 5
    row = job(history_conn, long_job)
    assert (row["state"], row["attempt"], row["lease_token"]) == ("queued", 0, None)
    assert not psutil.pid_exists(worker.pid) or worker.status() == psutil.STATUS_ZOMBIE
    assert daemon.alive_children() == []


def test_a_second_sigterm_stops_at_once(start_daemon, history_conn):
    long_job = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 60})
    daemon = start_daemon(workers=ONE_WORKER, shutdown_timeout="60s")
    daemon.worker_running(long_job)
    daemon.signal(signal.SIGTERM)
    wait_until(lambda: "draining" in daemon.log(), what="the drain to begin")
    daemon.signal(signal.SIGINT)
    assert daemon.wait(timeout_s=10) == 0
    assert job(history_conn, long_job)["state"] == "queued"
    assert job(history_conn, long_job)["attempt"] == 0


def test_sigquit_stops_now(start_daemon, history_conn):
    long_job = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 60})
    daemon = start_daemon(workers=ONE_WORKER, shutdown_timeout="60s")
    daemon.worker_running(long_job)
    daemon.signal(signal.SIGQUIT)
    assert daemon.wait(timeout_s=10) == 0
    assert (job(history_conn, long_job)["state"], job(history_conn, long_job)["attempt"]) == (
        "queued",
        0,
    )
    assert daemon.alive_children() == []


def test_sigkill_of_the_supervisor_takes_the_children_and_another_daemon_rescues(
    start_daemon, history_conn
):
    victim = pgworkerd.enqueue(history_conn, "sleep_first_attempt", {"seconds": 60})
    first = start_daemon("first", lease_ttl="2s")
    first.worker_running(victim, started_in=history_conn)
    children = [p.pid for p in first.workers()]
    first.signal(signal.SIGKILL)
    first.wait(timeout_s=5)
    wait_until(
        lambda: (
            not any(
                psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                for pid in children
            )
        ),
        timeout_s=5,
        what="the children to die with the supervisor",
    )
    assert job(history_conn, victim)["state"] == "running", "nobody settled it: lease pending"

    second = start_daemon("second", lease_ttl="2s")
    wait_until(job_in_state(history_conn, victim, "succeeded"), what="the rescue and rerun")
    row = job(history_conn, victim)
    assert row["attempt"] == 2 and row["result"] == "attempt 2"
    assert "lease expired" in row["errors"][0]["error"]
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_a_frozen_host_cannot_overwrite_the_outcome_of_the_daemon_that_took_over(
    start_daemon, history_conn
):
    victim = pgworkerd.enqueue(history_conn, "sleep_first_attempt", {"seconds": 2})
    frozen = start_daemon("frozen", lease_ttl="1s")
    frozen.worker_running(victim, started_in=history_conn)
    tree = [frozen.pid, *(p.pid for p in frozen.workers())]
    for pid in tree:
        os.kill(pid, signal.SIGSTOP)
    try:
        taker = start_daemon("taker", lease_ttl="1s")
        wait_until(job_in_state(history_conn, victim, "succeeded"), what="the rerun elsewhere")
        taken = job(history_conn, victim)
        assert taken["result"] == "attempt 2"
    finally:
        for pid in tree:
            os.kill(pid, signal.SIGCONT)
    # The frozen host wakes: its supervisor's next renewal finds the lease gone and
    # stops the worker, or the worker finishes first and its outcome is refused, or (a
    # loaded machine: the renewal does not answer before the lease would lapse) it stops
    # the job it can no longer fence, or the worker's own lease guard, awake first, sees
    # no renewal and kills itself. Either way the job keeps the outcome of the daemon
    # that took over.
    seen = (
        "lease lost",
        "cannot renew leases; stopping their jobs",
        "leases not renewed by the supervisor",
    )
    wait_until(
        lambda: any(line in frozen.log() for line in seen),
        timeout_s=40,
        what=f"the frozen host to see its loss (its log: {frozen.log()[-2000:]!r})",
    )
    wait_until(
        lambda: frozen.titles() and all(t.endswith("idle") for t in frozen.titles()),
        what="the frozen host to be back to idle workers",
    )
    row = job(history_conn, victim)
    assert (row["state"], row["result"], row["attempt"]) == ("succeeded", "attempt 2", 2)
    assert row["finished_at"] == taken["finished_at"]
    for daemon in (frozen, taker):
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0


def test_a_worker_whose_supervisor_stopped_renewing_stops_its_handler_before_a_rescue(
    start_daemon, history_conn
):
    """Only the supervisor is stopped (SIGSTOP: as a loop stuck in a slow import on HUP
    would be); its worker runs on. The worker's lease guard kills it at 90 % of
    lease_ttl without a renewal, before the lease runs out: the other daemon's rescue
    and rerun never overlap the first handler. Without the guard the first handler
    ticked on beside the second."""
    victim = pgworkerd.enqueue(history_conn, "tick", {"seconds": 12})
    frozen = start_daemon("frozen", workers=ONE_WORKER, lease_ttl="2s")
    worker = frozen.worker_running(victim, started_in=history_conn)
    taker = start_daemon("taker", workers=ONE_WORKER, lease_ttl="2s")
    taker.wait_for_workers(1)
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: any(r[1] == 2 and r[2] == "start" for r in history(history_conn, victim)),
            what="the rescue and the second attempt's start",
        )
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    rows = history(history_conn, victim)
    second_start = min(r[4] for r in rows if r[1] == 2 and r[2] == "start")
    first_ticks = [r[4] for r in rows if r[1] == 1 and r[2] == "tick"]
    assert max(first_ticks) < second_start, "the first handler ticked on beside the second"
    assert "leases not renewed by the supervisor" in frozen.log()
    # Awake, the supervisor reaps it as the kill for unrenewed leases it is (the guard
    # said so on the board), not as a crash of the worker's own.
    wait_until(
        lambda: f'pid={worker.pid} how="killed by SIGKILL" reason=unfenced' in frozen.log(),
        what="the supervisor's account of the worker's death",
    )
    for daemon in (frozen, taker):
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0


def test_hup_reloads_the_config_and_replaces_the_workers(start_daemon, history_conn, tmp_path):
    daemon = start_daemon(workers=ONE_WORKER)
    (old_worker,) = daemon.wait_for_workers(1)
    config_path = tmp_path / "pgworkerd.yaml"
    from tests.daemon import write_config

    write_config(
        config_path,
        queues={"default": {}, "extra": {}},
        workers=[{"queues": ["default", "extra"], "concurrency": 2}],
    )
    daemon.signal(signal.SIGHUP)
    wait_until(
        lambda: (
            daemon.titles()
            == [
                "pgworkerd: worker default,extra #1 idle",
                "pgworkerd: worker default,extra #2 idle",
            ]
        ),
        what="the new workers",
    )
    assert old_worker.pid not in {p.pid for p in daemon.workers()}
    extra = pgworkerd.enqueue(history_conn, "record", {}, queue="extra")
    wait_until(job_in_state(history_conn, extra, "succeeded"), what="a job of the new queue")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_reload_keeps_the_start_up_lease_ttl_everywhere(start_daemon, history_conn, tmp_path):
    """The renewals keep the start-up lease_ttl (docs/configuration.md, "Reloading"):
    so must the new workers' claims and the supervisor's lapse checks. A lease_ttl
    lowered by a reload used to reach those two only: a job longer than the new
    lease_ttl was killed as unrenewed (renewals came at a third of the old one),
    attempt after attempt, until dead."""
    daemon = start_daemon(workers=ONE_WORKER, lease_ttl="12s")
    (old_worker,) = daemon.wait_for_workers(1)
    from tests.daemon import write_config

    # And a poll_interval: a reload that changes nothing else replaces no worker.
    write_config(tmp_path / "pgworkerd.yaml", workers=ONE_WORKER, lease_ttl="2s", poll_interval=2)
    daemon.signal(signal.SIGHUP)
    wait_until(
        lambda: [p.pid for p in daemon.wait_for_workers(1)] != [old_worker.pid],
        what="the new worker",
    )
    job_id = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 6})
    wait_until(job_in_state(history_conn, job_id, "succeeded"), what="the job to succeed")
    row = job(history_conn, job_id)
    assert row["attempt"] == 1, row["errors"]
    assert "restart the daemon to change it setting=lease_ttl" in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_reload_does_not_re_import_handler_code_a_restart_does(
    start_daemon, history_conn, tmp_path
):
    """Pins what the docs say ("Reloading"): a HUP imports the modules of handlers it
    has not imported before, but a module already imported keeps its code (re-running
    a module's import in the supervisor would run its side effects again and leave
    other modules holding the old objects); changed handler code needs a restart."""
    (tmp_path / "deployed_handlers.py").write_text("def version(job):\n    return 'v1'\n")
    handlers = {"version": "deployed_handlers:version"}
    # No bytecode: v2 may be written within the second v1's .pyc was stamped with.
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PYTHONDONTWRITEBYTECODE": "1"}
    daemon = start_daemon(workers=ONE_WORKER, handlers=handlers, env=env)
    (old_worker,) = daemon.wait_for_workers(1)
    first = pgworkerd.enqueue(history_conn, "version", {})
    wait_until(job_in_state(history_conn, first, "succeeded"), what="the first job")
    assert job(history_conn, first)["result"] == "v1"
    (tmp_path / "deployed_handlers.py").write_text("def version(job):\n    return 'version 2'\n")
    daemon.signal(signal.SIGHUP)
    wait_until(
        lambda: [p.pid for p in daemon.wait_for_workers(1)] != [old_worker.pid],
        what="the new worker",
    )
    after_reload = pgworkerd.enqueue(history_conn, "version", {})
    wait_until(job_in_state(history_conn, after_reload, "succeeded"), what="the job after HUP")
    assert job(history_conn, after_reload)["result"] == "v1", "a reload keeps imported code"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    restarted = start_daemon("restarted", workers=ONE_WORKER, handlers=handlers, env=env)
    restarted.wait_for_workers(1)
    after_restart = pgworkerd.enqueue(history_conn, "version", {})
    wait_until(job_in_state(history_conn, after_restart, "succeeded"), what="the job after restart")
    assert job(history_conn, after_restart)["result"] == "version 2"
    restarted.signal(signal.SIGTERM)
    assert restarted.wait() == 0


def test_a_reload_whose_handler_imports_slowly_does_not_stop_the_renewals(
    start_daemon, history_conn, tmp_path
):
    """A handler module that takes seconds to import (a model loaded at import time),
    added by a HUP: the supervisor loads it in a thread while its loop renews the
    running job's lease. Loaded inline, the loop stood still past the lease: the job
    was stopped (and retried) or rescued elsewhere and run twice."""
    (tmp_path / "slow_import.py").write_text(
        "import time\ntime.sleep(5)\n\ndef fn(job):\n    return 'loaded'\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PYTHONDONTWRITEBYTECODE": "1"}
    daemon = start_daemon(workers=ONE_WORKER, lease_ttl="2s", env=env)
    victim = pgworkerd.enqueue(history_conn, "tick", {"seconds": 8})
    daemon.worker_running(victim, started_in=history_conn)
    from tests.daemon import BASE_CONFIG, write_config

    handlers = {**BASE_CONFIG["handlers"], "slow": "slow_import:fn"}
    write_config(tmp_path / "pgworkerd.yaml", workers=ONE_WORKER, lease_ttl="2s", handlers=handlers)
    daemon.signal(signal.SIGHUP)
    wait_until(job_in_state(history_conn, victim, "succeeded"), 40, "the running job")
    assert job(history_conn, victim)["attempt"] == 1, job(history_conn, victim)["errors"]
    slow = pgworkerd.enqueue(history_conn, "slow", {})
    wait_until(job_in_state(history_conn, slow, "succeeded"), 40, "a job of the new handler")
    assert job(history_conn, slow)["result"] == "loaded"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_reload_freezes_what_it_imported_before_its_workers_fork(
    start_daemon, history_conn, tmp_path
):
    """A handler module a HUP imports for the first time (one that loads a big library
    or a model): its objects are frozen (supervisor/osutil.py, freeze_after_reload)
    after the load, refused or applied, and before the next fork. Left to the
    collector, the supervisor's full passes walked its 400,000 objects again (30 ms a
    pass), and each worker forked after the reload walked them in its boot's collection,
    copying every page they sit on. Repeated reloads freeze nothing more."""
    (tmp_path / "big_import.py").write_text(
        # 400,000 containers the collector tracks (a dict of atoms alone is untracked).
        "DATA = [{'n': n, 'tags': []} for n in range(200_000)]\n\n"
        "def fn(job):\n    return len(DATA)\n"
    )
    env = {
        "PYTHONPATH": f"{REPO / 'tests' / 'gc_probe'}:{tmp_path}:{REPO}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    daemon = start_daemon(workers=ONE_WORKER, env=env)
    (worker,) = daemon.wait_for_workers(1)
    worker_uss = psutil.Process(worker.pid).memory_full_info().uss
    from tests.daemon import BASE_CONFIG, write_config

    handlers = {**BASE_CONFIG["handlers"], "big": "big_import:fn"}
    write_config(
        tmp_path / "pgworkerd.yaml",
        workers=ONE_WORKER,
        handlers={**handlers, "missing": "no_such_module:fn"},
    )
    daemon.signal(signal.SIGHUP)  # refused, but big_import stays imported
    wait_until(lambda: "reload refused" in daemon.log(), what="the refusal")
    supervisor_collector_settled(daemon)

    frozen = []
    for n in range(4):
        # Each a change (a reload that changes nothing replaces no worker).
        write_config(
            tmp_path / "pgworkerd.yaml", workers=ONE_WORKER, handlers=handlers, poll_interval=2 + n
        )
        daemon.signal(signal.SIGHUP)
        worker = wait_until(new_worker(daemon, worker.pid), what="the new worker")
        # Forked after the freeze: the module's pages stay shared with the supervisor.
        uss = psutil.Process(worker.pid).memory_full_info().uss
        assert uss < worker_uss + 12 * 2**20, (uss, worker_uss)
        frozen.append(supervisor_collector_settled(daemon)["frozen"])
    assert min(frozen) > 400_000, frozen
    assert max(frozen) - min(frozen) < 1_000, f"each reload froze more: {frozen}"

    probe = pgworkerd.enqueue(history_conn, "collector_generations", {})
    wait_until(job_in_state(history_conn, probe, "succeeded"), what="the probe job")
    seen = job(history_conn, probe)["result"]
    assert seen["frozen"] > 400_000 and seen["walked"] < 10_000, seen
    big = pgworkerd.enqueue(history_conn, "big", {})
    wait_until(job_in_state(history_conn, big, "succeeded"), what="a job of the new handler")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def new_worker(daemon: Daemon, old_pid: int) -> Callable[[], psutil.Process | None]:
    return lambda: next((p for p in daemon.wait_for_workers(1) if p.pid != old_pid), None)


def supervisor_collector_settled(daemon: Daemon) -> dict[str, int]:
    """The supervisor's collector counts, asked until it walks fewer than 10,000
    objects: the line SIGUSR2 makes tests/gc_probe/sitecustomize.py write (the signal
    may come between a reload's log line and its freeze)."""
    mark = re.compile(rf"gc-probe pid={daemon.pid} frozen=(\d+) walked=(\d+)")
    seen: list[dict[str, int]] = []

    def settled() -> bool:
        asked = len(mark.findall(daemon.log()))
        daemon.signal(signal.SIGUSR2)
        lines = wait_until(lambda: mark.findall(daemon.log())[asked:], what="the probe line")
        seen.append({"frozen": int(lines[0][0]), "walked": int(lines[0][1])})
        return seen[-1]["walked"] < 10_000

    try:
        wait_until(settled, 10, "the supervisor's collector to walk < 10,000", 0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last counts {seen[-1]}") from None
    return seen[-1]


@contextlib.contextmanager
def run_without_a_config_flag(
    directory: Path, env: dict[str, str]
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`pgworkerd run` with no -c, in `directory` (where config/pgworkerd.yaml is the
    default file), once started: (the process, its log). Killed at the end if it still
    runs."""
    log_path = directory / "daemon.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgworkerd", "run", "--log-format", "text"],
            cwd=directory,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        wait_until(lambda: "supervisor started" in log_path.read_text(), what="the start")
        yield proc, log_path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def hup_and_wait_for_the_reloads_end(proc: subprocess.Popen[bytes], log_path: Path) -> str:
    """The log once the HUP's load was applied or refused."""
    os.kill(proc.pid, signal.SIGHUP)
    wait_until(
        lambda: any(
            end in log_path.read_text()
            for end in ("reloading: replacing workers", "reload refused", "nothing changed")
        ),
        what="the reload's end",
    )
    return log_path.read_text()


def test_a_daemon_configured_by_the_environment_alone_reloads_on_hup(
    db_dsn, history_conn, tmp_path
):
    # No -c, no PGWORKERD_CONFIG, no config/pgworkerd.yaml in its directory: `run` reads
    # the environment alone, and a HUP must read it the same way: it was refused, "no
    # such config file", a file the daemon had never read, and its workers were never
    # replaced (a HUP's graceful replacement: new processes, the old ones drained).
    env = {
        **daemon_env(db_dsn),
        "PGWORKERD_HANDLERS": '{"record": "tests.handlers:record"}',
        "PGWORKERD_WORKERS": '[{"queues": ["default"], "concurrency": 1}]',
    }
    with run_without_a_config_flag(tmp_path, env) as (proc, log_path):
        log = hup_and_wait_for_the_reloads_end(proc, log_path)
        assert "reload refused" not in log, log[-2000:]
        after = pgworkerd.enqueue(history_conn, "record", {})
        wait_until(job_in_state(history_conn, after, "succeeded"), what="a job after the reload")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_a_daemon_started_from_the_default_file_refuses_a_hup_while_the_file_is_gone(
    db_dsn, history_conn, tmp_path
):
    # No -c, no PGWORKERD_CONFIG: `run` read config/pgworkerd.yaml. A HUP while that file
    # is missing (renamed mid-deploy) must be refused and the running config kept, not
    # replaced by the environment's defaults (whose workers had no handler for `record`).
    (tmp_path / "config").mkdir()
    default_file = write_config(tmp_path / "config" / "pgworkerd.yaml", workers=ONE_WORKER)
    with run_without_a_config_flag(tmp_path, daemon_env(db_dsn)) as (proc, log_path):
        default_file.rename(tmp_path / "config" / "pgworkerd.yaml.old")
        log = hup_and_wait_for_the_reloads_end(proc, log_path)
        assert "reload refused" in log and "no such config file" in log, log[-2000:]
        after = pgworkerd.enqueue(history_conn, "record", {})
        wait_until(job_in_state(history_conn, after, "succeeded"), what="the old config working")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_a_bad_reload_is_refused_and_the_old_config_keeps_running(
    start_daemon, history_conn, tmp_path
):
    daemon = start_daemon(workers=ONE_WORKER)
    (worker,) = daemon.wait_for_workers(1)
    (tmp_path / "pgworkerd.yaml").write_text("workers: [{queues: [default], concurrency: 0}]\n")
    daemon.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in daemon.log(), what="the refusal")
    assert "workers[0].concurrency: must be ≥ 1" in daemon.log()
    after = pgworkerd.enqueue(history_conn, "record", {})
    wait_until(job_in_state(history_conn, after, "succeeded"), what="the old config working")
    assert [p.pid for p in daemon.workers()] == [worker.pid], "workers were not replaced"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_systemd_hears_ready_and_stopping_and_handlers_never_see_its_socket(
    start_daemon, history_conn, tmp_path
):
    """The notify protocol (Type=notify units): READY=1 once the workers are forked,
    STOPPING=1 on TERM. The socket is the supervisor's alone: a handler cannot speak to
    systemd in the daemon's name."""
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(path))
        systemd.settimeout(20)
        daemon = start_daemon(env={"NOTIFY_SOCKET": str(path)})
        ready = systemd.recv(4096).decode().splitlines()
        assert "READY=1" in ready and f"MAINPID={daemon.pid}" in ready
        job_id = pgworkerd.enqueue(history_conn, "environment_variable", {"name": "NOTIFY_SOCKET"})
        history_conn.commit()
        wait_until(job_in_state(history_conn, job_id, "succeeded"), what="the job")
        assert job(history_conn, job_id)["result"] is None
        daemon.signal(signal.SIGTERM)
        received: list[str] = []  # STATUS= lines may come first; the timeout bounds it
        while "STOPPING=1" not in received:
            received += systemd.recv(4096).decode().splitlines()
        assert daemon.wait() == 0
