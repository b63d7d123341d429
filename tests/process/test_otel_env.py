"""OpenTelemetry set up wrong by the environment: OTEL_PYTHON_TRACER_PROVIDER naming a
TracerProvider that is not installed (a typo, the SDK left out of an image), or one
whose loading fails. The API then raises at every get_tracer_provider() call
(StopIteration, or the provider's own error), and pgworkerd passed it on: enqueue
raised a bare StopIteration (enqueue_async a RuntimeError), `pgworkerd enqueue` printed
a traceback, and every job failed with error=StopIteration. Now such a provider is no
tracing, said once per process in one line naming the variable (once per daemon: the
supervisor finds out before its forks), and `pgworkerd check` says it too. Real
processes, the real variable, the real API and SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pgworkerd
from tests.daemon import REPO, daemon_env, job, wait_until
from tests.process.test_cli import pgworkerd as pgworkerd_cli

VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"
WARNING = "OTEL_PYTHON_TRACER_PROVIDER="

# Enqueues (one alone, two at once, an async one), runs a job through the worker's
# wrapped handler, then sets a provider in code, which counts from then on.
SCRIPT = """
import asyncio, sys
import psycopg, pgworkerd
from pgworkerd.handlers import load_registry

dsn = sys.argv[1]
registry = load_registry({"noop": "tests.handlers:noop"})
with psycopg.connect(dsn, autocommit=True) as conn:
    ids = [pgworkerd.enqueue(conn, "noop", {}) for _ in range(3)]
    ids += pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}}] * 2)

async def enqueue_async():
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        return await pgworkerd.enqueue_async(aconn, "noop", {})

ids.append(asyncio.run(enqueue_async()))
with psycopg.connect(dsn, autocommit=True) as conn:
    stored = conn.execute(
        "SELECT count(*) FROM pgworkerd.jobs WHERE id = ANY(%s) AND trace_context IS NULL",
        (ids,),
    ).fetchone()[0]
job = pgworkerd.Job(id=ids[0], kind="noop", queue="default", payload={}, attempt=1,
                    max_attempts=5)
for _ in range(3):
    assert registry["noop"](job) is None
print("untraced", stored)

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
registry["noop"](job)
with psycopg.connect(dsn, autocommit=True) as conn:
    pgworkerd.enqueue(conn, "noop", {})
print("traced", sorted(span.name for span in exporter.get_finished_spans()))
"""


def run_script(
    db_dsn: str, provider: str, pythonpath: str = str(REPO)
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, db_dsn],
        cwd=REPO,
        env={**daemon_env(db_dsn), "PYTHONPATH": pythonpath, VARIABLE: provider},
        capture_output=True,
        text=True,
        timeout=60,
    )


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if WARNING in line]


def test_a_provider_that_is_not_installed_is_no_tracing_said_once(db_dsn):
    result = run_script(db_dsn, "sdk_tracer_provider_typo")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "untraced 6",
        "traced ['process noop', 'send noop']",
    ]
    (warning,) = warnings_in(result.stderr)
    assert (
        "'sdk_tracer_provider_typo'" in warning
        and "no TracerProvider of that name is installed" in warning
    ), warning
    assert "Traceback" not in result.stderr, result.stderr


@pytest.fixture
def broken_provider(tmp_path: Path) -> Path:
    """A directory to put on PYTHONPATH: a distribution whose entry point `broken`
    (group opentelemetry_tracer_provider) names a TracerProvider whose constructor
    raises."""
    (tmp_path / "broken_provider.py").write_text(
        "class Provider:\n"
        "    def __init__(self):\n"
        "        raise RuntimeError('no exporter configured')\n"
    )
    dist = tmp_path / "broken_provider-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-provider\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[opentelemetry_tracer_provider]\nbroken = broken_provider:Provider\n"
    )
    return tmp_path


def test_a_provider_that_fails_to_load_is_no_tracing_said_once(db_dsn, broken_provider):
    """Installed (an entry point names it) but its constructor raises: the API logs
    its own traceback at the one load pgworkerd asks for, and our line says why."""
    result = run_script(db_dsn, "broken", pythonpath=f"{REPO}:{broken_provider}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "untraced 6"
    (warning,) = warnings_in(result.stderr)
    assert "'broken'" in warning and "RuntimeError: no exporter configured" in warning, warning
    assert result.stderr.count("Failed to load configured provider") == 1, result.stderr


def test_the_enqueue_command_enqueues_and_says_it_in_one_line(db_dsn, history_conn, tmp_path):
    result = pgworkerd_cli(
        "enqueue",
        "noop",
        env={"PGWORKERD_DATABASE_URL": db_dsn, VARIABLE: "nonexistent"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.strip())
    assert job(history_conn, job_id)["trace_context"] is None
    assert len(result.stderr.splitlines()) == 1 and warnings_in(result.stderr), result.stderr


def test_the_daemon_runs_every_job_and_says_it_once(start_daemon, history_conn):
    """Two workers, each recycled after every job: one line from the supervisor, none
    per worker nor per job."""
    ids = [pgworkerd.enqueue(history_conn, "noop", {}) for _ in range(4)]
    daemon = start_daemon(max_jobs_per_child=1, env={VARIABLE: "nonexistent"})
    wait_until(
        lambda: all(job(history_conn, i)["state"] == "succeeded" for i in ids),
        what="every job to succeed",
    )
    log = daemon.log()
    assert len(warnings_in(log)) == 1, log
    assert "[supervisor:" in warnings_in(log)[0], log
    assert "StopIteration" not in log, log


NOT_INSTALLED = (
    "nonexistent",
    "no TracerProvider of that name is installed (entry point group opentelemetry_tracer_provider)",
)
FAILS_TO_LOAD = (
    "broken",
    "the TracerProvider of that name failed to load (RuntimeError: no exporter configured)",
)


@pytest.mark.parametrize(("provider", "why"), [NOT_INSTALLED, FAILS_TO_LOAD])
def test_check_says_it_in_one_line(db_dsn, broken_provider, tmp_path: Path, provider, why):
    """Not a refusal (`run` runs with it): exit 0, the line on stderr, and nothing of
    the API's own traceback."""
    config = tmp_path / "pgworkerd.yaml"
    config.write_text("handlers: {noop: 'tests.handlers:noop'}\n")
    result = pgworkerd_cli(
        "check",
        "-c",
        str(config),
        env={
            "PGWORKERD_DATABASE_URL": db_dsn,
            VARIABLE: provider,
            "PYTHONPATH": f"{REPO}:{broken_provider}",
        },
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: 1 handler(s) import"), result.stdout
    assert result.stderr.splitlines() == [
        f"pgworkerd: warning: OTEL_PYTHON_TRACER_PROVIDER={provider!r}: {why}; "
        "pgworkerd traces nothing unless a TracerProvider is set in code"
    ], result.stderr
