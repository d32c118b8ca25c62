"""Batch reflection: datasets of tool calls in, JSON Lines result rows and a report out.

    async for row in reflect_dataset("calls.jsonl", config=config, concurrency=64):
        ...

`run_batch` (what `reflection batch` runs) adds the resumable output file, the SQLite
judge cache and progress; `read_report` summarises an output file. The Ray Data path is
in `reflection.batch.ray` (needs the `ray` extra).

The names below load on first use (PEP 562), so a static-only run never imports the
judge cache (aiosqlite) or the report's tables (rich).

One of the four public subpackages (`reflection.batch`, `reflection.scoring`, `reflection.testing`
and `reflection.integrations`, see `reflection`): its public API is `__all__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reflection._lazy import lazy_attributes

if TYPE_CHECKING:
    from reflection.batch._output import OutputCorrupt, OutputLocked
    from reflection.batch.html import BatchHtmlReport, ScoreHtmlReport, batch_report_html
    from reflection.batch.inputs import SourceRow, read_source
    from reflection.batch.report import BatchReport, build_report, read_report, render_report
    from reflection.batch.runner import DEFAULT_CACHE_NAME, BatchStats, default_cache_path, reflect_dataset, run_batch
    from reflection.judge.cache import SQLiteJudgeCache

_HOMES = {
    "SQLiteJudgeCache": "reflection.judge.cache",
    "OutputCorrupt": "reflection.batch._output",
    "OutputLocked": "reflection.batch._output",
    "BatchHtmlReport": "reflection.batch.html",
    "ScoreHtmlReport": "reflection.batch.html",
    "batch_report_html": "reflection.batch.html",
    "SourceRow": "reflection.batch.inputs",
    "read_source": "reflection.batch.inputs",
    "BatchReport": "reflection.batch.report",
    "build_report": "reflection.batch.report",
    "read_report": "reflection.batch.report",
    "render_report": "reflection.batch.report",
    "DEFAULT_CACHE_NAME": "reflection.batch.runner",
    "BatchStats": "reflection.batch.runner",
    "default_cache_path": "reflection.batch.runner",
    "reflect_dataset": "reflection.batch.runner",
    "run_batch": "reflection.batch.runner",
}

__all__ = [
    "DEFAULT_CACHE_NAME",
    "BatchHtmlReport",
    "BatchReport",
    "BatchStats",
    "OutputCorrupt",
    "OutputLocked",
    "SQLiteJudgeCache",
    "ScoreHtmlReport",
    "SourceRow",
    "batch_report_html",
    "build_report",
    "default_cache_path",
    "read_report",
    "read_source",
    "reflect_dataset",
    "render_report",
    "run_batch",
]


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, __all__)
