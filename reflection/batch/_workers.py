"""Static-only rows reflected in worker processes (`--workers N` of `check` and `batch`).

For JSON Lines input the parent only reads the lines (`inputs.jsonl_lines`) and sends them,
unparsed, in chunks to the workers; each worker parses its lines with
the one-process path's code (`inputs.jsonl_row`, `_static.item_of`), reflects them as it does
(`_static.static_line`) and returns, per row, its line number, its own id (`rows.row_id`)
and its output line. The parent applies the id rules (resume skips, duplicate ids) to those
ids in input order, as the one-process path does, and writes each worker's line, or the
duplicate's error row in its place: parsing, the bulk of the parent's work otherwise, runs
in the workers. A worker does not reflect a row whose own id is among the resumed ones (the
parent drops it, or writes it as a duplicate). Other formats are read and prepared in the
parent, which sends the prepared rows.

Rows go out in blocks of `CHUNK_ROWS x workers`, each split into one chunk per worker by tool
list (`_Router`): a row goes to the worker that had the rows whose tool list starts like its
own, so each worker normalises and compiles its share of the distinct lists, not all of them,
unless that worker already has a quarter more than its share of the block (one list on every
row still spreads over all workers). Each worker is a one-process pool of its own, so it can
be chosen. The parent puts each block's results back in input order, and takes the blocks back
in the order it sent them: the output is in input order, every id once. At most two blocks are
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
import gc
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable, Container, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import aclosing, contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from reflection._gc import CACHE_HEAVY_THRESHOLD
from reflection._lru import LRU
from reflection.batch._static import item_of, static_line
from reflection.batch.inputs import jsonl_row
from reflection.config import ReflectionConfig
from reflection.rows import InputRow, Line, row_id

__all__ = [
    "MAX_DEFAULT_WORKERS",
    "MIN_INPUT_BYTES",
    "STATIC_GC_THRESHOLD",
    "default_workers",
    "reflect_in_processes",
    "reflect_lines_in_processes",
    "static_gc",
    "use_processes",
]

MAX_DEFAULT_WORKERS = 8
"""The default number of workers is the usable cores, at most this."""

MIN_INPUT_BYTES = 1 << 20
"""Inputs smaller than this run in one process: starting workers costs more than it saves."""

CHUNK_ROWS = 256
"""Rows per chunk sent to a worker: large enough to amortise the hand-over, small enough to
keep every worker busy to the end."""

ROUTE_BYTES = 256
"""How much of a row's tool list text routes it (`_Router`): lists that start alike share
their first specs, which the worker that has them has normalised already."""

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


STATIC_GC_THRESHOLD = CACHE_HEAVY_THRESHOLD
"""The cyclic collector's thresholds while rows are reflected without a judge (`reflection._gc`)."""


@contextmanager
def static_gc() -> Iterator[None]:
    """`STATIC_GC_THRESHOLD` while the block runs; the thresholds before it are restored after."""
    before = gc.get_threshold()
    gc.set_threshold(*STATIC_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)


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
    gc.set_threshold(*STATIC_GC_THRESHOLD)  # a worker only reflects rows: for its whole life
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
    flat = _worker["flat"]
    return [static_line(item, flat) for item in items]


def _reflect_lines(lines: list[tuple[int, bytes | str]]) -> list[Reflected | None]:
    """Parse and reflect a chunk of `inputs.jsonl_lines`, one result per line (None for a blank one)."""
    skip_ids = _worker["skip_ids"]
    rows: list[tuple[int, str] | None] = []
    items: list[InputRow | dict[str, Any]] = []
    for number, line in lines:
        source = jsonl_row(number, line)
        if source is None:
            rows.append(None)
            continue
        rid = row_id(source.raw, number)
        rows.append((number, rid))
        if rid not in skip_ids:
            items.append(item_of(source, rid))
    out = iter(_reflect_chunk(items))
    reflected: list[Reflected | None] = []
    for row in rows:
        if row is None:
            reflected.append(None)
            continue
        number, rid = row
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
    items: Iterable[InputRow | dict[str, Any]],
    config: ReflectionConfig,
    *,
    workers: int,
    flat: bool = False,
    chunk_rows: int | None = None,
) -> AsyncGenerator[Line, None]:
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
    lines: Iterable[tuple[int, bytes | str]],
    config: ReflectionConfig,
    *,
    workers: int,
    flat: bool = False,
    skip_ids: Container[str] = frozenset(),
    chunk_rows: int | None = None,
) -> AsyncGenerator[Reflected, None]:
    """Parse and reflect the lines of a JSON Lines file (`inputs.jsonl_lines`) in `workers`
    processes, as `reflect_in_processes` does prepared rows, yielding for each row that is not
    blank a `Reflected`, in input order. The id rules are the caller's to apply; a row whose own
    id is in `skip_ids` is not reflected (its line is None)."""
    chunks = _in_processes(
        _reflect_lines, lines, config, workers=workers, flat=flat, chunk_rows=chunk_rows, skip_ids=skip_ids
    )
    async with aclosing(chunks):
        async for chunk in chunks:
            for row in chunk:
                if row is not None:  # a blank line
                    yield row


def _route_key(item: Any) -> bytes | str | None:
    """The start of a row's tool list text (`ROUTE_BYTES`), or None when it has none to route by:
    a JSON Lines line (`inputs.jsonl_lines`), found without parsing it, or a prepared row whose
    tools are text. Anything else (a bug the worker will raise) routes anywhere."""
    if type(item) is tuple and len(item) == 2 and type(item[1]) is bytes:
        at = item[1].find(b'"tools"')
        return item[1][at : at + ROUTE_BYTES] if at >= 0 else None
    tools = getattr(item, "tools", None)
    return tools[:ROUTE_BYTES] if isinstance(tools, (bytes, str)) else None


class _Router:
    """Splits blocks of rows among the workers, rows whose tool lists start alike to the same one."""

    def __init__(self, workers: int):
        self.workers = workers
        self.home = LRU(static_stage=False)  # route key -> the worker that has had its rows

    def split(self, block: list[Any]) -> list[list[int]]:
        """The positions in `block` each worker takes, in order."""
        parts: list[list[int]] = [[] for _ in range(self.workers)]
        cap = len(block) // self.workers * 5 // 4 + 1  # a quarter over its share: balance wins over affinity
        for position, item in enumerate(block):
            key = _route_key(item)
            home = self.home.get(key) if key is not None else None
            if home is None or len(parts[home]) >= cap:
                target = min(range(self.workers), key=lambda w: len(parts[w]))
                if home is None and key is not None:
                    self.home.put(key, target)
            else:
                target = home
            parts[target].append(position)
        return parts


async def _in_processes(
    work: Callable[[list[Any]], list[Any]],
    items: Iterable[Any],
    config: ReflectionConfig,
    *,
    workers: int,
    flat: bool,
    chunk_rows: int | None,
    skip_ids: Container[str] = frozenset(),
) -> AsyncGenerator[list[Any], None]:
    """`work` applied in worker processes to `items`, one result per item, in blocks in input order."""
    if config.judge is not None:
        raise ValueError("worker processes run static checks and grounding only; this config has a judge")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    rows, size = iter(items), (chunk_rows or CHUNK_ROWS) * workers
    blocks = iter(lambda: list(islice(rows, size)), [])
    pending: deque[tuple[int, list[tuple[list[int], Future[list[Any]]]]]] = deque()
    router = _Router(workers)
    # Forked workers share the parent's resumed ids; others get a copy, once.
    context = _context()
    forked = context.get_start_method() == "fork"
    pools = [
        ProcessPoolExecutor(
            max_workers=1,
            mp_context=context,
            initializer=_start_worker,
            initargs=(flat, skip_ids, os.getpid() if forked else None),
        )
        for _ in range(workers)
    ]
    try:
        for block in blocks:
            sent = [
                (part, pools[w].submit(work, [block[p] for p in part]))
                for w, part in enumerate(router.split(block))
                if part
            ]
            pending.append((len(block), sent))
            while len(pending) >= 2:
                yield await _block(*pending.popleft())
        while pending:
            yield await _block(*pending.popleft())
    finally:
        # Normal end, an error, a cancellation (Ctrl-C) or a consumer that stopped early: drop
        # the chunks not started and wait for the running ones (a few milliseconds each).
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


async def _block(size: int, sent: list[tuple[list[int], Future[list[Any]]]]) -> list[Any]:
    """A block's results in input order, from its workers' chunks."""
    out: list[Any] = [None] * size
    for positions, future in sent:
        for position, result in zip(positions, await _result(future), strict=True):
            out[position] = result
    return out


async def _result(future: Future[list[Any]]) -> list[Any]:
    """A chunk's results, awaited on a thread: the event loop stays free to deliver a cancellation."""
    return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
