"""The handlers `make demo` runs: one job of each fate."""

from __future__ import annotations

import time

import pgworkerd


def hello(job: pgworkerd.Job) -> str:
    """Succeeds at once."""
    return f"hello, {job.payload.get('name', 'world')}"


def flaky(job: pgworkerd.Job) -> str:
    """Fails on its first attempts, then succeeds: retried with backoff."""
    if job.attempt < job.payload.get("succeed_at", 2):
        raise ConnectionError(f"upstream not ready yet (attempt {job.attempt})")
    return f"worked on attempt {job.attempt}"


def poison(job: pgworkerd.Job) -> None:
    """Always fails: dead-lettered after max_attempts, every error kept."""
    raise ValueError(f"this payload can never be processed: {job.payload!r}")


def hang(job: pgworkerd.Job) -> None:
    """Runs past its queue's max_runtime and ignores the soft JobTimeout, so the
    supervisor kills its worker; the job is charged, retried, then dead."""
    try:
        time.sleep(3600)
    except pgworkerd.JobTimeout:
        time.sleep(3600)
