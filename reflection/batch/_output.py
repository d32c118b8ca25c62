"""The output file: append-only JSON Lines that survive a crash and can be resumed.

Each row is appended as one complete line by one unbuffered `os.write` (looping only on a
short write), so a kill -9 loses at most the rows still in flight and can only leave the
last line partial. On open, that partial line is cut off and the ids already written are
read back, so a rerun skips them. The file is fsynced every `fsync_rows` rows or
`fsync_seconds` seconds, and on close, which bounds what a power loss can take.

Rows whose judge failed (`judge_failed`) can be asked again: `drop()` removes them before the
run appends their new rows, by writing the rest to a temporary file beside the output and
renaming it over the output (atomic: a crash leaves either the old file or the new one, and
never an id twice). That is the only time a written row changes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from reflection._json import dumps, parse_json

__all__ = ["OutputCorrupt", "OutputFile", "iter_output_rows", "judge_failed"]


class OutputCorrupt(ValueError):
    """The output file has a line in the middle that is not a result row."""


def _row(line: bytes) -> dict[str, Any] | None:
    """A written row, or None when the line is not a JSON object with an id."""
    try:
        row = parse_json(line)
    except ValueError:
        return None
    if not isinstance(row, dict) or not isinstance(row.get("id"), str):
        return None
    return row


def judge_failed(row: dict[str, Any]) -> bool:
    """Whether a result row lacks its verdict only because the judge failed: `overall_valid`
    is null and a judge check ended in `error` (after its retries). Error rows (bad input) and
    uncertain verdicts are not judge failures: asking again would not change them."""
    if "error" in row or row.get("overall_valid") is not None:
        return False
    return any(isinstance(check, dict) and check.get("status") == "error"
               for result in row.get("results") or () if isinstance(result, dict)
               for check in (result.get("semantic") or {}).values())


class OutputFile:
    """An output JSON Lines file opened for appending, with the ids it already holds."""

    def __init__(self, path: str | Path, *, fsync_rows: int = 1000, fsync_seconds: float = 2.0,
                 retry: Callable[[dict[str, Any]], bool] | None = None):
        self.path = Path(path)
        self.fsync_rows = fsync_rows
        self.fsync_seconds = fsync_seconds
        self.retry = retry
        self.existing_ids: set[str] = set()
        self.retry_ids: set[str] = set()
        """Ids of written rows for which `retry(row)` is true (see `drop`)."""
        self.truncated_bytes = 0
        """Bytes of a partial last line removed on open (a previous run was killed mid-write)."""
        self.written = 0
        self._fd: int | None = None
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def __enter__(self) -> OutputFile:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> set[str]:
        """Read back the ids already written, cut a partial last line, and open for append."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keep = self._scan() if self.path.exists() else 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        if keep < size:
            os.ftruncate(self._fd, keep)
            os.fsync(self._fd)
            self.truncated_bytes = size - keep
        return self.existing_ids

    def _scan(self) -> int:
        """Collect ids; return the byte length of the good prefix (everything but a bad last line)."""
        offset = 0
        bad: tuple[int, int] | None = None  # (line number, offset) of an unreadable line
        with self.path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                if bad is not None and line.strip():
                    raise OutputCorrupt(
                        f"{self.path}: line {bad[0]} is not a result row, and it is not the last line; "
                        "this file was not written by `reflection batch` alone. Fix or remove that line, "
                        "or choose another output file."
                    )
                if line.strip():
                    row = _row(line) if line.endswith(b"\n") else None
                    if row is None:
                        bad = (number, offset)
                    else:
                        self.existing_ids.add(row["id"])
                        if self.retry is not None and self.retry(row):
                            self.retry_ids.add(row["id"])
                offset += len(line)
        return bad[1] if bad is not None else offset

    def drop(self, ids: Collection[str]) -> int:
        """Remove the rows with these ids (among `retry_ids`) so they can be written again;
        returns how many were removed. Atomic: the rest goes to a temporary file beside the
        output (a symlink's target), which then replaces it."""
        ids = {rid for rid in ids if rid in self.retry_ids}
        if not ids:
            return 0
        if self._fd is None:
            raise RuntimeError("OutputFile.drop before open()")
        self.close()
        target = self.path.resolve()
        temp = target.with_name(f".{target.name}.rewrite")
        removed = 0
        try:
            with target.open("rb") as src, temp.open("wb") as dst:
                for line in src:
                    row = _row(line) if line.strip() else None
                    if row is not None and row["id"] in ids and self.retry is not None and self.retry(row):
                        removed += 1
                        continue
                    dst.write(line)
                dst.flush()
                os.fsync(dst.fileno())
            os.chmod(temp, os.stat(target).st_mode & 0o7777)
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power loss
        finally:
            os.close(directory)
        self.existing_ids -= ids
        self.retry_ids -= ids
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        return removed

    def write(self, row: dict[str, Any]) -> None:
        """Append one row as one line."""
        self.write_line((dumps(row) + "\n").encode())

    def write_line(self, data: bytes) -> None:
        """Append one row already serialised: its JSON text and the newline (the worker
        processes of `--workers` serialise rows themselves)."""
        if self._fd is None:
            raise RuntimeError("OutputFile.write_line before open()")
        view = memoryview(data)
        while view:
            done = os.write(self._fd, view)
            view = view[done:]
        self.written += 1
        self._unsynced += 1
        if self._unsynced >= self.fsync_rows or time.monotonic() - self._last_sync >= self.fsync_seconds:
            self.sync()

    def sync(self) -> None:
        """fsync what was written so far."""
        if self._fd is not None and self._unsynced:
            os.fsync(self._fd)
        self._unsynced = 0
        self._last_sync = time.monotonic()

    def close(self) -> None:
        """fsync and close (idempotent)."""
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None


def iter_output_rows(path: str | Path) -> Any:
    """Stream the rows of an output file; a partial last line (a killed run) is ignored."""
    path = Path(path)
    with path.open("rb") as f:
        pending: tuple[int, str] | None = None
        for number, line in enumerate(f, start=1):
            if pending is not None and line.strip():
                raise OutputCorrupt(f"{path}: line {pending[0]} is not valid JSON ({pending[1]})")
            if not line.strip():
                continue
            try:
                row = parse_json(line)
            except ValueError as exc:
                pending = (number, str(exc))
                continue
            if isinstance(row, dict):
                yield row
