"""One line per event on stderr, for people (`text`) or machines (`json`).

Every process logs for itself (the supervisor and each child); a line is written by
one write() call, so lines from several processes never interleave.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
_FIELDS = "pgworkerd_fields"


class _TextFormatter(logging.Formatter):
    # A worker logs two lines per job: the formatting is kept cheap (the date part of
    # the timestamp is formatted once a second).
    _second = -1
    _second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, None)
        line = (
            f"{self._timestamp(record.created)} {record.levelname:<7} "
            f"[{record.processName}:{record.process}] {record.getMessage()}"
        )
        if fields:
            extra = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
            line = f"{line} {extra}"
        if record.exc_info:
            line = f"{line} {self.formatException(record.exc_info)}"
        return _one_line(line)

    def _timestamp(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "pid": record.process,
            "process": record.processName,
            "event": record.getMessage(),
            **getattr(record, _FIELDS, {}),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup(
    log_format: str = "text", *, role: str = "pgworkerd", level: int | str = logging.INFO
) -> None:
    """Send pgworkerd's logs to stderr in `log_format`; `role` names this process."""
    handler = logging.StreamHandler(sys.stderr)
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
        logger.handle(
            logger.makeRecord(logger.name, level, "", 0, message, (), None, extra={_FIELDS: fields})
        )


def _text_value(value: Any) -> str:
    if type(value) is int or type(value) is float:
        return str(value)
    text = str(value)
    return (
        json.dumps(text, ensure_ascii=False) if (not text or " " in text or '"' in text) else text
    )


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")
