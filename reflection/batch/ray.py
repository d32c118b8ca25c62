"""Scale-out on Ray Data (`pip install "toolcall-reflection[ray]"`): reflect a `ray.data.Dataset`.

`ReflectBatches` is a callable class for `Dataset.map_batches`. Each actor holds one
`Reflector` (one judge client and connection pool) on its own event loop thread, and allows
`judge_concurrency / num_actors` judge requests at once, so the whole job stays within
`judge_concurrency`.

    import ray
    from reflection.batch.ray import reflect_with_ray

    ds = ray.data.read_text("calls.jsonl")          # one JSON row per line, in column "text"
    out = reflect_with_ray(ds, config, judge_concurrency=64, num_actors=4)
    out.write_parquet("results/")                   # columns: id, overall_valid, error, row

Input batches may have a `text` column of JSON rows (`read_text`), or the row fields as
columns (`id`, `call` | `tool_calls`, `tools`, `history`), as nested values or JSON text.
Each output row has `id`, `overall_valid`, `error` and `row`: the full result row as JSON
text (its shape varies too much between rows for one Arrow schema). Rows without an id get
one from a hash of their content (`sha-...`). Duplicate ids are detected only within a
batch, and there is no resume or report here: write the rows out and run
`reflection report` on a JSON Lines copy.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Mapping
from typing import Any

from reflection._json import dumps, parse_json
from reflection.batch.inputs import SourceRow, decode_columns
from reflection.batch.runner import BatchStats, Ids, reflect_rows
from reflection.config import ReflectionConfig
from reflection.judge import Judge, build_judge
from reflection.judge.cache import SQLiteJudgeCache
from reflection.pipeline import Reflector

__all__ = ["OUTPUT_COLUMNS", "ReflectBatches", "reflect_with_ray"]

OUTPUT_COLUMNS = ("id", "overall_valid", "error", "row")


def OUTPUT_SCHEMA() -> Any:  # upper case: a constant, built late so importing this module needs no pyarrow
    """The Arrow schema of the output batches."""
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("overall_valid", pa.bool_()), ("error", pa.string()), ("row", pa.string())])


_WINDOW_FACTOR = 2


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (from Arrow columns) to plain Python values, recursively."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if tolist is not None and type(value).__module__ == "numpy":
        return _plain(tolist())
    return value


def _records(batch: Any) -> list[dict[str, Any]]:
    """A Ray batch (pyarrow Table, pandas DataFrame or dict of numpy arrays) as records."""
    if hasattr(batch, "to_pylist"):
        return batch.to_pylist()
    if hasattr(batch, "to_dict") and hasattr(batch, "columns"):
        return [_plain(r) for r in batch.to_dict("records")]
    columns = {name: list(values) for name, values in batch.items()}
    size = len(next(iter(columns.values()), []))
    return [{name: _plain(values[i]) for name, values in columns.items()} for i in range(size)]


def _content_id(text: str) -> str:
    return "sha-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _source_row(record: dict[str, Any], position: int) -> SourceRow:
    """One record as a source row that always has an id (an error keeps the id when it can)."""
    if "text" in record and not ({"call", "tool_calls"} & set(record)):
        text = record["text"] or ""
        try:
            source = SourceRow(position, parse_json(text))
        except ValueError as exc:
            return SourceRow(position, {"id": _content_id(text)}, error=f"not valid JSON: {exc}")
    else:
        source = decode_columns(record, position, strings_only=False)
        if source.error is not None:
            rid = record.get("id")
            return SourceRow(
                position,
                {"id": str(rid) if rid is not None else _content_id(dumps(_plain(record)))},
                error=source.error,
            )
    raw = source.raw
    if not isinstance(raw, Mapping):
        return SourceRow(
            position, {"id": _content_id(dumps(raw))}, error=f"expected a JSON object row, got {type(raw).__name__}"
        )
    if raw.get("id") is None or isinstance(raw.get("id"), (dict, list)):
        return SourceRow(position, {**raw, "id": _content_id(dumps(raw))})
    return source


class ReflectBatches:
    """A `Dataset.map_batches` callable class: reflects each batch with this actor's `Reflector`.

    `config` is a `ReflectionConfig` (or its keyword mapping); `judge_concurrency` is the
    job-wide cap on judge requests at once, shared evenly by `num_actors` actors (pass the
    same number as `map_batches(concurrency=...)`). `cache_path`: an optional SQLite judge
    cache per node (WAL allows several actors on one file).
    """

    def __init__(
        self,
        config: ReflectionConfig | Mapping[str, Any] | None = None,
        *,
        judge_concurrency: int = 64,
        num_actors: int = 1,
        cache_path: str | None = None,
    ):
        if judge_concurrency < 1 or num_actors < 1:
            raise ValueError("judge_concurrency and num_actors must be at least 1")
        if isinstance(config, Mapping):
            config = ReflectionConfig(**config)
        self.config = config or ReflectionConfig()
        self.concurrency = -(-judge_concurrency // num_actors)
        self.cache_path = cache_path
        self._reflector: Reflector | None = None
        self._cache: SQLiteJudgeCache | None = None
        self._judge: Judge | None = None
        # One event loop per actor, on a thread, so the judge's connections stay warm across batches.
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reflection-actor-loop", daemon=True)
        self._thread.start()

    async def _reflector_here(self) -> Reflector:
        if self._reflector is None:
            if self.cache_path and self.config.judge is not None:
                self._cache = SQLiteJudgeCache(self.cache_path)
            if self.config.judge is not None:
                self._judge = build_judge(self.config.judge, max_concurrency=self.concurrency, cache=self._cache)
            self._reflector = Reflector(self.config, judge=self._judge)
        return self._reflector

    async def _reflect(self, sources: list[SourceRow]) -> list[dict[str, Any]]:
        reflector = await self._reflector_here()
        ids = Ids((), BatchStats())
        items = (item for item in map(ids.prepare, sources) if item is not None)
        return [row async for row in reflect_rows(iter(items), reflector, self.concurrency * _WINDOW_FACTOR)]

    def __call__(self, batch: Any) -> Any:
        """Reflect one batch; returns a pyarrow Table with the columns `id`, `overall_valid`,
        `error`, `row` and a fixed schema (a batch of all-null verdicts must not make a null column)."""
        import pyarrow as pa

        sources = [_source_row(record, i) for i, record in enumerate(_records(batch), start=1)]
        rows = asyncio.run_coroutine_threadsafe(self._reflect(sources), self._loop).result()
        return pa.table(
            {
                "id": [row["id"] for row in rows],
                "overall_valid": [row.get("overall_valid") for row in rows],
                "error": [row.get("error") for row in rows],
                "row": [dumps(row) for row in rows],
            },
            schema=OUTPUT_SCHEMA(),
        )

    async def _aclose(self) -> None:
        if self._judge is not None:
            await self._judge.aclose()
        if self._cache is not None:
            await self._cache.aclose()

    def close(self) -> None:
        """Close the judge client and cache and stop the loop (Ray also does this when the actor exits)."""
        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._aclose(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


def reflect_with_ray(
    dataset: Any,
    config: ReflectionConfig | Mapping[str, Any] | None = None,
    *,
    judge_concurrency: int = 64,
    num_actors: int = 2,
    batch_size: int | None = None,
    cache_path: str | None = None,
    **map_batches_args: Any,
) -> Any:
    """`dataset.map_batches(ReflectBatches, ...)` with `num_actors` actors sharing
    `judge_concurrency`; `batch_size` defaults to 4 x each actor's share, so every actor
    keeps its judge busy. Extra keywords go to `map_batches`. Each actor reserves
    `num_cpus=0.25` unless told otherwise: it mostly waits on the judge, and reserving whole
    CPUs would starve the read tasks on a small cluster."""
    share = -(-judge_concurrency // num_actors)
    return dataset.map_batches(
        ReflectBatches,
        fn_constructor_kwargs={
            "config": config,
            "judge_concurrency": judge_concurrency,
            "num_actors": num_actors,
            "cache_path": cache_path,
        },
        concurrency=num_actors,
        batch_size=batch_size or 4 * share,
        batch_format="pyarrow",
        **{"num_cpus": 0.25, **map_batches_args},
    )
