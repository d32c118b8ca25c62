"""What every `reflection` command shares: user errors as one `error:` line and exit 2,
untrusted text made safe for a terminal, and the guards around input and output files.

Each command's body runs under `@user_errors`, so the expected failures of bad input (a
missing file, a malformed config, an output that must not be written) never show a
traceback. To make another exception type a user error, add it to `USER_ERRORS`.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from reflection._terminal import plain
from reflection.batch._output import OutputCorrupt, OutputLocked
from reflection._judge_config import JudgeFatalError

__all__ = ["USER_ERRORS", "fail", "open_text_output", "plain", "refuse_input_as_output", "user_errors"]

USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # includes ConfigError, OutputCorrupt, RowError and pydantic's ValidationError
    OSError,  # missing, unreadable or unwritable files, a directory where a file is needed
    OutputLocked,
    OutputCorrupt,
    sqlite3.DatabaseError,  # an unusable judge cache file
    ImportError,  # an optional extra that is not installed; the message names it
    JudgeFatalError,  # a judge endpoint that cannot answer at all (401/403/404, refused) stops the run
)
"""Exceptions a command reports as `error: <message>` and exit status 2."""

def fail(message: str) -> typer.Exit:
    """Print `error: <message>` (one line, made safe) on stderr; return the exit to raise."""
    typer.echo(f"error: {plain(message, one_line=True)}", err=True)
    return typer.Exit(2)


F = TypeVar("F", bound=Callable[..., Any])


def user_errors(command: F) -> F:
    """Run a command body, turning `USER_ERRORS` into `error: <message>` and exit 2."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as exc:
            raise fail(_message(exc)) from None

    return run  # type: ignore[return-value]


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"  # e.g. "out/: Is a directory", without "[Errno 21]"
    return str(exc) or type(exc).__name__


def refuse_input_as_output(output: Path | None, *inputs: Path, option: str = "-o/--output") -> None:
    """Raise ValueError when `output` is one of `inputs` (also through symlinks or hard links):
    opening it for writing would empty the input before it is read."""
    if output is None:
        return
    for source in inputs:
        same = output.resolve() == source.resolve()
        if not same and output.exists() and source.exists():
            same = os.path.samefile(output, source)
        if same:
            raise ValueError(f"{option} {output} is the input file {source}; write the results to another file")


def open_text_output(path: Path) -> Any:
    """Open a result file for writing, creating its directory as `reflection batch` does."""
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory; give a file name for the output", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("w", encoding="utf-8", buffering=_OUTPUT_BUFFER)


_OUTPUT_BUFFER = 1 << 20  # rows of several KB each: one system call per MiB, not one per row or two
