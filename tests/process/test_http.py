"""The daemon's HTTP listener (docs/design.md, "Operating"), with a real daemon and a
real HTTP client: /healthz, /metrics while jobs run, /readyz across a database outage,
`pgworkerd health`, and no secret in any answer."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgworkerd
from pgworkerd.storage.embedded import free_port
from tests.daemon import REPO, daemon_env, states, wait_until


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError):
        return 0, ""


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})?", sample)
        if match and match[1] == name:
            have = ",".join(sorted((match[2] or "").split(","))) if match[2] else ""
            if have == wanted:
                return float(value)
    return 0.0


def health(config_path: str, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgworkerd", "health", "-c", config_path],
        env=daemon_env(dsn),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_healthz_and_metrics_count_jobs_by_queue_and_kind(start_daemon, history_conn, tmp_path):
    port = free_port()
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        queues={"default": {}, "mail": {"max_attempts": 1}},
        workers=[{"queues": ["default", "mail"], "concurrency": 2}],
    )
    wait_until(lambda: get(port, "/healthz") == (200, "ok\n"), what="/healthz 200")
    assert get(port, "/nope")[0] == 404

    # A half-open client (connected, says nothing) must not block the loop.
    idle = socket.create_connection(("127.0.0.1", port))
    try:
        pgworkerd.enqueue_many(
            history_conn,
            [{"kind": "work", "payload": {"ms": 5}} for _ in range(30)]
            + [{"kind": "fail", "queue": "mail", "payload": {}} for _ in range(3)],
        )
        t0 = time.monotonic()
        assert get(port, "/healthz")[0] == 200
        assert time.monotonic() - t0 < 2
        seen = []

        def counted() -> bool:
            status, text = get(port, "/metrics")
            seen.append(metric(text, "pgworkerd_jobs_started_total", queue="default", kind="work"))
            return (
                status == 200
                and metric(text, "pgworkerd_jobs_succeeded_total", queue="default", kind="work")
                == 30
                and metric(text, "pgworkerd_jobs_dead_total", queue="mail", kind="fail") == 3
            )

        wait_until(counted, what="the counters at 30 succeeded, 3 dead", interval_s=0.02)
    finally:
        idle.close()
    assert states(history_conn) == {"succeeded": 30, "dead": 3}
    _, text = get(port, "/metrics")
    assert metric(text, "pgworkerd_jobs_started_total", queue="default", kind="work") == 30
    assert metric(text, "pgworkerd_jobs_started_total", queue="mail", kind="fail") == 3
    assert metric(text, "pgworkerd_job_duration_seconds_count", queue="default", kind="work") == 30
    assert metric(text, "pgworkerd_claim_batch_size_count") >= 1
    assert metric(text, "pgworkerd_children_alive") == 2
    assert metric(text, "pgworkerd_slots_free") == 2
    assert seen[0] <= seen[-1], "the started counter only moves up"


def test_queue_depth_is_sampled(start_daemon, history_conn):
    port = free_port()
    # No worker takes the "later" queue: its jobs stay ready.
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        queues={"default": {}, "later": {}},
        workers=[{"queues": ["default"], "concurrency": 1}],
    )
    pgworkerd.enqueue_many(
        history_conn, [{"kind": "work", "queue": "later", "payload": {}} for _ in range(4)]
    )

    def sampled() -> bool:
        _, text = get(port, "/metrics")
        return metric(text, "pgworkerd_queue_depth", queue="later") == 4 and (
            metric(text, "pgworkerd_queue_oldest_ready_age_seconds", queue="later") > 0
        )

    wait_until(sampled, timeout_s=15, what="the depth of 'later' sampled at 4", interval_s=0.2)
    _, text = get(port, "/metrics")
    assert metric(text, "pgworkerd_queue_depth", queue="default") == 0


def test_jobs_held_back_by_a_limit_are_sampled(start_daemon, history_conn):
    port = free_port()
    # One job of "slow" runs (sleeping) and holds the queue's only place: the rest wait.
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        queues={"default": {}, "slow": {"concurrency": 1}},
        workers=[{"queues": ["default", "slow"], "concurrency": 2}],
    )
    pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "queue": "slow", "payload": {"seconds": 30}}] * 4
    )

    def sampled() -> bool:
        _, text = get(port, "/metrics")
        return metric(text, "pgworkerd_queue_held_back", queue="slow") == 3

    wait_until(sampled, timeout_s=15, what="3 jobs of 'slow' held back", interval_s=0.2)
    _, text = get(port, "/metrics")
    assert 'pgworkerd_queue_held_back{queue="default"}' not in text, "not limited"


def test_readyz_follows_the_database_and_health_says_so(daemons, own_cluster, tmp_path):
    port = free_port()
    dsn = own_cluster.dsn()
    daemon = daemons(dsn, http={"listen": f"127.0.0.1:{port}"}, lease_ttl="3s")
    config_path = str(tmp_path / "pgworkerd.yaml")
    wait_until(lambda: get(port, "/readyz")[0] == 200, what="/readyz 200")
    assert health(config_path, dsn).returncode == 0

    own_cluster.stop("fast")
    try:
        wait_until(lambda: get(port, "/readyz")[0] == 503, timeout_s=20, what="/readyz 503")
        assert get(port, "/healthz")[0] == 200, "the loop still turns"
        result = health(config_path, dsn)
        assert result.returncode == 1
        assert "503" in result.stderr and len(result.stderr.strip().splitlines()) == 1
        _, text = get(port, "/metrics")
        assert metric(text, "pgworkerd_lease_renewals_failed_total") >= 1
    finally:
        own_cluster.start()
    wait_until(lambda: get(port, "/readyz")[0] == 200, timeout_s=30, what="/readyz 200 again")

    daemon.kill_everything()
    result = health(config_path, dsn)
    assert result.returncode == 1 and "not ready" in result.stderr


def test_health_without_a_listener_exits_2(daemons, own_cluster, tmp_path):
    from tests.daemon import write_config

    path = write_config(tmp_path / "plain.yaml")
    result = health(str(path), own_cluster.dsn())
    assert result.returncode == 2 and "http.listen" in result.stderr


def test_a_bad_listen_address_is_a_config_error(tmp_path, own_cluster):
    from tests.daemon import write_config

    path = write_config(tmp_path / "bad.yaml", http={"listen": "localhost"})
    result = health(str(path), own_cluster.dsn())
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "http.listen: must be host:port such as 127.0.0.1:9187, not 'localhost'"
    )


def test_a_wrong_password_is_in_no_answer(daemons, own_cluster, tmp_path):
    port = free_port()
    dsn = own_cluster.dsn()
    password = "s3cret-not-this-one"
    with psycopg.connect(dsn, autocommit=True) as conn:
        user = conn.info.user
        conn.execute(f"ALTER ROLE {user} PASSWORD 'right-one'")
    params = conninfo_to_dict(dsn)
    wrong = make_conninfo(**{**params, "password": password})
    daemon = daemons(wrong, http={"listen": f"127.0.0.1:{port}"})
    # The test cluster trusts local connections: the daemon runs with the wrong password
    # in its URL, and no answer may name it.
    wait_until(lambda: get(port, "/readyz")[0] == 200, what="/readyz 200")
    assert daemon.proc.poll() is None
    answers = [get(port, path)[1] for path in ("/metrics", "/readyz", "/healthz", "/x")]
    assert all(password not in text for text in answers)


def test_an_address_in_use_stops_the_daemon_with_one_line(daemons, own_cluster):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        daemon = daemons(own_cluster.dsn(), http={"listen": f"127.0.0.1:{port}"})
        assert daemon.wait() == 2
        errors = [line for line in daemon.log().splitlines() if "error" in line]
        assert errors == [
            f"pgworkerd: error: http.listen: cannot listen on 127.0.0.1:{port}: "
            "Address already in use"
        ]
        assert daemon.alive_children() == []
    finally:
        taken.close()


def test_kills_restarts_and_busy_slots(start_daemon, history_conn):
    port = free_port()
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        workers=[{"queues": ["default"], "concurrency": 1, "threads": 3}],
    )
    pgworkerd.enqueue(history_conn, "block_in_c", {}, max_runtime=1, max_attempts=1)
    spinning = pgworkerd.enqueue(history_conn, "spin", {"seconds": 60})

    def busy() -> bool:
        _, text = get(port, "/metrics")
        return (
            metric(text, "pgworkerd_slots_busy") == 2 and metric(text, "pgworkerd_slots_free") == 1
        )

    wait_until(busy, what="2 of 3 slots busy")
    wait_until(lambda: states(history_conn).get("dead") == 1, what="the hung job killed")

    def counted() -> bool:
        _, text = get(port, "/metrics")
        return (
            metric(text, "pgworkerd_jobs_killed_total", queue="default", kind="block_in_c") == 1
            and metric(text, "pgworkerd_children_restarts_total") == 1
            and metric(text, "pgworkerd_children_alive") == 1
        )

    wait_until(counted, what="one kill, one restart")
    assert spinning  # killed with its worker and put back: not counted as an outcome


def test_log_format_from_the_config_and_the_flag_wins(own_cluster, tmp_path):
    from tests.daemon import Daemon, write_config

    path = write_config(tmp_path / "json.yaml", log_format="json")
    for flag, json_lines in ((None, True), ("text", False)):
        daemon = Daemon(path, own_cluster.dsn(), tmp_path / f"{flag}.log", log_format=flag)
        try:
            daemon.wait_for_workers(2)
            first = daemon.log().splitlines()[0]
            assert first.startswith("{") is json_lines, first
        finally:
            daemon.kill_everything()
