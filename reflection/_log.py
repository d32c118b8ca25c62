"""Where the library's warnings go when a CLI command runs.

The library only logs (loggers `reflection.judge`, `reflection.cache`, ...) and leaves
handlers to the application. The `reflection` commands are that application: they print
each warning on stderr as one plain line, `warning: <message>`.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from reflection._text import terminal_safe

__all__ = ["warnings_to_stderr"]


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time (test runners swap it), one line per
    warning with no control codes: a warning may quote a server's message or a file name."""

    def __init__(self) -> None:
        super().__init__()
        self.setLevel(logging.WARNING)

    def format(self, record: logging.LogRecord) -> str:
        return "warning: " + terminal_safe(record.getMessage(), one_line=True)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def warnings_to_stderr() -> None:
    """Print the library's warnings on stderr (idempotent; called by each CLI command)."""
    logger = logging.getLogger("reflection")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr())
    if logger.level == logging.NOTSET or logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)
