"""What every `reflection` command shares: user errors as one `error:` line and exit 2,
untrusted text made safe for a terminal, the guards around input and output files, a closed
stdout, and the exit status a run's verdicts call for (`--fail-on`).

Each command's body runs under `@user_errors`, so the expected failures of bad input (a
missing file, a malformed config, an output that must not be written) never show a
traceback. To make another exception type a user error, add it to `USER_ERRORS`.

Exit statuses: 0 done; 1 a `--fail-on` kind of row was found; 2 a user error (bad input or
options, a judge endpoint that answers no request); 3 the judge answered none of the rows it
was asked about (every judged row unknown); 130 interrupted; 141 stdout was closed before
the command finished (`| head`), as for a Unix tool ended by SIGPIPE (128 + 13).
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import sys
import warnings
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

import typer

from reflection._text import terminal_safe
from reflection.batch._output import OutputCorrupt, OutputLocked
from reflection.errors import JudgeFatalError

__all__ = [
    "CLOSED_STDOUT",
    "FAIL_ON",
    "FAIL_ON_HELP",
    "NO_VERDICTS",
    "USER_ERRORS",
    "ClosedStdout",
    "drop_unawaited_quietly",
    "fail",
    "fail_on_option",
    "open_text_output",
    "raise_broken_pipe",
    "refuse_input_as_output",
    "stdout_closed",
    "user_errors",
    "verdict_exit",
]

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
    typer.echo(f"error: {terminal_safe(message, one_line=True)}", err=True)
    return typer.Exit(2)


F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C")


def user_errors(command: F) -> F:
    """Run a command body, turning `USER_ERRORS` into `error: <message>` and exit 2."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except BrokenPipeError as exc:  # before USER_ERRORS, which holds OSError
            if stdout_closed():
                raise closed_stdout_exit() from None
            raise fail(_message(exc)) from None
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


# --- a closed stdout ------------------------------------------------------------------------------

CLOSED_STDOUT = 141
"""The exit status when stdout's reader went away (`reflection check ... | head`): 128 +
SIGPIPE, what a shell reports for a Unix tool the signal ended. Not 0: the run did not
finish writing, so a script (or `set -o pipefail`) must not take it for a complete run."""


def stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone. A `BrokenPipeError` that
    another file raised (a FIFO given as `-o`) stays an error."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object with no descriptor
        return False
    try:
        import select

        poller = select.poll()
    except (ImportError, AttributeError):  # no poll (Windows): the broken pipe was most likely stdout
        return True
    poller.register(fd, 0)  # POLLERR and POLLHUP are always reported: the reader has gone
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def drop_unawaited_quietly() -> None:
    """A run stopped by a closed stdout drops the judge connections still being opened, unawaited:
    expected on the way out, so Python should not say so on stderr. Call it where the closed
    stdout is first seen, before the run's tasks are torn down."""
    warnings.filterwarnings("ignore", r"coroutine .* was never awaited", RuntimeWarning)


def closed_stdout_exit() -> typer.Exit:
    """Point stdout at the null device, so nothing left in its buffer fails again at exit,
    and return the exit to raise: quiet, status `CLOSED_STDOUT`."""
    drop_unawaited_quietly()
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (AttributeError, OSError, ValueError):
        pass
    return typer.Exit(CLOSED_STDOUT)


def raise_broken_pipe(console: C) -> C:
    """Have a rich `Console` raise `BrokenPipeError` on a closed stdout, as every other write
    does, where rich's own handler would exit with status 1 at once; then `user_errors` and
    `ClosedStdout` decide what happens. Returns the console."""

    def on_broken_pipe() -> None:
        console.quiet = True  # type: ignore[attr-defined]  # nothing more is written through it
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    console.on_broken_pipe = on_broken_pipe  # type: ignore[attr-defined]
    return console


class ClosedStdout:
    """`with pipe:` around printing to stdout: a closed stdout stops that printing only, so the
    command still does the rest (writes its HTML report, decides its exit status); then
    `pipe.closed` says to exit with `CLOSED_STDOUT`."""

    def __init__(self) -> None:
        self.closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if kind is not None and issubclass(kind, BrokenPipeError) and stdout_closed():
            closed_stdout_exit()
            self.closed = True
            return True
        return False


# --- the exit status of a run's verdicts ----------------------------------------------------------

FAIL_ON = ("invalid", "unknown", "error")
"""The kinds of row `--fail-on` takes, in the order a reason lists them."""

FAIL_ON_HELP = (
    "Exit 1 (with a one-line reason on stderr) when any row is one of these: invalid, unknown "
    "(the judge failed or was uncertain), error (unreadable row). Repeat the option or give a "
    "comma list: --fail-on invalid,error."
)

NO_VERDICTS = 3
"""The exit status when the judge answered none of the rows it was asked about."""


def fail_on_option(values: list[str] | None) -> list[str]:
    """The `--fail-on` values, split at commas, checked and in `FAIL_ON` order (an option callback)."""
    chosen: set[str] = set()
    for value in values or ():
        for part in value.split(","):
            name = part.strip().lower()
            if not name:
                continue
            if name not in FAIL_ON:
                raise typer.BadParameter(f"{part.strip()!r} is not one of {', '.join(FAIL_ON)}")
            chosen.add(name)
    return [name for name in FAIL_ON if name in chosen]


def verdict_exit(counts: Mapping[str, int], fail_on: Collection[str]) -> int:
    """The exit status a run's row counts call for, after printing its one-line reason on stderr.

    `counts` has `rows`, `invalid`, `unknown`, `error` and `judge_skipped` (rows the judge was
    not asked about). When the judge was asked about some rows and answered none (every one
    unknown: a judge failing on every request, or always uncertain), the results say nothing:
    `NO_VERDICTS` (3), whatever `fail_on` says. Else 1 when a row of a `fail_on` kind is there.
    """
    judged = counts["rows"] - counts["error"] - counts.get("judge_skipped", 0)
    if judged > 0 and counts["unknown"] >= judged:
        typer.echo(
            f"error: no verdicts: the judge answered none of the {judged:,} rows it was asked about "
            f"({counts['unknown']:,} unknown); see the judge errors (exit {NO_VERDICTS})",
            err=True,
        )
        return NO_VERDICTS
    found = [f"{counts[kind]:,} {kind}" for kind in FAIL_ON if kind in fail_on and counts[kind]]
    if found:
        typer.echo(f"failed: {', '.join(found)} of {counts['rows']:,} rows (--fail-on {','.join(fail_on)})", err=True)
        return 1
    return 0
