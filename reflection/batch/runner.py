"""Reflect a dataset: stream rows through one `Reflector` with a bounded window in flight.

`reflect_dataset` is the async iterator; `run_batch` adds the output file (resume and
crash safety), the judge cache and progress, and is what `reflection batch` calls.

Rows come out in completion order, not input order; every row carries its `id`.
Ids are unique in the output: a row whose id an earlier input row already used becomes
an error row with the id suffixed `#2`, `#3`, ... (first free), so resume stays exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reflection.batch._output import OutputFile, judge_failed
from reflection.batch._static import item_of, static_line, unreflectable
from reflection.batch._workers import (
    Reflected,
    reflect_in_processes,
    reflect_lines_in_processes,
    static_gc,
    use_processes,
)
from reflection.batch.inputs import SourceRow, check_input, count_rows, detect_format, jsonl_lines, read_source
from reflection.config import ReflectionConfig
from reflection.pipeline import Reflector
from reflection.rows import InputRow, Line, error_row, line_of, result_row, row_id

if TYPE_CHECKING:  # the judge, its SQLite cache and rich's progress load only when a run uses them
    from reflection.batch.progress import BatchProgress
    from reflection.judge import JudgeCache
    from reflection.judge.cache import SQLiteJudgeCache

__all__ = ["DEFAULT_CACHE_NAME", "BatchStats", "default_cache_path", "reflect_dataset", "run_batch"]

DEFAULT_CACHE_NAME = ".reflection-cache.sqlite"
"""The judge cache's file name; by default it sits next to the output file."""

_DEFAULT_CONCURRENCY = 16
_WINDOW_FACTOR = 2  # rows in flight per unit of concurrency: keeps the judge limiter fed


def default_cache_path(output: str | Path) -> Path:
    """The default judge cache for an output file: `.reflection-cache.sqlite` in its directory,
    shared by the batches written there."""
    return Path(output).resolve().parent / DEFAULT_CACHE_NAME


@dataclass
class BatchStats:
    """What one run did (the report describes the whole output file)."""

    written: int = 0
    skipped: int = 0
    """Input rows whose id was already in the output (resume)."""
    duplicates: int = 0
    """Input rows whose id an earlier input row already used (written as error rows)."""
    truncated_bytes: int = 0
    """A partial last line cut off the output on open (the previous run was killed)."""
    retried: int = 0
    """Rows already in the output whose judge had failed, removed to be reflected again."""
    seconds: float = 0.0
    judge_requests: int = 0
    cache_hits: int = 0
    judge: bool = False
    """Whether a judge was configured."""


# --- rows in ---------------------------------------------------------------------------------


def _source_rows(source: Any, fmt: str | None, max_line_bytes: int) -> Iterator[SourceRow]:
    if isinstance(source, (str, Path)):
        yield from read_source(source, fmt, max_line_bytes=max_line_bytes)
        return
    for position, item in enumerate(source, start=1):
        yield item if isinstance(item, SourceRow) else SourceRow(position, item)


class Ids:
    """Turns source rows into rows to reflect or error rows, dropping resumed ids.

    Duplicate ids are resolved in input order, so a rerun names them the same way.
    """

    def __init__(self, skip_ids: Container[str], stats: BatchStats):
        self.skip_ids = skip_ids
        self.stats = stats
        self.seen: set[str] = set()

    def name(self, rid: str) -> tuple[str, str | None]:
        """The output id of the next row, whose own id (`row_id`) is `rid`, and the id it
        duplicates (None when it is the first)."""
        duplicate_of = None
        if rid in self.seen:
            k = 2
            while f"{rid}#{k}" in self.seen:
                k += 1
            duplicate_of, rid = rid, f"{rid}#{k}"
        self.seen.add(rid)
        return rid, duplicate_of

    def settle(self, rid: str, position: int) -> str | dict[str, Any] | None:
        """What becomes of the next row, whose own id is `rid`: None (already in the output), an
        error row (its id is a duplicate), or `rid` (the row is to be reflected)."""
        rid, duplicate_of = self.name(rid)
        if rid in self.skip_ids:
            self.stats.skipped += 1
            return None
        if duplicate_of is not None:
            self.stats.duplicates += 1
            return error_row(
                rid,
                f"duplicate id {duplicate_of!r}: an earlier input row has it, so this row "
                f"(input position {position}) was not reflected; give every row a unique id",
            )
        return rid

    def prepare(self, source: SourceRow) -> InputRow | dict[str, Any] | None:
        """An `InputRow` to reflect, an error row to write, or None (already in the output)."""
        rid = self.settle(row_id(source.raw, source.position), source.position)
        return item_of(source, rid) if isinstance(rid, str) else rid


def _prepare(
    rows: Iterable[SourceRow], skip_ids: Container[str], stats: BatchStats
) -> Iterator[InputRow | dict[str, Any]]:
    ids = Ids(skip_ids, stats)
    for source in rows:
        item = ids.prepare(source)
        if item is not None:
            yield item


async def _aprepare(
    source: AsyncIterable[Any], skip_ids: Container[str], stats: BatchStats
) -> AsyncIterator[InputRow | dict[str, Any]]:
    ids = Ids(skip_ids, stats)
    position = 0
    async for raw in source:
        position += 1
        item = ids.prepare(raw if isinstance(raw, SourceRow) else SourceRow(position, raw))
        if item is not None:
            yield item


async def _reflect_row(reflector: Reflector, row: InputRow, flat: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = await reflector.reflect(row.call, row.tools, row.history)
    except (TypeError, ValueError) as exc:
        return unreflectable(row.id, exc)
    return result_row(row.id, result, latency_ms=(time.perf_counter() - started) * 1000, flat_only=flat)


async def _next(items: Iterator[Any] | AsyncIterator[Any]) -> Any:
    if isinstance(items, AsyncIterator):
        return await anext(items, None)
    return next(items, None)


async def reflect_rows(
    items: Iterator[InputRow | dict[str, Any]] | AsyncIterator[InputRow | dict[str, Any]],
    reflector: Reflector,
    window: int,
    flat: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Reflect rows with at most `window` in flight, yielding output rows as they finish.

    Plain asyncio tasks feed a queue; the generator never yields inside a task group or
    cancel scope, so it is safe to abandon early (pending rows are cancelled on close).
    """
    if type(reflector) is Reflector and reflector.judge is None:
        # Static checks and grounding never wait on I/O: a plain loop, no task or queue per row.
        while (item := await _next(items)) is not None:
            yield item if isinstance(item, dict) else await _reflect_row(reflector, item, flat)
        return
    finished: asyncio.Queue[dict[str, Any] | BaseException] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()
    in_flight = 0

    async def run(row: InputRow) -> None:
        try:
            out: dict[str, Any] | BaseException = await _reflect_row(reflector, row, flat)
        except Exception as exc:  # noqa: BLE001 - re-raised in the consumer below
            out = exc
        finished.put_nowait(out)

    def take(out: dict[str, Any] | BaseException) -> dict[str, Any]:
        nonlocal in_flight
        in_flight -= 1
        if isinstance(out, BaseException):
            raise out
        return out

    try:
        while (item := await _next(items)) is not None:
            if isinstance(item, dict):
                yield item
                continue
            while in_flight >= window:
                yield take(await finished.get())
            task = asyncio.create_task(run(item))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            in_flight += 1
            while not finished.empty():
                yield take(finished.get_nowait())
        while in_flight:
            yield take(await finished.get())
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def _reflector_for(
    config: ReflectionConfig | None,
    reflector: Reflector | None,
    concurrency: int,
    cache: JudgeCache | str | Path | None,
    http_client: Any = None,
) -> AsyncIterator[Reflector]:
    if reflector is not None:
        yield reflector
        return
    config = config or ReflectionConfig()
    async with contextlib.AsyncExitStack() as stack:
        if isinstance(cache, (str, Path)):
            cache = await stack.enter_async_context(_sqlite_cache(cache))
        judge = None
        if config.judge is not None:
            from reflection.judge import build_judge

            # The batch's concurrency is the judge's: its limiter and connection pool are sized to it.
            judge = await stack.enter_async_context(
                build_judge(config.judge, max_concurrency=concurrency, cache=cache, http_client=http_client)
            )
        yield Reflector(config, judge=judge)


def _sqlite_cache(path: str | Path) -> SQLiteJudgeCache:
    from reflection.judge.cache import SQLiteJudgeCache  # aiosqlite loads only for runs with a judge

    return SQLiteJudgeCache(path)


def _concurrency(config: ReflectionConfig | None, reflector: Reflector | None, concurrency: int | None) -> int:
    if concurrency is not None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        return concurrency
    judge_config = (reflector.config if reflector else config or ReflectionConfig()).judge
    return judge_config.max_concurrency if judge_config else _DEFAULT_CONCURRENCY


async def reflect_dataset(
    source: str | Path | Iterable[Any] | AsyncIterable[Any],
    *,
    config: ReflectionConfig | None = None,
    reflector: Reflector | None = None,
    concurrency: int | None = None,
    cache: JudgeCache | str | Path | None = None,
    skip_ids: Container[str] = frozenset(),
    format: str | None = None,
    http_client: Any = None,
    flat: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Reflect every row of a dataset, yielding one output row per input row as it finishes.

    `source` is a file path (`.jsonl`, `.json` array, `.csv` with JSON columns, `.parquet`;
    `format` overrides the extension), or an iterable / async iterable of row mappings
    `{"id", "tools", "history", "call" | "tool_calls"}`. Output rows follow
    `reflection.rows` (result rows and error rows), in completion order.

    With `config` (default: `ReflectionConfig()`, which reads `REFLECTION_*`), a judge is
    built whose limiter and connection pool allow `concurrency` requests at once (default:
    the judge's `max_concurrency`); `cache` is a `JudgeCache` or a SQLite file path, and
    `http_client` an HTTP client for the judge that you own and close (as for `Judge`). Pass a
    `reflector` instead to reuse one (its judge's own limiter then applies). Rows whose id
    is in `skip_ids` are not reflected or yielded. Up to 2 x `concurrency` rows are in
    memory at once, whatever the dataset size. With `flat`, result rows carry only `id`,
    `overall_valid` and the flat keys (error rows are unchanged).

        async for row in reflect_dataset("calls.jsonl", config=cfg, concurrency=64):
            print(row["id"], row["overall_valid"])
    """
    stats = BatchStats()
    limit = _concurrency(config, reflector, concurrency)
    async with _reflector_for(config, reflector, limit, cache, http_client) as active:
        if isinstance(source, AsyncIterable):
            items: Any = _aprepare(source, skip_ids, stats)
        else:
            max_line = (reflector.config if reflector else config or ReflectionConfig()).max_line_bytes
            items = _prepare(_source_rows(source, format, max_line), skip_ids, stats)
        async for row in reflect_rows(items, active, limit * _WINDOW_FACTOR, flat):
            yield row


def static_lines(
    input: Path, config: ReflectionConfig, *, workers: int, flat: bool = False, format: str | None = None
) -> AsyncGenerator[Line, None]:
    """What `reflection check` writes for a file when no judge is configured: each output row's
    summary and line, in input order, with the id rules of `reflect_dataset`."""
    return _static_lines(
        input,
        format or detect_format(input),
        config,
        workers=workers,
        flat=flat,
        skip_ids=frozenset(),
        stats=BatchStats(),
    )


def _static_lines(
    input: Path,
    fmt: str,
    config: ReflectionConfig,
    *,
    workers: int,
    flat: bool,
    skip_ids: Container[str],
    stats: BatchStats,
) -> AsyncGenerator[Line, None]:
    """The output lines of `input`'s rows not in `skip_ids`, static checks and grounding only, in
    input order: in `workers` processes when `use_processes` says so (JSON Lines go to them
    unparsed; other formats are prepared here), else in this one."""
    processes = use_processes(input, config, workers)
    if processes and fmt == "jsonl":
        rows = reflect_lines_in_processes(
            jsonl_lines(input, config.max_line_bytes), config, workers=workers, flat=flat, skip_ids=skip_ids
        )
        return _settled(rows, Ids(skip_ids, stats))
    items = _prepare(read_source(input, fmt, max_line_bytes=config.max_line_bytes), skip_ids, stats)
    return reflect_in_processes(items, config, workers=workers, flat=flat) if processes else _in_process(items, flat)


async def _in_process(items: Iterable[InputRow | dict[str, Any]], flat: bool) -> AsyncGenerator[Line, None]:
    with static_gc():  # restored when the run ends or its consumer closes it
        for item in items:
            yield static_line(item, flat)


async def _settled(rows: AsyncGenerator[Reflected, None], ids: Ids) -> AsyncGenerator[Line, None]:
    """The workers' rows with the id rules applied in input order: resumed rows dropped, a
    duplicate's line replaced by its error row."""
    async with contextlib.aclosing(rows):
        async for position, rid, verdict, line in rows:
            outcome = ids.settle(rid, position)
            if isinstance(outcome, dict):
                yield line_of(outcome)
            elif outcome is not None:
                if line is None:  # the worker skips only ids the rules drop or rename
                    raise RuntimeError(f"row {rid!r} at line {position} was not reflected")
                yield verdict if isinstance(verdict, dict) else {"id": rid, "overall_valid": verdict}, line


def _input_ids(input: Path, fmt: str, wanted: Container[str], max_line_bytes: int) -> set[str]:
    """The ids among `wanted` that rows of `input` get (named as `Ids` names them, and as the
    run reads them: `max_line_bytes` as the run's)."""
    ids = Ids(frozenset(), BatchStats())
    found = set()
    for source in read_source(input, fmt, max_line_bytes=max_line_bytes):
        rid, _ = ids.name(row_id(source.raw, source.position))
        if rid in wanted:
            found.add(rid)
    return found


async def run_batch(
    input: str | Path,
    output: str | Path,
    *,
    config: ReflectionConfig | None = None,
    concurrency: int | None = None,
    cache: bool = True,
    cache_path: str | Path | None = None,
    progress: BatchProgress | None = None,
    format: str | None = None,
    http_client: Any = None,
    retry_unknown: bool = True,
    flat: bool = False,
    workers: int = 1,
) -> BatchStats:
    """Reflect `input` into the JSON Lines file `output`, resuming where a previous run stopped.

    Rows already in `output` (by id) are skipped; a partial last line left by a killed run is
    cut off first. With a judge configured and `retry_unknown`, rows of the (regular file) input whose
    written row lacks a verdict because the judge failed (`judge_failed`) are reflected again
    and replace the old rows (see `OutputFile.drop`): ids stay unique. Judge replies are
    cached in SQLite at `cache_path` (default: see `default_cache_path`) unless `cache` is
    False; with no judge configured there is no cache. `http_client` and `flat`: as for
    `reflect_dataset`. A `JudgeFatalError` (the endpoint refuses every request) ends the run;
    the rows written so far stay, and a rerun resumes. With no judge and `workers` > 1, rows
    are reflected in that many processes (see `reflection.batch._workers`; inputs under 1 MiB
    stay in one) and written in input order; as with any multiprocessing, a script that does
    this needs the `if __name__ == "__main__":` guard (the workers import its main module).
    """
    input, output = Path(input), Path(output)
    fmt = format or detect_format(input)
    check_input(input)
    if output.resolve() == input.resolve() or (output.exists() and os.path.samefile(output, input)):
        raise ValueError("the output file must not be the input file")
    config = config or ReflectionConfig()
    limit = _concurrency(config, None, concurrency)
    if progress is None:
        from reflection.batch.progress import NoProgress

        progress = NoProgress()
    stats = BatchStats(judge=config.judge is not None)
    started = time.monotonic()
    with OutputFile(output, retry=judge_failed if retry_unknown and config.judge else None) as out:
        stats.truncated_bytes = out.truncated_bytes
        done: set[str] = out.existing_ids
        if out.retry_ids and input.is_file():  # a pipe can be read once: its rows are kept as they are
            # Their old rows stay until their new rows replace them (`finish_retry`, below): a run
            # killed in between leaves the output as it was, never a row missing.
            done = done - out.start_retry(_input_ids(input, fmt, out.retry_ids, config.max_line_bytes))
        total = count_rows(input, fmt)
        progress.start(None if total is None else max(0, total - len(done)), len(done))
        judge_cache = _sqlite_cache(cache_path or default_cache_path(output)) if cache and config.judge else None
        try:
            if config.judge is None:
                lines = _static_lines(input, fmt, config, workers=workers, flat=flat, skip_ids=done, stats=stats)
                async with contextlib.aclosing(lines):
                    async for summary, line in lines:
                        out.write_line(line)
                        stats.written += 1
                        progress.row(summary)
            else:
                async with _reflector_for(config, None, limit, judge_cache, http_client) as reflector:
                    items = _prepare(read_source(input, fmt, max_line_bytes=config.max_line_bytes), done, stats)
                    async for row in reflect_rows(items, reflector, limit * _WINDOW_FACTOR, flat):
                        out.write(row)
                        stats.written += 1
                        stats.judge_requests += int((row.get("usage") or {}).get("requests") or 0)
                        progress.row(row)
        finally:
            stats.retried = out.finish_retry()
            progress.finish()
            if judge_cache is not None:
                stats.cache_hits = judge_cache.hits
                await judge_cache.aclose()
    stats.seconds = time.monotonic() - started
    return stats
