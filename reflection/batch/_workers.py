"""Static-only rows reflected in worker processes (`--workers N` of `check` and `batch`).

For JSON Lines input the parent only reads the lines (`inputs.jsonl_lines`) and sends them,
unparsed, in contiguous chunks to a `ProcessPoolExecutor`; each worker parses its lines with
the one-process path's code (`inputs.jsonl_row`, `rows.read_row`), reflects them as it does
(`runner.static_line`) and returns, per row, its line number, its own id (`rows.row_id`)
and its output line. The parent applies the id rules (resume skips, duplicate ids) to those
ids in input order, as the one-process path does, and writes each worker's line, or the
duplicate's error row in its place: parsing, the bulk of the parent's work otherwise, runs
in the workers. A worker does not reflect a row whose own id is among the resumed ones (the
parent drops it, or writes it as a duplicate). Other formats are read and prepared in the
parent, which sends the prepared rows. The parent takes the chunks back in the order it
sent them, so the output is in input order, every id once. At most `2 x workers` chunks are
in flight, which bounds memory in the parent and the workers whatever the input size.

Workers are forked while the parent has a single thread (`reflection check`, `reflection batch
--no-progress`); otherwise they start from a fork server ('spawn' where there is none), since
forking a process that holds threads is unsafe. They ignore SIGINT, so Ctrl-C reaches only the
parent, which cancels the chunks not started and waits for the few running ones. An
exception in a worker (a bug) is raised again in the parent; a worker that dies makes the
pool raise `BrokenProcessPool`. Neither hangs. On Linux a worker dies with its parent, even
one killed with SIGKILL (`_die_with`), so a rerun finds the output unlocked. The parent awaits each chunk on a thread, so
its event loop can deliver a cancellation (Ctrl-C) while the workers run.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Container, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import aclosing
from itertools import islice
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from reflection.config import ReflectionConfig
from reflection.rows import InputRow, Line, row_id

__all__ = ["MAX_DEFAULT_WORKERS", "MIN_INPUT_BYTES", "default_workers", "reflect_in_processes",
           "reflect_lines_in_processes", "use_processes"]

MAX_DEFAULT_WORKERS = 8
"""The default number of workers is the usable cores, at most this."""

MIN_INPUT_BYTES = 1 << 20
"""Inputs smaller than this run in one process: starting workers costs more than it saves."""

CHUNK_ROWS = 256
"""Rows per chunk sent to a worker: large enough to amortise the hand-over, small enough to
keep every worker busy to the end."""

Reflected = tuple[int, str, "bool | dict[str, Any] | None", "bytes | None"]
"""A JSON Lines row as a worker returns it: its line number, its own id (`rows.row_id`), its
`overall_valid` (or its summary when it is an error row: cheaper to send than a summary per
row), and its output line (None when its id is among the resumed ones: not reflected)."""


def default_workers() -> int:
    """The usable cores (this process's CPU affinity), at most `MAX_DEFAULT_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


def use_processes(path: Path, config: ReflectionConfig, workers: int) -> bool:
    """Whether reflecting the file `path` goes to worker processes: more than one worker, no
    judge (judged rows stay in one process, where the judge's limiter, connection pool and
    cache are shared), and a regular file of at least `MIN_INPUT_BYTES`."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return workers > 1 and config.judge is None and path.is_file() and path.stat().st_size >= MIN_INPUT_BYTES


# --- in the worker ---------------------------------------------------------------------------

_worker: dict[str, Any] = {}


def _start_worker(flat: bool, skip_ids: Container[str], parent: int | None) -> None:
    """`parent`: the pid of the process that forked this worker (None when it started from a
    fork server, or was spawned)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.set_wakeup_fd(-1)  # a forked worker must not write signals into the parent's event loop
    _die_with(parent if parent is not None else os.getppid())
    _worker.update(flat=flat, skip_ids=skip_ids)


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """On Linux, have the kernel kill this worker when `parent` exits. A parent killed with
    SIGKILL cannot stop its workers, and forked ones would otherwise wait forever on the task
    queue (they hold its write end too), keeping the output file, and its lock, open."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it exited before the kernel was asked
        os._exit(1)


def _reflect_chunk(items: list[InputRow | dict[str, Any]]) -> list[Line]:
    from reflection.batch.runner import static_line

    flat = _worker["flat"]
    return [static_line(item, flat) for item in items]


def _reflect_lines(lines: list[tuple[int, bytes | str]]) -> list[Reflected]:
    """Parse and reflect a chunk of `inputs.jsonl_lines` (blank lines give nothing)."""
    from reflection.batch.inputs import jsonl_row
    from reflection.batch.runner import _item_of

    skip_ids = _worker["skip_ids"]
    rows: list[tuple[int, str]] = []
    items: list[InputRow | dict[str, Any]] = []
    for number, line in lines:
        source = jsonl_row(number, line)
        if source is None:
            continue
        rid = row_id(source.raw, number)
        rows.append((number, rid))
        if rid not in skip_ids:
            items.append(_item_of(source, rid))
    out = iter(_reflect_chunk(items))
    reflected: list[Reflected] = []
    for number, rid in rows:
        if rid in skip_ids:
            reflected.append((number, rid, None, None))
            continue
        summary, line = next(out)
        reflected.append((number, rid, summary if "error" in summary else summary["overall_valid"], line))
    return reflected


# --- in the parent ---------------------------------------------------------------------------


def _context() -> Any:
    """'fork' while this process has one thread (workers start at once, without importing
    anything); otherwise 'forkserver' (forking a process with threads is unsafe), or 'spawn'
    where there is no forkserver."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    method = "forkserver" if "forkserver" in methods else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload([__name__])  # imported once, in the server, not per worker
    return context


async def reflect_in_processes(
    items: Iterable[InputRow | dict[str, Any]], config: ReflectionConfig, *, workers: int, flat: bool = False,
    chunk_rows: int | None = None,
) -> AsyncIterator[Line]:
    """Reflect prepared rows (`InputRow`s, and error rows passed through as they are) in
    `workers` processes, static checks and grounding only, yielding each output row's
    summary and line in input order, `chunk_rows` (default: `CHUNK_ROWS`) rows per chunk.

    The parent waits for a chunk without blocking its event loop, so cancelling it (asyncio
    turns Ctrl-C into a cancellation) stops the run at once."""
    chunks = _in_processes(_reflect_chunk, items, config, workers=workers, flat=flat, chunk_rows=chunk_rows)
    async with aclosing(chunks):  # a consumer that stops early stops the workers at once
        async for chunk in chunks:
            for line in chunk:
                yield line


async def reflect_lines_in_processes(
    lines: Iterable[tuple[int, bytes | str]], config: ReflectionConfig, *, workers: int, flat: bool = False,
    skip_ids: Container[str] = frozenset(), chunk_rows: int | None = None,
) -> AsyncIterator[Reflected]:
    """Parse and reflect the lines of a JSON Lines file (`inputs.jsonl_lines`) in `workers`
    processes, as `reflect_in_processes` does prepared rows, yielding for each row that is not
    blank a `Reflected`, in input order. The id rules are the caller's to apply; a row whose own
    id is in `skip_ids` is not reflected (its line is None)."""
    chunks = _in_processes(_reflect_lines, lines, config, workers=workers, flat=flat, chunk_rows=chunk_rows,
                           skip_ids=skip_ids)
    async with aclosing(chunks):
        async for chunk in chunks:
            for row in chunk:
                yield row


async def _in_processes(
    work: Callable[[list[Any]], list[Any]], items: Iterable[Any], config: ReflectionConfig, *, workers: int,
    flat: bool, chunk_rows: int | None, skip_ids: Container[str] = frozenset(),
) -> AsyncIterator[list[Any]]:
    """`work` applied in worker processes to contiguous chunks of `items`, the results in order."""
    if config.judge is not None:
        raise ValueError("worker processes run static checks and grounding only; this config has a judge")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    rows, size = iter(items), chunk_rows or CHUNK_ROWS
    chunks = iter(lambda: list(islice(rows, size)), [])
    pending: deque[Future[list[Any]]] = deque()
    # Forked workers share the parent's resumed ids; others get a copy, once.
    context = _context()
    forked = context.get_start_method() == "fork"
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker,
                               initargs=(flat, skip_ids, os.getpid() if forked else None))
    try:
        for chunk in chunks:
            pending.append(pool.submit(work, chunk))
            while len(pending) >= 2 * workers:
                yield await _result(pending.popleft())
        while pending:
            yield await _result(pending.popleft())
    finally:
        # Normal end, an error, a cancellation (Ctrl-C) or a consumer that stopped early: drop
        # the chunks not started and wait for the running ones (a few milliseconds each).
        pool.shutdown(wait=True, cancel_futures=True)


async def _result(future: Future[list[Any]]) -> list[Any]:
    """A chunk's results, awaited on a thread: the event loop stays free to deliver a cancellation."""
    return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
