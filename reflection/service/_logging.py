"""JSON log lines on stderr: one per request (with its request id, and its tenant's name when
tenants are configured), none with keys or bodies."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from reflection._json import dumps

__all__ = ["JsonFormatter", "RequestLines", "log_config", "request_logger"]

request_logger = logging.getLogger("reflection.service")

_EXTRA_FIELDS = ("request_id", "method", "route", "status", "duration_ms", "client", "actions", "tenant", "event")


class RequestLines:
    """The request log lines of one worker, handed to `request_logger` a moment after their
    requests end: within `delay` seconds, at once when `most` are waiting, and all of them by
    `flush` (at shutdown).

    A line costs ~100-150 us of CPU on a worker whose caches went cold waiting on the upstream
    (the record, its JSON, the write). Written as its request ends, it held up the request that
    came next; deferred, it is written while the worker waits on an upstream or is idle. Each
    record keeps the time its request ended."""

    def __init__(self, delay: float = 0.002, most: int = 256):
        self.delay = delay
        self.most = most
        self._pending: list[tuple[float, dict[str, Any]]] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, fields: dict[str, Any]) -> None:
        """One request's line: `fields` go into the record as `extra`. Call from the event loop."""
        self._pending.append((time.time(), fields))
        if len(self._pending) >= self.most:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self.flush)

    def flush(self) -> None:
        """Hand every waiting line to `request_logger` now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, []
        for ended, fields in pending:
            # makeRecord + handle is `info()` without its walk up the stack for the caller's
            # file and line, which the request line never shows.
            record = request_logger.makeRecord(
                request_logger.name, logging.INFO, __file__, 0, "request", (), None, extra=fields
            )
            record.relativeCreated -= (record.created - ended) * 1000
            record.created, record.msecs = ended, (ended - int(ended)) * 1000
            request_logger.handle(record)


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
