"""Batch reflection: datasets of tool calls in, JSON Lines result rows and a report out.

    async for row in reflect_dataset("calls.jsonl", config=config, concurrency=64):
        ...

`run_batch` (what `reflection batch` runs) adds the resumable output file, the SQLite
judge cache and progress; `read_report` summarises an output file, and `batch_report_html`
makes the self-contained HTML page of it. The Ray Data path is
in `reflection.batch.ray` (needs the `ray` extra).
"""

from reflection._cache import SQLiteJudgeCache
from reflection.batch._output import OutputCorrupt, OutputLocked
from reflection.batch.html import BatchHtmlReport, ScoreHtmlReport, batch_report_html
from reflection.batch.inputs import SourceRow, read_source
from reflection.batch.report import BatchReport, build_report, read_report, render_report
from reflection.batch.runner import DEFAULT_CACHE_NAME, BatchStats, default_cache_path, reflect_dataset, run_batch

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
