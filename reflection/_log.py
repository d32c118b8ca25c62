"""Where the library's warnings go when a CLI command runs.

The library only logs (loggers `reflection.judge`, `reflection.cache`, ...) and leaves
handlers to the application. The `reflection` commands are that application: they print
each warning on stderr as one plain line, `warning: <message>`.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["warnings_to_stderr"]


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at the time (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("warning: %(message)s"))
        self.setLevel(logging.WARNING)

    @property  # type: ignore[override]
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
