"""Dataset readers: JSON Lines, JSON arrays, CSV with JSON columns, and Parquet.

Every reader streams: it yields one `SourceRow` at a time and holds at most one record
(or one Parquet record batch) in memory, whatever the file size; a JSON Lines or CSV line
longer than `max_line_bytes` is skipped without being held. A record that cannot be read
(not JSON, not UTF-8, too long) becomes a `SourceRow` carrying an `error`, which the runner
writes as an error row, and reading goes on with the next record.

Rows without an `id` are named `line-N` by their 1-based position: the line for JSON
Lines, the element for a JSON array, the record for CSV and Parquet.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflection._json import JSONTooDeep, parse_json
from reflection.config import DEFAULT_MAX_LINE_BYTES
from reflection.rows import parse_line

__all__ = [
    "FORMATS",
    "SourceRow",
    "check_input",
    "count_rows",
    "decode_columns",
    "detect_format",
    "jsonl_lines",
    "jsonl_row",
    "read_source",
]

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
_BOM = codecs.BOM_UTF8


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


def check_input(path: Path) -> None:
    """Raise a clear error unless `path` can be read as a dataset: a regular file or a pipe
    (FIFO), not a directory or a device."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(2, "input file not found", str(path)) from None
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "is a directory; give a dataset file", str(path))
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        kind = "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
        raise ValueError(f"{path} is {kind}; give a dataset file (or a pipe)")


def read_source(
    path: str | Path, fmt: str | None = None, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[SourceRow]:
    """Stream the records of a dataset file (format from the extension unless `fmt` is given).

    Lines longer than `max_line_bytes` (JSON Lines, CSV) become error rows. Raises at once,
    before any row, when the file cannot be read at all (see `check_input`).
    """
    path = Path(path)
    fmt = fmt or detect_format(path)
    by_line = {"jsonl": _read_jsonl, "csv": _read_csv}  # bounded in line length
    whole = {"json": _read_json_array, "parquet": _read_parquet}
    if fmt not in by_line and fmt not in whole:
        raise ValueError(f"unknown input format {fmt!r}; use one of {sorted([*by_line, *whole])}")
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
    check_input(path)
    if fmt in by_line:
        return by_line[fmt](path, max_line_bytes)
    return whole[fmt](path)


def count_rows(path: str | Path, fmt: str | None = None) -> int | None:
    """A cheap row count for progress and ETA, or None when it would cost a parse.

    JSON Lines: non-blank lines. CSV: non-blank lines minus the header (an estimate when
    quoted fields span lines). Parquet: the footer's row count. JSON arrays, and pipes (which
    can be read only once): None. Memory stays bounded whatever the line lengths.
    """
    path = Path(path)
    fmt = fmt or detect_format(path)
    if not path.is_file():
        return None
    if fmt in ("jsonl", "csv"):
        rows = 0
        blank = True  # whether the line read so far holds only whitespace
        with path.open("rb") as f:
            for piece in iter(lambda: f.readline(_CHUNK), b""):  # a long line comes in pieces
                blank = blank and not piece.strip()
                if piece.endswith(b"\n"):
                    rows += not blank
                    blank = True
        rows += 0 if blank else 1  # a last line without a newline
        return max(0, rows - 1) if fmt == "csv" else rows
    if fmt == "parquet":
        pq = _pyarrow_parquet()
        return pq.ParquetFile(path).metadata.num_rows
    return None


# --- JSON Lines ---------------------------------------------------------------------------------


class _LineTooLong(Exception):
    def __init__(self, number: int, size: int, limit: int):
        super().__init__(
            f"line {number} is longer than the {limit:,}-byte limit (max_line_bytes): {size:,} bytes; it was skipped"
        )


def _bounded_lines(f: io.BufferedIOBase, limit: int) -> Iterator[tuple[int, bytes | _LineTooLong]]:
    """(line number, line) for each line, its newline kept; a line over `limit` bytes (newline
    excluded) is read past, never held, and comes as a `_LineTooLong` instead.

    Lines are cut out of blocks of up to `_CHUNK` bytes (what one read gives: a pipe is not
    waited on), which costs a fraction of a `readline` per line; a line a block cuts is carried
    to the next, at most `limit` bytes of it."""
    number = 0
    carried = b""  # the start of a line the previous block cut off
    skipped = -1  # while reading past a too-long line: its bytes so far
    while block := f.read1(_CHUNK):
        start = 0
        while (end := block.find(b"\n", start)) >= 0:
            number += 1
            if skipped >= 0:
                yield number, _LineTooLong(number, skipped + end - start, limit)
                skipped = -1
            elif carried:
                line, carried = carried + block[start : end + 1], b""
                yield number, line if len(line) <= limit + 1 else _LineTooLong(number, len(line) - 1, limit)
            elif end - start > limit:
                yield number, _LineTooLong(number, end - start, limit)
            else:
                yield number, block[start : end + 1]
            start = end + 1
        rest = len(block) - start
        if skipped >= 0:
            skipped += rest
        elif len(carried) + rest > limit:
            skipped, carried = len(carried) + rest, b""
        elif rest:
            carried += block[start:]
    if skipped >= 0:
        yield number + 1, _LineTooLong(number + 1, skipped, limit)
    elif carried:  # a last line without a newline
        yield number + 1, carried


def _not_utf8(line: bytes, where: str) -> str | None:
    """Why `line` is not UTF-8 text, or None when it is."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"{where} is not valid UTF-8 (byte 0x{line[exc.start]:02x} at byte {exc.start + 1} of the line); "
            "save the file as UTF-8"
        )
    return None


def jsonl_lines(path: str | Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | str]]:
    """The lines of a JSON Lines file, unparsed: (line number, line) for each, or (line number,
    the error message) for a line over `max_line_bytes`, which is read past, never held.
    `jsonl_row` turns each into what `read_source` yields; `--workers` parses them in the
    worker processes. Raises at once as `read_source` does."""
    path = Path(path)
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be at least 1, got {max_line_bytes}")
    check_input(path)
    return _jsonl_lines(path, max_line_bytes)


def _jsonl_lines(path: Path, max_line_bytes: int) -> Iterator[tuple[int, bytes | str]]:
    with path.open("rb") as f:
        for number, line in _bounded_lines(f, max_line_bytes):
            yield number, str(line) if isinstance(line, _LineTooLong) else line


def jsonl_row(number: int, line: bytes | str) -> SourceRow | None:
    """The record of one item of `jsonl_lines`: parsed, or carrying why it cannot be read;
    None for a blank line."""
    if isinstance(line, str):
        return SourceRow(number, error=line)
    if line.startswith(_BOM):  # editors write one at the start of a file; files get concatenated
        line = line[len(_BOM) :]
    if not line or line.isspace():  # `not line.strip()`, without copying the line
        return None
    try:
        return SourceRow(number, parse_line(line))
    except ValueError as exc:
        return SourceRow(number, error=_not_utf8(line, f"line {number}") or f"line {number} is not valid JSON: {exc}")


def _read_jsonl(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[SourceRow]:
    for number, line in _jsonl_lines(path, max_line_bytes):
        if (row := jsonl_row(number, line)) is not None:
            yield row


# --- JSON array -------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _read_json_array(path: Path) -> Iterator[SourceRow]:
    """Stream the elements of a top-level JSON array without loading the file.

    The standard library's `raw_decode` parses one element at a time out of a sliding text
    buffer; the buffer grows only while an element is incomplete. An element that is not
    valid JSON ends the file (there is no way to find the next element reliably), so it
    becomes one error row saying so. An element with bytes that are not UTF-8, or with a
    `\\ud800`-style escape that is not a character, is an error row (named by its id only when
    the id can be written), and reading goes on. An element nesting deeper than the decoder
    goes is read as the same JSON Lines row would be (`rows.parse_line`).
    """
    # Bytes that are not UTF-8 decode to lone surrogates (surrogateescape) so the element's
    # extent is still found; a valid UTF-8 file never decodes to one.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    with path.open("rb") as f:
        buffer = ""
        pos = 0
        eof = False

        def fill() -> bool:
            nonlocal buffer, pos, eof
            if eof:
                return False
            data = f.read(max(_CHUNK, len(buffer) - pos))  # double the window for big elements
            chunk = decoder.decode(data, final=not data)
            if not data:
                eof = True
                if not chunk:
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
            yield SourceRow(
                1,
                error=f"{path.name} is not a JSON array (starts with {first!r}); "
                "use a .jsonl file for one row per line",
            )
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
                    yield SourceRow(
                        number + 1,
                        error=f"{path.name}: expected ',' or ']' after element {number}, "
                        f"found {char!r}; the rest of the file cannot be read",
                    )
                    return
                pos += 1
                if skip_space() is None:
                    yield SourceRow(
                        number + 1, error=f"{path.name} ends before the array is closed; the file is truncated"
                    )
                    return
            number += 1
            while True:
                try:
                    value, end = _DECODER.raw_decode(buffer, pos)
                except RecursionError:
                    # Nesting deeper than the stdlib decoder goes: find the element's end without
                    # recursing, then read it as a JSON Lines row is read (deep members stay text).
                    found = _nested_end(buffer, pos)
                    if found is None and fill():
                        continue
                    if found is None:
                        yield SourceRow(
                            number, error=f"{path.name} ends before the array is closed; the file is truncated"
                        )
                        return
                    value, end = _DEEP, found
                except ValueError as exc:
                    # Incomplete at the end of the buffer: read more and try again.
                    if fill():
                        continue
                    yield SourceRow(
                        number,
                        error=f"element {number} of {path.name} is not valid JSON ({exc}); "
                        "the rest of the file cannot be read",
                    )
                    return
                # A number at the buffer's edge may continue in the next chunk.
                if end == len(buffer) and not eof and fill():
                    continue
                break
            text, pos = buffer[pos:end], end
            expect_comma = True
            problem = _bad_text(text, f"element {number} of {path.name}") if _SUSPECT.search(text) else None
            if problem is not None:
                yield SourceRow(number, _named(value), error=problem)
                continue
            if value is _DEEP:
                try:
                    value = parse_line(text.encode())
                except ValueError as exc:
                    yield SourceRow(number, error=f"element {number} of {path.name} cannot be read: {exc}")
                    continue
            yield SourceRow(number, value)


_DEEP: Any = object()
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*(")?|[\[\]{}]')
"""A string (its closing quote in group 1: none when the text ends first), or a bracket."""


def _nested_end(text: str, pos: int) -> int | None:
    """Where the array or object starting at `text[pos]` ends, found without recursion (strings
    skipped whole); None when the text ends first."""
    depth = 0
    for match in _NESTING.finditer(text, pos):
        token = match.group()
        if token[0] == '"':
            if match.group(1) is None:
                return None  # a string cut off by the end of the text
            continue
        depth += 1 if token in "[{" else -1
        if depth == 0:
            return match.end()
    return None


def _named(value: Any) -> Any:
    """An unreadable element reduced to what names its error row: its id, when that can be written."""
    rid = value.get("id") if isinstance(value, dict) else None
    try:
        str(rid).encode()
    except UnicodeEncodeError:
        return None
    return {"id": rid}


_SUSPECT = re.compile(r"[\udc80-\udcff]|\\u[dD][89a-fA-F]")
"""Undecodable bytes, or an escape of a surrogate: only then is an element checked closely."""


def _bad_text(text: str, where: str) -> str | None:
    """Why the JSON text of one element cannot be used, or None: bytes that are not UTF-8, or a
    surrogate escape that is not part of a pair (such a string cannot be written back)."""
    match = re.search("[\udc80-\udcff]", text)
    if match:
        raw = text.encode("utf-8", "surrogateescape")
        return _not_utf8(raw, where)
    try:
        parse_json(text)  # the strict parser rejects lone surrogates, as for JSON Lines
    except ValueError as exc:
        return f"{where} is not valid JSON: {exc}"
    return None


# --- CSV --------------------------------------------------------------------------------------


def decode_columns(record: dict[str, Any], position: int, *, strings_only: bool) -> SourceRow:
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
            except JSONTooDeep:
                value = value.encode()  # as in a JSON Lines row: left as text, its reader reports it
            except ValueError as exc:
                rid = record.get("id")
                named = {"id": rid} if rid not in (None, "") else None  # the error row keeps the record's id
                return SourceRow(position, named, error=f"record {position}: column {key!r} is not valid JSON: {exc}")
        elif (key in JSON_COLUMNS and value is None) or (not strings_only and key == "id" and value is None):
            continue
        row[key] = value
    if strings_only and row.get("id") == "":
        del row["id"]
    return SourceRow(position, row)


class _BadLine(Exception):
    """A CSV line that cannot be read (too long, not UTF-8); raised by `_CsvLines.__next__`."""


class _CsvLines:
    """The text lines of a CSV file for `csv.reader`: bounded in length, decoded one by one.

    A bad line raises `_BadLine` out of the reader's `next()`; the next call goes on with the
    following line, so one bad record does not end the file.
    """

    def __init__(self, f: io.BufferedIOBase, limit: int):
        self._lines = _bounded_lines(f, limit)
        self.number = 0

    def __iter__(self) -> _CsvLines:
        return self

    def __next__(self) -> str:
        self.number, line = next(self._lines)
        if isinstance(line, _LineTooLong):
            raise _BadLine(str(line))
        if self.number == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        try:
            return line.decode("utf-8")
        except UnicodeDecodeError:
            raise _BadLine(_not_utf8(line, f"line {self.number}")) from None


def _read_csv(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[SourceRow]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # tool specs make long cells
    with path.open("rb") as f:
        lines = _CsvLines(f, max_line_bytes)
        try:
            reader = csv.DictReader(lines)
            fieldnames = reader.fieldnames
        except (_BadLine, csv.Error) as exc:
            yield SourceRow(1, error=f"{path.name}: the header cannot be read: {exc}")
            return
        if fieldnames is None:
            return
        if not any(name in fieldnames for name in ("call", "tool_calls")):
            yield SourceRow(1, error=f"{path.name}: no 'call' or 'tool_calls' column; the header has {fieldnames}")
            return
        number = 0
        while True:
            try:
                record = next(reader)
            except StopIteration:
                return
            except (_BadLine, csv.Error) as exc:
                number += 1
                yield SourceRow(number, error=f"record {number}: {exc}")
                continue
            number += 1
            yield decode_columns(record, number, strings_only=True)


# --- Parquet ----------------------------------------------------------------------------------


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError('reading Parquet needs pyarrow: pip install "toolcall-reflection[parquet]"') from None
    return pq


def _read_parquet(path: Path, batch_size: int = 1024) -> Iterator[SourceRow]:
    """Record batches of `batch_size` rows; columns may hold JSON text or nested values."""
    pq = _pyarrow_parquet()
    number = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
        for record in batch.to_pylist():
            number += 1
            yield decode_columns(record, number, strings_only=False)
