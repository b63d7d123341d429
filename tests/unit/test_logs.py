"""The log lines `logs.event` writes: the same through its direct path (no LogRecord)
as through the logging machinery, and through the machinery whenever someone else
may want the record (a filter or another handler)."""

from __future__ import annotations

import io
import json
import logging
import multiprocessing.process as mp_process
import os
import sys
import time
from collections.abc import Iterator

import pytest

from pgworkerd import logs

NOW = 1_795_000_000.25


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """What setup's handler writes (setup is called in the test: pytest sets its own
    sys.stderr between the fixtures and the test)."""
    logger = logging.getLogger("pgworkerd")
    saved = (logger.handlers[:], logger.level, logger.propagate, logger.filters[:])
    name = mp_process.current_process().name
    out = io.StringIO()
    monkeypatch.setattr(time, "time", lambda: NOW)
    real_setup = logs.setup

    def setup(*args: object, **kwargs: object) -> None:
        monkeypatch.setattr(sys, "stderr", out)
        real_setup(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(logs, "setup", setup)
    yield out
    logger.handlers[:], logger.level, logger.propagate, logger.filters[:] = saved
    mp_process.current_process().name = name


def _through_a_record(fmt: str) -> str:
    """What the formatter makes of the record `logging` would build for the event."""
    logger = logging.getLogger("pgworkerd.worker")
    record = logger.makeRecord(
        logger.name,
        logging.INFO,
        "",
        0,
        "job succeeded",
        (),
        None,
        extra={"pgworkerd_fields": {"job": 7, "kind": "a b", "duration_ms": 1.5}},
    )
    return logging.getLogger("pgworkerd").handlers[0].format(record) + "\n"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_direct_line_is_the_line_a_record_makes(
    stderr: io.StringIO, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    logs.setup(fmt, role="worker default#1")
    expected = _through_a_record(fmt)

    def no_record(*args: object, **kwargs: object) -> logging.LogRecord:
        raise AssertionError("a LogRecord was built for a line only setup's handler takes")

    monkeypatch.setattr(logging.Logger, "makeRecord", no_record)
    logs.event(
        logging.getLogger("pgworkerd.worker"),
        logging.INFO,
        "job succeeded",
        job=7,
        kind="a b",
        duration_ms=1.5,
    )
    assert stderr.getvalue() == expected
    if fmt == "text":
        assert expected.startswith("2026-11-18T")  # NOW, in UTC
        assert "[worker default#1:" in expected and 'kind="a b" duration_ms=1.5' in expected
    else:
        assert json.loads(expected)["event"] == "job succeeded"


def test_a_filter_someone_added_to_the_handler_still_sees_every_record(stderr: io.StringIO) -> None:
    logs.setup("text", role="worker default#1")
    seen: list[logging.LogRecord] = []

    def keep(record: logging.LogRecord) -> bool:
        seen.append(record)
        return True

    logging.getLogger("pgworkerd").handlers[0].addFilter(keep)
    logs.event(logging.getLogger("pgworkerd.worker"), logging.INFO, "job started", job=7)
    assert [r.getMessage() for r in seen] == ["job started"]
    assert stderr.getvalue().rstrip().endswith("job started job=7")


def test_below_the_level_nothing_is_written(stderr: io.StringIO) -> None:
    logs.setup("text", role="worker default#1", level="warning")
    logs.event(logging.getLogger("pgworkerd.worker"), logging.INFO, "job started", job=7)
    assert stderr.getvalue() == ""


class _Writes(io.StringIO):
    """A stream that keeps each write() it is given, as the system call it becomes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_lines_logged_together_are_the_lines_of_each_event_in_few_whole_line_writes(
    stderr: io.StringIO, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    logs.setup(fmt, role="worker default#1")
    logger = logging.getLogger("pgworkerd.worker")
    entries: list[logs.Event] = [
        (
            logging.INFO if n % 7 else logging.WARNING,
            "job succeeded",
            {"job": n, "kind": "a b", "attempt": 1, "duration_ms": 0.5},
        )
        for n in range(200)
    ]
    entries.append((logging.INFO, "job succeeded", {"job": 200, "kind": "é" * 5000}))
    for level, message, fields in entries:
        logs.event(logger, level, message, **fields)
    one_by_one = stderr.getvalue()

    writes = _Writes()
    monkeypatch.setattr(logging.getLogger("pgworkerd").handlers[0], "stream", writes)
    logs.events(logger, entries)
    assert writes.getvalue() == one_by_one
    # Whole lines, at most PIPE_BUF bytes a write (the 10,000-byte line goes alone).
    assert all(text.endswith("\n") for text in writes.writes)
    assert [len(text.encode()) > 4096 for text in writes.writes].count(True) == 1
    assert writes.writes[-1].count("\n") == 1 and len(writes.writes[-1].encode()) > 4096
    assert len(writes.writes) < 20


def test_events_below_the_level_are_left_out(stderr: io.StringIO) -> None:
    logs.setup("text", role="worker default#1", level="warning")
    logger = logging.getLogger("pgworkerd.worker")
    logs.events(logger, [(logging.INFO, "job succeeded", {"job": 1})])
    assert stderr.getvalue() == ""
    logs.events(
        logger,
        [
            (logging.INFO, "job succeeded", {"job": 1}),
            (logging.WARNING, "job lease lost", {"job": 2}),
        ],
    )
    assert (
        stderr.getvalue()
        .rstrip()
        .endswith(f"WARNING [worker default#1:{os.getpid()}] job lease lost job=2")
    )


def test_a_line_written_after_a_fork_names_the_child(stderr: io.StringIO) -> None:
    logs.setup("text", role="worker default#1")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its line through the pipe, then out at once
        try:
            with os.fdopen(write_end, "w") as out:
                logging.getLogger("pgworkerd").handlers[0].setStream(out)  # type: ignore[attr-defined]
                logs.event(
                    logging.getLogger("pgworkerd.worker"), logging.INFO, "job started", job=1
                )
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as lines:
        line = lines.read()
    os.waitpid(pid, 0)
    assert f"[worker default#1:{pid}] job started job=1" in line
