"""Takes the README's dashboard screenshots (docs/dashboard-overview.png and
docs/dashboard-job.png) from the real thing: a throwaway cluster, the demo's config and
jobs run by `pgworkerd run`, `pgworkerd web`, and Chromium.

    .venv/bin/python scripts/dashboard_screenshots.py [OUT_DIR]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg
import yaml
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pgworkerd  # noqa: E402
from pgworkerd.storage.embedded import FAST_UNSAFE_SETTINGS, EmbeddedCluster, free_port  # noqa: E402
from pgworkerd.storage.migrations import migrate  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs"
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-shots-"))
    cluster = EmbeddedCluster(base_dir=base / "pg", port=free_port(), settings=FAST_UNSAFE_SETTINGS)
    cluster.ensure_running()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn, "pgworkerd")
        config = yaml.safe_load((REPO / "config/pgworkerd.yaml").read_text())
        port = free_port()
        config["web"] = {"listen": f"127.0.0.1:{port}"}
        config["periodic"] = [{"kind": "hello", "every": "10m", "name": "hourly-hello"}]
        path = base / "pgworkerd.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {**os.environ, "PGWORKERD_DATABASE_URL": dsn, "PYTHONPATH": str(REPO)}
        with psycopg.connect(dsn, autocommit=True) as conn:
            poison = _enqueue(conn)
            # A tenant's key paused (as a handler's PauseKey does on an HTTP 429): the
            # overview lists it with the ready jobs it holds back.
            pgworkerd.pause_key(conn, "tenant:42", 900)
            keyed = [{"kind": "hello", "payload": {}, "key": "tenant:42"}] * 12
            pgworkerd.enqueue_many(conn, keyed)
            procs.append(_start(["run", "-c", str(path)], env, base / "run.log"))
            _wait(lambda: _state(conn, poison) == "dead", "the poison job to die")
            pgworkerd.pause_queue(conn, "slow")
            # A backlog in the paused queue: the overview shows it queued, and its age.
            backlog = [{"kind": "hello", "payload": {}, "queue": "slow"}] * 40
            pgworkerd.enqueue_many(conn, backlog)
            conn.execute("ANALYZE pgworkerd.jobs")  # the overview's "about N jobs"
        procs.append(_start(["web", "-c", str(path)], env, base / "web.log"))
        url = f"http://127.0.0.1:{port}"
        _wait(lambda: _answers(url), "pgworkerd web")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.goto(url + "/")
            page.screenshot(path=str(out / "dashboard-overview.png"), full_page=True)
            page.goto(f"{url}/jobs/{poison}")
            page.screenshot(path=str(out / "dashboard-job.png"), full_page=True)
            browser.close()
        print(f"written {out / 'dashboard-overview.png'} and {out / 'dashboard-job.png'}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        cluster.destroy()
    return 0


def _enqueue(conn: psycopg.Connection[object]) -> int:
    jobs = [{"kind": "hello", "payload": {"name": f"user {i}"}} for i in range(200)]
    jobs += [{"kind": "flaky", "payload": {"succeed_at": 2}} for _ in range(20)]
    ids = pgworkerd.enqueue_many(conn, jobs)
    poison = pgworkerd.enqueue(conn, "poison", {"order": 42, "sku": "A-17"}, max_attempts=3)
    pgworkerd.enqueue(conn, "hang", {}, queue="slow", max_attempts=1)
    assert ids
    return poison


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pgworkerd", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
        )


def _state(conn: psycopg.Connection[object], job_id: int) -> str:
    row = conn.execute("SELECT state FROM pgworkerd.jobs WHERE id = %s", [job_id]).fetchone()
    return str(row[0]) if row else ""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _wait(check: object, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
