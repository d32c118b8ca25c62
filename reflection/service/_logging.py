"""JSON log lines on stderr: one per request (with its request id, and its tenant's name when
tenants are configured), none with keys or bodies."""

from __future__ import annotations

import logging
import time
from typing import Any

from reflection._json import dumps

__all__ = ["JsonFormatter", "log_config", "request_logger"]

request_logger = logging.getLogger("reflection.service")

_EXTRA_FIELDS = ("request_id", "method", "route", "status", "duration_ms", "client", "actions", "tenant", "event")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the request fields set via `extra`."""

    _second: tuple[int, str] = (-1, "")
    """The last whole second formatted and its text: a busy worker logs many lines a second."""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        line: dict[str, Any] = {
            "ts": f"{self._second[1]}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info and record.exc_info[0] is not None:
            # The type and message only: a traceback's locals could hold request bodies or keys.
            line["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
        return dumps(line)


def log_config(level: str = "info") -> dict[str, Any]:
    """A `logging.config.dictConfig` for uvicorn and the service: JSON lines on stderr, no access log
    (the service writes its own request line)."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "reflection": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }
