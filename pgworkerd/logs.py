"""One line per event on stderr, for people (`text`) or machines (`json`).

Every process logs for itself (the supervisor and each child); a line is written by
one write() call, so lines from several processes never interleave.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
_FIELDS = "pgworkerd_fields"


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, {})
        extra = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        when = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        line = f"{when}Z {record.levelname:<7} [{record.processName}:{os.getpid()}] " \
               f"{record.getMessage()}"
        if extra:
            line = f"{line} {extra}"
        if record.exc_info:
            line = f"{line} {self.formatException(record.exc_info)}"
        return _one_line(line)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "pid": os.getpid(),
            "process": record.processName,
            "event": record.getMessage(),
            **getattr(record, _FIELDS, {}),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup(log_format: str = "text", *, role: str = "pgworkerd", level: int = logging.INFO) -> None:
    """Send pgworkerd's logs to stderr in `log_format`; `role` names this process."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    logger = logging.getLogger("pgworkerd")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
    import multiprocessing.process as mp_process  # names the process in each record

    mp_process.current_process().name = role


def event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log `message` with structured `fields` (key=value in text, keys in JSON)."""
    logger.log(level, message, extra={_FIELDS: fields})


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text, ensure_ascii=False) if (not text or " " in text or '"' in text) \
        else text


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")
