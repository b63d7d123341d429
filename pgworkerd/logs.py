"""One line per event on stderr, for people (`text`) or machines (`json`).

Every process logs for itself (the supervisor and each child); a line is written by
one write() call, so lines from several processes never interleave. Lines logged
together (`events`: a batch's successes) go in as few write() calls as whole lines of
at most PIPE_BUF bytes allow (a pipe keeps such a write in one piece).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import select
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
_FIELDS = "pgworkerd_fields"
# The most a write() to a pipe keeps in one piece (4,096 bytes on Linux).
_WHOLE_WRITE_BYTES = getattr(select, "PIPE_BUF", 512)

# This process's id, for the lines' `[name:pid]`: os.getpid() is a system call, two a job
# at info; a fork is the only way it changes under a running interpreter.
_pid = os.getpid()


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)

# An event's entry for `events`: its level, message and fields.
Event = tuple[int, str, dict[str, Any]]


class _LineFormatter(logging.Formatter):
    """A record taken apart into the fields of `line`, which the fast path of `event`
    calls directly, without building a LogRecord: both paths write the same line."""

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        return self.line(
            record.created,
            record.levelname,
            record.process,
            record.processName,
            record.getMessage(),
            getattr(record, _FIELDS, None),
            exc,
        )

    def line(
        self,
        created: float,
        levelname: str,
        pid: int | None,
        process_name: str | None,
        message: str,
        fields: dict[str, Any] | None,
        exception: str | None = None,
    ) -> str:
        raise NotImplementedError

    def event_line(self, created: float, level: int, message: str, fields: dict[str, Any]) -> str:
        """`line` for an event of this process at `level`, as a LogRecord would say it."""
        return self.line(
            created,
            logging.getLevelName(level),
            _pid if logging.logProcesses else None,
            _process_name(),
            message,
            fields,
        )


class _TextFormatter(_LineFormatter):
    # A worker logs two lines per job: the formatting is kept cheap (the date part of
    # the timestamp is formatted once a second; the level, process name and pid once).
    _second = -1
    _second_text = ""

    def line(
        self,
        created: float,
        levelname: str,
        pid: int | None,
        process_name: str | None,
        message: str,
        fields: dict[str, Any] | None,
        exception: str | None = None,
    ) -> str:
        head = f"{levelname:<7} [{process_name}:{pid}]"
        return self._line(created, head, message, fields, exception)

    def event_line(self, created: float, level: int, message: str, fields: dict[str, Any]) -> str:
        head = _event_head(level, _pid if logging.logProcesses else None, _process_name())
        return self._line(created, head, message, fields)

    def _line(
        self,
        created: float,
        head: str,
        message: str,
        fields: dict[str, Any] | None,
        exception: str | None = None,
    ) -> str:
        line = f"{self._timestamp(created)} {head} {message}"
        if fields:
            for key, value in fields.items():
                # Numbers (most fields of a job's lines) need no quoting: formatted inline.
                if type(value) is int or type(value) is float:
                    line = f"{line} {key}={value}"
                else:
                    line = f"{line} {key}={_text_value(value)}"
        if exception:
            line = f"{line} {exception}"
        return _one_line(line)

    def _timestamp(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"


class _JsonFormatter(_LineFormatter):
    def line(
        self,
        created: float,
        levelname: str,
        pid: int | None,
        process_name: str | None,
        message: str,
        fields: dict[str, Any] | None,
        exception: str | None = None,
    ) -> str:
        entry = {
            "ts": datetime.fromtimestamp(created, UTC).isoformat(),
            "level": levelname.lower(),
            "pid": pid,
            "process": process_name,
            "event": message,
            **(fields or {}),
        }
        if exception:
            entry["exception"] = exception
        return json.dumps(entry, default=str, ensure_ascii=False)


class _EventHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `setup` installs. `event` hands it its lines directly when it is the
    only place they go (see `_sole_handler`): the same line as through a LogRecord,
    without building one (a worker logs two lines a job; the record and the trip
    through the logging machinery were most of their cost)."""

    def emit_event(self, level: int, message: str, fields: dict[str, Any]) -> None:
        formatter = self.formatter
        assert isinstance(formatter, _LineFormatter)  # set by setup()
        created = time.time()
        try:
            # Formatted under the lock, as Handler.handle formats: the text formatter's
            # caches are shared by the threads of a worker.
            with self.lock:  # type: ignore[union-attr]
                line = formatter.event_line(created, level, message, fields)
                self.stream.write(line + self.terminator)
                self.stream.flush()
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": message, "levelno": level}))

    def emit_events(self, events: Sequence[Event]) -> None:
        """The lines of `events`, in order, in as few write() calls as whole lines of at
        most PIPE_BUF bytes allow (a line longer than that goes alone, as `emit_event`
        writes it)."""
        formatter = self.formatter
        assert isinstance(formatter, _LineFormatter)  # set by setup()
        created = time.time()
        try:
            with self.lock:  # type: ignore[union-attr]
                end = self.terminator
                lines = [
                    formatter.event_line(created, level, message, fields) + end
                    for level, message, fields in events
                ]
                for text in _whole_line_groups(lines):
                    self.stream.write(text)
                    self.stream.flush()
        except Exception:
            for level, message, _ in events:
                self.handleError(logging.makeLogRecord({"msg": message, "levelno": level}))


def _whole_line_groups(lines: list[str]) -> Iterator[str]:
    """`lines` (each ending in the handler's terminator) joined into groups of at most
    PIPE_BUF bytes (in UTF-8; a longer line is a group of its own)."""
    group: list[str] = []
    size = 0
    for line in lines:
        length = len(line) if line.isascii() else len(line.encode("utf-8", "backslashreplace"))
        if group and size + length > _WHOLE_WRITE_BYTES:
            yield "".join(group)
            group, size = [], 0
        group.append(line)
        size += length
    if group:
        yield "".join(group)


def setup(
    log_format: str = "text", *, role: str = "pgworkerd", level: int | str = logging.INFO
) -> None:
    """Send pgworkerd's logs to stderr in `log_format`; `role` names this process."""
    handler = _EventHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    logger = logging.getLogger("pgworkerd")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper() if isinstance(level, str) else level)
    logger.propagate = False
    import multiprocessing.process as mp_process  # names the process in each record

    mp_process.current_process().name = role


def event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log `message` with structured `fields` (key=value in text, keys in JSON).

    Workers log two lines a job, so the record is made directly: `Logger.log` would
    also walk the stack for a caller's file and line that no line of ours shows."""
    if logger.isEnabledFor(level):
        handler = _sole_handler(logger, level)
        if handler is not None:
            handler.emit_event(level, message, fields)
            return
        logger.handle(
            logger.makeRecord(logger.name, level, "", 0, message, (), None, extra={_FIELDS: fields})
        )


def events(logger: logging.Logger, entries: Sequence[Event]) -> None:
    """Log each of `entries` (level, message, fields) as `event` would, written together:
    a batch's lines in one write() (or a few: see `_EventHandler.emit_events`) instead of
    one a line."""
    enabled = [entry for entry in entries if logger.isEnabledFor(entry[0])]
    if not enabled:
        return
    handler = _sole_handler(logger, min(level for level, _, _ in enabled))
    if handler is not None:
        handler.emit_events(enabled)
        return
    for level, message, fields in enabled:
        event(logger, level, message, **fields)


def _sole_handler(logger: logging.Logger, level: int) -> _EventHandler | None:
    """`setup`'s handler when a record from `logger` at `level` would go to it and
    nowhere else, through no filter; else None (then the record is built and handled
    as usual: a handler or filter someone added sees every line)."""
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters or node.disabled:
            return None
        if node.handlers:
            if node.propagate or len(node.handlers) != 1:
                return None
            handler = node.handlers[0]
            if type(handler) is _EventHandler and not handler.filters and handler.level <= level:
                return handler
            return None
        if not node.propagate:
            return None
        node = node.parent
    return None


def _process_name() -> str | None:
    """What a LogRecord's processName would be (setup names the process)."""
    if not logging.logMultiprocessing:
        return None
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return "MainProcess"
    try:
        return str(mp.current_process().name)
    except Exception:
        return "MainProcess"


def _text_value(value: Any) -> str:
    if type(value) is int or type(value) is float:
        return str(value)
    if type(value) is str:
        # Kinds and queues come back on every job's line: quoted (or not) once (short
        # values only: an error's text is not kept).
        return _short_quoted_text(value) if len(value) <= 64 else _quoted_text(value)
    return _quoted_text(str(value))


def _quoted_text(text: str) -> str:
    return (
        json.dumps(text, ensure_ascii=False) if (not text or " " in text or '"' in text) else text
    )


_short_quoted_text = functools.lru_cache(maxsize=256)(_quoted_text)


# A text line's "LEVEL   [process:pid]", the same for every line of a process at a level:
# made once (a process renamed over and over keeps only the latest few).
@functools.lru_cache(maxsize=64)
def _event_head(level: int, pid: int | None, process_name: str | None) -> str:
    return f"{logging.getLevelName(level):<7} [{process_name}:{pid}]"


def _one_line(text: str) -> str:
    if "\n" in text or "\r" in text:
        return text.replace("\r", "\\r").replace("\n", "\\n")
    return text
