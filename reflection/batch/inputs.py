"""Dataset readers: JSON Lines, JSON arrays, CSV with JSON columns, and Parquet.

Every reader streams: it yields one `SourceRow` at a time and holds at most one record
(or one Parquet record batch) in memory, whatever the file size. A record that cannot be
read becomes a `SourceRow` carrying an `error`, which the runner writes as an error row.

Rows without an `id` are named `line-N` by their 1-based position: the line for JSON
Lines, the element for a JSON array, the record for CSV and Parquet.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflection._json import parse_json
from reflection.rows import parse_line

__all__ = ["FORMATS", "SourceRow", "count_rows", "detect_format", "read_source"]

FORMATS: dict[str, str] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
"""File extension -> input format."""

JSON_COLUMNS = ("call", "tool_calls", "tools", "history")
"""Columns holding JSON text in CSV (and, when they are strings, in Parquet)."""

_CHUNK = 1 << 16


@dataclass(frozen=True)
class SourceRow:
    """One record of an input file: its position and its parsed value, or why it is unreadable."""

    position: int
    """1-based line (JSON Lines), element (JSON array) or record (CSV, Parquet) number."""
    raw: Any = None
    error: str | None = None


def detect_format(path: Path) -> str:
    """The input format for `path`, from its extension; ValueError names the supported ones."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        supported = ", ".join(sorted(FORMATS))
        raise ValueError(f"{path}: unknown input extension {suffix or '(none)'!r}; use one of {supported}")
    return FORMATS[suffix]


def read_source(path: str | Path, fmt: str | None = None) -> Iterator[SourceRow]:
    """Stream the records of a dataset file (format from the extension unless `fmt` is given)."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    readers = {"jsonl": _read_jsonl, "json": _read_json_array, "csv": _read_csv, "parquet": _read_parquet}
    if fmt not in readers:
        raise ValueError(f"unknown input format {fmt!r}; use one of {sorted(readers)}")
    return readers[fmt](path)


def count_rows(path: str | Path, fmt: str | None = None) -> int | None:
    """A cheap row count for progress and ETA, or None when it would cost a parse.

    JSON Lines: non-blank lines. CSV: non-blank lines minus the header (an estimate when
    quoted fields span lines). Parquet: the footer's row count. JSON arrays: None.
    """
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt in ("jsonl", "csv"):
        with path.open("rb") as f:
            rows = sum(1 for line in f if line.strip())
        return max(0, rows - 1) if fmt == "csv" else rows
    if fmt == "parquet":
        pq = _pyarrow_parquet()
        return pq.ParquetFile(path).metadata.num_rows
    return None


# --- JSON Lines -------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> Iterator[SourceRow]:
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield SourceRow(number, parse_line(line))
            except ValueError as exc:
                yield SourceRow(number, error=f"line {number} is not valid JSON: {exc}")


# --- JSON array -------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _read_json_array(path: Path) -> Iterator[SourceRow]:
    """Stream the elements of a top-level JSON array without loading the file.

    The standard library's `raw_decode` parses one element at a time out of a sliding text
    buffer; the buffer grows only while an element is incomplete. An element that is not
    valid JSON ends the file (there is no way to find the next element reliably), so it
    becomes one error row saying so.
    """
    with path.open("r", encoding="utf-8") as f:
        buffer = ""
        pos = 0
        eof = False

        def fill() -> bool:
            nonlocal buffer, pos, eof
            if eof:
                return False
            chunk = f.read(max(_CHUNK, len(buffer) - pos))  # double the window for big elements
            if not chunk:
                eof = True
                return False
            buffer = buffer[pos:] + chunk
            pos = 0
            return True

        def skip_space() -> str | None:
            nonlocal pos
            while True:
                while pos < len(buffer) and buffer[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buffer):
                    return buffer[pos]
                if not fill():
                    return None

        first = skip_space()
        if first is None:
            yield SourceRow(1, error=f"{path.name} is empty; expected a JSON array of rows")
            return
        if first.startswith("\ufeff"):
            pos += 1
            first = skip_space()
        if first != "[":
            yield SourceRow(1, error=f"{path.name} is not a JSON array (starts with {first!r}); "
                                     "use a .jsonl file for one row per line")
            return
        pos += 1
        number = 0
        expect_comma = False
        while True:
            char = skip_space()
            if char is None:
                yield SourceRow(number + 1, error=f"{path.name} ends before the array is closed; the file is truncated")
                return
            if char == "]":
                pos += 1
                if skip_space() is not None:
                    yield SourceRow(number + 1, error=f"{path.name} has data after the closing ']'")
                return
            if expect_comma:
                if char != ",":
                    yield SourceRow(number + 1, error=f"{path.name}: expected ',' or ']' after element {number}, "
                                                      f"found {char!r}; the rest of the file cannot be read")
                    return
                pos += 1
                if skip_space() is None:
                    yield SourceRow(number + 1, error=f"{path.name} ends before the array is closed; the file is truncated")
                    return
            number += 1
            while True:
                try:
                    value, end = _DECODER.raw_decode(buffer, pos)
                except ValueError as exc:
                    # Incomplete at the end of the buffer: read more and try again.
                    if fill():
                        continue
                    yield SourceRow(number, error=f"element {number} of {path.name} is not valid JSON ({exc}); "
                                                  "the rest of the file cannot be read")
                    return
                # A number at the buffer's edge may continue in the next chunk.
                if end == len(buffer) and not eof and fill():
                    continue
                break
            pos = end
            expect_comma = True
            yield SourceRow(number, value)


# --- CSV --------------------------------------------------------------------------------------


def _decode_columns(record: dict[str, Any], position: int, *, strings_only: bool) -> SourceRow:
    """Decode the JSON text columns of a tabular record; empty cells mean absent."""
    row: dict[str, Any] = {}
    for key, value in record.items():
        if key is None:  # csv: more cells than header names
            return SourceRow(position, error=f"record {position} has more cells than the header has columns")
        if key in JSON_COLUMNS and isinstance(value, str):
            if not value.strip():
                continue
            try:
                value = parse_json(value)
            except ValueError as exc:
                return SourceRow(position, error=f"record {position}: column {key!r} is not valid JSON: {exc}")
        elif key in JSON_COLUMNS and value is None:
            continue
        elif not strings_only and key == "id" and value is None:
            continue
        row[key] = value
    if strings_only and row.get("id") == "":
        del row["id"]
    return SourceRow(position, row)


def _read_csv(path: Path) -> Iterator[SourceRow]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # tool specs make long cells
    with path.open("r", encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            return
        if not any(name in reader.fieldnames for name in ("call", "tool_calls")):
            yield SourceRow(1, error=f"{path.name}: no 'call' or 'tool_calls' column; "
                                     f"the header has {reader.fieldnames}")
            return
        for number, record in enumerate(reader, start=1):
            yield _decode_columns(record, number, strings_only=True)


# --- Parquet ----------------------------------------------------------------------------------


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError('reading Parquet needs pyarrow: pip install "reflection[parquet]"') from None
    return pq


def _read_parquet(path: Path, batch_size: int = 1024) -> Iterator[SourceRow]:
    """Record batches of `batch_size` rows; columns may hold JSON text or nested values."""
    pq = _pyarrow_parquet()
    number = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
        for record in batch.to_pylist():
            number += 1
            yield _decode_columns(record, number, strings_only=False)
