"""What an operator sees of the limits (issue 19): `status` (text and --json) lists the
limited queues with their limits, running jobs, starts in the rate's window, ready jobs
and those a limit holds back; `keys` shows each key's per-key limits. Real processes,
real database; the jobs are claimed by a JobStore with the same limits, as a worker
would."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
import yaml

import pgworkerd
from pgworkerd.config import parse
from pgworkerd.storage.store import JobStore
from tests.process.test_cli import pgworkerd as run_cli

CONFIG = {
    "queues": {
        "default": {},
        "payments": {"concurrency": 2, "rate": "100/m"},
        "crawl": {"per_key": {"concurrency": 1, "rate": "10/m"}, "fair": True},
    }
}


@pytest.fixture
def cli(db_dsn, tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "pgworkerd.yaml").write_text(yaml.safe_dump(CONFIG))

    def run(*args: str) -> Any:
        result = run_cli(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return result.stdout

    return run


def test_status_and_keys_show_the_limits_at_work(cli, db_dsn):
    limits = parse(yaml.safe_dump(CONFIG)).queue_limits()
    store = JobStore(limits=limits)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "payments"}] * 5)
        pgworkerd.enqueue_many(
            conn,
            [{"kind": "k", "payload": {}, "queue": "crawl", "key": "site:a"}] * 3
            + [{"kind": "k", "payload": {}, "queue": "crawl", "key": "site:b"}],
        )
        claimed = store.claim(
            conn, queues=["payments", "crawl"], limit=10, lease_ttl_s=60, worker="w"
        )
    assert sorted(j.queue for j in claimed) == ["crawl", "crawl", "payments", "payments"]

    report = {q["queue"]: q for q in json.loads(cli("status", "--json"))["limits"]}
    assert set(report) == {"payments", "crawl"}, "an unlimited queue is not listed"
    payments = report["payments"]
    assert (payments["concurrency"], payments["rate"]) == (2, "100/m")
    assert (payments["running"], payments["starts_in_window"], payments["ready"]) == (2, 2, 3)
    assert payments["held_back"] == 3, "no room left: every ready job is held back"
    crawl = report["crawl"]
    assert crawl["per_key"] == {"concurrency": 1, "rate": "10/m"} and crawl["fair"] is True
    assert (crawl["running"], crawl["ready"], crawl["held_back"]) == (2, 2, 2)

    text = cli("status")
    assert "LIMITED QUEUE" in text, text
    assert "2 running, 100/m" in text and "per key 1 running, 10/m; fair" in text, text

    keys = {k["key"]: k for k in json.loads(cli("keys", "--json"))}
    assert keys["site:a"]["limits"] == {"crawl": {"concurrency": 1, "rate": "10/m", "fair": True}}
    assert (keys["site:a"]["running"], keys["site:a"]["ready"]) == (1, 2)
    assert "crawl: 1 running, 10/m, fair" in cli("keys")
