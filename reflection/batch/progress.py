"""Progress for a batch run: a rich bar on a terminal, plain periodic lines otherwise (CI, pipes).

Both show rows done, rows/s, ETA (when the total is known), judge tokens and cost so far,
and errors (error rows plus rows with a judge check that failed after retries).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from reflection.batch.report import format_cost, row_problems, row_usage

__all__ = ["BatchProgress", "NoProgress", "PlainProgress", "RichProgress", "make_progress"]


class BatchProgress(Protocol):
    """What the runner tells a progress display."""

    def start(self, total: int | None, skipped: int) -> None: ...

    def row(self, row: Mapping[str, Any]) -> None: ...

    def finish(self) -> None: ...


class _Tally:
    def __init__(self) -> None:
        self.done = 0
        self.errors = 0
        self.tokens = 0
        self.cost: float | None = 0.0  # None once a row's requests have no known price
        self.started = time.monotonic()

    def add(self, row: Mapping[str, Any]) -> None:
        self.done += 1
        if row_problems(row):
            self.errors += 1
        usage = row_usage(row)
        self.tokens += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
        if self.cost is not None:
            cost = usage.get("cost_usd", 0.0)
            self.cost = None if cost is None and usage.get("requests") else self.cost + float(cost or 0.0)

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0


class NoProgress:
    """Shows nothing."""

    def start(self, total: int | None, skipped: int) -> None:
        """Nothing to show."""

    def row(self, row: Mapping[str, Any]) -> None:
        """Nothing to show."""

    def finish(self) -> None:
        """Nothing to show."""


class PlainProgress:
    """One line every `every` seconds, and a last one at the end."""

    def __init__(self, console: Console, every: float = 10.0):
        self.console = console
        self.every = every
        self.total: int | None = None
        self.tally = _Tally()
        self._last = time.monotonic()

    def start(self, total: int | None, skipped: int) -> None:
        """Note the work ahead."""
        self.total = total
        self.tally = _Tally()
        self._last = time.monotonic()
        todo = f"{total:,} rows to reflect" if total is not None else "rows to reflect: unknown until read"
        self.console.print(f"batch: {todo}" + (f"; {skipped:,} already in the output, skipped" if skipped else ""))

    def row(self, row: Mapping[str, Any]) -> None:
        """Count a finished row; print a line when `every` seconds have passed."""
        self.tally.add(row)
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.console.print(self._line())

    def _line(self) -> str:
        t = self.tally
        rate = t.rate()
        done = f"{t.done:,}" + (f"/{self.total:,}" if self.total else "")
        eta = ""
        if self.total and rate > 0:
            eta = f", ETA {max(0.0, (self.total - t.done) / rate):,.0f} s"
        return (
            f"batch: {done} rows, {rate:,.1f} rows/s{eta}, {t.tokens:,} judge tokens, "
            f"{'cost unknown' if t.cost is None else format_cost(t.cost)}, {t.errors:,} errors"
        )

    def finish(self) -> None:
        """Print the final line."""
        self.console.print(self._line())


class RichProgress:
    """A live rich progress bar on stderr."""

    def __init__(self, console: Console):
        self.console = console
        self.tally = _Tally()
        self._progress = Progress(
            TextColumn("[bold]reflect"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} rows/s"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[tokens]} tok  {task.fields[cost]}  {task.fields[errors]} errors"),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None
        self._last = 0.0

    def start(self, total: int | None, skipped: int) -> None:
        """Show the bar."""
        self.tally = _Tally()
        if skipped:
            self.console.print(f"{skipped:,} rows already in the output: skipped")
        self._progress.start()
        self._task = self._progress.add_task("reflect", total=total, rate="0.0", tokens="0", cost="$0.0000", errors=0)

    def row(self, row: Mapping[str, Any]) -> None:
        """Advance by one row (fields refreshed at most 10 times a second)."""
        self.tally.add(row)
        assert self._task is not None
        now = time.monotonic()
        if now - self._last >= 0.1:
            self._last = now
            self._refresh(self._task)

    def _refresh(self, task: TaskID) -> None:
        t = self.tally
        self._progress.update(
            task,
            completed=t.done,
            rate=f"{t.rate():,.1f}",
            tokens=f"{t.tokens:,}",
            cost=format_cost(t.cost),
            errors=t.errors,
        )

    def finish(self) -> None:
        """Final refresh; stop the live display."""
        if self._task is not None:
            self._refresh(self._task)
            if self._progress.tasks[0].total is None or self._progress.tasks[0].total < self.tally.done:
                self._progress.update(self._task, total=self.tally.done)
        self._progress.stop()


def make_progress(console: Console | None = None, *, enabled: bool = True) -> BatchProgress:
    """A rich bar when `console` (default: stderr) is a terminal, plain lines otherwise."""
    if not enabled:
        return NoProgress()
    console = console or Console(stderr=True)
    return RichProgress(console) if console.is_terminal else PlainProgress(console)
