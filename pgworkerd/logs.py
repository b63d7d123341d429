"""One line per event on stderr, for people (`text`) or machines (`json`).

Every process logs for itself (the supervisor and each child); a line is written by
one write() call, so lines from several processes never interleave.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
_FIELDS = "pgworkerd_fields"


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


class _TextFormatter(_LineFormatter):
    # A worker logs two lines per job: the formatting is kept cheap (the date part of
    # the timestamp is formatted once a second).
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
        line = f"{self._timestamp(created)} {levelname:<7} [{process_name}:{pid}] {message}"
        if fields:
            # Numbers (most fields of a job's lines) need no quoting: formatted inline.
            extra = " ".join(
                [
                    f"{key}={value}"
                    if type(value) is int or type(value) is float
                    else f"{key}={_text_value(value)}"
                    for key, value in fields.items()
                ]
            )
            line = f"{line} {extra}"
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
            # cached second is shared by the threads of a worker.
            with self.lock:  # type: ignore[union-attr]
                line = formatter.line(
                    created,
                    logging.getLevelName(level),
                    os.getpid() if logging.logProcesses else None,
                    _process_name(),
                    message,
                    fields,
                )
                self.stream.write(line + self.terminator)
                self.stream.flush()
        except Exception:
            self.handleError(logging.makeLogRecord({"msg": message, "levelno": level}))


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
    text = str(value)
    return (
        json.dumps(text, ensure_ascii=False) if (not text or " " in text or '"' in text) else text
    )


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")
