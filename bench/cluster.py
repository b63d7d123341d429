"""The benchmark's throwaway PostgreSQL cluster: pgworkerd's EmbeddedCluster with the
settings of the peers' run_all.sh (in the `--peers-dir` directory), so every number is
taken on the same durable server the peers were measured on."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from pgworkerd.storage.embedded import EmbeddedCluster, free_port

T = TypeVar("T")

# run_all.sh: durability left at the (durable) defaults, spelled out so nobody's
# postgresql.conf can change them; only shared_buffers and max_connections raised.
# TCP on 127.0.0.1 comes from EmbeddedCluster when it is given a port.
PEER_SETTINGS: dict[str, str] = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "512MB",
    "max_connections": "200",
}

REPORTED_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
    "autovacuum",
)


@contextlib.contextmanager
def throwaway_cluster(
    keep_log: Path | None = None, settings: dict[str, str] | None = None
) -> Iterator[EmbeddedCluster]:
    """Start a new cluster on a free port (PEER_SETTINGS unless `settings`); stop it and
    delete it at the end (its server log copied to `keep_log` first)."""
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-bench-"))
    cluster = EmbeddedCluster(
        base_dir=base / "pg", port=free_port(), settings=settings or PEER_SETTINGS
    )
    try:
        cluster.ensure_running()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("fast")
        if keep_log is not None and cluster.log_file.exists():
            keep_log.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cluster.log_file, keep_log)
        cluster.destroy()  # already stopped: this only removes the directory
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(cluster: EmbeddedCluster, name: str) -> str:
    """(Re)create database `name`, as run_all.sh does before every harness run; its DSN."""
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return cluster.dsn(name)


def drop_database(cluster: EmbeddedCluster, name: str) -> None:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def server_settings(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # current_setting() keeps the unit (shared_buffers reads 512MB, not 65536 pages).
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings"
            " WHERE name = ANY(%s) ORDER BY name",
            (list(REPORTED_SETTINGS),),
        ).fetchall()
    return dict(rows)


def fdatasync_rate(cluster: EmbeddedCluster) -> float | None:
    """fdatasync ops/s on the cluster's filesystem now (`pg_test_fsync -s 1`, first
    block only): commit-bound figures follow it, and on a VM it drifts within minutes."""
    test_file = cluster.base_dir / "fsync.test"
    proc = subprocess.Popen(
        [str(cluster.bin_dir / "pg_test_fsync"), "-s", "1", "-f", str(test_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    rate = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.match(r"\s+fdatasync\s+([\d.]+) ops/sec", line)
            if match:
                rate = float(match[1])
                break
    finally:
        proc.kill()  # the rest of its report is not needed
        proc.wait()
        test_file.unlink(missing_ok=True)
    return rate


def in_fresh_database(
    cluster: EmbeddedCluster, database: str, logs: Path, tag: str, run: Callable[[str], T]
) -> T | None:
    """`run(dsn)` in a fresh database, dropped afterwards. A run that raises is noted
    (its traceback in logs/<tag>.error) and gives None: one broken run must not lose
    the others' figures."""
    dsn = fresh_database(cluster, database)
    try:
        return run(dsn)
    except Exception as exc:
        print(f"  note: {tag} failed: {type(exc).__name__}: {exc} (see {logs})")
        (logs / f"{tag}.error").write_text(traceback.format_exc())
        return None
    finally:
        drop_database(cluster, database)
