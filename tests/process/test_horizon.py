"""A transaction left open elsewhere, as the operator meets it: /readyz and /metrics of
a running daemon name its pid and application, and `pgworkerd status` warns once it is
older than 10 x lease_ttl. All three clear once it ends."""

from __future__ import annotations

import psycopg

from pgworkerd.storage.embedded import free_port
from tests.daemon import wait_until
from tests.process.test_cli import pgworkerd as run_cli
from tests.process.test_http import get, metric


def test_a_held_transaction_is_named_by_readyz_metrics_and_status(start_daemon, db_dsn, tmp_path):
    port = free_port()
    start_daemon(http={"listen": f"127.0.0.1:{port}"}, lease_ttl="1s")
    wait_until(lambda: get(port, "/readyz") == (200, "ready\n"), what="/readyz ready")

    with psycopg.connect(db_dsn, application_name="nightly-report") as held:
        held.execute("SELECT txid_current()")
        pid = str(held.info.backend_pid)
        labels = {"kind": "transaction", "holder": "nightly-report", "pid": pid}

        # lease_ttl 1s: past 10 s the holder is warned of.
        def warned() -> bool:
            status, body = get(port, "/readyz")
            return status == 200 and f"pid {pid} (nightly-report)" in body

        wait_until(warned, timeout_s=40, what="/readyz naming the holder")
        scraped = get(port, "/metrics")[1]
        assert metric(scraped, "pgworkerd_xmin_horizon_age_seconds", **labels) >= 10
        assert metric(scraped, "pgworkerd_xmin_horizon_xids", **labels) >= 0
        assert "pgworkerd_jobs_dead_tuples " in scraped

        config = tmp_path / "status.yaml"
        config.write_text("lease_ttl: 1s\n")
        env = {"PGWORKERD_DATABASE_URL": db_dsn}
        shown = run_cli("status", "-c", str(config), env=env, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert f"warning: oldest transaction: transaction pid {pid} (nightly-report)" in (
            shown.stdout
        )
        assert f"pg_terminate_backend({pid})" in shown.stdout
        held.rollback()

    wait_until(lambda: get(port, "/readyz") == (200, "ready\n"), what="/readyz clear again")
    wait_until(
        lambda: (
            metric(get(port, "/metrics")[1], "pgworkerd_xmin_horizon_age_seconds", **labels) == 0
        ),
        what="the gauge cleared",
    )
    calm = run_cli("status", "-c", str(config), env=env, cwd=tmp_path)
    assert "warning" not in calm.stdout and "jobs table:" in calm.stdout
