"""Static-only rows reflected in worker processes (`--workers N` of `check` and `batch`).

The parent reads the input (any format, through `read_source`) and applies the id rules
(resume skips, duplicate ids) in input order, exactly as the one-process path does; it sends
the prepared rows in contiguous chunks to a `ProcessPoolExecutor` whose workers reflect them
with the same code (`_reflect_rows` on a static-only `Reflector`) and serialise each output
row to its line. The parent takes the chunks back in the order it sent them, so the output
is in input order, every id once. At most `2 x workers` chunks are in flight, which bounds
memory in the parent and the workers whatever the input size.

Workers are forked while the parent has a single thread (`reflection check`, `reflection batch
--no-progress`); otherwise they start from a fork server ('spawn' where there is none), since
forking a process that holds threads is unsafe. They ignore SIGINT, so Ctrl-C reaches only the
parent, which cancels the chunks not started and waits for the few running ones. An
exception in a worker (a bug) is raised again in the parent; a worker that dies makes the
pool raise `BrokenProcessPool`. Neither hangs. The parent awaits each chunk on a thread, so
its event loop can deliver a cancellation (Ctrl-C) while the workers run.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from reflection._json import dumps
from reflection.config import ReflectionConfig
from reflection.rows import InputRow

__all__ = ["MAX_DEFAULT_WORKERS", "MIN_INPUT_BYTES", "default_workers", "reflect_in_processes", "use_processes"]

MAX_DEFAULT_WORKERS = 8
"""The default number of workers is the usable cores, at most this."""

MIN_INPUT_BYTES = 1 << 20
"""Inputs smaller than this run in one process: starting workers costs more than it saves."""

CHUNK_ROWS = 256
"""Rows per chunk sent to a worker: large enough to amortise the hand-over, small enough to
keep every worker busy to the end."""

Line = tuple[dict[str, Any], bytes]
"""An output row's summary (`id`, `overall_valid`, and `error` when present: what the counts
and the progress display read) and its JSON line, newline included."""


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


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in ("id", "overall_valid", "error") if key in row}


def line_of(row: dict[str, Any]) -> Line:
    """A row as the parent writes it (used for rows that never reach a worker)."""
    return _summary(row), (dumps(row) + "\n").encode()


# --- in the worker ---------------------------------------------------------------------------

_worker: dict[str, Any] = {}


def _start_worker(config: ReflectionConfig, flat: bool) -> None:
    from reflection.pipeline import Reflector

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.set_wakeup_fd(-1)  # a forked worker must not write signals into the parent's event loop
    _worker.update(reflector=Reflector(config.model_copy(update={"judge": None})), flat=flat,
                   loop=asyncio.new_event_loop())


async def _reflect_items(items: list[InputRow | dict[str, Any]]) -> list[Line]:
    from reflection.batch.runner import _reflect_rows

    return [line_of(row) async for row in _reflect_rows(iter(items), _worker["reflector"], 1, _worker["flat"])]


def _reflect_chunk(items: list[InputRow | dict[str, Any]]) -> list[Line]:
    return _worker["loop"].run_until_complete(_reflect_items(items))


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
    if config.judge is not None:
        raise ValueError("worker processes run static checks and grounding only; this config has a judge")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    rows, size = iter(items), chunk_rows or CHUNK_ROWS
    chunks = iter(lambda: list(islice(rows, size)), [])
    pending: deque[Future[list[Line]]] = deque()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_start_worker,
                               initargs=(config, flat))
    try:
        for chunk in chunks:
            pending.append(pool.submit(_reflect_chunk, chunk))
            while len(pending) >= 2 * workers:
                for line in await _result(pending.popleft()):
                    yield line
        while pending:
            for line in await _result(pending.popleft()):
                yield line
    finally:
        # Normal end, an error, a cancellation (Ctrl-C) or a consumer that stopped early: drop
        # the chunks not started and wait for the running ones (a few milliseconds each).
        pool.shutdown(wait=True, cancel_futures=True)


async def _result(future: Future[list[Line]]) -> list[Line]:
    """A chunk's lines, awaited on a thread: the event loop stays free to deliver a cancellation."""
    return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
