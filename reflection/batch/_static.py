"""One row of a batch, static checks and grounding only: the row to reflect from a source row
(`item_of`), and its output line (`static_line`).

Below both `runner` (one process) and `_workers` (`--workers N`): the two paths run this same
code, so they write the same bytes, and neither imports the other for it.
"""

from __future__ import annotations

import time
from typing import Any

from reflection.batch.inputs import SourceRow
from reflection.pipeline import reflect_plain
from reflection.results import output_row
from reflection.rows import (
    InputRow,
    Line,
    RowError,
    error_row,
    line_of,
    read_row,
)

__all__ = ["item_of", "static_line", "unreflectable"]


def item_of(source: SourceRow, rid: str) -> InputRow | dict[str, Any]:
    """The `InputRow` to reflect for a source row whose output id is `rid`, or its error row."""
    if source.error is not None:
        return error_row(rid, source.error)
    try:
        return read_row(source.raw, source.position)
    except RowError as exc:
        return error_row(rid, str(exc))


def static_line(item: InputRow | dict[str, Any], flat: bool = False) -> Line:
    """The output line of a prepared row (an error row is written as it is) with static checks
    and grounding only: the row `runner`'s judged path gives with no judge, byte for byte
    (latency aside), built from plain data (`pipeline.reflect_plain`, `results.output_row`) without
    the result models: what `reflection check` and `reflection batch` write when no judge runs."""
    if isinstance(item, dict):
        return line_of(item)
    started = time.perf_counter()
    try:
        results = reflect_plain(item.call, item.tools, item.history, grounding=not flat)
    except (TypeError, ValueError) as exc:
        return line_of(unreflectable(item.id, exc))
    return line_of(output_row(item.id, results, latency_ms=(time.perf_counter() - started) * 1000, flat_only=flat))


def unreflectable(rid: str, exc: TypeError | ValueError) -> dict[str, Any]:
    """The error row of a row whose data the normalisers refuse outright (`exc`)."""
    if isinstance(exc, RowError):
        return error_row(rid, str(exc))
    # Data the normalisers refuse outright; one bad row must not stop a million-row run.
    return error_row(rid, f"row {rid}: cannot be reflected: {type(exc).__name__}: {exc}")
