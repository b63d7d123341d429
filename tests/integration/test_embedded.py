"""The embedded local cluster: created once, reused while running, data kept."""

from __future__ import annotations

import tempfile
from pathlib import Path

import psycopg
import pytest

from pgworkerd.storage.embedded import EmbeddedCluster


@pytest.fixture
def cluster():
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-embedded-"))
    cluster = EmbeddedCluster(base_dir=base / ".pgworkerd")  # socket only, like `make demo`
    yield cluster
    cluster.destroy()


def postmaster_pid(cluster: EmbeddedCluster) -> int:
    return int((cluster.data_dir / "postmaster.pid").read_text().split()[0])


def test_created_once_reused_while_running_and_keeps_its_data(cluster):
    cluster.stop()  # safe before it exists
    cluster.ensure_running()
    first_pid = postmaster_pid(cluster)
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (42)")

    cluster.ensure_running()
    assert postmaster_pid(cluster) == first_pid, "a running cluster is reused, not restarted"

    cluster.stop()
    cluster.stop()  # safe twice
    assert not cluster.is_running()
    cluster.ensure_running()
    with psycopg.connect(cluster.dsn()) as conn:
        assert conn.execute("SELECT x FROM kept").fetchone() == (42,)
    with psycopg.connect(cluster.dsn()) as conn:
        listen = conn.execute("SHOW listen_addresses").fetchone()[0]
    assert listen == "", "the local cluster listens on its own socket only"
